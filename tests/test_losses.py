import math

import pytest
import torch

from genenv_pl.losses import (clip_active, clipped_surrogate, entropy_from_logits, group_advantages, grpo_loss, low_var_kl,
                              masked_mean, rwr_loss, sequence_nll)


@pytest.mark.parametrize(
    "rewards, expected_zero_std",
    [
        ([[1.0, 1.0, 1.0, 1.0]], [True]),
        ([[0.0, 0.0, 0.0, 0.0]], [True]),
        ([[1.0, 0.0, 1.0, 0.0]], [False]),
        ([[0.5, 0.5], [0.0, 1.0]], [True, False]),
    ],
)
def test_group_advantages_zero_variance(rewards, expected_zero_std):
    adv, zero = group_advantages(torch.tensor(rewards))
    assert zero.tolist() == expected_zero_std
    for row, z in zip(adv, expected_zero_std):
        if z:
            assert torch.all(row == 0)
        else:
            assert row.mean().abs().item() < 1e-6
            assert row.std().item() == pytest.approx(1.0, rel=1e-4)


@pytest.mark.parametrize(
    "rewards, eps, expected",
    [
        # mean 0.5, unbiased std sqrt(0.5) = 0.70711: (r - mean) / std
        ([1.0, 0.0], 1e-6, [0.70711, -0.70711]),
        # mean 0.5, unbiased std sqrt(1/3) = 0.57735
        ([1.0, 0.0, 1.0, 0.0], 1e-6, [0.86603, -0.86603, 0.86603, -0.86603]),
        # mean 0.25, unbiased std 0.5
        ([1.0, 0.0, 0.0, 0.0], 1e-6, [1.5, -0.5, -0.5, -0.5]),
        # eps enters the denominator: 0.75 / (0.5 + 1)
        ([1.0, 0.0, 0.0, 0.0], 1.0, [0.5, -0.16667, -0.16667, -0.16667]),
    ],
)
def test_group_advantages_values(rewards, eps, expected):
    adv, _ = group_advantages(torch.tensor([rewards]), eps=eps)
    assert adv[0].tolist() == pytest.approx(expected, abs=1e-4)


M = torch.ones(1, 1)


@pytest.mark.parametrize(
    "ratio, adv, expected",
    [
        (1.0, 1.0, -1.0),  # on-policy: loss = -A
        (1.0, -1.0, 1.0),
        (1.5, 1.0, -1.2),  # positive advantage: ratio clipped at 1 + eps
        (0.5, 1.0, -0.5),  # positive advantage, ratio below: unclipped (pessimistic min)
        (0.5, -1.0, 0.8),  # negative advantage: clipped at 1 - eps
        (1.5, -1.0, 1.5),  # negative advantage, ratio above: unclipped
    ],
)
def test_clipped_surrogate_signs_and_clipping(ratio, adv, expected):
    logp_old = torch.zeros(1, 1)
    logp = torch.log(torch.tensor([[ratio]]))
    loss = clipped_surrogate(logp, logp_old, torch.tensor([adv]), M, 0.2)
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_clipped_surrogate_gradient_direction():
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    clipped_surrogate(logp, torch.zeros(2, 3), torch.tensor([1.0, -1.0]), mask).backward()
    assert (logp.grad[0, 1:] < 0).all()  # descent raises log-probs of the positive-advantage row
    assert logp.grad[1, 1] > 0
    assert logp.grad[:, 0].abs().sum() == 0 and logp.grad[1, 2] == 0  # masked tokens get no gradient


