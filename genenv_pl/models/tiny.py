"""Offline model factory: a tiny Qwen2-architecture model and a byte-level BPE tokenizer
trained locally, for the quickstart and tests on machines without a model hub."""
from __future__ import annotations

from dataclasses import dataclass

import torch

# Qwen2's own pre-tokenizer split. Training with it (and NFC) means AutoTokenizer, which loads a
# qwen2 folder as Qwen2Tokenizer and rebuilds this pipeline, reproduces our ids exactly.
QWEN2_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
EOS = "<|endoftext|>"
SPECIAL_TOKENS = [EOS, "<|im_start|>", "<|im_end|>"]


@dataclass
class TinyModelSpec:
    """Shape of a from-scratch Qwen2 model (used when a policy's `model` is "tiny")."""

    hidden_size: int = 128
    """Width of the residual stream."""
    num_layers: int = 4
    """Decoder layers."""
    num_heads: int = 4
    """Attention heads (head size = hidden_size / num_heads)."""
    num_kv_heads: int = 4
    """Key/value heads (fewer than num_heads: grouped-query attention)."""
    intermediate_size: int = 384
    """Width of each MLP's hidden layer."""
    max_position_embeddings: int = 512
    """Longest sequence in tokens (RoPE positions)."""
    tokenizer_vocab_size: int = 320
    """Byte-level BPE vocabulary: byte alphabet (256) + specials + a few merges."""


def train_tokenizer(corpus: list[str], vocab_size: int):
    """Byte-level BPE with Qwen2's pre-tokenizer and normalizer, trained in about a second."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)


def build_tiny_model(spec: TinyModelSpec, vocab_size: int, eos_id: int, seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)
