"""The HF backend's KV cache modes: a preallocated ("static") cache samples what transformers' default
("dynamic", concatenated at every step) does, and in both the sampling log-probs are the training
model's log-probs of the sampled tokens."""
from __future__ import annotations

import pytest
import torch

from genenv_pl.backends.base import SamplingParams
from genenv_pl.backends.hf import HFBackend
from genenv_pl.models.tiny import TinyModelSpec, build_tiny_model, train_tokenizer
from genenv_pl.policy import Policy

SPEC = TinyModelSpec(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64)
# prompts of different lengths: the batch is left-padded, as in every rollout
PROMPTS = ["12+34=", "7+8=", "answer: 99 12+34+56+7+8=", "1"]


def _policy() -> Policy:
    tok = train_tokenizer(["12+34=46", "7+8=15", "answer: 99"] * 10, vocab_size=300)
    model = build_tiny_model(SPEC, vocab_size=len(tok), eos_id=tok.eos_token_id, seed=0)
    with torch.no_grad():  # sharper than the initialization, so that greedy choices are not near-ties
        for p in model.parameters():
            p.mul_(4.0)
    return Policy(model, tok)


def test_static_and_dynamic_cache_give_the_same_greedy_tokens():
    policy = _policy()
    params = SamplingParams(max_new_tokens=24, greedy=True)
    static = HFBackend(cache="static").generate(policy, PROMPTS, params)
    dynamic = HFBackend(cache="dynamic").generate(policy, PROMPTS, params)
    assert sum(len(g[0].response_ids) for g in static) > len(PROMPTS)  # something was generated
    for a, b in zip(static, dynamic):
        assert a[0].response_ids == b[0].response_ids and a[0].finished == b[0].finished
        torch.testing.assert_close(torch.tensor(a[0].logprobs), torch.tensor(b[0].logprobs), rtol=0, atol=1e-5)


@pytest.mark.parametrize("cache", ["static", "dynamic"])
def test_sampling_logprobs_equal_the_training_models(cache):
    policy = _policy()
    params = SamplingParams(max_new_tokens=16, temperature=0.7, n=2)
    torch.manual_seed(0)
    gens = [g for row in HFBackend(cache=cache).generate(policy, PROMPTS, params) for g in row]
    for g in gens:
        ids = torch.tensor([g.prompt_ids + g.response_ids])
        mask = torch.zeros_like(ids, dtype=torch.float32)
        mask[0, len(g.prompt_ids):] = 1.0
        logp, _ = policy.token_logprobs(ids, torch.ones_like(ids), 0.7, response_mask=mask)
        torch.testing.assert_close(logp[0, len(g.prompt_ids):], torch.tensor(g.logprobs), rtol=0, atol=1e-4)


def test_auto_picks_the_static_cache_where_transformers_decodes_grouped_heads_without_copies():
    from transformers.integrations import sdpa_attention

    assert HFBackend().cache == ("static" if hasattr(sdpa_attention, "pack_gqa") else "dynamic")


def test_an_unknown_cache_names_the_key():
    with pytest.raises(ValueError, match="model.backend_args.cache"):
        HFBackend(cache="paged")


@pytest.mark.parametrize("cache", ["static", "dynamic"])
def test_repeated_prompts_are_prefilled_once_and_sample_as_without_sharing(cache):
    """n samples of a prompt (a GRPO group) share one prefill row; greedy tokens and log-probs are those
    of a run without sharing, which computes every row's prompt."""
    policy = _policy()
    rows: list[tuple[int, int]] = []
    hook = policy.model.model.register_forward_pre_hook(lambda m, a, k: rows.append(tuple(k["input_ids"].shape)),
                                                        with_kwargs=True)
    params = SamplingParams(max_new_tokens=12, greedy=True, n=3)
    shared = HFBackend(cache=cache).generate(policy, PROMPTS, params)
    prefill, after = rows[0], rows[1]
    rows.clear()
    unshared = HFBackend(cache=cache, share_prefill=False).generate(policy, PROMPTS, params)
    hook.remove()
    T = max(len(x) for x in policy.encode(PROMPTS))
    assert prefill == (len(PROMPTS), T - 1)  # one row per distinct prompt, all but its last token
    assert after == (3 * len(PROMPTS), 1)  # then every row, from the last prompt token on
    assert rows[0] == (3 * len(PROMPTS), T)  # without sharing: every row's whole prompt
    for a, b in zip(shared, unshared):
        for x, y in zip(a, b):
            assert x.response_ids == y.response_ids
            torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), rtol=0, atol=1e-5)
