"""GPU check: the benchmark configs' precision path, on the quickstart's tiny models, on one CUDA GPU.

For each check, the precision settings come from the named configs themselves (trainer.precision,
model.shared_base, LoRA, the policies' dtype, gradient checkpointing, FSDP2), applied to the tiny
models of the embedded environment at the paper's batch shape (64 seeds x K = 4, G = 8, 64 base tasks)
and learning rates (1e-6 agent, 5e-7 simulator). It prints, per check:

- the fraction of each role's trainable master elements that the first optimizer step moved (fp32
  masters: nearly all; bf16 weights trained directly: about 2%);
- per epoch: generation and update seconds, rollout tokens per second, peak GPU memory;
- peak GPU memory against `scripts/memory_plan.py`'s plan for the same run (at its longest sequence).

    python scripts/gpu_check.py [--out gpu_check] [--epochs 2]          # or: bash scripts/gpu_check.sh
    python scripts/gpu_check.py --accelerator cpu --epochs 1 --scale 0.1  # dry run on a CPU

Checks: "one-gpu" (configs/alfworld.yaml: bf16-mixed, LoRA adapters on one shared bf16 base) and
"8gpu-overlay" (+ configs/gpu/paper_8gpu.yaml: full fine-tuning, fp32 masters, FSDP2 mixed precision;
here on one device, a mesh of one). Needs torch, lightning, transformers, peft, tensorboard, pyyaml (no
vLLM, no jsonargparse, no download: the models are built and warm-started on the spot).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

import lightning as L  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402

import memory_plan  # noqa: E402
from callbacks import AlphaCurriculumCallback  # noqa: E402
from genenv_pl.backends.base import SamplingParams  # noqa: E402
from genenv_pl.config import CoevoConfig, GRPOConfig, RWRConfig  # noqa: E402
from genenv_pl.datamodule import GenEnvDataModule  # noqa: E402
from genenv_pl.models.factory import PolicyConfig  # noqa: E402
from genenv_pl.models.tiny import TinyModelSpec  # noqa: E402
from genenv_pl.policy import LoraSettings  # noqa: E402
from genenv_pl.warmstart import WarmStartConfig  # noqa: E402

CHECKS = {"one-gpu": ["configs/alfworld.yaml"], "8gpu-overlay": ["configs/alfworld.yaml", "configs/gpu/paper_8gpu.yaml"]}
PAPER_LR = {"agent": 1e-6, "simulator": 5e-7}


def precision_settings(configs: list[str]) -> dict:
    """What the configs set for precision, memory and sharding (merged as repeated --config would)."""
    cfg = memory_plan.load_config([str(REPO / c) for c in configs])
    m, t = cfg["model"], cfg["trainer"]
    strategy = t.get("strategy", "auto")
    name = strategy.get("class_path", "") if isinstance(strategy, dict) else str(strategy)
    return {"precision": t["precision"], "shared_base": bool(m.get("shared_base", False)),
            "fsdp2": name.endswith("ModelParallelStrategy"),
            **{role: {"dtype": m[role]["dtype"], "lora": m[role].get("lora", {}),
                      "gradient_checkpointing": bool(m[role].get("gradient_checkpointing", False))}
               for role in ("agent", "simulator")}}


def policy_config(quickstart: dict, s: dict, role: str, base: str | None) -> PolicyConfig:
    """The role's tiny policy with the check's precision settings. With a shared base (`base`: a folder),
    both roles are fresh adapters on that pretrained tiny model, as on an instruct model."""
    lora = s[role]["lora"]
    qs = quickstart["model"][role]
    adapter = LoraSettings(r=lora.get("r", 0), alpha=lora.get("alpha", 16),
                           target_modules=lora.get("target_modules", ["q_proj", "k_proj", "v_proj", "o_proj"])) \
        if lora.get("r", 0) > 0 else LoraSettings()
    common = {"dtype": s[role]["dtype"], "lora": adapter, "gradient_checkpointing": s[role]["gradient_checkpointing"]}
    if base is not None:
        return PolicyConfig(model=base, warm_start=WarmStartConfig(steps=0), **common)
    return PolicyConfig(model="tiny", tiny=TinyModelSpec(**qs["tiny"]), warm_start=WarmStartConfig(**qs["warm_start"]),
                        **common)


def pretrained_base(quickstart: dict, env, out: Path) -> str:
    """The shared base of the check, saved as a model folder: the quickstart agent's shape, warm-started
    on both roles' examples (an instruct model knows both jobs before co-evolution begins)."""
    import random
    from dataclasses import replace

    from genenv_pl.models.factory import build_policy
    from genenv_pl.warmstart import warm_start

    folder = out / "cache" / "shared-base"
    if not folder.is_dir():
        qs = quickstart["model"]["agent"]
        policy = build_policy(PolicyConfig(model="tiny", tiny=TinyModelSpec(**qs["tiny"])), "agent", env, str(out / "cache"))
        ws = WarmStartConfig(**qs["warm_start"])
        examples = [ex for role in ("agent", "simulator") for ex in env.warm_start_examples(role, ws.num_examples, seed=0)]
        random.Random(0).shuffle(examples)
        warm_start(policy, [(policy.render(m), t) for m, t in examples], replace(ws, steps=2 * ws.steps), log_every=100)
        policy.save_pretrained(str(folder))
    return str(folder)


