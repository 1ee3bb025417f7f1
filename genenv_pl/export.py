"""A run's checkpoint as standard model folders (`python main.py export`, docs/export.md).

    <out>/agent/, <out>/simulator/   Hugging Face model folders with the tokenizer: what
                                     AutoModelForCausalLM and vLLM load (a LoRA policy merged in)
    <out>/<role>_adapter/            LoRA only: the adapter alone (PEFT folder, with the tokenizer)
    <out>/base/ or <out>/<role>_base/
                                     LoRA only, when the adapter's base is not the named model as
                                     published (a tiny model, GGUF weights, a warm start merged into
                                     the base): that base, once in shared-base mode
    <out>/genenv_export.json         the run's config, the checkpoint's epoch, step and metrics, and
                                     per policy its folders (`adapter_base`: the adapter's base, a
                                     folder written here or the named model)

The policies are rebuilt from the config without their warm start (the checkpoint holds its result)
and the checkpoint's weights are loaded into them strictly, so a config that does not match the run
fails instead of exporting something else.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import replace
from typing import Any

import torch

from genenv_pl.backends.hf import merged_lora
from genenv_pl.envs.base import Environment
from genenv_pl.models.factory import TRAINED_MARKER, PolicyConfig, _tiny_tokenizer, resolve_model_path
from genenv_pl.models.tiny import build_tiny_model
from genenv_pl.policy import LoraSettings, Policy, cast_parameters, shared_base_policies

MANIFEST = "genenv_export.json"


def export_checkpoint(agent_cfg: PolicyConfig, sim_cfg: PolicyConfig, shared_base: bool, env: Environment,
                      cache_dir: str, ckpt_path: str, out: str, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the checkpoint's agent and simulator under `out`; returns the manifest."""
    ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    state = ckpt["state_dict"]
    if shared_base:
        base = _skeleton(replace(agent_cfg, lora=LoraSettings(r=0)), "agent", env, cache_dir)
        policies = dict(zip(("agent", "simulator"), shared_base_policies(
            base.model, base.tokenizer, agent_cfg.lora, sim_cfg.lora, base.use_chat_template)))
        _load(policies["agent"], state, "agent.")  # one model: the agent's keys hold both adapters and the base
    else:
        policies = {role: _skeleton(cfg, role, env, cache_dir) for role, cfg in (("agent", agent_cfg), ("simulator", sim_cfg))}
        for role, policy in policies.items():
            _load(policy, state, f"{role}.")
    os.makedirs(out, exist_ok=True)
    folders: dict[str, dict[str, str]] = {}
    for role, cfg in (("agent", agent_cfg), ("simulator", sim_cfg)):
        policy = policies[role].activate()
        entry = folders[role] = {"model": role}
        if policy.is_lora:
            if _published_base(cfg, shared_base):
                base = entry["adapter_base"] = cfg.model
            else:
                entry["adapter_base"] = "base" if shared_base else f"{role}_base"
                base = os.path.abspath(os.path.join(out, entry["adapter_base"]))
                if not (shared_base and role == "simulator"):  # shared: written once, with the agent
                    _save_hf(policy, base, _plain_state_dict(policy.model))
            entry["adapter"] = f"{role}_adapter"
            _save_adapter(policy, os.path.join(out, entry["adapter"]), base)
            with merged_lora(policy.model, True):
                _save_hf(policy, os.path.join(out, role), _plain_state_dict(policy.model))
        else:
            policy.save_pretrained(os.path.join(out, role))
        # marks the folder as a trained policy: `test` evaluates it as it is, never warm-starts it again
        with open(os.path.join(out, role, TRAINED_MARKER), "w", encoding="utf-8") as f:
            json.dump({"role": role, "checkpoint": ckpt_path, "epoch": ckpt.get("epoch")}, f, indent=2, default=str)
    manifest = {
        "checkpoint": ckpt_path,
        "epoch": ckpt.get("epoch"),  # Lightning's 0-based epoch of the checkpoint
        "global_step": ckpt.get("global_step"),
        "metrics": {k: _number(v) for k, v in sorted(ckpt.get("genenv_metrics", {}).items())},
        "counters": ckpt.get("genenv_counters", {}),
        "folders": folders,
        "config": config,
    }
    with open(os.path.join(out, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2, default=str)
    return manifest


def _skeleton(cfg: PolicyConfig, role: str, env: Environment, cache_dir: str) -> Policy:
    """The policy's architecture and tokenizer, weights to be overwritten: no warm start, no cache
    entry written for a tiny model (only its tokenizer, which is built from the environment's data)."""
    if cfg.model == "tiny":
        tokenizer = _tiny_tokenizer(env, cfg.tiny, cache_dir)
        model = build_tiny_model(cfg.tiny, len(tokenizer), tokenizer.eos_token_id, seed=cfg.seed)
        policy = Policy(cast_parameters(model, getattr(torch, cfg.dtype)), tokenizer, use_chat_template=False)
    else:
        policy = Policy.from_pretrained(resolve_model_path(cfg.model), dtype=cfg.dtype, gguf_file=cfg.gguf_file)
    if cfg.lora.r > 0:
        policy.add_lora(cfg.lora)
    return policy


def _load(policy: Policy, state: dict[str, torch.Tensor], prefix: str) -> None:
    own = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    if not own:
        raise ValueError(f"the checkpoint has no {prefix.rstrip('.')} weights (an evaluation-only checkpoint?)")
    policy.load_state_dict(own, strict=True)


def _published_base(cfg: PolicyConfig, shared_base: bool) -> bool:
    """Is a LoRA adapter's base the named model exactly as it loads from its folder or the hub?
    Not for tiny and GGUF models, nor after a warm start, which with separate models is merged into
    the base (in shared-base mode it trains the adapter)."""
    return cfg.model != "tiny" and not cfg.gguf_file and (shared_base or cfg.warm_start.steps <= 0)


def _plain_state_dict(peft_model) -> dict[str, torch.Tensor]:
    """A PEFT model's base weights under the base model's own names: LoRA weights dropped,
    `base_layer` unwrapped (with the adapter merged into them inside `merged_lora`)."""
    return {k.replace(".base_layer.", "."): v for k, v in peft_model.get_base_model().state_dict().items()
            if "lora_" not in k}


def _save_hf(policy: Policy, path: str, state_dict: dict[str, torch.Tensor]) -> None:
    policy.model.get_base_model().save_pretrained(path, state_dict=state_dict)
    policy.tokenizer.save_pretrained(path)


def _save_adapter(policy: Policy, path: str, base: str) -> None:
    policy.save_weights(path)
    config = os.path.join(path, "adapter_config.json")
    with open(config, encoding="utf-8") as f:
        adapter = json.load(f)
    adapter["base_model_name_or_path"] = base
    with open(config, "w", encoding="utf-8") as f:
        json.dump(adapter, f, indent=2)
    policy.tokenizer.save_pretrained(path)


def _number(v: Any) -> float | None:
    v = float(v)
    return None if math.isnan(v) or math.isinf(v) else v
