"""API-Bank level-1 / level-2 as a GenEnv environment.

Data: `<data_root>/api-bank/lv1-lv2-samples/{level-1-given-desc,level-2-toolsearcher}/*.jsonl`
(one dialogue per file, one turn per line; see SOURCE.md) and `data/all_apis.csv` (descriptions).

Tasks follow upstream `evaluator.py`: one task per API turn of a dialogue, the history before it
as context, the API call as gold. Level-1 lists the descriptions of every API used in the
dialogue; level-2 lists only `ToolSearcher` (the agent must search first; the search results in
the history carry the found APIs' descriptions). History API turns are shown as the assistant's
`<tool_call>` followed by a user `<tool_response>` with the API output.

Tool descriptions: upstream reads them from its API classes, which are code and not shipped.
Here each API's schema comes, in order of preference, from a ToolSearcher result in the data
(the real description and parameters), else from `all_apis.csv` (description) with parameters
inferred from the gold calls in the data (names; types from the executed inputs). A parameter is
"required" when every gold call of that API gives it. The rule is deterministic and uses only
the shipped files.

Scoring: upstream executes the call on simulated APIs and compares input, output and exception
with the gold. We do not execute; the first call of the response is correct when its name equals
the gold API and its parameters equal the gold's executed input (`result.input`) after
normalization: strings that are JSON/Python literals become those values ("True" -> true,
"970420" -> 970420, "['a', 'b']" -> ["a", "b"]) and other strings are stripped. The APIs
convert their string arguments the same way, so this is what upstream's input comparison checks;
same input on the same database state gives the same output. No call, or an unreadable
`<tool_call>` block: accuracy 0, format_error 1.

Split: a dialogue (all its API turns together) goes to evaluation when
sha1(f"{split_seed}:{level}/{file name}") read as a number in [0, 1) is below `eval_fraction`.
Malformed files or records raise `DataError` naming the file and line.
"""
from __future__ import annotations

import ast
import csv
import glob
import hashlib
import json
import os
from typing import Any

from genenv_pl.envs.base import DataError, Environment, InvalidTask, Message, Task, read_jsonl, resolve_data_root
from genenv_pl.envs.prompting import check_sim_prompt
from genenv_pl.envs.toolcall import (
    ToolCall,
    ToolSchema,
    agent_system_prompt,
    loads_lenient,
    merge_consecutive,
    normalize_text,
    parse_generated_task,
    parse_response,
    render_calls,
    simulator_messages,
)

LEVEL_DIRS = {"level-1": "level-1-given-desc", "level-2": "level-2-toolsearcher"}
TOOL_SEARCHER: ToolSchema = {
    "name": "ToolSearcher",
    "description": "Searches for relevant tools in library based on the keywords.",
    "parameters": {"type": "dict", "properties": {
        "keywords": {"type": "string", "description": "The keyword to search for."}},
        "required": ["keywords"]},
}
PREAMBLE = ("You are an AI assistant talking with a user. Based on the API descriptions and the "
            "conversation so far, make the API call the AI should make next. This year is 2023.")
# API-Bank's parameter type names -> the shared (BFCL) vocabulary
_TYPES = {"str": "string", "int": "integer", "float": "float", "bool": "boolean", "list": "array",
          "List[str]": "array", "dict": "dict", "datetime": "string"}
_VALUE_TYPES = {str: "string", int: "integer", float: "float", bool: "boolean", list: "array", dict: "dict"}


def split_bucket(dialogue_id: str, split_seed: int) -> float:
    digest = hashlib.sha1(f"{split_seed}:{dialogue_id}".encode()).hexdigest()
    return int(digest[:15], 16) / 16**15


def canonical_value(v: Any) -> Any:
    """Compare values the way the APIs see them: literal strings parsed, other strings stripped."""
    if isinstance(v, str):
        s = v.strip()
        try:
            parsed = loads_lenient(s) if s else s
        except ValueError:
            return s
        return s if isinstance(parsed, str) and parsed == s else canonical_value(parsed)
    if isinstance(v, list):
        return [canonical_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): canonical_value(x) for k, x in v.items()}
    return v


def calls_equal(call: ToolCall, gold: ToolCall) -> bool:
    try:
        return call["name"] == gold["name"] and canonical_value(call["parameters"]) == canonical_value(gold["parameters"])
    except RecursionError:  # nested ~1000 deep: too deep to canonicalize, only an identical call matches
        try:
            return call == gold
        except RecursionError:
            return False


