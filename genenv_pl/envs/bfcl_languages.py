"""Java and JavaScript in BFCL's `simple_java` and `simple_javascript` categories.

The model sees every parameter as a string ("This is Java long type parameter in string
representation") and writes each argument as source text: `"5L"`, `"new int[]{1, 2}"`, `"true"`.
BFCL's checker reads that text back with its own type converters and then applies its usual AST
rules to the result. The readers here are those converters (bfcl-eval 2026.3.23,
`eval_checker/ast_eval/type_convertor/`, Apache-2.0), ported line for line including their
quirks: text that does not read as the declared type stays a string (and then only matches a
gold "variable"), and the elements of a Java `Array` of `String` keep their quotes, so
`new String[]{"a"}` does not match the gold `["a"]` while `new String[]{a}` does.
tests/envs/test_bfcl.py checks agreement with bfcl-eval on every shipped entry.

The writers go the other way (gold values -> text the readers map back to them): warm-start
targets and the simulator's view of a seed's calls.
"""
from __future__ import annotations

import copy
import json
import re
from typing import Any

LANGUAGES = {"simple_java": "java", "simple_javascript": "javascript"}

# bfcl_eval/constants/type_mappings.py
JAVA_TYPES: dict[str, type] = {
    "byte": int, "short": int, "integer": int, "float": float, "double": float, "long": int,
    "boolean": bool, "char": str, "Array": list, "ArrayList": list, "Set": set, "HashMap": dict,
    "Hashtable": dict, "Queue": list, "Stack": list, "String": str, "any": str,
}
JS_TYPES: dict[str, type] = {
    "String": str, "integer": int, "float": float, "Bigint": int, "Boolean": bool, "dict": dict,
    "array": list, "any": str,
}
_COLLECTIONS = ("Array", "ArrayList", "array")  # declared types whose `items` type is read too


def language_of(category: str) -> str:
    return LANGUAGES.get(category, "python")


def read_argument(text: str, spec: dict[str, Any], language: str) -> tuple[Any, type, type | None]:
    """(value read from `text`, the Python type the declared type maps to, the item type for
    collections). Raises KeyError for a type BFCL has no mapping for (its checker raises too)."""
    table = JAVA_TYPES if language == "java" else JS_TYPES
    declared = spec["type"]
    expected = table[declared]
    item = spec["items"]["type"] if declared in _COLLECTIONS else None
    nested = table[item] if item is not None else None
    read = read_java if language == "java" else read_js
    return read(text, declared, item), expected, nested


def agent_tools(tools: list[dict[str, Any]], language: str) -> list[dict[str, Any]]:
    """The function docs as BFCL shows them to the model (`_func_doc_language_specific_pre_processing`
    in bfcl_eval/utils.py): every parameter a string, its real type in the description."""
    tools = copy.deepcopy(tools)
    name = "Java" if language == "java" else "JavaScript"
    hint = " Note that the provided function is in Java 8 SDK syntax." if language == "java" else \
        " Note that the provided function is in JavaScript syntax."
    for tool in tools:
        tool["description"] = tool.get("description", "") + hint
        for spec in tool["parameters"].get("properties", {}).values():
            declared = spec.get("type")
            spec.setdefault("description", "")
            if declared == "any":
                spec["description"] += f" This parameter can be of any type of {name} object in string representation."
            else:
                spec["description"] += f" This is {name} {declared} type parameter in string representation."
            if declared in (("ArrayList", "Array") if language == "java" else ("array",)) and "items" in spec:
                spec["description"] += (f" The list elements are of type {spec['items'].get('type')}; they are "
                                        "not in string representation.")
                del spec["items"]
            if language == "javascript" and declared == "dict" and "properties" in spec:
                spec["description"] += (" The dictionary entries have the following schema; they are not in "
                                        f"string representation. {json.dumps(spec['properties'])}")
                del spec["properties"]
            spec["type"] = "string"
    return tools


# =============================================================================================
# Java (java_type_converter.py)
# =============================================================================================

