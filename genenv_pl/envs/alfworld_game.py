"""ALFWorld games: discovery, walkthrough replay into single steps (cached), episode play.

Games are TextWorld PDDL files `<root>/json_2.1.1/<split>/<task dir>/<trial>/game.tw-pddl`, played
offline with `textworld` (PddlEnv, which needs `fast_downward`) and ALFWorld's name demangler.
Those packages are imported only when a game has to be played, so cached steps, parsing and
scoring work without them.

Steps. Replaying a walkthrough in the real engine gives, before each expert action, the exact
text an agent would have seen (intro, feedback of every earlier action) and the engine's
admissible commands. One step = that state + the expert action (the gold). Replay is slow
(~1-3 s per game, mostly the PDDL->SAS translation), so each game's steps are cached as JSON
under `cache_dir`, keyed by the sha256 of the game file and `EXTRACTOR_VERSION`; editing a game
file or this extractor invalidates only the affected entries.

Bad input. A game that fails to read, load, or replay (invalid JSON, an engine error, a
walkthrough action the engine does not admit, a walkthrough that does not win) is skipped and
recorded in `ExtractReport.skipped` as (game key, reason); it never aborts the others.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from genenv_pl.envs.alfworld_grammar import agent_messages, canonical_action, parse_agent_output
from genenv_pl.envs.base import Message

log = logging.getLogger(__name__)

GAMES_DIR = "json_2.1.1"
GAME_FILE = "game.tw-pddl"
GAME_PATTERN = f"*/*/{GAME_FILE}"  # the game files of a split folder: <task dir>/<trial>/game.tw-pddl
EXTRACTOR_VERSION = "1"  # bump when the cached step format or extraction changes
TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
INSTALL_HINT = (
    "ALFWorld games need the `textworld`, `alfworld` and `fast-downward-textworld` packages: "
    "pip install --no-deps alfworld==0.4.2 textworld==1.7.0 tatsu==5.8.3 mementos jericho termcolor "
    "fast-downward-textworld==20.6.4 (the last builds a C++ library: needs cmake and g++)."
)
_TASK_RE = re.compile(r"your task is to:\s*(.+)", re.IGNORECASE)
_BANNER_RE = re.compile(r"-=\s*welcome to textworld, alfred!\s*=-", re.IGNORECASE)


@dataclass(frozen=True)
class GameRef:
    """One game file. `key` ("split/task dir/trial") identifies it on every machine."""

    split: str
    task_dir: str
    trial: str
    path: str

    @property
    def key(self) -> str:
        return f"{self.split}/{self.task_dir}/{self.trial}"

    @property
    def task_type(self) -> str:
        return self.task_dir.split("-", 1)[0]


@dataclass
class ExtractReport:
    """Steps per game key, plus the games that could not be used (key, reason)."""

    steps: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    cache_hits: int = 0

    @property
    def num_skipped(self) -> int:
        return len(self.skipped)


def list_games(games_root: str, splits: Iterable[str]) -> list[GameRef]:
    """All game files of `splits` under `<games_root>/json_2.1.1/`, sorted by key."""
    games: list[GameRef] = []
    for split in splits:
        split_dir = Path(games_root) / GAMES_DIR / split
        if not split_dir.is_dir():
            continue
        for path in split_dir.glob(GAME_PATTERN):
            games.append(GameRef(split, path.parent.parent.name, path.parent.name, str(path)))
    return sorted(games, key=lambda g: g.key)


def default_cache_dir() -> str:
    base = os.environ.get("GENENV_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "genenv_pl"
    )
    return os.path.join(base, "alfworld")


# ---- the engine ----------------------------------------------------------------------------
def open_game(path: str, memo: dict | None = None) -> tuple[Any, Any]:
    """(textworld environment, state after reset) for one game file. `memo`: a dict kept by the caller
    to reuse PDDL translations across starts of the same games (see `_engine_quirks_patched`)."""
    try:
        import fast_downward
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler
    except ImportError as e:  # a setup problem, not a bad game: say how to fix it
        raise ImportError(f"{e}. {INSTALL_HINT}") from e
    infos = textworld.EnvInfos(won=True, admissible_commands=True)
    env = None
    with _engine_quirks_patched(fast_downward, memo):
        try:
            # AlfredDemangler turns PDDL ids ("Apple_bar__plus_01...") into "apple 1", as ALFWorld does.
            env = textworld.start(path, infos, wrappers=[AlfredDemangler()])
            return env, env.reset()
        except BaseException:
            if env is not None:
                env.close()
            raise


@contextmanager
def _engine_quirks_patched(fast_downward: Any, memo: dict | None = None) -> Iterator[None]:
    """Work around two quirks of the engine while a game loads.

    `fast_downward.pddl2sas` overwrites `sys.argv` (a hack for its option parser): restored here so
    a caller's command line survives. textworld translates the same PDDL problem in `load()` and
    again in `reset()`: a memo scoped to this one game start halves the load time. The memoized
    values (a parsed task and SAS text) are only read by textworld, so a caller that starts the same
    games again and again (the step checker) may pass its own `memo` to keep them across starts.
    """
    original, argv = fast_downward.pddl2sas, sys.argv
    memo = {} if memo is None else memo

    def pddl2sas(domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        key = (domain, problem, optimize)
        if key not in memo:
            memo[key] = original(domain, problem, verbose=verbose, optimize=optimize)
        return memo[key]

    fast_downward.pddl2sas = pddl2sas
    try:
        yield
    finally:
        fast_downward.pddl2sas = original
        sys.argv = argv


def split_intro(feedback: str) -> tuple[str, str]:
    """(task sentence without "Your task is to:", room description) from the reset text."""
    m = _TASK_RE.search(feedback)
    if not m:
        raise ValueError("no 'Your task is to:' sentence in the intro")
    room = _BANNER_RE.sub("", feedback[: m.start()]).strip()
    return m.group(1).strip(), room


def replay_walkthrough(path: str, walkthrough: list[str]) -> list[dict[str, Any]]:
    """Play the expert walkthrough; one step dict per expert action. Raises on any mismatch."""
    env, state = open_game(path)
    try:
        task, observation = split_intro(state.feedback)
        history: list[dict[str, str]] = []
        steps: list[dict[str, Any]] = []
        for i, action in enumerate(walkthrough):
            admissible = list(state["admissible_commands"])
            if action not in admissible:
                raise ValueError(f"walkthrough action {i} {action!r} is not admissible")
            steps.append(
                {"task": task, "observation": observation, "history": [dict(h) for h in history],
                 "admissible_commands": admissible, "gold": action}
            )
            state, _, _ = env.step(action)
            history.append({"action": action, "observation": state.feedback.strip()})
            if state["won"]:
                break  # a walkthrough that wins early: later actions are not expert steps
        if not state["won"]:
            raise ValueError("walkthrough replay did not win the game")
        return steps
    finally:
        env.close()


# ---- extraction with cache --------------------------------------------------------------------
def extract_steps(games: list[GameRef], cache_dir: str | None = None) -> ExtractReport:
    """Steps of every usable game in `games` (cached); failures are skipped and reported."""
    cache = Path(cache_dir or default_cache_dir()) / f"steps-v{EXTRACTOR_VERSION}"
    report = ExtractReport()
    for game in games:
        try:
            raw = Path(game.path).read_bytes()
            digest = hashlib.sha256(raw).hexdigest()
            entry = cache / f"{digest}.json"
            cached = _read_cache(entry)
            if cached is not None:
                report.steps[game.key] = cached
                report.cache_hits += 1
                continue
            data = json.loads(raw)
            walkthrough = data.get("walkthrough") if isinstance(data, dict) else None
            if not walkthrough or not all(isinstance(a, str) for a in walkthrough):
                raise ValueError("no walkthrough")
            steps = replay_walkthrough(game.path, walkthrough)
        except ImportError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure of one game file is a skip, by design
            reason = _reason(e)
            log.warning("alfworld: skipping game %s (%s)", game.key, reason)
            report.skipped.append((game.key, reason))
            continue
        _write_atomic(entry, json.dumps(steps))
        report.steps[game.key] = steps
    return report


def _read_cache(entry: Path) -> list[dict[str, Any]] | None:
    """Cached steps, or None when absent or unreadable (then the game is simply replayed)."""
    try:
        steps = json.loads(entry.read_text())
    except (OSError, ValueError):
        return None
    return steps if isinstance(steps, list) else None


def _reason(e: BaseException) -> str:
    """One short line naming the failure (parser errors span several lines)."""
    return " ".join(f"{type(e).__name__}: {e}".split())[:300]


def _write_atomic(path: Path, text: str) -> None:
    """Write via a temp file + rename so that concurrent runs never read half a cache entry."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:  # a read-only cache only costs speed
        log.warning("alfworld: cannot write cache entry %s (%s)", path, e)


