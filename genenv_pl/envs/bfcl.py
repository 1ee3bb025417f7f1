"""BFCL v4 (Berkeley Function Calling Leaderboard) as a GenEnv environment.

Data: `<data_root>/bfcl/BFCL_v4_<category>.json` (JSON lines), gold in `possible_answer/`, the
function docs of the multi-turn backends in `multi_turn_func_doc/` (see that folder's SOURCE.md).

Tasks (one per scored decision):
- AST categories (simple_python, multiple, parallel, parallel_multiple, live_simple,
  live_multiple, live_parallel, live_parallel_multiple, and simple_java, simple_javascript): one
  task per entry, gold = BFCL's `possible_answer` (each argument -> list of acceptable values).
  Java/JavaScript: the agent sees every parameter as a string (BFCL's own function-doc rewrite)
  and writes each argument as Java/JS source text, read back by BFCL's type converters before the
  AST rules (`bfcl_languages.py`). A simulator's variation of such a seed is checked and scored
  against the all-string docs it was written from (its values compared as BFCL compares strings).
- Relevance categories: `irrelevance`, `live_irrelevance` (correct = no call) and
  `live_relevance` (correct = at least one call).
- Multi-turn categories (multi_turn_base, _miss_func, _miss_param, _long_context): one task per
  user turn. The agent sees the gold history (earlier user turns and the gold calls as assistant
  turns), the functions available at that turn (miss_func adds the held-out ones at their turn)
  and the backends' initial state as JSON (the agent cannot observe tool results here, so the
  state is how it can know file names, ids, ...). Gold = that turn's calls.

Scoring (`reward` = `score()["accuracy"]`, binary):
- AST: a re-implementation of bfcl-eval's `ast_checker` (2026.3.23), same dispatch on the
  category name ("parallel" -> order-free greedy matching, "multiple" -> one call checked
  against the gold function, else exactly one call against the only function), the same type
  rules (int accepted for float, "any" as string, one level of nested list types, "variables"),
  and the same value rules (strings compared case-insensitively without spaces and ,./-_*^;
  lists and dicts element-wise; "" in an allowed list = may be omitted).
  tests/envs/test_bfcl.py checks agreement with bfcl-eval on every gold answer and on
  systematic perturbations.
- Relevance: call vs no call, as bfcl-eval. One difference, on purpose: a `<tool_call>` block
  that cannot be read is a format error and scores 0 in `irrelevance` too (bfcl-eval counts
  any undecodable output as "no call", which would reward garbage in our tagged format).
- Multi-turn: the turn's calls must equal the gold calls in order (name and arguments; an
  argument given as None or as its documented default counts as omitted; positional gold
  arguments are named from the function doc). bfcl-eval instead executes both call lists on its
  simulated backends and compares states and results; this exact-sequence rule is stricter (it
  rejects some equivalent call sequences) and needs no execution. The paper scores the
  long-context multi-turn subset with turns scored independently, which is the default here.
- No call where one is expected, or an unreadable `<tool_call>` block: accuracy 0, format_error 1.

Split: an entry (all turns of a multi-turn dialogue together) goes to evaluation when
sha1(f"{split_seed}:{entry_id}") read as a number in [0, 1) is below `eval_fraction`, else to the
seeds. It depends on the id alone: stable across machines and file order, disjoint by
construction. web_search and memory need live tools and are refused (`UNSUPPORTED`).

Malformed data (a bad JSON line, a missing field, an answer missing for an id) raises
`DataError` naming the file and the record: a partial benchmark would give wrong numbers.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Any, Literal

from genenv_pl.envs.base import (
    ConfigError,
    DataError,
    Environment,
    InvalidTask,
    Message,
    Task,
    read_jsonl,
    resolve_data_root,
)
from genenv_pl.envs.bfcl_languages import LANGUAGES, agent_tools, language_of, read_argument, write_argument
from genenv_pl.envs.prompting import check_sim_prompt
from genenv_pl.envs.toolcall import (
    ToolCall,
    ToolSchema,
    agent_system_prompt,
    call_problem,
    canonical_type,
    merge_consecutive,
    normalize_text,
    parse_generated_request,
    parse_generated_task,
    parse_python_calls,
    parse_response,
    render_calls,
    simulator_messages,
)

AST_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "live_simple",
                  "live_multiple", "live_parallel", "live_parallel_multiple")
RELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance", "live_relevance")
MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
                         "multi_turn_long_context")
LANGUAGE_CATEGORIES = tuple(LANGUAGES)  # AST categories whose arguments are Java/JavaScript source text
SUPPORTED = AST_CATEGORIES + LANGUAGE_CATEGORIES + RELEVANCE_CATEGORIES + MULTI_TURN_CATEGORIES
# BFCL v4 categories that cannot be scored as one decision against a fixed answer, and why.
UNSUPPORTED = {
    "memory": "BFCL scores it agentically: the model first stores prerequisite conversations through a live "
              "memory backend (key-value, vector or summary store) and later answers from what it stored",
    "web_search": "its answers come from live web search results (BFCL's WebSearchAPI queries a search engine)",
    "format_sensitivity": "not a category of its own: a list of ids of other categories, re-asked in other "
                          "prompt formats",
}
DEFAULT_CATEGORIES = ["multi_turn_long_context"]  # the subset the paper reports

# bfcl_eval/constants/executable_backend_config.py: backend class -> its function doc file
FUNC_DOC_FILES = {
    "GorillaFileSystem": "gorilla_file_system.json", "MathAPI": "math_api.json",
    "MessageAPI": "message_api.json", "TwitterAPI": "posting_api.json",
    "TicketAPI": "ticket_api.json", "TradingBot": "trading_bot.json",
    "TravelAPI": "travel_booking.json", "VehicleControlAPI": "vehicle_control.json",
}
# bfcl_eval/constants/default_prompts.py: the user turn that announces held-out functions
ADDED_FUNCTIONS_PROMPT = "I have updated some more functions you can choose from. What about now?"
NO_CALL_REPLY = "<response>I cannot do this with the functions and information I have.</response>"


def split_bucket(entry_id: str, split_seed: int | str) -> float:
    """A stable pseudo-random number in [0, 1) for an id."""
    digest = hashlib.sha1(f"{split_seed}:{entry_id}".encode()).hexdigest()
    return int(digest[:15], 16) / 16**15


def mode_of(category: str) -> str:
    """How a category is scored; the AST dispatch mirrors bfcl-eval's `ast_checker`."""
    if category in MULTI_TURN_CATEGORIES:
        return "sequence"
    if category in RELEVANCE_CATEGORIES:
        return "irrelevance" if "irrelevance" in category else "relevance"
    if "parallel" in category:
        return "parallel"
    return "multiple" if "multiple" in category else "simple"


