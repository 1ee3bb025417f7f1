"""Are the simulator's gold calls right? Lists generated BFCL tasks from a fit's checkpoint for a
person to judge: each task's new request and its gold call next to the seed's request and gold.

    python bench/bfcl_gold_audit.py CKPT [--n 40] [--seed 0] > audit.md

The environment's checks (function exists, required parameters, types, enums, every gold value
stated in the request, no copy of a seed) make a gold *well-formed*; they cannot tell whether it
is the call the request asks for (a swapped argument, a unit the request did not ask for, a value
taken from the seed instead of the new request). GRPO rewards the agent for matching the gold, so
a wrong gold teaches a wrong call; this shows how often that happens. Reads the checkpoint's
D_train pool (every task trained, with its G rewards) and the seeds under $GENENV_DATA_ROOT.
"""
from __future__ import annotations

import argparse
import json
import random

import torch

from genenv_pl.envs.bfcl import BFCLEnv


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ckpt")
    p.add_argument("--n", type=int, default=40, help="generated tasks to list (a random sample)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    pool = torch.load(args.ckpt, map_location="cpu", weights_only=False)["GenEnvDataModule"]["pools"]["train"]
    generated = [e for e in pool if (e["task"].get("meta") or {}).get("generated")]
    cats = sorted({e["task"]["data"]["category"] for e in generated})
    seeds = {t.id: t for t in BFCLEnv(categories=cats, simulator_writes="request").seed_tasks()}
    sample = random.Random(args.seed).sample(generated, k=min(args.n, len(generated)))
    print(f"{len(generated)} generated tasks in the pool; {len(sample)} listed (random.Random({args.seed}))\n")
    for i, e in enumerate(sample, 1):
        d, seed = e["task"]["data"], seeds[e["task"]["meta"]["seed_id"]]
        rewards = e["rewards"]  # empty for `static`, whose pool keeps its task set as generated, before any rollout
        success = f"agent success {sum(rewards) / len(rewards):.2f}" if rewards else "not rolled out in this entry"
        print(f"## {i}. {e['task']['id']} (epoch {e['epoch']}, {success})")
        print(f"- seed request: {seed.data['messages'][-1]['content']}")
        print(f"- seed gold: `{json.dumps(seed.data['gold'], ensure_ascii=False)}`")
        print(f"- new request: {d['messages'][-1]['content']}")
        print(f"- new gold: `{json.dumps(d['gold'], ensure_ascii=False)}`")
        print("- verdict: \n")


if __name__ == "__main__":
    main()
