"""Supervised warm start: a few hundred SFT steps that give from-scratch policies a competent
start (the paper starts from instruct models instead). Runs once; the result is cached."""
from __future__ import annotations

import contextlib
import random
import time
from dataclasses import asdict, dataclass

import torch

from genenv_pl import heap
from genenv_pl.batching import pack
from genenv_pl.losses import sequence_nll
from genenv_pl.policy import Policy


@dataclass
class WarmStartConfig:
    """Supervised warm start on environment-provided (prompt, target) pairs. steps=0 skips it."""

    steps: int = 0
    """Optimizer steps of supervised fine-tuning before co-evolution; 0 skips the warm start (the paper
    starts from instruct models instead)."""
    batch_size: int = 64
    """(prompt, target) pairs per step."""
    lr: float = 3e-3
    """Peak AdamW learning rate, decayed linearly to 5% of it over `steps`."""
    num_examples: int = 20000
    """Examples drawn from the environment's warm-start data; steps sample from them with replacement."""
    seed: int = 0
    """Seeds the examples drawn and their order."""
    warmup_steps: int = 50
    """Linear lr warm-up, in steps; short warm starts of pretrained models need fewer."""
    autocast: str | None = None
    """"bfloat16": the forward passes run under bf16 autocast (weights, gradients and AdamW state stay
    fp32), as `trainer.precision: bf16-mixed` does for co-evolution. About 2.2x faster on a CPU with
    AMX for SmolLM2 on 850-token ALFWorld prompts; null: fp32."""


def cache_fields(cfg: WarmStartConfig) -> dict:
    """The settings that key a cached warm start. `autocast` joins only when set, so warm starts cached
    before it existed (the committed BFCL adapters) keep their keys."""
    fields = asdict(cfg)
    if fields["autocast"] is None:
        del fields["autocast"]
    return fields


def warm_start(policy: Policy, examples: list[tuple[str, str]], cfg: WarmStartConfig, log_every: int = 100) -> list[float]:
    """Minimize the NLL of each target given its rendered prompt. Returns the loss curve."""
    prompts = policy.encode([p for p, _ in examples])
    targets = [ids + [policy.eos_id] for ids in policy.encode([t for _, t in examples])]
    rng = random.Random(cfg.seed)
    params = policy.trainable_parameters()  # LoRA: the adapter (shared base: this policy's own)
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(1, cfg.warmup_steps)) * max(0.05, 1 - s / cfg.steps))
    device = next(policy.parameters()).device
    autocast = (torch.autocast(device.type, dtype=getattr(torch, cfg.autocast)) if cfg.autocast
                else contextlib.nullcontext())
    policy.train()
    losses, t0 = [], time.perf_counter()
    for step in range(cfg.steps):
        idx = [rng.randrange(len(examples)) for _ in range(cfg.batch_size)]
        b = pack([prompts[i] for i in idx], [targets[i] for i in idx], policy.pad_id)
        b = {k: v.to(device) for k, v in b.items()}
        # Only the targets are scored: full-vocabulary logits at every prompt position (hundreds of
        # tokens x 49K vocabulary x batch for a real model's tool prompts) would not fit in memory.
        with autocast:
            logp, _ = policy.token_logprobs(b["input_ids"], b["attention_mask"], response_mask=b["response_mask"])
        loss = sequence_nll(logp.float(), b["response_mask"]).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        heap.trim()  # examples differ in length: without it a CPU heap keeps every step's freed activations
        if log_every and (step + 1) % log_every == 0:
            print(f"  warm start {step + 1}/{cfg.steps}  loss {sum(losses[-log_every:]) / log_every:.4f}  "
                  f"({time.perf_counter() - t0:.0f}s)", flush=True)
    policy.eval()
    return losses
