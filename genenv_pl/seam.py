"""Where the ranks (DDP, FSDP) agree during one epoch's generation: shard in, exchange out.

Every rank draws the same plan from the data module's rng, which is identical on all of them. Each rank
then works on its own share: the simulator writes variations of its share of the seeds (`shard`), the
agent rolls out its share of the tasks (`work`). When its work is done, each rank hands over a `Part`
(`exchange`) and every rank gets the same whole epoch back, in the order one rank would have it: seed
batches by the seed's place in the plan, groups by the task's place in the epoch's whole work list. From
that whole epoch every rank cuts the same optimizer steps (`epoch.build_steps`) and packs the rows it
rolled out itself: a global batch of agent_batch_size tasks is the same set of tasks on any number of
ranks, and so the run is the one-rank run.

The rest of what makes N ranks one: a task that two ranks' simulators both wrote is kept at the lowest
seed position, as one rank keeps the first (`drop_repeats`); the task budget cuts the whole work list, not
each rank's (`work`). Each rank draws its own sampling noise (`seed_torch`). A rank that fails while the
ranks work apart (`guard`) hands its error to every rank at the next exchange, so that none waits forever.

In one process every method is the identity: no collective, no copy. The epoch's stages
(genenv_pl/epoch.py) know nothing of ranks.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence, TypeVar

import torch

from genenv_pl.coevo import Group, SeedBatch
from genenv_pl.distributed import Failure, RankSync
from genenv_pl.envs.base import Task

T = TypeVar("T")


@dataclass
class Part:
    """What one rank's share of an epoch produced, as exchanged; merged, the whole epoch's."""

    rates: dict[str, float] = field(default_factory=dict)  # seed id -> EMA of its success rate
    batches: list[SeedBatch] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    seconds: float = 0.0  # generation and rollouts
    overlong: int = 0  # tasks not rolled out: prompt past max_seq_len
    zero_std: int = 0  # groups without reward spread (counted when the steps are cut, from the whole epoch)


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    """torch's seed for one rank's epoch: a function of the three alone (a str seeds `random` by its SHA-512)."""
    return random.Random(f"{seed}:{epoch}:{rank}").getrandbits(63)


class RankSeam:
    def __init__(self, trainer: Any):
        self.sync = RankSync(trainer)

    @property
    def distributed(self) -> bool:
        return self.sync.distributed

    @property
    def rank(self) -> int:
        return self.sync.rank if self.distributed else 0

    @property
    def world(self) -> int:
        return self.sync.world if self.distributed else 1

    def seed_torch(self, seed: int, epoch: int) -> None:
        """An epoch's sampling noise (and its updates') comes from (seed, epoch, rank) alone, not from torch's
        generator as whatever ran before left it (an evaluation draws from it, a resumed run starts it afresh):
        evaluating more or less often, or resuming, does not change what is trained on."""
        torch.manual_seed(epoch_seed(seed, epoch, self.sync.rank))

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's share of a list that every rank drew identically: items rank, rank + world, ..."""
        return self.sync.shard(items)

    def guard(self):
        return self.sync.guard()

    def drop_repeats(self, batches: list[SeedBatch], seeds: list[Task], key: Callable[[Task], Any],
                     failure: Failure) -> tuple[list[SeedBatch], dict[int, int]]:
        """A task that another rank's simulator wrote at a lower seed position this epoch (or that equals any
        seed) counts as a duplicate here, as it would within one rank, which keeps the first. Returns the
        batches and the number of tasks kept at each seed position, every rank's."""
        mine = [(b.position, [key(t) for t in b.tasks]) for b in batches]
        if not self.distributed:
            return batches, {pos: len(keys) for pos, keys in mine}
        parts = self.sync.exchange(mine, failure, "simulator generation")
        seeds_known = {key(s) for s in seeds}
        first: dict[Any, int] = {}
        for part in parts:
            for pos, keys in part:
                for k in keys:
                    first[k] = min(first.get(k, pos), pos)

        def kept(pos: int, k: Any) -> bool:
            return first[k] == pos and k not in seeds_known

        for b in batches:
            pairs = [(t, g) for t, g in zip(b.tasks, b.task_generations) if kept(b.position, key(t))]
            b.duplicates += len(b.tasks) - len(pairs)
            b.tasks, b.task_generations = [t for t, _ in pairs], [g for _, g in pairs]
        return batches, {pos: sum(kept(pos, k) for k in keys) for part in parts for pos, keys in part}

    def work(self, batches: list[SeedBatch], written: dict[int, int], tasks: list[tuple[Task, str]],
             left: int | None) -> list[tuple[Task, str, int | None, int]]:
        """This rank's rollouts as (task, source, seed batch index, order). The epoch's whole work list is
        every rank's fresh tasks by seed position (`written` counts them), then the plan's other tasks; order
        is a task's place in it. The task budget (`left`; None: none) takes the first tasks of that whole
        list, as one rank would; this rank keeps its own among them: the variations of its seeds and its
        round-robin share of the other tasks."""
        offset, start = 0, {}
        for pos in sorted(written):
            start[pos], offset = offset, offset + written[pos]
        mine = [(t, "fresh", i, start[b.position] + j) for i, b in enumerate(batches) for j, t in enumerate(b.tasks)]
        mine += [(t, source, None, offset + j) for j, (t, source) in enumerate(tasks) if j % self.world == self.rank]
        return [w for w in mine if left is None or w[3] < left]

    def gather_tasks(self, batches: list[SeedBatch]) -> list[Task]:
        """Every rank's written tasks on every rank, by seed position (as one rank holds them)."""
        mine = [(b.position, [t.to_dict() for t in b.tasks]) for b in batches]
        parts = self.sync.exchange(mine) if self.distributed else [mine]
        return [Task.from_dict(d) for _, tasks in sorted((b for part in parts for b in part), key=lambda b: b[0])
                for d in tasks]

    def total(self, counts: dict[str, int]) -> dict[str, int]:
        """Counts summed over the ranks, key by key, on every rank."""
        if not self.distributed:
            return dict(counts)
        out: dict[str, int] = {}
        for part in self.sync.exchange(counts):
            for name, n in part.items():
                out[name] = out.get(name, 0) + n
        return out

    def agree(self, failure: Failure, phase: str) -> None:
        """Every rank raises if any rank's guarded block failed, instead of the others waiting for it in the
        next collective (one process: the guard has raised already)."""
        if self.distributed:
            self.sync.exchange(None, failure, phase)

    def exchange(self, part: Part | None, failure: Failure) -> Part:
        """The whole epoch from every rank's part (None: this rank failed; then every rank raises)."""
        if self.distributed and part is not None:
            part = _lite(part)
        return merge(self.sync.exchange(part if failure.error is None else None, failure, "agent rollouts"))