# ---- episode-level evaluation -----------------------------------------------------------------
BatchPolicy = Callable[[list[list[Message]]], list[str]]  # one raw reply per conversation


class GameLoadError(RuntimeError):
    """A game file that the engine cannot load or reset."""


@dataclass
class EpisodeResult:
    key: str
    task_type: str
    won: bool
    steps: int
    actions: list[str]
    format_errors: int = 0


@dataclass
class EpisodeReport:
    episodes: list[EpisodeResult]
    skipped: list[tuple[str, str]]

    @property
    def num_skipped(self) -> int:
        return len(self.skipped)

    def summary(self) -> dict[str, float]:
        """success_rate overall, per task type (`success_rate/<type>`) and per split, plus counts,
        mean steps and the share of replies without a well-formed `<response>` (format_error_rate)."""
        out: dict[str, float] = {"episodes": float(len(self.episodes)), "skipped": float(self.num_skipped)}
        buckets: dict[str, list[bool]] = {"": []}
        for ep in self.episodes:
            for name in ("", f"/{ep.task_type}", f"/{ep.key.split('/', 1)[0]}"):
                buckets.setdefault(name, []).append(ep.won)
        for name, wins in buckets.items():
            out[f"success_rate{name}"] = sum(wins) / len(wins) if wins else 0.0
            if name:  # per-bucket counts: a rate over 3 games reads differently from one over 30
                out[f"episodes{name}"] = float(len(wins))
        steps = sum(ep.steps for ep in self.episodes)
        out["mean_steps"] = steps / len(self.episodes) if self.episodes else 0.0
        out["format_error_rate"] = sum(ep.format_errors for ep in self.episodes) / steps if steps else 0.0
        return out


