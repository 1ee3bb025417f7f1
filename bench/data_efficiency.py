"""Data-efficiency study on the embedded arithmetic environment: GenEnv against its ablations.

Each variant (`data.coevo.variant`, plus an optional alpha sweep) trains from the same warm-started
agent with the quickstart recipe, at an equal agent-update budget (same epochs, same tasks per epoch),
for several seeds. Held-out accuracy is read from TensorBoard against the number of agent training
tasks consumed (`agent/tasks_seen`, G rollouts each); the table gives how many tasks each variant
needs to reach a fixed held-out accuracy, as a ratio to GenEnv. The calibration figure is the paper's:
success on generated tasks per epoch with the alpha zone shaded, and generated-task difficulty.

    pip install -e ".[bench]"
    python bench/data_efficiency.py                       # 3 variants x 3 seeds x 300 epochs
    python bench/data_efficiency.py --variants genenv static --seeds 0 --epochs 100   # quicker look
    python bench/data_efficiency.py --alphas 0.3 0.5 0.7   # adds an alpha sweep of GenEnv

Writes bench/results/data_efficiency.md, data_efficiency.png and calibration.png; runs go to
bench/out/data_efficiency/ (one TensorBoard folder per variant and seed; existing runs are reused).
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def run_name(variant: str, seed: int, alpha: float | None) -> str:
    return f"{variant}{'' if alpha is None else f'_alpha{alpha:g}'}_s{seed}"


def train(out: Path, variant: str, seed: int, alpha: float | None, args) -> Path:
    """One fit in a subprocess (a clean process per run: no state leaks between variants)."""
    name = run_name(variant, seed, alpha)
    log_dir = out / "runs" / name
    if glob.glob(str(log_dir / "version_*" / "events.out.tfevents.*")) and not args.rerun:
        return log_dir
    override = {
        "seed_everything": seed,
        "trainer": {
            "max_epochs": args.epochs,
            "check_val_every_n_epoch": args.val_every,
            "enable_checkpointing": False,
            "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                       "init_args": {"save_dir": str(out / "runs"), "name": name}},
            "callbacks": [{"class_path": "callbacks.AlphaCurriculumCallback",
                           "init_args": {"alpha": 0.5 if alpha is None else alpha, "beta": 2.0, "filtering_k": 0.1,
                                         "print_every_n_epochs": 50}}],
        },
        "data": {"seed": seed, "coevo": {"variant": variant}},
    }
    cfg = out / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(override))
    t0 = time.time()
    with open(out / f"{name}.log", "w") as log:
        rc = subprocess.call([sys.executable, "main.py", "fit", "--config", "configs/quickstart.yaml", "--config", str(cfg)],
                             cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    if rc:
        raise SystemExit(f"{name} failed (exit {rc}); see {out / f'{name}.log'}")
    print(f"  {name}: {time.time() - t0:.0f} s", flush=True)
    return log_dir


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = max(glob.glob(str(log_dir / "version_*")), key=os.path.getmtime)
    acc = EventAccumulator(run, size_guidance={"scalars": 0})
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def accuracy_curve(s: dict) -> list[tuple[float, float]]:
    """(agent training tasks consumed, held-out accuracy); the starting agent sits at 0 tasks."""
    seen = s["agent/tasks_seen"]
    curve = []
    for step, acc in s["val/accuracy"]:
        before = [v for st, v in seen if st <= step]
        curve.append((before[-1] if before and step > 0 else 0.0, acc))
    return curve


def tasks_to_reach(curve: list[tuple[float, float]], target: float) -> float | None:
    return next((x for x, acc in curve if acc >= target), None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", nargs="+", default=["genenv", "genenv-random", "static"])
    p.add_argument("--alphas", nargs="*", type=float, default=[], help="GenEnv runs at these alphas (alpha sweep)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--epochs", type=int, default=300)
    p.add_argument("--val-every", type=int, default=25)
    p.add_argument("--target", type=float, default=None,
                   help="held-out accuracy to reach (default: starting accuracy + 0.05)")
    p.add_argument("--out", default=str(REPO / "bench" / "out" / "data_efficiency"))
    p.add_argument("--results", default=str(REPO / "bench" / "results"))
    p.add_argument("--rerun", action="store_true", help="train again even if a run's logs exist")
    args = p.parse_args()
    out, results = Path(args.out), Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    results.mkdir(parents=True, exist_ok=True)

    arms = [(v, None) for v in args.variants] + [("genenv", a) for a in args.alphas]
    data: dict[str, list[dict]] = {}
    t0 = time.time()
    for variant, alpha in arms:
        label = variant if alpha is None else f"genenv alpha={alpha:g}"
        for seed in args.seeds:
            s = scalars(train(out, variant, seed, alpha, args))
            data.setdefault(label, []).append(s)
    print(f"trained/loaded {sum(map(len, data.values()))} runs in {time.time() - t0:.0f} s")

    start = statistics.mean(s["val/accuracy"][0][1] for runs in data.values() for s in runs)
    target = args.target if args.target is not None else round(start + 0.05, 3)
    table = summarize(data, target, args)
    (results / "data_efficiency.md").write_text(table)
    print(table)
    plot_curves(data, target, results / "data_efficiency.png")
    plot_calibration(data, results / "calibration.png")
    print(f"wrote {results / 'data_efficiency.md'}, data_efficiency.png, calibration.png")


def _fmt_spread(xs: list[float]) -> str:
    return f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs):.3f}" if len(xs) > 1 else f"{xs[0]:.3f}"


def summarize(data: dict[str, list[dict]], target: float, args) -> str:
    needs: dict[str, list[float | None]] = {}
    rows = []
    for label, runs in data.items():
        curves = [accuracy_curve(s) for s in runs]
        needs[label] = [tasks_to_reach(c, target) for c in curves]
        final = [c[-1][1] for c in curves]
        best = [max(a for _, a in c) for c in curves]
        succ = [statistics.mean(v for _, v in s["coevo/success_rate"][-max(1, len(s["coevo/success_rate"]) // 5):]
                                if v == v) for s in runs]
        rows.append((label, final, best, succ, needs[label], runs[0]["agent/tasks_seen"][-1][1]))
    ref = needs.get("genenv")
    ref_mean = statistics.mean(x for x in ref if x is not None) if ref and all(x is not None for x in ref) else None
    lines = [
        f"Held-out accuracy target {target:.3f} (starting agent + 0.05); {len(args.seeds)} seeds "
        f"({', '.join(map(str, args.seeds))}), {args.epochs} epochs, validation every {args.val_every} epochs "
        "(so tasks-to-target is resolved to that grid). Mean ± sd over seeds.",
        "",
        "| variant | final val acc | best val acc | success on generated tasks (last fifth) | "
        "tasks to target, per seed | mean | ratio to GenEnv |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, final, best, succ, need, budget in rows:
        reached = [x for x in need if x is not None]
        per_seed = ", ".join("—" if x is None else f"{x:.0f}" for x in need)
        if len(reached) == len(need):
            mean = statistics.mean(reached)
            mean_s = f"{mean:.0f}"
            ratio = f"{mean / ref_mean:.2f}x" if ref_mean else "n/a"
        else:
            mean_s = f"> {budget:.0f} in {len(need) - len(reached)} of {len(need)} seeds"
            ratio = "n/a"
        lines.append(f"| {label} | {_fmt_spread(final)} | {_fmt_spread(best)} | {_fmt_spread(succ)} | {per_seed} | "
                     f"{mean_s} | {ratio} |")
    lines += ["", "— : target not reached within the budget. Tasks are agent training tasks rolled out "
              "(fresh or fixed-set variations, base seeds and replay), G rollouts each."]
    return "\n".join(lines) + "\n"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(data: dict[str, list[dict]], target: float, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, runs in data.items():
        curves = [accuracy_curve(s) for s in runs]
        n = min(len(c) for c in curves)
        xs = [statistics.mean(c[i][0] for c in curves) for i in range(n)]
        ys = [[c[i][1] for c in curves] for i in range(n)]
        ax.plot(xs, [statistics.mean(y) for y in ys], marker="o", ms=3, label=label)
        ax.fill_between(xs, [min(y) for y in ys], [max(y) for y in ys], alpha=0.15)
    ax.axhline(target, color="grey", ls="--", lw=1, label=f"target {target:.3f}")
    ax.set_xlabel("agent training tasks consumed")
    ax.set_ylabel("held-out accuracy (600 tasks, levels 1-6)")
    ax.set_title("Data efficiency on the embedded arithmetic environment")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_calibration(data: dict[str, list[dict]], path: Path, alpha: float = 0.5, k: float = 0.1) -> None:
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, runs in data.items():
        if "alpha=" in label:
            continue
        for tag, ax in (("coevo/success_rate", a1), ("coevo/difficulty", a2)):
            series = [[v for _, v in s[tag]] for s in runs if tag in s]
            n = min(map(len, series))
            mean = [statistics.mean(x[i] for x in series if x[i] == x[i]) if any(x[i] == x[i] for x in series)
                    else float("nan") for i in range(n)]
            ax.plot(range(n), _smooth(mean, 10), label=label, lw=1.2)
    a1.axhspan(alpha - k, alpha + k, color="green", alpha=0.12, label=f"alpha zone {alpha} ± {k}")
    a1.set_xlabel("epoch")
    a1.set_ylabel("success rate on generated tasks")
    a1.set_ylim(0, 1)
    a1.legend(fontsize=8)
    a2.set_xlabel("epoch")
    a2.set_ylabel("generated-task difficulty (digits)")
    a2.legend(fontsize=8)
    fig.suptitle("Calibration: success on generated tasks and their difficulty (10-epoch moving mean)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _smooth(xs: list[float], w: int) -> list[float]:
    out = []
    for i in range(len(xs)):
        window = [x for x in xs[max(0, i - w + 1): i + 1] if x == x]
        out.append(sum(window) / len(window) if window else float("nan"))
    return out


if __name__ == "__main__":
    main()