# =============================================================================================
# Data
# =============================================================================================

def _read_dialogue(path: str) -> list[dict[str, Any]]:
    turns = []
    for lineno, t in read_jsonl(path, "api-bank"):
        where = f"api-bank: {path}: line {lineno}"
        role = t.get("role")
        if role in ("User", "AI"):
            if not isinstance(t.get("text"), str):
                raise DataError(f"{where}: {role} turn without 'text'")
        elif role == "API":
            ok = (isinstance(t.get("api_name"), str) and isinstance(t.get("param_dict"), dict)
                  and isinstance(t.get("result"), dict))
            if not ok:
                raise DataError(f"{where}: API turn needs 'api_name', 'param_dict' and 'result'")
        else:
            raise DataError(f"{where}: unknown role {role!r}")
        turns.append(t)
    return turns


def _gold_of(turn: dict[str, Any]) -> ToolCall:
    executed = turn["result"].get("input")
    return {"name": turn["api_name"], "parameters": executed if isinstance(executed, dict) else turn["param_dict"]}


def _csv_descriptions(path: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """{API: (description, input_parameters)} from all_apis.csv. Its `api_info` cell is Python
    assignments; we read literal values from the syntax tree and skip cells that do not parse."""
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    if not os.path.isfile(path):
        return out
    with open(path, encoding="utf-8") as f:
        for row in csv.DictReader(f):
            name, info = row.get("类名"), row.get("api_info") or ""
            values: dict[str, Any] = {}
            try:
                for node in ast.parse(info).body:
                    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                        values[node.targets[0].id] = ast.literal_eval(node.value)
            except (SyntaxError, ValueError):
                continue
            if name and isinstance(values.get("description"), str):
                params = values.get("input_parameters")
                out[name] = (values["description"], params if isinstance(params, dict) else {})
    return out


def _schema(name: str, description: str, params: dict[str, dict[str, Any]], required: list[str]) -> ToolSchema:
    props = {p: {"type": _TYPES.get(str(s.get("type")), "any"), "description": str(s.get("description", ""))}
             for p, s in params.items()}
    return {"name": name, "description": description,
            "parameters": {"type": "dict", "properties": props, "required": [r for r in required if r in props]}}


def build_catalog(dialogues: list[list[dict[str, Any]]], csv_path: str) -> dict[str, ToolSchema]:
    """API schemas for every API used in `dialogues` (see the module docstring for the rule)."""
    searched: dict[str, dict[str, Any]] = {}
    used: dict[str, list[ToolCall]] = {}
    for turns in dialogues:
        for t in turns:
            if t["role"] != "API":
                continue
            used.setdefault(t["api_name"], []).append(_gold_of(t))
            output = t["result"].get("output")
            if t["api_name"] == "ToolSearcher":
                for found in output if isinstance(output, list) else [output]:
                    if isinstance(found, dict) and isinstance(found.get("input_parameters"), dict):
                        searched.setdefault(str(found.get("name")), found)
    described = _csv_descriptions(csv_path)
    catalog = {"ToolSearcher": TOOL_SEARCHER}
    for api, calls in sorted(used.items()):
        if api == "ToolSearcher":
            continue
        required = sorted(set.intersection(*(set(c["parameters"]) for c in calls)))
        if api in searched:
            s = searched[api]
            catalog[api] = _schema(api, str(s.get("description", "")), s["input_parameters"], required)
            continue
        description, csv_params = described.get(api, ("", {}))
        params: dict[str, dict[str, Any]] = {}
        for c in calls:
            for p, v in c["parameters"].items():
                if p not in params:
                    spec = csv_params.get(p) if isinstance(csv_params.get(p), dict) else {}
                    typ = _VALUE_TYPES.get(type(v), "any")
                    params[p] = {"type": typ, "description": str(spec.get("description", ""))}
        catalog[api] = {"name": api, "description": description,
                        "parameters": {"type": "dict", "properties": params, "required": required}}
    return catalog


class APIBankEnv(Environment):
    """API-Bank level-1 (call a given API) and level-2 (retrieve with ToolSearcher, then call)."""

    name = "api_bank"

    def __init__(
        self,
        data_root: str | None = None,
        levels: list[str] | None = None,
        eval_fraction: float = 0.5,
        split_seed: int = 0,
        max_seed_tools: int = 8,
        sim_prompt: str = "stats",
    ):
        """
        Args:
            data_root: folder that contains `api-bank/`; default: $GENENV_DATA_ROOT.
            levels: any of "level-1" (API descriptions given) and "level-2" (ToolSearcher);
                default both.
            eval_fraction: share of dialogues held out for evaluation (by hash of the dialogue id).
            split_seed: salt of the split hash; change it for a different split.
            max_seed_tools: most tool schemas shown to the simulator for one seed.
            sim_prompt: what the simulator's prompt says about the agent's success on the seed:
                "rule" (the rate and "make the new task harder" above 60%, "easier" below 40%) or
                "stats" (the rate alone); see genenv_pl/envs/prompting.py.
        """
        self.sim_prompt = check_sim_prompt(sim_prompt)
        self.root = resolve_data_root(data_root, "api-bank")
        self.levels = list(levels) if levels else list(LEVEL_DIRS)
        unknown = [lv for lv in self.levels if lv not in LEVEL_DIRS]
        if unknown:
            raise ValueError(f"unknown API-Bank levels {unknown}; known: {list(LEVEL_DIRS)}")
        if not 0.0 <= eval_fraction <= 1.0:
            raise ValueError("eval_fraction must be in [0, 1]")
        self.max_seed_tools = max_seed_tools
        loaded: list[tuple[str, str, list[dict[str, Any]]]] = []  # (level, dialogue id, turns)
        for level in self.levels:
            folder = os.path.join(self.root, "lv1-lv2-samples", LEVEL_DIRS[level])
            files = sorted(glob.glob(os.path.join(folder, "*.jsonl")))
            if not files:
                raise DataError(f"api-bank: no dialogues in {folder}")
            loaded += [(level, f"{level}/{os.path.basename(p)[:-6]}", _read_dialogue(p)) for p in files]
        self.catalog = build_catalog([turns for _, _, turns in loaded],
                                     os.path.join(self.root, "data", "all_apis.csv"))
        self._seed: list[Task] = []
        self._eval: list[Task] = []
        for level, dialogue_id, turns in loaded:
            held_out = split_bucket(dialogue_id, split_seed) < eval_fraction
            (self._eval if held_out else self._seed).extend(self._tasks(level, dialogue_id, turns))

    def _tasks(self, level: str, dialogue_id: str, turns: list[dict[str, Any]]) -> list[Task]:
        apis = sorted({t["api_name"] for t in turns if t["role"] == "API"})
        tools = [TOOL_SEARCHER] if level == "level-2" else [self.catalog[a] for a in apis]
        tasks = []
        for i, t in enumerate(turns):
            if t["role"] != "API":
                continue
            gold = _gold_of(t)
            data = {"level": level, "tools": tools, "messages": _history(turns[:i]), "gold": gold,
                    "gold_tool": self.catalog.get(gold["name"])}
            tasks.append(Task(id=f"{dialogue_id}/{i}", data=data, group=level,
                              difficulty=float(1 + len(gold["parameters"]))))
        return tasks

    # ---- data -------------------------------------------------------------------------------
    def seed_tasks(self) -> list[Task]:
        return list(self._seed)

    def eval_tasks(self) -> list[Task]:
        return list(self._eval)

    # ---- agent side -------------------------------------------------------------------------
    def agent_prompt(self, task: Task) -> list[Message]:
        system = agent_system_prompt(task.data["tools"], preamble=PREAMBLE)
        return merge_consecutive([{"role": "system", "content": system}, *task.data["messages"]])

    def reward(self, task: Task, response: str) -> float:
        return self.score(task, response)["accuracy"]

    def score(self, task: Task, response: str) -> dict[str, float]:
        parsed = parse_response(response)
        if parsed.format_error or not parsed.calls:
            return {"accuracy": 0.0, "format_error": 1.0}
        # upstream reads the first `[Api(...)]` in the output; we score the first call likewise
        return {"accuracy": float(calls_equal(parsed.calls[0], task.data["gold"])), "format_error": 0.0}

    # ---- simulator side ---------------------------------------------------------------------
    def _seed_tools(self, d: dict[str, Any]) -> list[ToolSchema]:
        tools = list(d["tools"])
        if d.get("gold_tool") and d["gold_tool"]["name"] not in {t["name"] for t in tools}:
            tools.append(d["gold_tool"])  # level-2: the found API's schema is in the history
        return tools

    def _seed_view(self, d: dict[str, Any]) -> dict[str, Any]:
        tools = self._seed_tools(d)
        keep = [t for t in tools if t["name"] == d["gold"]["name"]]
        keep += [t for t in tools if t["name"] != d["gold"]["name"]][: max(0, self.max_seed_tools - 1)]
        return {"question": _transcript(d["messages"]), "tools": keep, "calls": [d["gold"]]}

    def simulator_prompt(self, seed: Task, success_rate: float | None) -> list[Message]:
        note = ('Here "question" is the dialogue so far, one turn per line ("User: ...", "AI: ..."), '
                "ending where the AI must make exactly one API call; \"calls\" holds that one call.")
        return simulator_messages(self._seed_view(seed.data), success_rate, note, sim_prompt=self.sim_prompt)

    def parse_task(self, text: str, seed: Task) -> Task:
        gen = parse_generated_task(text, self._seed_tools(seed.data))
        if len(gen.calls) != 1:
            raise InvalidTask("call_count", "an API-Bank task has exactly one gold call")
        data = {"level": seed.data["level"], "tools": gen.tools, "messages": _from_transcript(gen.question),
                "gold": gen.calls[0], "gold_tool": next(t for t in gen.tools if t["name"] == gen.calls[0]["name"])}
        digest = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:12]
        return Task(id=f"{seed.id}/gen-{digest}", data=data, group=seed.group,
                    difficulty=float(1 + len(gen.calls[0]["parameters"])),
                    meta={"seed_id": seed.id, "generated": True})

    def task_key(self, task: Task) -> str:
        """Normalized dialogue text plus the gold API name (layout-independent duplicates)."""
        d = task.data
        return json.dumps({"dialogue": normalize_text(_transcript(d["messages"])), "api": d["gold"]["name"],
                           "tools": sorted(t["name"] for t in d["tools"])}, sort_keys=True)

    def warm_start_examples(self, role: str, n: int, seed: int) -> list[tuple[list[Message], str]]:
        """Agent: seed prompt -> gold call. Simulator: seed prompt -> another seed of the same level."""
        import random

        rng = random.Random(seed)
        if not self._seed:
            return []
        out = []
        for _ in range(n):
            task = rng.choice(self._seed)
            if role == "agent":
                out.append((self.agent_prompt(task), "<think>\n</think>\n" + render_calls([task.data["gold"]])))
            elif role == "simulator":
                other = rng.choice([t for t in self._seed if t.group == task.group])
                out.append((self.simulator_prompt(task, None), json.dumps(self._seed_view(other.data))))
            else:
                raise ValueError(f"unknown role {role!r}")
        return out


