"""Hugging Face `generate` backend: samples in-process from the training model."""
from __future__ import annotations

import contextlib

import torch

from genenv_pl.backends.base import Generation, GenerationBackend, SamplingParams
from genenv_pl.policy import Policy


class HFBackend(GenerationBackend):
    def __init__(self, max_batch_size: int = 512, merge_lora: bool = True):
        """
        Args:
            max_batch_size: rows per `generate` call (prompts x n); bounds activation and KV-cache memory.
            merge_lora: a LoRA policy samples with its adapter merged into the weights. Unmerged, every
                adapted linear layer runs three extra small ops per decode step, which on a CPU made
                SmolLM2 with rank-16 adapters on all seven projections 3-6x slower to sample. The base
                weights are copied before the merge and restored bit for bit after it (not unmerged by
                subtraction, whose rounding would drift the frozen base and KL reference over epochs):
                the copy costs the adapted layers' size in memory while sampling.
        """
        self.max_batch_size = max_batch_size
        self.merge_lora = merge_lora

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
            with merged_lora(model, self.merge_lora and policy.is_lora):
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
        sample = not params.greedy
        out = policy.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            max_new_tokens=params.max_new_tokens,
            min_new_tokens=params.min_new_tokens or None,
            do_sample=sample,
            temperature=params.temperature if sample else None,
            top_p=params.top_p if sample else None,
            top_k=0 if sample else None,
            pad_token_id=pad,
            eos_token_id=eos,
            output_logits=True,
            return_dict_in_generate=True,
        )
        new = out.sequences[:, T:]
        temperature = params.temperature if sample else 1.0
        # Raw logits (before top-p), one [rows, V] tensor per step: scored step by step, never
        # stacked into a [rows, steps, V] copy (plus its float, scaled and log-softmax copies).
        logp = torch.stack([torch.log_softmax(step.float() / temperature, dim=-1).gather(-1, new[:, s, None]).squeeze(-1)
                            for s, step in enumerate(out.logits)], dim=1)
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
