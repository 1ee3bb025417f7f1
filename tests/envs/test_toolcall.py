"""The shared tool-call format: tolerant parsing of agent outputs and simulator generations."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from genenv_pl.envs.base import InvalidTask
from genenv_pl.envs.toolcall import (
    agent_system_prompt,
    extract_json_object,
    merge_consecutive,
    parse_generated_task,
    parse_response,
    render_calls,
    value_fits,
)

F = {"name": "f", "parameters": {"a": 1}}
G = {"name": "g", "parameters": {"city": "Paris", "days": [1, 2]}}

# (label, agent output, expected calls, expected format error)
CASES = [
    ("canonical", '<think>easy</think>\n<tool_call>\n{"name": "f", "parameters": {"a": 1}}\n</tool_call>',
     [F], False),
    ("two calls, one per line", '<tool_call>\n{"name": "f", "parameters": {"a": 1}}\n'
     '{"name": "g", "parameters": {"city": "Paris", "days": [1, 2]}}\n</tool_call>', [F, G], False),
    ("extra whitespace and indentation", '  <tool_call>   \n\n     {"name":"f",   "parameters": {"a":1}}   \n'
     '  </tool_call>  ', [F], False),
    ("pretty-printed object", '<tool_call>\n{\n  "name": "f",\n  "parameters": {\n    "a": 1\n  }\n}\n</tool_call>',
     [F], False),
    ("code fence in the block", '<tool_call>\n```json\n{"name": "f", "parameters": {"a": 1}}\n```\n</tool_call>',
     [F], False),
    ("inline code fence", '<tool_call>```json {"name": "f", "parameters": {"a": 1}} ```</tool_call>', [F], False),
    ("missing closing tag at the end", '<think>x</think><tool_call>\n{"name": "f", "parameters": {"a": 1}}\n',
     [F], False),
    ("python literal, single quotes", "<tool_call>{'name': 'g', 'parameters': {'city': 'Paris', 'days': (1, 2)}}"
     "</tool_call>", [G], False),
    ("single quotes with JSON keywords", "<tool_call>{'name': 'h', 'parameters': {'ok': true, 'x': null}}</tool_call>",
     [{"name": "h", "parameters": {"ok": True, "x": None}}], False),
    ("trailing commas", '<tool_call>{"name": "f", "parameters": {"a": 1,},}</tool_call>', [F], False),
    ("Qwen 'arguments' key", '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>', [F], False),
    ("OpenAI arguments as a JSON string", '<tool_call>{"type": "function", "function": {"name": "f", '
     '"arguments": "{\\"a\\": 1}"}}</tool_call>', [F], False),
    ("JSON list of calls", '<tool_call>[{"name": "f", "parameters": {"a": 1}}, '
     '{"name": "g", "parameters": {"city": "Paris", "days": [1, 2]}}]</tool_call>', [F, G], False),
    ("one block per call (Qwen)", '<tool_call>\n{"name": "f", "parameters": {"a": 1}}\n</tool_call>\n'
     '<tool_call>\n{"name": "g", "parameters": {"city": "Paris", "days": [1, 2]}}\n</tool_call>', [F, G], False),
    ("second block opened before the first closed", '<tool_call>{"name": "f", "parameters": {"a": 1}}'
     '<tool_call>{"name": "g", "parameters": {"city": "Paris", "days": [1, 2]}}</tool_call>', [F, G], False),
    ("BFCL python call syntax", "<tool_call>[f(a=1), g(city='Paris', days=[1, 2])]</tool_call>", [F, G], False),
    ("python calls one per line", "<tool_call>\nf(a=1)\ng(city='Paris', days=[1, 2])\n</tool_call>", [F, G], False),
    ("dotted function name", "<tool_call>math.gcd(a=1)</tool_call>", [{"name": "math.gcd", "parameters": {"a": 1}}],
     False),
    ("BFCL dict shape", '<tool_call>{"f": {"a": 1}}</tool_call>', [F], False),
    ("no parameters key", '<tool_call>{"name": "get_today"}</tool_call>', [{"name": "get_today", "parameters": {}}],
     False),
    ("'function' as the name key", '<tool_call>{"function": "f", "parameters": {"a": 1}}</tool_call>', [F], False),
    ("upper-case tags", '<TOOL_CALL>{"name": "f", "parameters": {"a": 1}}</TOOL_CALL>', [F], False),
    ("braces inside string values", '<tool_call>{"name": "g", "parameters": {"city": "P{a}r[i]s \\"x\\""}}</tool_call>',
     [{"name": "g", "parameters": {"city": 'P{a}r[i]s "x"'}}], False),
    ("call drafted inside <think> only", '<think>maybe <tool_call>{"name": "f", "parameters": {}}</tool_call></think>'
     "<response>No tool fits.</response>", [], False),
    ("unclosed <think> before the call", '<think>hmm, f fits\n<tool_call>{"name": "f", "parameters": {"a": 1}}'
     "</tool_call>", [F], False),
    ("lone </think> (opened by the template)", 'draft <tool_call>{"name": "x"}</tool_call></think>\n'
     '<tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>', [F], False),
    ("prose only", "The weather in Paris is sunny.", [], False),
    ("response only", "<think>none fits</think><response>I cannot help with that.</response>", [], False),
    ("empty block", "<tool_call>\n</tool_call>", [], False),
    ("broken JSON", '<tool_call>{"name": "f", "parameters": {"a": }}</tool_call>', [], True),
    ("truncated generation", '<tool_call>\n{"name": "f", "parameters": {"a": 1', [], True),
    ("prose inside the block", "<tool_call>I will call f with a=1</tool_call>", [], True),
    ("positional arguments", "<tool_call>f(1, 2)</tool_call>", [], True),
    ("code, never executed", "<tool_call>__import__('os').system('echo pwned')</tool_call>", [], True),
    ("non-literal argument", "<tool_call>f(a=open('/etc/passwd').read())</tool_call>", [], True),
    ("object without a name", '<tool_call>{"parameters": {"a": 1}}</tool_call>', [], True),
    ("parameters not an object", '<tool_call>{"name": "f", "parameters": [1, 2]}</tool_call>', [], True),
    ("unexpected keys", '<tool_call>{"name": "f", "parameters": {}, "reason": "x"}</tool_call>', [], True),
    ("a set literal", "<tool_call>{'name': 'f', 'parameters': {'a': {1, 2}}}</tool_call>", [], True),
]


@pytest.mark.parametrize("label,text,calls,error", CASES, ids=[c[0] for c in CASES])
def test_parse_response(label: str, text: str, calls: list, error: bool) -> None:
    parsed = parse_response(text)
    assert parsed.calls == calls
    assert parsed.format_error is error


def test_response_text_and_block_flag() -> None:
    parsed = parse_response("<think>x</think><response> Done. </response>")
    assert parsed.response == "Done." and not parsed.has_tool_block
    assert parse_response("<tool_call></tool_call>").has_tool_block


@pytest.mark.parametrize("value", [None, 123, b"<tool_call>", ["<tool_call>"]])
def test_parse_response_non_text(value) -> None:
    assert parse_response(value).calls == []


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(list("{}[]()'\",:=\\ \nabc1_.`<>/") + [
    "<tool_call>", "</tool_call>", "<think>", "</think>", "<response>", "true", "name", "parameters"]), max_size=60))
def test_parse_response_never_raises(tokens: list[str]) -> None:
    parsed = parse_response("".join(tokens))
    assert all(isinstance(c["name"], str) and isinstance(c["parameters"], dict) for c in parsed.calls)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6)
call_strategy = st.fixed_dictionaries({
    "name": st.from_regex(r"[A-Za-z_][A-Za-z0-9_.]{0,12}", fullmatch=True),
    "parameters": st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), json_values, max_size=4)})


@settings(max_examples=100, deadline=None)
@given(st.lists(call_strategy, min_size=1, max_size=3))
def test_render_then_parse_round_trip(calls: list) -> None:
    parsed = parse_response("<think>ok</think>\n" + render_calls(calls))
    assert not parsed.format_error and parsed.calls == calls


# ---- simulator output ---------------------------------------------------------------------------

WEATHER = {"name": "get_weather", "description": "Weather for a city.", "parameters": {
    "type": "dict", "properties": {
        "city": {"type": "string", "description": "City name."},
        "days": {"type": "integer", "description": "Forecast days."},
        "unit": {"type": "string", "enum": ["C", "F"], "description": "Unit."},
        "hourly": {"type": "boolean", "description": "Hourly detail."},
        "scale": {"type": "float", "description": "Zoom."},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags."}},
    "required": ["city", "days"]}}
SEED_TOOLS = [WEATHER]


def gen(question="Weather in Oslo for 3 days?", tools=("get_weather",), calls=None) -> str:
    calls = [{"name": "get_weather", "parameters": {"city": "Oslo", "days": 3}}] if calls is None else calls
    return json.dumps({"question": question, "tools": list(tools), "calls": calls})


GOOD = [
    ("seed tool by name", gen()),
    ("full schema", gen(tools=[WEATHER])),
    ("prose, think and fences around it", "<think>a harder one</think>Here it is:\n```json\n" + gen() + "\n```"),
    ("python literal", str(json.loads(gen()))),
    ("optional args of every type", gen(calls=[{"name": "get_weather", "parameters": {
        "city": "Oslo", "days": 3, "unit": "F", "hourly": False, "scale": 2, "tags": ["a"]}}])),
    ("None for an optional argument", gen(calls=[{"name": "get_weather", "parameters": {
        "city": "Oslo", "days": 3, "unit": None}}])),
    ("no call fits", gen(question="Book me a taxi.", calls=[])),
    ("'arguments' key", gen(calls=[{"name": "get_weather", "arguments": {"city": "Oslo", "days": 3}}])),
]

BAD = [
    ("no JSON", "Sure! Here is a harder task: ask about the weather.", "unparseable"),
    ("truncated JSON", gen()[:-20], "unparseable"),
    ("no question", json.dumps({"tools": ["get_weather"], "calls": []}), "bad_question"),
    ("empty question", gen(question="  "), "bad_question"),
    ("no tools", gen(tools=[]), "bad_tools"),
    ("unknown seed tool name", gen(tools=["get_wether"]), "unknown_tool"),
    ("schema with an unknown type", gen(tools=[{**WEATHER, "parameters": {
        "type": "dict", "properties": {"city": {"type": "location"}}, "required": []}}], calls=[]), "bad_tools"),
    ("required names an undeclared parameter", gen(tools=[{"name": "t", "parameters": {
        "type": "dict", "properties": {}, "required": ["x"]}}], calls=[]), "bad_tools"),
    ("duplicate tools", gen(tools=["get_weather", WEATHER]), "bad_tools"),
    ("call to an unlisted function", gen(calls=[{"name": "get_time", "parameters": {}}]), "unknown_function"),
    ("missing required argument", gen(calls=[{"name": "get_weather", "parameters": {"city": "Oslo"}}]),
     "missing_required"),
    ("undeclared argument", gen(calls=[{"name": "get_weather", "parameters": {"city": "Oslo", "days": 3, "zip": 1}}]),
     "unknown_param"),
    ("string for integer", gen(calls=[{"name": "get_weather", "parameters": {"city": "Oslo", "days": "3"}}]),
     "bad_type"),
    ("boolean for integer", gen(calls=[{"name": "get_weather", "parameters": {"city": "Oslo", "days": True}}]),
     "bad_type"),
    ("value outside the enum", gen(calls=[{"name": "get_weather", "parameters": {
        "city": "Oslo", "days": 3, "unit": "K"}}]), "bad_type"),
    ("wrong item type", gen(calls=[{"name": "get_weather", "parameters": {
        "city": "Oslo", "days": 3, "tags": [1]}}]), "bad_type"),
    ("None for a required argument", gen(calls=[{"name": "get_weather", "parameters": {"city": None, "days": 3}}]),
     "bad_type"),
    ("call is not an object", gen(calls=["get_weather(city='Oslo')"]), "bad_call"),
    ("calls not a list", json.dumps({"question": "q", "tools": ["get_weather"], "calls": "none"}), "bad_call"),
]


@pytest.mark.parametrize("label,text", GOOD, ids=[g[0] for g in GOOD])
def test_parse_generated_task_good(label: str, text: str) -> None:
    task = parse_generated_task(text, SEED_TOOLS)
    assert task.question and task.tools[0]["name"] == "get_weather"
    assert all(c["name"] == "get_weather" for c in task.calls)


@pytest.mark.parametrize("label,text,reason", BAD, ids=[b[0] for b in BAD])
def test_parse_generated_task_bad(label: str, text: str, reason: str) -> None:
    with pytest.raises(InvalidTask) as err:
        parse_generated_task(text, SEED_TOOLS)
    assert err.value.reason == reason


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["question", "tools", "calls", "name", "parameters", "required"]),
                       json_values | st.lists(json_values | st.sampled_from(["get_weather", WEATHER]), max_size=3),
                       max_size=4))
def test_parse_generated_task_only_raises_invalid_task(obj: dict) -> None:
    """Arbitrary JSON-shaped generations are either accepted or rejected with InvalidTask."""
    try:
        task = parse_generated_task(json.dumps(obj), SEED_TOOLS)
    except InvalidTask as e:
        assert e.reason
    else:
        assert task.question and task.tools


@pytest.mark.parametrize("value,spec,fits", [
    (3, {"type": "integer"}, True), (3.0, {"type": "integer"}, False), (True, {"type": "integer"}, False),
    (3, {"type": "float"}, True), (2.5, {"type": "number"}, True), ("x", {"type": "String"}, True),
    (True, {"type": "Boolean"}, True), ([1], {"type": "tuple"}, True), ({"a": 1}, {"type": "dict"}, True),
    ({"a": 1}, {"type": "object"}, True), (None, {"type": "any"}, True), ("2023-01-01", {"type": "datetime"}, True),
    (["a", "b"], {"type": "array", "enum": ["a", "b", "c"]}, True), (["d"], {"type": "array", "enum": ["a"]}, False),
    ([[1]], {"type": "array", "items": {"type": "array"}}, True), (1, {"type": "mystery"}, False),
])
def test_value_fits(value, spec, fits) -> None:
    assert value_fits(value, spec) is fits


def test_extract_json_object() -> None:
    assert extract_json_object('noise [1, 2] then {"a": "}{"} tail') == {"a": "}{"}
    assert extract_json_object("<think>{'draft': 1}</think> {'final': true}") == {"final": True}
    with pytest.raises(ValueError):
        extract_json_object("no object here [1, 2]")


def test_prompt_helpers() -> None:
    system = agent_system_prompt([WEATHER], context="Extra context.")
    assert json.dumps(WEATHER) in system and "<tool_call>" in system and "Extra context." in system
    merged = merge_consecutive([{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                                {"role": "assistant", "content": "c"}])
    assert merged == [{"role": "user", "content": "a\n\nb"}, {"role": "assistant", "content": "c"}]
