"""Every benchmark config, alone and with the 8-GPU overlay, parses with LightningCLI and carries the
paper's settings (GenEnv section 5: bf16, lr 1e-6 / 5e-7, 64 tasks per agent update, G = 8, K = 4,
10 epochs, 9,000-token sequences; FSDP + vLLM on 8 GPUs). Alone a config is the one-GPU recipe: LoRA
on one shared bf16 base at 10x the paper's (full fine-tuning) learning rates; the overlay is the paper's
full fine-tuning. Both compute in bf16 with fp32 master weights (bf16-mixed). Parsing needs no GPU."""
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


# The paper's values (GenEnv sections 2 and 5), written once; the configs must resolve to them.
PAPER = {"G": 8, "K": 4, "clip": 0.2, "kl": 0.001, "entropy": 0.001, "grad_clip": 1.0, "lr_agent": 1e-6,
         "lr_simulator": 5e-7, "batch": 64, "alpha": 0.5, "k_min": 0.1, "max_seq_len": 9000, "epochs": 10}


def _algorithm(cfg: dict) -> dict:
    """The algorithm constants a resolved config trains with, under PAPER's names."""
    t, m, c = cfg["trainer"], cfg["model"], cfg["data"]["coevo"]
    curriculum = next(cb["init_args"] for cb in t["callbacks"] if cb["class_path"].endswith("AlphaCurriculumCallback"))
    return {"G": c["group_size"], "K": c["num_generations_per_prompt"], "clip": m["grpo"]["clip_eps"],
            "kl": m["grpo"]["kl_coef"], "entropy": m["grpo"]["entropy_coef"], "grad_clip": m["grpo"]["grad_clip"],
            "lr_agent": m["agent_optimizer"]["init_args"]["lr"], "lr_simulator": m["simulator_optimizer"]["init_args"]["lr"],
            "batch": c["agent_batch_size"], "alpha": curriculum["alpha"], "k_min": curriculum["filtering_k"],
            "max_seq_len": c["max_seq_len"], "epochs": t["max_epochs"]}


@pytest.mark.parametrize("bench", BENCHMARKS)
def test_paper_settings_single_gpu(capsys, bench):
    cfg = _resolved(capsys, f"configs/{bench}.yaml")
    t, m = cfg["trainer"], cfg["model"]
    assert (t["accelerator"], t["precision"]) == ("gpu", "bf16-mixed")
    assert m["agent"]["model"] == m["simulator"]["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert m["shared_base"] and m["agent"]["lora"]["r"] == m["simulator"]["lora"]["r"] == 64
    assert m["agent"]["dtype"] == "bfloat16"  # the frozen base; the adapters are fp32
    assert _algorithm(cfg) == {**PAPER, "lr_agent": 1e-5, "lr_simulator": 5e-6}  # LoRA: 10x


@pytest.mark.parametrize("bench", BENCHMARKS)
def test_paper_scale_out_overlay(capsys, bench):
    cfg = _resolved(capsys, f"configs/{bench}.yaml", "configs/gpu/paper_8gpu.yaml")
    t, m, c = cfg["trainer"], cfg["model"], cfg["data"]["coevo"]
    assert t["strategy"]["class_path"] == "lightning.pytorch.strategies.ModelParallelStrategy"
    assert t["strategy"]["init_args"]["data_parallel_size"] == t["devices"] == 8
    assert t["precision"] == "bf16-mixed" and t["max_epochs"] == 10
    assert not m["shared_base"] and m["agent"]["lora"]["r"] == m["simulator"]["lora"]["r"] == 0  # full fine-tuning
    assert m["agent"]["dtype"] == m["simulator"]["dtype"] == "float32"  # the sharded masters
    assert m["backend"] == "vllm" and m["backend_args"]["max_model_len"] == c["max_seq_len"] == 9000
    assert _algorithm(cfg) == PAPER  # global batches: the paper's 64 tasks per update, whatever the ranks


def test_a_bad_key_is_named(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["fit", "--config", str(REPO / "configs/bfcl.yaml"), "--data.coevo.max_seq_lenn", "10"])
    assert exit_.value.code not in (0, None)
    assert "max_seq_lenn" in capsys.readouterr().err


def test_a_dotted_key_sets_one_key_of_a_dict_option_and_a_whole_dict_replaces_it(capsys):
    """jsonargparse sets a dict option as a whole: `--model.backend_args.max_model_len 4096` keeps the
    overlay's other backend args, `--model.backend_args '{...}'` drops them (as `fit --help` says)."""
    overlay = ("configs/alfworld.yaml", "configs/gpu/paper_8gpu.yaml")
    args = lambda *a: [x for c in overlay for x in ("--config", str(REPO / c))] + list(a)  # noqa: E731

    def backend_args(*extra: str) -> dict:
        with pytest.raises(SystemExit):
            cli_main(["fit", *args(*extra), "--print_config"])
        return yaml.safe_load(capsys.readouterr().out)["model"]["backend_args"]

    base = backend_args()
    assert base["sleep_level"] == 1 and base["max_model_len"] == 9000
    assert backend_args("--model.backend_args.max_model_len", "4096") == {**base, "max_model_len": 4096}
    assert backend_args("--model.backend_args", "{max_model_len: 4096}") == {"max_model_len": 4096}


def test_the_alfworld_study_keeps_the_cpu_recipe_and_its_wall_clock_engine_limit(capsys):
    """bench/recipes/alfworld_held_out.yaml repeats configs/cpu/alfworld.yaml's env_args (a later file's
    dict replaces the whole option) and pins the wall-clock engine limit all the study's fits ran with."""
    study = ("configs/alfworld.yaml", "configs/cpu/alfworld.yaml", "bench/recipes/alfworld_held_out.yaml")
    cpu = _resolved(capsys, *study[:2])["data"]["env_args"]
    assert _resolved(capsys, *study)["data"]["env_args"] == {**cpu, "engine_clock": "wall"}
