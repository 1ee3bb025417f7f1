"""Shared-base mode: the agent and the simulator as two LoRA adapters on one frozen base model.

What must hold: one copy of the base weights (about half the memory of two LoRA policies); each
policy trains only its own adapter, whichever ran last; each adapter saves alone and reloads to the
same outputs; a fit checkpoints both adapters and `test` loads them back."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import yaml

from genenv_pl.losses import grpo_loss, rwr_loss
from genenv_pl.models.tiny import TinyModelSpec, build_tiny_model, train_tokenizer
from genenv_pl.policy import LoraSettings, Policy, shared_base_policies

SPEC = TinyModelSpec(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64)
LORA = LoraSettings(r=4, alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
REPO = Path(__file__).resolve().parents[1]


def _tokenizer():
    return train_tokenizer(["12+34=46", "7+8=15", "answer: 99"] * 10, vocab_size=300)


def _base(tok):
    return build_tiny_model(SPEC, vocab_size=len(tok), eos_id=tok.eos_token_id, seed=0)


def _adapter_params(r: int) -> int:
    h, kv = SPEC.hidden_size, SPEC.hidden_size // SPEC.num_heads * SPEC.num_kv_heads
    return SPEC.num_layers * r * ((h + h) + (h + kv) + (h + kv) + (h + h))


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _logits(policy: Policy, ids: torch.Tensor) -> torch.Tensor:
    policy.activate()
    with torch.no_grad():
        return policy.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


@pytest.fixture()
def pair():
    tok = _tokenizer()
    return shared_base_policies(_base(tok), tok, LORA, LoraSettings(r=2, alpha=4, target_modules=["q_proj", "v_proj"]))


def test_one_base_two_adapters_about_half_the_memory(pair):
    agent, sim = pair
    assert agent.model is sim.model
    base_n = sum(p.numel() for p in _base(agent.tokenizer).parameters())
    h, kv = SPEC.hidden_size, SPEC.hidden_size // SPEC.num_heads * SPEC.num_kv_heads
    sim_adapter = SPEC.num_layers * 2 * ((h + h) + (h + kv))  # q and v only, r = 2
    assert agent.num_parameters(trainable_only=True) == _adapter_params(4)
    assert sim.num_parameters(trainable_only=True) == sim_adapter
    # Unique tensors across both policies: one base plus the two adapters.
    unique = {id(p): p.numel() for pol in (agent, sim) for p in pol.model.parameters()}
    assert sum(unique.values()) == base_n + _adapter_params(4) + sim_adapter
    # Two separate LoRA policies hold two bases: shared base is about half of that.
    separate = 2 * base_n + _adapter_params(4) + sim_adapter
    assert sum(unique.values()) / separate < 0.55
    own_a = {id(p) for p in agent.trainable_parameters()}
    own_s = {id(p) for p in sim.trainable_parameters()}
    assert own_a and own_s and not own_a & own_s
    assert all("lora_" in n for n, p in agent.model.named_parameters() if p.requires_grad)


def _ids(policy: Policy, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from genenv_pl.batching import pack

    prompts = policy.encode(["12+34="] * len(texts))
    b = pack(prompts, policy.encode(texts), policy.pad_id)
    return b["input_ids"], b["attention_mask"], b["response_mask"]


def test_each_policy_steps_only_its_own_adapter(pair):
    """The invariant PEFT makes easy to break: set_adapter freezes the inactive adapter, and one
    optimizer per role must never touch the other role's weights or the base."""
    agent, sim = pair
    opt_a = torch.optim.AdamW(agent.trainable_parameters(), lr=1e-2)
    opt_s = torch.optim.AdamW(sim.trainable_parameters(), lr=1e-2)
    ids, attn, mask = _ids(agent, ["46", "45", "47", "12"])

    def changed(before):
        after = _snapshot(agent.model)
        return {n for n in before if not torch.equal(before[n], after[n])}

    for _ in range(2):  # alternate, as a training step does (agent, then simulator)
        before = _snapshot(agent.model)
        logp, ent = agent.token_logprobs(ids, attn, with_entropy=True, response_mask=mask)
        t = grpo_loss(logp, logp.detach(), None, ent, torch.tensor([1.0, -1.0, 0.5, -0.5]), mask, 0.2, 0.0, 0.001)
        opt_a.zero_grad(set_to_none=True)
        opt_s.zero_grad(set_to_none=True)
        t.loss.backward()
        opt_a.step()
        moved = changed(before)
        assert moved and all(".agent." in n for n in moved), moved
        assert all(p.grad is None for p in sim.trainable_parameters())

        before = _snapshot(agent.model)
        logp, _ = sim.token_logprobs(ids, attn, response_mask=mask)
        t = rwr_loss(logp, None, torch.tensor([2.0, 1.0, 0.5, 0.5]), mask, 0.0)
        opt_s.zero_grad(set_to_none=True)
        t.loss.backward()
        opt_s.step()
        moved = changed(before)
        assert moved and all(".simulator." in n for n in moved), moved


