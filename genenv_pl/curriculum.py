"""alpha-Curriculum math (GenEnv section 2, steps 4-6 and 8). Pure functions of tensors."""
from __future__ import annotations

import torch
from torch import Tensor


def success_rate(successes: Tensor) -> Tensor:
    """p_hat for one seed batch: successes / (K_valid * G). `successes` holds 0/1 per rollout."""
    if successes.numel() == 0:
        raise ValueError("p_hat of an empty seed batch is undefined")
    return successes.float().mean()


def alpha_reward(p_hat: Tensor, alpha: float = 0.5, beta: float = 2.0) -> Tensor:
    """R_env = exp(-beta * (p_hat - alpha)^2): highest for tasks the agent solves alpha of the time."""
    return torch.exp(-beta * (p_hat - alpha) ** 2)


def in_band(p_hat: Tensor, alpha: float = 0.5, k_min: float = 0.1) -> Tensor:
    """Seed batches with |p_hat - alpha| <= k_min take part in the simulator update.

    A small tolerance keeps the closed edge closed under float rounding (0.6 - 0.5 > 0.1 in floats)."""
    return (p_hat - alpha).abs() <= k_min + 1e-6


def rwr_weights(r_env: Tensor, lam: float = 1.0, over: Tensor | None = None) -> Tensor:
    """Reward-weighted regression weights w_i = exp(lam R_i) / mean_j exp(lam R_j), the mean taken over
    the set `over` that r_env is part of (default: r_env itself): mean 1 over that whole set, so that an
    update split into steps weighs each sample as the whole update would.

    exp is taken of lam R - max(lam R) so large lam * R cannot overflow."""
    if r_env.numel() == 0:
        return r_env.float()
    over = r_env if over is None or over.numel() == 0 else over
    scaled, top = lam * r_env.float(), (lam * over.float()).max()
    return torch.exp(scaled - top) / torch.exp(lam * over.float() - top).mean()


def conditioning_slope(buckets: Tensor, deltas: Tensor) -> Tensor:
    """Least-squares slope of `deltas` against `buckets` (NaN entries ignored; NaN with < 2 points).

    Applied to the simulator's mean change of difficulty (written task minus seed) against the
    success bucket shown in its prompt: > 0 when it writes harder tasks for an agent that succeeds."""
    x, y = buckets.double(), deltas.double()
    keep = ~torch.isnan(y)
    x, y = x[keep], y[keep]
    dx = x - x.mean()
    if x.numel() < 2 or float((dx**2).sum()) == 0.0:
        return torch.tensor(float("nan"))
    return ((dx * (y - y.mean())).sum() / (dx**2).sum()).float()
