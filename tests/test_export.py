"""`python main.py export`: a real fit's checkpoint written as model folders that transformers and
PEFT load back to the trained policies' outputs, and that `main.py test` evaluates as the checkpoint."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from genenv_pl.cli import cli_main
from genenv_pl.models.tiny import TinyModelSpec, build_tiny_model, train_tokenizer
from genenv_pl.policy import Policy

REPO = Path(__file__).resolve().parents[1]
TINY = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 2, "intermediate_size": 128}
TEXTS = ["Compute 12+34 (digits lowest first).\nAnswer: 64", "Compute 5+6.\nAnswer:"]


def _run(tmp: Path, agent: dict, simulator: dict, shared_base: bool = False) -> list[str]:
    """Config args of a one-epoch run of the quickstart's environment with small tiny models."""
    cfg = {
        "trainer": {"max_epochs": 1, "check_val_every_n_epoch": 1, "logger": False,
                    "callbacks": [{"class_path": "callbacks.AlphaCurriculumCallback", "init_args": {"filtering_k": 0.5}},
                                  {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                   "init_args": {"dirpath": str(tmp / "ckpt"), "save_last": True, "save_top_k": 1,
                                                 "every_n_epochs": 1, "save_on_train_epoch_end": True}}]},
        "model": {"cache_dir": str(tmp / "cache"), "shared_base": shared_base, "agent": agent, "simulator": simulator,
                  "agent_optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": 1.0e-2}},
                  "simulator_optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": 1.0e-2}}},
        "data": {"env_args": {"eval_per_level": 5, "seeds_per_level": 2},
                 "coevo": {"seeds_per_epoch": 4, "drop_zero_std_groups": False, "eval_batch_size": 30}},
    }
    (tmp / "run.yaml").write_text(yaml.safe_dump(cfg))
    os.chdir(tmp)
    return ["--config", str(REPO / "configs/quickstart.yaml"), "--config", str(tmp / "run.yaml")]


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


def _ids(policy: Policy) -> torch.Tensor:
    return torch.tensor(policy.encode(TEXTS[:1]))


