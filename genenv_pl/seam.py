"""Where the ranks (DDP, FSDP) agree during one epoch's generation: shard in, exchange out.

Every rank draws the same plan from the data module's rng, which is identical on all of them. Each rank
then works on its own share (`shard`): the simulator writes variations of its share of the seeds, the
agent rolls out its share of the tasks, within its share of the task budget (`share`). When its work is
done, each rank hands over a `Part` (`exchange`) and every rank gets the same whole epoch back: success
rates, pool entries, the seed batches and groups that metrics describe, each step's D_env entries and the
number of steps, which every rank then pads its own steps to (`pad`: the steps' backward passes are
collectives).

Besides: a task that two ranks' simulators both wrote is rolled out once, by the lowest rank
(`drop_repeats`, right after generation); each rank draws its own sampling noise and step order
(`seed_torch`, `step_rng`). A rank that fails while the ranks work apart (`guard`) hands its error to
every rank at the next exchange, so that none waits forever.

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
    train: list[dict[str, Any]] = field(default_factory=list)  # new D_train entries
    env: list[list[dict[str, Any]]] = field(default_factory=list)  # D_env entries of each step's simulator samples
    batches: list[SeedBatch] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    zero_std: int = 0  # groups without reward spread
    steps: int = 0
    seconds: float = 0.0  # generation and rollouts
    overlong: int = 0  # tasks not rolled out: prompt past max_seq_len


def epoch_seed(seed: int, epoch: int, rank: int) -> int:
    """torch's seed for one rank's epoch: a function of the three alone (a str seeds `random` by its SHA-512)."""
    return random.Random(f"{seed}:{epoch}:{rank}").getrandbits(63)


class RankSeam:
    def __init__(self, trainer: Any):
        self.sync = RankSync(trainer)

    @property
    def distributed(self) -> bool:
        return self.sync.distributed

    def seed_torch(self, seed: int, epoch: int) -> None:
        """An epoch's sampling noise (and its updates') comes from (seed, epoch, rank) alone, not from torch's
        generator as whatever ran before left it (an evaluation draws from it, a resumed run starts it afresh):
        evaluating more or less often, or resuming, does not change what is trained on."""
        torch.manual_seed(epoch_seed(seed, epoch, self.sync.rank))

    def shard(self, items: Sequence[T]) -> list[T]:
        return self.sync.shard(items)

    def guard(self):
        return self.sync.guard()

    def share(self, left: int | None) -> int | None:
        """This rank's share of what is left of the task budget (None: no budget): as even as it goes, the
        lower ranks take the remainder."""
        if left is None or not self.distributed:
            return left
        return left // self.sync.world + (self.sync.rank < left % self.sync.world)

    def step_rng(self, rng: random.Random) -> random.Random:
        """The rng that orders this rank's steps, drawn so that the shared rng stays identical on all ranks."""
        return random.Random(rng.getrandbits(64) + self.sync.rank) if self.distributed else rng

    def drop_repeats(self, batches: list[SeedBatch], seeds: list[Task], key: Callable[[Task], Any],
                     failure: Failure) -> list[SeedBatch]:
        """A task that a lower rank's simulator also wrote this epoch (or that equals any seed) counts as a
        duplicate here, as it would within one rank."""
        if not self.distributed:
            return batches
        keys = self.sync.exchange([key(t) for b in batches for t in b.tasks], failure, "simulator generation")
        known = {key(s) for s in seeds}.union(*keys[: self.sync.rank])
        for b in batches:
            kept = [(t, g) for t, g in zip(b.tasks, b.task_generations) if key(t) not in known]
            b.duplicates += len(b.tasks) - len(kept)
            b.tasks, b.task_generations = [t for t, _ in kept], [g for _, g in kept]
        return batches

    def gather_tasks(self, tasks: list[Task]) -> list[Task]:
        """Every rank's tasks, in rank order, on every rank."""
        if not self.distributed:
            return tasks
        return [Task.from_dict(d) for part in self.sync.exchange([t.to_dict() for t in tasks]) for d in part]

    def total(self, counts: dict[str, int]) -> dict[str, int]:
        """Counts summed over the ranks, key by key, on every rank."""
        if not self.distributed:
            return dict(counts)
        out: dict[str, int] = {}
        for part in self.sync.exchange(counts):
            for name, n in part.items():
                out[name] = out.get(name, 0) + n
        return out

    def exchange(self, part: Part | None, failure: Failure) -> Part:
        """The whole epoch from every rank's part (None: this rank failed; then every rank raises)."""
        if self.distributed and part is not None:
            part = _lite(part)
        return merge(self.sync.exchange(part if failure.error is None else None, failure, "agent rollouts"))

    @staticmethod
    def pad(steps: list[T], n: int, blank: Callable[[], T]) -> list[T]:
        """Every rank runs as many steps (n, the most any rank has): a rank with fewer runs empty ones, in
        which `GenEnvModule.training_step` still joins the others' collectives."""
        return steps + [blank() for _ in range(n - len(steps))]


def merge(parts: list[Part]) -> Part:
    """The ranks' parts as one, in rank order: fresh groups' seed indices point into the joined seed
    batches, and each step's D_env entries are those of all ranks' step of that index."""
    whole = Part()
    for part in parts:
        whole.rates.update(part.rates)
        whole.train += part.train
        offset = len(whole.batches)
        whole.batches += part.batches
        whole.groups += [g if g.seed_index is None or not offset else replace(g, seed_index=g.seed_index + offset)
                         for g in part.groups]
        whole.zero_std += part.zero_std
        whole.overlong += part.overlong
        whole.steps, whole.seconds = max(whole.steps, part.steps), max(whole.seconds, part.seconds)
    width = max((len(p.env) for p in parts), default=0)
    whole.env = [[e for p in parts if i < len(p.env) for e in p.env[i]] for i in range(width)]
    return whole


def _lite(part: Part) -> Part:
    """A copy for the other ranks (metrics, sample tables): without prompt token ids and log-probs."""
    def strip(g):
        return replace(g, prompt_ids=[], logprobs=[])

    batches = [replace(b, generations=[strip(g) for g in b.generations],
                       task_generations=[strip(g) for g in b.task_generations]) for b in part.batches]
    return replace(part, batches=batches, groups=[replace(g, rollouts=[strip(r) for r in g.rollouts]) for g in part.groups])