def merge(parts: list[Part]) -> Part:
    """The ranks' parts as one, in the order one rank has them: seed batches by seed position, groups by their
    order in the epoch's work list, and each fresh group's seed index pointing into the joined batches."""
    whole = Part()
    for part in parts:
        whole.rates.update(part.rates)
        whole.batches += part.batches
        whole.overlong += part.overlong
        whole.seconds = max(whole.seconds, part.seconds)
    whole.batches.sort(key=lambda b: b.position)
    index = {b.position: i for i, b in enumerate(whole.batches)}
    whole.groups = sorted((g if g.seed_index is None else replace(g, seed_index=index[part.batches[g.seed_index].position])
                           for part in parts for g in part.groups), key=lambda g: g.order)
    return whole


def _lite(part: Part) -> Part:
    """A copy for the other ranks (metrics, sample tables, the steps' plan): without prompt token ids and
    log-probs, which only the rank that packs a row needs."""
    def strip(g):
        return replace(g, prompt_ids=[], logprobs=[])

    batches = [replace(b, generations=[strip(g) for g in b.generations],
                       task_generations=[strip(g) for g in b.task_generations]) for b in part.batches]
    return replace(part, batches=batches, groups=[replace(g, rollouts=[strip(r) for r in g.rollouts]) for g in part.groups])
