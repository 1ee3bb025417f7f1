#!/usr/bin/env bash
# One-GPU check of the benchmark configs' precision path, offline, preinstalled packages only (torch,
# lightning, transformers, peft, tensorboard, pyyaml): the quickstart's tiny models through full
# co-evolution epochs on CUDA, with the settings configs/alfworld.yaml trains with (bf16-mixed, fp32 LoRA
# adapters on one shared bf16 base) and those of configs/gpu/paper_8gpu.yaml (full fine-tuning, fp32
# masters, FSDP2 mixed precision, on a mesh of one GPU). Prints the fraction of trainable master
# elements each role's first step moved at lr 1e-6 / 5e-7, throughput, and peak GPU memory against
# scripts/memory_plan.py; gpu_check/gpu_check.log (and .json). About 3-6 minutes on one modern GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
timeout 480 python scripts/gpu_check.py --out "${1:-gpu_check}" "${@:2}"
