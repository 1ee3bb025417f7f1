"""Applying a role's loss: backward, clip, step, schedule, and everything several ranks must agree on.

`GenEnvModule`'s agent and simulator steps build a loss and hand it to `Updater.apply`; the training
step runs each role through `Updater.run`. In one process this is Lightning's manual-optimization
recipe (`manual_backward`, clip, `step`, scheduler), with gradient accumulation over micro-batches
(`grpo.micro_batch_size`, `rwr.micro_batch_size`) and three guards:

- a non-finite loss, or a finite loss that back-propagates a non-finite gradient, skips the step
  (counted in `train/nonfinite_skipped`);
- the simulator's step is undone when it moved the simulator past `rwr.kl_cap` (the mean per-token
  KL between the simulator before and after the step, on that step's batch): parameters and optimizer
  state are restored, the scheduler does not step, `sim/skipped_kl` counts it;
- after a step the generation backend is told of the new weights (vLLM; HF: no-op).

Gradients are freed (set to None) as soon as a step is taken, undone or skipped: a role's full
gradients must not stay in memory through the other role's backward and the next generation phase.
`run` returns whether the role's step was kept, which decides whether D_env keeps its samples.

Several ranks (DDP, FSDP) hold equal weights only if they take the same steps, so:

1. Every rank comes to `apply` once per role and training step, with or without a batch: a rank
   without one joins the others at the end of `run` with loss None.
2. Every rank runs the same number of backward passes (each is a gradient all-reduce or
   reduce-scatter): the most micro-batches any rank has this step (`run` agrees on it). A rank with
   fewer pads its list with blank micro-batches, whose loss is exactly zero (`micro_batches`).
3. Every rank's loss is normalised by the whole step's counts (response tokens, and rows for RWR, summed
   over the ranks: `totals`) and multiplied by the world size, which DDP's and FSDP's gradient mean divides
   out again: the gradient is that of the step's global batch, token-level, as one rank would compute it.
   A non-finite loss on any rank, in any pass, skips the step on all of them.
4. DDP: a rank without a batch back-propagates a zero through the policy's parameters, which keeps it
   in the same gradient all-reduce. FSDP: every forward pass gathers parameters from all ranks, so all
   ranks run the same forward passes: a rank without a batch runs blank ones (`run`).
5. A non-finite gradient on any rank, and the KL-cap decision, are all-reduced: every rank skips or
   undoes the same steps (the KL's sums and token counts over all ranks' batches; a rank that added no
   loss adds no tokens).
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Callable, Iterable

import torch
from lightning.pytorch.utilities import rank_zero_info

from genenv_pl.batching import pack, split_rows
from genenv_pl.distributed import RankSync

if TYPE_CHECKING:
    from genenv_pl.module import GenEnvModule
    from genenv_pl.policy import Policy

Batch = dict[str, torch.Tensor]
ROLES = {"agent": 0, "sim": 1}  # role -> index of its optimizer and scheduler


class Updater:
    def __init__(self, module: "GenEnvModule"):
        self.module = module
        self._joined: set[str] = set()  # roles that reached `apply` in this training step
        self._blank: set[str] = set()  # FSDP: roles that run a blank batch on this rank in this step
        self._passes: dict[str, int] = {}  # several ranks: backward passes every rank runs for a role this step
        self._kept: set[str] = set()  # roles whose optimizer step in this training step was kept (on every rank)
        self.totals: dict[str, tuple[float, float]] = {}  # role -> (rows, response tokens) of the step, all ranks'

    def run(self, role: str, batch: Batch | None, step: Callable[[Batch], None]) -> bool:
        """One role's part of a training step: `step(batch)` builds the loss and calls `apply`. Returns
        whether the role's optimizer step was kept, the same on every rank (False: no step, skipped or undone)."""
        self._kept.discard(role)
        self._joined.discard(role)
        self._blank.discard(role)
        self._passes.pop(role, None)
        rows, tokens = (float(batch["input_ids"].shape[0]), float(batch["response_mask"].sum())) if batch is not None \
            else (0.0, 0.0)
        if self._sync.distributed:  # rules 2 and 3 (collectives: every rank, every step)
            own = len(split_rows(batch, self._micro_size(role))) if batch is not None else 0
            self._passes[role] = int(self._sync.max(own))
            rows, tokens = self._sync.sums([rows, tokens])
        self.totals[role] = (max(rows, 1.0), max(tokens, 1.0))
        batch = self._lockstep(role, batch)
        if batch is not None:
            step(batch)
        if role not in self._joined and self._sync.distributed:  # rule 1: join the ranks that stepped
            self.apply(role, None)
        return role in self._kept

    def micro_batches(self, role: str, batch: Batch) -> list[Batch]:
        """`batch` in micro-batches of the role's `micro_batch_size` rows (`split_rows`); with several
        ranks, padded with blank ones to the number of passes every rank runs (rule 2)."""
        micro = split_rows(batch, self._micro_size(role))
        missing = self._passes.get(role, len(micro)) - len(micro)
        return micro + [self._blank_batch(role) for _ in range(missing)]

    def apply(self, role: str, losses: Iterable[torch.Tensor] | None,
              kl_of_update: Callable[[], tuple[float, float]] | None = None) -> bool:
        """One optimizer step of `role` on the sum of `losses`, one per micro-batch, each built only when
        the previous one has gone backward (so one micro-batch's activations are alive at a time): a
        generator. `kl_of_update` (simulator) measures this rank's batch after the step: (sum of
        per-token KL, number of tokens). Returns whether this rank's own loss was applied (the caller
        logs its terms only then)."""
        m, sync = self.module, self._sync
        if not sync.distributed:
            return self._accumulate(role, losses, kl_of_update) if losses is not None else False
        self._joined.add(role)
        opt, policy = m.optimizers()[ROLES[role]], self._policy(role)
        own = losses is not None and role not in self._blank
        if sync.sum(float(own)) == 0:  # no rank has a batch
            return False
        scale = float(sync.world)  # rule 3
        opt.zero_grad(set_to_none=True)
        passes = iter(losses) if losses is not None else None
        for _ in range(self._passes.get(role, 1)):
            loss = next(passes) if passes is not None else None  # (the micro-batch's forward pass runs here)
            finite = loss is None or bool(torch.isfinite(loss))
            if sync.sum(float(not finite)):  # rule 3: one non-finite loss anywhere skips the step everywhere
                opt.zero_grad(set_to_none=True)
                if not finite:
                    self._skip_nonfinite(role)
                return False
            if loss is None:  # rule 4 (DDP, no batch)
                loss = _zero_through(policy)
            m.manual_backward(loss * scale if own else loss * 0.0)
        return self._step(role, own, kl_of_update)

    def _micro_size(self, role: str) -> int | None:
        m = self.module
        return m.grpo.micro_batch_size if role == "agent" else m.rwr.micro_batch_size

    def _accumulate(self, role: str, losses: Iterable[torch.Tensor], kl_of_update) -> bool:
        """One process: back-propagate each micro-batch's loss as it comes, then one step. A non-finite
        loss skips the whole step."""
        m = self.module
        opt = m.optimizers()[ROLES[role]]
        opt.zero_grad(set_to_none=True)
        passes = 0
        for loss in losses:
            if not bool(torch.isfinite(loss)):
                opt.zero_grad(set_to_none=True)
                self._skip_nonfinite(role)
                return False
            m.manual_backward(loss)
            passes += 1
        return passes > 0 and self._step(role, True, kl_of_update)

    def _step(self, role: str, own: bool, kl_of_update) -> bool:
        """After backward: the finite-gradient check, clipping, the optimizer step, the KL cap, the
        backend's weights and the scheduler."""
        m = self.module
        opt, policy = m.optimizers()[ROLES[role]], self._policy(role)
        if not self._grads_finite(policy):
            opt.zero_grad(set_to_none=True)
            self._skip_nonfinite(role, "gradient")
            return False
        grad_clip = m.grpo.grad_clip if role == "agent" else m.rwr.grad_clip
        if m._sharded == "fsdp":  # FSDP (1): the norm over all shards, computed by the wrapper
            policy.model.clip_grad_norm_(grad_clip)
        else:
            m.clip_gradients(opt, gradient_clip_val=grad_clip, gradient_clip_algorithm="norm")
        capped = role == "sim" and m.rwr.kl_cap is not None
        snapshot = _snapshot(opt) if capped else None
        opt.step()
        opt.zero_grad(set_to_none=True)
        if capped and self._over_kl_cap(kl_of_update, own):
            _restore(opt, snapshot)
            m.counters["sim_skipped_kl"] += 1
            m.log("sim/skipped_kl", float(m.counters["sim_skipped_kl"]), on_step=False, on_epoch=True, reduce_fx="max",
                  batch_size=1)
            return False
        m.backend.sync(policy)  # the generation engine samples from the new weights (vLLM; HF: no-op)
        m.lr_schedulers()[ROLES[role]].step()
        m.counters[f"{role}_updates"] += 1
        self._kept.add(role)
        return own

    # ---- the rules' pieces --------------------------------------------------------------
    @property
    def _sync(self) -> RankSync:
        return RankSync(self.module.trainer)

    def _policy(self, role: str) -> "Policy":
        return self.module.agent if role == "agent" else self.module.simulator

    def _lockstep(self, role: str, batch: Batch | None) -> Batch | None:
        """Rule 4: under FSDP, if any rank has a batch for `role` in this step, a rank without one runs
        a blank batch. DDP and one process: the batch as it is."""
        if batch is not None or not self.module._sharded or not self._passes.get(role):
            return batch
        self._blank.add(role)
        return self._blank_batch(role)

    def _blank_batch(self, role: str) -> Batch:
        """One row of one padding token that scores nothing (response mask 0): its loss is exactly zero,
        yet its forward and backward passes take part in the ranks' collectives."""
        policy = self._policy(role)
        blank = pack([[policy.pad_id]], [[policy.pad_id]], policy.pad_id, [[0.0]])
        blank["response_mask"].zero_()
        blank["advantages" if role == "agent" else "weights"] = torch.zeros(1, dtype=torch.float32)
        blank["temperature"] = torch.tensor(1.0, dtype=torch.float32)
        return {k: v.to(self.module.device) for k, v in blank.items()}

    def _grads_finite(self, policy: "Policy") -> bool:
        """Rule 5: whether every gradient of the policy is finite, on every rank (each rank checks its own
        shard or replica; one non-finite value anywhere skips the step everywhere)."""
        grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad  # FSDP2: this rank's shard (DTensor)
                 for p in policy.trainable_parameters() if p.grad is not None]
        ok = bool(torch.stack([torch.isfinite(g).all() for g in grads]).all()) if grads else True
        sync = self._sync
        return sync.sum(float(not ok)) == 0 if sync.distributed else ok

    def _over_kl_cap(self, kl_of_update, own: bool) -> bool:
        """Whether the simulator step just taken went past `rwr.kl_cap` (rule 5 for several ranks).
        FSDP: every rank runs the measuring forward pass, blank batch or not (it gathers parameters)."""
        kl_sum, n = kl_of_update() if kl_of_update is not None else (0.0, 0.0)
        _reshard(self._policy("sim").model)
        if not own:
            kl_sum, n = 0.0, 0.0
        sync = self._sync
        if sync.distributed:
            kl_sum, n = sync.sum(kl_sum), sync.sum(n)
        kl = kl_sum / max(n, 1.0)
        self.module.log("sim/update_kl", kl, on_step=False, on_epoch=True, batch_size=1)
        return not kl <= self.module.rwr.kl_cap  # a NaN KL (weights gone non-finite) is past any cap

    def _skip_nonfinite(self, role: str, what: str = "loss") -> None:
        m = self.module
        m.counters["nonfinite_skipped"] += 1
        rank_zero_info(f"[genenv] non-finite {role} {what} at epoch {m.current_epoch}: update skipped")
        m.log("train/nonfinite_skipped", float(m.counters["nonfinite_skipped"]), on_step=False, on_epoch=True,
              reduce_fx="max", batch_size=1)


