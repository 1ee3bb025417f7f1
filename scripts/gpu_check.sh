#!/usr/bin/env bash
# One-GPU check, offline, preinstalled packages only (torch, lightning, transformers, peft, tensorboard):
# the quickstart's models through full co-evolution epochs on CUDA in bf16; throughput and peak GPU
# memory go to gpu_check/gpu_check.log (and .json). Takes about 2-4 minutes on one modern GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
timeout 480 python scripts/gpu_check.py --out "${1:-gpu_check}" "${@:2}"
