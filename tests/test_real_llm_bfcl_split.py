"""bench/real_llm_bfcl.py splits each final agent's gain by whether the warm start's greedy answer was
right, so a report can tell sharpening (probability moved onto calls already ranked first) from new calls."""
import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).parents[1] / "bench"))
import real_llm_bfcl as study  # noqa: E402

# four items: the warm start answers a and b right greedily, c and d wrong
WARM_GREEDY = {"a": [1.0, 0.0], "b": [1.0, 0.0], "c": [0.0, 0.0], "d": [0.0, 1.0]}
WARM_SAMPLED = {"a": [0.5], "b": [0.75], "c": [0.0], "d": [0.25]}


@pytest.mark.parametrize("greedy, sampled, want", [
    # sharpening: sampled rises only where greedy was right
    ({"a": [1.0, 0.0], "b": [1.0, 0.0], "c": [0.0, 0.0], "d": [0.0, 0.0]},
     {"a": [1.0], "b": [1.0], "c": [0.0], "d": [0.25]},
     {"right/sampled": 0.375, "right/greedy": 0.0, "wrong/sampled": 0.0, "wrong/greedy": 0.0}),
    # a new call learnt: item c goes from never to always right
    ({"a": [1.0, 0.0], "b": [0.0, 0.0], "c": [1.0, 0.0], "d": [0.0, 0.0]},
     {"a": [0.5], "b": [0.75], "c": [1.0], "d": [0.25]},
     {"right/sampled": 0.0, "right/greedy": -0.5, "wrong/sampled": 0.5, "wrong/greedy": 0.5}),
])
def test_split_by_warm_greedy(greedy, sampled, want):
    result: dict = {}
    lines = study.split_lines({"warm_start": WARM_GREEDY, "run_s0": greedy},
                              {"warm_start": WARM_SAMPLED, "run_s0": sampled}, result)
    got = result["sampled_gain_by_warm_greedy"]["run_s0"]
    assert {k: pr["diff"] for k, pr in got.items()} == pytest.approx(want)
    assert all(pr["n"] == 2 for pr in got.values())
    assert "greedy right (2 items)" in lines[3] and lines[-1].startswith("| run_s0 |")


def test_split_needs_both_kinds_of_scores():
    assert study.split_lines({"warm_start": WARM_GREEDY}, {"warm_start": WARM_SAMPLED}, {}) == []
    assert study.split_lines({"warm_start": WARM_GREEDY, "run_s0": WARM_GREEDY}, {}, {}) == []