def _reshard(model: torch.nn.Module) -> None:
    """FSDP2: free the parameters a no-grad forward pass left gathered. FSDP2 keeps the root module's
    gathered parameters after a forward pass (its backward would gather them again); after the KL cap's
    measuring pass there is no backward, and if the step is then undone those gathered copies would be
    the undone step's weights in the next forward pass."""
    from torch.distributed.fsdp import FSDPModule

    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.reshard()


def _zero_through(policy: "Policy") -> torch.Tensor:
    """A zero loss whose gradient reaches every trainable parameter of `policy` (as zeros)."""
    return sum(p.sum() for p in policy.trainable_parameters()) * 0.0


def _snapshot(opt) -> list[tuple[torch.Tensor, torch.Tensor, dict[str, Any] | None]]:
    """Copies of what one step of `opt` changes: its parameters (LoRA: the adapter only) and their
    optimizer state (Adam: step and moments; None before the first step)."""
    opt = getattr(opt, "optimizer", opt)  # (Lightning's wrapper)
    return [(p, p.detach().clone(), {k: v.clone() if torch.is_tensor(v) else copy.deepcopy(v) for k, v in opt.state[p].items()}
             if p in opt.state else None) for g in opt.param_groups for p in g["params"]]


def _restore(opt, snapshot) -> None:
    """Undo the steps taken since `_snapshot`: the parameters and the optimizer state as they were."""
    opt = getattr(opt, "optimizer", opt)
    with torch.no_grad():
        for p, value, state in snapshot:
            p.copy_(value)
            if state is None:
                opt.state.pop(p, None)
            else:
                opt.state[p] = state
