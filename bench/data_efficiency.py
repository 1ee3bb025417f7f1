"""Data-efficiency study on the embedded arithmetic environment: GenEnv against its ablations.

Every arm trains from the same warm-started agent and simulator with the quickstart recipe
(`configs/quickstart.yaml`), at an equal budget of agent training tasks (same epochs, same tasks per
epoch), over several seeds; an arm differs from `genenv` only in the keys it names below. Held-out
accuracy is read from TensorBoard against the agent training tasks consumed (`agent/tasks_seen`).

    pip install -e ".[bench]"
    python bench/data_efficiency.py                                     # the 6 main arms x 5 seeds
    python bench/data_efficiency.py --arms genenv-partial genenv-random-partial --seeds 0 1 2 --name levers  # levers
    python bench/data_efficiency.py --jobs 2                            # two runs at a time (1 thread each)
    python bench/data_efficiency.py --report-only                       # tables from the finished runs only
    python bench/data_efficiency.py --arms genenv offline-augment-1x offline-augment-1.8x offline-augment-3.3x static-paper \
        --seeds 0 1 2 --out bench/out/offline_augment --name offline_augment --into data_efficiency  # offline data

The offline-augment-Nx arms get N x the tasks GenEnv's simulator writes over the study (epochs x seeds_per_epoch
x K, `genenv_data`), written once before training, and train N x as long (the same passes over their data as
GenEnv over its own; `offline_overrides`): their curves run past GenEnv's budget, and read at it where they cross it.

Resumable across sittings: a finished run's scalars are kept as `bench/results/<out folder>_runs/<run>.json`
(committed with the results; the TensorBoard logs in `<out>` are not) and the run is never trained
again; an unfinished run is started again from scratch. Writes bench/results/data_efficiency.{md,json}, data_efficiency.png (held-out
accuracy against tasks), calibration.png (success on generated tasks, the paper's figure) and
conditioning.png (difficulty change against the success bucket shown to the simulator).
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]

# Arm -> the overrides that make it differ from the quickstart recipe (dotted keys).
ARMS: dict[str, dict] = {
    "genenv": {},
    "genenv-random": {"data.coevo.variant": "genenv-random"},
    "static": {"data.coevo.variant": "static"},
    "no-band": {"data.coevo.variant": "no-band"},
    # reference: the simulator's warm start teaches the curriculum rule itself. The quickstart's prompt is
    # data.env_args.sim_prompt "stats" (a success bucket, no instruction; arithmetic takes no "rule" prompt,
    # which a from-scratch simulator could not read), so these arms are its rule-against-stats comparison.
    "genenv-rule-warmstart": {"data.env_args.sim_warm_start": "curriculum"},
    "genenv-random-rule-warmstart": {"data.env_args.sim_warm_start": "curriculum", "data.coevo.variant": "genenv-random"},
    # levers
    "genenv-task": {"data.coevo.difficulty_unit": "task"},
    "genenv-random-task": {"data.coevo.difficulty_unit": "task", "data.coevo.variant": "genenv-random"},
    "genenv-batch": {"data.coevo.difficulty_unit": "seed_batch"},
    "genenv-partial": {"data.env_args.reward": "partial"},
    "genenv-random-partial": {"data.env_args.reward": "partial", "data.coevo.variant": "genenv-random"},
    "genenv-task-k0.25": {"data.coevo.difficulty_unit": "task", "callback.filtering_k": 0.25},
    "genenv-G8": {"data.coevo.group_size": 8},
    "genenv-random-G8": {"data.coevo.group_size": 8, "data.coevo.variant": "genenv-random"},
    "genenv-beta20": {"callback.beta": 20.0},
    "genenv-alpha0.3": {"callback.alpha": 0.3},  # the alpha sweep; its alpha gap is measured against its own alpha
    "genenv-alpha0.7": {"callback.alpha": 0.7},
    "genenv-k0.2": {"callback.filtering_k": 0.2},
    "genenv-simlr1e-3": {"model.simulator_optimizer.init_args.lr": 1.0e-3},
    "genenv-simkl0.01": {"model.rwr.kl_coef": 0.01},
    "genenv-ema0": {"data.coevo.success_ema": 0.0},  # the simulator sees the seed's latest p_hat, not an average
    # offline data (`offline_overrides`): the paper's GenEnv-Static (5 variations of every base task by the initial
    # simulator), and offline augmentation at N x GenEnv's generated data, written once by the initial simulator
    "static-paper": {"data.coevo.variant": "static-paper", "study.genenv_tasks_per_epoch": True},
    "offline-augment-1x": {"data.coevo.variant": "offline-augment", "study.genenv_data_x": 1.0},
    "offline-augment-1.8x": {"data.coevo.variant": "offline-augment", "study.genenv_data_x": 1.8},
    "offline-augment-3.3x": {"data.coevo.variant": "offline-augment", "study.genenv_data_x": 3.3},
}
MAIN_ARMS = ["genenv", "genenv-random", "static", "no-band", "genenv-rule-warmstart", "genenv-task"]


def _set(d: dict, dotted: str, value) -> None:
    *path, last = dotted.split(".")
    for k in path:
        d = d.setdefault(k, {})
    d[last] = value


def genenv_data(epochs: int) -> dict[str, int]:
    """What the study's `genenv` arm (the quickstart's data.coevo) trains on over `epochs` epochs, in task slots:
    `generated`, the simulator-written tasks its agent rolls out (epochs x seeds_per_epoch x K, each a fresh task
    seen once); `tasks_per_epoch`, its agent training tasks an epoch (those K per seed, base and replayed tasks);
    `tasks`, all of them over the run. Upper bounds: invalid and duplicate generations leave slots empty (a finished
    genenv run's `coevo/valid_tasks` per epoch counts the filled ones)."""
    coevo = yaml.safe_load((REPO / "configs" / "quickstart.yaml").read_text())["data"]["coevo"]
    fresh = coevo["seeds_per_epoch"] * coevo["num_generations_per_prompt"]
    per_epoch = fresh + coevo.get("base_tasks_per_epoch", 0) + coevo.get("replay_tasks_per_epoch", 0)
    return {"generated": epochs * fresh, "tasks_per_epoch": per_epoch, "tasks": epochs * per_epoch}


def offline_overrides(arm: str, epochs: int) -> tuple[dict, int]:
    """The `study.*` keys of an offline arm as config overrides, and the arm's epochs.

    "Nx GenEnv's data" (`study.genenv_data_x`: N): the augmentation set holds round(N x `generated`) tasks, on top
    of the base tasks, written once before training by the initial simulator. Its agent takes GenEnv's
    `tasks_per_epoch` tasks an epoch, in passes over the set, for ceil(N x epochs) epochs: the same number of
    passes over its data as GenEnv makes over its own, N x GenEnv's agent training tasks (1x: equal data and equal
    compute; validation falls every `--val-every` x `tasks_per_epoch` tasks in every arm, so each curve also reads
    at GenEnv's budget). `study.genenv_tasks_per_epoch`: GenEnv's tasks an epoch from the fixed set, for `epochs`
    epochs (static-paper at GenEnv's budget, as the other arms)."""
    keys, data, out = ARMS[arm], genenv_data(epochs), {}
    if keys.get("study.genenv_tasks_per_epoch") or "study.genenv_data_x" in keys:
        out["data.coevo.offline_tasks_per_epoch"] = data["tasks_per_epoch"]
    if "study.genenv_data_x" in keys:
        n = keys["study.genenv_data_x"]
        out["data.coevo.augment_size"] = round(n * data["generated"])
        epochs = math.ceil(n * epochs - 1e-9)
    return out, epochs


def override(arm: str, seed: int, out: Path, args) -> dict:
    base = yaml.safe_load((REPO / "configs" / "quickstart.yaml").read_text())
    callback = next(c for c in base["trainer"]["callbacks"] if c["class_path"].endswith("AlphaCurriculumCallback"))
    cb_args = {**callback["init_args"], "print_every_n_epochs": 50}
    cfg: dict = {}
    offline, epochs = offline_overrides(arm, args.epochs)
    for key, value in {**ARMS[arm], **offline}.items():
        if key.startswith("study."):
            continue
        if key.startswith("callback."):
            cb_args[key.split(".", 1)[1]] = value
        else:
            _set(cfg, key, value)
    env_args = {**base["data"]["env_args"], **cfg.get("data", {}).get("env_args", {})}
    _set(cfg, "seed_everything", seed)
    _set(cfg, "data.seed", seed)
    _set(cfg, "data.env_args", env_args)
    cfg["trainer"] = {
        "max_epochs": epochs,
        "check_val_every_n_epoch": args.val_every,
        "enable_checkpointing": False,
        "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                   "init_args": {"save_dir": str(out / "runs"), "name": f"{arm}_s{seed}"}},
        "callbacks": [{"class_path": "callbacks.AlphaCurriculumCallback", "init_args": cb_args},
                      {"class_path": "callbacks.SimulatorConditioningCallback", "init_args": {"every_n_epochs": args.probe_every}}],
    }
    return cfg


# The scalars a report needs; a finished run keeps only these (per-bucket tags are added by prefix).
KEPT_TAGS = ["val/accuracy", "agent/tasks_seen", "coevo/success_rate", "coevo/difficulty", "coevo/task_alpha_gap",
             "agent/zero_std_frac", "sim/conditioning_slope", "sim/probe_epoch"]


def kept_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    s = scalars(log_dir)
    return {t: v for t, v in s.items() if t in KEPT_TAGS or t.startswith(("sim/delta_level_bucket", "val/accuracy_level"))}


def run_file(args, arm: str, seed: int) -> Path:
    """Named after the runs folder (not the report): reports over other arm sets share finished runs."""
    return Path(args.results) / f"{Path(args.out).name}_runs" / f"{arm}_s{seed}.json"


def train(out: Path, arm: str, seed: int, args, threads: int) -> None:
    """One fit in a subprocess (a clean process per run: no state leaks between arms); its scalars
    are then kept in the run file, which marks it finished."""
    name = f"{arm}_s{seed}"
    log_dir, kept = out / "runs" / name, run_file(args, arm, seed)
    if kept.exists() and not args.rerun:
        return
    shutil.rmtree(log_dir, ignore_errors=True)  # an unfinished run starts again from scratch
    cfg = out / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(override(arm, seed, out, args)))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    t0 = time.time()
    with open(out / f"{name}.log", "w") as log:
        rc = subprocess.call([sys.executable, "main.py", "fit", "--config", "configs/quickstart.yaml", "--config", str(cfg)],
                             cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    if rc:
        raise SystemExit(f"{name} failed (exit {rc}); see {out / f'{name}.log'}")
    keep(kept, log_dir, arm, seed, args)
    print(f"  {name}: {time.time() - t0:.0f} s", flush=True)


def keep(path: Path, log_dir: Path, arm: str, seed: int, args) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    offline, epochs = offline_overrides(arm, args.epochs)
    record = {"arm": arm, "seed": seed, "overrides": {**ARMS[arm], **offline}, "epochs": epochs,
              "scalars": kept_scalars(log_dir)}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(path)  # atomic: a killed study never leaves half a run file


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
    return next((x for x, acc in curve[1:] if acc >= target), None)


def _values(s: dict, tag: str) -> list[float]:
    return [v for _, v in s.get(tag, []) if v == v]


def run_summary(s: dict, target: float, alpha: float) -> dict:
    curve = accuracy_curve(s)
    succ = [v for _, v in s["coevo/success_rate"]]
    half = [v for v in succ[len(succ) // 2:] if v == v]
    zero = _values(s, "agent/zero_std_frac")
    task_gap = [v for _, v in s.get("coevo/task_alpha_gap", [])][len(succ) // 2:]
    slopes = _values(s, "sim/conditioning_slope")
    return {
        "tasks_to_target": tasks_to_reach(curve, target),
        "final_accuracy": curve[-1][1],
        "best_accuracy": max(a for _, a in curve[1:]) if len(curve) > 1 else curve[0][1],
        "lowest_accuracy": min(a for _, a in curve),
        "start_accuracy": curve[0][1],
        "alpha_gap_second_half": statistics.mean(abs(v - alpha) for v in half) if half else None,
        "task_alpha_gap_second_half": statistics.mean(v for v in task_gap if v == v) if any(v == v for v in task_gap) else None,
        "zero_std_frac_last_fifth": statistics.mean(zero[-max(1, len(zero) // 5):]) if zero else None,
        "conditioning_slope": slopes[-1] if slopes else None,
        "conditioning_slope_start": slopes[0] if slopes else None,
        "difficulty_last_fifth": statistics.mean(_values(s, "coevo/difficulty")[-max(1, len(succ) // 5):])
        if _values(s, "coevo/difficulty") else None,
    }


# two-sided 95% Student t quantiles by degrees of freedom
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def mean_ci(xs: list[float]) -> tuple[float, float] | None:
    """Mean and half-width of a 95% t interval (half-width NaN for one value)."""
    if not xs:
        return None
    m = statistics.mean(xs)
    if len(xs) < 2:
        return m, float("nan")
    df = len(xs) - 1
    t = _T95[max(k for k in _T95 if k <= df)] if df < 30 else 1.96
    return m, t * statistics.stdev(xs) / math.sqrt(len(xs))


def _fmt(xs: list, digits: int = 3) -> str:
    vals = [x for x in xs if x is not None]
    if not vals:
        return "—"
    m, h = mean_ci(vals)
    s = f"{m:.{digits}f}" + ("" if h != h else f" ± {h:.{digits}f}")
    return s + (f" ({len(vals)} of {len(xs)})" if len(vals) < len(xs) else "")


def report(data: dict[str, dict[int, dict]], target: float, args, budget: float) -> tuple[str, dict]:
    js: dict = {"target": target, "budget": budget, "budget_unit": "agent training tasks (mean over runs)",
                "epochs": args.epochs, "val_every": args.val_every,
                "arms": {arm: ARMS[arm] for arm in data}, "variants": {}}
    lines = [
        f"Held-out accuracy target {target:.3f} (starting agent + {args.target_gain:g}); {args.epochs} epochs "
        f"(~{budget:.0f} agent training tasks, G rollouts each), validation every {args.val_every} epochs "
        "(tasks-to-target is resolved to that grid). Mean ± half-width of a 95% t interval over seeds.",
        "",
        "| arm | seeds | tasks to target (mean of reached) | reached | final acc | best acc | lowest acc | "
        "alpha gap, 2nd half | per-task alpha gap | zero-std, last fifth | slope start -> end |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, runs in data.items():
        seeds = sorted(runs)
        rows = [runs[s] for s in seeds]
        col = lambda k: [r[k] for r in rows]  # noqa: E731
        js["variants"][arm] = {"seeds": seeds, **{k: col(k) for k in rows[0]}}
        reached = sum(x is not None for x in col("tasks_to_target"))
        lines.append(
            f"| {arm} | {len(seeds)} | {_fmt(col('tasks_to_target'), 0)} | {reached}/{len(seeds)} | "
            f"{_fmt(col('final_accuracy'))} | {_fmt(col('best_accuracy'))} | {_fmt(col('lowest_accuracy'))} | "
            f"{_fmt(col('alpha_gap_second_half'))} | {_fmt(col('task_alpha_gap_second_half'))} | "
            f"{_fmt(col('zero_std_frac_last_fifth'), 2)} | {_fmt(col('conditioning_slope_start'), 2)} -> "
            f"{_fmt(col('conditioning_slope'), 2)} |")
    lines += ["", "Per seed (tasks to target / final acc / alpha gap, 2nd half):", ""]
    for arm, runs in data.items():
        cells = []
        for s in sorted(runs):
            r = runs[s]
            t = "—" if r["tasks_to_target"] is None else f"{r['tasks_to_target']:.0f}"
            g = "—" if r["alpha_gap_second_half"] is None else f"{r['alpha_gap_second_half']:.3f}"
            cells.append(f"s{s}: {t} / {r['final_accuracy']:.3f} / {g}")
        lines.append(f"- {arm}: " + "; ".join(cells))
    lines += ["", "— : target not reached within the budget (the mean of tasks to target is over the seeds that "
              "reached it). Alpha gap: mean over the second half of the epochs of |success on generated tasks - alpha| "
              "(seed-batch p_hat averaged per epoch); per-task alpha gap: the same with each generated task's own p_hat. "
              "Slope: `sim/conditioning_slope`, difficulty levels per success bucket, before training -> at the end."]
    return "\n".join(lines) + "\n", js


def data_table(data: dict[str, dict[int, dict]], logs: dict, budget: float, args) -> tuple[list[str], dict]:
    """GenEnv against offline data, in the paper's terms (Figs. 1b and 6): simulator-written tasks used to reach
    the target, and held-out accuracy at GenEnv's budget of agent training tasks (the Nx arms train N x as long)."""
    gen = genenv_data(args.epochs)
    fresh_share = gen["generated"] / gen["tasks"]  # GenEnv's agent tasks that are freshly generated
    arms = [a for a in data if a == "genenv" or "study.genenv_data_x" in ARMS[a]]
    js: dict = {}
    lines = ["", f"Data against accuracy (GenEnv writes at most {gen['generated']:,} tasks over {args.epochs} epochs; an "
             "Nx arm's N x that many are written before training). Tasks written by the target: GenEnv's are the "
             "fresh generated tasks of the epochs before it reached the target (an upper bound: invalid generations "
             "leave slots empty); an offline arm's are its whole set. Accuracy at GenEnv's budget: the last "
             f"validation at or below {budget:,.0f} agent training tasks.", "",
             "| arm | tasks written | tasks written by the target | accuracy at GenEnv's budget |", "|---|---|---|---|"]
    for arm in arms:
        seeds = sorted(data[arm])
        x = ARMS[arm].get("study.genenv_data_x")
        written = gen["generated"] if x is None else round(x * gen["generated"])
        by_target = [None if data[arm][s]["tasks_to_target"] is None else
                     (data[arm][s]["tasks_to_target"] * fresh_share if x is None else written) for s in seeds]
        at_budget = [[a for t, a in accuracy_curve(logs[(arm, s)]) if t <= budget * 1.01][-1] for s in seeds]
        js[arm] = {"seeds": seeds, "tasks_written": written, "tasks_written_by_target": by_target,
                   "accuracy_at_genenv_budget": at_budget}
        lines.append(f"| {arm} | {written:,} | {_fmt(by_target, 0)} | {_fmt(at_budget)} |")
    return (lines, js) if len(arms) > 1 else ([], {})


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arms", nargs="+", default=MAIN_ARMS, choices=sorted(ARMS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--epochs", type=int, default=150)
    p.add_argument("--val-every", type=int, default=10)
    p.add_argument("--probe-every", type=int, default=10)
    p.add_argument("--target-gain", type=float, default=0.15, help="target = starting held-out accuracy + this")
    p.add_argument("--jobs", type=int, default=1, help="runs at a time (threads are split between them)")
    p.add_argument("--out", default=str(REPO / "bench" / "out" / "data_efficiency"))
    p.add_argument("--results", default=str(REPO / "bench" / "results"), help="folder for the tables and plots")
    p.add_argument("--name", default="data_efficiency", help="file stem of the tables and plots")
    p.add_argument("--into", default=None, metavar="NAME",
                   help="also file this report in bench/results/NAME.{json,md}, under the key (and a section) --name; "
                        "a study run against its own genenv reference, beside the main one")
    p.add_argument("--rerun", action="store_true", help="train again even if a run is finished")
    p.add_argument("--report-only", action="store_true", help="no training: report the finished runs")
    args = p.parse_args()
    out, results = Path(args.out), Path(args.results)
    out.mkdir(parents=True, exist_ok=True)
    results.mkdir(parents=True, exist_ok=True)

    todo = [(arm, seed) for seed in args.seeds for arm in args.arms]  # seed-major: every arm advances together
    if not args.report_only:
        threads = max(1, (os.cpu_count() or 2) // args.jobs)
        t0 = time.time()
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda a: train(out, a[0], a[1], args, threads), todo))
        print(f"trained/loaded {len(todo)} runs in {time.time() - t0:.0f} s")
    finished = [(a, s) for a, s in todo if run_file(args, a, s).exists()]
    if not finished:
        raise SystemExit("no finished runs to report")
    logs = {(a, s): {t: [tuple(x) for x in v] for t, v in json.loads(run_file(args, a, s).read_text())["scalars"].items()}
            for a, s in finished}
    start = statistics.mean(v["val/accuracy"][0][1] for v in logs.values())
    target = round(start + args.target_gain, 3)
    data: dict[str, dict[int, dict]] = {}
    for (arm, seed), s in logs.items():
        data.setdefault(arm, {})[seed] = run_summary(s, target, ARMS[arm].get("callback.alpha", 0.5))
    at_budget = {k: v for k, v in logs.items() if "study.genenv_data_x" not in ARMS[k[0]]} or logs  # (Nx: N x as long)
    budget = statistics.mean(v["agent/tasks_seen"][-1][1] for v in at_budget.values())
    table, js = report(data, target, args, budget)
    extra, js["data_against_accuracy"] = data_table(data, logs, budget, args)
    table += "\n".join(extra) + ("\n" if extra else "")
    missing = [f"{a}_s{s}" for a, s in todo if (a, s) not in logs]
    if missing:
        table += f"\nNot yet run ({len(missing)}): {', '.join(missing)}\n"
    js["not_yet_run"] = missing
    (results / f"{args.name}.md").write_text(table)
    (results / f"{args.name}.json").write_text(json.dumps(js, indent=1) + "\n")
    print(table)
    series = {arm: [logs[(arm, s)] for s in sorted(data[arm])] for arm in data}
    plot_curves(series, target, results / f"{args.name}.png")
    plot_calibration(series, results / f"{args.name}_calibration.png")
    plot_conditioning(series, results / f"{args.name}_conditioning.png")
    print(f"wrote {results / args.name}.md, .json and the plots")
    if args.into:
        file_into(results / args.into, args.name, table, js)


def file_into(stem: Path, name: str, table: str, js: dict) -> None:
    """`js` under the key `name` of stem.json, and `table` as the section `name` of stem.md (replaced on rerun)."""
    main_js = json.loads(stem.with_suffix(".json").read_text())
    main_js[name] = js
    stem.with_suffix(".json").write_text(json.dumps(main_js, indent=1) + "\n")
    head = f"## Companion study: {name}"
    md = stem.with_suffix(".md").read_text().split(f"\n{head}\n")[0].rstrip("\n")
    note = (f"Its own runs (bench/results/{name}_runs, from the current code), with its own genenv reference: "
            "compare its arms with that row, not with the table above.")
    stem.with_suffix(".md").write_text(f"{md}\n\n{head}\n\n{note}\n\n{table}")
    print(f"filed it in {stem}.md and .json under {name!r}")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_curves(series: dict[str, list[dict]], target: float, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, runs in series.items():
        curves = [accuracy_curve(s) for s in runs]
        n = min(len(c) for c in curves)
        xs = [statistics.mean(c[i][0] for c in curves) for i in range(n)]
        ys = [[c[i][1] for c in curves] for i in range(n)]
        ax.plot(xs, [statistics.mean(y) for y in ys], marker="o", ms=3, label=f"{label} ({len(runs)} seeds)")
        ax.fill_between(xs, [min(y) for y in ys], [max(y) for y in ys], alpha=0.12)
    ax.axhline(target, color="grey", ls="--", lw=1, label=f"target {target:.3f}")
    ax.set_xlabel("agent training tasks consumed")
    ax.set_ylabel("held-out accuracy (600 tasks, levels 1-6)")
    ax.set_title("Data efficiency on the embedded arithmetic environment")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_calibration(series: dict[str, list[dict]], path: Path, alpha: float = 0.5, k: float = 0.1) -> None:
    plt = _plt()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, runs in series.items():
        for tag, ax in (("coevo/success_rate", a1), ("coevo/difficulty", a2)):
            rows = [[v for _, v in s[tag]] for s in runs if tag in s]
            n = min(map(len, rows))
            mean = [statistics.mean(x[i] for x in rows if x[i] == x[i]) if any(x[i] == x[i] for x in rows)
                    else float("nan") for i in range(n)]
            ax.plot(range(n), _smooth(mean, 10), label=label, lw=1.2)
    a1.axhspan(alpha - k, alpha + k, color="green", alpha=0.12, label=f"alpha zone {alpha} ± {k}")
    a1.set_xlabel("epoch")
    a1.set_ylabel("success rate on generated tasks")
    a1.set_ylim(0, 1)
    a1.legend(fontsize=7)
    a2.set_xlabel("epoch")
    a2.set_ylabel("generated-task difficulty (digits)")
    fig.suptitle("Calibration: success on generated tasks and their difficulty (mean over seeds, 10-epoch moving mean)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_conditioning(series: dict[str, list[dict]], path: Path) -> None:
    """Bucket on x, difficulty change on y, a line per probe epoch (mean over seeds); a panel per arm."""
    plt = _plt()
    arms = [a for a, runs in series.items() if "sim/conditioning_slope" in runs[0]]
    if not arms:
        return
    fig, axes = plt.subplots(1, len(arms), figsize=(3.2 * len(arms), 3.4), sharey=True, squeeze=False)
    for ax, arm in zip(axes[0], arms):
        runs = series[arm]
        buckets = sorted(int(t.rsplit("bucket", 1)[1]) for t in runs[0] if t.startswith("sim/delta_level_bucket"))
        n = min(len(s["sim/probe_epoch"]) for s in runs)
        picks = sorted({0, n // 3, 2 * n // 3, n - 1})
        cmap = plt.get_cmap("viridis")
        for j, i in enumerate(picks):
            ys = [statistics.mean(v for v in (s[f"sim/delta_level_bucket{b}"][i][1] for s in runs) if v == v) for b in buckets]
            epoch = int(runs[0]["sim/probe_epoch"][i][1])
            ax.plot(buckets, ys, marker="o", ms=3, color=cmap(j / max(1, len(picks) - 1)), label=f"epoch {epoch}")
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(arm, fontsize=9)
        ax.set_xlabel("success bucket shown")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("difficulty written - seed's (levels)")
    fig.suptitle("Learned conditioning: level written minus the seed's, per success bucket shown "
                 "(0 = agent fails, 4 = solves); probe set, mean over seeds")
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
