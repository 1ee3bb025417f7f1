"""Audit a simulator: let it write steps of randomly drawn seed tasks, as an epoch does, and count what
became of them: the valid rate with the reasons for rejection, and, where the environment checks its
steps (ALFWorld: `meta["checks"]`, played in the engine), the share whose gold is valid there.

    python bench/sim_audit.py --config configs/alfworld.yaml --config configs/cpu/alfworld.yaml \\
        [--ckpt_path <run>/last.ckpt] --min-checked 200 --out audit.json

Without `--ckpt_path` the simulator is the config's initial (warm-started, cached) one; with it, the
checkpoint's, together with the success rates its data module held, which the simulator's prompt shows.
The steps are sampled exactly as a fit samples them (data.coevo.sim_sampling, K per seed, the training
precision's autocast); seeds are drawn without replacement in rounds of `--seeds-per-round` until at
least `--min-checked` steps have been checked (or `--max-rounds`, or the seeds, run out).

A fit already checks every step it generates; a run of a small agent-task budget writes fewer steps
than a fair sample needs, and the simulator it ends with writes none that are checked. This is that
sample, from any simulator, measured the same way.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def audit_batches(batches) -> dict:
    """Counts over `coevo.SeedBatch`es, as a fit's epoch metrics count them: generated, valid, duplicates,
    invalid reasons, and the mean of each check the valid tasks carry (`meta["checks"]`)."""
    from genenv_pl.epoch_metrics import generated_count, task_checks

    generated, invalid = generated_count(batches)
    checks = task_checks([t for b in batches for t in b.tasks])
    valid = sum(len(b.tasks) for b in batches)
    return {"generated": generated, "valid": valid, "duplicates": sum(b.duplicates for b in batches),
            "valid_rate": valid / generated if generated else None, "invalid": dict(sorted(invalid.items())),
            "checked": len(checks.get("gold_valid", [])),
            "checks": {name: sum(v) / len(v) for name, v in sorted(checks.items())}}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", action="append", required=True, help="main.py's config files, in order")
    p.add_argument("--ckpt_path", default=None, help="a fit's checkpoint (default: the initial simulator)")
    p.add_argument("--min-checked", type=int, default=200, help="stop once this many steps were checked")
    p.add_argument("--seeds-per-round", type=int, default=64)
    p.add_argument("--max-rounds", type=int, default=8)
    p.add_argument("--seed", type=int, default=0, help="draws the seed tasks")
    p.add_argument("--out", required=True, help="where the JSON record goes")
    args = p.parse_args(argv)

    import lightning as L

    from genenv_pl.cli import GenEnvCLI
    from genenv_pl.coevo import generate_tasks
    from genenv_pl.datamodule import GenEnvDataModule
    from genenv_pl.module import GenEnvModule

    record: dict = {}

    class Audited(Exception):
        """Raised once the audit is done: the fit it rode on must not train."""

    class Audit(L.Callback):
        # At fit start both policies are built (validate and test build only the agent), the checkpoint's
        # weights and data-module state are restored and the policies are on their device: the state the
        # fit's next epoch would generate from. The audit raises before that epoch's data is generated.
        def on_fit_start(self, trainer, module):
            dm = trainer.datamodule
            env, cfg, learner = dm.env, dm.cfg, module.learner()
            params = replace(cfg.sim_sampling, n=cfg.num_generations_per_prompt, logprobs=False)
            seeds = env.seed_tasks()
            random.Random(args.seed).shuffle(seeds)
            rates = dict(dm.success_rates)
            batches, t0 = [], time.perf_counter()
            counts = audit_batches(batches)
            for r in range(args.max_rounds):
                chunk = seeds[r * args.seeds_per_round:(r + 1) * args.seeds_per_round]
                if not chunk:
                    break
                with learner.autocast():
                    batches += generate_tasks(env, learner.sampling_policy("simulator"), learner.backend, chunk,
                                              rates, params, max_seq_len=cfg.max_seq_len)
                counts = audit_batches(batches)
                print(f"[audit] round {r + 1}: {counts['generated']} generated, {counts['valid']} valid, "
                      f"{counts['checked']} checked ({time.perf_counter() - t0:.0f} s)", flush=True)
                if counts["checked"] >= args.min_checked:
                    break
            record.update(counts, seeds=sum(len(b.generations) > 0 for b in batches),
                          seed_pool=len(seeds), k=params.n, temperature=params.temperature,
                          success_rates_shown=len(rates), ckpt=args.ckpt_path,
                          seconds=round(time.perf_counter() - t0, 1))
            raise Audited

    # nothing of the fit but its start runs: no evaluation at start, no logger (no checkpoint is written before an epoch ends)
    small = {"model": {"eval_at_start": False}, "trainer": {"logger": False}}
    override = Path(args.out).with_suffix(".audit.yaml")
    override.parent.mkdir(parents=True, exist_ok=True)
    override.write_text(json.dumps(small))  # JSON is YAML
    cli = GenEnvCLI(GenEnvModule, GenEnvDataModule, run=False, save_config_callback=None,
                    args=[a for c in [*args.config, str(override)] for a in ("--config", c)])
    cli.trainer.callbacks.append(Audit())
    try:
        cli.trainer.fit(cli.model, cli.datamodule, ckpt_path=args.ckpt_path)
    except Audited:
        pass
    finally:
        override.unlink()
    if not record:
        raise SystemExit("sim_audit: the fit ended before its start; nothing was audited")
    Path(args.out).write_text(json.dumps(record, indent=1))
    print(json.dumps({k: v for k, v in record.items() if k != "invalid"}), flush=True)
    return record


if __name__ == "__main__":
    main()