def test_token_level_aggregation_weights_every_token_equally():
    # Two sequences with 1 and 3 tokens: token-level mean = sum / 4, not mean of sequence means.
    x = torch.tensor([[2.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    assert masked_mean(x, mask).item() == pytest.approx(5.0 / 4)


@pytest.mark.parametrize(
    "d, expected",
    [(0.0, 0.0), (1.0, math.e - 2.0), (-1.0, math.exp(-1.0)), (0.5, math.exp(0.5) - 1.5), (3.0, 10.0), (-30.0, 10.0)],
)
def test_low_var_kl_hand_computed(d, expected):
    # exp(d) - d - 1, clamped to 10 (d = 3: 16.09 -> 10; d = -30 is clamped to -20 first: 19 -> 10)
    assert low_var_kl(torch.tensor([0.0]), torch.tensor([d])).item() == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("d", [-12.0, -3.0, -0.5, -1e-3, 0.0, 1e-3, 0.5, 3.0, 12.0])
def test_low_var_kl_nonnegative_and_zero_at_equal(d):
    logp = torch.tensor([0.0])
    kl = low_var_kl(logp, logp + d)
    assert kl.item() >= 0
    assert kl.item() <= 10.0
    if d == 0.0:
        assert kl.item() == 0.0


def test_low_var_kl_matches_true_kl_in_expectation():
    torch.manual_seed(0)
    # Mild distributions, so that the [-10, 10] clamp never bites and the estimator is unbiased.
    p = torch.softmax(0.5 * torch.randn(5), 0)
    q = torch.softmax(0.5 * torch.randn(5), 0)
    x = torch.multinomial(p, 200000, replacement=True)
    est = low_var_kl(p.log()[x], q.log()[x]).mean()
    true = (p * (p.log() - q.log())).sum()
    assert est.item() == pytest.approx(true.item(), rel=0.05)


def test_entropy_from_logits():
    assert entropy_from_logits(torch.zeros(4)).item() == pytest.approx(torch.log(torch.tensor(4.0)).item())
    assert entropy_from_logits(torch.tensor([100.0, 0.0, 0.0])).item() == pytest.approx(0.0, abs=1e-6)


def test_grpo_loss_combines_terms():
    logp = torch.log(torch.tensor([[0.5, 0.25]]))
    mask = torch.ones(1, 2)
    ent = torch.tensor([[1.0, 2.0]])
    t = grpo_loss(logp, logp, logp, ent, torch.tensor([2.0]), mask, kl_coef=0.1, entropy_coef=0.01)
    assert t.kl.item() == 0.0
    assert t.pg_loss.item() == pytest.approx(-2.0)
    assert t.loss.item() == pytest.approx(-2.0 - 0.01 * 1.5)
    assert t.clip_frac.item() == 0.0


@pytest.mark.parametrize("weights, expected", [([1.0, 1.0], 1.5), ([2.0, 0.0], 1.0), ([0.0, 2.0], 2.0)])
def test_rwr_loss_weighted_nll(weights, expected):
    # NLLs per sequence: 1.0 and 2.0 (masked token means).
    logp = torch.tensor([[-1.0, -1.0], [-2.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert sequence_nll(logp, mask).tolist() == pytest.approx([1.0, 2.0])
    t = rwr_loss(logp, None, torch.tensor(weights), mask, kl_coef=0.5)
    assert t.loss.item() == pytest.approx(expected)
    t2 = rwr_loss(logp, logp - 1.0, torch.tensor(weights), mask, kl_coef=0.5)
    assert t2.kl.item() > 0 and t2.loss.item() > t.loss.item()


@pytest.mark.parametrize("d", [100.0, -100.0, 90.0, 1000.0])
def test_low_var_kl_is_finite_forward_and_backward_at_extreme_log_ratios(d):
    # Clamping only exp(d) - d - 1 left exp(100) = inf in the graph: backward gave 0 * inf = NaN.
    logp = torch.zeros(3, requires_grad=True)
    kl = low_var_kl(logp, torch.full((3,), d))
    kl.sum().backward()
    assert torch.isfinite(kl).all() and 0.0 <= kl.min() and kl.max() <= 10.0
    assert torch.isfinite(logp.grad).all()


@pytest.mark.parametrize(
    "ratio, adv, active",
    [
        (1.5, 1.0, True),  # above 1 + eps, positive advantage: the clipped term is taken
        (1.5, -1.0, False),  # above 1 + eps, negative advantage: min() takes the unclipped term
        (0.5, -1.0, True),
        (0.5, 1.0, False),
        (1.1, 1.0, False),  # inside the interval
        (0.9, -1.0, False),
        (1.5, 0.0, False),  # no advantage, nothing to clip
    ],
)
def test_clip_frac_counts_only_tokens_where_the_clip_is_active(ratio, adv, active):
    logp_old = torch.zeros(1, 1)
    logp = torch.log(torch.tensor([[ratio]]))
    mask = torch.ones(1, 1)
    assert bool(clip_active(logp, logp_old, torch.tensor([adv]), 0.2)[0, 0]) is active
    t = grpo_loss(logp, logp_old, None, torch.zeros(1, 1), torch.tensor([adv]), mask, clip_eps=0.2)
    assert t.clip_frac.item() == float(active)
    # and the clipped term is exactly where the surrogate has no gradient
    lp = logp.clone().requires_grad_(True)
    clipped_surrogate(lp, logp_old, torch.tensor([adv]), mask, 0.2).backward()
    assert (lp.grad.abs().item() == 0.0) is (active or adv == 0.0)


def _batch(seed: int = 0):
    """Four rows of different response lengths, so that a token mean and a row mean differ."""
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(4, 6, generator=g) * 3
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.float32)
    return logp, -torch.rand(4, 6, generator=g) * 3, -torch.rand(4, 6, generator=g) * 3, torch.rand(4, 6, generator=g), mask


@pytest.mark.parametrize("split", [[4], [2, 2], [1, 3], [1, 1, 1, 1], [3, 1]])
def test_micro_batch_terms_with_the_steps_counts_add_up_to_the_whole_batch(split):
    """Gradient accumulation: every term of every micro-batch, normalised by the whole step's token and
    row counts, sums to the whole batch's term (token means and row means alike)."""
    logp, old, ref, ent, mask = _batch()
    adv, weights = torch.tensor([1.0, -0.5, 2.0, -1.5]), torch.tensor([0.2, 1.8, 1.0, 1.0])
    whole_g = grpo_loss(logp, old, ref, ent, adv, mask, 0.2, 0.1, 0.01)
    whole_r = rwr_loss(logp, ref, weights, mask, 0.3)
    n_tokens = float(mask.sum())
    parts_g, parts_r, i = [], [], 0
    for n in split:
        rows = slice(i, i + n)
        i += n
        parts_g.append(grpo_loss(logp[rows], old[rows], ref[rows], ent[rows], adv[rows], mask[rows], 0.2, 0.1, 0.01,
                                 n_tokens=n_tokens, n_rows=4))
        parts_r.append(rwr_loss(logp[rows], ref[rows], weights[rows], mask[rows], 0.3, n_rows=4, n_tokens=n_tokens))
    for name in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "kl_seq"):
        assert sum(getattr(t, name) for t in parts_g).item() == pytest.approx(getattr(whole_g, name).item(), abs=1e-6)
    for name in ("loss", "nll", "kl"):
        assert sum(getattr(t, name) for t in parts_r).item() == pytest.approx(getattr(whole_r, name).item(), abs=1e-6)
    # without the step's counts the parts' sum is not the whole's (the test above is not vacuous)
    if len(split) > 1:
        naive = sum(rwr_loss(logp[s], ref[s], weights[s], mask[s], 0.3).loss.item()
                    for s in (slice(a, a + n) for a, n in zip([sum(split[:k]) for k in range(len(split))], split)))
        assert naive != pytest.approx(whole_r.loss.item(), abs=1e-3)


# ---- the KL term's direction (logp_ref != logp: with equal log-probs any sign error would pass) ----
@pytest.mark.parametrize("p, p_ref", [(0.5, 0.25), (0.25, 0.5), (0.1, 0.9), (0.9, 0.1)])
def test_kl_term_has_the_hand_computed_value_and_pulls_the_policy_to_the_reference(p, p_ref):
    """k3 with d = logp_ref - logp: exp(d) - d - 1. Swapping the arguments gives another value whenever
    p != p_ref (0.193 against 0.307 at 0.5 / 0.25), and the gradient of the loss moves logp towards logp_ref."""
    logp, logp_ref = torch.log(torch.tensor([[p]])), torch.log(torch.tensor([[p_ref]]))
    d = math.log(p_ref) - math.log(p)
    expected, swapped = math.exp(d) - d - 1, math.exp(-d) + d - 1
    assert expected != pytest.approx(swapped, abs=1e-3)
    mask, zero = torch.ones(1, 1), torch.zeros(1, 1)
    for kl_coef in (0.1, 1.0):
        lp = logp.clone().requires_grad_(True)
        t = grpo_loss(lp, lp.detach(), logp_ref, zero, torch.tensor([0.0]), mask, kl_coef=kl_coef, entropy_coef=0.0)
        assert t.kl.item() == pytest.approx(expected, rel=1e-5)
        assert t.loss.item() == pytest.approx(kl_coef * expected, rel=1e-5)  # zero advantage: the KL term alone
        t.loss.backward()
        assert torch.sign(-lp.grad).item() == math.copysign(1.0, math.log(p_ref) - math.log(p))  # descent moves to ref
    r = rwr_loss(logp, logp_ref, torch.tensor([1.0]), mask, kl_coef=0.5)
    assert r.kl.item() == pytest.approx(expected, rel=1e-5)
    assert r.loss.item() == pytest.approx(-math.log(p) + 0.5 * expected, rel=1e-5)


# ---- the surrogate's ratio at extreme log-ratios (defect: only the KL was clamped in log space) ----
@pytest.mark.parametrize("d", [100.0, 89.0, 1000.0, -100.0, -1000.0])
@pytest.mark.parametrize("adv", [1.0, -1.0, 0.0])
def test_clipped_surrogate_is_finite_forward_and_backward_at_extreme_log_ratios(d, adv):
    """exp(logp - logp_old) overflows fp32 above a log-ratio of about 88: inf times a negative advantage
    made the loss inf (and inf times 0, NaN), and the whole step was skipped. The log-ratio is clamped
    before exp, as the KL's is."""
    logp = torch.tensor([[d, 0.0]], requires_grad=True)
    logp_old, mask = torch.zeros(1, 2), torch.tensor([[1.0, 0.0]])
    for loss in (clipped_surrogate(logp, logp_old, torch.tensor([adv]), mask, 0.2),
                 grpo_loss(logp, logp_old, None, torch.zeros(1, 2), torch.tensor([adv]), mask).loss):
        assert torch.isfinite(loss), (d, adv, loss)
        logp.grad = None
        loss.backward()
        assert torch.isfinite(logp.grad).all(), (d, adv, logp.grad)
    assert torch.isfinite(grpo_loss(logp, logp_old, None, torch.zeros(1, 2), torch.tensor([adv]), mask).clip_frac)


@pytest.mark.parametrize("kl_rows, mask, tokens_mean, reply_mean", [
    # per-token k3 values of two replies; the token mean is diluted by tokens that did not move, the reply sum not
    ([[0.0, 0.0, 0.0, 0.3], [0.0, 0.0, 0.0, 0.1]], [[1, 1, 1, 1], [1, 1, 1, 1]], 0.05, 0.2),
    ([[0.2, 0.0, 0.0, 0.0], [0.4, 0.9, 0.0, 0.0]], [[1, 0, 0, 0], [1, 0, 0, 0]], 0.3, 0.3),  # masked tokens count nowhere
    ([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]], [[1, 1, 0, 0], [0, 0, 0, 0]], 0.5, 0.5),  # an empty row: 2 rows
])
def test_kl_of_a_reply_sums_its_tokens(kl_rows, mask, tokens_mean, reply_mean):
    """kl_seq: each reply's k3 summed over its tokens, mean over the replies; kl: the mean over tokens."""
    # logp_ref - logp = d with exp(d) - d - 1 = k: solve for d >= 0 numerically
    k = torch.tensor(kl_rows, dtype=torch.float64)
    d = torch.zeros_like(k)
    for _ in range(60):  # Newton on f(d) = exp(d) - d - 1 - k, from d = 1 where k > 0
        d = torch.where(k > 0, torch.where(d == 0, torch.ones_like(d), d), d)
        d = d - (torch.exp(d) - d - 1 - k) / torch.where(k > 0, torch.exp(d) - 1, torch.ones_like(d))
    logp = torch.full_like(k, -2.0)
    m = torch.tensor(mask, dtype=torch.float64)
    t = grpo_loss(logp, logp, logp + d, torch.zeros_like(k), torch.zeros(2, dtype=torch.float64), m)
    assert float(t.kl) == pytest.approx(tokens_mean, abs=1e-9)
    assert float(t.kl_seq) == pytest.approx(reply_mean, abs=1e-9)
