"""LoRA policies: only the adapters train, they save small and reload to the same outputs, and the
base model with the adapter disabled is the frozen reference."""
from __future__ import annotations

import torch

from genenv_pl.models.tiny import TinyModelSpec, build_tiny_model, train_tokenizer
from genenv_pl.policy import LoraSettings, Policy

SPEC = TinyModelSpec(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64)


def _policy(r: int = 4) -> Policy:
    tok = train_tokenizer(["12+34=46", "7+8=15", "answer: 99"] * 10, vocab_size=300)
    policy = Policy(build_tiny_model(SPEC, vocab_size=len(tok), eos_id=tok.eos_token_id, seed=0), tok)
    if r:
        policy.add_lora(LoraSettings(r=r, alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    return policy


def _expected_lora_params(r: int) -> int:
    h, kv = SPEC.hidden_size, SPEC.hidden_size // SPEC.num_heads * SPEC.num_kv_heads
    # A: [r, in], B: [out, r] per adapted projection: q (h->h), k (h->kv), v (h->kv), o (h->h)
    per_layer = r * (h + h) + r * (h + kv) + r * (h + kv) + r * (h + h)
    return SPEC.num_layers * per_layer


def test_only_adapters_are_trainable():
    full = _policy(r=0)
    lora = _policy(r=4)
    assert lora.is_lora and not full.is_lora
    assert lora.num_parameters(trainable_only=True) == _expected_lora_params(4)
    assert lora.num_parameters() == full.num_parameters() + _expected_lora_params(4)
    assert all("lora_" in n for n, p in lora.model.named_parameters() if p.requires_grad)


def _logits(policy: Policy, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return policy.model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


def test_adapter_saves_small_and_reloads_to_the_same_outputs(tmp_path):
    from peft import PeftModel

    policy = _policy()
    with torch.no_grad():  # a trained adapter: non-zero B, so it changes the outputs
        for n, p in policy.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.2)
    ids = torch.tensor([policy.encode(["12+34=46"])[0]])
    before = _logits(policy, ids)
    policy.save_pretrained(str(tmp_path / "adapter"))
    files = {p.name for p in (tmp_path / "adapter").iterdir()}
    assert "adapter_config.json" in files and "adapter_model.safetensors" in files
    assert "model.safetensors" not in files  # the base weights are not duplicated
    size = (tmp_path / "adapter" / "adapter_model.safetensors").stat().st_size
    assert size < 4 * _expected_lora_params(4) + 10_000

    base = build_tiny_model(SPEC, vocab_size=len(policy.tokenizer), eos_id=policy.tokenizer.eos_token_id, seed=0)
    reloaded = Policy(PeftModel.from_pretrained(base, str(tmp_path / "adapter")), policy.tokenizer)
    assert torch.allclose(_logits(reloaded, ids), before, atol=1e-6)


def test_disabled_adapter_is_the_base_model():
    policy = _policy()
    base = _policy(r=0)
    with torch.no_grad():
        for n, p in policy.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.2)
    ids = torch.tensor([policy.encode(["7+8=15"])[0]])
    assert not torch.allclose(_logits(policy, ids), _logits(base, ids))
    with policy.model.disable_adapter():
        assert torch.allclose(_logits(policy, ids), _logits(base, ids), atol=1e-6)


def test_sampling_with_the_adapter_merged_equals_unmerged_and_restores_the_base():
    """The HF backend merges a LoRA adapter to sample (3-6x faster decode on a CPU): same greedy tokens,
    log-probs equal to float rounding, and afterwards the base weights are bit for bit what they were."""
    from genenv_pl.backends.base import SamplingParams
    from genenv_pl.backends.hf import HFBackend

    policy = _policy(r=4)
    with torch.no_grad():  # a trained adapter (B = 0 at init would make the merge a no-op)
        for n, p in policy.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    params = SamplingParams(max_new_tokens=12, greedy=True)
    prompts = ["12+34=", "7+8=", "answer:"]
    merged = HFBackend(merge_lora=True).generate(policy, prompts, params)
    assert all(torch.equal(p, before[n]) for n, p in policy.model.named_parameters())
    assert not any(getattr(m, "merged", False) for m in policy.model.modules())  # the adapter runs again
    plain = HFBackend(merge_lora=False).generate(policy, prompts, params)
    for a, b in zip(merged, plain):
        assert a[0].response_ids == b[0].response_ids
        torch.testing.assert_close(torch.tensor(a[0].logprobs), torch.tensor(b[0].logprobs), rtol=0, atol=1e-4)
    ids = torch.tensor([merged[0][0].prompt_ids + merged[0][0].response_ids])
    with policy.base_only():
        base = _logits(policy, ids)
    assert not torch.allclose(_logits(policy, ids), base)  # the adapter still counts in training forwards
