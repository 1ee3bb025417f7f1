"""Issue 62's pilot (docs/results/protocol.md, section 7): an agent update that does not lose greedy validation
accuracy, chosen on the validation split before any simulator is compared.

Agent-only GRPO on BFCL's seed tasks (`genenv-random` with no simulator seeds, `bench/recipes/bfcl_protocol_pilot.yaml`),
SmolLM2-135M from the BFCL study's committed warm start, 256 agent tasks, one cell per (agent lr, tasks per step N):

    python bench/protocol_pilot.py                          # every cell of the grid not yet kept, then the report
    python bench/protocol_pilot.py --cells lr1e-4_n16       # one cell
    python bench/protocol_pilot.py --confirm lr1e-4_n16     # the chosen cell again at the confirmation seed
    python bench/protocol_pilot.py --report-only
    OMP_NUM_THREADS=1 python bench/protocol_pilot.py --jobs 2   # two cells at a time, one thread each

Validation (76 items, disjoint from the 163 test items and from the seeds; `data.env_args.val_fraction`) scores
the warm start and every 64 tasks, greedy and 4 answers sampled at the rollout temperature. No test item is
scored here. Resumable as bench/real_llm.py's fits: a finished cell keeps its scalars in
`bench/results/protocol_pilot/<cell>/`, an unfinished one resumes from its last epoch checkpoint under --out.
Writes `bench/results/real_llm_protocol_pilot.{json,md}`: per cell the validation curve, steps, the share of
all-equal groups, the KL (per token and per reply), and the protocol's acceptance and choice.
"""
from __future__ import annotations

import argparse
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

import real_llm  # bench/ is on sys.path for this script

REPO = real_llm.REPO
LRS = (3e-5, 1e-4, 3e-4)
NS = (16, 32)
BUDGET = 256
EVAL_EVERY = 64  # agent tasks between validations
SEED, CONFIRM_SEED = 1000, 1001
VAL_ITEMS = 76
RECIPE = "bench/recipes/bfcl_protocol_pilot.yaml"
TAGS = ("val/", "agent/tasks_seen", "agent/zero_std_frac", "agent/kl", "agent/updates", "agent/train_reward")

STUDY = real_llm.Study(
    name="protocol_pilot", configs=["configs/bfcl.yaml", "configs/cpu/bfcl.yaml"], held_out=VAL_ITEMS,
    title="", description="", metric_label="", plot_title="", cache_glob="*-bfcl-*",
    store="real_llm_bfcl_warm_start", kept_tags=TAGS)


def cell_name(lr: float, n: int) -> str:
    return f"lr{lr:.0e}_n{n}".replace("e-0", "e-")


CELLS = {cell_name(lr, n): (lr, n) for lr in LRS for n in NS}


def write_split_manifest() -> None:
    """The protocol's split (section 3) as id lists with their sha1, written once before the first fit."""
    import hashlib

    path = REPO / "bench" / "results" / "real_llm_protocol_split.json"
    if path.exists():
        return
    from genenv_pl.envs.bfcl import BFCLEnv

    recipe = yaml.safe_load((REPO / RECIPE).read_text())["data"]["env_args"]
    env = BFCLEnv(**recipe)
    splits = {"seed": env.seed_tasks(), "validation": env.val_tasks(), "test": env.eval_tasks()}
    manifest = {"env_args": recipe, **{name: sorted(t.id for t in tasks) for name, tasks in splits.items()}}
    manifest["sha1"] = hashlib.sha1(json.dumps({k: manifest[k] for k in splits}, sort_keys=True).encode()).hexdigest()
    path.write_text(json.dumps(manifest, indent=1) + "\n")


