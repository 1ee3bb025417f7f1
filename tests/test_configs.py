"""Every benchmark config, alone and with the 8-GPU overlay, parses with LightningCLI and carries the
paper's settings (GenEnv section 5: bf16, lr 1e-6 / 5e-7, 64 tasks per agent update, G = 8, K = 4,
10 epochs, 9,000-token sequences; FSDP + vLLM on 8 GPUs). Parsing needs no GPU."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from genenv_pl.cli import cli_main

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = ["alfworld", "api_bank", "bamboogle", "bfcl", "travelplanner"]


def _resolved(capsys, *configs: str) -> dict:
    args = ["fit"] + [a for c in configs for a in ("--config", str(REPO / c))] + ["--print_config"]
    with pytest.raises(SystemExit) as exit_:
        cli_main(args)
    assert exit_.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


@pytest.mark.parametrize("bench", BENCHMARKS)
def test_paper_settings_single_gpu(capsys, bench):
    cfg = _resolved(capsys, f"configs/{bench}.yaml")
    t, m, c = cfg["trainer"], cfg["model"], cfg["data"]["coevo"]
    assert (t["accelerator"], t["precision"], t["max_epochs"]) == ("gpu", "bf16-true", 10)
    assert m["agent"]["model"] == m["simulator"]["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert m["agent_optimizer"]["init_args"]["lr"] == 1e-6 and m["simulator_optimizer"]["init_args"]["lr"] == 5e-7
    assert (c["group_size"], c["num_generations_per_prompt"], c["agent_batch_size"], c["max_seq_len"]) == (8, 4, 64, 9000)


@pytest.mark.parametrize("bench", BENCHMARKS)
def test_paper_scale_out_overlay(capsys, bench):
    cfg = _resolved(capsys, f"configs/{bench}.yaml", "configs/gpu/paper_8gpu.yaml")
    t, m, c = cfg["trainer"], cfg["model"], cfg["data"]["coevo"]
    assert t["strategy"]["class_path"] == "lightning.pytorch.strategies.ModelParallelStrategy"
    assert t["strategy"]["init_args"]["data_parallel_size"] == t["devices"] == 8
    assert t["precision"] == "bf16-true" and t["max_epochs"] == 10
    assert m["backend"] == "vllm" and m["backend_args"]["max_model_len"] == c["max_seq_len"] == 9000
    assert c["agent_batch_size"] * t["devices"] == 64  # per-rank batches: the paper's 64 tasks per update
    assert (c["group_size"], c["num_generations_per_prompt"]) == (8, 4)
    assert m["agent_optimizer"]["init_args"]["lr"] == 1e-6 and m["simulator_optimizer"]["init_args"]["lr"] == 5e-7


def test_a_bad_key_is_named(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["fit", "--config", str(REPO / "configs/bfcl.yaml"), "--data.coevo.max_seq_lenn", "10"])
    assert exit_.value.code not in (0, None)
    assert "max_seq_lenn" in capsys.readouterr().err
