"""The shared tool-call text format of the benchmarks (reasoning in `<think>`, one JSON call per line in
`<tool_call>`, final text in `<response>`): prompts, a tolerant parser, checks.

Agent side. The system prompt lists the tools (one JSON schema per line inside `<tools>`), and the
agent answers

    <think>...</think>
    <tool_call>
    {"name": "get_weather", "parameters": {"city": "Paris"}}
    {"name": "get_time", "parameters": {"zone": "CET"}}
    </tool_call>
    <response>...</response>          (optional final text)

`parse_response` reads that back and never raises. Small models rarely write it exactly, so it
accepts: code fences, several `<tool_call>` blocks, a missing closing tag at the end, a JSON list
of calls, pretty-printed (multi-line) objects, Python literals (single quotes, True/None),
`"arguments"` instead of `"parameters"` (Qwen's native key, also as a JSON string), the BFCL
shape `{"func": {...args}}`, and Python call syntax `func(a=1, b='x')`. Literals are read with
`json` or `ast.literal_eval` on literal nodes only; nothing is ever evaluated or executed.
Text inside `<think>` is ignored, so a call drafted while thinking does not count.

Simulator side. A generated task is one JSON object
`{"question": str, "tools": [schema | seed tool name, ...], "calls": [{"name", "parameters"}]}`;
`parse_generated_task` extracts and validates it (every call names a listed tool, has every
required parameter, no unknown parameter, values fit the declared types and enums) and raises
`InvalidTask(reason)` otherwise. A request-only generation `{"question": str, "calls": [...]}` keeps
the seed's tools (short enough for a small model to write; `parse_generated_request`). Tool schemas use BFCL's JSON shape
`{"name", "description", "parameters": {"type": "dict", "properties": {...}, "required": [...]}}`.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from genenv_pl.envs.base import InvalidTask, Message
from genenv_pl.envs.prompting import success_guide

ToolCall = dict[str, Any]  # {"name": str, "parameters": dict[str, Any]}
ToolSchema = dict[str, Any]

MAX_PARSE_CHARS = 30_000  # agent outputs are cut here: parsing cost stays bounded on runaway generations
MAX_TASK_CHARS = 200_000  # simulator outputs carry whole tool schemas, so they may be longer

# ---------------------------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------------------------

FORMAT_INSTRUCTIONS = """\
# Output format
First think inside <think>...</think>. Then, to call functions, write one JSON object per line \
inside <tool_call>...</tool_call>:
<tool_call>
{"name": "<function name>", "parameters": {"<argument>": <value>, ...}}
</tool_call>
Use only the functions listed above, give every required argument, and write values with the \
declared JSON types. Several independent calls go on several lines of the same block. If no \
listed function fits the request, or a required value is missing, call nothing and explain \
inside <response>...</response>. Any final text for the user goes inside <response>...</response>."""


def render_tools(tools: list[ToolSchema]) -> str:
    """Tools as one compact JSON schema per line inside <tools>: short, and unambiguous to parse."""
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return f"<tools>\n{lines}\n</tools>"


def agent_system_prompt(tools: list[ToolSchema], preamble: str = "", context: str = "") -> str:
    """The agent's system message: role, tool list, optional task context, output format."""
    intro = preamble or "You are an assistant that completes the user's request by calling functions."
    parts = [intro, "# Functions\n" + render_tools(tools)]
    if context:
        parts.append(context)
    parts.append(FORMAT_INSTRUCTIONS)
    return "\n\n".join(parts)


def render_calls(calls: list[ToolCall]) -> str:
    """Calls in the agent's format (used for gold history turns and warm-start targets)."""
    lines = "\n".join(json.dumps({"name": c["name"], "parameters": c["parameters"]}, ensure_ascii=False)
                      for c in calls)
    return f"<tool_call>\n{lines}\n</tool_call>"


