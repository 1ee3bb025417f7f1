"""GenEnvDataModule: regenerates the training data every epoch from the simulator.

`train_dataloader()` runs once per epoch (Trainer(reload_dataloaders_every_n_epochs=1), which fit
start checks) and runs the generation half of the epoch, `epoch.run_epoch` (plan -> generate -> roll
out -> score -> pools -> build steps); it returns the epoch's steps, and GenEnvModule.training_step
turns each into optimizer steps. Two things are handed to it at fit start: the curriculum by its
callback (`use_curriculum`) and what the epoch needs of the policies by the module (`connect`). The
module reports each step back (`step_done`), so that D_env keeps only the samples of simulator steps
that were kept, and a checkpoint knows whether its epoch's steps all ran.
"""
from __future__ import annotations

import os
import random
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import DataLoader

from genenv_pl.batching import Step, Steps
from genenv_pl.config import CoevoConfig
from genenv_pl.envs import Environment, Task, make_env
from genenv_pl.envs.base import ConfigError
from genenv_pl.evaluation import EvalBatches, eval_batches
from genenv_pl.distributed import RankSync
from genenv_pl.epoch import (Curriculum, EpochState, Learner, RoundStats, epoch_shape,
                             run_epoch)
from genenv_pl.offline import offline_summary
from genenv_pl.pools import Pools
from genenv_pl.seam import RankSeam

__all__ = ["GenEnvDataModule", "RoundStats"]


