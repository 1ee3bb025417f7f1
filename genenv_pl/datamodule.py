"""GenEnvDataModule: regenerates the training data every epoch from the simulator.

`train_dataloader()` runs once per epoch (Trainer(reload_dataloaders_every_n_epochs=1)) and
does the generation half of the epoch: seed batch -> simulator variations -> agent rollouts ->
rewards -> p_hat -> alpha-curriculum scores (from AlphaCurriculumCallback) -> pools. It returns
the epoch's update steps; GenEnvModule.training_step turns each into optimizer steps.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import lightning as L
import torch
from torch.utils.data import DataLoader, DistributedSampler

from genenv_pl.backends.base import Generation
from genenv_pl.batching import Step, pack
from genenv_pl.coevo import Group, SeedBatch, generate_tasks, rollout
from genenv_pl.config import CoevoConfig
from genenv_pl.curriculum import rwr_weights, success_rate
from genenv_pl.distributed import RankSync
from genenv_pl.envs import Environment, Task, make_env
from genenv_pl.pools import Pools


@dataclass
class RoundStats:
    """What one epoch's generation produced; read by the callbacks for logging."""

    epoch: int
    batches: list[SeedBatch] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    """torch's seed for one rank's epoch: a function of the three alone (a str seeds `random` by its SHA-512)."""
    return random.Random(f"{seed}:{epoch}:{rank}").getrandbits(63)


def _collate_tasks(items: list[dict]) -> list[Task]:
    return [Task.from_dict(d) for d in items]


