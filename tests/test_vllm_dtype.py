"""The vLLM engine's dtype is the one the policy computes in (runs without vLLM: only the choice is tested)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from genenv_pl.backends.vllm import _dtype
from genenv_pl.distributed import compute_copy


def _tiny(vocab: int) -> torch.nn.Module:
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=False)
    return Qwen2ForCausalLM(cfg)


@pytest.mark.parametrize("cast, vocab, expected", [
    (None, 256, torch.float32),  # an fp32 model
    (torch.bfloat16, 256, torch.bfloat16),  # an FSDP generation replica: bf16 layers, fp32 embeddings and head
    (torch.bfloat16, 2048, torch.bfloat16),  # even where the fp32 embeddings are larger than one layer
    ("all", 256, torch.bfloat16),  # a bf16 model
])
def test_the_engine_computes_in_the_decoder_layers_dtype(cast, vocab, expected):
    model = _tiny(vocab)
    if cast == "all":
        model = model.to(torch.bfloat16)
    elif cast is not None:
        model = compute_copy(model, cast)
        assert next(model.parameters()).dtype == torch.float32  # the first parameter (embeddings) stays fp32
    assert _dtype(SimpleNamespace(model=model, is_lora=False)) == expected
