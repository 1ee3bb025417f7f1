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
        self, input_ids: Tensor, attention_mask: Tensor, temperature: float = 1.0, with_entropy: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """log p(x_t | x_<t) for every position t >= 1 (position 0 gets 0), shape [B, T].

        Logits are divided by the sampling temperature so that these match the log-probs of
        the distribution that generated the rollouts."""
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
        logits = logits[:, :-1].float() / temperature
        logp = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        logp = torch.nn.functional.pad(logp, (1, 0))
        entropy = None
        if with_entropy:
            entropy = torch.nn.functional.pad(entropy_from_logits(logits), (1, 0))
        return logp, entropy

    def num_parameters(self, trainable_only: bool = False) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad or not trainable_only)
