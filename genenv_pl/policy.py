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
    their prompt once, see `shared_prompt_logprobs`; the packed path when that does not apply."""
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


# ---- shared prompts ---------------------------------------------------------------------
_NO_SHARED_PROMPTS: set[type] = set()  # model classes where the shared-prompt path failed once (warned)


def shared_prompt_logprobs(
    model: nn.Module, input_ids: Tensor, attention_mask: Tensor, response_mask: Tensor, temperature: float = 1.0,
    with_entropy: bool = False,
) -> tuple[Tensor, Tensor | None] | None:
    """`causal_logprobs` with `response_mask` on a packed batch ([prompt, response, pad...] rows, as
    `batching.pack` builds them), computing each distinct prompt once instead of once per row.

    Rows whose prompts (the tokens before their first response token) are identical, e.g. the G
    rollouts of a GRPO group, form a group. The distinct prompts run once, left-padded ([groups, P],
    positions from the mask), with the KV cache kept; each layer's keys and values are then repeated
    to the rows (`index_select`: gradients flow back to the prompt pass) and the responses run on top
    ([rows, R], positions continuing from each prompt's length). The first response token is scored
    by the prompt pass's last logits, the others by the response pass. Same values as the packed path
    (to float rounding), same [B, T] layout (0 outside the response).

    Returns None (the caller then runs the packed path) when no two rows share a prompt, when the
    batch is not laid out as `pack` does, or when the model does not take a DynamicCache (not an HF
    causal LM, gradient checkpointing, another cache layout): warned once per model class."""
    if type(model) in _NO_SHARED_PROMPTS or _checkpointing(model):
        return None
    layout = _prompt_groups(input_ids, attention_mask, response_mask)
    if layout is None:
        return None
    try:
        return _shared_prompt_forward(model, input_ids, layout, temperature, with_entropy)
    except (TypeError, AttributeError, ValueError, NotImplementedError, KeyError, IndexError, _NoSharedCache) as e:
        _NO_SHARED_PROMPTS.add(type(model))
        import warnings

        warnings.warn(f"[genenv] {type(model).__name__}: log-probs fall back to one full forward per row "
                      f"(shared-prompt path unavailable: {type(e).__name__}: {e})", stacklevel=2)
        return None


class _NoSharedCache(Exception):
    pass


def _checkpointing(model: nn.Module) -> bool:
    """Activation (gradient) checkpointing turns the KV cache off in HF models."""
    model = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT wrapper
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # transformers >= 5.x / older
        flag = getattr(model, name, None)
        if flag is not None:
            return bool(flag)
    return False


def _cache_kwarg(model: nn.Module) -> str:
    """The forward argument that takes a KV cache: `cache` (transformers >= 5.2x) or `past_key_values`."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT wrapper
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def _prompt_groups(input_ids: Tensor, attention_mask: Tensor, response_mask: Tensor) -> dict[str, Any] | None:
    """Group the rows of a packed batch by prompt. None when the layout is not right-padded
    [prompt, response] rows or when no two scored rows share a prompt."""
    B, T = input_ids.shape
    am = attention_mask.bool()
    scored = response_mask.bool() & am
    lengths = am.sum(1)
    cols = torch.arange(T, device=input_ids.device)
    if B == 0 or not torch.equal(am, cols[None] < lengths[:, None]):
        return None
    has = scored.any(1)
    n_p = scored.int().argmax(1)  # first scored position = prompt length
    if bool((has & (n_p == 0)).any()):  # a response with no prompt: its first token has no logits
        return None
    rows = has.nonzero().squeeze(1)
    ids, n_p_l, len_l = input_ids.tolist(), n_p.tolist(), lengths.tolist()
    groups: dict[tuple[int, ...], int] = {}
    group_index, rep = [], []
    for r in rows.tolist():
        key = tuple(ids[r][: n_p_l[r]])
        g = groups.setdefault(key, len(groups))
        if g == len(rep):
            rep.append(r)
        group_index.append(g)
    if len(groups) == len(group_index):  # nothing shared: the packed path does the same work in one pass
        return None
    dev = input_ids.device
    return {"rows": rows, "group_index": torch.tensor(group_index, device=dev), "rep": torch.tensor(rep, device=dev),
            "n_p": n_p, "lengths": lengths, "scored": scored,
            "P": max(n_p_l[r] for r in rep), "R": max(len_l[r] - n_p_l[r] for r in rows.tolist())}


def _shared_prompt_forward(model: nn.Module, input_ids: Tensor, lay: dict[str, Any], temperature: float,
                           with_entropy: bool) -> tuple[Tensor, Tensor | None]:
    from transformers.cache_utils import DynamicCache, DynamicLayer

    dev, T = input_ids.device, input_ids.shape[1]
    rows, gi, rep, P, R = lay["rows"], lay["group_index"], lay["rep"], lay["P"], lay["R"]
    # Distinct prompts, left-padded to P: [groups, P].
    p_len = lay["n_p"][rep]
    idx = torch.arange(P, device=dev)[None] - (P - p_len)[:, None]
    prompt_mask = (idx >= 0).long()
    prompt_ids = input_ids[rep].gather(1, idx.clamp(min=0))
    prompt_pos = (prompt_mask.cumsum(1) - 1).clamp(min=0)
    # Responses, right-padded to R: [rows, R]; positions continue from each prompt's length.
    n_p = lay["n_p"][rows]
    resp_pos = n_p[:, None] + torch.arange(R, device=dev)[None]
    resp_mask = (resp_pos < lay["lengths"][rows][:, None]).long()
    resp_ids = input_ids[rows].gather(1, resp_pos.clamp(max=T - 1))
    score = lay["scored"][rows].gather(1, resp_pos.clamp(max=T - 1)).bool() & resp_mask.bool()

    out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=prompt_pos, use_cache=True,
                logits_to_keep=1)
    cache = getattr(out, "cache", None)
    cache = getattr(out, "past_key_values", None) if cache is None else cache
    if not isinstance(cache, DynamicCache) or not all(type(l) is DynamicLayer for l in cache.layers):
        raise _NoSharedCache(f"prompt pass returned {type(cache).__name__}, not a DynamicCache of DynamicLayers")
    for layer in cache.layers:  # groups -> rows (autograd: the rows' gradients sum into their group's prompt)
        layer.keys, layer.values = layer.keys.index_select(0, gi), layer.values.index_select(0, gi)
    first = out.logits[:, -1].index_select(0, gi)  # [rows, V]: scores each row's first response token
    logits = model(input_ids=resp_ids, attention_mask=torch.cat([prompt_mask.index_select(0, gi), resp_mask], 1),
                   position_ids=resp_pos, use_cache=True, **{_cache_kwarg(model): cache}).logits
    if logits.shape[:2] != resp_ids.shape:
        raise _NoSharedCache(f"response pass returned logits {tuple(logits.shape)}")
    logits = torch.cat([first[:, None], logits[:, :-1]], 1)  # position j scores response token j
    picked = logits[score].float() / temperature  # [N, V], in the packed batch's row-major token order
    token_logp = torch.log_softmax(picked, dim=-1).gather(-1, resp_ids[score].unsqueeze(-1)).squeeze(-1)
    target = lay["scored"]
    logp = token_logp.new_zeros(target.shape).masked_scatter(target, token_logp)
    entropy = None
    if with_entropy:
        token_entropy = entropy_from_logits(picked)
        entropy = token_entropy.new_zeros(target.shape).masked_scatter(target, token_entropy)
    return logp, entropy
