"""Hugging Face `generate` backend: samples in-process from the training model."""
from __future__ import annotations

import contextlib

import torch

from genenv_pl.backends.base import Generation, GenerationBackend, SamplingParams
from genenv_pl.policy import Policy
from genenv_pl.shared_prefix import cache_kwarg


class HFBackend(GenerationBackend):
    pads_batches = True  # left padding to the longest prompt of a chunk (`_generate_chunk`)

    def __init__(self, max_batch_size: int = 512, merge_lora: bool = True, cache: str = "auto",
                 share_prefill: bool = True, compile: bool = False):
        """
        Args:
            max_batch_size: rows per `generate` call (prompts x n); bounds activation and KV-cache memory.
            cache: the KV cache of `generate`. "static": preallocated for the call's longest prompt plus
                `max_new_tokens`, written in place at each decode step. "dynamic": transformers'
                default, which concatenates the whole cache with the new keys and values at every step,
                so each step copies the cache. "auto" (default): static where transformers attends one
                decode query to grouped key/value heads without repeating the cache per head (5.20 and
                later, `_static_cache_pays`), else dynamic; SmolLM2 on a CPU sampled 1.22x faster with
                the static cache under transformers 5.24 and slower under 5.19 (`bench/rollout_speed.py`).
                Outputs are the same up to float rounding.
            share_prefill: rows that repeat a prompt (a GRPO group's G rollouts, a seed's K simulator
                samples) compute its prefill once and copy its keys and values (`_shared_prefill`): the
                prefill costs one row per distinct prompt instead of one per sample.
            compile: let transformers `torch.compile` the forward pass of a static-cache `generate`
                (its auto-compile on CUDA). Off by default: every new prompt length compiles again.
            merge_lora: a LoRA policy samples with its adapter merged into the weights. Unmerged, every
                adapted linear layer runs three extra small ops per decode step, which on a CPU made
                SmolLM2 with rank-16 adapters on all seven projections 3-6x slower to sample. The base
                weights are copied before the merge and restored bit for bit after it (not unmerged by
                subtraction, whose rounding would drift the frozen base and KL reference over epochs):
                the copy costs the adapted layers' size in memory while sampling.
        """
        if cache not in ("auto", "static", "dynamic"):
            raise ValueError(f"model.backend_args.cache must be 'auto', 'static' or 'dynamic', not {cache!r}")
        self.max_batch_size = max_batch_size
        self.merge_lora = merge_lora
        self.cache = ("static" if _static_cache_pays() else "dynamic") if cache == "auto" else cache
        self.share_prefill = share_prefill
        self.compile = compile

    @torch.no_grad()
    def generate(self, policy: Policy, prompts: list[str], params: SamplingParams) -> list[list[Generation]]:
        model = policy.activate().model  # (shared base: this policy's adapter)
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        prompt_ids = policy.encode(prompts)
        rows = [i for i in range(len(prompts)) for _ in range(params.n)]
        results: list[list[Generation]] = [[] for _ in prompts]
        try:
            # Not into a bf16 base: W + s * B A rounds to W's 8-bit mantissa, which loses most of an adapter
            # trained at a small lr, so the sampler would lag the trained policy.
            with merged_lora(model, self.merge_lora and policy.is_lora and _fp32_base(model)):
                for start in range(0, len(rows), self.max_batch_size):
                    chunk = rows[start : start + self.max_batch_size]
                    for i, gen in zip(chunk, self._generate_chunk(policy, [prompt_ids[i] for i in chunk], params, device)):
                        results[i].append(gen)
        finally:
            model.train(was_training)
        return results

    def _generate_chunk(self, policy: Policy, ids: list[list[int]], params: SamplingParams, device) -> list[Generation]:
        T = max(len(x) for x in ids)
        pad, eos = policy.pad_id, policy.eos_id
        input_ids = torch.full((len(ids), T), pad, dtype=torch.long)
        attention_mask = torch.zeros((len(ids), T), dtype=torch.long)
        for r, x in enumerate(ids):  # left padding: generation continues at the right edge
            input_ids[r, T - len(x) :] = torch.tensor(x, dtype=torch.long)
            attention_mask[r, T - len(x) :] = 1
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        cache = self._shared_prefill(policy.model, input_ids, attention_mask, T + params.max_new_tokens)
        if cache is not None:
            cache_args = {cache_kwarg(policy.model): cache}
        else:
            cache_args = {"cache_implementation": "static"} if self.cache == "static" else {}
        if self.cache == "static":
            cache_args["disable_compile"] = not self.compile
        sample = not params.greedy
        out = policy.model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            max_new_tokens=params.max_new_tokens,
            min_new_tokens=params.min_new_tokens or None,
            do_sample=sample,
            temperature=params.temperature if sample else None,
            top_p=params.top_p if sample else None,
            top_k=0 if sample else None,
            pad_token_id=pad,
            eos_token_id=eos,
            output_logits=params.logprobs,
            return_dict_in_generate=True,
            **cache_args,
        )
        new = out.sequences[:, T:]
        temperature = params.temperature if sample else 1.0
        # Raw logits (before top-p), one [rows, V] tensor per step: scored step by step, never
        # stacked into a [rows, steps, V] copy (plus its float, scaled and log-softmax copies).
        if params.logprobs:
            logp = torch.stack([torch.log_softmax(step.float() / temperature, dim=-1).gather(-1, new[:, s, None]).squeeze(-1)
                                for s, step in enumerate(out.logits)], dim=1)
        else:
            logp = torch.full(new.shape, float("nan"))
        gens = []
        for r in range(len(ids)):
            toks = new[r].tolist()
            finished = eos in toks
            n = toks.index(eos) + 1 if finished else len(toks)
            resp = toks[:n]
            gens.append(
                Generation(
                    prompt_ids=ids[r],
                    response_ids=resp,
                    text=policy.tokenizer.decode(resp, skip_special_tokens=True),
                    logprobs=logp[r, :n].tolist(),
                    finished=finished,
                )
            )
        return gens


    def _shared_prefill(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_len: int):
        """A KV cache (of `self.cache`'s kind) holding the prompts but their last token, each distinct prompt
        computed once and its keys and values copied to every row that repeats it (a GRPO group's G
        rollouts, a seed's K simulator samples): the prefill costs one row per prompt instead of n.
        `generate` then runs the last prompt token and the decode steps on it. None when sharing is off,
        no prompt repeats or the prompts are a single token: `generate` builds its own cache."""
        from transformers import DynamicCache, StaticCache

        if not self.share_prefill or input_ids.shape[1] < 2:
            return None
        uniq, inverse = torch.unique(input_ids, dim=0, return_inverse=True)
        if len(uniq) == len(input_ids):
            return None
        first = torch.full((len(uniq),), len(inverse), dtype=torch.long, device=inverse.device)
        first = first.scatter_reduce(0, inverse, torch.arange(len(inverse), device=inverse.device), reduce="amin")
        mask = attention_mask[first]  # (rows with equal ids have equal masks: the same left padding)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        cache = StaticCache(config=base.config, max_cache_len=max_len) if self.cache == "static" else DynamicCache()
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # as `generate` numbers left-padded rows
        model(input_ids=uniq[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1], use_cache=True,
              logits_to_keep=1, **{cache_kwarg(model): cache})
        for layer in cache.layers:  # every row gets its prompt's keys and values (the copy is the prefill's cost / n)
            layer.keys, layer.values = layer.keys[inverse], layer.values[inverse]
            layer.batch_size = len(inverse)
        return cache


