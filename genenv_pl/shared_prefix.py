"""Per-token log-probs of a packed batch whose rows share prompts (a GRPO group's G rollouts), with each
distinct prompt run once: the prompt pass keeps its KV cache, whose keys and values are repeated to the
rows, and the responses run on top. `causal_logprobs` (genenv_pl/policy.py) takes this path when a batch
has shared prompts and falls back to its packed forward where the model does not allow it."""
from __future__ import annotations

import inspect
import warnings
from typing import Any

import torch
from torch import Tensor, nn

from genenv_pl.losses import entropy_from_logits

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


def cache_kwarg(model: nn.Module) -> str:
    """The forward argument that takes a KV cache: `cache` (transformers >= 5.2x) or `past_key_values`."""
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
                   position_ids=resp_pos, use_cache=True, **{cache_kwarg(model): cache}).logits
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