def merge_consecutive(messages: list[Message]) -> list[Message]:
    """Join neighbouring messages of the same role: many chat templates require alternation."""
    out: list[Message] = []
    for m in messages:
        if out and out[-1]["role"] == m["role"]:
            out[-1] = {"role": m["role"], "content": out[-1]["content"] + "\n\n" + m["content"]}
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return out


# ---------------------------------------------------------------------------------------------
# Tolerant literal reading
# ---------------------------------------------------------------------------------------------

_JSON_WORDS = {"true": "True", "false": "False", "null": "None"}


def _pythonize_words(s: str) -> str:
    """Replace bare JSON words (true/false/null) outside string literals by Python ones, so
    text mixing single quotes and JSON keywords can go through `ast.literal_eval`."""
    out: list[str] = []
    i, n, quote = 0, len(s), ""
    while i < n:
        ch = s[i]
        if quote:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(s[i + 1])
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
            out.append(ch)
        elif ch.isalpha() or ch == "_":
            j = i
            while j < n and (s[j].isalnum() or s[j] == "_"):
                j += 1
            word = s[i:j]
            out.append(_JSON_WORDS.get(word, word))
            i = j
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _jsonable(x: Any) -> Any:
    """Tuples become lists; anything JSON cannot hold (sets, bytes, complex, non-str keys) fails."""
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, dict):
        if not all(isinstance(k, str) for k in x):
            raise ValueError("non-string key")
        return {k: _jsonable(v) for k, v in x.items()}
    raise ValueError(f"not a JSON value: {type(x).__name__}")


def loads_lenient(s: str) -> Any:
    """JSON, else a Python literal (single quotes, True/None, trailing commas). Raises ValueError."""
    s = s.strip()
    try:
        return json.loads(s)
    except (ValueError, RecursionError):
        pass
    try:
        return _jsonable(ast.literal_eval(_pythonize_words(s)))
    except Exception as e:  # SyntaxError, ValueError, RecursionError, MemoryError on odd input
        raise ValueError(f"not a literal: {e}") from None


def _balanced_segments(s: str) -> tuple[list[str], str]:
    """Top-level `{...}` / `[...]` segments of `s` (quotes respected) and the text outside them.
    An unclosed segment runs to the end of `s`."""
    segs: list[str] = []
    outside: list[str] = []
    depth, start, quote = 0, 0, ""
    i = 0
    while i < len(s):
        ch = s[i]
        if depth and quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = ""
        elif depth and ch in "\"'":
            quote = ch
        elif ch in "{[":
            if depth == 0:
                start = i
            depth += 1
        elif ch in "}]" and depth:
            depth -= 1
            if depth == 0:
                segs.append(s[start:i + 1])
        elif depth == 0:
            outside.append(ch)
        i += 1
    if depth:
        segs.append(s[start:])
    return segs, "".join(outside)


# A fence is a line of its own; a JSON string holding ``` (escaped newlines) is left alone.
_FENCE = re.compile(r"^[ \t]*```[A-Za-z0-9_+-]*[ \t]*$", re.MULTILINE)


def strip_fences(s: str) -> str:
    return _FENCE.sub("", s)


def extract_json_object(text: str) -> dict[str, Any]:
    """The first JSON-like object in free text (fences, prose and <think> around it are fine).
    Raises ValueError when there is none."""
    text = _strip_think(text[:MAX_TASK_CHARS])  # fences need no care: text outside {...} is skipped
    segs, _ = _balanced_segments(text)
    for seg in segs:
        if not seg.startswith("{"):
            continue
        try:
            obj = loads_lenient(seg)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    raise ValueError("no JSON object found")


# ---------------------------------------------------------------------------------------------
# Python call syntax: name(a=1, b='x') and [f(a=1), g(b=2)]
# ---------------------------------------------------------------------------------------------