@dataclass
class _Playing:
    """One game in progress: its engine, the state the agent sees, and the running result."""
    env: Any
    state: Any
    task: str
    observation: str
    history: list[dict[str, str]]
    result: EpisodeResult

    def prompt(self, history_window: int | None) -> list[Message]:
        return agent_messages({"task": self.task, "observation": self.observation, "history": self.history,
                               "admissible_commands": list(self.state["admissible_commands"])}, history_window)

    def step(self, reply: str) -> None:
        """Send the command read from `reply`. A command outside the admissible list is still sent
        (the engine answers "Nothing happens.") and costs a step, as in ALFWorld."""
        action, well_formed = parse_agent_output(reply)
        self.result.format_errors += int(not well_formed)
        action = _engine_command(action, list(self.state["admissible_commands"]))
        self.state, _, _ = self.env.step(action)
        self.history.append({"action": action, "observation": self.state.feedback.strip()})
        self.result.actions.append(action)
        self.result.steps += 1


def _start(game: GameRef) -> _Playing:
    try:
        env, state = open_game(game.path)
    except ImportError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure to load is the game file's fault
        raise GameLoadError(_reason(e)) from e
    try:
        task, observation = split_intro(state.feedback)
    except ValueError as e:
        env.close()
        raise GameLoadError(str(e)) from e
    return _Playing(env, state, task, observation, [], EpisodeResult(game.key, game.task_type, False, 0, []))


def _engine_command(action: str, admissible: list[str]) -> str:
    """The admissible spelling of `action` when it has one (old "put X in/on Y" -> "move X to Y")."""
    if action in admissible:
        return action
    canon = canonical_action(action)
    by_canon = {canonical_action(c): c for c in admissible}
    # Unknown commands go through unchanged; the engine answers "Nothing happens."
    return by_canon.get(canon, action)


def evaluate_episodes(
    games: list[GameRef], act: BatchPolicy, max_steps: int = 50, history_window: int | None = None,
    batch_size: int = 1,
) -> EpisodeReport:
    """Let `act` play every game for at most `max_steps` commands; success = the engine's `won`.

    Up to `batch_size` games run in lockstep: each round is one `act` call with the prompts of every
    game still running (the same messages as a single-step agent task), since one batched decode
    costs little more than a single one; a game that ends frees its slot for the next. A game that
    fails to load is skipped and reported, never fatal; errors raised by `act` propagate (bugs).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    pending = list(enumerate(games))[::-1]
    playing: list[tuple[int, _Playing]] = []
    done: dict[int, EpisodeResult] = {}
    skipped: list[tuple[str, str]] = []
    try:
        while pending or playing:
            while pending and len(playing) < batch_size:
                i, game = pending.pop()
                try:
                    playing.append((i, _start(game)))
                except GameLoadError as e:
                    log.warning("alfworld: skipping episode %s (%s)", game.key, e)
                    skipped.append((game.key, str(e)))
            for i, p in playing:
                if _over(p, max_steps):
                    p.result.won = bool(p.state["won"])
                    p.env.close()
                    done[i] = p.result
                    log.info("alfworld: episode %d/%d %s: %s in %d steps", len(done), len(games), p.result.key,
                             "won" if p.result.won else "lost", p.result.steps)
            playing = [(i, p) for i, p in playing if i not in done]
            if not playing or (pending and len(playing) < batch_size):
                continue  # fill the freed slots first
            replies = act([p.prompt(history_window) for _, p in playing])
            if len(replies) != len(playing):
                raise ValueError(f"act returned {len(replies)} replies for {len(playing)} prompts")
            for (_, p), reply in zip(playing, replies):
                p.step(reply)
    finally:
        for _, p in playing:
            p.env.close()
    return EpisodeReport([done[i] for i in sorted(done)], skipped)


def _over(p: _Playing, max_steps: int) -> bool:
    return bool(p.state["won"]) or p.result.steps >= max_steps
