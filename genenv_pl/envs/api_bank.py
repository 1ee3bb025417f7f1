"""API-Bank level-1 / level-2 (and the shipped level-3 scenarios) as a GenEnv environment.

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

Scoring (`scoring`): "execute" (default) is upstream's evaluator. The first call of the response
must name the gold API; it is then executed on the simulated APIs (`genenv_pl/envs/api_bank_sim`:
arguments converted to the declared types, on the state the dialogue's earlier calls leave, replayed on
`init_database`) and correct when that API's check accepts its result against the recorded one (most
compare input, output and exception). Upstream runs every call on the initial state, which scores 8 of
the 404 shipped gold calls wrong (a login with a password the dialogue changed, a query of an id it created).
A shipped turn whose recorded result the simulated APIs cannot reproduce even for the gold call is scored
by "input" instead (`input_scored` lists them; 24 of the 404: Dictionary and Translate outputs came from
online services, QueryScene and CancelTimedSwitch records from a database other than the shipped one,
and ToolSearcher matches that only upstream's sentence embeddings make). An
unknown parameter, a value the type conversion rejects or a missing argument: incorrect, as upstream.
"input" is the stricter rule of earlier versions, without execution: name and parameters equal the gold's
executed input (`result.input`) after normalization (strings that are JSON/Python literals become those
values, "True" -> true, "970420" -> 970420, "['a', 'b']" -> ["a", "b"], other strings are stripped).
Either way, no call or an unreadable `<tool_call>` block: accuracy 0, format_error 1. A generated task's
gold is executed when it is parsed (its result is the reference); one that does not execute is invalid.

Level 3 (opt-in, `levels`): upstream scores it on a 50-dialogue set with its own APIs, neither shipped;
`lv3-samples/` holds 8 scenarios (a first utterance, key facts, the gold calls in order). Each becomes a
dialogue: the utterance and facts as the user's turn, then the gold calls with the results of executing
them; one task per call, with the scenario's API descriptions given (upstream's retrieval step embeds with
a sentence model and is not reproduced). A gold call that does not run, or runs to an exception, ends
its scenario's tasks (`level3_dropped` says which and why).

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
import re
from typing import Any

from genenv_pl.envs.api_bank_sim import Simulator
from genenv_pl.envs.api_bank_sim.core import TABLES
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

SCORING = ("execute", "input")
LEVEL_DIRS = {"level-1": "level-1-given-desc", "level-2": "level-2-toolsearcher", "level-3": "lv3-samples"}
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
    data_folder = "api-bank"
    data_source = ("API-Bank: the api-bank/ folder of github.com/AlibabaResearch/DAMO-ConvAI (lv1-lv2-samples/, "
                   "lv3-samples/, data/, init_database/)")

    @classmethod
    def required_files(cls, env_args: dict[str, Any] | None = None) -> list[str]:
        """The dialogues of each level (at least one file a level), the API descriptions (`data/all_apis.csv`:
        without it tools are described by name alone) and, where calls are executed (`scoring: execute` or
        level 3), the `init_database` tables the simulated APIs read. None: all three levels, executed."""
        levels = list(LEVEL_DIRS) if env_args is None else list(env_args.get("levels") or ["level-1", "level-2"])
        files = [f"lv1-lv2-samples/{LEVEL_DIRS[lv]}/*.jsonl" for lv in ("level-1", "level-2") if lv in levels]
        if "level-3" in levels:
            files.append(f"{LEVEL_DIRS['level-3']}/*.txt")
        files.append("data/all_apis.csv")
        if env_args is None or env_args.get("scoring", "execute") == "execute" or "level-3" in levels:
            files += [f"init_database/{table}.json" for table in TABLES]
        return files

    def __init__(
        self,
        data_root: str | None = None,
        levels: list[str] | None = None,
        eval_fraction: float = 0.5,
        split_seed: int = 0,
        max_seed_tools: int = 8,
        sim_prompt: str = "stats",
        scoring: str = "execute",
    ):
        """
        Args:
            data_root: folder that contains `api-bank/`; default: $GENENV_DATA_ROOT.
            levels: any of "level-1" (API descriptions given), "level-2" (ToolSearcher) and
                "level-3" (the 8 shipped plan scenarios, see `level3_dialogue`); default level-1 and level-2.
            eval_fraction: share of dialogues held out for evaluation (by hash of the dialogue id).
            split_seed: salt of the split hash; change it for a different split.
            max_seed_tools: most tool schemas shown to the simulator for one seed.
            sim_prompt: what the simulator's prompt says about the agent's success on the seed:
                "rule" (the rate and "make the new task harder" above 60%, "easier" below 40%) or
                "stats" (the rate alone); see genenv_pl/envs/prompting.py.
            scoring: "execute" (upstream's evaluator: the call runs on the simulated APIs and its
                result is compared with the recorded one) or "input" (name and normalized input
                equal the gold's, no execution: stricter where an API's check ignores a field).
        """
        if scoring not in SCORING:
            raise ValueError(f"data.env_args.scoring: {scoring!r} is not one of {list(SCORING)}")
        self.scoring = scoring
        self.sim_prompt = check_sim_prompt(sim_prompt)
        self.root = resolve_data_root(data_root, self.data_folder)
        self.levels = list(levels) if levels else ["level-1", "level-2"]
        unknown = [lv for lv in self.levels if lv not in LEVEL_DIRS]
        if unknown:
            raise ValueError(f"unknown API-Bank levels {unknown}; known: {list(LEVEL_DIRS)}")
        if not 0.0 <= eval_fraction <= 1.0:
            raise ValueError("eval_fraction must be in [0, 1]")
        self.max_seed_tools = max_seed_tools
        loaded: list[tuple[str, str, list[dict[str, Any]]]] = []  # (level, dialogue id, turns)
        self.sim = Simulator(self.root) if scoring == "execute" or "level-3" in self.levels else None
        self.level3_dropped: dict[str, str] = {}  # scenario step -> why it is not a task
        for level in self.levels:
            if level == "level-3":
                loaded += self._level3_dialogues()
                continue
            folder = os.path.join(self.root, "lv1-lv2-samples", LEVEL_DIRS[level])
            files = sorted(glob.glob(os.path.join(folder, "*.jsonl")))
            if not files:
                raise DataError(f"api-bank: no dialogues in {folder}")
            loaded += [(level, f"{level}/{os.path.basename(p)[:-6]}", _read_dialogue(p)) for p in files]
        self.catalog = build_catalog([turns for _, _, turns in loaded],
                                     os.path.join(self.root, "data", "all_apis.csv"))
        self._seed: list[Task] = []
        self._eval: list[Task] = []
        self.input_scored: list[str] = []  # shipped turns whose recorded result execution cannot reproduce
        for level, dialogue_id, turns in loaded:
            held_out = split_bucket(dialogue_id, split_seed) < eval_fraction
            tasks = self._tasks(level, dialogue_id, turns)
            if self.scoring != "input":
                for task in tasks:
                    if not self._executes_as_gold(task.data["gold"], task.data):
                        task.data["reference"] = "input"
                        self.input_scored.append(task.id)
            (self._eval if held_out else self._seed).extend(tasks)

    def _level3_dialogues(self) -> list[tuple[str, str, list[dict[str, Any]]]]:
        """The shipped level-3 scenarios as dialogues (see `level3_dialogue`); a step whose gold does not
        run or runs to an exception ends its scenario there, and is listed in `level3_dropped`."""
        folder = os.path.join(self.root, LEVEL_DIRS["level-3"])
        files = sorted(glob.glob(os.path.join(folder, "*.txt")))
        if not files:
            raise DataError(f"api-bank: no level-3 scenarios in {folder}")
        out = []
        for path in files:
            dialogue_id = f"level-3/{os.path.basename(path)[:-4]}"
            with open(path, encoding="utf-8") as f:
                turns, dropped = level3_dialogue(f.read(), self.sim, where=f"api-bank: {path}")
            self.level3_dropped.update({f"{dialogue_id}/{k}": why for k, why in dropped.items()})
            out.append(("level-3", dialogue_id, turns))
        return out

    def _tasks(self, level: str, dialogue_id: str, turns: list[dict[str, Any]]) -> list[Task]:
        apis = sorted({t["api_name"] for t in turns if t["role"] == "API"})
        tools = [TOOL_SEARCHER] if level == "level-2" else [self.catalog[a] for a in apis]
        tasks, before = [], []
        for i, t in enumerate(turns):
            if t["role"] != "API":
                continue
            gold = _gold_of(t)
            data = {"level": level, "tools": tools, "messages": _history(turns[:i]), "gold": gold,
                    "gold_tool": self.catalog.get(gold["name"]), "gold_result": t["result"],
                    "before": list(before)}  # the dialogue's earlier calls, replayed before the agent's
            before.append([t["api_name"], t["param_dict"], t["result"].get("output")])
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
        call, d = parsed.calls[0], task.data
        by_input = self.scoring == "input" or d.get("reference") == "input"
        correct = calls_equal(call, d["gold"]) if by_input else self._executes_as_gold(call, d)
        return {"accuracy": float(correct), "format_error": 0.0}

    def _executes_as_gold(self, call: ToolCall, d: dict[str, Any]) -> bool:
        if call["name"] != d["gold"]["name"]:
            return False
        try:
            result = self.sim.execute(call["name"], call["parameters"], before=d.get("before", ()))
        except (ValueError, RecursionError):  # upstream: the call raises, and is counted wrong
            return False
        return self.sim.correct(result, d["gold_result"])

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
        gold = gen.calls[0]
        data = {"level": seed.data["level"], "tools": gen.tools, "messages": _from_transcript(gen.question),
                "gold": gold, "gold_tool": next(t for t in gen.tools if t["name"] == gold["name"])}
        if self.scoring != "input":  # the executable checker: the gold must run, and its result is the reference
            try:
                data["gold_result"] = self.sim.execute(gold["name"], gold["parameters"])
            except (ValueError, RecursionError) as e:
                raise InvalidTask("gold_not_executable", f"the gold call does not run: {e}") from None
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


_CALLS_HEADING = re.compile(r"^\s*-?\s*(GT\s+)?API\s+Calls?:\s*$", re.IGNORECASE)  # the files word it four ways


def _literal_call(line: str) -> tuple[str, dict[str, Any]]:
    """`Name(key="value", n=1, who=["a"])` -> (name, arguments), read from the syntax tree (literals only)."""
    node = ast.parse(line.strip(), mode="eval").body
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.args):
        raise ValueError("not a call with keyword arguments")
    return node.func.id, {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}


def level3_dialogue(text: str, sim: Simulator, where: str) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """A level-3 scenario file (Scene, First Utterance, Key Info, then the gold API calls one per line)
    as dialogue turns: the user's first utterance with the key info, then each gold call with the result
    of executing it (the scenarios record no results). Steps from the first one whose gold does not run,
    or runs to an exception, are left out: {step: why}."""
    lines = text.splitlines()
    head = next((i for i, line in enumerate(lines) if _CALLS_HEADING.match(line)), None)
    if head is None:
        raise DataError(f"{where}: no 'API Calls:' line")
    intro = "\n".join(line for line in lines[:head] if not line.startswith("Scene:")).strip()
    intro = re.sub(r"First Utter[ea]nce:\s*", "", intro).strip()
    turns: list[dict[str, Any]] = [{"role": "User", "text": intro}]
    dropped: dict[str, str] = {}
    calls = [line for line in lines[head + 1:] if line.strip()]
    for step, line in enumerate(calls):
        before = [(t["api_name"], t["param_dict"], t["result"]["output"]) for t in turns if t["role"] == "API"]
        try:
            name, arguments = _literal_call(line)
            result = sim.execute(name, arguments, before=before)
        except (SyntaxError, ValueError) as e:
            # (ast's message names a node by its address: dropped, so the reason reads the same in every build)
            why = "the gold call does not run: " + re.sub(r" at 0x[0-9a-f]+", "", str(e))
        else:
            if result["exception"] is None:
                turns.append({"role": "API", "api_name": name, "param_dict": arguments, "result": result})
                continue
            why = f"the gold call raises: {result['exception']}"
        dropped.update({str(k): why if k == step else "after a dropped step" for k in range(step, len(calls))})
        break
    return turns, dropped


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