class Probe(L.Callback):
    """Per epoch: generation and update seconds, rollout tokens/s, peak memory. On the first training
    step: the fraction of each role's trainable master elements it moved. The longest training sequence."""

    def __init__(self):
        self.rows: list[dict] = []
        self.moved: dict[str, float] = {}  # role -> fraction moved by its first step
        self._before: dict[str, list[torch.Tensor]] = {}
        self.longest = 0

    def on_train_epoch_start(self, trainer, module):  # after train_dataloader(): generation is done
        self._t0 = time.perf_counter()

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        for key, role in (("agent", "agent"), ("sim", "simulator")):
            if batch[key] is not None:
                self.longest = max(self.longest, int(batch[key]["input_ids"].shape[1]))
                if role not in self.moved:
                    self._before[role] = _trainable(module)[role]

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        # (a step the KL cap undid moves nothing: the next one with a batch is measured instead)
        after = _trainable(module)
        for role, before in list(self._before.items()):
            moved = sum(int((a != b).sum()) for a, b in zip(after[role], before)) / max(sum(a.numel() for a in before), 1)
            if moved > 0 or role == "agent":
                self.moved[role] = moved
        self._before.clear()

    def on_train_epoch_end(self, trainer, module):
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.synchronize()
        m = trainer.datamodule.last_round.metrics
        self.rows.append({
            "epoch": trainer.current_epoch, "update_seconds": time.perf_counter() - self._t0,
            "generation_seconds": m["perf/generation_seconds"], "rollout_tokens_per_s": m["perf/rollout_tokens_per_s"],
            "rollout_tasks": len(trainer.datamodule.last_round.groups), "success_rate": m["coevo/success_rate"],
            "agent_updates": module.counters["agent_updates"], "sim_updates": module.counters["sim_updates"],
            # generation and updates of this epoch (the first also holds building the models)
            "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
        })
        if cuda:
            torch.cuda.reset_peak_memory_stats()


def _trainable(module) -> dict[str, list[torch.Tensor]]:
    """The optimizers' parameters (FSDP2: this rank's fp32 shards, not the module's gathered bf16 copies)."""
    from torch.distributed.tensor import DTensor

    return {role: [(p.to_local() if isinstance(p, DTensor) else p).detach().clone() for g in opt.param_groups
                   for p in g["params"]] for role, opt in zip(("agent", "simulator"), module.optimizers())}


