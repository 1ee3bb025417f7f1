"""Test-only callbacks for the multi-process tests (tests/test_ddp.py).

They run inside the `python main.py fit` ranks that the tests start (tests/ is put on PYTHONPATH),
so production code carries no test hook: the callbacks wrap the module-level `generate_tasks` /
`rollout` that `genenv_pl.epoch` calls, in their own process, in `setup`."""
from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict

import lightning as L

import genenv_pl.epoch as epoch


def digest(state: dict, prefix: str) -> str:
    """sha256 over the tensors of a state dict whose keys start with `prefix` (e.g. "agent.")."""
    from torch.distributed.tensor import DTensor

    h = hashlib.sha256()
    for k in sorted(k for k in state if k.startswith(prefix)):
        v = state[k].full_tensor() if isinstance(state[k], DTensor) else state[k]  # FSDP2: gathered (collective)
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().float().numpy().tobytes())
    return h.hexdigest()


def task_key(task_dict: dict) -> str:
    return json.dumps(task_dict, sort_keys=True)


class RankReport(L.Callback):
    """Each rank writes `<out_dir>/rank<r>.json`: the seeds it generated from and the fresh tasks it
    rolled out (its shard), its training steps per epoch, the epoch metrics it holds, and digests
    of its final weights. `starve_rank`: that rank drops the agent batch of each epoch's first step,
    so that the other rank updates the agent alone there (the starved rank must still join)."""

    def __init__(self, out_dir: str, starve_rank: int | None = None):
        super().__init__()
        self.out_dir = out_dir
        self.starve_rank = starve_rank
        self.seeds: dict[int, list[str]] = defaultdict(list)
        self.fresh: dict[int, list[str]] = defaultdict(list)
        self.steps: dict[int, int] = defaultdict(int)
        self.metrics: dict[int, dict] = {}

    def setup(self, trainer, pl_module, stage):
        generate, roll = epoch.generate_tasks, epoch.rollout

        def generate_tasks(env, simulator, backend, seeds, *args, **kwargs):
            self.seeds[trainer.current_epoch] += [s.id for s in seeds]
            return generate(env, simulator, backend, seeds, *args, **kwargs)

        def rollout(env, agent, backend, tasks, *args, **kwargs):
            self.fresh[trainer.current_epoch] += [task_key(t.to_dict()) for t, source, *_ in tasks if source == "fresh"]
            return roll(env, agent, backend, tasks, *args, **kwargs)

        epoch.generate_tasks, epoch.rollout = generate_tasks, rollout

    def on_train_start(self, trainer, pl_module):
        self.simulator_at_start = digest(pl_module.state_dict(), "simulator.")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_rank == self.starve_rank and batch_idx == 0:
            batch["agent"] = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.steps[trainer.current_epoch] += 1

    def on_train_epoch_end(self, trainer, pl_module):
        self.metrics[trainer.current_epoch] = dict(trainer.datamodule.last_round.metrics)

    def on_train_end(self, trainer, pl_module):
        state = pl_module.state_dict()
        dm = trainer.datamodule
        report = {"rank": trainer.global_rank, "world_size": trainer.world_size, "seeds": self.seeds,
                  "fresh": self.fresh, "steps": self.steps, "metrics": self.metrics,
                  "agent": digest(state, "agent."), "simulator": digest(state, "simulator."),
                  "simulator_at_start": self.simulator_at_start,
                  "counters": pl_module.counters, "pools": [len(dm.pools.train), len(dm.pools.env)],
                  "success_rates": dm.success_rates}
        os.makedirs(self.out_dir, exist_ok=True)
        with open(os.path.join(self.out_dir, f"rank{trainer.global_rank}.json"), "w") as f:
            json.dump(report, f)


class FailRollouts(L.Callback):
    """Makes the agent rollouts of one rank raise (from the first epoch on)."""

    def __init__(self, rank: int = 1, message: str = "injected rollout failure"):
        super().__init__()
        self.rank, self.message = rank, message

    def setup(self, trainer, pl_module, stage):
        if trainer.global_rank != self.rank:
            return

        def rollout(*args, **kwargs):
            raise RuntimeError(f"{self.message} on rank {trainer.global_rank}")

        epoch.rollout = rollout


class PrecisionProbe(L.Callback):
    """The first training step of a rank under a precision setting (tests/test_precision_fsdp2.py).

    Writes `<out_dir>/rank<r>.json` (the dtypes of the batch's floating tensors as `training_step` gets
    them, and the largest |ratio - 1| over the response tokens of the first agent loss) and, on rank 0,
    `<out_dir>/update.pt` (each role's update of its trainable weights, gathered whole). Saves each
    rank's first batch to `<out_dir>/step_rank<r>.pt`, or with `replay` trains on the batch saved
    there instead of its own. Stops training after that step."""

    def __init__(self, out_dir: str, replay: str | None = None):
        super().__init__()
        self.out_dir, self.replay = out_dir, replay
        self.ratio: list[float] = []

    def setup(self, trainer, pl_module, stage):
        import torch

        import genenv_pl.module as module_py

        real = module_py.grpo_loss

        def observed(logp, logp_old, logp_ref, entropy, advantages, mask, *args, **kwargs):
            if not self.ratio and bool(mask.any()):
                self.ratio.append(float((torch.exp(logp.detach() - logp_old)[mask.bool()] - 1).abs().max()))
            return real(logp, logp_old, logp_ref, entropy, advantages, mask, *args, **kwargs)

        module_py.grpo_loss = observed

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        import torch

        if batch_idx:
            return
        os.makedirs(self.out_dir, exist_ok=True)
        rank = trainer.global_rank
        if self.replay:
            saved = torch.load(os.path.join(self.replay, f"step_rank{rank}.pt"))
            batch["agent"], batch["sim"] = saved["agent"], saved["sim"]
        else:
            torch.save({"agent": batch["agent"], "sim": batch["sim"]}, os.path.join(self.out_dir, f"step_rank{rank}.pt"))
        self.dtypes = {role: {k: str(v.dtype) for k, v in batch[role].items()} for role in ("agent", "sim")
                       if batch[role] is not None}
        self.before = _trainable(pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        import torch

        if batch_idx:
            return
        after = _trainable(pl_module)
        if trainer.global_rank == 0:
            torch.save({role: torch.cat([(a - b).flatten() for a, b in zip(after[role], self.before[role])])
                        for role in after}, os.path.join(self.out_dir, "update.pt"))
        with open(os.path.join(self.out_dir, f"rank{trainer.global_rank}.json"), "w") as f:
            json.dump({"dtypes": self.dtypes, "ratio_dev": self.ratio[0] if self.ratio else None}, f)
        trainer.should_stop = True


def _trainable(module) -> dict:
    """Each role's trainable weights, whole (FSDP2: gathered from the shards, a collective), in fp32: the
    optimizer's parameters (FSDP2 may show the module's gathered bf16 copies between passes)."""
    from torch.distributed.tensor import DTensor

    return {role: [(p.full_tensor() if isinstance(p, DTensor) else p).detach().float().clone()
                   for g in opt.param_groups for p in g["params"]]
            for role, opt in zip(("agent", "simulator"), module.optimizers())}
