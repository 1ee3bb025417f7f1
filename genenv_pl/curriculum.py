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


def rwr_weights(r_env: Tensor, lam: float = 1.0) -> Tensor:
    """Reward-weighted regression weights w_i = exp(lam R_i) / mean_j exp(lam R_j) (mean 1).

    Computed through softmax so large lam * R cannot overflow."""
    if r_env.numel() == 0:
        return r_env.float()
    return torch.softmax(lam * r_env.float(), dim=0) * r_env.numel()


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
