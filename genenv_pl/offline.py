"""The fixed training sets of the offline baselines, written once before the first update: "static-paper"
(the paper's GenEnv-Static: `offline_variations` variations of every base task by the initial simulator)
and "offline-augment" (`augment_size` tasks by `augment_model`, any model, default the initial simulator).
The agent then trains on the set alone with plain GRPO; the simulator never learns. `genenv_pl/epoch.py`
calls `write_offline` in the first epoch and `offline_tasks` in every epoch's plan; the set, its pass
position and its writing stats are in every checkpoint (the data module's state), so a resumed run never
writes it again."""
from __future__ import annotations

import math
import random
from contextlib import nullcontext
from typing import Callable, ContextManager

from genenv_pl.coevo import SeedBatch
from genenv_pl.config import CoevoConfig
from genenv_pl.envs import Environment, Task
from genenv_pl.models.factory import PolicyConfig
from genenv_pl.policy import Policy
from genenv_pl.seam import RankSeam

FIXED_SETS = ("static", "static-paper", "offline-augment")  # written once; the simulator neither writes again nor learns
OFFLINE_SETS = ("static-paper", "offline-augment")  # trained on whole: the paper's GenEnv-Static, offline augmentation
WriteBatches = Callable[[list[Task], "Policy | None"], list[SeedBatch]]
"""(seeds, writer) -> the seed batches written on this rank's share of `seeds`, by `writer` or the simulator."""
FrozenPolicy = Callable[["PolicyConfig | str"], ContextManager[Policy]]
"""A model built from its config for generation only (data.coevo.augment_model): frozen, freed when the block ends."""


def variations_per_seed(cfg: CoevoConfig) -> int:
    return cfg.offline_variations if cfg.variant == "static-paper" else cfg.num_generations_per_prompt


def offline_tasks(cfg: CoevoConfig, seeds_all: list[Task], static: list[dict], rng: random.Random, offline_pass: list[int]
                  ) -> tuple[list[tuple[Task, str]], list[int]]:
    """The epoch's share of the fixed set of "static-paper" / "offline-augment": the base tasks ("base") and
    the written ones ("static"), shuffled. offline_tasks_per_epoch None: the whole set (a pass each epoch).
    A number: that many, in order from the current pass (`offline_pass`, indices into the set) and, when
    it runs out, from a new shuffle. Returns the tasks and what is left of the pass."""
    pool = [(t, "base") for t in seeds_all] + [(Task.from_dict(d), "static") for d in static]
    if cfg.offline_tasks_per_epoch is None or not pool:
        return rng.sample(pool, k=len(pool)), []
    order, left = [], list(offline_pass)
    while len(order) < cfg.offline_tasks_per_epoch:
        if not left:
            left = rng.sample(range(len(pool)), k=len(pool))
        take = left[: cfg.offline_tasks_per_epoch - len(order)]
        order, left = order + take, left[len(take):]
    return [pool[i] for i in order], left