class GenEnvDataModule(L.LightningDataModule):
    def __init__(self, env: str = "arithmetic", env_args: dict[str, Any] | None = None,
                 coevo: CoevoConfig = CoevoConfig(), seed: int | None = None):
        """
        Args:
            env: a registered environment name (see genenv_pl/envs/__init__.py), or an Environment subclass
                of your own as package.module:ClassName (docs/writing-an-environment.md).
            env_args: constructor arguments of that environment (data_root, splits, ...): the Args of
                its class's docstring, e.g. `BFCLEnv` in genenv_pl/envs/bfcl.py.
            coevo: sizes of one co-evolution epoch and sampling settings.
            seed: seeds what an epoch draws: seed tasks, replay, step order and sampling noise. None (default):
                the run's `seed_everything`, so that one seed decides the whole run (0 without one). The
                policies' own `seed` (initialisation, warm start) stays as configured: every run seed
                starts from the same, cached, warm start.
        """
        super().__init__()
        self.env: Environment = make_env(env, **(env_args or {}))
        self.cfg = coevo or CoevoConfig()
        if self.cfg.agent_task_budget is not None and self.cfg.agent_task_budget < 1:
            raise ValueError(f"data.coevo.agent_task_budget: agent training tasks to stop after, at least 1 "
                             f"(or null for no budget); got {self.cfg.agent_task_budget}")
        _check_offline(self.cfg)
        self.seed = seed if seed is not None else int(os.environ.get("PL_GLOBAL_SEED", 0))  # (seed_everything's)
        self.rng = random.Random(self.seed)
        self.pools = Pools()
        self.success_rates: dict[str, float] = {}  # seed id -> EMA of p_hat of its variations
        self.last_round: RoundStats | None = None
        self.static_tasks: list[dict] | None = None  # the written tasks of a fixed set ("static", "static-paper", ...)
        self.offline_stats: dict | None = None  # how "static-paper" / "offline-augment" wrote their set
        self.offline_pass: list[int] = []  # what is left of the current pass over that set (offline_tasks_per_epoch)
        self.tasks_seen = 0  # agent training tasks rolled out so far (x G rollouts each): the data-efficiency axis
        self.generated_through = -1  # last epoch whose data was generated (saved: a resume must not redo it)
        self.steps_left = 0  # steps of that epoch not run yet (saved: a checkpoint with some left cannot resume)
        self.curriculum: Curriculum | None = None  # handed over by its callback (`use_curriculum`)
        self.learner: Learner | None = None  # handed over by the module (`connect`)
        self._env_by_step: list[list[dict]] = []  # this epoch's D_env entries, by the step that trains on them

    # ---- what is handed over at fit start -----------------------------------------------
    def use_curriculum(self, curriculum: Curriculum) -> None:
        """The alpha-curriculum callback hands itself over (its `setup`): it scores each epoch's seed batches."""
        self.curriculum = curriculum

    def connect(self, learner: Learner) -> None:
        """GenEnvModule hands over what an epoch needs of the policies (its `setup`, after the callbacks'). Also
        where a run without what the loop depends on stops, in one line, before any model is built."""
        if self.curriculum is None:
            raise ConfigError("trainer.callbacks has no callbacks.AlphaCurriculumCallback: GenEnv needs it to score "
                              "each seed batch (R_env) and to choose what trains the simulator (the band); add "
                              "{class_path: callbacks.AlphaCurriculumCallback} to trainer.callbacks")
        reload = self.trainer.reload_dataloaders_every_n_epochs
        if reload != 1:
            raise ConfigError(f"trainer.reload_dataloaders_every_n_epochs is {reload}; GenEnv generates each epoch's data "
                              f"in train_dataloader() and needs 1 (otherwise every epoch replays epoch 0's rollouts "
                              f"with their stale log-probs)")
        self.learner = learner
        rank_zero_info(epoch_shape(self.cfg, self.trainer.world_size, learner.grpo_iterations, learner.env_replay))

    # ---- Lightning data hooks -----------------------------------------------------------
    def train_dataloader(self) -> DataLoader:
        if self.trainer.current_epoch <= self.generated_through:
            self._refuse_mid_epoch()
            # Resuming from a checkpoint taken at the end of epoch e, Lightning asks for epoch e's loader once
            # more before it moves on to e + 1 (and then asks again). Generating here would add never-trained
            # tasks to the pools and advance the rng: a placeholder, which Lightning replaces before it runs.
            return _loader([Step()])
        if self.budget_spent:  # resumed from the checkpoint of the epoch that spent it: nothing left to train
            self.trainer.should_stop = True
            return _loader([Step()])
        state = EpochState(self.rng, self.pools, self.success_rates, self.static_tasks, self.tasks_seen,
                           self.offline_pass, self.offline_stats)
        # Generation computes as training does (bf16-mixed: under its autocast); the precision plugin never
        # sees the steps' fp32 values (`Step`).
        with self.learner.autocast():
            epoch = run_epoch(self.env, self.cfg, self.learner, self.curriculum, RankSeam(self.trainer), state,
                              self.trainer.current_epoch, self.seed, _progress(self.trainer))
        self.success_rates.update(epoch.rates)
        self.pools.train.extend(epoch.train)
        if epoch.offline_stats is not None and self.offline_stats is None:  # the fixed set was written this epoch
            written = epoch.offline_stats
            short = written["variant"] == "offline-augment" and written["written"] < written["requested"]
            (rank_zero_warn if short else rank_zero_info)(offline_summary(written))
        self.static_tasks, self.last_round = epoch.static_tasks, epoch.stats
        self.offline_stats, self.offline_pass = epoch.offline_stats, epoch.offline_pass
        self.tasks_seen += len(epoch.stats.groups)
        self._env_by_step, self.steps_left = epoch.env_by_step, len(epoch.steps)
        self.generated_through = self.trainer.current_epoch
        return _loader(epoch.steps)

    def step_done(self, index: int, simulator_kept: bool) -> None:
        """GenEnvModule reports each training step of the epoch. D_env gains a step's simulator samples only
        when that step was kept (not undone by the KL cap, not skipped as non-finite): replay must not draw
        what the simulator never learned from. (The same on every rank: the decision is all-reduced.)"""
        if simulator_kept and index < len(self._env_by_step):
            self.pools.env.extend(self._env_by_step[index])
        self.steps_left = max(self.steps_left - 1, 0)

    def _refuse_mid_epoch(self) -> None:
        """A checkpoint taken within an epoch (SLURM requeue's hpc_ckpt, every_n_train_steps, OnExceptionCheckpoint)
        cannot resume exactly: the rest of the epoch's steps come from rollouts that no checkpoint holds."""
        if self.steps_left:
            raise ConfigError(f"checkpoint {self.trainer.ckpt_path} was taken mid-epoch ({self.steps_left} steps of "
                              f"epoch {self.generated_through} had not run), and the rest of an epoch's steps come "
                              f"from rollouts that no checkpoint holds; resume from a checkpoint taken at the end of "
                              f"an epoch (ModelCheckpoint with save_on_train_epoch_end: true, e.g. its last.ckpt)")

    @property
    def budget_spent(self) -> bool:
        """The agent has rolled out data.coevo.agent_task_budget training tasks: training is over."""
        return self.cfg.agent_task_budget is not None and self.tasks_seen >= self.cfg.agent_task_budget

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self.env.val_tasks())

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self.env.eval_tasks())

    def eval_tasks(self, tasks: list[Task] | None = None) -> list[Task]:
        """Held-out tasks (default: the environment's test set), optionally capped per group (in their order)."""
        tasks, limit = self.env.eval_tasks() if tasks is None else tasks, self.cfg.eval_limit_per_group
        if limit is None:
            return tasks
        taken: dict[str, int] = {}
        kept = []
        for t in tasks:
            if taken.get(t.group, 0) < limit:
                taken[t.group] = taken.get(t.group, 0) + 1
                kept.append(t)
        return kept

    def _eval_loader(self, tasks: list[Task]) -> DataLoader:
        """This rank's evaluation batches. The batches are cut from the whole held-out set the same way
        whatever the number of ranks (`eval_batches`), and dealt to the ranks whole: every task is answered
        once, in the batch it would have on one rank, so N ranks give the one-rank answers (Lightning's
        DistributedSampler would pad the set with repeats and regroup it)."""
        batches = eval_batches(self.eval_tasks(tasks), self.cfg.eval_batch_size,
                               lambda t: sum(len(m["content"]) for m in self.env.agent_prompt(t)))
        sync = RankSync(self.trainer)
        return DataLoader(EvalBatches(batches, *((sync.rank, sync.world) if sync.distributed else (0, 1))),
                          batch_size=None)

    # ---- checkpointing: pools and per-seed statistics survive a restart ----------------
    def state_dict(self) -> dict[str, Any]:
        return {"pools": self.pools.state_dict(), "success_rates": dict(self.success_rates),
                "rng": _rng_to_list(self.rng.getstate()), "static_tasks": self.static_tasks,
                "offline_stats": self.offline_stats, "offline_pass": list(self.offline_pass),
                "tasks_seen": self.tasks_seen, "generated_through": self.generated_through, "steps_left": self.steps_left}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pools.load_state_dict(state["pools"])
        self.success_rates = dict(state["success_rates"])
        self.rng.setstate(_rng_from_list(state["rng"]))
        self.static_tasks = state.get("static_tasks")
        self.offline_stats = state.get("offline_stats")
        self.offline_pass = list(state.get("offline_pass", []))
        self.tasks_seen = state.get("tasks_seen", 0)
        self.generated_through = state.get("generated_through", -1)
        self.steps_left = state.get("steps_left", 0)


