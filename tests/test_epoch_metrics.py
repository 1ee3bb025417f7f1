"""The paper's figure quantities among the epoch's metrics: solved / partial / unsolved shares of the
generated tasks (Fig. 8), the agent's response length (Fig. 5a/b) and its reward per GRPO step (Fig. 4a),
on hand-made data; whole epochs of several ranks count them over all ranks' tasks. (In a real fit:
tests/test_epoch_fit.py.)"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from genenv_pl.backends.base import Generation
from genenv_pl.coevo import Group
from genenv_pl.envs.base import Task
from genenv_pl.epoch_metrics import epoch_metrics, response_length, solve_fractions
from genenv_pl.module import reward_sum
from genenv_pl.seam import Part, merge

sys.path.append(str(Path(__file__).parents[1] / "bench"))
import quickstart_report as qr  # noqa: E402

NAN = float("nan")
FRACS = ("coevo/solved_frac", "coevo/partial_frac", "coevo/unsolved_frac")


def _group(successes: list[bool], source: str = "fresh", lengths: list[int] | None = None) -> Group:
    lengths = lengths or [2] * len(successes)
    rollouts = [Generation([1], [7] * n, "x", [-1.0] * n, True) for n in lengths]
    return Group(Task(id="t", data={}), source, None, rollouts, [float(s) for s in successes], successes)


@pytest.mark.parametrize("successes, expected", [
    ([], (NAN, NAN, NAN)),  # no generated task: gaps, not zeros
    ([[True] * 4], (1.0, 0.0, 0.0)),
    ([[False] * 4], (0.0, 0.0, 1.0)),
    ([[True, False, False, False]], (0.0, 1.0, 0.0)),
    ([[True, True, True, False]], (0.0, 1.0, 0.0)),  # "solved" is all G rollouts, not most
    ([[True] * 2, [False] * 2, [True, False], [False, True]], (0.25, 0.5, 0.25)),
    ([[True]], (1.0, 0.0, 0.0)),  # G = 1: solved or unsolved, never partial
    ([[True] * 3, []], (1.0, 0.0, 0.0)),  # a task without rollouts is not counted
])
def test_solve_fractions(successes, expected):
    got = solve_fractions(successes)
    assert list(got) == list(FRACS)
    assert [got[k] for k in FRACS] == pytest.approx(list(expected), nan_ok=True)
    if successes:
        assert sum(got.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("lengths, expected", [
    ([], NAN),
    ([[3]], 3.0),
    ([[1, 3], [8]], 4.0),  # per rollout: (1 + 3 + 8) / 3, not the mean of the groups' means (5.0)
    ([[0, 0]], 0.0),
])
def test_response_length_is_per_rollout(lengths, expected):
    groups = [_group([True] * len(ls), lengths=ls) for ls in lengths]
    assert response_length(groups) == pytest.approx(expected, nan_ok=True)


@pytest.mark.parametrize("batch, expected", [
    (None, (0.0, 0.0)),  # this rank has no agent batch this step
    ({"advantages": torch.zeros(1)}, (0.0, 0.0)),  # a blank batch (FSDP lockstep): no rewards
    ({"rewards": torch.tensor([1.0, 0.0, 0.5])}, (1.5, 3.0)),
    ({"rewards": torch.tensor([0.25] * 300, dtype=torch.bfloat16)}, (75.0, 300.0)),  # summed in float64
])
def test_reward_sum(batch, expected):
    assert reward_sum(batch) == pytest.approx(expected)


def _part(groups: list[Group]) -> Part:
    return Part(groups=groups, seconds=1.0)


def test_epoch_metrics_count_every_ranks_tasks_before_dividing():
    """Rank 0 solved its one task; rank 1 solved none of its three: a quarter of the epoch's generated
    tasks were solved (averaging the ranks' shares would say half). Seed ("base") and replayed tasks are
    not generated and do not count in the shares; every rollout counts in the response length."""
    rank0 = _part([_group([True] * 2, lengths=[4, 4]), _group([True, False], "base", lengths=[10, 10])])
    rank1 = _part([_group([False] * 2) for _ in range(3)] + [_group([True] * 2, "replay")])
    m = epoch_metrics(merge([rank0, rank1]), tasks_seen=0, zone={}, sim_samples=0)
    assert [m[k] for k in FRACS] == pytest.approx([0.25, 0.0, 0.75])
    assert m["agent/response_length"] == pytest.approx((4 + 4 + 10 + 10 + 2 * 8) / 12)


def test_static_tasks_count_as_generated():
    """The "static" ablation's fixed tasks were written by the (initial) simulator: they are its generated tasks."""
    m = epoch_metrics(_part([_group([True, False], "static"), _group([True] * 2, "static")]), 0, {}, 0)
    assert [m[k] for k in FRACS] == pytest.approx([0.5, 0.5, 0.0])


def test_an_epoch_without_generated_tasks_logs_gaps():
    m = epoch_metrics(_part([_group([True, False], "base")]), 0, {}, 0)
    assert all(math.isnan(m[k]) for k in FRACS) and m["agent/response_length"] == 2.0


@pytest.mark.parametrize("xs, expected", [
    ([], []),
    ([1.0, 3.0], [1.0, 3.0]),
    ([1.0] * 5, [1.0] * 5),
    ([0.0, 0.0, 1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0], [0.0, 1.0, 2.0, 3.0, 4.0]),
    ([0.0] * 6 + [6.0], [0.0, 0.0, 0.0, 0.0, 3.0]),  # parts as even as they go
])
def test_report_fifths(xs, expected):
    assert qr.fifths(xs) == pytest.approx(expected)


def test_report_trend_skips_gaps():
    s = {"coevo/solved_frac": [NAN, 0.2, 0.4, NAN, 0.6, 0.8, 1.0]}
    line = qr.trend(s, "coevo/solved_frac")
    assert "first fifth 0.200" in line and "last fifth 1.000" in line and "(5 points)" in line
    assert "not logged" in qr.trend(s, "agent/step_reward")