def read_java(value: str, expected: str, nested: str | None = None) -> Any:
    if expected not in JAVA_TYPES:
        raise ValueError(f"Unsupported type: {expected}")
    if expected in ("byte", "short", "integer"):
        return int(value) if re.match(r"^-?\d+$", value) else str(value)
    if expected == "float":
        if not re.match(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?[fF]$", value):
            return str(value)
        return float(re.sub(r"[fF]$", "", value))
    if expected == "double":
        return float(value) if re.match(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?$", value) else str(value)
    if expected == "long":
        return int(re.sub(r"[lL]$", "", value)) if re.match(r"^-?\d+[lL]$", value) else str(value)
    if expected == "boolean":
        return value == "true" if value in ("true", "false") else str(value)
    if expected == "ArrayList":
        return _java_arraylist(value, nested)
    if expected == "Array":
        return _java_array(value, nested)
    if expected == "HashMap":
        return _java_hashmap(value)
    if expected in ("Set", "Hashtable", "Queue", "Stack"):
        raise NotImplementedError(f"{expected} conversion is not implemented")
    return str(value)  # String, any, char (BFCL's char pattern never matches: the text as it is)


def _java_element(text: str, nested: str | None) -> Any:
    if nested in ("char", "String"):
        return text[1:-1]  # the quotes
    return read_java(text, nested) if nested else java_value(text)


def _java_arraylist(text: str, nested: str | None) -> Any:
    m = re.search(r"new\s+ArrayList<\w*>\(Arrays\.asList\((.+?)\)\)", text)
    if m:
        return [_java_element(e.strip(), nested) for e in m.group(1).split(",")]
    m = re.search(r"new\s+ArrayList<\w*>\(\)\s*\{\{\s*(.+?)\s*\}\}", text, re.DOTALL)
    if m:
        return [_java_element(e.strip(), nested) for e in re.findall(r"add\((.+?)\)", m.group(1))]
    if re.search(r"new\s+ArrayList<\w*>\(\)", text):
        return []
    return text


def _java_array(text: str, nested: str | None) -> Any:
    m = re.search(r"new\s+\w+\[\]\s*\{(.*?)\}", text)
    if not m:
        return text
    read = (lambda x: read_java(x, nested)) if nested else java_value
    return [read(x.strip()) for x in m.group(1).split(",") if x.strip()]


def _java_hashmap(text: str) -> Any:
    m = re.search(r"new\s+HashMap<.*?>\s*\(\)\s*\{\s*\{?\s*(.*?)\s*\}?\s*\}", text, re.DOTALL)
    if m:
        puts = m.group(1)
        if not puts.strip():
            return {}
        return {k: java_value(v.strip()) for k, v in re.findall(r"put\(\"(.*?)\",\s*(.*?)\)", puts)}
    if re.search(r"new\s+HashMap<.*?>\s*\(\)", text):
        return {}
    return text


def java_value(text: str) -> Any:
    """A Java literal without a declared type (`parse_java_value`)."""
    if text in ("true", "false"):
        return text == "true"
    if text.startswith('"') and text.endswith('"'):
        return text[1:-1]
    if re.match(r"^-?\d+[lL]$", text):
        return int(text[:-1])
    if re.match(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?[fF]$", text):
        return float(re.sub(r"[fF]$", "", text))
    return _number_or_text(text)


def _number_or_text(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


# =============================================================================================
# JavaScript (js_type_converter.py)
# =============================================================================================

def read_js(value: str, expected: str, nested: str | None = None) -> Any:
    if expected not in JS_TYPES:
        raise ValueError(f"Unsupported type: {expected}")
    if expected == "String":
        quoted = (value.startswith('"') and value.endswith('"')) or (value.startswith("'") and value.endswith("'"))
        return value[1:-1] if quoted else str(value)
    if expected == "integer":
        return int(value) if re.match(r"^-?\d+$", value) else str(value)
    if expected == "float":
        return float(value) if re.match(r"^-?\d+(\.\d+)?$", value) else str(value)
    if expected == "Bigint":
        return int(value[:-1]) if re.match(r"^-?\d+n$", value) else str(value)
    if expected == "Boolean":
        return value == "true" if value in ("true", "false") else str(value)
    if expected == "dict":
        return _js_dict(value.strip())
    if expected == "array":
        return _js_array(value.strip(), nested)
    return str(value)  # any


def _js_array(code: str, nested: str | None) -> Any:
    array_2d = r"\[\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\]|\bnew\s+Array\(\s*\[.*?\]\s*(,\s*\[.*?\]\s*)*\)"
    try:
        m = re.match(array_2d, code)
        if m:
            rows = []
            for i, inner in enumerate(re.findall(r"\[(.*?)\]", m.group(0))):
                inner = inner.strip()
                if i == 0 and inner.startswith("["):
                    inner = inner[1:]
                rows.append([js_value(e.strip()) for e in inner.split(",")])
            return rows
        m = re.match(r"\[(.*?)\]|\bnew\s+Array\((.*?)\)", code)
        if not m:
            return code
        body = m.group(1) if m.group(1) is not None else m.group(2)
        body = (body or "").strip()
        elements = body.split(",") if body else []
        if not nested:
            return [js_value(e.strip()) for e in elements]
        return [read_js(e.strip(), nested, "String") if e.strip().startswith(("'", '"')) else read_js(e.strip(), nested)
                for e in elements]
    except Exception:  # noqa: BLE001 - BFCL's converter keeps the text on any failure
        return code


def _js_dict(code: str) -> Any:
    if code == "{}":
        return {}
    m = re.match(r"\{(.*?)\}", code)
    if not m:
        return code
    try:
        out = {}
        for key, value in re.findall(r"([^:]+):\s*(.*?)(?:,\s*(?=[^,]+:)|$)", m.group(1)):
            key, value = key.strip().strip("'\""), value.strip()
            if value.startswith("[") and value.endswith("]"):
                out[key] = _js_array(value, None)
            elif value.startswith("{") and value.endswith("}"):
                out[key] = _js_dict(value)
            else:
                out[key] = js_value(value.strip("'\""))
        return out
    except Exception:  # noqa: BLE001
        return code


def js_value(text: str) -> Any:
    """A JavaScript literal without a declared type (`parse_js_value`)."""
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    if (text.startswith('"') and text.endswith('"')) or (text.startswith("'") and text.endswith("'")):
        return text[1:-1]
    return _number_or_text(text)


# =============================================================================================
# Writers: a concrete value as the text the readers above map back to it
# =============================================================================================

_JAVA_ELEMENT_NAMES = {"integer": "int", "any": "Object", "boolean": "boolean", "long": "long",
                       "double": "double", "float": "float", "String": "String", "char": "char"}
_JAVA_BOXED = {"integer": "Integer", "long": "Long", "double": "Double", "float": "Float", "boolean": "Boolean",
               "char": "Character", "String": "String", "any": "Object"}


def write_argument(value: Any, spec: dict[str, Any], language: str) -> str:
    """`value` (a concrete gold value) as argument text for a parameter declared as `spec`."""
    return _write_java(value, spec) if language == "java" else _write_js(value, spec.get("type"))


def _write_java(value: Any, spec: dict[str, Any]) -> str:
    declared = spec.get("type")
    if isinstance(value, str):
        return value  # String and any are read as the text itself; so is a gold "variable"
    if isinstance(value, bool):
        return "true" if value else "false"
    if declared == "long":
        return f"{value}L"
    if declared == "float":
        return f"{value}f"
    item = (spec.get("items") or {}).get("type", "any")
    if declared == "Array" and isinstance(value, list):
        # BFCL's Array reader keeps quotes on String elements: they are written bare
        body = ", ".join(_write_java(v, {"type": item}) for v in value)
        return f"new {_JAVA_ELEMENT_NAMES.get(item, item)}[]{{{body}}}"
    if declared == "ArrayList" and isinstance(value, list):
        if not value:
            return "new ArrayList<>()"
        quoted = item in ("String", "char")
        body = ", ".join(f'"{v}"' if quoted else _write_java(v, {"type": item}) for v in value)
        return f"new ArrayList<{_JAVA_BOXED.get(item, item)}>(Arrays.asList({body}))"
    if declared == "HashMap" and isinstance(value, dict):
        puts = " ".join(f'put("{k}", {_java_literal(v)});' for k, v in value.items())
        return f"new HashMap<String, Object>() {{{{ {puts} }}}}"
    return str(value)


def _java_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return f'"{value}"' if isinstance(value, str) else str(value)


def _write_js(value: Any, declared: str | None) -> str:
    if isinstance(value, str):
        return value
    if declared == "Bigint" and isinstance(value, int) and not isinstance(value, bool):
        return f"{value}n"
    return _js_literal(value)


def _js_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_js_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f'"{k}": {_js_literal(v)}' for k, v in value.items()) + "}"
    return str(value)
