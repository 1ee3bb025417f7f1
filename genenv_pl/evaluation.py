"""Evaluating the agent on held-out tasks: its greedy answers (and k sampled ones) scored by the environment,
the metrics logged from them, and the test report (a table per group, the environment's corpus metrics,
interactive episodes, test_results.json). GenEnvModule's validation and test hooks call these; nothing here
knows Lightning."""
from __future__ import annotations

import json
import math
import os
import random
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from torch.utils.data import IterableDataset

from genenv_pl.backends.base import GenerationBackend, SamplingParams
from genenv_pl.config import CoevoConfig
from genenv_pl.envs.base import Environment, Task
from genenv_pl.policy import Policy

Row = dict[str, Any]
_NOT_SCORES = ("id", "group", "response", "sampled_accuracy")


@dataclass(frozen=True)
class EvalSettings:
    max_new_tokens: int
    samples: int  # also this many sampled answers per task (0: greedy only)
    temperature: float
    top_p: float
    batch_size: int
    episodes: int  # interactive episodes `test` plays (-1: all)
    samples_every: int = 1  # a fit's validations that sample: the start's and every this-many-th

    @classmethod
    def of(cls, cfg: CoevoConfig) -> "EvalSettings":
        return cls(cfg.eval_max_new_tokens, cfg.eval_samples, cfg.agent_sampling.temperature, cfg.agent_sampling.top_p,
                   cfg.eval_batch_size, cfg.eval_episodes, cfg.eval_samples_every)


def samples_this_validation(epoch: int, check_val_every_n_epoch: int | None, samples_every: int) -> bool:
    """Whether a fit's validation after `epoch` (0-based) also samples (`data.coevo.eval_samples_every`): at
    every samples_every-th scheduled validation, decided by the epoch so that a resumed fit keeps the schedule.
    Validation by steps (no epoch interval) samples each time."""
    if samples_every <= 1 or not check_val_every_n_epoch:
        return True
    return (epoch + 1) % (samples_every * check_val_every_n_epoch) == 0


def eval_batches(tasks: list[Task], batch_size: int, length: Callable[[Task], int]) -> list[list[Task]]:
    """The held-out set in batches of `batch_size`, tasks of similar prompt length together (left padding to
    the longest prompt is wasted compute: a 5K-token prompt beside 300-token ones costs 16x on a CPU). The
    same batches on any number of ranks, which take whole batches: a batch's answers do not depend on
    who computes it."""
    tasks = sorted(tasks, key=length)  # (stable: equal lengths keep the environment's order)
    return [tasks[i : i + batch_size] for i in range(0, len(tasks), batch_size)]


@dataclass
class EvalBatch:
    index: int  # of the batch in the whole set's `eval_batches`
    tasks: list[Task]


class EvalBatches(IterableDataset):
    """One rank's evaluation batches: every world-th of the whole set's, from its rank on. Iterable, so that
    Lightning adds no DistributedSampler of its own, and with no length: a rank without a batch still runs the
    evaluation's epoch hooks, where the ranks gather the rows."""

    def __init__(self, batches: list[list[Task]], rank: int = 0, world: int = 1):
        self.batches, self.rank, self.world = batches, rank, world

    def __iter__(self) -> Iterator[EvalBatch]:
        for i in range(self.rank, len(self.batches), self.world):
            yield EvalBatch(i, self.batches[i])


def in_set_order(parts: list[list[tuple[int, list[Row]]]]) -> list[Row]:
    """Every rank's (batch index, rows) as the one list of rows a single rank would have: batch by batch."""
    return [row for _, rows in sorted((b for part in parts for b in part), key=lambda b: b[0]) for row in rows]


def eval_seed(seed: int, batch_index: int) -> int:
    """torch's seed for the sampled answers of one evaluation batch: a function of the run's seed and the batch."""
    return random.Random(f"{seed}:eval:{batch_index}").getrandbits(63)


def answer(env: Environment, backend: GenerationBackend, agent: Policy, tasks: list[Task], s: EvalSettings) -> list[Row]:
    """Greedy agent answers scored by the environment: one row of metrics per task. With `samples` k, each
    row also has `sampled_accuracy`, the mean accuracy of k answers sampled as the rollouts are."""
    prompts = [agent.render(env.agent_prompt(t)) for t in tasks]
    gens = backend.generate(agent, prompts, SamplingParams(max_new_tokens=s.max_new_tokens, greedy=True, logprobs=False))
    rows = [{"id": task.id, "group": task.group, "response": g[0].text, **score(env, task, g[0].text)}
            for task, g in zip(tasks, gens)]
    if s.samples > 0:
        params = SamplingParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, n=s.samples,
                                logprobs=False)
        for task, row, g in zip(tasks, rows, backend.generate(agent, prompts, params)):
            row["sampled_accuracy"] = sum(score(env, task, x.text)["accuracy"] for x in g) / len(g)
    return rows


ACT_MAX_PADDING = 0.25
"""`act`'s bound on the padding a group of prompts may add, as a share of the group's own tokens."""


