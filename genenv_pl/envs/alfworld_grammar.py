"""ALFWorld text side: the command grammar, action normalization, agent-output parsing, prompts.

Pure functions over strings; nothing here loads a game, so parsing and scoring work without
the `alfworld`/`textworld` packages.

Commands. ALFWorld names every object "<name> <number>" (one lowercase word and an index, e.g.
"desklamp 1", "sinkbasin 1"). The game files shipped here (alfworld >= 0.4 grammar) put an object
down with "move X to Y"; older ALFWorld (and ReAct-style prompts) said "put X in/on Y". Both
surface forms name the same PDDL action, so `canonical_action` maps the old form onto the new
one before comparing; everything else is compared verbatim after normalization.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from genenv_pl.envs.base import Message
from genenv_pl.envs.text_metrics import extract_tag, strip_tag_blocks

_MAX_PARSE_CHARS = 20_000  # agent text beyond this is ignored: bounded parsing cost
_OBJ = r"[a-z]+ \d+"  # one ALFWorld object mention, e.g. "alarmclock 2"
OBJECT_RE = re.compile(rf"\b({_OBJ})\b")

# verb -> pattern over a normalized command; the groups are the objects the command names.
_GRAMMAR: list[tuple[str, re.Pattern[str]]] = [
    (verb, re.compile(pattern))
    for verb, pattern in [
        ("go", rf"^go to ({_OBJ})$"),
        ("take", rf"^take ({_OBJ}) from ({_OBJ})$"),
        ("move", rf"^move ({_OBJ}) to ({_OBJ})$"),
        ("put", rf"^put ({_OBJ}) (?:in/on|in|on|into) ({_OBJ})$"),
        ("open", rf"^open ({_OBJ})$"),
        ("close", rf"^close ({_OBJ})$"),
        ("toggle", rf"^toggle ({_OBJ})$"),
        ("use", rf"^use ({_OBJ})$"),
        ("examine", rf"^examine ({_OBJ})$"),
        ("clean", rf"^clean ({_OBJ}) with ({_OBJ})$"),
        ("heat", rf"^heat ({_OBJ}) with ({_OBJ})$"),
        ("cool", rf"^cool ({_OBJ}) with ({_OBJ})$"),
        ("slice", rf"^slice ({_OBJ}) with ({_OBJ})$"),
        ("look", r"^look$"),
        ("inventory", r"^inventory$"),
        ("help", r"^help$"),
    ]
]
#: verbs a generated gold action may not use: "help" never advances a task.
NON_GOLD_VERBS = frozenset({"help"})
_PUT_ALIAS = re.compile(rf"^put ({_OBJ}) (?:in/on|in|on) ({_OBJ})$")


@dataclass(frozen=True)
class Command:
    verb: str
    objects: tuple[str, ...]


def normalize_action(text: str) -> str:
    """Lowercase, single spaces; drop wrapping quotes/backticks, a "> " prompt marker and a
    trailing period (models copy these from transcripts; they never change the command)."""
    text = " ".join((text or "").lower().split())
    text = text.strip("`\"' ")
    text = re.sub(r"^(?:>\s*|action\s*:\s*)", "", text)
    return text.rstrip(".!").strip()


def canonical_action(text: str) -> str:
    """Normalized action with the old "put X in/on Y" spelling rewritten to "move X to Y"."""
    action = normalize_action(text)
    m = _PUT_ALIAS.match(action)
    return f"move {m.group(1)} to {m.group(2)}" if m else action


def parse_command(text: str) -> Command | None:
    """The command's verb and object mentions, or None when it is outside the grammar."""
    action = normalize_action(text)
    for verb, pattern in _GRAMMAR:
        m = pattern.match(action)
        if m:
            return Command(verb, tuple(m.groups()))
    return None


def actions_match(prediction: str, gold: str) -> bool:
    """The step-level success test: canonical forms are identical."""
    pred = canonical_action(prediction)
    return bool(pred) and pred == canonical_action(gold)


def parse_agent_output(text: str) -> tuple[str, bool]:
    """(normalized action, well_formed). Never raises.

    The last `<response>...</response>` wins; inside it, the last non-empty line (models
    sometimes explain first). Without a closed response block: the text after an unclosed
    `<response>`, else the last non-empty line outside `<think>` blocks — a format error.
    """
    text = (text or "")[-_MAX_PARSE_CHARS:]
    resp = extract_tag(text, "response")
    if resp is not None:
        return _last_line(resp), True
    opened = re.search(r"<response>(.*)$", text, flags=re.DOTALL | re.IGNORECASE)
    body = opened.group(1) if opened else strip_tag_blocks(text, "think")
    return _last_line(re.sub(r"</?\w+>", " ", body)), False


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return normalize_action(lines[-1]) if lines else ""


def mentioned_objects(text: str) -> set[str]:
    """Every "<name> <number>" mention in a piece of game text (lowercased)."""
    return set(OBJECT_RE.findall(" ".join(text.lower().split())))


# ---- prompts -----------------------------------------------------------------------------
AGENT_SYSTEM = (
    "You are an agent in a household text game (ALFWorld). You get a task, the first "
    "observation, the actions taken so far with what happened, and usually the list of "
    "commands the game accepts now. Choose the single best next command.\n"
    "Commands: go to X, take X from Y, move X to Y, open X, close X, use X, examine X, "
    "clean X with Y, heat X with Y, cool X with Y, slice X with Y, look, inventory.\n"
    "Answer format: think briefly inside <think>...</think>, then write exactly one command, "
    "copied from the admissible list when there is one, inside <response>...</response>."
)


def render_state(state: dict, history_window: int | None = None) -> str:
    """The user turn for one decision step. `state` has task, observation, history
    (list of {"action", "observation"}) and optionally admissible_commands."""
    history = list(state.get("history") or [])
    lines = [f"Your task is to: {state['task']}", "", "Observation:", state["observation"].strip()]
    if history:
        shown = history[-history_window:] if history_window else history
        lines += ["", "Actions so far:"]
        if len(shown) < len(history):
            lines.append(f"({len(history) - len(shown)} earlier steps omitted)")
        for h in shown:
            lines += [f"> {h['action']}", h["observation"].strip()]
    admissible = state.get("admissible_commands")
    if admissible:
        lines += ["", "Admissible commands: " + ", ".join(admissible)]
    lines += ["", "What is your next command?"]
    return "\n".join(lines)


def agent_messages(state: dict, history_window: int | None = None) -> list[Message]:
    return [
        {"role": "system", "content": AGENT_SYSTEM},
        {"role": "user", "content": render_state(state, history_window)},
    ]
