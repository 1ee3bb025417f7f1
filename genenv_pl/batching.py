"""Packing prompt + response token ids into right-padded training tensors, and the container that
carries one training step's batches through Lightning."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import IterableDataset


def pack(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    pad_id: int,
    response_logprobs: Sequence[Sequence[float]] | None = None,
) -> dict[str, Tensor]:
    """Rows are [prompt, response, pad...]. Positions therefore start at 0 in every row, which is
    what `generate` used for left-padded prompts (it derives positions from the attention mask).

    Returns input_ids, attention_mask, response_mask (1 on response tokens) and, if given,
    old_logp aligned with input_ids (0 outside the response)."""
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    T = max(lengths, default=1)
    B = len(lengths)
    input_ids = torch.full((B, T), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((B, T), dtype=torch.long)
    response_mask = torch.zeros((B, T), dtype=torch.float32)
    old_logp = torch.zeros((B, T), dtype=torch.float32) if response_logprobs is not None else None
    for i, (p, r) in enumerate(zip(prompts, responses)):
        n_p, n_r = len(p), len(r)
        input_ids[i, : n_p + n_r] = torch.tensor(list(p) + list(r), dtype=torch.long)
        attention_mask[i, : n_p + n_r] = 1
        response_mask[i, n_p : n_p + n_r] = 1.0
        if old_logp is not None:
            old_logp[i, n_p : n_p + n_r] = torch.tensor(list(response_logprobs[i]), dtype=torch.float32)
    out = {"input_ids": input_ids, "attention_mask": attention_mask, "response_mask": response_mask}
    if old_logp is not None:
        out["old_logp"] = old_logp
    return out


def split_rows(batch: dict[str, Tensor], size: int | None) -> list[dict[str, Tensor]]:
    """A packed batch as micro-batches of at most `size` rows, each cut to its own longest row
    (rows are right-padded, so the cut loses only padding). Per-row values ([B], [B, T]) are split;
    per-batch values (0-d, such as the sampling temperature) go to every micro-batch. None or a size
    of at least B: the batch itself."""
    n = int(batch["input_ids"].shape[0])
    if size is None or size >= n:
        return [batch]
    if size < 1:
        raise ValueError(f"micro_batch_size must be at least 1, got {size}")
    out = []
    for i in range(0, n, size):
        rows = slice(i, i + size)
        width = max(int(batch["attention_mask"][rows].sum(dim=1).max()), 1)
        out.append({k: v if v.dim() == 0 else v[rows, :width] if v.dim() == 2 else v[rows] for k, v in batch.items()})
    return out


class Step:
    """One training step's batches: `step["agent"]` (GRPO rows) and `step["sim"]` (RWR rows), each a
    dict of tensors or None.

    Deliberately not a dict. Before `training_step`, Lightning's precision plugin casts every floating
    tensor it finds inside standard collections to its input dtype (`bf16-true`: bf16). That would quantize what must stay exact: the rollouts' old log-probs
    (near -10 a bf16 step is 0.06), advantages, RWR weights and R_env, and the sampling temperature
    (0.7 becomes 0.6992). Lightning moves any object that has a `to` method to the device and leaves
    its contents alone otherwise, so these stay fp32 whatever the precision plugin."""

    __slots__ = ("agent", "sim")

    def __init__(self, agent: dict[str, Tensor] | None = None, sim: dict[str, Tensor] | None = None):
        self.agent, self.sim = agent, sim

    def __getitem__(self, role: str) -> dict[str, Tensor] | None:
        return getattr(self, _role(role))

    def __setitem__(self, role: str, batch: dict[str, Tensor] | None) -> None:
        setattr(self, _role(role), batch)

    def to(self, device: Any, **kwargs: Any) -> "Step":
        def move(batch):
            return None if batch is None else {k: v.to(device, **kwargs) for k, v in batch.items()}
        return Step(move(self.agent), move(self.sim))

    def __repr__(self) -> str:
        return f"Step(agent={_shape(self.agent)}, sim={_shape(self.sim)})"


class Steps(IterableDataset):
    """One rank's steps of an epoch, in order. Iterable, because Lightning shards a map-style dataset over
    the ranks (`use_distributed_sampler`) and these are this rank's own already."""

    def __init__(self, steps: list[Step]):
        self.steps = steps

    def __iter__(self):
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)


def _role(role: str) -> str:
    if role not in Step.__slots__:
        raise KeyError(role)
    return role


def _shape(batch: dict[str, Tensor] | None) -> str:
    return "None" if batch is None else f"{tuple(batch['input_ids'].shape)} rows x tokens"
