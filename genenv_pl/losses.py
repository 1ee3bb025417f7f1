"""Policy losses as pure functions: GRPO for the agent, reward-weighted regression for the simulator.

Shapes: per-token tensors are [B, T] and aligned with `mask` (1 on response tokens, 0 elsewhere).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def masked_mean(x: Tensor, mask: Tensor, n_tokens: float | None = None) -> Tensor:
    """Mean over the tokens where mask is 1 ("token-level" aggregation over the whole batch).

    `n_tokens`: divide by this count instead of mask's own, for a micro-batch of a larger batch: the
    micro-batches' values then sum to the whole batch's mean (gradient accumulation)."""
    mask = mask.to(x.dtype)
    return (x * mask).sum() / (n_tokens if n_tokens is not None else mask.sum().clamp(min=1.0))


def group_advantages(rewards: Tensor, eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """GRPO advantages A_i = (r_i - mean_group) / (std_group + eps) for rewards shaped [groups, G].

    Returns (advantages, zero_std) where zero_std marks groups whose rewards are all equal: those
    carry no policy-gradient signal and get exactly zero advantage."""
    mean = rewards.mean(dim=-1, keepdim=True)
    std = rewards.std(dim=-1, keepdim=True, unbiased=True) if rewards.shape[-1] > 1 else torch.zeros_like(mean)
    zero_std = (rewards.max(dim=-1).values - rewards.min(dim=-1).values) == 0
    adv = (rewards - mean) / (std + eps)
    adv = torch.where(zero_std.unsqueeze(-1), torch.zeros_like(adv), adv)
    return adv, zero_std


def clipped_surrogate(logp: Tensor, logp_old: Tensor, advantages: Tensor, mask: Tensor, clip_eps: float = 0.2,
                      n_tokens: float | None = None) -> Tensor:
    """PPO/GRPO clipped surrogate loss, token-level: -sum_t min(rho A, clip(rho) A) / #tokens.

    `advantages` is [B] (one per sequence) or [B, T]."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    ratio = importance_ratio(logp, logp_old)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    return -masked_mean(torch.minimum(unclipped, clipped), mask, n_tokens)


def importance_ratio(logp: Tensor, logp_old: Tensor, log_clamp: float = 20.0) -> Tensor:
    """rho = exp(logp - logp_old) per token, the log-ratio clamped to [-20, 20] before exp (verl's clamp):
    above ~88 exp overflows fp32, and inf times a negative (or zero) advantage makes the loss inf (or NaN)
    and skips the whole step. Past e^20 the clip in the surrogate has long taken over anyway."""
    return torch.exp(torch.clamp(logp - logp_old, min=-log_clamp, max=log_clamp))


def low_var_kl(logp: Tensor, logp_ref: Tensor, clamp: float = 10.0, d_clamp: float = 20.0) -> Tensor:
    """k3 estimator of KL(pi || pi_ref) per token: exp(d) - d - 1 with d = logp_ref - logp (>= 0).

    As in the reference trainer family, d is clamped to [-20, 20] *before* exp: clamping only the result
    leaves exp(d) = inf for d above ~88 in fp32, whose backward is 0 * inf = NaN."""
    d = torch.clamp(logp_ref - logp, min=-d_clamp, max=d_clamp)
    return torch.clamp(torch.exp(d) - d - 1.0, min=-clamp, max=clamp)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Per-position entropy of the categorical distribution given by logits [..., V]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


@dataclass
class GRPOTerms:
    loss: Tensor
    pg_loss: Tensor
    kl: Tensor
    entropy: Tensor
    clip_frac: Tensor
    kl_seq: Tensor  # KL(pi || pi_ref) of a reply: its tokens' k3 summed, mean over replies (not a loss term)


def grpo_loss(
    logp: Tensor,
    logp_old: Tensor,
    logp_ref: Tensor | None,
    entropy: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_eps: float = 0.2,
    kl_coef: float = 0.001,
    entropy_coef: float = 0.001,
    n_tokens: float | None = None,
    n_rows: float | None = None,
) -> GRPOTerms:
    """GRPO objective: clipped surrogate + kl_coef * low_var_kl(pi || pi_ref) - entropy_coef * H.

    Every term is a mean over response tokens; `n_tokens` and `n_rows` (the whole step's counts) make the
    terms of its micro-batches add up to the whole step's. Also `kl_seq`, the KL of a reply (summed over its
    tokens, mean over replies), for the logs: a token mean is diluted by tokens every reply writes alike (a
    fixed preamble), where the policy has moved nowhere."""
    pg = clipped_surrogate(logp, logp_old, advantages, mask, clip_eps, n_tokens)
    if logp_ref is not None:
        kl_tokens = low_var_kl(logp, logp_ref) * mask.to(logp.dtype)
        kl = kl_tokens.sum() / (n_tokens if n_tokens is not None else mask.sum().clamp(min=1.0))
        kl_seq = kl_tokens.detach().sum() / (n_rows if n_rows is not None else max(logp.shape[0], 1))
    else:
        kl, kl_seq = torch.zeros_like(pg), torch.zeros_like(pg).detach()
    ent = masked_mean(entropy, mask, n_tokens)
    clip_frac = masked_mean(clip_active(logp, logp_old, advantages, clip_eps).float(), mask, n_tokens)
    return GRPOTerms(pg + kl_coef * kl - entropy_coef * ent, pg, kl, ent, clip_frac.detach(), kl_seq)


def clip_active(logp: Tensor, logp_old: Tensor, advantages: Tensor, clip_eps: float = 0.2) -> Tensor:
    """Tokens where the clipped term is the one min() takes (and so carries no gradient): ratio above
    1 + eps with a positive advantage, or below 1 - eps with a negative one. A ratio outside the
    interval on the other side of the advantage is not clipped."""
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    ratio = importance_ratio(logp, logp_old)
    return ((ratio > 1.0 + clip_eps) & (advantages > 0)) | ((ratio < 1.0 - clip_eps) & (advantages < 0))


def sequence_nll(logp: Tensor, mask: Tensor) -> Tensor:
    """Mean negative log-likelihood per sequence over its masked tokens: [B, T] -> [B]."""
    mask = mask.to(logp.dtype)
    return -(logp * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


@dataclass
class RWRTerms:
    loss: Tensor
    nll: Tensor
    kl: Tensor


def rwr_loss(logp: Tensor, logp_ref: Tensor | None, weights: Tensor, mask: Tensor, kl_coef: float = 0.1,
             n_rows: int | None = None, n_tokens: float | None = None) -> RWRTerms:
    """Reward-weighted regression: mean_i w_i NLL_i + kl_coef * KL(pi || pi_init) on the same tokens.

    `n_rows` and `n_tokens` (the whole step's sequences and response tokens) make the terms of its
    micro-batches add up to the whole step's."""
    nll = sequence_nll(logp, mask)
    rows = n_rows if n_rows is not None else nll.shape[0]
    weighted = (weights.to(nll.dtype) * nll).sum() / rows
    kl = masked_mean(low_var_kl(logp, logp_ref), mask, n_tokens) if logp_ref is not None else torch.zeros_like(weighted)
    return RWRTerms(weighted + kl_coef * kl, nll.sum() / rows, kl)
