"""Shared-prompt log-probs (each group's prompt computed once) equal the packed path's."""
import pytest
import torch

from genenv_pl.batching import pack
from genenv_pl.losses import grpo_loss
from genenv_pl.models.tiny import TinyModelSpec, build_tiny_model
from genenv_pl.policy import causal_logprobs, shared_prompt_logprobs

V = 64


def _model(lora: bool):
    model = build_tiny_model(TinyModelSpec(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
                                           intermediate_size=64), vocab_size=V, eos_id=0, seed=0)
    model.train()
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                 task_type="CAUSAL_LM"))
        with torch.no_grad():  # non-zero adapters, so that disabling them changes the outputs
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.2)
    return model


def _batch():
    g = torch.Generator().manual_seed(1)
    rnd = lambda n: torch.randint(1, V, (n,), generator=g).tolist()  # noqa: E731
    prompts, responses = [], []
    for p_len, resp_lens in [(7, [5, 1, 9]), (3, [4, 4]), (11, [2, 6, 3, 8])]:  # different prompt and response lengths
        p = rnd(p_len)
        for n in resp_lens:
            prompts.append(p)
            responses.append(rnd(n))
    prompts.append(rnd(5))  # a row whose prompt no other row shares
    responses.append(rnd(3))
    b = pack(prompts, responses, pad_id=0, response_logprobs=[[-1.0] * len(r) for r in responses])
    b["advantages"] = torch.randn(len(prompts), generator=g)
    return b


def _loss(model, b, share, ref=None):
    mask = b["response_mask"]
    logp, ent = causal_logprobs(model, b["input_ids"], b["attention_mask"], 0.7, True, mask, share_prompts=share)
    if ref is not None:
        with torch.no_grad(), ref():
            logp_ref = causal_logprobs(model, b["input_ids"], b["attention_mask"], 0.7, False, mask, share_prompts=share)[0]
    else:
        logp_ref = logp.detach() - 0.1
    return logp, ent, logp_ref, grpo_loss(logp, b["old_logp"], logp_ref, ent, b["advantages"], mask, 0.2, 0.05, 0.01).loss


@pytest.mark.parametrize("lora", [False, True])
def test_shared_prompts_match_packed(lora):
    model = _model(lora)
    b = _batch()
    assert shared_prompt_logprobs(model, b["input_ids"], b["attention_mask"], b["response_mask"]) is not None
    ref = model.disable_adapter if lora else None
    results = []
    for share in (False, True):
        model.zero_grad(set_to_none=True)
        logp, ent, logp_ref, loss = _loss(model, b, share, ref)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        results.append((logp.detach(), ent.detach(), logp_ref, loss.detach(), grads))
    (lp0, e0, r0, l0, g0), (lp1, e1, r1, l1, g1) = results
    assert lp0.shape == lp1.shape == b["input_ids"].shape
    torch.testing.assert_close(lp1, lp0, atol=1e-5, rtol=0)
    torch.testing.assert_close(e1, e0, atol=1e-5, rtol=0)
    torch.testing.assert_close(r1, r0, atol=1e-5, rtol=0)
    assert (lp1[b["response_mask"] == 0] == 0).all()
    torch.testing.assert_close(l1, l0, atol=1e-6, rtol=0)
    if lora:
        assert not torch.allclose(r0, lp0)  # the reference really is the base model
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], atol=1e-5, rtol=1e-4, msg=n)


def test_no_shared_prompt_falls_back():
    model = _model(False)
    b = pack([[1, 2, 3], [4, 5]], [[6, 7], [8]], pad_id=0)
    assert shared_prompt_logprobs(model, b["input_ids"], b["attention_mask"], b["response_mask"]) is None
    logp, _ = causal_logprobs(model, b["input_ids"], b["attention_mask"], 1.0, False, b["response_mask"], share_prompts=True)
    ref, _ = causal_logprobs(model, b["input_ids"], b["attention_mask"], 1.0, False, b["response_mask"])
    assert torch.equal(logp, ref)