def plan_config(quickstart: dict, s: dict, coevo: CoevoConfig, accelerator: str) -> dict:
    """The run as a config for `memory_plan` (tiny models, the check's precision settings)."""
    model = {"shared_base": s["shared_base"], "backend": "hf", "backend_args": {"max_batch_size": 512},
             "grpo": {"micro_batch_size": None}, "rwr": {"micro_batch_size": None}}
    for role in ("agent", "simulator"):
        shape = quickstart["model"]["agent" if s["shared_base"] else role]["tiny"]
        model[role] = {"model": "tiny", "tiny": shape, "dtype": s[role]["dtype"],
                       "lora": s[role]["lora"], "gradient_checkpointing": s[role]["gradient_checkpointing"]}
    strategy = {"class_path": "lightning.pytorch.strategies.ModelParallelStrategy"} if s["fsdp2"] else "auto"
    return {"trainer": {"accelerator": accelerator, "precision": s["precision"], "strategy": strategy}, "model": model,
            "data": {"coevo": {"group_size": coevo.group_size, "num_generations_per_prompt": coevo.num_generations_per_prompt,
                               "seeds_per_epoch": coevo.seeds_per_epoch, "base_tasks_per_epoch": coevo.base_tasks_per_epoch,
                               "replay_tasks_per_epoch": coevo.replay_tasks_per_epoch,
                               "agent_batch_size": coevo.agent_batch_size, "sim_batch_size": coevo.sim_batch_size,
                               "agent_sampling": {"max_new_tokens": coevo.agent_sampling.max_new_tokens},
                               "sim_sampling": {"max_new_tokens": coevo.sim_sampling.max_new_tokens}}}}


def run_check(name: str, configs: list[str], args, out: Path) -> dict:
    from genenv_pl.module import GenEnvModule

    s = precision_settings(configs)
    qs = yaml.safe_load((REPO / "configs" / "quickstart.yaml").read_text())
    dcfg = qs["data"]
    n = lambda x: max(1, int(round(x * args.scale)))  # noqa: E731
    coevo = CoevoConfig(
        seeds_per_epoch=n(64), num_generations_per_prompt=4, group_size=8, base_tasks_per_epoch=n(64),
        replay_tasks_per_epoch=n(32), agent_batch_size=64, sim_batch_size=64, drop_zero_std_groups=False,
        agent_sampling=SamplingParams(**dcfg["coevo"]["agent_sampling"]),
        sim_sampling=SamplingParams(**dcfg["coevo"]["sim_sampling"]),
        eval_max_new_tokens=dcfg["coevo"]["eval_max_new_tokens"], eval_batch_size=600)
    L.seed_everything(0)
    dm = GenEnvDataModule(env=dcfg["env"], env_args=dcfg["env_args"], coevo=coevo, seed=0)
    base = pretrained_base(qs, dm.env, out) if s["shared_base"] else None
    module = GenEnvModule(
        agent=policy_config(qs, s, "agent", base), simulator=policy_config(qs, s, "simulator", base),
        grpo=GRPOConfig(**qs["model"]["grpo"]), rwr=RWRConfig(**qs["model"]["rwr"]),
        agent_optimizer=lambda ps: torch.optim.AdamW(ps, lr=PAPER_LR["agent"]),
        simulator_optimizer=lambda ps: torch.optim.AdamW(ps, lr=PAPER_LR["simulator"]),
        cache_dir=str(out / "cache"), shared_base=s["shared_base"])
    strategy = "auto"
    if s["fsdp2"]:
        from lightning.pytorch.strategies import ModelParallelStrategy

        strategy = ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=1, save_distributed_checkpoint=False)
    probe = Probe()
    trainer = L.Trainer(
        accelerator=args.accelerator, devices=1, strategy=strategy, precision=s["precision"], max_epochs=args.epochs,
        reload_dataloaders_every_n_epochs=1, num_sanity_val_steps=0, check_val_every_n_epoch=args.epochs,
        enable_checkpointing=False, enable_progress_bar=False, default_root_dir=str(out / name),
        logger=L.pytorch.loggers.TensorBoardLogger(str(out), name=name),
        callbacks=[AlphaCurriculumCallback(print_every_n_epochs=1), probe])
    t0 = time.perf_counter()
    trainer.fit(module, dm)
    total = time.perf_counter() - t0
    cuda = torch.cuda.is_available() and args.accelerator != "cpu"
    device_gb = torch.cuda.get_device_properties(0).total_memory / 1e9 if cuda else 24.0
    plan = memory_plan.build_plan(plan_config(qs, s, coevo, "gpu" if cuda else "cpu"), gpus=1, gpu_gb=device_gb,
                                  seq_len=max(probe.longest, 2))
    peak = max((r["peak_gpu_mib"] for r in probe.rows if r["peak_gpu_mib"] is not None), default=None)
    return {"check": name, "configs": configs, "settings": s, "moved_by_first_step": probe.moved, "epochs": probe.rows,
            "fit_seconds_incl_build_and_warm_start": total, "peak_gpu_gb": peak * 2**20 / 1e9 if peak else None,
            "plan_peak_gb": plan.peak / 1e9, "plan_seq_len": plan.seq_len,
            "val_accuracy": float(trainer.callback_metrics.get("val/accuracy", float("nan"))),
            "agent_params": module.agent.num_parameters(), "agent_trainable": module.agent.num_parameters(True)}


