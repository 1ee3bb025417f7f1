"""bench/bfcl_output_diff.py: how a call changed between two agents' answers to one BFCL item."""
import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("bfcl_output_diff", Path(__file__).parents[1] / "bench" / "bfcl_output_diff.py")
od = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(od)


def tc(name: str, **params) -> str:
    import json
    return "<think>\n</think>\n<tool_call>\n" + json.dumps({"name": name, "parameters": params}) + "\n</tool_call>"


@pytest.mark.parametrize("before, after, expected", [
    (tc("f", a=1, b=True), tc("f", a=1), "dropped"),
    (tc("f", a=1), tc("f", a=1, b=True), "added"),
    (tc("f", a=1), tc("f", a=2), "values"),
    (tc("f", a=1, b=1), tc("f", a=1, c=1), "values"),  # one swapped for another: neither a subset
    (tc("f", a=1), tc("g", a=1), "function"),
    (tc("f", a=1), "f(a=1)", "format"),
    ("<tool_call>{not json}</tool_call>", tc("f", a=1), "format"),
])
def test_change(before, after, expected):
    assert od.change(before, after) == expected


def test_diff_counts_lost_gained_and_parameter_drift():
    before = {"x/1": {"accuracy": 1.0, "response": tc("f", a=1, b=True)},
              "x/2": {"accuracy": 0.0, "response": tc("f", a=1)},
              "x/3": {"accuracy": 1.0, "response": tc("f", a=1)}}
    after = {"x/1": {"accuracy": 0.0, "response": tc("f", a=1)},
             "x/2": {"accuracy": 1.0, "response": tc("f", a=1, c=2)},
             "x/3": {"accuracy": 1.0, "response": tc("f", a=1)}}
    assert od.diff(before, after) == {"lost": {"dropped": 1}, "gained": {"added": 1},
                                      "parameters_set": {"fewer": 1, "more": 1, "same": 1}}
