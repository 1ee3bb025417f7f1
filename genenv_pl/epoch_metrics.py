"""The `coevo/*`, `agent/*` and `perf/*` scalars of one epoch's generation, from the whole epoch (every
rank's part). The alpha-zone ones come from the curriculum callback (`zone_metrics`)."""
from __future__ import annotations

from genenv_pl.coevo import Group, SeedBatch
from genenv_pl.envs.base import Task
from genenv_pl.seam import Part


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


# Sources of the groups whose tasks a model wrote: this epoch's simulator ("fresh"), or the fixed set of a
# fixed-set variant ("static": written once, before training). "base" tasks are seeds, "replay" earlier epochs'.
GENERATED = ("fresh", "static")


def solve_fractions(successes: list[list[bool]]) -> dict[str, float]:
    """The paper's Fig. 8: of the tasks with these rollout successes (one list of G per task), the share
    solved in all G rollouts, in some but not all, and in none. A rollout succeeds as it does for p_hat
    (reward >= the environment's `success_threshold`, `coevo.rollout`), so a non-binary reward counts
    as the success rate counts it. NaN without any task (the tags still appear, as gaps). Counts over
    the whole epoch's tasks, every rank's, then divided: the shares of all ranks together."""
    kinds = ["solved" if all(s) else "partial" if any(s) else "unsolved" for s in successes if s]
    n = len(kinds)
    return {f"coevo/{k}_frac": kinds.count(k) / n if n else float("nan") for k in ("solved", "partial", "unsolved")}


def response_length(groups: list[Group]) -> float:
    """Mean agent response length in tokens (EOS included when the agent stopped) over every rollout
    of these groups: total tokens over total rollouts, not a mean of per-group means."""
    lengths = [len(r.response_ids) for g in groups for r in g.rollouts]
    return _mean([float(n) for n in lengths])


def generated_count(batches: list[SeedBatch]) -> tuple[int, dict[str, int]]:
    """The simulator outputs these seed batches stand for (a seed whose prompt was too long counts its K,
    never generated, as invalid) and the invalid ones by reason."""
    reasons: dict[str, int] = {}
    for b in batches:
        for r, c in b.invalid.items():
            reasons[r] = reasons.get(r, 0) + c
    return sum(len(b.generations) + b.invalid.get("overlong_prompt", 0) for b in batches), reasons


def task_checks(tasks: list[Task]) -> dict[str, list[float]]:
    """What the environment measured on each generated task (`meta["checks"]`), per check."""
    checks: dict[str, list[float]] = {}
    for t in tasks:
        for name, value in (t.meta.get("checks") or {}).items():
            checks.setdefault(name, []).append(float(value))
    return checks


def epoch_metrics(whole: Part, tasks_seen: int, zone: dict[str, float], sim_samples: int) -> dict[str, float]:
    """NaN where a quantity is undefined this epoch (no valid generated task): the tag still appears, as a gap."""
    batches, groups = whole.batches, whole.groups
    n_gen, reasons = generated_count(batches)
    fresh = [t for b in batches for t in b.tasks] + [g.task for g in groups if g.source == "static"]
    static = [float(s) for g in groups if g.source == "static" for s in g.successes]
    tokens = sum(len(g.response_ids) for b in batches for g in b.generations)
    tokens += sum(len(r.response_ids) for g in groups for r in g.rollouts)
    checks = task_checks(fresh)
    return {
        **{f"coevo/invalid/{r}": c / max(n_gen, 1) for r, c in reasons.items()},
        **{f"coevo/check/{name}": _mean(values) for name, values in checks.items()},
        # static ablation: the same quantity over its fixed tasks (no seed batches, no simulator)
        "coevo/success_rate": _mean([b.p_hat for b in batches if b.p_hat is not None]) if not static else _mean(static),
        # per generated task, from its own G rollouts (what difficulty_unit "task" scores)
        "coevo/task_success_rate": _mean([p for b in batches for p in b.task_p_hat if p is not None]),
        **zone,
        "coevo/sim_samples": float(sim_samples),
        "coevo/invalid_rate": sum(reasons.values()) / max(n_gen, 1),
        "coevo/duplicate_rate": sum(b.duplicates for b in batches) / max(n_gen, 1),
        "coevo/difficulty": _mean([t.difficulty for t in fresh]),
        "coevo/valid_tasks": float(len(fresh)),
        "coevo/overlong_tasks": float(whole.overlong),  # agent prompts past max_seq_len: not rolled out
        "agent/zero_std_frac": whole.zero_std / max(len(groups), 1),
        "agent/train_reward": _mean([r for g in groups for r in g.rewards]),
        # every rollout the epoch trains on (generated, seed and replayed tasks alike): the paper's Fig. 5a/b
        "agent/response_length": response_length(groups),
        **solve_fractions([g.successes for g in groups if g.source in GENERATED]),
        "agent/tasks_seen": float(tasks_seen),
        "perf/rollout_tokens_per_s": tokens / max(whole.seconds, 1e-9),
        "perf/generation_seconds": whole.seconds,
    }
