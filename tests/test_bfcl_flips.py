"""bench/bfcl_flips.py: per item, how many final agents flip it against the warm start, and the
count independent runs at the same mean rate would give."""
import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).parents[1] / "bench"))
import bfcl_flips as bf  # noqa: E402

WARM = {"a": [0.0, 0.0], "b": [0.0, 0.0], "c": [1.0, 0.0], "d": [1.0, 0.0]}


@pytest.mark.parametrize("runs, up, down", [
    ({"r1": WARM}, {}, {}),  # nothing changed
    ({"r1": {**WARM, "a": [1.0, 0.0]}, "r2": {**WARM, "a": [1.0, 0.0], "c": [0.0, 1.0]}}, {"a": 2}, {"c": 1}),
    ({"r1": {**WARM, "b": [1.0, 0.0], "z": [1.0, 0.0]}}, {"b": 1}, {}),  # an item the warm start has not scored is ignored
])
def test_flips_count_runs_per_item(runs, up, down):
    u, d = bf.flips(WARM, runs)
    assert {k: v for k, v in u.items() if v} == up
    assert {k: v for k, v in d.items() if v} == down


def test_table_compares_with_independent_runs_at_the_mean_rate():
    # 2 items, 2 runs, 2 flips in all: p = 0.5, so 2 * C(2,k) / 4 items expected in exactly k runs.
    rows = bf.table(bf.Counter({"a": 2, "b": 0}), pool=2, n=2)
    assert rows[2:] == ["| 1 | 0 | 1.0 |", "| 2 | 1 | 0.5 |"]
