"""The generation half of a co-evolution epoch: simulator variations, agent rollouts, rewards.

Here environments meet generation backends; nothing here trains or knows about Lightning."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

from genenv_pl.backends.base import Generation, GenerationBackend, SamplingParams
from genenv_pl.envs.base import Environment, InvalidTask, Task
from genenv_pl.policy import Policy

Progress = Callable[[str, int, int], None]  # (phase, done, total)


@dataclass
class SeedBatch:
    """The K simulator variations of one seed and what became of them."""

    seed: Task
    prompt: str
    generations: list[Generation]
    position: int = 0  # of the seed in the epoch's whole list of seeds (every rank's), which orders the batches
    tasks: list[Task] = field(default_factory=list)  # valid, de-duplicated
    task_generations: list[Generation] = field(default_factory=list)  # aligned with tasks
    invalid: Counter = field(default_factory=Counter)  # reason -> count
    duplicates: int = 0
    successes: list[bool] = field(default_factory=list)  # over the K_valid * G rollouts
    p_hat: float | None = None
    r_env: float | None = None
    in_band: bool = False
    # The same three per valid task, from its own G rollouts (aligned with `tasks`; None / False for
    # a task that was not rolled out). Used when difficulty is scored per task (coevo.difficulty_unit).
    task_p_hat: list[float | None] = field(default_factory=list)
    task_r_env: list[float | None] = field(default_factory=list)
    task_in_band: list[bool] = field(default_factory=list)


@dataclass
class Group:
    """G agent rollouts of one task."""

    task: Task
    source: str  # "fresh" (generated this epoch), "base" (seed data) or "replay" (from D_train)
    seed_index: int | None  # index of the SeedBatch for fresh tasks
    rollouts: list[Generation]
    rewards: list[float]
    successes: list[bool]
    order: int = 0  # of the task in the epoch's whole work list (every rank's), which orders the groups


def generate_tasks(
    env: Environment,
    simulator: Policy,
    backend: GenerationBackend,
    seeds: list[Task],
    success_rates: dict[str, float],
    params: SamplingParams,
    progress: Progress | None = None,
    max_seq_len: int | None = None,
) -> list[SeedBatch]:
    """Step 1: K variations per seed, parsed, validated, de-duplicated (within the epoch and
    against the seeds). Unparseable output is counted by reason and dropped, never raised. A seed
    whose prompt leaves less than `max_new_tokens` of `max_seq_len` is not sent (its K outputs
    count as invalid, reason "overlong_prompt")."""
    prompts = [simulator.render(env.simulator_prompt(s, success_rates.get(s.id))) for s in seeds]
    fits = _fits(simulator, prompts, params.max_new_tokens, max_seq_len)
    if progress:
        progress("simulate", 0, len(prompts))
    sent = backend.generate(simulator, [p for p, ok in zip(prompts, fits) if ok], params) if any(fits) else []
    gens = iter(sent)
    if progress:
        progress("simulate", len(prompts), len(prompts))
    seen = {env.task_key(s) for s in seeds}
    batches = []
    for seed, prompt, ok in zip(seeds, prompts, fits):
        outs = next(gens) if ok else []
        batch = SeedBatch(seed=seed, prompt=prompt, generations=outs)
        if not ok:
            batch.invalid["overlong_prompt"] += params.n
        for g in outs:
            try:
                task = env.parse_task(g.text, seed)
            except InvalidTask as e:
                batch.invalid[e.reason] += 1
                continue
            except Exception as e:  # an environment bug must not kill a long run; count it loudly
                batch.invalid[f"parser_error:{type(e).__name__}"] += 1
                continue
            if not g.finished:
                batch.invalid["truncated"] += 1
                continue
            key = env.task_key(task)
            if key in seen:
                batch.duplicates += 1
                continue
            seen.add(key)
            batch.tasks.append(task)
            batch.task_generations.append(g)
        batches.append(batch)
    return batches


def rollout(
    env: Environment,
    agent: Policy,
    backend: GenerationBackend,
    tasks: list[tuple[Task, str, int | None]],
    params: SamplingParams,
    progress: Progress | None = None,
    max_seq_len: int | None = None,
) -> list[Group]:
    """Steps 2-3: G rollouts per task and their rewards. `tasks` holds (task, source, seed_index) or
    (task, source, seed_index, order), order being the task's place in the epoch's whole work list (default:
    its index in `tasks`).
    A task whose prompt leaves less than `max_new_tokens` of `max_seq_len` is skipped: no group."""
    tasks = [(t[0], t[1], t[2], t[3] if len(t) > 3 else i) for i, t in enumerate(tasks)]
    prompts = [agent.render(env.agent_prompt(t)) for t, _, _, _ in tasks]
    fits = _fits(agent, prompts, params.max_new_tokens, max_seq_len)
    tasks = [t for t, ok in zip(tasks, fits) if ok]
    prompts = [p for p, ok in zip(prompts, fits) if ok]
    if progress:
        progress("rollout", 0, len(prompts))
    gens = backend.generate(agent, prompts, params) if prompts else []
    if progress:
        progress("rollout", len(prompts), len(prompts))
    groups = []
    for (task, source, seed_index, order), outs in zip(tasks, gens):
        rewards = [_safe_reward(env, task, g.text) for g in outs]
        groups.append(Group(task, source, seed_index, outs, rewards, [r >= env.success_threshold for r in rewards],
                            order))
    return groups


def _fits(policy: Policy, prompts: list[str], max_new_tokens: int, max_seq_len: int | None) -> list[bool]:
    """Whether each prompt plus a full-length response stays within `max_seq_len` tokens (None: all do)."""
    if max_seq_len is None:
        return [True] * len(prompts)
    return [len(ids) + max_new_tokens <= max_seq_len for ids in policy.encode(prompts)]


def _safe_reward(env: Environment, task: Task, text: str) -> float:
    try:
        r = float(env.reward(task, text))
    except Exception:  # a scorer bug scores 0 rather than ending the run
        return 0.0
    return min(1.0, max(0.0, r)) if r == r else 0.0