def _hf_folder(path: Path) -> str:
    """A small model as a plain Hugging Face folder: the `model` of a pretrained policy."""
    tok = train_tokenizer([f"Compute {a}+{b}.\nAnswer: {a + b}" for a in range(30) for b in range(30)], 320)
    build_tiny_model(TinyModelSpec(**TINY), len(tok), tok.eos_token_id, seed=0).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def test_export_of_a_run_with_a_pretrained_lora_agent_and_a_full_simulator(tmp_path):
    """Separate models from a local HF folder: the LoRA agent exports merged and as the adapter alone,
    whose base is that folder (not copied); the fully trained simulator exports as it is."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = _hf_folder(tmp_path / "pretrained")
    no_warm_start = {"steps": 0}
    args = _run(tmp_path, agent={"model": folder, "lora": {"r": 4, "alpha": 8}, "warm_start": no_warm_start},
                simulator={"model": folder, "warm_start": no_warm_start})
    fit = cli_main(["fit", *args])
    agent, simulator = fit.model.agent, fit.model.simulator
    assert fit.model.counters["agent_updates"] >= 1
    assert any(p.abs().sum() > 0 for n, p in agent.model.named_parameters() if "lora_B" in n)  # it learned

    out = tmp_path / "export"
    cli_main(["export", *args, "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt"), "--out", str(out)])
    assert sorted(p.name for p in out.iterdir()) == ["agent", "agent_adapter", "genenv_export.json", "simulator"]
    ids = _ids(agent)
    expected = _logits(agent.model, ids)
    merged = AutoModelForCausalLM.from_pretrained(out / "agent")
    assert not any("lora" in n for n, _ in merged.named_parameters())
    torch.testing.assert_close(_logits(merged, ids), expected, rtol=0, atol=1e-5)
    assert AutoTokenizer.from_pretrained(out / "agent")(TEXTS[0], add_special_tokens=False)["input_ids"] == ids[0].tolist()
    adapter = json.loads((out / "agent_adapter" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == folder and adapter["r"] == 4
    peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(folder), out / "agent_adapter")
    torch.testing.assert_close(_logits(peft, ids), expected, rtol=0, atol=1e-6)
    exported_sim = AutoModelForCausalLM.from_pretrained(out / "simulator")
    assert torch.equal(_logits(exported_sim, ids), _logits(simulator.model, ids))

    manifest = json.loads((out / "genenv_export.json").read_text())
    assert manifest["epoch"] == 0 and manifest["global_step"] > 0
    assert manifest["counters"]["agent_updates"] == fit.model.counters["agent_updates"]
    assert {"agent/loss", "coevo/success_rate", "val/accuracy"} <= set(manifest["metrics"])
    assert manifest["config"]["model"]["agent"]["model"] == folder and manifest["config"]["data"]["env"] == "arithmetic"
    assert manifest["folders"] == {"agent": {"model": "agent", "adapter": "agent_adapter", "adapter_base": folder},
                                   "simulator": {"model": "simulator"}}

    # `main.py test` answers with the exported agent folder as with the checkpoint, task for task (greedy)
    answers = []
    for extra in (["--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt")],
                  ["--model.agent.model", str(out / "agent"), "--model.agent.lora.r", "0"]):
        cli_main(["test", *args, *extra])
        rows = json.loads((tmp_path / "test_results.json").read_text())["rows"]
        answers.append({r["id"]: r["response"] for r in rows})
    assert len(answers[0]) == 30 and answers[0] == answers[1]


def test_export_of_a_shared_base_run_writes_the_base_once_and_two_adapters(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    policy = {"model": "tiny", "tiny": TINY, "lora": {"r": 4, "alpha": 8}, "warm_start": {"steps": 0}}
    args = _run(tmp_path, agent=policy, simulator=policy, shared_base=True)
    fit = cli_main(["fit", *args])
    module = fit.model
    ids = _ids(module.agent)
    expected = {role: _logits(getattr(module, role).activate().model, ids) for role in ("agent", "simulator")}
    assert not torch.equal(expected["agent"], expected["simulator"])

    out = tmp_path / "export"
    cli_main(["export", *args, "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt"), "--out", str(out)])
    assert sorted(p.name for p in out.iterdir()) == ["agent", "agent_adapter", "base", "genenv_export.json",
                                                     "simulator", "simulator_adapter"]
    for role in ("agent", "simulator"):
        adapter = json.loads((out / f"{role}_adapter" / "adapter_config.json").read_text())
        assert adapter["base_model_name_or_path"] == str(out / "base")  # a tiny base is not published: written once
        peft = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(out / "base"), out / f"{role}_adapter")
        torch.testing.assert_close(_logits(peft, ids), expected[role], rtol=0, atol=1e-6)
        merged = AutoModelForCausalLM.from_pretrained(out / role)
        torch.testing.assert_close(_logits(merged, ids), expected[role], rtol=0, atol=1e-5)
    with module.agent.base_only():  # the base as trained: frozen, the adapters off
        torch.testing.assert_close(_logits(AutoModelForCausalLM.from_pretrained(out / "base"), ids),
                                   _logits(module.agent.model, ids), rtol=0, atol=0)
    manifest = json.loads((out / "genenv_export.json").read_text())
    assert manifest["folders"]["simulator"] == {"model": "simulator", "adapter_base": "base", "adapter": "simulator_adapter"}


def test_export_needs_a_checkpoint_file(tmp_path):
    args = _run(tmp_path, agent={"model": "tiny", "tiny": TINY}, simulator={"model": "tiny", "tiny": TINY})
    with pytest.raises(SystemExit) as exit_:
        cli_main(["export", *args, "--ckpt_path", str(tmp_path / "missing.ckpt"), "--out", str(tmp_path / "out")])
    assert "export needs --ckpt_path, a Lightning checkpoint file" in str(exit_.value.code)