def _check_offline(cfg: CoevoConfig) -> None:
    """The settings of the offline variants ("static-paper", "offline-augment"), each error naming its key."""
    if cfg.offline_variations < 1:
        raise ConfigError(f"data.coevo.offline_variations: variations of each base task that static-paper writes, "
                          f"at least 1; got {cfg.offline_variations}")
    if cfg.offline_tasks_per_epoch is not None and cfg.offline_tasks_per_epoch < 1:
        raise ConfigError(f"data.coevo.offline_tasks_per_epoch: tasks of the fixed set an epoch, at least 1 (or null "
                          f"for the whole set); got {cfg.offline_tasks_per_epoch}")
    if cfg.augment_size is not None and cfg.augment_size < 1:
        raise ConfigError(f"data.coevo.augment_size: generated tasks that offline-augment writes, at least 1; got "
                          f"{cfg.augment_size}")
    if cfg.variant == "offline-augment" and cfg.augment_size is None:
        raise ConfigError("data.coevo.augment_size: offline-augment writes a fixed augmentation set of this many tasks "
                          "before training; set it (bench/data_efficiency.py sizes it as N x GenEnv's generated tasks)")
    if cfg.variant != "offline-augment" and (cfg.augment_model is not None or cfg.augment_size is not None):
        key = "augment_model" if cfg.augment_model is not None else "augment_size"
        raise ConfigError(f"data.coevo.{key} is set, but only data.coevo.variant offline-augment writes an augmentation "
                          f"set (variant is {cfg.variant!r})")


def _loader(steps: list[Step]) -> DataLoader:
    return DataLoader(Steps(steps), batch_size=None)


def _rng_to_list(state) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _rng_from_list(state) -> tuple:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def _progress(trainer):
    """Every callback with an `on_rollout_progress(trainer, phase, done, total)` hook, called in order."""
    cbs = [cb for cb in trainer.callbacks if hasattr(cb, "on_rollout_progress")]
    if not cbs:
        return None

    def report(phase: str, done: int, total: int) -> None:
        for cb in cbs:
            cb.on_rollout_progress(trainer, phase, done, total)
    return report