def _dotted_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def parse_python_calls(text: str) -> list[tuple[str, list[Any], dict[str, Any]]]:
    """(name, positional args, keyword args) for each call in `text`, read from the syntax tree
    with `ast.literal_eval` on argument nodes only. Raises ValueError on anything else."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise ValueError(f"not Python call syntax: {e}") from None
    body = tree.body
    nodes = body.elts if isinstance(body, (ast.List, ast.Tuple)) else [body]
    calls = []
    for node in nodes:
        if not isinstance(node, ast.Call):
            raise ValueError("not a call")
        name = _dotted_name(node.func)
        if name is None or any(k.arg is None for k in node.keywords):
            raise ValueError("unsupported call form")
        try:
            args = [_jsonable(ast.literal_eval(a)) for a in node.args]
            kwargs = {k.arg: _jsonable(ast.literal_eval(k.value)) for k in node.keywords}
        except Exception as e:
            raise ValueError(f"non-literal argument: {e}") from None
        calls.append((name, args, kwargs))
    return calls


# ---------------------------------------------------------------------------------------------
# Agent output parser
# ---------------------------------------------------------------------------------------------

@dataclass
class ParsedResponse:
    """What an agent output says. `error` is a short label when a `<tool_call>` block was there
    but could not be read completely (the readable calls are still in `calls`)."""

    calls: list[ToolCall] = field(default_factory=list)
    error: str | None = None
    has_tool_block: bool = False
    response: str | None = None

    @property
    def format_error(self) -> bool:
        return self.error is not None


_THINK = re.compile(r"<think>.*?(?:</think>|(?=<tool_call>)|$)", re.DOTALL | re.IGNORECASE)
_TOOL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|(?=<response>)|$)",
                         re.DOTALL | re.IGNORECASE)
_RESPONSE = re.compile(r"<response>(.*?)(?:</response>|$)", re.DOTALL | re.IGNORECASE)
_PARAM_KEYS = ("parameters", "arguments", "args", "params")
_LEFTOVER = re.compile(r"[\s,`]|json|python", re.IGNORECASE)  # harmless text between call objects


def _strip_think(text: str) -> str:
    # An unclosed <think> ends where a <tool_call> starts: the model forgot to close it.
    text = _THINK.sub("", text)
    # A lone </think>: the opening tag was in the prompt (some chat templates put it there).
    return text.rsplit("</think>", 1)[-1] if "</think>" in text.lower() else text


def normalize_call(obj: Any) -> ToolCall:
    """One call object in any accepted shape -> {"name": str, "parameters": dict}. Raises ValueError."""
    if not isinstance(obj, dict):
        raise ValueError("call is not an object")
    if "function" in obj and isinstance(obj["function"], dict) and "name" not in obj:
        obj = obj["function"]  # OpenAI shape {"type": "function", "function": {...}}
    elif isinstance(obj.get("function"), str) and "name" not in obj:
        obj = {**{k: v for k, v in obj.items() if k != "function"}, "name": obj["function"]}
    if "name" in obj:
        name = obj["name"]
        keys = [k for k in _PARAM_KEYS if k in obj]
        params: Any = obj[keys[0]] if keys else {}
        extra = set(obj) - {"name", "type", "id", *_PARAM_KEYS}
        if extra:
            raise ValueError(f"unexpected keys {sorted(extra)}")
    elif len(obj) == 1 and next(iter(obj)) not in _PARAM_KEYS:  # BFCL shape {"func": {"arg": v}}
        name, params = next(iter(obj.items()))
    else:
        raise ValueError("call has no name")
    if isinstance(params, str):  # OpenAI sends arguments as a JSON string
        params = loads_lenient(params) if params.strip() else {}
    if params is None:
        params = {}
    if not isinstance(name, str) or not name.strip() or not isinstance(params, dict):
        raise ValueError("bad name or parameters")
    return {"name": name.strip(), "parameters": params}


def _calls_in_block(block: str) -> list[ToolCall]:
    """All calls in the body of one <tool_call> block. Raises ValueError on unreadable content."""
    body = strip_fences(block).strip()
    if not body:
        return []
    try:  # the common case: exactly one JSON value (an object or a list of objects)
        whole = loads_lenient(body)
        items = whole if isinstance(whole, list) else [whole]
        return [normalize_call(x) for x in items]
    except ValueError:
        pass
    segs, outside = _balanced_segments(body)
    if segs and not _LEFTOVER.sub("", outside):  # one object per line, pretty-printed, inline fences
        try:
            calls: list[ToolCall] = []
            for seg in segs:
                obj = loads_lenient(seg)
                calls.extend(normalize_call(x) for x in (obj if isinstance(obj, list) else [obj]))
            return calls
        except ValueError:
            pass  # maybe [f(a=1), g(b=2)], read below
    try:  # Python call syntax, all at once ([f(a=1), g(b=2)]) or one call per line
        parsed = parse_python_calls(body)
    except ValueError:
        parsed = [c for line in body.splitlines() if line.strip() for c in parse_python_calls(line)]
    if any(args for _, args, _ in parsed):
        raise ValueError("positional arguments need names")
    return [{"name": name, "parameters": kwargs} for name, _, kwargs in parsed]


def parse_response(text: Any) -> ParsedResponse:
    """Read an agent output. Never raises; see the module docstring for what is accepted."""
    try:
        text = text if isinstance(text, str) else str(text)
    except Exception:
        return ParsedResponse(error="not_text")
    text = _strip_think(text[:MAX_PARSE_CHARS])
    out = ParsedResponse()
    resp = _RESPONSE.search(text)
    if resp:
        out.response = resp.group(1).strip()
    for m in _TOOL_BLOCK.finditer(text):
        out.has_tool_block = True
        try:
            out.calls.extend(_calls_in_block(m.group(1)))
        except (ValueError, RecursionError):
            out.error = "unparseable_tool_call"
    return out


# ---------------------------------------------------------------------------------------------
# Schemas, types and simulator output validation
# ---------------------------------------------------------------------------------------------

# Type names used by BFCL (Python, Java, JavaScript) and API-Bank, mapped to one vocabulary.
_TYPE_ALIASES = {
    "string": "string", "str": "string", "char": "string", "datetime": "string",
    "integer": "integer", "int": "integer", "long": "integer", "short": "integer", "byte": "integer",
    "bigint": "integer",
    "float": "float", "double": "float", "number": "float",
    "boolean": "boolean", "bool": "boolean",
    "array": "array", "list": "array", "arraylist": "array", "queue": "array", "stack": "array",
    "set": "array", "list[str]": "array", "list[int]": "array",
    "tuple": "tuple",
    "dict": "dict", "object": "dict", "hashmap": "dict", "hashtable": "dict",
    "any": "any",
}


def canonical_type(name: Any) -> str | None:
    """The canonical type of a declared type name, or None when unknown."""
    return _TYPE_ALIASES.get(name.strip().lower()) if isinstance(name, str) else None


def value_fits(value: Any, spec: dict[str, Any]) -> bool:
    """Does `value` fit the parameter spec (type, one level of `items`, `enum`)?

    Integers are accepted where floats are declared (Python promotes them, so does BFCL);
    booleans never count as numbers."""
    kind = canonical_type(spec.get("type", "any"))
    ok = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "tuple": lambda v: isinstance(v, list),
        "dict": lambda v: isinstance(v, dict),
        "any": lambda v: True,
    }.get(kind or "", lambda v: False)(value)
    if ok and kind in ("array", "tuple") and isinstance(spec.get("items"), dict):
        ok = all(value_fits(v, spec["items"]) for v in value)
    if ok and isinstance(spec.get("enum"), list) and spec["enum"]:
        # an enum on an array constrains its items (BFCL writes it that way)
        ok = all(v in spec["enum"] for v in value) if kind in ("array", "tuple") else value in spec["enum"]
    return ok


_NAME = re.compile(r"^[A-Za-z_][\w.\-]*$")


def schema_problem(tool: Any) -> str | None:
    """Why `tool` is not a usable schema (None when it is)."""
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not _NAME.match(tool["name"]):
        return "tool needs a name (letters, digits, _ . -)"
    params = tool.get("parameters", {"properties": {}})
    if not isinstance(params, dict) or not isinstance(params.get("properties", {}), dict):
        return f"{tool['name']}: parameters.properties must be an object"
    props = params.get("properties", {})
    for pname, spec in props.items():
        if not isinstance(spec, dict) or canonical_type(spec.get("type")) is None:
            return f"{tool['name']}.{pname}: unknown type"
        if "items" in spec and not isinstance(spec["items"], dict):
            return f"{tool['name']}.{pname}: items must be an object"
    required = params.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) and r in props for r in required):
        return f"{tool['name']}: required must list declared parameters"
    return None


def call_problem(call: ToolCall, tools: list[ToolSchema]) -> tuple[str, str] | None:
    """(reason, detail) when `call` does not fit `tools`, else None."""
    tool = next((t for t in tools if t["name"] == call["name"]), None)
    if tool is None:
        return "unknown_function", call["name"]
    params = tool.get("parameters", {})
    props = params.get("properties", {})
    for r in params.get("required", []):
        if r not in call["parameters"]:
            return "missing_required", f"{call['name']}.{r}"
    for pname, value in call["parameters"].items():
        if pname not in props:
            return "unknown_param", f"{call['name']}.{pname}"
        if value is None and pname not in params.get("required", []):
            continue  # None for an optional argument means "the default" (common in BFCL gold)
        if not value_fits(value, props[pname]):
            return "bad_type", f"{call['name']}.{pname}={value!r} vs {props[pname].get('type')}"
    return None


@dataclass
class GeneratedTask:
    question: str
    tools: list[ToolSchema]
    calls: list[ToolCall]


MAX_QUESTION_CHARS = 4000


def parse_generated_task(text: str, seed_tools: list[ToolSchema]) -> GeneratedTask:
    """Extract and validate a simulator generation; raises `InvalidTask(reason, detail)`.

    A string in "tools" refers to the seed tool of that name (so the simulator need not copy
    long schemas). Every call must fit a listed tool; "calls": [] means "no listed tool fits".
    """
    obj, question = _object_and_question(text)
    raw_tools = obj.get("tools")
    if not isinstance(raw_tools, list) or not raw_tools:
        raise InvalidTask("bad_tools", "tools must be a non-empty list")
    by_name = {t["name"]: t for t in seed_tools}
    tools: list[ToolSchema] = []
    for t in raw_tools:
        if isinstance(t, str):
            if t not in by_name:
                raise InvalidTask("unknown_tool", t)
            t = by_name[t]
        problem = schema_problem(t)
        if problem:
            raise InvalidTask("bad_tools", problem)
        tools.append(t)
    names = [t["name"] for t in tools]
    if len(set(names)) != len(names):
        raise InvalidTask("bad_tools", "duplicate tool names")
    return GeneratedTask(question=question.strip(), tools=tools, calls=_checked_calls(obj, tools))


def parse_generated_request(text: str, tools: list[ToolSchema]) -> GeneratedTask:
    """Extract and validate a request-only generation `{"question", "calls"}` whose task keeps the
    seed's `tools`; raises `InvalidTask(reason, detail)`. At least one call: the request must need
    one of those functions (a request none serves is an irrelevance task, which this mode does not write)."""
    obj, question = _object_and_question(text)
    calls = _checked_calls(obj, tools)
    if not calls:
        raise InvalidTask("no_call", "the request must need at least one call")
    return GeneratedTask(question=question.strip(), tools=list(tools), calls=calls)


def _object_and_question(text: Any) -> tuple[dict[str, Any], str]:
    """The generation's JSON object and its non-empty "question"; raises `InvalidTask`."""
    try:
        obj = extract_json_object(text if isinstance(text, str) else str(text))
    except ValueError as e:
        raise InvalidTask("unparseable", str(e)) from None
    question = obj.get("question")
    if not isinstance(question, str) or not question.strip() or len(question) > MAX_QUESTION_CHARS:
        raise InvalidTask("bad_question", "question must be a non-empty string")
    return obj, question