# =============================================================================================
# AST checker: bfcl-eval's ast_checker semantics for Python, on {"name", "parameters"} calls
# =============================================================================================

_PY_TYPES: dict[str, type] = {"string": str, "integer": int, "float": float, "boolean": bool,
                              "array": list, "tuple": list, "dict": dict, "any": str}


def _std(s: str) -> str:
    """bfcl's `standardize_string`: 'April 1, 2024' == 'april 1 2024'."""
    return re.sub(r"[ ,./\-_*^]", "", s).lower().replace("'", '"')


def _std_items(xs: Any) -> list[Any]:
    return [_std(x) if type(x) is str else x for x in xs]


def _first_answer_type(allowed: list[Any]) -> type | None:
    return next((type(a) for a in allowed if a != ""), None)


def _type_ok(value: Any, allowed: list[Any], expected: type, nested: type | None) -> tuple[bool, bool]:
    """(valid, is_variable). A value of the gold answer's type where the declared type differs is
    a "variable" (BFCL writes variable names as strings) and skips the structural checks."""
    answer_type = _first_answer_type(allowed)
    is_variable = answer_type is not None and answer_type is not expected
    if type(value) is expected:
        if nested is None:
            return True, is_variable
        for item in allowed:
            if type(item) is list and not all(_type_ok(v, item, nested, None)[0] for v in value):
                continue
            return True, is_variable
        return False, False
    if answer_type is not None and type(value) is answer_type:
        return True, True
    return False, False


def _dict_ok(value: dict, allowed: list[Any]) -> bool:
    for answer in allowed:
        if answer == "" or not isinstance(answer, dict):
            continue
        ok = all(k in answer and (_std(v) if type(v) is str else v) in _std_items(answer[k])
                 for k, v in value.items())
        if ok and all(k in value or "" in vals for k, vals in answer.items()):
            return True
    return False


def _list_of_dicts_ok(value: list, allowed: list[Any]) -> bool:
    for answer in allowed:
        if isinstance(answer, (list, str)) and len(answer) == len(value):
            if all(_dict_ok(value[i], [answer[i]]) for i in range(len(value))):
                return True
    return False


def _call_ok(tool: ToolSchema, call: ToolCall, answer: dict[str, dict[str, list]], language: str = "python") -> bool:
    """bfcl's `simple_function_checker` for one call against one gold function. Java/JavaScript:
    every argument must be a string, read as the declared type first (`read_argument`)."""
    allowed_by_param = next(iter(answer.values()))
    if call["name"] != tool["name"]:
        return False
    spec = tool["parameters"]
    props, params = spec.get("properties", {}), call["parameters"]
    if any(r not in params for r in spec.get("required", [])):
        return False
    for pname, value in params.items():
        if pname not in props or pname not in allowed_by_param:
            return False
        allowed = allowed_by_param[pname]
        if language != "python":
            if type(value) is not str:
                return False
            value, expected, nested = read_argument(value, props[pname], language)
        else:
            declared = canonical_type(props[pname].get("type"))
            if declared not in _PY_TYPES:
                return False
            expected = _PY_TYPES[declared]
            nested = None
            if declared in ("array", "tuple") and isinstance(props[pname].get("items"), dict):
                nested = _PY_TYPES.get(canonical_type(props[pname]["items"].get("type")) or "")
            if declared == "float" and type(value) is int:
                value = float(value)
        ok, is_variable = _type_ok(value, allowed, expected, nested)
        if not ok:
            return False
        if not is_variable:
            if expected is dict:
                if not _dict_ok(value, allowed):
                    return False
                continue
            if expected is list and nested is dict:
                if not _list_of_dicts_ok(value, allowed):
                    return False
                continue
            if expected is str:
                if _std(value) not in [_std(a) for a in allowed if type(a) is str]:
                    return False
                continue
            if expected is list:
                if _std_items(value) not in [_std_items(a) for a in allowed if isinstance(a, (list, str))]:
                    return False
                continue
        if value not in allowed:
            return False
    return all(p in params or "" in allowed for p, allowed in allowed_by_param.items())


def _tool_named(tools: list[ToolSchema], name: str) -> ToolSchema | None:
    return next((t for t in tools if t["name"] == name), None)


