"""Did GRPO's reward favour calls with more or fewer parameters? Read from a fit's checkpoint: its
D_train pool keeps every trained task with its G rollouts and their rewards.

    python bench/bfcl_pool_drift.py bench/out/real_llm_bfcl/ckpt/genenv_s1/last.ckpt

For each group with unequal rewards (the others have no advantage), the covariance of reward and
the number of parameters the rollout's call sets: positive means the group's advantage pushed
towards more parameters. Printed per epoch (sum, groups favouring fewer, groups favouring more)
and in all. Rollouts without a parseable call make their group skipped.

It also counts the arguments whose generated gold lets a call leave them out while the seed's gold
requires them (a gold that would reward dropping a parameter; `_answer_from_call` should allow none),
reading the seeds from the BFCL data under $GENENV_DATA_ROOT.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict

import torch

from bfcl_output_diff import first_call


def group_covariance(rewards: list[float], n_params: list[int]) -> float:
    """Sum over the group of (reward - mean reward) * (parameters - mean parameters)."""
    mr, mn = sum(rewards) / len(rewards), sum(n_params) / len(n_params)
    return sum((r - mr) * (k - mn) for r, k in zip(rewards, n_params))


def drift(pool: list[dict]) -> dict[int, dict]:
    by_epoch: dict[int, dict] = defaultdict(lambda: {"covariance": 0.0, "groups": 0, "fewer": 0, "more": 0})
    for entry in pool:
        calls = [first_call(r) for r in entry["rollouts"]]
        rewards = entry["rewards"]
        if None in calls or max(rewards) == min(rewards):
            continue
        c = group_covariance(rewards, [len(call.get("parameters") or {}) for call in calls])
        e = by_epoch[entry["epoch"]]
        e["covariance"] += c
        e["groups"] += 1
        e["fewer"] += c < 0
        e["more"] += c > 0
    return dict(sorted(by_epoch.items()))


def optional_where_seed_requires(pool: list[dict], seed_answers: dict[str, dict]) -> int:
    """Arguments of the pool's gold that accept "" (left out) where the seed's gold for the same
    function does not. `seed_answers`: seed task id -> function name -> argument -> options."""
    n = 0
    for entry in pool:
        seed = seed_answers.get(entry["task"]["meta"]["seed_id"], {})
        for gold in entry["task"]["data"]["gold"]:
            (name, options), = gold.items()
            n += sum("" in opts and "" not in seed[name].get(arg, [""])
                     for arg, opts in options.items()) if name in seed else 0
    return n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ckpt")
    args = p.parse_args()
    pool = torch.load(args.ckpt, map_location="cpu", weights_only=False)["GenEnvDataModule"]["pools"]["train"]
    per_epoch = drift(pool)
    total = {k: sum(e[k] for e in per_epoch.values()) for k in ("covariance", "groups", "fewer", "more")}
    from genenv_pl.envs.bfcl import BFCLEnv

    cats = sorted({e["task"]["data"]["category"] for e in pool})
    seeds = {t.id: BFCLEnv._seed_answers(t.data) for t in BFCLEnv(categories=cats, simulator_writes="request").seed_tasks()}
    print(json.dumps({"per_epoch": per_epoch, "all": total,
                      "optional_where_seed_requires": optional_where_seed_requires(pool, seeds)}, indent=1))


if __name__ == "__main__":
    main()