class GenEnvDataModule(L.LightningDataModule):
    def __init__(self, env: str = "arithmetic", env_args: dict[str, Any] | None = None,
                 coevo: CoevoConfig = CoevoConfig(), seed: int = 0):
        """
        Args:
            env: registered environment name (see genenv_pl/envs/__init__.py).
            env_args: constructor arguments of that environment (data_root, splits, ...): the Args of
                its class's docstring, e.g. `BFCLEnv` in genenv_pl/envs/bfcl.py.
            coevo: sizes of one co-evolution epoch and sampling settings.
            seed: seeds the choice of seed tasks, replay and step order.
        """
        super().__init__()
        self.env: Environment = make_env(env, **(env_args or {}))
        self.cfg = coevo or CoevoConfig()
        if self.cfg.agent_task_budget is not None and self.cfg.agent_task_budget < 1:
            raise ValueError(f"data.coevo.agent_task_budget: agent training tasks to stop after, at least 1 "
                             f"(or null for no budget); got {self.cfg.agent_task_budget}")
        self.seed = seed
        self.rng = random.Random(seed)
        self.pools = Pools()
        self.success_rates: dict[str, float] = {}  # seed id -> EMA of p_hat of its variations
        self.last_round: RoundStats | None = None
        self.static_tasks: list[dict] | None = None  # the fixed task set of the "static" ablation
        self.tasks_seen = 0  # agent training tasks rolled out so far (x G rollouts each): the data-efficiency axis
        self.generated_through = -1  # last epoch whose data was generated (saved: a resume must not redo it)

    # ---- Lightning data hooks -----------------------------------------------------------
    def train_dataloader(self) -> DataLoader:
        if self.trainer.current_epoch <= self.generated_through:
            # Resuming from a checkpoint taken at the end of epoch e, Lightning asks for epoch e's
            # loader once more before it moves on to e + 1 (and then asks again). Generating here
            # would add never-trained tasks to the pools and advance the rng: return a placeholder
            # that is replaced before it runs.
            return DataLoader([Step()], batch_size=None)
        if self.budget_spent:  # resumed from the checkpoint of the epoch that spent it: nothing left to train
            self.trainer.should_stop = True
            return DataLoader([Step()], batch_size=None)
        # Generation computes as training does (bf16-mixed: under its autocast), and the precision
        # plugin never sees the steps' fp32 values (`Step`).
        with self.trainer.lightning_module.autocast():
            steps = [Step(s["agent"], s["sim"]) for s in self.generate_epoch()]
        self.generated_through = self.trainer.current_epoch
        # Several ranks: `steps` is already this rank's shard. A one-replica DistributedSampler keeps
        # Lightning (use_distributed_sampler) from splitting it again.
        own = RankSync(self.trainer).distributed
        sampler = DistributedSampler(steps, num_replicas=1, rank=0, shuffle=False) if own else None
        return DataLoader(steps, batch_size=None, shuffle=False, sampler=sampler, num_workers=0)

    def val_dataloader(self) -> DataLoader:
        return self._task_loader(self.eval_tasks())

    def test_dataloader(self) -> DataLoader:
        return self._task_loader(self.eval_tasks())

    def eval_tasks(self) -> list[Task]:
        """The environment's held-out tasks, optionally capped per group (in the environment's order)."""
        tasks, limit = self.env.eval_tasks(), self.cfg.eval_limit_per_group
        if limit is None:
            return tasks
        taken: dict[str, int] = {}
        kept = []
        for t in tasks:
            if taken.get(t.group, 0) < limit:
                taken[t.group] = taken.get(t.group, 0) + 1
                kept.append(t)
        return kept

    def _task_loader(self, tasks: list[Task]) -> DataLoader:
        # Similar prompt lengths share a batch: left padding to the longest prompt is wasted compute
        # (a 5K-token prompt next to 300-token ones costs 16x on a CPU). Results are per task, so
        # the order does not matter.
        tasks = sorted(tasks, key=lambda t: sum(len(m["content"]) for m in self.env.agent_prompt(t)))
        return DataLoader([t.to_dict() for t in tasks], batch_size=self.cfg.eval_batch_size, shuffle=False,
                          collate_fn=_collate_tasks)

    # ---- one epoch of generation --------------------------------------------------------
    def generate_epoch(self) -> list[dict[str, Any]]:
        trainer = self.trainer
        module = trainer.lightning_module
        curriculum = _find_curriculum(trainer)
        progress = _find_progress(trainer)
        epoch = trainer.current_epoch
        cfg = self.cfg
        # Several ranks (DDP/FSDP): all draw the same plan from the shared rng, each generates and
        # rolls out its shard, then the results that must be global are exchanged (one process: as is).
        sync = RankSync(trainer)
        # An epoch's sampling noise (and its updates') is drawn from (seed, epoch, rank) alone, not from
        # torch's generator as whatever ran before left it: an evaluation draws from it (each DataLoader
        # iterator takes a seed), and a resumed run starts it afresh. So evaluating more or less often,
        # or resuming from a checkpoint, does not change what is trained on; ranks get noise of their own.
        torch.manual_seed(epoch_seed(self.seed, epoch, sync.rank))
        t0 = time.perf_counter()

        seeds_all = self.env.seed_tasks()
        # The sampler's log-probs are read only as GRPO's old log-probs, and only where they are not recomputed.
        sampler_logprobs = not module.uses_recomputed_old_logp()
        sim_params = replace(cfg.sim_sampling, n=cfg.num_generations_per_prompt, logprobs=sampler_logprobs)
        seeds: list[Task] = []
        planned: list[tuple[Task, str]] = []
        if cfg.variant == "static":  # a fixed set generated once; the simulator is not used again
            planned = [(t, "static") for t in self._static_sample(module, seeds_all, sim_params, progress, sync)]
        else:
            seeds = self.rng.sample(seeds_all, k=min(cfg.seeds_per_epoch, len(seeds_all)))
        planned += [(t, "base") for t in self.rng.sample(seeds_all, k=min(cfg.base_tasks_per_epoch, len(seeds_all)))]
        planned += [(t, "replay") for t in self.pools.sample_train_tasks(self.rng, cfg.replay_tasks_per_epoch)]
        trains_simulator = cfg.variant in ("genenv", "no-band")
        env_replay = self.pools.sample_env(self.rng, module.rwr.replay_per_epoch) if trains_simulator else []
        # Step order is shuffled per rank; drawn here so that the shared rng stays identical on all ranks.
        step_rng = random.Random(self.rng.getrandbits(64) + sync.rank) if sync.distributed else self.rng
        batches = [] if cfg.variant == "static" else self._generate_sharded(module, seeds, self.success_rates, sim_params,
                                                                           progress, sync)

        agent = module.for_generation("agent")  # FSDP: gathers the weights (all ranks), then samples locally
        with sync.guard() as failure:  # this rank's share: rollouts, rewards, p_hat, new pool entries, steps
            work: list[tuple[Task, str, int | None]] = [(t, "fresh", i) for i, b in enumerate(batches) for t in b.tasks]
            work += [(t, source, None) for t, source in sync.shard(planned)]
            work = work[: self._budget_left(sync)]
            groups = rollout(self.env, agent, module.backend, work,
                             replace(cfg.agent_sampling, n=cfg.group_size, logprobs=sampler_logprobs), progress, cfg.max_seq_len)
            gen_seconds = time.perf_counter() - t0

            for b in batches:
                b.task_p_hat = [None] * len(b.tasks)
            for g in groups:
                if g.seed_index is not None:
                    b = batches[g.seed_index]
                    b.successes.extend(g.successes)
                    b.task_p_hat[_index(b.tasks, g.task)] = float(success_rate(torch.tensor(g.successes)))
            rates: dict[str, float] = {}
            for b in batches:
                if b.successes:
                    b.p_hat = float(success_rate(torch.tensor(b.successes)))
                    old = rates.get(b.seed.id, self.success_rates.get(b.seed.id))
                    rates[b.seed.id] = b.p_hat if old is None else cfg.success_ema * old + (1 - cfg.success_ema) * b.p_hat
            curriculum.score(batches)  # sets r_env and in_band on each seed batch and each task
            if cfg.variant == "no-band":
                for b in batches:
                    b.in_band = b.p_hat is not None
                    b.task_in_band = [p is not None for p in b.task_p_hat]

            new = Pools()
            for g in groups:
                if g.source == "fresh":
                    new.add_train(epoch, g.task, g.rewards, [r.text for r in g.rollouts] if cfg.keep_rollout_text else None)
            sim_samples = _simulator_samples(batches, cfg.difficulty_unit) if trains_simulator else []
            for s in sim_samples:
                new.add_env(epoch, s.batch.seed.id, s.batch.prompt, s.generation.text, s.p_hat, s.r_env)
            sim_samples += [_replayed(module.simulator, e) for e in sync.shard(env_replay)]  # (not added to D_env again)

            old_logprobs = module.old_logprobs if module.uses_recomputed_old_logp() else None
            steps, zero_std_frac = self._build_steps(groups, sim_samples, module.agent.pad_id, module.simulator.pad_id,
                                                     module.advantages, step_rng, module.grpo.num_iterations, old_logprobs)
            shown_batches, shown_groups = _lite(batches, groups) if sync.distributed else (batches, groups)
            mine = {"rates": rates, "train": new.train, "env": new.env, "batches": shown_batches, "groups": shown_groups,
                    "zero_std": round(zero_std_frac * max(len(groups), 1)), "steps": len(steps), "seconds": gen_seconds,
                    "overlong": len(work) - len(groups)}

        # Global: success rates, pools (rank order: every rank holds the same pools), metrics, step count.
        parts = sync.exchange(mine if failure.error is None else None, failure, "agent rollouts")
        all_batches, all_groups = [], []
        for part in parts:
            self.success_rates.update(part["rates"])
            self.pools.train.extend(part["train"])
            self.pools.env.extend(part["env"])
            offset = len(all_batches)
            all_batches += part["batches"]
            all_groups += [g if g.seed_index is None or not offset else replace(g, seed_index=g.seed_index + offset)
                           for g in part["groups"]]
        # RWR weights: mean 1 over the epoch's whole simulator update, every rank's in-band samples (as
        # Algorithm 1 weighs the epoch's set) and the D_env replay, not over each step's chunk on its own.
        update_r_env = torch.tensor([e["r_env"] for part in parts for e in part["env"]] + [e["r_env"] for e in env_replay])
        for step in steps:
            if step["sim"] is not None:
                step["sim"]["weights"] = rwr_weights(step["sim"]["r_env"], module.rwr.rwr_lambda, over=update_r_env)
        self.tasks_seen += len(all_groups)
        zero_std_frac = sum(p["zero_std"] for p in parts) / max(len(all_groups), 1)
        gen_seconds = max(p["seconds"] for p in parts)
        # Every rank runs as many training steps (DDP/FSDP collectives in backward): pad with empty
        # steps, in which GenEnvModule.training_step still joins the other ranks' gradient reduction.
        steps += [{"agent": None, "sim": None} for _ in range(max(p["steps"] for p in parts) - len(steps))]
        self.last_round = RoundStats(epoch, all_batches, all_groups,
                                     self._metrics(all_batches, all_groups, zero_std_frac, gen_seconds,
                                                   sum(p.get("overlong", 0) for p in parts),
                                                   sum(len(p["env"]) for p in parts), curriculum.alpha))
        return steps

    @property
    def budget_spent(self) -> bool:
        """The agent has rolled out data.coevo.agent_task_budget training tasks: training is over."""
        return self.cfg.agent_task_budget is not None and self.tasks_seen >= self.cfg.agent_task_budget

    def _budget_left(self, sync: RankSync) -> int | None:
        """How many tasks this rank may still roll out (None: no budget): what is left of the budget,
        split over the ranks as evenly as it goes (the lower ranks take the remainder)."""
        if self.cfg.agent_task_budget is None:
            return None
        left = max(self.cfg.agent_task_budget - self.tasks_seen, 0)
        return left // sync.world + (sync.rank < left % sync.world) if sync.distributed else left

    def _generate_sharded(self, module, seeds: list[Task], success_rates: dict[str, float], sim_params, progress,
                          sync: RankSync) -> list[SeedBatch]:
        """Simulator variations of this rank's shard of `seeds`. With several ranks, a task that
        another rank's simulator also wrote this epoch (or that equals any seed) counts once, as
        within one rank: the lowest rank keeps it, the others count a duplicate."""
        batches: list[SeedBatch] = []
        simulator = module.for_generation("simulator")  # FSDP: gathers the weights (all ranks), then samples locally
        with sync.guard() as failure:
            batches = generate_tasks(self.env, simulator, module.backend, sync.shard(seeds), success_rates, sim_params,
                                     progress, self.cfg.max_seq_len)
        if sync.distributed:
            keys = sync.exchange([self.env.task_key(t) for b in batches for t in b.tasks], failure, "simulator generation")
            known = {self.env.task_key(s) for s in seeds}.union(*keys[: sync.rank])
            for b in batches:
                kept = [(t, g) for t, g in zip(b.tasks, b.task_generations) if self.env.task_key(t) not in known]
                b.duplicates += len(b.tasks) - len(kept)
                b.tasks, b.task_generations = [t for t, _ in kept], [g for _, g in kept]
        return batches

    def _static_sample(self, module, seeds_all: list[Task], sim_params, progress, sync: RankSync) -> list[Task]:
        """The "static" ablation: K variations of every seed, generated once (first epoch) by the
        initial simulator and kept in D_train; each epoch trains on as many of them as GenEnv's
        seeds_per_epoch x K fresh tasks."""
        if self.static_tasks is None:
            batches = self._generate_sharded(module, seeds_all, {}, sim_params, progress, sync)
            tasks = [t for b in batches for t in b.tasks]
            if sync.distributed:  # every rank holds the whole set, in rank order
                tasks = [Task.from_dict(d) for part in sync.exchange([t.to_dict() for t in tasks]) for d in part]
            for t in tasks:
                self.pools.add_train(self.trainer.current_epoch, t, [], None)
            self.static_tasks = [t.to_dict() for t in tasks]
        n = min(self.cfg.seeds_per_epoch * self.cfg.num_generations_per_prompt, len(self.static_tasks))
        return [Task.from_dict(d) for d in self.rng.sample(self.static_tasks, k=n)]

    def _build_steps(self, groups: list[Group], sim_samples: list["SimSample"], agent_pad: int, sim_pad: int,
                     advantages: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
                     rng: random.Random | None = None, iterations: int = 1,
                     old_logprobs: Callable[[list[dict[str, torch.Tensor]]], list[torch.Tensor]] | None = None):
        """The epoch's optimizer steps: GRPO groups with their advantages (`GenEnvModule.advantages`) in
        chunks of agent_batch_size, each chunk `iterations` times in a row (`grpo.num_iterations`),
        simulator samples in chunks of sim_batch_size. `old_logprobs` (`GenEnvModule.old_logprobs`, when
        `grpo.old_logp` recomputes) replaces the sampler's log-probs of each agent batch. Each batch carries the
        temperature its text was sampled at (a 0-d tensor, as every value of a batch is a tensor): the
        training forward passes divide the logits by it."""
        cfg = self.cfg
        rng = rng or self.rng
        agent_groups, zero = [], 0
        for g in groups:
            adv, zero_std = advantages(torch.tensor([g.rewards], dtype=torch.float32))
            zero += int(zero_std.item())
            if zero_std.item() and cfg.drop_zero_std_groups:
                continue
            agent_groups.append((g, adv[0]))
        rng.shuffle(agent_groups)
        rng.shuffle(sim_samples)
        agent_chunks = [agent_groups[i : i + cfg.agent_batch_size] for i in range(0, len(agent_groups), cfg.agent_batch_size)]
        sim_chunks = [sim_samples[i : i + cfg.sim_batch_size] for i in range(0, len(sim_samples), cfg.sim_batch_size)]
        packed = []
        for chunk in agent_chunks:
            rows = [(r, a) for g, adv in chunk for r, a in zip(g.rollouts, adv.tolist())]
            batch = pack([r.prompt_ids for r, _ in rows], [r.response_ids for r, _ in rows], agent_pad,
                         [r.logprobs for r, _ in rows])
            batch["advantages"] = torch.tensor([a for _, a in rows], dtype=torch.float32)
            batch["temperature"] = torch.tensor(cfg.agent_sampling.temperature, dtype=torch.float32)
            packed.append(batch)
        if old_logprobs is not None and packed:
            for batch, logp in zip(packed, old_logprobs(packed)):
                batch["old_logp"] = logp
        agent_batches = [b for b in packed for _ in range(iterations)]  # packed once, stepped on `iterations` times in a row
        n_steps = max(len(agent_batches), len(sim_chunks), 1)  # an empty epoch still runs (and logs) one step
        steps = []
        for i in range(n_steps):
            step: dict[str, Any] = {"agent": None, "sim": None}
            if i < len(agent_batches):
                step["agent"] = agent_batches[i]
            if i < len(sim_chunks):
                gens = [s.generation for s in sim_chunks[i]]
                step["sim"] = pack([g.prompt_ids for g in gens], [g.response_ids for g in gens], sim_pad,
                                   [g.logprobs for g in gens])
                step["sim"]["r_env"] = torch.tensor([s.r_env for s in sim_chunks[i]], dtype=torch.float32)
                step["sim"]["temperature"] = torch.tensor(cfg.sim_sampling.temperature, dtype=torch.float32)
            steps.append(step)
        return steps, zero / max(len(groups), 1)

    def _metrics(self, batches: list[SeedBatch], groups: list[Group], zero_std_frac: float, seconds: float,
                 overlong: int = 0, sim_samples: int = 0, alpha: float = 0.5) -> dict[str, float]:
        scored = [b for b in batches if b.p_hat is not None]
        n_gen = sum(len(b.generations) + b.invalid.get("overlong_prompt", 0) for b in batches)
        n_invalid = sum(sum(b.invalid.values()) for b in batches)
        fresh = [t for b in batches for t in b.tasks] + [g.task for g in groups if g.source == "static"]
        static = [s for g in groups if g.source == "static" for s in g.successes]
        tokens = sum(len(g.response_ids) for b in batches for g in b.generations)
        tokens += sum(len(r.response_ids) for g in groups for r in g.rollouts)
        mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
        task_p = [p for b in batches for p in b.task_p_hat if p is not None]
        checks: dict[str, list[float]] = {}  # what the environment measured on each generated task
        for t in fresh:
            for name, value in (t.meta.get("checks") or {}).items():
                checks.setdefault(name, []).append(float(value))
        reasons: dict[str, int] = {}
        for b in batches:
            for r, c in b.invalid.items():
                reasons[r] = reasons.get(r, 0) + c
        return {
            **{f"coevo/invalid/{r}": c / max(n_gen, 1) for r, c in reasons.items()},
            **{f"coevo/check/{name}": mean(values) for name, values in checks.items()},
            # static ablation: the same quantity over its fixed tasks (no seed batches, no simulator)
            "coevo/success_rate": mean([b.p_hat for b in scored]) if not static else mean([float(x) for x in static]),
            "coevo/alpha_reward": mean([b.r_env for b in scored]),
            "coevo/in_band_frac": mean([float(b.in_band) for b in scored]),
            # per generated task, from its own G rollouts (what difficulty_unit "task" scores)
            "coevo/task_success_rate": mean(task_p),
            "coevo/task_in_band_frac": mean([float(ok) for b in batches for p, ok in zip(b.task_p_hat, b.task_in_band)
                                             if p is not None]),
            "coevo/task_alpha_gap": mean([abs(p - alpha) for p in task_p]),
            "coevo/sim_samples": float(sim_samples),
            "coevo/invalid_rate": n_invalid / max(n_gen, 1),
            "coevo/duplicate_rate": sum(b.duplicates for b in batches) / max(n_gen, 1),
            "coevo/difficulty": mean([t.difficulty for t in fresh]),
            "coevo/valid_tasks": float(len(fresh)),
            "coevo/overlong_tasks": float(overlong),  # agent prompts past max_seq_len: not rolled out
            "agent/zero_std_frac": zero_std_frac,
            "agent/train_reward": mean([r for g in groups for r in g.rewards]),
            "agent/tasks_seen": float(self.tasks_seen),
            "perf/rollout_tokens_per_s": tokens / max(seconds, 1e-9),
            "perf/generation_seconds": seconds,
        }

    # ---- checkpointing: pools and per-seed statistics survive a restart ----------------
    def state_dict(self) -> dict[str, Any]:
        return {"pools": self.pools.state_dict(), "success_rates": dict(self.success_rates),
                "rng": _rng_to_list(self.rng.getstate()), "static_tasks": self.static_tasks,
                "tasks_seen": self.tasks_seen, "generated_through": self.generated_through}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pools.load_state_dict(state["pools"])
        self.success_rates = dict(state["success_rates"])
        self.rng.setstate(_rng_from_list(state["rng"]))
        self.static_tasks = state.get("static_tasks")
        self.tasks_seen = state.get("tasks_seen", 0)
        self.generated_through = state.get("generated_through", -1)