def test_adapters_give_their_own_outputs_and_the_base_is_the_reference(pair):
    agent, sim = pair
    ids = torch.tensor([agent.encode(["7+8=15"])[0]])
    base_logits = _logits(agent, ids)  # B = 0: both adapters start as the base
    with torch.no_grad():
        for n, p in agent.model.named_parameters():
            if "lora_B.agent" in n:
                p.normal_(0, 0.2)
    assert not torch.allclose(_logits(agent, ids), base_logits)
    assert torch.allclose(_logits(sim, ids), base_logits, atol=1e-6)  # switching back really switches
    agent.activate()
    with agent.model.disable_adapter():
        assert torch.allclose(agent.model(input_ids=ids).logits, base_logits, atol=1e-6)


def test_each_adapter_saves_alone_and_reloads(pair, tmp_path):
    from peft import PeftModel

    agent, sim = pair
    with torch.no_grad():
        for n, p in agent.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.2)
    ids = torch.tensor([agent.encode(["12+34=46"])[0]])
    for policy, n_params in ((agent, _adapter_params(4)), (sim, None)):
        path = tmp_path / policy.adapter
        policy.save_pretrained(str(path))
        files = {p.name for p in path.iterdir()}
        assert {"adapter_config.json", "adapter_model.safetensors"} <= files and "model.safetensors" not in files
        if n_params is not None:
            assert (path / "adapter_model.safetensors").stat().st_size < 4 * n_params + 10_000
        reloaded = Policy(PeftModel.from_pretrained(_base(policy.tokenizer), str(path)), policy.tokenizer)
        assert torch.allclose(_logits(reloaded, ids), _logits(policy, ids), atol=1e-6)


def test_bad_shared_base_configs_name_the_key(tmp_path):
    from genenv_pl.envs import make_env
    from genenv_pl.models.factory import PolicyConfig, build_shared_base

    env = make_env("arithmetic", seeds_per_level=2, eval_per_level=2)
    lora = LoraSettings(r=4)
    with pytest.raises(ValueError, match=r"model\.agent\.tiny"):
        build_shared_base(PolicyConfig(lora=lora), PolicyConfig(lora=lora, tiny=TinyModelSpec(hidden_size=64)), env, str(tmp_path))
    with pytest.raises(ValueError, match=r"model\.simulator\.lora\.r"):
        build_shared_base(PolicyConfig(lora=lora), PolicyConfig(), env, str(tmp_path))


def test_fit_and_test_with_a_shared_base(tmp_path):
    """A real Lightning fit in shared-base mode: the base stays frozen, the agent adapter learns, the
    checkpoint holds each weight once and `test` loads it back into the shared model."""
    from genenv_pl.cli import cli_main

    policy = {"model": "tiny", "tiny": {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 2,
                                        "intermediate_size": 128},
              "lora": {"r": 4, "alpha": 8}, "warm_start": {"steps": 0}}
    cfg = {
        "trainer": {"max_epochs": 2, "check_val_every_n_epoch": 1, "logger": False,
                    "callbacks": [{"class_path": "callbacks.AlphaCurriculumCallback", "init_args": {"filtering_k": 0.5}},
                                  {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                   "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True, "save_top_k": 1,
                                                 "every_n_epochs": 1, "save_on_train_epoch_end": True}}]},
        "model": {"cache_dir": str(tmp_path / "cache"), "shared_base": True, "agent": policy, "simulator": policy,
                  "agent_optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": 1.0e-2}}},
        "data": {"env_args": {"eval_per_level": 5, "seeds_per_level": 2},
                 "coevo": {"seeds_per_epoch": 4, "drop_zero_std_groups": False, "eval_batch_size": 30}},
    }
    (tmp_path / "override.yaml").write_text(yaml.safe_dump(cfg))
    os.chdir(tmp_path)
    args = ["--config", str(REPO / "configs/quickstart.yaml"), "--config", str(tmp_path / "override.yaml")]
    cli = cli_main(["fit", *args, "--trainer.logger", "false"])
    module = cli.model
    assert module.agent.model is module.simulator.model
    assert module.agent_ref is None and module.sim_ref is None  # the base (adapters disabled) is the reference
    assert module.counters["agent_updates"] >= 2
    lora_b = {n: p for n, p in module.agent.model.named_parameters() if "lora_B" in n}
    assert any(p.abs().sum() > 0 for n, p in lora_b.items() if ".agent." in n)  # B starts at 0: it learned
    assert not any(p.requires_grad for n, p in module.agent.model.named_parameters() if "lora_" not in n)
    opts = module.optimizers()
    groups = [{id(p) for g in o.optimizer.param_groups for p in g["params"]} for o in opts]
    assert groups[0] == {id(p) for p in module.agent.trainable_parameters()}
    assert groups[1] == {id(p) for p in module.simulator.trainable_parameters()}
    # The KL reference pass (adapters off) must not leave either adapter frozen (PEFT re-freezes on exit).
    assert groups[1] and all(p.requires_grad for p in module.simulator.trainable_parameters())

    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    agent_keys = {k for k in ckpt["state_dict"] if k.startswith("agent.")}
    assert any(".simulator." in k for k in agent_keys)  # one model: both adapters under each role
    expected = {n: p.detach() for n, p in module.agent.model.named_parameters()}

    test = cli_main(["test", *args, "--trainer.logger", "false", "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt")])
    loaded = dict(test.model.agent.model.named_parameters())
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[n].cpu(), expected[n].cpu()) for n in expected)
    assert test.model.simulator is None