def _history(turns: list[dict[str, Any]]) -> list[Message]:
    """Dialogue turns as chat messages: API turns become a call plus a user-side tool response."""
    out: list[Message] = []
    for t in turns:
        if t["role"] == "User":
            out.append({"role": "user", "content": t["text"]})
        elif t["role"] == "AI":
            out.append({"role": "assistant", "content": t["text"]})
        else:
            call = {"name": t["api_name"], "parameters": t["param_dict"]}
            result = json.dumps(t["result"].get("output"), ensure_ascii=False, default=str)
            out.append({"role": "assistant", "content": render_calls([call])})
            out.append({"role": "user", "content": f"<tool_response>\n{result}\n</tool_response>"})
    return merge_consecutive(out)


def _transcript(messages: list[Message]) -> str:
    return "\n".join(("User: " if m["role"] == "user" else "AI: ") + m["content"] for m in messages)


def _from_transcript(text: str) -> list[Message]:
    """A generated dialogue ("User: ..." / "AI: ..." lines) back to messages; plain text is one
    user message."""
    out: list[Message] = []
    for line in text.splitlines():
        role = "user" if line.startswith("User:") else "assistant" if line.startswith("AI:") else None
        if role:
            out.append({"role": role, "content": line.split(":", 1)[1].strip()})
        elif out and line.strip():
            out[-1] = {"role": out[-1]["role"], "content": out[-1]["content"] + "\n" + line}
        elif line.strip():
            out.append({"role": "user", "content": line.strip()})
    return merge_consecutive(out) or [{"role": "user", "content": text.strip()}]
