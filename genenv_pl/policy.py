"""A policy: a Hugging Face causal LM plus its tokenizer, as one `nn.Module`.

Both GenEnv roles (agent and simulator) are policies. The wrapper renders chat messages,
computes per-token log-probs and entropies for training, and saves as a normal HF folder.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from genenv_pl.losses import entropy_from_logits
from genenv_pl.shared_prefix import shared_prompt_logprobs

__all__ = ["LoraSettings", "Policy", "causal_logprobs", "cast_parameters", "shared_base_policies", "shared_prompt_logprobs"]


@dataclass
class LoraSettings:
    """PEFT LoRA adapter on the policy. r=0 disables LoRA (full fine-tuning)."""

    r: int = 0
    """Adapter rank; 0: no LoRA, the full weights train (as in the paper)."""
    alpha: int = 16
    """LoRA scaling numerator: the update is (alpha / r) * B A."""
    dropout: float = 0.0
    """Dropout on the adapter's input (probability)."""
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Names of the linear layers that get an adapter (Qwen2/Llama naming)."""

    def peft_config(self):
        from peft import LoraConfig

        return LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                          target_modules=list(self.target_modules), task_type="CAUSAL_LM")


class Policy(nn.Module):
    def __init__(self, model: nn.Module, tokenizer: Any, use_chat_template: bool | None = None,
                 adapter: str | None = None):
        """`adapter`: shared-base mode (`shared_base_policies`), this policy's adapter in a PEFT model
        that holds one adapter per role on one frozen base; None: the model is this policy's alone."""
        super().__init__()
        self.model = model
        self.adapter = adapter
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
        from peft import get_peft_model

        self.model = get_peft_model(self.model, lora.peft_config())

    @property
    def is_lora(self) -> bool:
        return hasattr(self.model, "disable_adapter")

    def activate(self) -> "Policy":
        """Shared base: make this policy's adapter the one the model runs (PEFT runs one at a time).
        Every forward pass and generate call of a shared-base policy goes through here."""
        if self.adapter is not None and self.model.active_adapter != self.adapter:
            self.model.set_adapter(self.adapter)
            self._unfreeze_adapters()
        return self

    def _unfreeze_adapters(self) -> None:
        # PEFT's set_adapter freezes the inactive adapters; each role's optimizer owns its adapter, so
        # both stay trainable (an inactive adapter is skipped in the forward pass: it gets no gradient).
        for name, p in self.model.named_parameters():
            if "lora_" in name:
                p.requires_grad_(True)

    def trainable_parameters(self) -> list[nn.Parameter]:
        """What this policy's optimizer updates. Shared base: only its own adapter's weights."""
        if self.adapter is None:
            return [p for p in self.model.parameters() if p.requires_grad]
        return self.adapter_parameters()

    def adapter_parameters(self) -> list[nn.Parameter]:
        """The LoRA weights of this policy (shared base: of its own adapter, not the other policy's)."""
        own = f".{self.adapter}." if self.adapter is not None else ""
        return [p for name, p in self.model.named_parameters() if "lora_" in name and own in name]

    @contextlib.contextmanager
    def base_only(self):
        """The base model (LoRA adapters off): the KL reference of a LoRA policy."""
        try:
            with self.model.disable_adapter():
                yield self
        finally:
            if self.adapter is not None:  # re-enabling runs set_adapter, which freezes the other adapter again
                self._unfreeze_adapters()

    def save_pretrained(self, path: str) -> None:
        """A HF folder: the weights (`save_weights`) and the tokenizer."""
        self.save_weights(path)
        self.tokenizer.save_pretrained(path)

    def save_weights(self, path: str) -> None:
        """The model's weights as HF/PEFT save them (LoRA: the adapter only). Shared base: this
        policy's adapter, at `path` itself."""
        if self.adapter is not None:
            _save_adapter(self.model, self.adapter, path)
        else:
            self.model.save_pretrained(path)

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
        response_mask: Tensor | None = None, share_prompts: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """log p(x_t | x_<t) for every position t >= 1 (position 0 gets 0), shape [B, T].

        Logits are divided by the sampling temperature so that these match the log-probs of
        the distribution that generated the rollouts. With `response_mask` ([B, T], 1 on the
        tokens to score), only those positions are computed and the others are 0: see
        `causal_logprobs`; `share_prompts` computes rows with identical prompts' prompt once."""
        self.activate()
        return causal_logprobs(self.model, input_ids, attention_mask, temperature, with_entropy, response_mask,
                               share_prompts)

    def num_parameters(self, trainable_only: bool = False) -> int:
        """All weights the model holds (shared base: the base and both adapters), or this policy's trainable ones."""
        if trainable_only:
            return sum(p.numel() for p in self.trainable_parameters())
        return sum(p.numel() for p in self.model.parameters())


