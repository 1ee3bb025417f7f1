"""GPU check: full co-evolution epochs of the embedded environment on one CUDA GPU in bf16, with
throughput and peak memory, written to one log. Needs only torch, lightning, transformers, peft,
tensorboard (no vLLM, no jsonargparse, no network, no model download: the models are the
quickstart's tiny ones, built and warm-started on the spot).

    python scripts/gpu_check.py [--out gpu_check] [--epochs 3]      # or: bash scripts/gpu_check.sh
    python scripts/gpu_check.py --accelerator cpu --precision 32-true --epochs 1 --scale 0.25   # dry run on a CPU

The epoch uses the paper's batch shape (64 seeds x K = 4 variations, G = 8 rollouts each, 64 base tasks,
agent batch 64) on the quickstart's models, so it exercises every code path at a realistic batch.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import lightning as L  # noqa: E402
import torch  # noqa: E402

from callbacks import AlphaCurriculumCallback  # noqa: E402
from genenv_pl.backends.base import SamplingParams  # noqa: E402
from genenv_pl.config import CoevoConfig, GRPOConfig, RWRConfig  # noqa: E402
from genenv_pl.datamodule import GenEnvDataModule  # noqa: E402
from genenv_pl.models.factory import PolicyConfig  # noqa: E402
from genenv_pl.models.tiny import TinyModelSpec  # noqa: E402
from genenv_pl.module import GenEnvModule  # noqa: E402
from genenv_pl.warmstart import WarmStartConfig  # noqa: E402


def policy_config(d: dict, dtype: str) -> PolicyConfig:
    return PolicyConfig(model=d.get("model", "tiny"), dtype=dtype, tiny=TinyModelSpec(**d.get("tiny", {})),
                        warm_start=WarmStartConfig(**d.get("warm_start", {})))


class EpochTimer(L.Callback):
    """Wall time of each epoch, split into generation (inside train_dataloader) and updates."""

    def __init__(self):
        self.rows: list[dict] = []

    def on_train_epoch_start(self, trainer, module):  # after train_dataloader(): generation is done
        self._t0 = time.perf_counter()

    def on_train_epoch_end(self, trainer, module):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        m = trainer.datamodule.last_round.metrics
        self.rows.append({
            "epoch": trainer.current_epoch,
            "update_seconds": time.perf_counter() - self._t0,
            "generation_seconds": m["perf/generation_seconds"],
            "rollout_tokens_per_s": m["perf/rollout_tokens_per_s"],
            "rollout_tasks": len(trainer.datamodule.last_round.groups),
            "success_rate": m["coevo/success_rate"],
            "invalid_rate": m["coevo/invalid_rate"],
            "agent_updates": module.counters["agent_updates"],
            "sim_updates": module.counters["sim_updates"],
            # generation and updates of this epoch (the first also holds building the models)
            "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None,
        })
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="gpu_check")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--accelerator", default="gpu")
    p.add_argument("--precision", default="bf16-true")
    p.add_argument("--scale", type=float, default=1.0, help="fraction of the paper's batch shape (smoke runs)")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    qs = yaml.safe_load((REPO / "configs" / "quickstart.yaml").read_text())
    dtype = "bfloat16" if args.precision.startswith("bf16") else "float32"
    mcfg, dcfg = qs["model"], qs["data"]
    n = lambda x: max(1, int(round(x * args.scale)))  # noqa: E731
    coevo = CoevoConfig(
        seeds_per_epoch=n(64), num_generations_per_prompt=4, group_size=8, base_tasks_per_epoch=n(64),
        replay_tasks_per_epoch=n(32), agent_batch_size=64, sim_batch_size=64, drop_zero_std_groups=False,
        agent_sampling=SamplingParams(**dcfg["coevo"]["agent_sampling"]),
        sim_sampling=SamplingParams(**dcfg["coevo"]["sim_sampling"]),
        eval_max_new_tokens=dcfg["coevo"]["eval_max_new_tokens"], eval_batch_size=600,
    )
    L.seed_everything(0)
    dm = GenEnvDataModule(env=dcfg["env"], env_args=dcfg["env_args"], coevo=coevo, seed=0)
    module = GenEnvModule(
        agent=policy_config(mcfg["agent"], dtype), simulator=policy_config(mcfg["simulator"], dtype),
        grpo=GRPOConfig(**mcfg["grpo"]), rwr=RWRConfig(**mcfg["rwr"]),
        agent_optimizer=lambda ps: torch.optim.AdamW(ps, lr=5e-4),
        simulator_optimizer=lambda ps: torch.optim.AdamW(ps, lr=3e-4),
        cache_dir=str(out / "cache"),
    )
    timer = EpochTimer()
    trainer = L.Trainer(
        accelerator=args.accelerator, devices=1, precision=args.precision, max_epochs=args.epochs,
        reload_dataloaders_every_n_epochs=1, num_sanity_val_steps=0, check_val_every_n_epoch=args.epochs,
        enable_checkpointing=False, enable_progress_bar=False, default_root_dir=str(out),
        logger=L.pytorch.loggers.TensorBoardLogger(str(out), name="runs"),
        callbacks=[AlphaCurriculumCallback(print_every_n_epochs=1), timer],
    )
    t0 = time.perf_counter()
    trainer.fit(module, dm)
    total = time.perf_counter() - t0

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() and args.accelerator != "cpu" else platform.processor() or "cpu"
    report = {
        "device": device, "torch": torch.__version__, "lightning": L.__version__, "precision": args.precision,
        "agent_params": module.agent.num_parameters(), "simulator_params": module.simulator.num_parameters(),
        "batch": {"seeds": coevo.seeds_per_epoch, "K": coevo.num_generations_per_prompt, "G": coevo.group_size,
                  "base": coevo.base_tasks_per_epoch, "replay": coevo.replay_tasks_per_epoch},
        "epochs": timer.rows, "fit_seconds_incl_build_and_warm_start": total,
        "val_accuracy": float(trainer.callback_metrics.get("val/accuracy", float("nan"))),
        "peak_gpu_mib": max((r["peak_gpu_mib"] for r in timer.rows), default=None) if torch.cuda.is_available() else None,
    }
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1))
    lines = [f"device {device}  precision {args.precision}  agent {report['agent_params']:,} params  "
             f"simulator {report['simulator_params']:,}",
             f"{'epoch':>5} {'gen s':>8} {'update s':>9} {'rollout tok/s':>14} {'tasks':>6} {'success':>8} {'peak MiB':>9}"]
    for r in timer.rows:
        upd = r["update_seconds"]
        peak = f"{r['peak_gpu_mib']:.0f}" if r["peak_gpu_mib"] is not None else "-"
        lines.append(f"{r['epoch']:>5} {r['generation_seconds']:>8.1f} {upd:>9.2f} {r['rollout_tokens_per_s']:>14.0f} "
                     f"{r['rollout_tasks']:>6} {r['success_rate']:>8.2f} {peak:>9}")
    lines.append(f"update s of the last epoch includes validation ({coevo.eval_batch_size} held-out tasks). "
                 f"fit total {total:.0f} s (includes building and warm-starting both models); "
                 f"val/accuracy {report['val_accuracy']:.3f}; peak GPU memory "
                 f"{report['peak_gpu_mib'] or 0:.0f} MiB")
    text = "\n".join(lines)
    (out / "gpu_check.log").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
