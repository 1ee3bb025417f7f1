"""bench/bfcl_output_diff.py and bench/bfcl_pool_drift.py: how a call changed between two agents'
answers to one BFCL item, and whether GRPO's reward favoured more or fewer parameters."""
import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).parents[1] / "bench"))
import bfcl_output_diff as od  # noqa: E402
import bfcl_pool_drift as pd  # noqa: E402


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
    # read as the scorer reads it: an unclosed block and Python call syntax are calls, not format errors
    (tc("f", a=1), '<tool_call>{"name": "f", "parameters": {"a": 2}}', "values"),
    (tc("f", a=1), "<tool_call>f(a=1, b=2)</tool_call>", "added"),
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


@pytest.mark.parametrize("rewards, n_params, expected", [
    ([1, 0], [3, 2], 0.5),     # the call with more parameters won
    ([1, 0], [2, 3], -0.5),    # the one with fewer won
    ([1, 1, 0, 0], [2, 2, 2, 2], 0.0),  # same parameters: no pull either way
    ([1, 0, 0, 0], [3, 2, 2, 2], 0.75),
])
def test_group_covariance(rewards, n_params, expected):
    assert pd.group_covariance(rewards, n_params) == pytest.approx(expected)


def test_drift_skips_equal_rewards_and_unparseable_groups():
    pool = [{"epoch": 0, "rewards": [1.0, 0.0], "rollouts": [tc("f", a=1), tc("f", a=1, b=2)]},
            {"epoch": 0, "rewards": [1.0, 1.0], "rollouts": [tc("f", a=1), tc("f", a=1, b=2)]},
            {"epoch": 1, "rewards": [1.0, 0.0], "rollouts": [tc("f", a=1), "no call"]},
            {"epoch": 1, "rewards": [0.0, 1.0], "rollouts": [tc("f", a=1), tc("f", a=1, b=2)]}]
    assert pd.drift(pool) == {0: {"covariance": -0.5, "groups": 1, "fewer": 1, "more": 0},
                              1: {"covariance": 0.5, "groups": 1, "fewer": 0, "more": 1}}


def test_optional_where_seed_requires():
    task = {"meta": {"seed_id": "s"}, "data": {"gold": [{"f": {"a": [1], "b": ["", 2], "c": ["", True]}}]}}
    seeds = {"s": {"f": {"a": [1], "b": [2], "c": ["", True]}}}  # the seed requires b; c is optional in both
    assert pd.optional_where_seed_requires([{"task": task}], seeds) == 1
    assert pd.optional_where_seed_requires([{"task": task}], {"s": {}}) == 0