def render(report: dict) -> str:
    s = report["settings"]
    lines = [f"== {report['check']} ({' + '.join(report['configs'])}): precision {s['precision']}, "
             f"{'FSDP2, ' if s['fsdp2'] else ''}{'shared base, ' if s['shared_base'] else ''}agent dtype {s['agent']['dtype']}, "
             f"LoRA r {s['agent']['lora'].get('r', 0)}; agent {report['agent_params']:,} params "
             f"({report['agent_trainable']:,} trainable)",
             "moved by each role's first optimizer step (lr 1e-6 agent, 5e-7 simulator): " +
             (", ".join(f"{role} {frac:.4f} of its trainable master elements"
                        for role, frac in report["moved_by_first_step"].items()) or "no step taken") +
             (" (LoRA: on its first step only B moves; A has no gradient while B is 0)" if s["agent"]["lora"].get("r", 0) else ""),
             f"{'epoch':>5} {'gen s':>8} {'update s':>9} {'rollout tok/s':>14} {'tasks':>6} {'success':>8} {'peak MiB':>9}"]
    for r in report["epochs"]:
        peak = f"{r['peak_gpu_mib']:.0f}" if r["peak_gpu_mib"] is not None else "-"
        lines.append(f"{r['epoch']:>5} {r['generation_seconds']:>8.1f} {r['update_seconds']:>9.2f} "
                     f"{r['rollout_tokens_per_s']:>14.0f} {r['rollout_tasks']:>6} {r['success_rate']:>8.2f} {peak:>9}")
    measured = f"{report['peak_gpu_gb']:.2f} GB" if report["peak_gpu_gb"] else "- (no GPU)"
    lines.append(f"peak GPU memory {measured} against the plan's {report['plan_peak_gb']:.2f} GB "
                 f"(scripts/memory_plan.py at sequence {report['plan_seq_len']}); fit {report['fit_seconds_incl_build_and_warm_start']:.0f} s "
                 f"incl. building and warm-starting; val/accuracy {report['val_accuracy']:.3f}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="gpu_check")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--accelerator", default="gpu")
    p.add_argument("--checks", default=",".join(CHECKS), help=f"comma-separated, of {', '.join(CHECKS)}")
    p.add_argument("--scale", type=float, default=1.0, help="fraction of the paper's batch shape (smoke runs)")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    cuda = torch.cuda.is_available() and args.accelerator != "cpu"
    device = torch.cuda.get_device_name(0) if cuda else platform.processor() or "cpu"
    reports, texts = [], [f"device {device}  torch {torch.__version__}  lightning {L.__version__}"]
    for name in args.checks.split(","):
        report = run_check(name, CHECKS[name], args, out)
        reports.append(report)
        texts.append(render(report))
        print(texts[-1], flush=True)
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    (out / "gpu_check.json").write_text(json.dumps({"device": device, "torch": torch.__version__,
                                                    "lightning": L.__version__, "checks": reports}, indent=1))
    (out / "gpu_check.log").write_text("\n".join(texts) + "\n")


if __name__ == "__main__":
    main()
