"""A policy: a Hugging Face causal LM plus its tokenizer, as one `nn.Module`.

Both GenEnv roles (agent and simulator) are policies. The wrapper renders chat messages,
computes per-token log-probs and entropies for training, and saves as a normal HF folder.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from genenv_pl.losses import entropy_from_logits


@dataclass
class LoraSettings:
    """PEFT LoRA adapter on the policy. r=0 disables LoRA (full fine-tuning)."""

    r: int = 0
    alpha: int = 16
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


class Policy(nn.Module):
    def __init__(self, model: nn.Module, tokenizer: Any, use_chat_template: bool | None = None):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        if tokenizer.pad_token_id is None:  # many instruct tokenizers ship without a pad token
            tokenizer.pad_token = tokenizer.eos_token
        # Tiny from-scratch models have no chat template: their prompts are the raw message text.
        self.use_chat_template = bool(getattr(tokenizer, "chat_template", None)) if use_chat_template is None else use_chat_template

    # ---- construction -----------------------------------------------------------------
    @classmethod
    def from_pretrained(cls, path: str, dtype: str = "float32", gguf_file: str | None = None, lora: LoraSettings | None = None) -> "Policy":
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kwargs: dict[str, Any] = {"dtype": getattr(torch, dtype)}
        if gguf_file:
            kwargs["gguf_file"] = gguf_file
        tokenizer = AutoTokenizer.from_pretrained(path, **({"gguf_file": gguf_file} if gguf_file else {}))
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        if gguf_file:  # dequantized on load; a quantizer left attached blocks training and saving
            model.hf_quantizer = None
        policy = cls(model, tokenizer)
        if lora is not None and lora.r > 0:
            policy.add_lora(lora)
        return policy

    def add_lora(self, lora: LoraSettings) -> None:
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                            target_modules=list(lora.target_modules), task_type="CAUSAL_LM")
        self.model = get_peft_model(self.model, config)

    @property
    def is_lora(self) -> bool:
        return hasattr(self.model, "disable_adapter")

    def save_pretrained(self, path: str) -> None:
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)

    # ---- text -------------------------------------------------------------------------
    def render(self, messages: list[dict[str, str]]) -> str:
        """Chat messages -> the prompt string the model continues."""
        if self.use_chat_template:
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return "\n".join(m["content"] for m in messages)

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]

    @property
    def eos_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def pad_id(self) -> int:
        return self.tokenizer.pad_token_id

    # ---- log-probs --------------------------------------------------------------------
    def token_logprobs(
        self, input_ids: Tensor, attention_mask: Tensor, temperature: float = 1.0, with_entropy: bool = False,
        response_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """log p(x_t | x_<t) for every position t >= 1 (position 0 gets 0), shape [B, T].

        Logits are divided by the sampling temperature so that these match the log-probs of
        the distribution that generated the rollouts. With `response_mask` ([B, T], 1 on the
        tokens to score), only those positions are computed and the others are 0: see
        `causal_logprobs`."""
        return causal_logprobs(self.model, input_ids, attention_mask, temperature, with_entropy, response_mask)

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad or not trainable_only)


def causal_logprobs(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, temperature: float = 1.0, with_entropy: bool = False,
    response_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Per-token log-probs (and entropies) of `input_ids` under a causal LM, shape [B, T], position 0 = 0.

    Without `response_mask`, every position is scored. With it, only the positions where it is 1:
    the LM head runs from the first such position on (`logits_to_keep`: the prompt's hidden states
    are never projected onto the vocabulary) and the full-vocabulary log-softmax and entropy only on
    the masked tokens. The masked values are bit for bit those of the full computation (gradients
    agree to float rounding); the others are 0 instead of the prompt's log-probs, which GRPO/RWR mask
    out anyway. This drops the [B, prompt, V] logits and their log-softmax copies, which dominate the
    memory and time of the step for long prompts and large vocabularies."""
    if response_mask is None:
        logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
        logits = logits[:, :-1].float() / temperature
        logp = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        logp = torch.nn.functional.pad(logp, (1, 0))
        entropy = torch.nn.functional.pad(entropy_from_logits(logits), (1, 0)) if with_entropy else None
        return logp, entropy
    target = response_mask[:, 1:].bool()  # logits at position t score token t + 1
    cols = target.any(dim=0).nonzero()
    start = int(cols[0]) if len(cols) else target.shape[1]
    keep = input_ids.shape[1] - start  # positions start .. T-1 (the last one scores nothing)
    logits = _forward_logits(model, input_ids, attention_mask, keep)[:, -keep:-1]
    selected = target[:, start:]
    picked = logits[selected].float() / temperature  # [N, V], N = number of scored tokens
    token_logp = torch.log_softmax(picked, dim=-1).gather(-1, input_ids[:, start + 1:][selected].unsqueeze(-1)).squeeze(-1)
    logp = torch.nn.functional.pad(token_logp.new_zeros(target.shape).masked_scatter(target, token_logp), (1, 0))
    entropy = None
    if with_entropy:
        token_entropy = entropy_from_logits(picked)
        entropy = torch.nn.functional.pad(token_entropy.new_zeros(target.shape).masked_scatter(target, token_entropy), (1, 0))
    return logp, entropy


def _forward_logits(model: nn.Module, input_ids: Tensor, attention_mask: Tensor, keep: int) -> Tensor:
    """Logits of the last `keep` positions (keep >= 1). HF causal LMs (and PEFT wrappers) take
    `logits_to_keep`; a model that does not is run in full and sliced."""
    if 0 < keep < input_ids.shape[1]:
        try:
            return model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, logits_to_keep=keep).logits
        except TypeError as e:
            if "logits_to_keep" not in str(e):
                raise
    return model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