@dataclass
class SimSample:
    """One simulator generation that enters the RWR update, with the difficulty score it earned."""

    batch: SeedBatch | None  # None: replayed from D_env
    generation: Any
    p_hat: float
    r_env: float


def _simulator_samples(batches: list[SeedBatch], unit: str) -> list[SimSample]:
    """The in-band simulator generations of the epoch. "seed_batch" (the paper): every valid variation
    of an in-band seed batch, scored by the batch's p_hat. "task": each variation in band by its own."""
    if unit == "task":
        return [SimSample(b, g, p, r) for b in batches
                for g, p, r, ok in zip(b.task_generations, b.task_p_hat, b.task_r_env, b.task_in_band) if ok]
    return [SimSample(b, g, b.p_hat, b.r_env) for b in batches if b.in_band for g in b.task_generations]


def _replayed(simulator, entry: dict[str, Any]) -> SimSample:
    """A D_env entry as a sample of this epoch's simulator update, with its stored p_hat and R_env. Its
    prompt and text are tokenized again (the text closed by EOS: only finished generations became tasks);
    it has no sampling log-probs (NaN)."""
    prompt_ids, response_ids = simulator.encode([entry["prompt"], entry["text"]])
    response_ids = response_ids + [simulator.eos_id]
    generation = Generation(prompt_ids, response_ids, entry["text"], [math.nan] * len(response_ids), True)
    return SimSample(None, generation, entry["p_hat"], entry["r_env"])