def write_offline(env: Environment, cfg: CoevoConfig, seam: RankSeam, seeds: list[Task], rng: random.Random,
                  write_batches: WriteBatches, frozen_policy: FrozenPolicy | None) -> tuple[list[dict], dict]:
    """The fixed set of "static-paper" and "offline-augment", written once before the first update: the
    written tasks (the base tasks join them in `plan`) and how writing went (`offline_metrics`). Outputs
    that do not parse or fail the environment's checks, and duplicates (of a base task or of another
    written one), are counted and dropped. "static-paper": `offline_variations` of every base task, by the
    initial simulator. "offline-augment": `augment_size` tasks by `augment_model` (None: the initial
    simulator), in rounds of K variations of base tasks taken in a shuffled cycle (the shared rng), each
    round as many as the valid share so far says are missing, until that many are valid (the surplus of
    the last round is dropped) or three rounds in a row add none."""
    k = variations_per_seed(cfg)
    model = cfg.augment_model if cfg.variant == "offline-augment" else None
    if model is not None and frozen_policy is None:
        raise RuntimeError("data.coevo.augment_model needs a Learner with frozen_policy (GenEnvModule.learner)")
    known, tasks, counts = {env.task_key(s) for s in seeds}, [], {}

    def write(batch_seeds: list[Task], writer: Policy | None) -> int:
        """K variations of each of `batch_seeds` (every rank's share); the new valid ones join `tasks`."""
        batches = write_batches(batch_seeds, writer)
        for name, n in seam.total(_written_counts(batches)).items():
            counts[name] = counts.get(name, 0) + n
        before = len(tasks)
        for t in seam.gather_tasks(batches):
            if env.task_key(t) in known:  # also written in an earlier round
                counts["duplicates"] = counts.get("duplicates", 0) + 1
            else:
                known.add(env.task_key(t))
                tasks.append(t.to_dict())
        return len(tasks) - before

    with frozen_policy(model) if model is not None else nullcontext() as writer:
        if cfg.variant == "static-paper":  # every base task once
            target = len(seeds) * k
            write(seeds, writer)
        else:  # rounds sized by the valid share so far (at first 80%, at least 2%), at most 4 x the set
            target, cycle, idle = cfg.augment_size, [], 0
            while seeds and len(tasks) < target and idle < 3:
                rate = len(tasks) / counts["generations"] if counts.get("generations") else 0.8
                outputs = min(1.1 * (target - len(tasks)) / max(rate, 0.02), 4 * target)
                batch_seeds = []
                while len(batch_seeds) < math.ceil(outputs / k):
                    cycle = cycle or rng.sample(seeds, k=len(seeds))
                    batch_seeds.append(cycle.pop())
                idle = 0 if write(batch_seeds, writer) else idle + 1
    surplus = max(len(tasks) - target, 0)
    writer_name = "the initial simulator" if model is None else repr(model if isinstance(model, str) else model.model)
    return tasks[: len(tasks) - surplus], {
        "variant": cfg.variant, "writer": writer_name, "base_tasks": len(seeds), "requested": target,
        "written": len(tasks) - surplus, "surplus": surplus, "generations": counts.get("generations", 0),
        "invalid": counts.get("invalid", 0), "duplicates": counts.get("duplicates", 0),
        "invalid_reasons": {r.removeprefix("invalid/"): n for r, n in counts.items() if r.startswith("invalid/")}}


def _written_counts(batches: list[SeedBatch]) -> dict[str, int]:
    counts = {"generations": sum(len(b.generations) + b.invalid.get("overlong_prompt", 0) for b in batches),
              "invalid": sum(sum(b.invalid.values()) for b in batches), "duplicates": sum(b.duplicates for b in batches)}
    for b in batches:
        for reason, n in b.invalid.items():
            counts[f"invalid/{reason}"] = counts.get(f"invalid/{reason}", 0) + n
    return counts


def offline_metrics(stats: dict) -> dict[str, float]:
    """The fixed set's size and what writing it dropped (logged every epoch: constant after the first)."""
    n = max(stats["generations"], 1)
    return {"coevo/offline_set_size": float(stats["base_tasks"] + stats["written"]),
            "coevo/offline_written": float(stats["written"]),
            "coevo/offline_invalid_rate": stats["invalid"] / n, "coevo/offline_duplicate_rate": stats["duplicates"] / n}


def offline_summary(stats: dict) -> str:
    """One line on how the fixed set was written, for the log."""
    line = (f"[genenv] {stats['variant']}: {stats['writer']} wrote {stats['written']:,} valid tasks from "
            f"{stats['base_tasks']:,} base tasks ({stats['generations']:,} sampled: {stats['invalid']:,} invalid, "
            f"{stats['duplicates']:,} duplicates); the agent trains on a fixed set of "
            f"{stats['base_tasks'] + stats['written']:,} tasks")
    if stats["variant"] == "offline-augment" and stats["written"] < stats["requested"]:
        line += (f". Short of data.coevo.augment_size ({stats['requested']:,}): three rounds in a row wrote no "
                 f"new valid task")
    return line
