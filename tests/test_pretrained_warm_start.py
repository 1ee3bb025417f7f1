"""Warm starts of pretrained models (a Hugging Face folder, as SmolLM2 is loaded): LoRA warm starts
are merged into the weights under a fresh adapter, and every warm start is cached on disk, so
`fit` and `test` run it once. The "pretrained" model here is a tiny Qwen2 saved as an HF folder."""
from __future__ import annotations

import os

import pytest
import torch

from genenv_pl.envs import make_env
from genenv_pl.models.factory import PolicyConfig, build_policy
from genenv_pl.models.tiny import TinyModelSpec
from genenv_pl.policy import LoraSettings
from genenv_pl.warmstart import WarmStartConfig

SPEC = TinyModelSpec(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=64)


@pytest.fixture(scope="module")
def env():
    return make_env("arithmetic", eval_per_level=5)


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory, env) -> str:
    """A from-scratch (not warm-started) tiny model written as an ordinary HF model folder."""
    folder = str(tmp_path_factory.mktemp("pretrained") / "model")
    build_policy(PolicyConfig(tiny=SPEC), "agent", env, str(tmp_path_factory.mktemp("tiny"))).save_pretrained(folder)
    return folder


def _logits(policy, ids) -> torch.Tensor:
    with torch.no_grad():
        return policy.model(input_ids=ids).logits


def _warm_starts(capsys) -> int:
    return capsys.readouterr().out.count("warm-starting")


@pytest.mark.parametrize("lora_r", [4, 0])
def test_warm_start_is_cached_and_becomes_the_base(hf_folder, env, tmp_path, capsys, lora_r) -> None:
    cfg = PolicyConfig(model=hf_folder, lora=LoraSettings(r=lora_r, alpha=8),
                       warm_start=WarmStartConfig(steps=6, batch_size=8, lr=1e-2, warmup_steps=1))
    ids = torch.tensor([build_policy(PolicyConfig(model=hf_folder), "agent", env, str(tmp_path)).encode(["12+34="])[0]])
    plain = _logits(build_policy(PolicyConfig(model=hf_folder), "agent", env, str(tmp_path)), ids)
    _warm_starts(capsys)

    first = build_policy(cfg, "agent", env, str(tmp_path / "cache"))
    assert _warm_starts(capsys) == 1 and len(os.listdir(tmp_path / "cache")) == 1
    second = build_policy(cfg, "agent", env, str(tmp_path / "cache"))
    assert _warm_starts(capsys) == 0  # read from the cache, not trained again
    torch.testing.assert_close(_logits(first, ids), _logits(second, ids), rtol=0, atol=1e-5)
    assert not torch.allclose(_logits(first, ids), plain)  # the warm start changed the model
    if lora_r:
        # co-evolution trains a fresh adapter (B = 0: the policy starts as the warm-started model)
        # whose reference, the adapter switched off, is the warm-started model, not the raw one
        assert first.is_lora and all(torch.all(p == 0) for n, p in first.model.named_parameters() if "lora_B" in n)
        with first.base_only():
            torch.testing.assert_close(_logits(first, ids), _logits(second, ids), rtol=0, atol=1e-5)
    # another warm-start setting is another cache entry
    build_policy(PolicyConfig(model=hf_folder, lora=cfg.lora, warm_start=WarmStartConfig(
        steps=3, batch_size=8, lr=1e-2, warmup_steps=1)), "agent", env, str(tmp_path / "cache"))
    assert _warm_starts(capsys) == 1 and len(os.listdir(tmp_path / "cache")) == 2


def test_bf16_autocast_warm_start_keeps_fp32_masters_and_its_own_cache_entry(hf_folder, env, tmp_path) -> None:
    """`warm_start.autocast: bfloat16` (the ALFWorld CPU recipe) trains under bf16 autocast with fp32
    weights, learns as the fp32 warm start does, and is cached under its own key; unset, the key is the
    one warm starts had before the field existed (so the committed BFCL adapters still match)."""
    from genenv_pl.warmstart import cache_fields, warm_start

    assert "autocast" not in cache_fields(WarmStartConfig()) and cache_fields(WarmStartConfig(autocast="bfloat16"))["autocast"] == "bfloat16"
    losses = {}
    for autocast in (None, "bfloat16"):
        torch.manual_seed(0)
        policy = build_policy(PolicyConfig(model=hf_folder), "agent", env, str(tmp_path))
        cfg = WarmStartConfig(steps=12, batch_size=8, lr=1e-2, warmup_steps=1, autocast=autocast)
        examples = [(policy.render(m), t) for m, t in env.warm_start_examples("agent", 64, seed=0)]
        losses[autocast] = warm_start(policy, examples, cfg, log_every=0)
        assert all(p.dtype == torch.float32 for p in policy.parameters())
        assert losses[autocast][-1] < 0.8 * losses[autocast][0]
    # the same data and initialisation: bf16 rounding moves the curve a little, not its course
    assert abs(losses["bfloat16"][-1] - losses[None][-1]) < 0.25 * losses[None][0]
    keyed = {a: build_policy(PolicyConfig(model=hf_folder, lora=LoraSettings(r=4, alpha=8), warm_start=WarmStartConfig(
        steps=2, batch_size=4, warmup_steps=1, autocast=a)), "agent", env, str(tmp_path / "cache")) for a in (None, "bfloat16")}
    assert len(os.listdir(tmp_path / "cache")) == 2 and len(keyed) == 2