def _index(tasks: list[Task], task: Task) -> int:
    """Position of `task` (the very object) in its seed batch's task list."""
    return next(i for i, t in enumerate(tasks) if t is task)


def _lite(batches: list[SeedBatch], groups: list[Group]) -> tuple[list[SeedBatch], list[Group]]:
    """Copies for other ranks (metrics, sample tables): without token ids of prompts and log-probs."""
    def strip(g):
        return replace(g, prompt_ids=[], logprobs=[])

    return ([replace(b, generations=[strip(g) for g in b.generations], task_generations=[strip(g) for g in b.task_generations])
             for b in batches],
            [replace(g, rollouts=[strip(r) for r in g.rollouts]) for g in groups])


def _rng_to_list(state) -> list:
    version, internal, gauss = state
    return [version, list(internal), gauss]


def _rng_from_list(state) -> tuple:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def _find_curriculum(trainer):
    from callbacks.alpha_curriculum import AlphaCurriculumCallback

    for cb in trainer.callbacks:
        if isinstance(cb, AlphaCurriculumCallback):
            return cb
    raise RuntimeError("GenEnvDataModule needs an AlphaCurriculumCallback in trainer.callbacks "
                       "(it scores seed batches for the simulator update)")


def _find_progress(trainer):
    """Every callback with an `on_rollout_progress(trainer, phase, done, total)` hook, called in order."""
    cbs = [cb for cb in trainer.callbacks if hasattr(cb, "on_rollout_progress")]
    if not cbs:
        return None

    def report(phase: str, done: int, total: int) -> None:
        for cb in cbs:
            cb.on_rollout_progress(trainer, phase, done, total)
    return report