def ast_match(tools: list[ToolSchema], calls: list[ToolCall], gold: list[dict], mode: str,
              language: str = "python") -> bool:
    """bfcl-eval's AST verdict for decoded `calls` against BFCL `gold` (ground_truth list); `tools`
    with their declared types (for Java/JavaScript, not the all-string view the agent sees)."""
    try:
        if mode == "parallel":
            if len(calls) != len(gold):
                return False
            unmatched = list(range(len(calls)))
            for answer in gold:  # greedy, in gold order, as bfcl-eval
                tool = _tool_named(tools, next(iter(answer)))
                hit = next((i for i in unmatched if tool and _call_ok(tool, calls[i], answer, language)), None)
                if hit is None:
                    return False
                unmatched.remove(hit)
            return True
        if mode == "multiple":
            tool = _tool_named(tools, next(iter(gold[0])))
            return len(calls) == len(gold) and tool is not None and _call_ok(tool, calls[0], gold[0], language)
        return len(calls) == 1 and _call_ok(tools[0], calls[0], gold[0], language)
    except (TypeError, KeyError, AttributeError, IndexError, StopIteration, ValueError, NotImplementedError):
        return False  # odd model values must never crash scoring


def concrete_call(tool: ToolSchema | None, answer: dict[str, dict[str, list]]) -> ToolCall:
    """One correct call from a BFCL gold answer: the first acceptable value of every argument
    (left out: arguments whose only option is "omit", optional ones at their documented default,
    and undeclared ones that may be omitted; dict values are built key by key)."""
    (name, allowed_by_param), = answer.items()
    props = (tool or {}).get("parameters", {}).get("properties", {})
    params: dict[str, Any] = {}
    for pname, allowed in allowed_by_param.items():
        options = [a for a in allowed if a != ""]
        if not options or ("" in allowed and pname not in props):
            continue  # omit what may be omitted, and never an undeclared (unexpected) argument
        value, spec = options[0], props.get(pname, {})
        if "" in allowed and "default" in spec and value == spec["default"]:
            continue  # an argument left at its documented default reads better omitted
        declared = canonical_type(spec.get("type"))
        item_type = canonical_type((spec.get("items") or {}).get("type"))
        if declared == "dict" and isinstance(value, dict):
            value = _concrete_dict(value)
        elif declared in ("array", "tuple") and item_type == "dict" and isinstance(value, list):
            value = [_concrete_dict(v) if isinstance(v, dict) else v for v in value]
        params[pname] = value
    return {"name": name, "parameters": params}


def _source_call(tool: ToolSchema | None, answer: dict[str, dict[str, list]], language: str) -> ToolCall:
    """`concrete_call` with every value written as Java/JavaScript argument text."""
    call = concrete_call(tool, answer)
    props = (tool or {}).get("parameters", {}).get("properties", {})
    params = {k: write_argument(v, props.get(k, {}), language) for k, v in call["parameters"].items()}
    return {"name": call["name"], "parameters": params}


def _concrete_dict(answer: dict[str, list]) -> dict[str, Any]:
    out = {}
    for k, vals in answer.items():
        options = [v for v in vals if v != ""] if isinstance(vals, list) else [vals]
        if options:
            out[k] = options[0]
    return out


# =============================================================================================
# Multi-turn: exact call sequences
# =============================================================================================

def _normalized_args(call: ToolCall, tools: list[ToolSchema]) -> dict[str, Any]:
    tool = _tool_named(tools, call["name"]) or {}
    props = tool.get("parameters", {}).get("properties", {})
    return {k: v for k, v in call["parameters"].items()
            if v is not None and not ("default" in props.get(k, {}) and props[k]["default"] == v)}


def sequence_match(tools: list[ToolSchema], calls: list[ToolCall], gold: list[ToolCall]) -> bool:
    """Same calls in the same order (name and arguments; an argument given as None or as its
    documented default counts as omitted)."""
    return len(calls) == len(gold) and all(
        c["name"] == g["name"] and _normalized_args(c, tools) == _normalized_args(g, tools)
        for c, g in zip(calls, gold))


def gold_call_from_string(text: str, tools: list[ToolSchema]) -> ToolCall:
    """A BFCL multi-turn gold string like "sort('a.txt')" as a named call. Raises ValueError."""
    (name, args, kwargs), = parse_python_calls(text)
    tool = _tool_named(tools, name)
    if tool is None:
        raise ValueError(f"unknown function {name!r}")
    order = list(tool["parameters"].get("properties", {}))
    if len(args) > len(order):
        raise ValueError(f"too many positional arguments for {name}")
    params = dict(zip(order, args))
    params.update(kwargs)
    return {"name": name, "parameters": params}


# =============================================================================================
# Data
# =============================================================================================

def _read_jsonl(path: str) -> list[dict[str, Any]]:
    rows = []
    for lineno, row in read_jsonl(path, "bfcl"):
        if not isinstance(row.get("id"), str):
            raise DataError(f"bfcl: {path}: line {lineno} has no string 'id'")
        rows.append(row)
    return rows


def _need(row: dict, key: str, kind: type, path: str) -> Any:
    if not isinstance(row.get(key), kind):
        raise DataError(f"{path}: record {row.get('id')!r} has no valid {key!r} ({kind.__name__})")
    return row[key]


def _check_tools(tools: list, path: str, rid: str) -> None:
    for t in tools:
        ok = isinstance(t, dict) and isinstance(t.get("name"), str) and isinstance(t.get("parameters"), dict)
        if not ok or not isinstance(t["parameters"].get("properties", {}), dict):
            raise DataError(f"{path}: record {rid!r} has a malformed function schema")