def _static_cache_pays() -> bool:
    """Whether this transformers attends a single decode query to grouped key/value heads without
    `repeat_kv` (its `pack_gqa`, 5.20 and later). Without it every decode step repeats the whole
    preallocated static cache per query head, which made static-cache sampling slower than dynamic."""
    try:
        from transformers.integrations import sdpa_attention
    except ImportError:
        return False
    return hasattr(sdpa_attention, "pack_gqa")


def _fp32_base(model) -> bool:
    """Whether every LoRA-adapted layer's base weight is fp32 (exact to merge into and restore)."""
    return all(m.base_layer.weight.dtype == torch.float32 for m in model.modules()
               if hasattr(m, "merge") and hasattr(m, "base_layer"))


@contextlib.contextmanager
def merged_lora(model, enabled: bool):
    """The active LoRA adapter merged into its base layers for the duration; the base weights
    restored exactly afterwards. A no-op when disabled, for a model without adapters, or when the
    weights are sharded (FSDP: DTensor), where a local merge would be wrong."""
    from torch.distributed.tensor import DTensor

    layers = [m for m in model.modules() if hasattr(m, "merge") and hasattr(m, "base_layer")] if enabled else []
    if not layers or any(isinstance(p, DTensor) for p in model.parameters()):
        yield
        return
    saved = [(m.base_layer.weight, m.base_layer.weight.detach().clone()) for m in layers]
    model.merge_adapter()
    try:
        yield
    finally:
        model.unmerge_adapter()  # PEFT's bookkeeping: the layers run the adapter again
        for weight, original in saved:
            weight.data.copy_(original)
