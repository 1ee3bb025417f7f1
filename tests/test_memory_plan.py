"""scripts/memory_plan.py: the byte accounting, table-driven, and the command line on the shipped configs.
No model is loaded (the architectures are the script's own numbers)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import memory_plan as mp  # noqa: E402

LAST_LINE = re.compile(r"^per-GPU peak: \d+\.\d GB of \d+(\.\d+)? GB \((config fits|does not fit)\)$")
ALL7 = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def cfg(**over) -> dict:
    """A one-GPU 7B config with every key the plan reads; `over` maps dotted keys to values."""
    base = {
        "trainer": {"accelerator": "gpu", "devices": 1, "precision": "bf16-mixed"},
        "model": {"agent": {"model": "Qwen/Qwen2.5-7B-Instruct", "dtype": "float32"},
                  "simulator": {"model": "Qwen/Qwen2.5-7B-Instruct", "dtype": "float32"},
                  "grpo": {"kl_coef": 0.001, "micro_batch_size": 4}, "rwr": {"kl_coef": 0.1, "kl_cap": 0.05,
                                                                              "micro_batch_size": 4},
                  "backend": "hf", "backend_args": {"max_batch_size": 32}},
        "data": {"coevo": {"max_seq_len": 4096, "group_size": 8, "agent_batch_size": 64, "sim_batch_size": 64,
                           "agent_sampling": {"max_new_tokens": 512}, "sim_sampling": {"max_new_tokens": 512}}},
    }
    for key, value in over.items():
        node = base
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return base


def lora(r=16, targets=ALL7, shared=False, dtype="bfloat16") -> dict:
    over = {"model.shared_base": shared}
    for role in ("agent", "simulator"):
        over[f"model.{role}.lora"] = {"r": r, "target_modules": targets}
        over[f"model.{role}.dtype"] = dtype
    return over


@pytest.mark.parametrize("arch, params", [(mp.QWEN25_7B, 7.6156e9), (mp.SMOLLM2_135M, 134.515e6)])
def test_architecture_parameter_counts(arch, params):
    assert arch.params() == pytest.approx(params, rel=1e-3)


def test_lora_parameter_count_is_exact():
    a = mp.SMOLLM2_135M  # h 576, kv 192, i 1536, 30 layers
    per_layer_all7 = 16 * ((576 + 576) * 2 + (576 + 192) * 2 + (576 + 1536) * 3)
    assert a.lora_params(16, ALL7) == 30 * per_layer_all7
    assert a.lora_params(8, ["q_proj"]) == 30 * 8 * (576 + 576)


@pytest.mark.parametrize("over, weights, master, grads, optim, refs, ref_root", [
    # bytes per parameter of one policy (both policies: twice); optim: of both policies together
    # full fine-tuning, bf16-mixed: fp32 masters 4 B, fp32 grads 4 B, AdamW 8 B per param; references: decoder
    # layers in bf16 (2 B), the root (embeddings, head, final norm) as the policy's fp32 (4 B)
    ({}, 0, 4, 4, 16, 2, 4),
    # 32-true: the weights are the fp32 parameters (no separate masters); references fp32
    ({"trainer.precision": "32-true"}, 4, 0, 4, 16, 4, 4),
    # bf16-true: everything in bf16
    ({"trainer.precision": "bf16-true"}, 2, 0, 2, 8, 2, 2),
    # SGD: no state without momentum (agent), one fp32 buffer with it (simulator); no KL: no references
    ({"model.agent_optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.1}},
      "model.simulator_optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.1, "momentum": 0.9}},
      "model.grpo.kl_coef": 0.0, "model.rwr.kl_coef": 0.0}, 0, 4, 4, 4, 0, 0),
])
def test_full_fine_tuning_bytes_per_parameter(over, weights, master, grads, optim, refs, ref_root):
    P = mp.QWEN25_7B.params()
    root = mp._root_params(mp.QWEN25_7B)
    st = mp.build_plan(cfg(**over), gpus=1).static
    assert st["weights"] == pytest.approx(2 * weights * P)
    assert st["master weights (fp32)"] == pytest.approx(2 * master * P)
    assert st["gradients"] == pytest.approx(2 * grads * P)
    assert st["optimizer state"] == pytest.approx(optim * P)
    assert st["reference policies"] == pytest.approx(2 * (refs * (P - root) + ref_root * root))


@pytest.mark.parametrize("shared, base_copies", [(False, 2), (True, 1)])
def test_lora_and_shared_base(shared, base_copies):
    a = mp.QWEN25_7B
    P, A = a.params(), a.lora_params(16, ALL7)
    st = mp.build_plan(cfg(**lora(shared=shared)), gpus=1).static
    assert st["weights"] == pytest.approx(base_copies * 2 * P)  # frozen bf16 base(s)
    assert st["master weights (fp32)"] == pytest.approx(2 * 4 * A)  # two fp32 adapters
    assert st["gradients"] == pytest.approx(2 * 4 * A)
    assert st["optimizer state"] == pytest.approx(2 * 8 * A)
    assert st["reference policies"] == 0  # the base with adapters off


def test_full_vs_lora_vs_shared_ordering():
    peaks = [mp.build_plan(cfg(**o), gpus=1).static_total for o in ({}, lora(), lora(shared=True))]
    assert peaks[0] > peaks[1] > peaks[2]


@pytest.mark.parametrize("n", [2, 8])
def test_fsdp_divides_the_sharded_state_by_n(n):
    fsdp = {"trainer.strategy": {"class_path": "lightning.pytorch.strategies.ModelParallelStrategy"},
            "model.grpo.micro_batch_size": None, "model.rwr.micro_batch_size": None}
    one = mp.build_plan(cfg(**fsdp), gpus=1).static
    many = mp.build_plan(cfg(**fsdp), gpus=n).static
    for key in ("weights", "master weights (fp32)", "gradients", "optimizer state", "reference policies"):
        assert many[key] == pytest.approx(one[key] / n)
    ddp = mp.build_plan(cfg(**{"trainer.strategy": "ddp_find_unused_parameters_true"}), gpus=n).static
    assert ddp == mp.build_plan(cfg(), gpus=1).static  # DDP replicates


def test_fsdp_replicas_on_gpu_with_hf_on_host_with_vllm():
    fsdp = {"trainer.strategy": {"class_path": "lightning.pytorch.strategies.ModelParallelStrategy"}}
    hf = mp.build_plan(cfg(**fsdp), gpus=8)
    assert any("replicas" in k for lines in hf.generation.values() for k in lines)
    vllm = mp.build_plan(cfg(**fsdp, **{"model.backend": "vllm", "model.backend_args": {
        "gpu_memory_utilization": 0.35, "enable_sleep_mode": True}}), gpus=8)
    assert vllm.host["generation replicas (bf16, one per policy)"] == pytest.approx(2 * 2 * mp.QWEN25_7B.params())
    assert sum(sum(v.values()) for v in vllm.generation.values()) == pytest.approx(0.35 * 80e9)


def test_kv_cache_formula():
    plan = mp.build_plan(cfg(), gpus=1)
    a = mp.QWEN25_7B
    lines = plan.generation["agent generation (hf)"]
    kv = next(v for k, v in lines.items() if k.startswith("KV cache"))
    assert kv == 2 * a.layers * a.kv_heads * a.hd * 2 * 32 * 4096


def test_gradient_checkpointing_shrinks_activations():
    off = mp.activation_bytes(mp.QWEN25_7B, 4, 4096, 512, 1, 2, ckpt=False)["stored"]
    on = mp.activation_bytes(mp.QWEN25_7B, 4, 4096, 512, 1, 2, ckpt=True)["stored"]
    assert on < off / 5


@pytest.mark.parametrize("delta, fits", [(-1.0, True), (0.0, True), (1.0, False)])
def test_fits_needs_ten_percent_headroom(delta, fits):
    plan = mp.build_plan(cfg(**lora(shared=True)), gpus=1)
    gpu_gb = plan.peak / mp.GB / 0.9 - delta  # the peak at exactly 90% of the device (delta 0)
    plan.device_gb = gpu_gb
    assert plan.fits is fits
    assert mp.render(plan).splitlines()[-1].endswith("(config fits)" if fits else "(does not fit)")


@pytest.mark.parametrize("over, key", [
    ({"trainer.precision": "16-mixed"}, "trainer.precision"),
    ({"model.agent.model": "no/such-model"}, "model.agent.model"),
    ({"data.coevo.group_size": "eight"}, "data.coevo.group_size"),
    ({"model.agent.dtype": "float8"}, "model.agent.dtype"),
    ({"model.simulator.lora": {"r": 8, "target_modules": ["qkv"]}}, "model.simulator.lora.target_modules"),
    ({"model.agent_optimizer": {"class_path": "my.Optim"}}, "model.agent_optimizer.class_path"),
])
def test_bad_key_is_named(over, key):
    with pytest.raises(mp.PlanError, match=re.escape(key)):
        mp.build_plan(cfg(**over), gpus=1)


def test_merge_and_set_overrides():
    merged = mp.deep_merge({"a": {"b": 1, "c": [1, 2]}, "d": 1}, {"a": {"c": [3]}, "e": 2})
    assert merged == {"a": {"b": 1, "c": [3]}, "d": 1, "e": 2}
    assert mp.set_key({}, "model.agent.lora.r=16") == {"model": {"agent": {"lora": {"r": 16}}}}
    assert mp.set_key({"x": 1}, "x=null") == {"x": None}


def _run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "memory_plan.py"), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args", [
    ["--config", "configs/alfworld.yaml", "--gpus", "1"],
    ["--config", "configs/alfworld.yaml", "--config", "configs/gpu/paper_8gpu.yaml", "--gpus", "8"],
    ["--config", "configs/bfcl.yaml", "--config", "configs/cpu/bfcl.yaml", "--gpus", "1", "--gpu-gb", "24"],
])
def test_command_line_on_shipped_configs(args):
    r = _run(*args)
    assert r.returncode == 0, r.stderr
    assert LAST_LINE.match(r.stdout.strip().splitlines()[-1]), r.stdout[-300:]
    assert "assumptions:" in r.stdout


@pytest.mark.parametrize("bench", ["alfworld", "api_bank", "bamboogle", "bfcl", "travelplanner"])
@pytest.mark.parametrize("gpus", [1, 8])
def test_every_gpu_config_fits_its_stated_hardware(bench, gpus):
    """Each benchmark config fits one 80 GB GPU, and with the 8-GPU overlay 8 of them, with 10% headroom."""
    overlay = ["--config", "configs/gpu/paper_8gpu.yaml"] if gpus == 8 else []
    r = _run("--config", f"configs/{bench}.yaml", *overlay, "--gpus", str(gpus))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1].endswith("of 80 GB (config fits)"), r.stdout[-2000:]


def test_sampler_logits_count_only_where_the_sampler_log_probs_are_read():
    """bf16 training recomputes the old log-probs (grpo.old_logp auto), so generation keeps no logits;
    fp32 training with the HF backend reads the sampler's log-probs, whose logits `generate` keeps."""
    def logits(plan):
        return sum(v for lines in plan.generation.values() for k, v in lines.items() if k.startswith("sampled logits"))

    assert logits(mp.build_plan(cfg(), gpus=1)) == 0
    assert logits(mp.build_plan(cfg(**{"trainer.precision": "32-true"}), gpus=1)) > 0
    assert logits(mp.build_plan(cfg(**{"model.grpo.old_logp": "rollout"}), gpus=1)) > 0


def test_command_line_bad_input_is_one_line_naming_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("trainer: {precision: bf16-mixed}\nmodel: {agent: {model: nowhere}}\n")
    r = _run("--config", str(bad), "--gpus", "1", "--seq-len", "1024")
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1 and "model.agent.model" in r.stderr