def _messages_of(turn: Any, path: str, rid: str) -> list[Message]:
    if not isinstance(turn, list) or not all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in turn):
        raise DataError(f"{path}: record {rid!r} has a malformed question turn")
    return [{"role": m["role"], "content": m["content"]} for m in turn]


class BFCLEnv(Environment):
    """BFCL v4 function calling (AST, relevance and multi-turn categories; see module docstring)."""

    name = "bfcl"
    data_folder = "bfcl"
    data_source = ("BFCL v4 data: the files of bfcl_eval/data/ in github.com/ShishirPatil/gorilla "
                   "(berkeley-function-call-leaderboard/), the same as in the bfcl-eval wheel "
                   "(pip install --no-deps bfcl-eval, then copy <site-packages>/bfcl_eval/data/)")

    @classmethod
    def required_files(cls, env_args: dict[str, Any] | None = None) -> list[str]:
        """Per category its question file and, where it is scored against answers, its answer file;
        the multi-turn backends' function docs where a multi-turn category is loaded. None: every
        supported category."""
        if env_args is None:
            categories = list(SUPPORTED)
        else:
            categories = [*(env_args.get("categories") or DEFAULT_CATEGORIES),
                          *(env_args.get("extra_seed_categories") or [])]
            categories = [c for c in dict.fromkeys(categories) if c in SUPPORTED]  # (others: the constructor says why)
        files = []
        for category in categories:
            files.append(f"BFCL_v4_{category}.json")
            if mode_of(category) not in ("relevance", "irrelevance"):
                files.append(f"possible_answer/BFCL_v4_{category}.json")
        if any(c in MULTI_TURN_CATEGORIES for c in categories):
            files += [f"multi_turn_func_doc/{name}" for name in dict.fromkeys(FUNC_DOC_FILES.values())]
        return files

    def __init__(
        self,
        data_root: str | None = None,
        categories: list[str] | None = None,
        eval_fraction: float = 0.5,
        split_seed: int = 0,
        val_fraction: float = 0.0,
        max_state_chars: int = 4000,
        max_seed_tools: int = 8,
        simulator_writes: Literal["task", "request"] = "task",
        extra_seed_categories: list[str] | None = None,
        extra_seed_max_chars: int | None = None,
        sim_prompt: str = "stats",
    ):
        """
        Args:
            data_root: folder that contains `bfcl/`; default: $GENENV_DATA_ROOT.
            categories: BFCL categories to load (names without the `BFCL_v4_` prefix); default
                `["multi_turn_long_context"]`, the subset the paper reports. Supported: the AST
                (Python, Java, JavaScript), relevance and multi-turn categories listed in
                `SUPPORTED`; `memory` and `web_search` need live tools and are refused.
            eval_fraction: share of entries held out for evaluation (by hash of the entry id).
            split_seed: salt of the split hash; change it for a different split.
            val_fraction: share of the held-out entries set apart as the validation split (by a second hash
                of the entry id, salted "validation:<split_seed>"): what `fit` validates on and every choice
                (learning rate, budget) is made on. The rest is the test split (`eval_tasks`, what `test`
                scores). 0 (default): no validation split; `fit` validates on the held-out entries.
            max_state_chars: multi-turn only: the initial backend state shown to the agent is
                cut to this many characters.
            max_seed_tools: the simulator sees full schemas of the gold functions plus other seed
                functions up to this many in all (multi-turn seeds list 20-40 functions).
            simulator_writes: "task" (the paper's 7B simulator): the whole task, its question,
                function docs and calls. "request": only a new user request and its gold calls;
                the task keeps the seed's function docs and every call is checked against their
                JSON schemas. Its output is a tenth as long (a few dozen tokens instead of
                hundreds), which is what makes sampling a small simulator on a CPU practical.
                The gold follows the seed's (`_answer_from_call`): kept values accept the seed's
                spellings, optional arguments stay optional; a call whose value for an argument
                the seed's request states, or for an optional one it changes, is not written in its
                own request is rejected (`unstated_change`).
            extra_seed_categories: categories that add seed tasks (the seed half of their split) and no
                held-out items: more functions to warm-start on and vary, with the evaluation still
                `categories`' held-out half. Their held-out half is not loaded.
            extra_seed_max_chars: keep only those extra seed tasks whose agent prompt is at most this
                many characters (None: all). live_multiple's prompts average 4,300 characters, three
                times simple_python's: long prompts make every warm-start and rollout step slower.
            sim_prompt: what the simulator's prompt says about the agent's success on the seed:
                "rule" (the rate and "make the new task harder" above 60%, "easier" below 40%) or
                "stats" (the rate alone); see genenv_pl/envs/prompting.py.
        """
        self.sim_prompt = check_sim_prompt(sim_prompt)
        self.categories = list(categories) if categories else list(DEFAULT_CATEGORIES)
        self.extra_seed_categories = list(extra_seed_categories or [])
        for key, names in (("categories", self.categories), ("extra_seed_categories", self.extra_seed_categories)):
            refused = [c for c in names if c in UNSUPPORTED]
            if refused:
                raise ConfigError(f"BFCL category {refused[0]!r} is not supported: {UNSUPPORTED[refused[0]]}; "
                                  f"drop it from data.env_args.{key}")
            unknown = [c for c in names if c not in SUPPORTED]
            if unknown:
                raise ConfigError(f"unknown BFCL categories {unknown} in data.env_args.{key}; supported: {list(SUPPORTED)}")
        both = sorted(set(self.categories) & set(self.extra_seed_categories))
        if both:
            raise ConfigError(f"data.env_args.extra_seed_categories repeats {both} from data.env_args.categories")
        if not 0.0 <= eval_fraction <= 1.0:
            raise ValueError("eval_fraction must be in [0, 1]")
        if not 0.0 <= val_fraction < 1.0:
            raise ConfigError(f"data.env_args.val_fraction: share of the held-out entries for validation, in [0, 1); "
                              f"got {val_fraction}")
        self.root = resolve_data_root(data_root, self.data_folder)
        self.eval_fraction, self.split_seed, self.val_fraction = eval_fraction, split_seed, val_fraction
        self.max_state_chars, self.max_seed_tools = max_state_chars, max_seed_tools
        if simulator_writes not in ("task", "request"):
            raise ValueError(f"simulator_writes must be 'task' or 'request', got {simulator_writes!r}")
        self.simulator_writes = simulator_writes
        self._docs: dict[str, list[ToolSchema]] = {}
        self._seed: list[Task] = []
        self._eval: list[Task] = []
        self._val: list[Task] = []
        for category in self.categories:
            for entry_id, tasks in self._load_category(category):
                if split_bucket(entry_id, split_seed) >= eval_fraction:
                    self._seed.extend(tasks)
                elif split_bucket(entry_id, f"validation:{split_seed}") < val_fraction:
                    self._val.extend(tasks)
                else:
                    self._eval.extend(tasks)
        for category in self.extra_seed_categories:
            for entry_id, tasks in self._load_category(category):
                if split_bucket(entry_id, split_seed) >= eval_fraction:
                    self._seed.extend(t for t in tasks if extra_seed_max_chars is None
                                      or sum(len(m["content"]) for m in self.agent_prompt(t)) <= extra_seed_max_chars)
        # Requests a generation may not copy: a seed's (a copy teaches nothing new) or an evaluation
        # item's (it would leak the held-out set into training).
        self._known_requests = {normalize_text(self._question(t.data)): "copies_eval" for t in self._val + self._eval}
        self._known_requests.update({normalize_text(self._question(t.data)): "copies_seed" for t in self._seed})

    # ---- data -------------------------------------------------------------------------------
    def seed_tasks(self) -> list[Task]:
        return list(self._seed)

    def eval_tasks(self) -> list[Task]:
        return list(self._eval)

    def val_tasks(self) -> list[Task]:
        return list(self._val) if self.val_fraction > 0 else self.eval_tasks()

    def _path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def _load_category(self, category: str) -> list[tuple[str, list[Task]]]:
        qpath = self._path(f"BFCL_v4_{category}.json")
        if not os.path.isfile(qpath):
            raise DataError(f"bfcl: missing data file {qpath}")
        rows = _read_jsonl(qpath)
        mode = mode_of(category)
        answers: dict[str, Any] = {}
        apath = self._path("possible_answer", f"BFCL_v4_{category}.json")
        if mode not in ("relevance", "irrelevance"):
            if not os.path.isfile(apath):
                raise DataError(f"bfcl: missing answer file {apath}")
            answers = {r["id"]: r.get("ground_truth") for r in _read_jsonl(apath)}
        out = []
        for row in rows:
            rid = row["id"]
            if mode != "sequence":
                out.append((rid, [self._single_turn_task(row, category, mode, answers, qpath, apath)]))
            else:
                out.append((rid, self._multi_turn_tasks(row, category, answers, qpath, apath)))
        return out

    def _single_turn_task(self, row: dict, category: str, mode: str, answers: dict, qpath: str,
                          apath: str) -> Task:
        rid = row["id"]
        turns = _need(row, "question", list, qpath)
        tools = _need(row, "function", list, qpath)
        _check_tools(tools, qpath, rid)
        if len(turns) != 1:
            raise DataError(f"{qpath}: record {rid!r} should have one question turn")
        messages = _messages_of(turns[0], qpath, rid)
        gold = None
        if mode not in ("relevance", "irrelevance"):
            gold = answers.get(rid)
            if not isinstance(gold, list) or not gold or not all(
                    isinstance(g, dict) and len(g) == 1 and isinstance(next(iter(g.values())), dict)
                    for g in gold):
                raise DataError(f"{apath}: record {rid!r} has no valid ground_truth")
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        data = {"mode": mode, "category": category, "tools": tools, "context": system,
                "messages": [m for m in messages if m["role"] != "system"], "gold": gold}
        language = language_of(category)
        if language != "python":  # the agent sees BFCL's all-string docs; scoring reads the declared types
            data.update(tools=agent_tools(tools, language), typed_tools=tools, language=language)
        return Task(id=rid, data=data, difficulty=self._difficulty(data), group=category)

    def _multi_turn_tasks(self, row: dict, category: str, answers: dict, qpath: str, apath: str) -> list[Task]:
        rid = row["id"]
        turns = _need(row, "question", list, qpath)
        classes = _need(row, "involved_classes", list, qpath)
        state = row.get("initial_config", {})
        all_tools: list[ToolSchema] = []
        for cls in classes:
            if cls not in FUNC_DOC_FILES:
                raise DataError(f"{qpath}: record {rid!r} uses unknown backend {cls!r}")
            all_tools.extend(self._func_doc(FUNC_DOC_FILES[cls]))
        missed = row.get("missed_function", {})  # {"turn index": [function names]}
        if not isinstance(missed, dict) or not all(
                str(k).isdigit() and isinstance(v, list) for k, v in missed.items()):
            raise DataError(f"{qpath}: record {rid!r} has a malformed 'missed_function'")
        gold_turns = answers.get(rid)
        if not isinstance(gold_turns, list) or len(gold_turns) != len(turns):
            raise DataError(f"{apath}: record {rid!r} needs one ground_truth list per question turn")
        try:
            gold = [[gold_call_from_string(s, all_tools) for s in turn] for turn in gold_turns]
        except (ValueError, TypeError) as e:
            raise DataError(f"{apath}: record {rid!r} has an unreadable gold call ({e})") from None
        state_text = json.dumps(state, ensure_ascii=False)[: self.max_state_chars]
        context = ("# Initial state of the backends (JSON)\n" + state_text + "\n\nWrite all the calls the "
                   "current request needs, in order, in one <tool_call> block.")
        tasks, history = [], []
        for t, turn in enumerate(turns):
            hidden = {n for k, names in missed.items() if int(k) > t for n in names}
            tools = [f for f in all_tools if f["name"] not in hidden]
            user = _messages_of(turn, qpath, rid) or [{"role": "user", "content": ADDED_FUNCTIONS_PROMPT}]
            messages = history + user
            data = {"mode": "sequence", "category": category, "tools": tools, "context": context,
                    "messages": messages, "gold": gold[t]}
            tasks.append(Task(id=f"{rid}/turn{t}", data=data, difficulty=self._difficulty(data),
                              group=category, meta={"turn": t}))
            reply = render_calls(gold[t]) if gold[t] else NO_CALL_REPLY
            history = messages + [{"role": "assistant", "content": reply}]
        return tasks

    def _func_doc(self, filename: str) -> list[ToolSchema]:
        cache = self._docs
        if filename not in cache:
            path = self._path("multi_turn_func_doc", filename)
            docs = []
            try:
                with open(path, encoding="utf-8") as f:
                    docs = [json.loads(line) for line in f if line.strip()]
            except (OSError, json.JSONDecodeError) as e:
                raise DataError(f"{path}: unreadable function doc ({e})") from None
            # keep only what the agent needs; the "response" schemas would double the prompt
            cache[filename] = [{k: d[k] for k in ("name", "description", "parameters") if k in d} for d in docs]
            _check_tools(cache[filename], path, "-")
        return cache[filename]

    @staticmethod
    def _difficulty(data: dict[str, Any]) -> float:
        """Number of gold calls plus arguments they set (1 for relevance tasks)."""
        calls = BFCLEnv._gold_calls(data)
        return float(max(1, sum(1 + len(c["parameters"]) for c in calls)))

    @staticmethod
    def _gold_calls(data: dict[str, Any]) -> list[ToolCall]:
        """The gold as concrete calls (first acceptable values for AST gold)."""
        gold = data.get("gold") or []
        if data.get("language"):  # Java/JavaScript: each value written as the argument text BFCL reads back
            return [_source_call(_tool_named(data["typed_tools"], next(iter(g))), g, data["language"]) for g in gold]
        if data["mode"] in ("simple", "multiple", "parallel"):
            return [concrete_call(_tool_named(data["tools"], next(iter(g))), g) for g in gold]
        return list(gold) if data["mode"] == "sequence" else []

    # ---- agent side -------------------------------------------------------------------------
    def agent_prompt(self, task: Task) -> list[Message]:
        d = task.data
        system = agent_system_prompt(d["tools"], context=d.get("context", ""))
        return merge_consecutive([{"role": "system", "content": system}, *d["messages"]])

    def reward(self, task: Task, response: str) -> float:
        return self.score(task, response)["accuracy"]

    def score(self, task: Task, response: str) -> dict[str, float]:
        parsed = parse_response(response)
        d, calls = task.data, parsed.calls
        expects_call = d["mode"] not in ("irrelevance",) and not (d["mode"] == "sequence" and not d["gold"])
        format_error = parsed.format_error or (expects_call and not calls)
        if parsed.format_error:
            correct = False
        elif d["mode"] == "relevance":
            correct = bool(calls)
        elif d["mode"] == "irrelevance":
            correct = not calls
        elif d["mode"] == "sequence":
            correct = sequence_match(d["tools"], calls, d["gold"])
        else:
            correct = ast_match(d.get("typed_tools", d["tools"]), calls, d["gold"], d["mode"], d.get("language", "python"))
        return {"accuracy": float(correct), "format_error": float(format_error)}

    # ---- simulator side ---------------------------------------------------------------------
    def _seed_view(self, seed: Task) -> dict[str, Any]:
        d = seed.data
        gold_calls = self._gold_calls(d)
        used = {c["name"] for c in gold_calls}
        keep = [t for t in d["tools"] if t["name"] in used]
        keep += [t for t in d["tools"] if t["name"] not in used][: max(0, self.max_seed_tools - len(keep))]
        calls: Any = gold_calls if d["mode"] != "relevance" else "unknown (at least one call)"
        return {"question": self._question(d), "tools": keep, "calls": calls}

    @staticmethod
    def _question(d: dict[str, Any]) -> str:
        users = [m["content"] for m in d["messages"] if m["role"] == "user"]
        return users[-1] if users else ""

    def simulator_prompt(self, seed: Task, success_rate: float | None) -> list[Message]:
        note = ""
        if seed.data["mode"] == "sequence":
            note = ("The seed is one turn of a multi-turn session; the new task is a standalone request "
                    "in the same backend state, its calls listed in execution order.")
        return simulator_messages(self._seed_view(seed), success_rate, note,
                                  request_only=self.simulator_writes == "request", sim_prompt=self.sim_prompt)

    def parse_task(self, text: str, seed: Task) -> Task:
        sd = seed.data
        if self.simulator_writes == "request":  # the seed's functions, all of them, as the agent saw them
            gen = parse_generated_request(text, sd["tools"])
        else:
            gen = parse_generated_task(text, sd["tools"])
        copied = self._known_requests.get(normalize_text(gen.question))
        if copied:
            raise InvalidTask(copied, gen.question[:80])
        seed_answers = self._seed_answers(sd) if self.simulator_writes == "request" else {}
        for c in gen.calls:
            unstated = unstated_change(c, seed_answers.get(c["name"]), self._question(sd), gen.question)
            if unstated:
                raise InvalidTask("unstated_value", f"{c['name']}.{unstated}")
        if not gen.calls:
            mode, gold = "irrelevance", None
        elif sd["mode"] == "sequence":
            mode, gold = "sequence", gen.calls
        else:
            mode, gold = ("parallel" if len(gen.calls) > 1 else "multiple"), [
                _answer_from_call(c, gen.tools, seed_answers.get(c["name"])) for c in gen.calls]
        context = sd.get("context", "") if sd["mode"] == "sequence" else ""
        data = {"mode": mode, "category": sd["category"], "tools": gen.tools, "context": context,
                "messages": [{"role": "user", "content": gen.question}], "gold": gold}
        digest = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:12]
        return Task(id=f"{seed.id}/gen-{digest}", data=data, difficulty=self._difficulty(data),
                    group=seed.group, meta={"seed_id": seed.id, "generated": True})

    @staticmethod
    def _seed_answers(sd: dict[str, Any]) -> dict[str, dict[str, list]]:
        """The seed's BFCL gold by function name, for the functions it calls once (Python AST seeds
        only: a Java/JavaScript seed's gold is typed, its variations' values are source text)."""
        if sd["mode"] not in ("simple", "multiple", "parallel") or sd.get("language") or not sd.get("gold"):
            return {}
        names = [next(iter(g)) for g in sd["gold"]]
        return {n: g[n] for n, g in zip(names, sd["gold"]) if names.count(n) == 1}

    def task_key(self, task: Task) -> str:
        """Normalized conversation, tool names and gold call names: a generated copy of a seed (or
        of another generation) collides even when the JSON differs in layout or value choices."""
        d = task.data
        return json.dumps({
            "messages": [normalize_text(m["content"]) for m in d["messages"]],
            "tools": sorted(t["name"] for t in d["tools"]),
            "calls": sorted(c["name"] for c in self._gold_calls(d)),
            "mode": d["mode"] if d["mode"] in ("relevance", "irrelevance") else "call",
        }, sort_keys=True)

    def warm_start_examples(self, role: str, n: int, seed: int) -> list[tuple[list[Message], str]]:
        """Agent: seed prompt -> gold calls. Simulator, whole-task mode: seed prompt -> another seed
        of the same category written as a generated task. Simulator, request mode: seed prompt
        (with a random success-rate hint) -> the seed's request with new values for arguments
        stated in it (`value_variation`): a valid, checked variation that teaches the output format
        and the schemas, not which variations help the agent (co-evolution's job)."""
        import random

        rng = random.Random(seed)
        pool = self._seed
        if role not in ("agent", "simulator"):
            raise ValueError(f"unknown role {role!r}")
        if role == "simulator" and self.simulator_writes == "request":
            pool = [t for t in pool if value_variation(t.data, random.Random(0)) is not None]
        if not pool:
            return []
        out: list[tuple[list[Message], str]] = []
        while len(out) < n:
            task = rng.choice(pool)
            if role == "agent":
                calls = self._gold_calls(task.data)
                target = "<think>\n</think>\n" + (render_calls(calls) if calls else NO_CALL_REPLY)
                out.append((self.agent_prompt(task), target))
            elif self.simulator_writes == "request":
                question, calls = value_variation(task.data, rng)
                if normalize_text(question) in self._known_requests:
                    continue  # it landed on another seed's (or a held-out) request: draw again
                hint = rng.choice([None, 0.0, 0.25, 0.5, 0.75, 1.0])
                target = json.dumps({"question": question, "calls": calls}, ensure_ascii=False)
                out.append((self.simulator_prompt(task, hint), target))
            else:
                same = [t for t in pool if t.group == task.group and t.id != task.id] or [task]
                other = self._seed_view(rng.choice(same))
                if not isinstance(other["calls"], list):
                    other["calls"] = []
                out.append((self.simulator_prompt(task, None), json.dumps(other, ensure_ascii=False)))
        return out