def run_cell(name: str, seed: int, out_root: Path, results: Path) -> None:
    lr, n = CELLS[name]
    out = out_root / name
    out.mkdir(parents=True, exist_ok=True)
    cell_yaml = out / "cell.yaml"
    # Amendment 2: the warm start's validation (V0) is the same in every cell at one seed (greedy, and sampled from
    # generators seeded by the data seed and the batch), so only the first cell of a seed scores it; sampled
    # answers only at 128 and 256 tasks, the points the rule reads.
    first = seed != SEED or name == next(iter(CELLS))
    cell_yaml.write_text(yaml.safe_dump({
        "model": {"agent_optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": lr}}}
                 | ({} if first else {"eval_at_start": False}),
        "data": {"coevo": {"base_tasks_per_epoch": n, "agent_batch_size": n}
                 | ({} if name == next(iter(CELLS)) and seed == SEED else {"eval_samples_every": 128 // EVAL_EVERY})}}))
    args = argparse.Namespace(override=[RECIPE, str(cell_yaml.relative_to(REPO))], results=str(results / name),
                              epochs=BUDGET // n, task_budget=BUDGET, val_every=EVAL_EVERY // n)
    real_llm.fit(STUDY, out, "genenv-random", seed, args)


def curve(scalars: dict) -> list[dict]:
    """Each validation as {tasks, greedy, sampled}: the validation at a step against the agent tasks rolled
    out by then (0: the warm start, logged at step 0)."""
    seen = dict(scalars.get("agent/tasks_seen", []))
    sampled = dict(scalars.get("val/sampled_accuracy", []))
    return [{"tasks": int(seen.get(step, 0)) if step else 0, "greedy": acc, "sampled": sampled.get(step)}
            for step, acc in scalars.get("val/accuracy", [])]


def with_start(cells: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """Amendment 2: one cell per seed scores the warm start (V0, the same in every cell); the others begin with
    its point."""
    start = next((c[0] for c in cells.values() if c and c[0]["tasks"] == 0), None)
    return {name: points if start is None or points and points[0]["tasks"] == 0 else [start, *points]
            for name, points in cells.items()}


def judge(cells: dict[str, list[dict]]) -> dict:
    """The protocol's rule (section 7): (cell, b) for b in (128, 256) is accepted when greedy validation at b
    is at least the warm start's V0 and no validation up to b is below V0 - 2/76; the choice is the largest
    sampled gain over the warm start, gains within 0.01 of it tied, ties to the smaller b, then the smaller lr,
    then the larger N."""
    rows = []
    for name, points in cells.items():
        by = {p["tasks"]: p for p in points}
        if 0 not in by:
            continue
        v0, s0 = by[0]["greedy"], by[0]["sampled"]
        for b in (128, 256):
            if b not in by:
                continue
            upto = [p for p in points if p["tasks"] <= b]
            ok = by[b]["greedy"] >= v0 and min(p["greedy"] for p in upto) >= v0 - 2 / VAL_ITEMS
            gain = by[b]["sampled"] - s0 if by[b]["sampled"] is not None and s0 is not None else None
            rows.append({"cell": name, "b": b, "accepted": ok, "greedy": by[b]["greedy"], "v0": v0,
                         "sampled_gain": gain})
    accepted = [r for r in rows if r["accepted"] and r["sampled_gain"] is not None]
    choice = None
    if accepted:
        best = max(r["sampled_gain"] for r in accepted)
        tied = [r for r in accepted if r["sampled_gain"] >= best - 0.01]
        choice = min(tied, key=lambda r: (r["b"], CELLS[r["cell"]][0], -CELLS[r["cell"]][1]))
    return {"rows": rows, "choice": choice}


def report(results: Path) -> None:
    cells, runs = {}, {}
    for name in CELLS:
        path = results / name / f"{STUDY.name}_runs" / f"genenv-random_s{SEED}.json"
        if path.exists():
            runs[name] = json.loads(path.read_text())
            cells[name] = curve(runs[name]["scalars"])
    cells = with_start(cells)
    verdict = judge(cells)
    out = {"protocol": "docs/results/protocol.md, section 7", "seed": SEED, "budget": BUDGET, "val_items": VAL_ITEMS,
           "cells": {name: {"lr": CELLS[name][0], "n": CELLS[name][1], "curve": cells[name],
                            "wall_s": runs[name]["wall_s"],
                            "zero_std_frac": _mean(runs[name]["scalars"].get("agent/zero_std_frac", [])),
                            "kl_token": _last(runs[name]["scalars"].get("agent/kl", [])),
                            "kl_reply": _last(runs[name]["scalars"].get("agent/kl_seq", []))} for name in cells},
           "left_to_run": [name for name in CELLS if name not in cells], **verdict}
    (REPO / "bench" / "results" / "real_llm_protocol_pilot.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = ["# Issue 62 pilot: a stable agent update, chosen on validation", "",
             f"Agent-only GRPO on BFCL seed tasks, SmolLM2-135M from the committed warm start, {BUDGET} agent tasks, "
             f"seed {SEED}; greedy and sampled (4) accuracy on the {VAL_ITEMS} validation items "
             "(docs/results/protocol.md, section 7). `python bench/protocol_pilot.py`.", "",
             "| cell | lr | N | validation greedy (tasks: acc) | sampled | all-equal groups | KL/token | KL/reply | wall |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, c in out["cells"].items():
        greedy = ", ".join(f"{p['tasks']}: {p['greedy']:.3f}" for p in c["curve"])
        sampled = ", ".join(f"{p['tasks']}: {p['sampled']:.3f}" for p in c["curve"] if p["sampled"] is not None)
        lines.append(f"| {name} | {c['lr']:g} | {c['n']} | {greedy} | {sampled} | {_fmt(c['zero_std_frac'])} | "
                     f"{_fmt(c['kl_token'], 4)} | {_fmt(c['kl_reply'], 4)} | {c['wall_s'] / 60:.0f} min |")
    lines += ["", "Acceptance (greedy at b >= V0, none below V0 - 2/76 up to b):", ""]
    lines += [f"- {r['cell']} at {r['b']}: {'accepted' if r['accepted'] else 'not accepted'} (greedy {r['greedy']:.3f}, "
              f"V0 {r['v0']:.3f}, sampled gain {_fmt(r['sampled_gain'], 3, True)})" for r in verdict["rows"]]
    choice = verdict["choice"]
    lines += ["", f"Choice: {choice['cell']} at {choice['b']} tasks." if choice else "No choice yet.",
              f"Left to run: {', '.join(out['left_to_run']) or 'none'}."]
    (REPO / "bench" / "results" / "real_llm_protocol_pilot.md").write_text("\n".join(lines) + "\n")


def _mean(points) -> float | None:
    return sum(v for _, v in points) / len(points) if points else None


def _last(points) -> float | None:
    return points[-1][1] if points else None


def _fmt(x, digits: int = 2, sign: bool = False) -> str:
    return "n/a" if x is None else f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", nargs="+", default=list(CELLS), choices=list(CELLS))
    p.add_argument("--confirm", choices=list(CELLS), help="run this cell again at the confirmation seed")
    p.add_argument("--out", default="bench/out/protocol_pilot")
    p.add_argument("--results", default="bench/results/protocol_pilot")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--jobs", type=int, default=1,
                   help="cells at a time (each fit on the threads OMP_NUM_THREADS gives it: 1 each on 2 cores, "
                        "as amendment 1 runs them)")
    args = p.parse_args()
    out, results = REPO / args.out, REPO / args.results
    if not args.report_only:
        write_split_manifest()
        real_llm.sync_warm_starts(STUDY, REPO / "bench" / "results" / STUDY.store)  # once, before the fits share it
        names = [args.confirm] if args.confirm else args.cells

        lock = threading.Lock()

        def one(name: str) -> None:
            run_cell(name, CONFIRM_SEED if args.confirm else SEED, out, results)
            with lock:  # (one writer of the report files at a time)
                report(results)

        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            list(pool.map(one, names))
    report(results)


if __name__ == "__main__":
    main()