def _checked_calls(obj: dict[str, Any], tools: list[ToolSchema]) -> list[ToolCall]:
    """The generation's calls, each fitting a listed tool (its JSON schema: the function exists,
    required arguments are present, values fit the declared types and enums)."""
    raw_calls = obj.get("calls", obj.get("answer"))
    if isinstance(raw_calls, dict):
        raw_calls = [raw_calls]
    if not isinstance(raw_calls, list):
        raise InvalidTask("bad_call", "calls must be a list")
    calls: list[ToolCall] = []
    for c in raw_calls:
        try:
            calls.append(normalize_call(c))
        except ValueError as e:
            raise InvalidTask("bad_call", str(e)) from None
    for c in calls:
        problem = call_problem(c, tools)
        if problem:
            raise InvalidTask(*problem)
    return calls


SIMULATOR_SYSTEM = """\
You write new tasks for training an assistant that calls functions. Given a seed task (a user \
question, the functions it may call, and the correct calls), write ONE new variation: a \
different user request in the same domain, with its functions and its correct calls.

Answer with a single JSON object and nothing else:
{"question": "<the user's request>", "tools": [<function schema or the name of a seed function>, ...], \
"calls": [{"name": "<function>", "parameters": {"<argument>": <value>}}, ...]}

Rules:
- Every call uses a function listed in "tools" and gives all of its required arguments, with \
values of the declared types (integer, float, string, boolean, array, dict, ...).
- Every value in the calls must follow from the question; do not rely on hidden information.
- To reuse a seed function, write its name as a string in "tools"; new functions need a full \
schema in the seed's format.
- "calls": [] means that none of the listed functions can serve the request."""


