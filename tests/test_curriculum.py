import math

import pytest
import torch

from genenv_pl.curriculum import alpha_reward, conditioning_slope, in_band, rwr_weights, success_rate


@pytest.mark.parametrize(
    "successes, expected",
    [([1, 1, 1, 1], 1.0), ([0, 0, 0, 0], 0.0), ([1, 0, 1, 0], 0.5), ([1, 0, 0, 0, 0, 0, 0, 0], 0.125)],
)
def test_success_rate(successes, expected):
    assert success_rate(torch.tensor(successes)).item() == pytest.approx(expected)


def test_success_rate_of_empty_batch_is_an_error():
    with pytest.raises(ValueError):
        success_rate(torch.tensor([]))


@pytest.mark.parametrize(
    "p, alpha, beta, expected",
    [
        (0.5, 0.5, 2.0, 1.0),
        (0.0, 0.5, 2.0, math.exp(-0.5)),
        (1.0, 0.5, 2.0, math.exp(-0.5)),
        (0.25, 0.5, 2.0, math.exp(-2.0 * 0.0625)),
        (0.3, 0.3, 10.0, 1.0),
        (0.9, 0.3, 10.0, math.exp(-3.6)),
        (0.5, 0.5, 0.0, 1.0),
    ],
)
def test_alpha_reward_known_points(p, alpha, beta, expected):
    assert alpha_reward(torch.tensor(p), alpha, beta).item() == pytest.approx(expected, rel=1e-6)


def test_alpha_reward_is_symmetric_and_peaks_at_alpha():
    p = torch.linspace(0, 1, 101)
    r = alpha_reward(p, 0.5, 2.0)
    assert r.argmax().item() == 50
    assert torch.allclose(r, r.flip(0), atol=1e-6)


@pytest.mark.parametrize(
    "p, expected",
    [(0.5, True), (0.4, True), (0.6, True), (0.39, False), (0.61, False), (0.0, False), (1.0, False), (0.45, True)],
)
def test_band_edges_are_closed(p, expected):
    assert bool(in_band(torch.tensor(p), 0.5, 0.1)) is expected


@pytest.mark.parametrize(
    "r, lam",
    [([1.0, 1.0, 1.0], 1.0), ([0.0, 0.5, 1.0], 1.0), ([0.2, 0.9], 5.0), ([1000.0, 0.0], 1.0), ([0.3], 2.0)],
)
def test_rwr_weights_have_mean_one_and_follow_exp(r, lam):
    w = rwr_weights(torch.tensor(r), lam)
    assert w.mean().item() == pytest.approx(1.0, rel=1e-6)
    assert torch.isfinite(w).all()
    raw = torch.exp(lam * (torch.tensor(r, dtype=torch.float64) - max(r)))
    assert torch.allclose(w.double(), raw / raw.mean(), rtol=1e-5)


def test_rwr_weights_of_a_part_are_normalized_over_the_whole_set():
    # One simulator update split into steps: each step's weights are those of the whole update.
    r = torch.tensor([0.0, 0.5, 1.0, 1.0, 0.2])
    whole = rwr_weights(r, 2.0)
    parts = torch.cat([rwr_weights(r[:2], 2.0, over=r), rwr_weights(r[2:], 2.0, over=r)])
    assert torch.allclose(parts, whole)
    assert parts.mean().item() == pytest.approx(1.0) and rwr_weights(r[:2], 2.0, over=r).mean().item() < 0.9


def test_rwr_weights_order_and_empty():
    w = rwr_weights(torch.tensor([0.1, 0.5, 0.9]), 2.0)
    assert w[0] < w[1] < w[2]
    assert rwr_weights(torch.tensor([]), 1.0).numel() == 0


@pytest.mark.parametrize(
    "x, y, expected",
    [
        ([0, 1, 2, 3, 4], [0.0, 0.0, 0.0, 0.0, 0.0], 0.0),  # ignores the signal
        ([0, 1, 2, 3, 4], [-2.0, -1.0, 0.0, 1.0, 2.0], 1.0),  # one level per bucket
        ([0, 1, 2, 3, 4], [1.0, 0.5, 0.0, -0.5, -1.0], -0.5),
        ([0, 1, 2, 3, 4], [0.0, float("nan"), 1.0, float("nan"), 2.0], 0.5),  # empty buckets are skipped
        ([0, 1, 2], [0.0, 3.0, 0.0], 0.0),
        ([0, 1], [1.0, 1.5], 0.5),
    ],
)
def test_conditioning_slope_is_the_least_squares_slope(x, y, expected):
    assert conditioning_slope(torch.tensor(x), torch.tensor(y)).item() == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("y", [[float("nan")] * 5, [1.0] + [float("nan")] * 4])
def test_conditioning_slope_needs_two_points(y):
    assert math.isnan(conditioning_slope(torch.arange(5), torch.tensor(y)).item())