def act(backend: GenerationBackend, agent: Policy, conversations: list[list[dict[str, str]]], max_new_tokens: int,
        max_padding: float = ACT_MAX_PADDING) -> list[str]:
    """The agent as an interactive player: greedy text for one turn of each conversation.

    A backend that pads a batch to its longest prompt (`pads_batches`) gets the prompts in groups of
    similar length (`length_buckets`): games in lockstep drift apart in length (an ALFWorld history grows
    by each command's observation), and in one padded call every row pays the longest row's prefill,
    whose attention grows with the square of its length."""
    params = SamplingParams(max_new_tokens=max_new_tokens, greedy=True, logprobs=False)
    prompts = [agent.render(m) for m in conversations]
    if not backend.pads_batches:
        return [g[0].text for g in backend.generate(agent, prompts, params)]
    replies = [""] * len(prompts)
    for group in length_buckets([len(ids) for ids in agent.encode(prompts)], max_padding):
        for i, g in zip(group, backend.generate(agent, [prompts[i] for i in group], params)):
            replies[i] = g[0].text
    return replies


def length_buckets(lengths: list[int], max_padding: float) -> list[list[int]]:
    """Indices of `lengths` in groups, shortest first, such that padding a group to its longest member
    adds at most `max_padding` times the group's own tokens."""
    groups: list[list[int]] = []
    total = 0
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if groups and (len(groups[-1]) + 1) * lengths[i] <= (1 + max_padding) * (total + lengths[i]):
            groups[-1].append(i)
            total += lengths[i]
        else:
            groups.append([i])
            total = lengths[i]
    return groups


def score(env: Environment, task: Task, text: str) -> dict[str, float]:
    try:
        return env.score(task, text)
    except Exception:  # a scorer must not end an evaluation; count it as a format error
        return {"accuracy": 0.0, "format_error": 1.0}


def eval_metrics(rows: list[Row], prefix: str) -> dict[str, tuple[float, int]]:
    """Accuracy, format-error rate and per-group accuracy of evaluated rows: name -> (mean, rows it is over)."""
    n = len(rows)
    out = {f"{prefix}/accuracy": (sum(r["accuracy"] for r in rows) / n, n),
           f"{prefix}/format_error_rate": (sum(r.get("format_error", 0.0) for r in rows) / n, n)}
    if all("sampled_accuracy" in r for r in rows):
        out[f"{prefix}/sampled_accuracy"] = (sum(r["sampled_accuracy"] for r in rows) / n, n)
    groups = defaultdict(list)
    for r in rows:
        groups[r["group"]].append(r["accuracy"])
    out.update({f"{prefix}/accuracy_{g}": (sum(accs) / len(accs), len(accs)) for g, accs in groups.items()})
    return out


def start_line(metrics: dict[str, float]) -> str:
    """The one line that reports the starting agent's validation."""
    return (f"[genenv] starting agent: val/accuracy {metrics['val/accuracy']:.3f} " +
            " ".join(f"{k.removeprefix('val/accuracy_')} {v:.2f}" for k, v in sorted(metrics.items())
                     if k.startswith("val/accuracy_")))


def test_table(env: Environment, rows: list[Row], s: EvalSettings, play: Callable | None = None) -> dict[str, Any]:
    """The test report: each metric's mean per group and overall, the environment's corpus metrics and, with
    `play` (the agent as a player, see `act`), `episodes` interactive episodes."""
    table = summarize(rows)
    table["corpus"] = env.aggregate([{k: v for k, v in r.items() if k not in _NOT_SCORES} for r in rows])
    if play is not None and s.episodes:
        table["episodes"] = env.play(play, None if s.episodes < 0 else s.episodes, batch_size=s.batch_size)
    return table


def summarize(rows: list[Row]) -> dict[str, Any]:
    metric_keys = sorted({k for r in rows for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    groups: dict[str, list] = defaultdict(list)
    for r in rows:
        groups[r["group"]].append(r)
    groups["overall"] = rows

    def stats(rs):
        out = {"n": len(rs)}
        for k in metric_keys:
            vals = [r[k] for r in rs if k in r and not (isinstance(r[k], float) and math.isnan(r[k]))]
            out[k] = sum(vals) / len(vals) if vals else float("nan")
        return out

    return {"metrics": metric_keys, "groups": {g: stats(rs) for g, rs in sorted(groups.items())}}


def table_scalars(table: dict[str, Any]) -> dict[str, float]:
    """The report's corpus and episode metrics as `eval/corpus/*` and `eval/episodes/*`."""
    return {f"eval/{section}/{k}": float(v) for section in ("corpus", "episodes") for k, v in table.get(section, {}).items()}


def format_table(table: dict[str, Any]) -> str:
    lines = [f"{'group':<32} {'n':>6} " + " ".join(f"{k:>14}" for k in table["metrics"])]
    for g, stats in table["groups"].items():
        lines.append(f"{g:<32} {stats['n']:>6} " + " ".join(f"{stats[k]:>14.4f}" for k in table["metrics"]))
    for section in ("corpus", "episodes"):
        lines += [f"{section}/{k:<40} {v:.4f}" for k, v in table.get(section, {}).items()]
    return "\n".join(lines)


def write_results(out_dir: str, env_name: str, table: dict[str, Any], rows: list[Row]) -> str:
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "test_results.json")
    with open(path, "w") as f:
        json.dump({"env": env_name, **table, "rows": rows}, f, indent=1)
    return path
