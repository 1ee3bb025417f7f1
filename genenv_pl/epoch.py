"""One co-evolution epoch, as the paper's Algorithm 1, in named stages over plain data:

    plan -> generate -> roll out -> score (p_hat, R_env, band) -> pools -> build steps

`run_epoch` runs them in that order; `GenEnvDataModule.train_dataloader` calls it once per epoch and
returns its steps, which `GenEnvModule.training_step` takes one at a time. What an epoch needs of the two
policies comes in one object, `Learner` (`GenEnvModule.learner`); R_env and the band come from the
curriculum callback (`Curriculum`). Several ranks agree at one seam, `RankSeam` (genenv_pl/seam.py):
shard in before the work, exchange out after it. The stages know nothing of ranks, nor of Lightning.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ContextManager, Protocol

import torch
from torch import Tensor

from genenv_pl.backends.base import Generation, GenerationBackend, SamplingParams
from genenv_pl.batching import Step, pack
from genenv_pl.coevo import Group, Progress, SeedBatch, generate_tasks, rollout
from genenv_pl.config import CoevoConfig
from genenv_pl.curriculum import rwr_weights, success_rate
from genenv_pl.envs import Environment, Task
from genenv_pl.epoch_metrics import epoch_metrics
from genenv_pl.offline import (FIXED_SETS, OFFLINE_SETS, FrozenPolicy, WriteBatches, offline_metrics, offline_tasks,
                               variations_per_seed, write_offline)
from genenv_pl.policy import Policy
from genenv_pl.pools import Pools, env_entry, train_entry
from genenv_pl.seam import Part, RankSeam

Batch = dict[str, Tensor]


@dataclass(frozen=True)
class Learner:
    """What an epoch needs of the two policies, handed to the data module by `GenEnvModule.learner()` at
    fit start; the data module reads nothing else of the module."""

    backend: GenerationBackend
    sampling_policy: Callable[[str], Policy]  # role -> the policy to sample from (FSDP: a collective, every rank)
    policy: Callable[[str], Policy]  # role -> the trained policy, for its tokenizer (pad id, D_env replay)
    advantages: Callable[[Tensor], tuple[Tensor, Tensor]]  # GRPO's, of [groups, G] rewards (and zero-spread groups)
    old_logprobs: Callable[[list[Batch]], list[Tensor]] | None  # grpo.old_logp "recompute"; None: the sampler's
    autocast: Callable[[], ContextManager]  # the training precision's, which generation computes under too
    grpo_iterations: int = 1
    rwr_lambda: float = 1.0
    env_replay: int = 0  # D_env samples replayed into each epoch's simulator update
    # a model built from its config for generation only (data.coevo.augment_model): frozen, freed when the block ends
    frozen_policy: FrozenPolicy | None = None


class Curriculum(Protocol):
    """The alpha-curriculum (`callbacks.AlphaCurriculumCallback`)."""

    def score(self, batches: list[SeedBatch], band: bool = True) -> None: ...

    def zone_metrics(self, batches: list[SeedBatch]) -> dict[str, float]: ...


@dataclass
class EpochState:
    """What carries over between epochs (the data module's, saved in its checkpoints). The stages read it
    and draw from its rng; `Epoch` holds what it gains."""

    rng: random.Random
    pools: Pools
    success_rates: dict[str, float]
    static_tasks: list[dict] | None
    tasks_seen: int
    offline_pass: list[int] = field(default_factory=list)  # what is left of the fixed set's current pass (`plan`)
    offline_stats: dict | None = None  # how the fixed set of "static-paper" / "offline-augment" was written


@dataclass
class RoundStats:
    """What one epoch's generation produced; read by the callbacks for logging."""

    epoch: int
    batches: list[SeedBatch] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class Epoch:
    steps: list[Step]  # this rank's
    env_by_step: list[list[dict]]  # each step's D_env entries, every rank's: D_env keeps them when that step is kept
    rates: dict[str, float]
    train: list[dict]  # new D_train entries, every rank's
    static_tasks: list[dict] | None
    stats: RoundStats
    offline_pass: list[int] = field(default_factory=list)
    offline_stats: dict | None = None


@dataclass
class Plan:
    seeds: list[Task]  # the simulator writes K variations of each
    tasks: list[tuple[Task, str]]  # the agent's other tasks, by source: "static", "base", "replay"
    env_replay: list[dict]  # D_env entries replayed into the simulator's update
    offline_pass: list[int] = field(default_factory=list)  # the fixed set's pass, after this epoch's share


@dataclass
class SimSample:
    """One simulator generation that enters the RWR update, with the difficulty score it earned."""

    batch: SeedBatch | None  # None: replayed from D_env
    generation: Any
    p_hat: float
    r_env: float
    key: tuple = ()  # the same on every rank: ("fresh", seed position, task index) or ("replay", index)


def run_epoch(env: Environment, cfg: CoevoConfig, learner: Learner, curriculum: Curriculum, seam: RankSeam,
              state: EpochState, epoch: int, seed: int, progress: Progress | None = None) -> Epoch:
    seam.seed_torch(seed, epoch)
    t0 = time.perf_counter()
    sim_params, agent_params = _sampling(cfg, learner)
    seeds_all, static, offline = env.seed_tasks(), state.static_tasks, state.offline_stats
    if cfg.variant == "static" and static is None:  # a fixed set, written once by the initial simulator
        written, _ = _generate(env, learner, seam, seeds_all, {}, sim_params, progress, cfg.max_seq_len)
        static = [t.to_dict() for t in seam.gather_tasks(written)]
    elif cfg.variant in OFFLINE_SETS and static is None:  # written once, before the first update
        static, offline = write_offline(env, cfg, seam, seeds_all, state.rng, _writer(env, cfg, learner, seam, sim_params,
                                                                                   progress), learner.frozen_policy)
    p = plan(cfg, seeds_all, state, static, learner.env_replay)
    batches, written = ([], {}) if cfg.variant in FIXED_SETS else \
        _generate(env, learner, seam, p.seeds, state.success_rates, sim_params, progress, cfg.max_seq_len)
    agent, mine = learner.sampling_policy("agent"), None  # (FSDP: gathers the weights, every rank)
    with seam.guard() as failure:  # this rank's share, apart from the others
        work = seam.work(batches, written, p.tasks, budget_left(cfg, state))
        groups = rollout(env, agent, learner.backend, work, agent_params, progress, cfg.max_seq_len)
        rates = score(batches, groups, state.success_rates, cfg.success_ema, curriculum, band=cfg.variant != "no-band")
        mine = Part(rates, batches, groups, time.perf_counter() - t0, len(work) - len(groups))
    whole = seam.exchange(mine, failure)
    # The epoch's steps, cut from the whole epoch alike on every rank; each rank packs its own rows of them.
    simulator = learner.policy("simulator")
    samples = _samples(cfg, whole.batches, p.env_replay)
    with seam.guard() as failure:  # (packing, and recomputing old log-probs, can fail on one rank too)
        own = _own(cfg, groups, batches, p.env_replay, seam, simulator)
        steps, chunks, whole.zero_std = build_steps(cfg, whole.groups, samples, (learner.policy("agent").pad_id,
                                                    simulator.pad_id), learner.advantages, state.rng,
                                                    learner.grpo_iterations, learner.old_logprobs, own)
    seam.agree(failure, "building the epoch's steps")
    env_by_step = env_entries(epoch, chunks)
    weigh(steps, [e["r_env"] for step in env_by_step for e in step] + [e["r_env"] for e in p.env_replay],
          learner.rwr_lambda)
    new_static = [] if static is state.static_tasks else [train_entry(epoch, Task.from_dict(d), [], None) for d in static]
    seen = state.tasks_seen + len(whole.groups)
    metrics = epoch_metrics(whole, seen, curriculum.zone_metrics(whole.batches), sum(len(e) for e in env_by_step))
    if cfg.variant in OFFLINE_SETS and offline is not None:
        metrics.update(offline_metrics(offline))
    return Epoch(steps, env_by_step, whole.rates, new_static + train_entries(epoch, whole.groups, cfg.keep_rollout_text),
                 static, RoundStats(epoch, whole.batches, whole.groups, metrics), p.offline_pass,
                 offline if cfg.variant in OFFLINE_SETS else None)


def _samples(cfg: CoevoConfig, batches: list[SeedBatch], env_replay: list[dict]) -> list[SimSample]:
    """The whole epoch's simulator update, in the order one rank has it: the in-band generations of the seed
    batches (every rank's), then the D_env samples replayed into it."""
    if not trains_simulator(cfg):
        return []
    return simulator_samples(batches, cfg.difficulty_unit) + \
        [SimSample(None, None, e["p_hat"], e["r_env"], ("replay", j)) for j, e in enumerate(env_replay)]


def _own(cfg: CoevoConfig, groups: list[Group], batches: list[SeedBatch], env_replay: list[dict], seam: RankSeam,
         simulator: Policy) -> Callable[[Any], Any]:
    """Which of the whole epoch's groups and simulator samples this rank packs into its rows of the steps:
    the ones it rolled out or wrote, whole (the other ranks' copies carry no token ids); None for another
    rank's. A replayed D_env sample belongs to every world-th rank, which tokenizes it (`replayed`)."""
    mine: dict[Any, Any] = {("group", g.order): g for g in groups}
    if trains_simulator(cfg):
        mine.update({("sample", s.key): s for s in simulator_samples(batches, cfg.difficulty_unit)})
        mine.update({("sample", ("replay", j)): replayed(simulator, e, ("replay", j))
                     for j, e in enumerate(env_replay) if j % seam.world == seam.rank})
    return lambda item: mine.get(("group", item.order) if isinstance(item, Group) else ("sample", item.key))


def epoch_shape(cfg: CoevoConfig, world_size: int, grpo_iterations: int, env_replay: int) -> str:
    """The one line a fit prints at its start: what one epoch trains on, in global numbers (at most: the
    simulator's invalid and duplicate tasks are dropped, and the fixed-set variants' sets are written later)."""
    k, g = cfg.num_generations_per_prompt, cfg.group_size
    if cfg.variant in OFFLINE_SETS:
        tasks = cfg.offline_tasks_per_epoch
        source = f"{tasks} tasks of the fixed set" if tasks else "the whole fixed set"
    else:
        tasks = cfg.seeds_per_epoch * k + cfg.base_tasks_per_epoch + cfg.replay_tasks_per_epoch
        source = (f"{cfg.seeds_per_epoch} seeds x K {k}" if cfg.variant != "static" else
                  f"{cfg.seeds_per_epoch * k} fixed tasks") + \
            f" + {cfg.base_tasks_per_epoch} seed + {cfg.replay_tasks_per_epoch} replayed tasks"
    line = (f"[genenv] {world_size} rank{'s' if world_size > 1 else ''}; an epoch, in all: {source}")
    if tasks:
        steps = -(-tasks // cfg.agent_batch_size) * grpo_iterations
        line += f" = up to {tasks:,} tasks, {tasks * g:,} rollouts (G {g}), {steps:,} agent step{'s' if steps != 1 else ''}"
    line += f" of {cfg.agent_batch_size} tasks (global batch"
    line += f", about {cfg.agent_batch_size / world_size:g} a rank)" if world_size > 1 else ")"
    if trains_simulator(cfg):
        line += (f"; up to {cfg.seeds_per_epoch * k + env_replay:,} simulator samples in steps of "
                 f"{cfg.sim_batch_size}")
    return line


# ---- plan -----------------------------------------------------------------------------------
def plan(cfg: CoevoConfig, seeds_all: list[Task], state: EpochState, static: list[dict] | None, env_replay: int) -> Plan:
    """What the epoch trains on, drawn from the shared rng (identical on every rank): the seeds the simulator
    varies (or, "static", tasks of the fixed set), seed tasks, tasks replayed from D_train, D_env samples.
    "static-paper" and "offline-augment": the fixed set alone (`offline_tasks`)."""
    rng, seeds, tasks = state.rng, [], []
    if cfg.variant in OFFLINE_SETS:
        tasks, left = offline_tasks(cfg, seeds_all, static, state.rng, state.offline_pass)
        return Plan([], tasks, [], left)
    if cfg.variant == "static":  # as many fixed tasks an epoch as GenEnv's seeds_per_epoch x K fresh ones
        n = min(cfg.seeds_per_epoch * cfg.num_generations_per_prompt, len(static))
        tasks = [(Task.from_dict(d), "static") for d in rng.sample(static, k=n)]
    else:
        seeds = rng.sample(seeds_all, k=min(cfg.seeds_per_epoch, len(seeds_all)))
    tasks += [(t, "base") for t in rng.sample(seeds_all, k=min(cfg.base_tasks_per_epoch, len(seeds_all)))]
    tasks += [(t, "replay") for t in state.pools.sample_train_tasks(rng, cfg.replay_tasks_per_epoch)]
    replay = state.pools.sample_env(rng, env_replay) if trains_simulator(cfg) else []
    return Plan(seeds, tasks, replay)


def trains_simulator(cfg: CoevoConfig) -> bool:
    return cfg.variant in ("genenv", "no-band")


def budget_left(cfg: CoevoConfig, state: EpochState) -> int | None:
    """Training tasks the agent may still roll out (data.coevo.agent_task_budget; None: no budget)."""
    return None if cfg.agent_task_budget is None else max(cfg.agent_task_budget - state.tasks_seen, 0)


def _sampling(cfg: CoevoConfig, learner: Learner) -> tuple[SamplingParams, SamplingParams]:
    # The sampler's log-probs are read only as GRPO's old log-probs, and only where they are not recomputed.
    logprobs = learner.old_logprobs is None
    return (replace(cfg.sim_sampling, n=cfg.num_generations_per_prompt, logprobs=logprobs),
            replace(cfg.agent_sampling, n=cfg.group_size, logprobs=logprobs))


# ---- generate -------------------------------------------------------------------------------
def _generate(env: Environment, learner: Learner, seam: RankSeam, seeds: list[Task], rates: dict[str, float],
              params: SamplingParams, progress: Progress | None, max_seq_len: int | None,
              writer: Policy | None = None) -> tuple[list[SeedBatch], dict[int, int]]:
    """Step 1 on this rank's share of `seeds` (`coevo.generate_tasks`), by the simulator or by `writer`: the
    seed batches, each with its seed's position in `seeds`, and the tasks kept at each position, every rank's."""
    simulator = writer or learner.sampling_policy("simulator")  # (FSDP: gathers the weights, every rank)
    batches: list[SeedBatch] = []
    with seam.guard() as failure:
        batches = generate_tasks(env, simulator, learner.backend, seam.shard(seeds), rates, params, progress,
                                 max_seq_len)
        for b, position in zip(batches, seam.shard(range(len(seeds)))):
            b.position = position
    return seam.drop_repeats(batches, seeds, env.task_key, failure)


def _writer(env: Environment, cfg: CoevoConfig, learner: Learner, seam: RankSeam, params: SamplingParams,
            progress: Progress | None) -> WriteBatches:
    """How `offline.write_offline` writes a batch: step 1 with its own number of variations per seed."""
    params = replace(params, n=variations_per_seed(cfg))
    return lambda seeds, writer: _generate(env, learner, seam, seeds, {}, params, progress, cfg.max_seq_len,
                                           writer)[0]


# ---- score ----------------------------------------------------------------------------------
def score(batches: list[SeedBatch], groups: list[Group], rates: dict[str, float], ema: float, curriculum: Curriculum,
          band: bool = True) -> dict[str, float]:
    """Steps 4-6. p_hat of each seed batch over all K_valid * G rollouts of its variations (and of each
    variation over its own G), then R_env and the band (the curriculum's; band False: every scored batch
    is in it, the "no-band" ablation). Returns each scored seed's new success rate, the EMA shown to the
    simulator next time."""
    for b in batches:
        b.task_p_hat = [None] * len(b.tasks)
    for g in groups:
        if g.seed_index is not None:
            b = batches[g.seed_index]
            b.successes.extend(g.successes)
            b.task_p_hat[next(i for i, t in enumerate(b.tasks) if t is g.task)] = float(success_rate(torch.tensor(g.successes)))
    new: dict[str, float] = {}
    for b in batches:
        if b.successes:
            b.p_hat = float(success_rate(torch.tensor(b.successes)))
            old = new.get(b.seed.id, rates.get(b.seed.id))
            new[b.seed.id] = b.p_hat if old is None else ema * old + (1 - ema) * b.p_hat
    curriculum.score(batches, band=band)
    return new


def simulator_samples(batches: list[SeedBatch], unit: str) -> list[SimSample]:
    """The generations that train the simulator this epoch: those the agent rolled out, in band.
    "seed_batch" (the paper): each rolled-out variation of an in-band seed batch, scored by the batch's
    p_hat. "task": each variation in band by its own. A variation that was never rolled out (its prompt
    past max_seq_len, or past the task budget) earned no score, whatever its batch's."""
    if unit == "task":
        return [SimSample(b, g, p, r, ("fresh", b.position, j)) for b in batches
                for j, (g, p, r, ok) in enumerate(zip(b.task_generations, b.task_p_hat, b.task_r_env, b.task_in_band))
                if ok]
    return [SimSample(b, g, b.p_hat, b.r_env, ("fresh", b.position, j)) for b in batches if b.in_band
            for j, (g, p) in enumerate(zip(b.task_generations, b.task_p_hat)) if p is not None]


def replayed(simulator: Policy, entry: dict[str, Any], key: tuple = ()) -> SimSample:
    """A D_env entry as a sample of this epoch's simulator update, with its stored p_hat and R_env. Its
    prompt and text are tokenized again (the text closed by EOS: only finished generations became tasks);
    it has no sampling log-probs (NaN)."""
    prompt_ids, response_ids = simulator.encode([entry["prompt"], entry["text"]])
    response_ids = response_ids + [simulator.eos_id]
    generation = Generation(prompt_ids, response_ids, entry["text"], [math.nan] * len(response_ids), True)
    return SimSample(None, generation, entry["p_hat"], entry["r_env"], key)


# ---- pools ----------------------------------------------------------------------------------
def train_entries(epoch: int, groups: list[Group], keep_text: bool) -> list[dict]:
    """D_train gains every fresh task the agent rolled out, with its rewards (and rollout texts)."""
    return [train_entry(epoch, g.task, g.rewards, [r.text for r in g.rollouts] if keep_text else None)
            for g in groups if g.source == "fresh"]


def env_entries(epoch: int, chunks: list[list[SimSample]]) -> list[list[dict]]:
    """The D_env entries of each step's simulator samples (the replayed ones are there already)."""
    return [[env_entry(epoch, s.batch.seed.id, s.batch.prompt, s.generation.text, s.p_hat, s.r_env)
             for s in chunk if s.batch is not None] for chunk in chunks]


# ---- build steps ----------------------------------------------------------------------------
def build_steps(cfg: CoevoConfig, groups: list[Group], sim_samples: list[SimSample], pad_ids: tuple[int, int],
                advantages: Callable[[Tensor], tuple[Tensor, Tensor]], rng: random.Random, iterations: int = 1,
                old_logprobs: Callable[[list[Batch]], list[Tensor]] | None = None,
                own: Callable[[Any], Any] = lambda item: item) -> tuple[list[Step], list[list[SimSample]], int]:
    """The epoch's optimizer steps, cut from the whole epoch's groups and simulator samples (the same on every
    rank, drawn from the shared rng): GRPO groups with their advantages in global batches of agent_batch_size,
    each batch `iterations` times in a row (grpo.num_iterations), and simulator samples in global chunks of
    sim_batch_size, side by side; at least one step (an empty epoch still runs, and logs, one). Each rank packs
    its own rows of each step (`own`: this rank's whole copy of a group or sample, None for another rank's;
    one process: all of them); a step in which it has none gets None for that role. Returns this rank's
    steps, each step's simulator samples (every rank's) and the number of groups without reward spread."""
    kept, zero_std = [], 0
    for g in groups:
        adv, zero = advantages(torch.tensor([g.rewards], dtype=torch.float32))
        zero_std += int(zero.item())
        if not (zero.item() and cfg.drop_zero_std_groups):
            kept.append((g, adv[0]))
    rng.shuffle(kept)
    agent = [_agent_batch(cfg, [(own(g), adv) for g, adv in kept[i : i + cfg.agent_batch_size] if own(g) is not None],
                          pad_ids[0]) for i in range(0, len(kept), cfg.agent_batch_size)]
    packed = [b for b in agent if b is not None]
    if old_logprobs is not None and packed:
        for batch, logp in zip(packed, old_logprobs(packed)):
            batch["old_logp"] = logp
    agent = [b for b in agent for _ in range(iterations)]  # packed once, stepped on `iterations` times in a row
    rng.shuffle(sim_samples)
    chunks = [sim_samples[i : i + cfg.sim_batch_size] for i in range(0, len(sim_samples), cfg.sim_batch_size)]
    n = max(len(agent), len(chunks), 1)
    chunks += [[] for _ in range(n - len(chunks))]
    sims = [[own(s) for s in chunk if own(s) is not None] for chunk in chunks]
    steps = [Step(agent[i] if i < len(agent) else None, _sim_batch(sims[i], pad_ids[1], cfg) if sims[i] else None)
             for i in range(n)]
    return steps, chunks, zero_std


def _agent_batch(cfg: CoevoConfig, groups: list[tuple[Group, Tensor]], pad_id: int) -> Batch | None:
    """A packed GRPO batch of these groups (None without any); it carries the temperature its rollouts were
    sampled at (a 0-d tensor: every value of a batch is a tensor), which the training forward passes divide
    the logits by."""
    if not groups:
        return None
    rows = [(r, a) for g, adv in groups for r, a in zip(g.rollouts, adv.tolist())]
    batch = pack([r.prompt_ids for r, _ in rows], [r.response_ids for r, _ in rows], pad_id, [r.logprobs for r, _ in rows])
    batch["advantages"] = torch.tensor([a for _, a in rows], dtype=torch.float32)
    # not trained on: the step's mean reward (agent/step_reward, the paper's Fig. 4a) is read from it
    batch["rewards"] = torch.tensor([w for g, _ in groups for w in g.rewards], dtype=torch.float32)
    batch["temperature"] = torch.tensor(cfg.agent_sampling.temperature, dtype=torch.float32)
    return batch


def _sim_batch(chunk: list[SimSample], pad_id: int, cfg: CoevoConfig) -> Batch:
    gens = [s.generation for s in chunk]
    batch = pack([g.prompt_ids for g in gens], [g.response_ids for g in gens], pad_id, [g.logprobs for g in gens])
    batch["r_env"] = torch.tensor([s.r_env for s in chunk], dtype=torch.float32)
    batch["temperature"] = torch.tensor(cfg.sim_sampling.temperature, dtype=torch.float32)
    return batch


def weigh(steps: list[Step], r_env_of_update: list[float], lam: float) -> None:
    """RWR weights with mean 1 over the epoch's whole simulator update (every rank's samples and the D_env
    replay, as Algorithm 1 weighs the epoch's set), not over each step's chunk on its own."""
    over = torch.tensor(r_env_of_update)
    for step in steps:
        if step.sim is not None:
            step.sim["weights"] = rwr_weights(step.sim["r_env"], lam, over=over)
