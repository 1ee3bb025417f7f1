"""bench/protocol_pilot.py's rule (docs/results/protocol.md, section 7) on hand-made validation curves."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from protocol_pilot import VAL_ITEMS, judge  # noqa: E402


def _curve(greedy: list[float], sampled: list[float]) -> list[dict]:
    return [{"tasks": t, "greedy": g, "sampled": s} for t, g, s in zip((0, 64, 128, 192, 256), greedy, sampled)]


ONE = 1 / VAL_ITEMS


def test_acceptance_needs_no_loss_at_b_and_no_dip_of_more_than_two_items_before_it():
    cells = {
        "lr3e-5_n16": _curve([0.5, 0.5, 0.5, 0.5, 0.5], [0.40, 0.41, 0.42, 0.43, 0.44]),  # flat: accepted, small gain
        "lr1e-4_n16": _curve([0.5, 0.5 - 3 * ONE, 0.5, 0.5, 0.52], [0.40, 0.45, 0.50, 0.50, 0.50]),  # dipped 3 items
        "lr3e-4_n16": _curve([0.5, 0.5 - 2 * ONE, 0.5 + ONE, 0.4, 0.5], [0.40, 0.44, 0.47, 0.40, 0.45]),  # 2: allowed
    }
    rows = {(r["cell"], r["b"]): r["accepted"] for r in judge(cells)["rows"]}
    assert rows == {("lr3e-5_n16", 128): True, ("lr3e-5_n16", 256): True, ("lr1e-4_n16", 128): False,
                    ("lr1e-4_n16", 256): False, ("lr3e-4_n16", 128): True, ("lr3e-4_n16", 256): False}
    choice = judge(cells)["choice"]
    assert (choice["cell"], choice["b"]) == ("lr3e-4_n16", 128)  # the largest sampled gain among the accepted


def test_gains_within_a_hundredth_are_tied_and_go_to_the_smaller_budget_then_lr_then_the_larger_n():
    flat = [0.5] * 5
    cells = {"lr1e-4_n16": _curve(flat, [0.40, 0.42, 0.45, 0.46, 0.455]),
             "lr3e-5_n32": _curve(flat, [0.40, 0.42, 0.446, 0.45, 0.45]),
             "lr3e-5_n16": _curve(flat, [0.40, 0.42, 0.446, 0.45, 0.45])}
    choice = judge(cells)["choice"]
    assert (choice["cell"], choice["b"]) == ("lr3e-5_n32", 128)
    assert judge({"lr1e-4_n16": _curve([0.5, 0.4, 0.4, 0.4, 0.4], [0.4] * 5)})["choice"] is None


def test_cells_that_skip_the_warm_start_validation_take_the_first_cells_v0():
    """Amendment 2: only the seed's first cell scores V0; the others are judged against it."""
    from protocol_pilot import with_start

    first = _curve([0.5] * 5, [0.40, 0.41, 0.42, 0.43, 0.44])
    later = [{"tasks": 64, "greedy": 0.5, "sampled": None}, {"tasks": 128, "greedy": 0.52, "sampled": 0.47},
             {"tasks": 192, "greedy": 0.5 - 3 * ONE, "sampled": None}, {"tasks": 256, "greedy": 0.5, "sampled": 0.48}]
    cells = with_start({"lr3e-5_n16": first, "lr1e-4_n16": later})
    assert cells["lr3e-5_n16"] == first and cells["lr1e-4_n16"] == [first[0], *later]
    rows = {(r["cell"], r["b"]): (r["accepted"], r["sampled_gain"]) for r in judge(cells)["rows"]}
    assert rows[("lr1e-4_n16", 128)][0] is True and abs(rows[("lr1e-4_n16", 128)][1] - 0.07) < 1e-9
    assert rows[("lr1e-4_n16", 256)][0] is False  # the dip at 192 is below V0 - 2/76
    assert with_start({"lr1e-4_n16": later}) == {"lr1e-4_n16": later}  # no V0 yet: not judged
