"""The 8-GPU overlay's precision path (configs/gpu/paper_8gpu.yaml: full fine-tuning under FSDP2,
fp32 sharded masters gathered in bf16, fp32 gradient reduction, `bf16-mixed`) on two CPU processes
(gloo), with the tiny quickstart models at the paper's learning rates. The checks of
tests/test_precision.py: (a) one step moves the masters as an fp32 run of the same batches does,
(b) `training_step` gets the batch in fp32, (c) on the first step the importance ratio is 1 within 1e-3."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from test_ddp import FSDP2, _run

pytestmark = pytest.mark.slow  # several processes a test: the slow stage of .ci/run
REPO = Path(__file__).resolve().parents[1]
# The simulator in the quickstart agent's shape (the test override's simulator is a 2-layer, 64-wide model)
SIM_AS_AGENT = [f"--model.simulator.tiny.{k}" for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads",
                                                         "intermediate_size")]
SIM_AS_AGENT = [a for k, v in zip(SIM_AS_AGENT, (128, 4, 4, 4, 384)) for a in (k, str(v))]


def overlay_precision() -> str:
    cfg = yaml.safe_load((REPO / "configs/gpu/paper_8gpu.yaml").read_text())
    assert cfg["model"]["agent"]["dtype"] == "float32" and cfg["model"]["agent"]["lora"]["r"] == 0
    return cfg["trainer"]["precision"]


def _fit(tmp: Path, cache: Path, precision: str, replay: Path | None = None) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    out = tmp / "probe"
    probe = {"class_path": "ddp_helpers.PrecisionProbe",
             "init_args": {"out_dir": str(out), **({"replay": str(replay)} if replay else {})}}
    rc, log, _ = _run(tmp, cache, 1, [probe], *FSDP2, "--trainer.precision", precision,
                      "--model.agent_optimizer.init_args.lr", "1e-6", "--model.simulator_optimizer.init_args.lr", "5e-7",
                      "--model.grpo.warmup_updates", "0", "--data.coevo.drop_zero_std_groups", "false",
                      *SIM_AS_AGENT,
                      "--data.coevo.seeds_per_epoch", "8", timeout=420)
    assert rc == 0, log[-6000:]
    return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


def test_fsdp2_bf16_mixed_trains_as_fp32_with_fp32_batches_and_ratio_one(tmp_path, cache):
    precision = overlay_precision()
    assert precision == "bf16-mixed"
    mixed = _fit(tmp_path / "mixed", cache, precision)
    ranks = [json.loads((mixed / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:  # (b) and (c), on each rank's own batch
        for role, dtypes in r["dtypes"].items():
            for key in ("old_logp", "advantages", "weights", "r_env", "temperature", "response_mask"):
                if key in dtypes:
                    assert dtypes[key] == "torch.float32", (role, key, dtypes[key])
        assert r["ratio_dev"] is not None and r["ratio_dev"] <= 1e-3, r
    # (a): the same batches (each rank's) in fp32
    fp32 = _fit(tmp_path / "fp32", cache, "32-true", replay=mixed)
    u16, u32 = torch.load(mixed / "update.pt"), torch.load(fp32 / "update.pt")
    for role in ("agent", "simulator"):
        f16, f32 = (u16[role] != 0).float().mean().item(), (u32[role] != 0).float().mean().item()
        assert f32 > 0.5, (role, f32)
        assert abs(f16 - f32) <= 0.01 * f32, (role, f16, f32)
        cos = torch.nn.functional.cosine_similarity(u16[role], u32[role], dim=0).item()
        assert cos >= 0.99, (role, cos)