def _literal(v: Any) -> str:
    return str(v) if not isinstance(v, str) else v


def _new_value(v: Any, spec: dict[str, Any], rng) -> Any:
    """Another value of `v`'s kind for a warm-start variation, or None (booleans, free strings)."""
    if isinstance(v, bool):
        return None
    enum = spec.get("enum")
    if isinstance(enum, list) and v in enum:
        others = [e for e in enum if e != v and type(e) is type(v)]
        return rng.choice(others) if others else None
    if isinstance(v, int):
        if 1900 <= v <= 2030:  # a year: stay near it (a request about the year 2583 reads as noise)
            lo, hi = v - 20, min(v + 10, 2030)
        else:
            lo, hi = (max(1, v // 2), 2 * v + 3) if v > 0 else (v - 9, v + 9)
        new = rng.randint(lo, hi - 1)
        return new if new < v else new + 1  # uniform over [lo, hi] without v
    if isinstance(v, float):
        decimals = len(repr(v).split(".")[1]) if "." in repr(v) and "e" not in repr(v) else 2
        for _ in range(10):
            new = round(v * rng.uniform(0.5, 2.0), decimals)
            if new != v and new != 0:
                return new
    return None


def value_variation(data: dict[str, Any], rng) -> tuple[str, list[ToolCall]] | None:
    """The seed's request with new values for the arguments whose value appears exactly once in it
    (numbers, enum members), and its calls with those values; None when no argument can change
    (single-call AST seeds only). The result fits the function's schema by construction (checked)."""
    if data["mode"] not in ("simple", "multiple") or not data.get("gold"):
        return None
    users = [m["content"] for m in data["messages"] if m["role"] == "user"]
    if len(users) != 1:
        return None
    question = users[0]
    (call,) = BFCLEnv._gold_calls(data)
    tool = _tool_named(data["tools"], call["name"]) or {}
    props = tool.get("parameters", {}).get("properties", {})
    params, changed = dict(call["parameters"]), False
    for pname, value in call["parameters"].items():
        new = _new_value(value, props.get(pname, {}), rng)
        if new is None:
            continue
        pattern = _literal_pattern(_literal(value))
        if len(pattern.findall(question)) != 1:
            continue  # not stated, or stated twice (which one is the argument?)
        question = pattern.sub(lambda _: _literal(new), question)
        params[pname] = new
        changed = True
    new_call = {"name": call["name"], "parameters": params}
    if not changed or call_problem(new_call, data["tools"]) is not None:
        return None
    return question, [new_call]


def _stated(value: Any, text: str) -> bool:
    """Whether a scalar value is written in `text` (as `value_variation` writes it: the literal,
    case-insensitive, not inside a longer word or number; 200.0 also as 200)."""
    if isinstance(value, str):
        value = value.strip()
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or value == "":
        return False
    forms = {_literal(value)} | ({str(int(value))} if isinstance(value, float) and value.is_integer() else set())
    return any(_literal_pattern(f).search(text) for f in forms)


def _literal_pattern(literal: str) -> re.Pattern:
    """`literal` in a request, case-insensitive, not inside a longer word or number."""
    return re.compile(r"(?<![\w.])" + re.escape(literal) + r"(?![\w]|\.\d)", re.IGNORECASE)


def unstated_change(call: ToolCall, seed_answer: dict[str, list] | None, seed_question: str, question: str) -> str | None:
    """`param=value` for the first argument of a request-mode variation whose gold value its own
    request does not state, where it should: the seed's request states that argument's value, or
    the argument is optional and unstated in the seed and the call sets it to another value than the
    seed's. It catches a gold call that disagrees with its request ("8%" -> 0.8, a city renamed in
    the request but not in the call) and one that demands a value nothing asks for (unit="imperial"
    where the seed accepted the default). A value kept from the seed passes when the request states
    any of the seed's options for it. Booleans, lists and dicts, and required arguments the seed does
    not state literally (0.08 for "8%"), are not checked. None when all pass."""
    if not seed_answer:
        return None
    for pname, value in call["parameters"].items():
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            continue
        allowed = seed_answer.get(pname, [""])  # absent from the seed's gold: it may be left out
        options = [o for o in allowed if o != ""]
        kept = _same_option(value, options)
        if any(_stated(o, seed_question) for o in options):
            if not (_stated(value, question) or kept and any(_stated(o, question) for o in options)):
                return f"{pname}={value!r}"
        elif "" in allowed and not kept and not _stated(value, question):
            return f"{pname}={value!r}"
    return None


def _same_option(value: Any, options: list[Any]) -> bool:
    """Whether `value` is one of a BFCL gold's acceptable `options` (strings as bfcl compares them)."""
    if isinstance(value, bool):
        return any(o is value for o in options)
    if isinstance(value, str):
        return any(isinstance(o, str) and o != "" and _std(o) == _std(value) for o in options)
    return any(not isinstance(o, (bool, str)) and o == value for o in options)


def _answer_from_call(call: ToolCall, tools: list[ToolSchema],
                      seed_answer: dict[str, list] | None = None) -> dict[str, dict[str, list]]:
    """A generated call as BFCL gold: its values are the only acceptable ones; other declared
    parameters may be omitted or given their documented default.

    With the seed's gold for the same function (request mode, where the task keeps the seed's
    function docs), an argument the variation left at one of the seed's acceptable values keeps
    all of them, and one it left out keeps the seed's options when the seed allows leaving it out.
    Without this a variation would be stricter than its seed (the concrete call names one of
    "Miami"/"Miami, FL" and sets optional arguments the request never mentions), and an agent
    that answers as BFCL accepts would score 0 on it."""
    tool = _tool_named(tools, call["name"]) or {}
    props = tool.get("parameters", {}).get("properties", {})
    seed_answer = seed_answer or {}
    allowed: dict[str, list] = {}
    for pname, value in call["parameters"].items():
        if _same_option(value, seed_answer.get(pname, [])):
            allowed[pname] = list(seed_answer[pname])
            continue
        spec = props.get(pname, {})
        declared = canonical_type(spec.get("type"))
        item_type = canonical_type((spec.get("items") or {}).get("type"))
        if value is None:
            allowed[pname] = ["", None]  # None = leave it at its default
        elif declared == "dict" and isinstance(value, dict):
            allowed[pname] = [{k: [v] for k, v in value.items()}]  # BFCL dict gold: key -> options
        elif declared in ("array", "tuple") and item_type == "dict" and isinstance(value, list):
            allowed[pname] = [[{k: [v] for k, v in d.items()} if isinstance(d, dict) else d for d in value]]
        else:
            allowed[pname] = [value]
    for pname, spec in props.items():
        if pname not in allowed:
            if "" in seed_answer.get(pname, []):
                allowed[pname] = list(seed_answer[pname])
            else:
                allowed[pname] = ["", spec["default"]] if "default" in spec else [""]
    return {call["name"]: allowed}