def cast_parameters(model: nn.Module, dtype: torch.dtype) -> nn.Module:
    """The model's parameters in `dtype`, its buffers as they are (in place; returns the model). Unlike
    `model.to(dtype)`, which also rounds the rotary embedding's fp32 `inv_freq` to bf16 and with it every
    position's angle, as FSDP2's MixedPrecisionPolicy and `from_pretrained(dtype=...)` do."""
    for p in model.parameters():
        p.data = p.data.to(dtype)
    return model


def shared_base_policies(model: nn.Module, tokenizer: Any, agent_lora: LoraSettings, simulator_lora: LoraSettings,
                         use_chat_template: bool | None = None) -> tuple[Policy, Policy]:
    """The agent and the simulator as two LoRA adapters ("agent", "simulator") on one frozen base
    model: one copy of the base weights instead of two. Both start as the base (LoRA's B is 0), which
    is also each one's KL reference (adapters disabled)."""
    from peft import get_peft_model

    peft_model = get_peft_model(model, agent_lora.peft_config(), adapter_name="agent")
    peft_model.add_adapter("simulator", simulator_lora.peft_config())
    agent = Policy(peft_model, tokenizer, use_chat_template, adapter="agent")
    simulator = Policy(peft_model, tokenizer, use_chat_template, adapter="simulator")
    simulator.activate()
    agent.activate()  # leaves both adapters trainable, the base frozen
    return agent, simulator


def _save_adapter(model: nn.Module, adapter: str, path: str) -> None:
    """PEFT writes a non-default adapter into `<dir>/<adapter>/`; this puts it at `path` itself."""
    import os
    import shutil
    import tempfile

    tmp = tempfile.mkdtemp(dir=os.path.dirname(os.path.abspath(path)) or None)
    try:
        model.save_pretrained(tmp, selected_adapters=[adapter])
        if os.path.isdir(path):
            shutil.rmtree(path)
        os.replace(os.path.join(tmp, adapter), path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def causal_logprobs(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, temperature: float = 1.0, with_entropy: bool = False,
    response_mask: Tensor | None = None, share_prompts: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Per-token log-probs (and entropies) of `input_ids` under a causal LM, shape [B, T], position 0 = 0.

    Without `response_mask`, every position is scored. With it, only the positions where it is 1:
    the LM head runs from the first such position on (`logits_to_keep`: the prompt's hidden states
    are never projected onto the vocabulary) and the full-vocabulary log-softmax and entropy only on
    the masked tokens. The masked values are bit for bit those of the full computation (gradients
    agree to float rounding); the others are 0 instead of the prompt's log-probs, which GRPO/RWR mask
    out anyway. This drops the [B, prompt, V] logits and their log-softmax copies, which dominate the
    memory and time of the step for long prompts and large vocabularies.

    `share_prompts` (with `response_mask`): rows with identical prompts (a GRPO group's rollouts) run
    their prompt once, see `shared_prompt_logprobs` (genenv_pl/shared_prefix.py); the packed path when that
    does not apply."""
    if share_prompts and response_mask is not None:
        shared = shared_prompt_logprobs(model, input_ids, attention_mask, response_mask, temperature, with_entropy)
        if shared is not None:
            return shared
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