REQUEST_SIMULATOR_SYSTEM = """\
You write new tasks for training an assistant that calls functions. Given a seed task (a user \
request, the functions the assistant has, and the correct calls), write ONE new user request \
that the same functions serve, with its correct calls. The functions stay as they are: do not \
write them.

Answer with a single JSON object and nothing else:
{"question": "<the user's request>", "calls": [{"name": "<function>", "parameters": {"<argument>": <value>}}, ...]}

Rules:
- Every call uses one of the seed's functions and gives all of its required arguments, with \
values of the declared types and, where listed, one of the allowed values.
- Every value in the calls must follow from the question; do not rely on hidden information.
- Do not repeat the seed's request: change what is asked or the values in it."""


def difficulty_hint(success_rate: float | None, sim_prompt: str = "stats") -> str:
    """The agent's recent success on the seed; with "rule", also steer towards its frontier: success
    about half of the time (alpha = 0.5). See genenv_pl/envs/prompting.py."""
    return success_guide(
        success_rate, sim_prompt, stat="The agent solved {rate} of recent variations of this seed", only=False,
        harder="make the new task harder (e.g. more arguments, values that need a small inference or conversion, "
               "distractor functions).",
        easier="make the new task easier (e.g. fewer arguments, values stated explicitly, fewer functions).",
        unknown="The agent's success rate on this seed is unknown: keep a similar difficulty.")


def simulator_messages(seed_view: dict[str, Any], success_rate: float | None, note: str = "",
                       request_only: bool = False, sim_prompt: str = "stats") -> list[Message]:
    """Messages asking for one variation of `seed_view` ({"question", "tools", "calls"}): a whole
    task (`SIMULATOR_SYSTEM`), or with `request_only` a new request and its calls for the seed's
    tools (`REQUEST_SIMULATOR_SYSTEM`, read back by `parse_generated_request`). `sim_prompt`: what
    it says about the agent's success ("rule" or "stats", `difficulty_hint`)."""
    user = ("Seed task:\n" + json.dumps(seed_view, ensure_ascii=False) + "\n\n"
            + (note + "\n" if note else "") + difficulty_hint(success_rate, sim_prompt)
            + "\nWrite the new task as one JSON object.")
    system = REQUEST_SIMULATOR_SYSTEM if request_only else SIMULATOR_SYSTEM
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def normalize_text(s: str) -> str:
    """Lower case, single spaces: for duplicate detection."""
    return " ".join(s.lower().split())
