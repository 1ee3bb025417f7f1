"""Property-based fuzzing of every function that reads model output.

Simulator output -> task: each environment's `parse_task` returns a usable Task or raises the
documented `InvalidTask`, nothing else. Agent output -> score: `score` returns a dict of finite
numbers with `accuracy` in [0, 1], `reward` a number in [0, 1]; the parsers behind them (tool
calls, ALFWorld commands, TravelPlanner plans, Bamboogle answers, arithmetic) never raise, or raise
only what they document. Inputs: arbitrary text, plus structured near-misses built from each
format (truncated JSON, code fences, `<tool_call>` tags around junk, unbalanced braces, deep
nesting, huge numbers, unicode), mostly around real seed tasks of the shared benchmarks.

Crashes found by this file were fixed in the parsers; each keeps its failing input as an
explicit `@example`.
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from genenv_pl.envs import InvalidTask, Task, make_env
from genenv_pl.envs import alfworld_grammar as grammar
from genenv_pl.envs import toolcall
from genenv_pl.envs.alfworld import validate_generated_step
from genenv_pl.envs.api_bank import calls_equal
from genenv_pl.envs.arithmetic import ArithmeticEnv
from genenv_pl.envs.bamboogle import parse_answer, parse_tool_call
from genenv_pl.envs.text_metrics import extract_json_object, extract_tag, normalize_answer, strip_tag_blocks, token_f1
from genenv_pl.envs.travelplanner import parse_query
from genenv_pl.envs.travelplanner_checks import CUISINES, HOUSE_RULES, ROOM_TYPES, TRANSPORT_RULES, parse_plan

# ast.parse of model text like "1_000abc" warns; the warning says nothing about our code
pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")
FUZZ = settings(max_examples=200, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


# =============================================================================================
# Strategies: arbitrary text and near-misses of every format
# =============================================================================================

HUGE = "9" * 5000  # past Python's 4300-digit limit for int(str): json and int() raise ValueError on it
PIECES = [
    "{", "}", "[", "]", "(", ")", '"', "'", ":", ",", "\\", "\\u", "\n", " ", "\t", "```", "```json\n", "\n```",
    "<tool_call>", "</tool_call>", "<think>", "</think>", "<response>", "</response>", "<tool_response>",
    "null", "None", "true", "True", "false", "NaN", "Infinity", "-Infinity", "1e999", "-0", "0x1F", "1_000", "9" * 40,
    HUGE, '"name"', '"parameters"', '"arguments"', '"function"', '"question"', '"tools"', '"calls"', '"answer"',
    '"hops"', '"query"', '"plan"', '"gold"', '"history"', '"task"', '"observation"', "Day 1:", "Current City:",
    "Transportation:", "Query:", "User: ", "AI: ", "Answer: ", "$", "from ", " to ", "go to ", "take ", "move ",
    "put ", " in/on ", "apple 1", "countertop 2", "f(a=1)", "lambda: 0", "__import__('os')", "\x00", "\u202e", "é",
    "\U0001F600", "İ", "ß", "٣", "²", "\ufeff", "\u3000", "\r\n",
]
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-10**40, 10**40),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20))
json_values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), c, max_size=4)),
                           max_leaves=20)
fragments = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=8)), max_size=40).map("".join)


@st.composite
def deep_nesting(draw) -> str:
    n = draw(st.integers(20, 4000))
    kind = draw(st.sampled_from(["list", "dict", "str", "paren", "open"]))
    if kind == "list":
        return "[" * n + "]" * n
    if kind == "dict":
        return '{"a": ' * n + "1" + "}" * n
    if kind == "str":
        return '"' + "\\" * n + '"'
    if kind == "paren":
        return "f(" * n + ")" * n
    return draw(st.sampled_from(["{", "[", "(", '{"a": ['])) * n


def render(obj, style: str, cut: float) -> str:
    """How a model might write a JSON-like object: JSON, a Python literal, fenced, in prose, torn."""
    try:
        text = json.dumps(obj, ensure_ascii=style != "json_unicode", indent=2 if style == "pretty" else None)
    except (TypeError, ValueError):
        text = repr(obj)
    if style == "repr":
        text = repr(obj)
    elif style == "fenced":
        text = f"```json\n{text}\n```"
    elif style == "prose":
        text = f"Sure! Here is the task:\n{text}\nHope it helps {{"
    elif style == "think":
        text = f"<think>draft {{'a': 1}}</think>\n{text}"
    elif style == "truncated":
        text = text[: int(len(text) * cut)]
    elif style == "unbalanced":
        text = text.replace("}", "", 1) + "}}"
    elif style == "doubled":
        text = text + "\n" + text
    return text


STYLES = ["json", "json_unicode", "pretty", "repr", "fenced", "prose", "think", "truncated", "unbalanced", "doubled"]


@st.composite
def rendered(draw, objects) -> str:
    style = draw(st.one_of(st.just("json"), st.sampled_from(STYLES)))
    return render(draw(objects), style, draw(st.floats(0, 1)))


@st.composite
def mutated(draw, texts) -> str:
    """A text with a junk fragment inserted, a slice deleted, a case change, a huge number or deep nesting."""
    text = draw(texts)
    op = draw(st.sampled_from(["none", "insert", "delete", "upper", "lower", "truncate", "huge", "deep"]))
    i = draw(st.integers(0, len(text)))
    if op in ("huge", "deep"):  # a number past 4300 digits, or nesting thousands deep, where a value starts
        colons = [m.end() for m in re.finditer(r":\s*", text)]
        j = draw(st.sampled_from(colons)) if colons else i
        return text[:j] + (HUGE if op == "huge" else draw(deep_nesting())) + text[j:]
    if op == "insert":
        return text[:i] + draw(st.one_of(st.sampled_from(PIECES), st.text(max_size=5))) + text[i:]
    if op == "delete":
        return text[:i] + text[i + draw(st.integers(1, 20)):]
    if op == "upper":
        return text.upper()
    if op == "lower":
        return text.lower()
    if op == "truncate":
        return text[:i]
    return text


any_text = st.one_of(st.text(max_size=300), fragments, rendered(json_values), deep_nesting(),
                     st.builds(lambda a, b: a + HUGE + b, fragments, fragments))


def model_text(objects) -> st.SearchStrategy[str]:
    """Arbitrary text, or `objects` as a model would write them, possibly damaged."""
    return st.one_of(any_text, rendered(objects), rendered(objects), mutated(rendered(objects)))


# =============================================================================================
# Properties
# =============================================================================================

def check_parsed(env, text: str, seed: Task) -> Task | None:
    """parse_task returns a usable Task or raises InvalidTask; nothing else escapes."""
    try:
        task = env.parse_task(text, seed)
    except InvalidTask as e:
        assert isinstance(e.reason, str) and e.reason
        return None
    assert isinstance(task, Task)
    json.dumps(task.to_dict())  # JSON-serializable payload (it goes into checkpoints and pools)
    env.task_key(task)  # de-duplication and rollout prompts must work on every parsed task
    env.agent_prompt(task)
    return task


def check_score(env, task: Task, text: str) -> dict:
    scores = env.score(task, text)
    assert isinstance(scores, dict) and "accuracy" in scores
    for k, v in scores.items():
        assert isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v), (k, v)
    assert 0.0 <= scores["accuracy"] <= 1.0
    r = env.reward(task, text)
    assert isinstance(r, (int, float)) and math.isfinite(r) and 0.0 <= r <= 1.0
    return scores


def _bench_env(data_root: str, folder: str, name: str, **kwargs):
    if not (Path(data_root) / folder).is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"CI: benchmark data {Path(data_root) / folder} is missing")
        pytest.skip(f"no {folder} data under GENENV_DATA_ROOT={data_root}")
    return make_env(name, data_root=data_root, **kwargs)


# =============================================================================================
# Arithmetic
# =============================================================================================

@pytest.fixture(scope="module")
def arithmetic():
    return ArithmeticEnv(eval_per_level=20, seeds_per_level=4)


digits = st.text(alphabet="0123456789٣²", min_size=0, max_size=12)
expressions = st.builds(lambda a, op, b, pad: f"{pad}{a}{op}{b}{pad}", digits, st.sampled_from(["+", "-", "++", " + "]),
                        digits, st.sampled_from(["", " ", "\n", "\t", "=", ";"]))


@FUZZ
@given(text=st.one_of(any_text, expressions, mutated(expressions)))
@example(text="1" * 5000 + "+1")  # an operand far past max_level digits (and past int()'s 4300-digit limit)
def test_arithmetic_parse_task_and_score(arithmetic, text):
    seed = arithmetic.seed_tasks()[0]
    task = check_parsed(arithmetic, text, seed)
    check_score(arithmetic, task or seed, text)


# =============================================================================================
# The shared tool-call format (BFCL, API-Bank)
# =============================================================================================

TYPE_NAMES = sorted(toolcall._TYPE_ALIASES) + ["String", " integer ", "varchar", "", "list[dict]", "Dict"]
names = st.one_of(st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,10}", fullmatch=True), st.text(max_size=10))
KNOWN_TYPES = sorted(toolcall._TYPE_ALIASES)


def param_specs(junk: bool) -> st.SearchStrategy[dict]:
    known = st.sampled_from(KNOWN_TYPES)
    return st.fixed_dictionaries(
        {"type": st.one_of(known, st.sampled_from(TYPE_NAMES), json_values) if junk else known},
        optional={"items": st.one_of(st.fixed_dictionaries({"type": known}), st.sampled_from(TYPE_NAMES), json_values),
                  "enum": st.lists(scalars, min_size=1, max_size=4), "default": scalars,
                  "description": st.text(max_size=10)})


@st.composite
def schemas(draw, junk: bool) -> dict:
    props = draw(st.dictionaries(names, param_specs(junk), max_size=3))
    required = draw(st.lists(st.sampled_from(sorted(props)), unique=True) if props else st.just([]))
    params = {"type": "dict", "properties": props, "required": required}
    name = draw(st.one_of(names, st.text(max_size=5)) if junk else st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True))
    return {"name": name, "description": draw(st.text(max_size=20)),
            "parameters": draw(st.one_of(st.just(params), json_values)) if junk else params}


def value_for(spec, junk: bool) -> st.SearchStrategy:
    kind = toolcall.canonical_type(spec.get("type")) if isinstance(spec, dict) else None
    items = spec.get("items") if isinstance(spec, dict) else None
    item = value_for(items, False) if isinstance(items, dict) else scalars
    typed = {"string": st.text(max_size=10), "integer": st.integers(), "float": st.floats(),
             "boolean": st.booleans(), "array": st.lists(item, max_size=3), "tuple": st.lists(item, max_size=3),
             "dict": st.dictionaries(st.text(max_size=5), scalars, max_size=3)}.get(kind or "", json_values)
    enum = spec.get("enum") if isinstance(spec, dict) and isinstance(spec.get("enum"), list) else []
    if enum and kind not in ("array", "tuple"):
        typed = st.sampled_from(enum)
    return st.one_of(typed, typed, json_values) if junk else typed


@st.composite
def calls_for(draw, tools: list, junk: bool = True) -> list:
    """Calls that fit `tools` (names, required parameters, types), or nearly, in every accepted shape."""
    out = []
    for _ in range(draw(st.integers(0, 3) if junk else st.integers(1, 2))):
        tool = draw(st.sampled_from(tools)) if tools and (not junk or draw(st.integers(0, 4))) else {}
        name = tool.get("name") if isinstance(tool, dict) and isinstance(tool.get("name"), str) else draw(names)
        spec = tool.get("parameters") if isinstance(tool, dict) else None
        props = spec.get("properties") if isinstance(spec, dict) else None
        params = {}
        if isinstance(props, dict):
            required = spec.get("required") if isinstance(spec.get("required"), list) else []
            for pname, pspec in props.items():
                if pname in required or draw(st.integers(0, 3)):
                    params[pname] = draw(value_for(pspec, junk))
        if junk and draw(st.integers(0, 5)) == 0:
            params[draw(st.text(max_size=5))] = draw(json_values)
        shapes = ["plain", "plain", "arguments", "arguments_str", "bfcl", "openai"] + (["junk"] if junk else [])
        shape = draw(st.sampled_from(shapes))
        if shape == "plain":
            out.append({"name": name, "parameters": params})
        elif shape == "arguments":
            out.append({"name": name, "arguments": params})
        elif shape == "arguments_str":
            out.append({"name": name, "arguments": render(params, draw(st.sampled_from(STYLES)), 0.5)})
        elif shape == "bfcl":
            out.append({name: params})
        elif shape == "openai":
            out.append({"type": "function", "function": {"name": name, "arguments": params}})
        else:
            out.append(draw(json_values))
    return out


@st.composite
def generated_tool_tasks(draw, seed_tools: list) -> dict:
    """Simulator objects {"question", "tools", "calls"} around a seed's tools: half of them well formed
    (so that the code after validation runs), half with junk anywhere."""
    junk = draw(st.booleans())
    kinds = ["seed_name", "seed_schema", "new", "new"] + (["junk"] if junk else [])
    tools = []
    for _ in range(draw(st.integers(0, 4) if junk else st.integers(1, 3))):
        kind = draw(st.sampled_from(kinds))
        if kind == "seed_name" and seed_tools:
            tools.append(draw(st.sampled_from(seed_tools))["name"])
        elif kind == "seed_schema" and seed_tools:
            tools.append(draw(st.sampled_from(seed_tools)))
        elif kind == "junk":
            tools.append(draw(json_values))
        else:
            tools.append(draw(schemas(junk)))
    resolved = [next((t for t in seed_tools if t["name"] == x), {}) if isinstance(x, str) else x for x in tools]
    question = st.one_of(st.text(max_size=80), st.just("Book a table for two."), json_values)
    obj = {"question": draw(question if junk else st.just("Book a table for two.")), "tools": tools,
           "calls": draw(calls_for(resolved, junk))}
    if junk and draw(st.integers(0, 5)) == 0:
        obj.pop(draw(st.sampled_from(sorted(obj))))
    if draw(st.integers(0, 5)) == 0:
        obj["answer"] = obj.pop("calls", [])
    return obj


def python_call(call) -> str:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return repr(call)
    params = call.get("parameters") if isinstance(call.get("parameters"), dict) else {}
    return f"{call['name']}(" + ", ".join(f"{k}={v!r}" for k, v in params.items()) + ")"


@st.composite
def agent_tool_outputs(draw, tools: list) -> str:
    """Agent outputs in the tool-call format, right, nearly right or broken."""
    calls = draw(calls_for(tools))
    style = draw(st.sampled_from(["lines", "list", "python", "python_list", "blocks", "fenced", "unclosed", "junk"]))
    if style == "lines":
        body = "\n".join(render(c, draw(st.sampled_from(STYLES)), draw(st.floats(0, 1))) for c in calls)
    elif style == "list":
        body = render(calls, draw(st.sampled_from(STYLES)), draw(st.floats(0, 1)))
    elif style == "python":
        body = "\n".join(python_call(c) for c in calls)
    elif style == "python_list":
        body = "[" + ", ".join(python_call(c) for c in calls) + "]"
    elif style == "blocks":
        return "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)
    elif style == "fenced":
        body = "```json\n" + json.dumps(calls) + "\n```"
    elif style == "unclosed":
        return "<think>" + draw(st.text(max_size=20)) + "<tool_call>" + json.dumps(calls)[: draw(st.integers(0, 200))]
    else:
        body = draw(any_text)
    prefix = draw(st.sampled_from(["", "<think>ok</think>\n", "<think>unclosed ", "</think>", "<response>hi</response>"]))
    suffix = draw(st.sampled_from(["", "</tool_call>", "</tool_call>\n<response>done</response>", "<tool_call>"]))
    return f"{prefix}<tool_call>\n{body}\n{suffix or '</tool_call>'}"


@FUZZ
@given(text=st.one_of(any_text, agent_tool_outputs([]), mutated(agent_tool_outputs([]))),
       other=st.one_of(st.none(), st.integers(), json_values))
def test_toolcall_parse_response_never_raises(text, other):
    for value in (text, other):
        parsed = toolcall.parse_response(value)
        assert isinstance(parsed, toolcall.ParsedResponse)
        for c in parsed.calls:
            assert isinstance(c["name"], str) and c["name"] and isinstance(c["parameters"], dict)


@FUZZ
@given(text=st.one_of(any_text, rendered(json_values)), obj=json_values)
@example(text="[" * 900 + "]" * 900, obj=None)  # canonical_value recursed past the interpreter's limit
def test_toolcall_helpers_raise_only_value_error(text, obj):
    for fn, arg in ((toolcall.loads_lenient, text), (toolcall.extract_json_object, text),
                    (toolcall.parse_python_calls, text), (toolcall.normalize_call, obj)):
        try:
            fn(arg)
        except ValueError:
            pass
    assert isinstance(toolcall.strip_fences(text), str)
    for value in (obj, text):  # API-Bank compares model-written arguments in a canonical form
        call = {"name": "f", "parameters": {"a": value}}
        other = {"name": "f", "parameters": {"a": "x"}}
        assert isinstance(calls_equal(call, other), bool)
        assert calls_equal(call, call) is True  # reflexive
        assert calls_equal(call, other) == calls_equal(other, call)  # symmetric
    pair = ({"name": "f", "parameters": {"a": obj}}, {"name": "f", "parameters": {"a": text}})
    assert calls_equal(*pair) == calls_equal(*pair[::-1])


SEED_TOOLS = [
    {"name": "get_weather", "description": "w", "parameters": {"type": "dict", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"type": "string", "enum": ["C", "F"]},
        "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["city"]}},
    {"name": "book", "description": "b", "parameters": {"type": "dict", "properties": {
        "when": {"type": "dict"}, "price": {"type": "float"}}, "required": []}},
]


@FUZZ
@given(text=model_text(generated_tool_tasks(SEED_TOOLS)))
@example(text=json.dumps({"question": "q?", "tools": [{"name": "f", "parameters": {
    "type": "dict", "properties": {"x": {"type": "array", "items": "string"}}, "required": ["x"]}}],
    "calls": [{"name": "f", "parameters": {"x": ["a"]}}]}))
def test_toolcall_parse_generated_task_raises_only_invalid_task(text):
    try:
        gen = toolcall.parse_generated_task(text, SEED_TOOLS)
    except InvalidTask:
        return
    assert gen.question and gen.tools and all(toolcall.call_problem(c, gen.tools) is None for c in gen.calls)


# ---- BFCL ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bfcl(data_root):
    from genenv_pl.envs.bfcl import SUPPORTED

    return _bench_env(data_root, "bfcl", "bfcl", categories=list(SUPPORTED))


@pytest.fixture(scope="module")
def bfcl_seeds(bfcl):
    """A few seeds of every scoring mode (simple, multiple, parallel, relevance, irrelevance, sequence),
    and of the Java and JavaScript categories (arguments read as source text)."""
    by_mode: dict[tuple, list[Task]] = {}
    for t in bfcl.seed_tasks() + bfcl.eval_tasks():
        key = (t.data["mode"], t.data.get("language"))
        if len(by_mode.setdefault(key, [])) < 3:
            by_mode[key].append(t)
    return [t for ts in by_mode.values() for t in ts]


ITEMS_NOT_A_DICT = json.dumps({"question": "List the files.", "tools": [{"name": "f", "description": "d", "parameters": {
    "type": "dict", "properties": {"x": {"type": "array", "items": "string"}}, "required": ["x"]}}],
    "calls": [{"name": "f", "parameters": {"x": ["a"]}}]})


@FUZZ
@given(data=st.data())
@example(data=ITEMS_NOT_A_DICT)
def test_bfcl_parse_task_and_score(bfcl, bfcl_seeds, data):
    if isinstance(data, str):  # an explicit example: the text, on each kind of seed
        for seed in bfcl_seeds:
            task = check_parsed(bfcl, data, seed)
            check_score(bfcl, task or seed, data)
        return
    seed = data.draw(st.sampled_from(bfcl_seeds))
    text = data.draw(model_text(generated_tool_tasks(seed.data["tools"])))
    task = check_parsed(bfcl, text, seed) or seed
    response = data.draw(st.one_of(any_text, agent_tool_outputs(task.data["tools"]),
                                   mutated(agent_tool_outputs(task.data["tools"]))))
    check_score(bfcl, task, response)


# ---- API-Bank -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def api_bank(data_root):
    return _bench_env(data_root, "api-bank", "api_bank")


@FUZZ
@given(data=st.data())
@example(data='{"a": ' * 900 + "1" + "}" * 900)  # the gold call with an argument nested 900 deep
def test_api_bank_parse_task_and_score(api_bank, data):
    seeds = api_bank.seed_tasks()
    if isinstance(data, str):  # explicit example: an argument value for the gold call of the first seed
        gold = seeds[0].data["gold"]
        check_score(api_bank, seeds[0], '<tool_call>{"name": "%s", "parameters": {"a": %s}}</tool_call>'
                    % (gold["name"], data))
        return
    seed = data.draw(st.sampled_from(seeds[:10] + seeds[-10:]))
    tools = api_bank._seed_tools(seed.data)
    text = data.draw(model_text(generated_tool_tasks(tools)))
    task = check_parsed(api_bank, text, seed) or seed
    gold = task.data["gold"]
    near_gold = st.builds(lambda v: [{"name": gold["name"], "parameters": v}],
                          st.one_of(st.just(gold["parameters"]), st.dictionaries(st.sampled_from(
                              sorted(gold["parameters"]) or ["x"]), json_values, max_size=3)))
    response = data.draw(st.one_of(any_text, agent_tool_outputs(task.data["tools"]),
                                   near_gold.map(lambda c: f"<tool_call>{json.dumps(c)}</tool_call>"),
                                   near_gold.map(toolcall.render_calls), deep_nesting().map(
                                       lambda s: '<tool_call>{"name": "%s", "parameters": {"a": %s}}</tool_call>'
                                       % (gold["name"], s))))
    check_score(api_bank, task, response)


# =============================================================================================
# ALFWorld: command grammar, agent output, generated steps
# =============================================================================================

OBJ_NAMES = ["apple", "mug", "desk", "countertop", "fridge", "sinkbasin", "desklamp", "cd", "drawer", "microwave"]
objects = st.builds(lambda n, i: f"{n} {i}", st.one_of(st.sampled_from(OBJ_NAMES), st.text("abcxyzİß", max_size=6)),
                    st.one_of(st.integers(0, 20), st.integers(0, 10**30), st.sampled_from(["٣", "²", "01", ""])))
TEMPLATES = ["go to {0}", "take {0} from {1}", "move {0} to {1}", "put {0} in/on {1}", "put {0} in {1}",
             "put {0} on {1}", "open {0}", "close {0}", "toggle {0}", "use {0}", "examine {0}", "clean {0} with {1}",
             "heat {0} with {1}", "cool {0} with {1}", "slice {0} with {1}", "look", "inventory", "help"]


@st.composite
def commands(draw) -> str:
    cmd = draw(st.sampled_from(TEMPLATES)).format(draw(objects), draw(objects))
    deco = draw(st.sampled_from(["", "upper", "quote", "prompt", "period", "spaces", "action"]))
    return {"": cmd, "upper": cmd.upper(), "quote": f"`{cmd}`", "prompt": f"> {cmd}", "period": cmd + ".",
            "spaces": "  " + cmd.replace(" ", "   ") + " \n", "action": f"Action: {cmd}"}[deco]


any_command = st.one_of(commands(), commands(), st.text(max_size=30), fragments)


@st.composite
def alfworld_steps(draw) -> dict:
    mentioned = draw(st.lists(objects, max_size=5))
    obs = "You are in the middle of a room. You see " + ", ".join(f"a {o}" for o in mentioned) + "."
    history = draw(st.lists(st.one_of(
        st.fixed_dictionaries({"action": any_command, "observation": st.text(max_size=30)}),
        st.tuples(any_command, st.text(max_size=20)).map(list), json_values), max_size=4))
    obj = {"task": draw(st.one_of(st.just("Your task is to: put a mug in desk."), st.text(max_size=30), json_values)),
           "observation": draw(st.one_of(st.just(obs), st.text(max_size=60), json_values)), "history": history,
           draw(st.sampled_from(["gold", "action", "gold_action"])): draw(st.one_of(any_command, json_values))}
    if draw(st.booleans()):
        obj["admissible_commands"] = draw(st.one_of(st.lists(any_command, max_size=6), json_values))
    return obj


@st.composite
def alfworld_outputs(draw) -> str:
    cmd = draw(any_command)
    return draw(st.sampled_from([
        f"<think>{draw(st.text(max_size=20))}</think>\n<response>{cmd}</response>",
        f"<response>I will do it.\n{cmd}</response>", f"<think>x</think><response>{cmd}", f"{cmd}",
        f"<think>never closed {cmd}", f"<response>a</response><response>{cmd}</response>", f"Action: {cmd}\n\n",
    ]))


ALFWORLD_TASKS = [
    Task(id="t", data={"task": "put a mug in desk.", "observation": "You see a desk 1 and a mug 1.", "history": [],
                       "gold": "take mug 1 from desk 1"}),
    Task(id="t2", data={"task": "put a mug in desk.", "observation": "You see a desk 1 and a mug 1.", "history": [],
                        "gold": "move mug 1 to desk 1",
                        "admissible_commands": ["move mug 1 to desk 1", "look", "go to desk 1"]}),
]


@pytest.fixture(scope="module")
def alfworld(data_root, tmp_path_factory):
    """The environment object only: parse_task and score need no game replay (seed_tasks() would)."""
    return _bench_env(data_root, "alfworld", "alfworld", cache_dir=str(tmp_path_factory.mktemp("alfworld-cache")))


@FUZZ
@given(data=st.data())
@example(data='{"task": ' + HUGE + "}")  # json raises ValueError (not JSONDecodeError) past 4300 digits
@example(data='{"a": ' * 3000 + "1" + "}" * 3000)  # RecursionError in the JSON decoder
def test_alfworld_parse_task_and_score(alfworld, data):
    seed = Task(id="alfworld/seed/0", data=ALFWORLD_TASKS[0].data, group="valid_seen/pick_and_place_simple",
                meta={"task_type": "pick_and_place_simple"})
    if isinstance(data, str):
        assert check_parsed(alfworld, data, seed) is None
        return
    text = data.draw(model_text(alfworld_steps()))
    task = check_parsed(alfworld, text, seed)
    for t in [task] if task else ALFWORLD_TASKS:
        scores = check_score(alfworld, t, data.draw(st.one_of(any_text, alfworld_outputs())))
        assert scores["format_error"] in (0.0, 1.0) and scores["admissible"] in (0.0, 1.0)


@FUZZ
@given(step=st.one_of(alfworld_steps(), json_values.filter(lambda v: isinstance(v, dict))),
       text=st.one_of(any_text, alfworld_outputs()), cmd=any_command)
def test_alfworld_grammar_never_raises(step, text, cmd):
    try:
        data = validate_generated_step(step)
    except InvalidTask:
        pass
    else:
        assert grammar.parse_command(data["gold"]) is not None
        grammar.agent_messages(data)
    action, ok = grammar.parse_agent_output(text)
    assert isinstance(action, str) and isinstance(ok, bool)
    assert grammar.parse_command(cmd) is None or isinstance(grammar.parse_command(cmd), grammar.Command)
    assert isinstance(grammar.canonical_action(cmd), str) and isinstance(grammar.actions_match(text, cmd), bool)
    assert isinstance(grammar.mentioned_objects(text), set)


# =============================================================================================
# Bamboogle
# =============================================================================================

@pytest.fixture(scope="module")
def bamboogle(data_root):
    return _bench_env(data_root, "bamboogle", "bamboogle")


bamboogle_objects = st.fixed_dictionaries(
    {"question": st.one_of(st.text(max_size=120), st.just("Who founded the company that makes the iPhone?"), json_values),
     "answer": st.one_of(st.text(max_size=30), st.just("Steve Jobs"), st.integers(), st.floats(), json_values),
     "hops": st.one_of(st.lists(st.one_of(st.text(max_size=30), st.fixed_dictionaries({"question": st.text(max_size=20)})),
                                max_size=3), json_values)})


@st.composite
def bamboogle_outputs(draw, gold: str) -> str:
    answer = draw(st.one_of(st.just(gold), st.just(gold.upper() + "."), st.text(max_size=20), fragments))
    return draw(st.sampled_from([
        f"<think>{draw(st.text(max_size=20))}</think><response>{answer}</response>", f"<response>{answer}",
        f"Answer: {answer}", f"<think>x</think>\n{answer}\n",
        f'<tool_call>{{"name": "search", "parameters": {{"query": {json.dumps(answer)}}}}}</tool_call>',
        f"<tool_call>{answer}</tool_call>", answer,
    ]))


@FUZZ
@given(data=st.data())
def test_bamboogle_parse_task_and_score(bamboogle, data):
    seed = data.draw(st.sampled_from(bamboogle.seed_tasks()))
    text = data.draw(model_text(bamboogle_objects))
    task = check_parsed(bamboogle, text, seed) or seed
    response = data.draw(st.one_of(any_text, bamboogle_outputs(task.data["answer"])))
    scores = check_score(bamboogle, task, response)
    assert 0.0 <= scores["f1"] <= 1.0 and scores["exact_match"] in (0.0, 1.0)


@FUZZ
@given(text=st.one_of(any_text, bamboogle_outputs("James Madison")), gold=st.text(max_size=20))
def test_answer_extraction_never_raises(text, gold):
    answer, ok = parse_answer(text)
    assert isinstance(answer, str) and isinstance(ok, bool)
    query = parse_tool_call(text)
    assert query is None or (isinstance(query, str) and query)
    assert 0.0 <= token_f1(answer, gold) <= 1.0 and isinstance(normalize_answer(text), str)
    assert extract_json_object(text) is None or isinstance(extract_json_object(text), dict)
    assert extract_tag(text, "response") is None or isinstance(extract_tag(text, "response"), str)
    assert isinstance(strip_tag_blocks(text, "think"), str)


# =============================================================================================
# TravelPlanner: query parsing (simulator side) and plan parsing (agent side)
# =============================================================================================

@pytest.fixture(scope="module")
def travelplanner(data_root):
    return _bench_env(data_root, "travelplanner", "travelplanner")


QUERY_PHRASES = [
    "a solitary city", "a single city", "just one city", "only one city", "2 cities", "three cities", "for 3 people",
    "a group of four", "a party of 12", "for 99", "a couple", "solo", "no flights", "not self-driving",
    "without driving", "private room", "entire home", "not shared", "shared room", "unshared", "pets", "smoking",
    "parties", "children under 10", "visitors", *CUISINES, "March 32nd", "March 0", "February 30th", "5 days",
    "a week", "3-day", "$", "$" + "9" * 30, "$" + HUGE, "2023", "from", "to", "between", "and", "the 8th to the 10th of March",
]


@st.composite
def queries(draw, seed_query: str, cities: list[str]) -> str:
    words = seed_query.split()
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["insert", "insert", "replace", "delete"]))
        i = draw(st.integers(0, len(words)))
        phrase = draw(st.one_of(st.sampled_from(QUERY_PHRASES), st.sampled_from(cities), st.text(max_size=8)))
        phrase = draw(st.sampled_from([phrase, phrase.upper(), phrase.title(), phrase.lower()]))
        if op == "insert":
            words.insert(i, phrase)
        elif op == "replace" and words:
            words[min(i, len(words) - 1)] = phrase
        elif words:
            del words[min(i, len(words) - 1)]
    return " ".join(words)


@st.composite
def travel_objects(draw, seed: Task, cities: list[str]) -> dict:
    constraint_values = {"house rule": sorted(HOUSE_RULES), "room type": sorted(ROOM_TYPES),
                         "transportation": list(TRANSPORT_RULES)}
    lc = {}
    for key in ("house rule", "cuisine", "room type", "transportation"):
        if draw(st.integers(0, 2)):
            options = st.lists(st.sampled_from(CUISINES), max_size=3) if key == "cuisine" else st.sampled_from(
                constraint_values[key])
            lc[key] = draw(st.one_of(st.none(), options, json_values))
    obj = {"query": draw(st.one_of(queries(seed.data["query"], cities), queries(seed.data["query"], cities),
                                   st.text(max_size=50))),
           "people_number": draw(st.one_of(st.just(seed.data["people_number"]), st.integers(0, 10), json_values)),
           "budget": draw(st.one_of(st.just(seed.data["budget"]), st.integers(0, 20000), json_values)),
           "local_constraint": draw(st.one_of(st.just(lc), st.just(lc), json_values))}
    for key in draw(st.lists(st.sampled_from(["people_number", "budget", "local_constraint"]), unique=True, max_size=2)):
        obj.pop(key)
    return obj


def _plan_text(plan, style: str) -> str:
    if style == "day_text":
        lines = []
        for i, day in enumerate(plan if isinstance(plan, list) else [], 1):
            lines.append(f"Day {i}:")
            for k, v in (day.items() if isinstance(day, dict) else []):
                lines.append(f"{str(k).replace('_', ' ').title()}: {v}")
        return "\n".join(lines)
    return render(plan, style, 0.7)


@st.composite
def plan_outputs(draw, seed: Task) -> str:
    plan = json.loads(json.dumps(seed.meta.get("gold_plan") or [{"days": 1}]))
    for _ in range(draw(st.integers(0, 3))):
        day = draw(st.sampled_from(plan)) if plan else None
        op = draw(st.sampled_from(["set", "drop", "add_day", "drop_day", "swap"]))
        if op == "set" and isinstance(day, dict):
            key = draw(st.one_of(st.sampled_from(sorted(day) or ["days"]), st.text(max_size=6)))
            day[key] = draw(st.one_of(json_values, st.sampled_from(["-", "", "Flight Number: F0123456, from A to B",
                                                                   "Self-driving, from Rockford to Rockford",
                                                                   "Taxi, from x to y", "Cost: 14"])))
        elif op == "drop" and isinstance(day, dict) and day:
            day.pop(draw(st.sampled_from(sorted(day))))
        elif op == "add_day":
            # plan[0] may itself be an earlier added non-dict day (moved there by a swap)
            plan.append(draw(st.one_of(json_values, st.just(dict(plan[0]) if plan and isinstance(plan[0], dict) else {}))))
        elif op == "drop_day" and plan:
            plan.pop(draw(st.integers(0, len(plan) - 1)))
        elif op == "swap" and len(plan) > 1:
            plan[0], plan[-1] = plan[-1], plan[0]
    text = _plan_text(plan, draw(st.sampled_from([*STYLES, "day_text", "day_text"])))
    return draw(st.sampled_from([f"<think>plan</think><response>{text}</response>", text, f"<response>{text}",
                                 f"Here is the plan: {text} Enjoy!"]))


@FUZZ
@given(data=st.data())
@example(data="a Solitary city")  # _num('Solitary') raised KeyError
@example(data=json.dumps({"house rule": ["pets"]}))  # unhashable JSON value checked against the allowed names
@example(data=json.dumps({"cuisine": [1, "Indian"]}))  # sorted() of mixed types raised TypeError
def test_travelplanner_parse_task_and_score(travelplanner, data):
    seeds = travelplanner.seed_tasks()
    cities = sorted(travelplanner.sandbox.city_state)
    if isinstance(data, str):  # explicit examples: a phrase or a local_constraint on the first seed
        seed = seeds[0]
        if data.startswith("{"):
            text = json.dumps({"query": seed.data["query"].replace("$1,700", "$4,000"), "local_constraint": json.loads(data)})
        else:
            text = json.dumps({"query": seed.data["query"] + " We visit " + data + "."})
        check_parsed(travelplanner, text, seed)
        return
    seed = data.draw(st.sampled_from(seeds))
    text = data.draw(model_text(travel_objects(seed, cities)))
    task = check_parsed(travelplanner, text, seed) or seed
    response = data.draw(st.one_of(any_text, plan_outputs(seed), mutated(plan_outputs(seed))))
    scores = check_score(travelplanner, task, response)
    assert scores["delivered"] in (0.0, 1.0)


@FUZZ
@given(data=st.data())
def test_travelplanner_query_and_plan_parsers(travelplanner, data):
    seed = data.draw(st.sampled_from(travelplanner.seed_tasks()))
    cities = sorted(travelplanner.sandbox.city_state)
    query = data.draw(st.one_of(queries(seed.data["query"], cities), any_text))
    try:  # documented: ValueError when the text is not a usable query
        spec = parse_query(query, travelplanner.sandbox.city_state, travelplanner.sandbox.states - {"None"})
    except ValueError:
        pass
    else:
        assert spec["days"] in (3, 5, 7) and 1 <= spec["people_number"] and spec["budget"] >= 0
    plan = parse_plan(data.draw(st.one_of(any_text, plan_outputs(seed))))
    assert plan is None or (isinstance(plan, list) and all(isinstance(d, dict) for d in plan))
