"""Agent-update speed, side by side with TRL's GRPOTrainer, on a CPU.

    pip install -c constraints.txt -e '.[bench]'      # TRL is a bench-only extra, never a runtime dependency
    python bench/trl_speed.py                          # 1-3 minutes on 2 cores; writes bench/results/trl_speed.md

One GRPO update = rollout (G samples for each of B prompts) + rewards + loss + backward + optimizer
step. Both sides train the same tiny Qwen2 agent (built once by the project's factory and saved as an
HF folder, so both load identical weights and tokenizer) on the same B arithmetic prompts, with the same
G, max new tokens, temperature, clip, KL and entropy coefficients, gradient clipping and AdamW settings.

Ours runs the real code path: a Lightning Trainer with GenEnvModule and GenEnvDataModule (each epoch:
`train_dataloader()` -> `generate_epoch()` -> `coevo.rollout` -> `_build_steps`; then `training_step`
-> `_agent_step` -> `token_logprobs`, `_ref_logprobs`, `grpo_loss`, `Updater.apply`: backward, clip, AdamW). The
simulator is skipped (`seeds_per_epoch: 0`, `base_tasks_per_epoch: B`), so an epoch is exactly one agent
update on B tasks. TRL runs `GRPOTrainer.train()` with matching `GRPOConfig` (see `trl_config`).

Timing: a step is the time between two consecutive step ends (our `on_train_epoch_end`, TRL's
`on_step_end`), so each side's loop overhead counts; generation is timed inside it (our
`backend.generate`, TRL's `_generate_single_turn`). Both run in one process with one torch thread
(`--threads`), and the headline figure is CPU (process) time, which other jobs on a shared machine
disturb far less than wall time (also reported). The first step of each round is a warm-up and is
dropped. Rounds alternate ours / TRL; the table reports the median over all measured steps and the
ratio TRL / ours (> 1: ours is faster).

Fixed-length generation on both sides: our `SamplingParams.min_new_tokens` (or, with a backend
without it, the saved model's generation config) and TRL's `generation_kwargs` set
`min_new_tokens = max_new_tokens`, which masks EOS, so every rollout has
exactly `max_new_tokens` tokens (checked) and both sides do the same amount of work whatever the
weights would sample.

`--profile` instead profiles one of our steps with torch.profiler and prints the top operators.
"""
from __future__ import annotations

import argparse
import dataclasses
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
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
warnings.filterwarnings("ignore")

import lightning as L  # noqa: E402
import torch  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts", type=int, default=16, help="B: prompts (tasks) per update step")
    p.add_argument("--group-size", type=int, default=8, help="G: rollouts per prompt")
    p.add_argument("--max-new-tokens", type=int, default=16, help="rollout length (fixed on both sides)")
    p.add_argument("--kl-coef", type=float, default=0.02, help="our grpo.kl_coef = TRL's beta")
    p.add_argument("--entropy-coef", type=float, default=0.001)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--rounds", type=int, default=4, help="alternating rounds (ours, TRL)")
    p.add_argument("--steps", type=int, default=5, help="measured steps per round and side")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured steps at the start of each round")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads for both sides (1: no OpenMP oversubscription on a shared machine)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "trl_speed.md"), help="Markdown table ('' to skip)")
    p.add_argument("--label", default="", help="a note written under the table (e.g. which code version)")
    p.add_argument("--profile", action="store_true", help="profile one of our steps instead of benchmarking")
    p.add_argument("--no-logprob-ab", action="store_true", help="skip the large-vocabulary log-prob A/B section")
    p.add_argument("--ab-child", choices=["full", "response"], help=argparse.SUPPRESS)
    return p.parse_args(argv)


# ---- shared setup ----------------------------------------------------------------------------
def env_args(args) -> dict:
    # B distinct level-6 seed tasks: the whole seed pool is one step's prompts on both sides, and
    # every prompt has the same token length.
    return {"max_level": 6, "seed_levels": [6], "seeds_per_level": args.prompts, "eval_per_level": 1}


def build_shared_model(args, tmp: Path) -> str:
    """The quickstart's tiny agent (untrained: weights do not matter at fixed length), as an HF folder."""
    from genenv_pl.envs import make_env
    from genenv_pl.models.factory import PolicyConfig, build_policy

    env = make_env("arithmetic", **env_args(args))
    assert len(env.seed_tasks()) == args.prompts, "seed tasks collided with held-out ones; change --prompts"
    policy = build_policy(PolicyConfig(model="tiny"), "agent", env, str(tmp / "cache"))
    # Fixed-length rollouts: EOS is masked until max_new_tokens (HF's MinNewTokensLengthLogitsProcessor).
    policy.model.generation_config.min_new_tokens = args.max_new_tokens
    path = tmp / "agent"
    policy.save_pretrained(str(path))
    return str(path)


class Timer:
    """Wall and CPU (process) time between consecutive step ends, and inside generation.

    CPU time counts only this process's own work, so it is the steadier figure on a machine shared
    with other jobs (with one torch thread it is the work done; wall time adds the waiting)."""

    CLOCKS = (time.perf_counter, time.process_time)

    def __init__(self):
        self.ends: list[tuple[float, float]] = []
        self.gen: list[tuple[float, float]] = []  # generation seconds (wall, cpu), one entry per step
        self._gen_acc = [0.0, 0.0]

    def step_end(self):
        self.ends.append(tuple(c() for c in self.CLOCKS))
        self.gen.append(tuple(self._gen_acc))
        self._gen_acc = [0.0, 0.0]

    def wrap_generate(self, fn):
        def timed(*a, **k):
            t = [c() for c in self.CLOCKS]
            try:
                return fn(*a, **k)
            finally:
                for n, c in enumerate(self.CLOCKS):
                    self._gen_acc[n] += c() - t[n]
        return timed

    def steps(self, warmup: int) -> list[dict[str, float]]:
        """Measured steps (step i spans ends[i-1]..ends[i]; step 0 has no start and is never one)."""
        out = [{"wall": self.ends[i][0] - self.ends[i - 1][0], "cpu": self.ends[i][1] - self.ends[i - 1][1],
                "gen_wall": self.gen[i][0], "gen_cpu": self.gen[i][1]} for i in range(1, len(self.ends))]
        return out[max(warmup - 1, 0):]


# ---- ours ------------------------------------------------------------------------------------
def ours_round(args, model_path: str, tmp: Path, seed: int, n_steps: int, profile: bool = False):
    from callbacks import AlphaCurriculumCallback
    from genenv_pl.backends import SamplingParams
    from genenv_pl.config import CoevoConfig, GRPOConfig, RWRConfig
    from genenv_pl.datamodule import GenEnvDataModule
    from genenv_pl.models.factory import PolicyConfig
    from genenv_pl.module import GenEnvModule

    timer = Timer()
    lengths: list[int] = []
    # Fixed length: SamplingParams.min_new_tokens where the backend has it (it then overrides the
    # model's generation config), else the saved generation config's min_new_tokens applies.
    has_min = "min_new_tokens" in {f.name for f in dataclasses.fields(SamplingParams)}
    fixed_length = {"min_new_tokens": args.max_new_tokens} if has_min else {}

    class StepTimer(L.Callback):
        def on_train_epoch_end(self, trainer, module):
            groups = trainer.datamodule.last_round.groups
            lengths.extend(len(r.response_ids) for g in groups for r in g.rollouts)
            timer.step_end()

    L.seed_everything(seed, verbose=False)
    module = GenEnvModule(
        agent=PolicyConfig(model=model_path), simulator=PolicyConfig(model=model_path),
        grpo=GRPOConfig(clip_eps=0.2, kl_coef=args.kl_coef, entropy_coef=args.entropy_coef, grad_clip=1.0),
        rwr=RWRConfig(kl_coef=0.0),
        agent_optimizer=lambda params: torch.optim.AdamW(params, lr=args.lr),
        cache_dir=str(tmp / "cache"), eval_at_start=False,
    )
    module.backend.generate = timer.wrap_generate(module.backend.generate)
    coevo = CoevoConfig(seeds_per_epoch=0, base_tasks_per_epoch=args.prompts, replay_tasks_per_epoch=0,
                        group_size=args.group_size, agent_batch_size=args.prompts, drop_zero_std_groups=False,
                        agent_sampling=SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0, **fixed_length))
    dm = GenEnvDataModule(env="arithmetic", env_args=env_args(args), coevo=coevo, seed=seed)
    callbacks = [AlphaCurriculumCallback(print_every_n_epochs=0), StepTimer()]
    prof = None
    if profile:
        prof = ProfileOneStep(args.warmup)
        callbacks.append(prof)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=n_steps, reload_dataloaders_every_n_epochs=1,
                        num_sanity_val_steps=0, limit_val_batches=0, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks)
    trainer.fit(module, dm)
    assert module.counters["agent_updates"] == n_steps, module.counters
    assert set(lengths) == {args.max_new_tokens}, f"rollout lengths {sorted(set(lengths))}"
    return timer, prof


class ProfileOneStep(L.Callback):
    """torch.profiler over one full step (epoch end -> epoch end) after `warmup` steps."""

    def __init__(self, warmup: int):
        self.warmup, self.prof = max(warmup, 1), None

    def on_train_epoch_end(self, trainer, module):
        if trainer.current_epoch == self.warmup - 1:
            self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=False)
            self.prof.__enter__()
        elif trainer.current_epoch == self.warmup and self.prof is not None:
            self.prof.__exit__(None, None, None)


# ---- TRL -------------------------------------------------------------------------------------
def trl_config(args, out_dir: str, seed: int, n_steps: int):
    from trl import GRPOConfig

    B, G, L = args.prompts, args.group_size, args.max_new_tokens
    return GRPOConfig(
        output_dir=out_dir, seed=seed, max_steps=n_steps, use_cpu=True, bf16=False, fp16=False,
        # batch: B prompts x G completions per optimizer step, generated once per step and used once
        per_device_train_batch_size=B * G, num_generations=G, gradient_accumulation_steps=1,
        steps_per_generation=1, num_iterations=1, shuffle_dataset=True,
        # sampling: temperature 1, no top-p / top-k, fixed length, no vLLM
        max_completion_length=L, temperature=1.0, top_p=1.0, top_k=0, use_vllm=False,
        generation_kwargs={"min_new_tokens": L},
        # loss: clipped surrogate, token-level mean over the whole batch ("dapo" = our masked_mean),
        # k3 KL to the frozen initial model with beta = our kl_coef, entropy bonus, group-std advantages
        loss_type="dapo", epsilon=0.2, beta=args.kl_coef, entropy_coef=args.entropy_coef, scale_rewards="group",
        mask_truncated_completions=False, disable_dropout=True,
        # optimizer: AdamW as torch's defaults in ours (weight decay 0.01), constant lr, grad-norm clip 1.0
        optim="adamw_torch", learning_rate=args.lr, weight_decay=0.01, lr_scheduler_type="constant", warmup_steps=0,
        max_grad_norm=1.0,
        # no logging, saving, evaluation or progress bar inside the timed loop
        logging_strategy="no", save_strategy="no", eval_strategy="no", report_to="none", disable_tqdm=True,
        log_completions=False, dataloader_num_workers=0, model_init_kwargs={"dtype": "float32"},
    )


def trl_round(args, model_path: str, tmp: Path, seed: int, n_steps: int):
    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOTrainer

    from genenv_pl.coevo import _safe_reward
    from genenv_pl.envs import make_env
    from genenv_pl.policy import Policy

    env = make_env("arithmetic", **env_args(args))
    tasks = env.seed_tasks()
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    render = Policy(torch.nn.Identity(), tokenizer).render  # the same prompt text as ours
    rows = [{"prompt": render(env.agent_prompt(t)), "task_index": i} for i, t in enumerate(tasks)]
    lengths: list[int] = []

    def env_reward(prompts, completions, task_index, completion_ids=None, **_):
        if completion_ids is not None:
            lengths.extend(len(c) for c in completion_ids)
        return [_safe_reward(env, tasks[i], c) for i, c in zip(task_index, completions)]

    timer = Timer()

    class StepTimer(TrainerCallback):
        def on_step_end(self, *a, **k):
            timer.step_end()

    trainer = GRPOTrainer(model=model_path, reward_funcs=env_reward, args=trl_config(args, str(tmp / "trl"), seed, n_steps),
                          train_dataset=Dataset.from_list(rows), processing_class=tokenizer, callbacks=[StepTimer()])
    trainer._generate_single_turn = timer.wrap_generate(trainer._generate_single_turn)
    trainer.remove_callback(PrinterCallback)  # the end-of-training metrics dict
    trainer.train()
    assert trainer.state.global_step == n_steps
    if lengths:
        assert set(lengths) == {args.max_new_tokens}, f"TRL completion lengths {sorted(set(lengths))}"
    return timer


def check_same_inputs(args, model_path: str) -> None:
    """Both sides see the same prompt token ids (TRL tokenizes prompts itself)."""
    from transformers import AutoTokenizer

    from genenv_pl.envs import make_env
    from genenv_pl.policy import Policy

    env = make_env("arithmetic", **env_args(args))
    tok = AutoTokenizer.from_pretrained(model_path)
    policy = Policy(torch.nn.Identity(), tok)
    prompts = [policy.render(env.agent_prompt(t)) for t in env.seed_tasks()]
    assert tok(text=prompts)["input_ids"] == policy.encode(prompts), "TRL and ours tokenize prompts differently"


# ---- log-probs at a realistic vocabulary: every position vs response tokens only ----------
AB = {"vocab": 49152, "rows": 4, "prompt": 256, "response": 32}  # SmolLM2's vocabulary, a BFCL-like prompt


def logprob_ab_child(variant: str) -> None:
    """One GRPO-style forward + backward through `causal_logprobs` on a tiny Qwen2 body with a
    49k-token vocabulary; prints median seconds and the process's peak RSS as JSON."""
    import json
    import resource

    from genenv_pl.batching import pack
    from genenv_pl.losses import entropy_from_logits, masked_mean
    from genenv_pl.models.tiny import TinyModelSpec, build_tiny_model
    from genenv_pl.policy import causal_logprobs

    model = build_tiny_model(TinyModelSpec(), AB["vocab"], eos_id=0)
    g = torch.Generator().manual_seed(0)
    rows = [(torch.randint(1, AB["vocab"], (AB["prompt"],), generator=g).tolist(),
             torch.randint(1, AB["vocab"], (AB["response"],), generator=g).tolist()) for _ in range(AB["rows"])]
    b = pack([p for p, _ in rows], [r for _, r in rows], pad_id=0)
    mask = b["response_mask"]
    times = []
    for _ in range(3):
        t = time.perf_counter()
        if variant == "full":  # what token_logprobs computed before: every position, full vocabulary
            logp, ent = causal_logprobs(model, b["input_ids"], b["attention_mask"], 1.0, True)
        else:
            logp, ent = causal_logprobs(model, b["input_ids"], b["attention_mask"], 1.0, True, response_mask=mask)
        loss = -masked_mean(logp, mask) - 0.001 * masked_mean(ent, mask)
        loss.backward()
        model.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": median(times), "peak_rss_mb": peak_mb, "loss": float(loss)}))


def logprob_ab(args) -> str:
    import json
    import subprocess

    out = {}
    for variant in ("full", "response"):  # a fresh process each, so that peak RSS is its own
        res = subprocess.run([sys.executable, __file__, "--ab-child", variant, "--threads", str(args.threads)],
                             capture_output=True, text=True, check=True)
        out[variant] = json.loads(res.stdout.strip().splitlines()[-1])
    f, r = out["full"], out["response"]
    assert abs(f["loss"] - r["loss"]) <= 1e-6 * max(1.0, abs(f["loss"])), (f["loss"], r["loss"])
    T = AB["prompt"] + AB["response"]
    return "\n".join([
        f"Log-probs + entropy, forward and backward, at a realistic vocabulary ({AB['vocab']:,} tokens, SmolLM2's) on "
        f"the tiny body: {AB['rows']} rows of {AB['prompt']} prompt + {AB['response']} response tokens "
        f"(`causal_logprobs` in genenv_pl/policy.py; same loss value both ways):",
        "",
        "| log-probs computed on | seconds (median of 3) | peak RSS | logits materialized |",
        "|---|---|---|---|",
        f"| every position (before) | {f['seconds']:.3f} s | {f['peak_rss_mb']:.0f} MB | "
        f"{AB['rows']} x {T - 1} x {AB['vocab']} |",
        f"| response tokens only (now) | {r['seconds']:.3f} s | {r['peak_rss_mb']:.0f} MB | "
        f"{AB['rows']} x {AB['response']} x {AB['vocab']} |",
        f"| ratio | {f['seconds'] / r['seconds']:.1f}x faster | {f['peak_rss_mb'] / r['peak_rss_mb']:.1f}x less | |",
    ])


# ---- report ----------------------------------------------------------------------------------
def median(xs):
    return statistics.median(xs) if xs else float("nan")


def report(args, ours: list[dict], trl: list[dict], wall: float) -> str:
    import transformers
    import trl as trl_pkg

    def med(steps, key):
        return median([s[key] for s in steps])

    def row(label, key, fmt="{:.3f} s"):
        o, t = med(ours, key), med(trl, key)
        return f"| {label} | {fmt.format(o)} | {fmt.format(t)} | {t / o:.2f}x |"

    for s in ours + trl:
        s["rest_wall"], s["rest_cpu"] = s["wall"] - s["gen_wall"], s["cpu"] - s["gen_cpu"]
    n = args.steps
    per_round = [med(trl[i:i + n], "cpu") / med(ours[i:i + n], "cpu") for i in range(0, len(ours), n)]
    tokens = args.prompts * args.group_size * args.max_new_tokens
    lines = [
        f"B = {args.prompts} prompts x G = {args.group_size} rollouts x {args.max_new_tokens} new tokens "
        f"(fixed length) per update; kl_coef = beta = {args.kl_coef}; entropy_coef {args.entropy_coef}; "
        f"tiny Qwen2 agent (~0.9M params), float32, CPU, {torch.get_num_threads()} torch thread(s).",
        "",
        "| per update step (median) | ours (GenEnvModule) | TRL GRPOTrainer | TRL / ours |",
        "|---|---|---|---|",
        row("step, CPU time (rollout + loss + optimizer)", "cpu"),
        row("of which generation", "gen_cpu"),
        row("of which the rest (rewards, log-probs, KL ref, backward, step, loop)", "rest_cpu"),
        row("step, wall time", "wall"),
        f"| rollout tokens per CPU second (whole step) | {tokens / med(ours, 'cpu'):.0f} | {tokens / med(trl, 'cpu'):.0f} | |",
        "",
        f"{len(ours)} measured steps per side in {args.rounds} alternating rounds ({args.warmup} warm-up step "
        f"per round dropped); TRL / ours CPU time per round: {', '.join(f'{x:.2f}' for x in per_round)}. "
        f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl_pkg.__version__}, "
        f"{platform.processor() or platform.machine()}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
        f"at the end; the comparison ran {wall:.0f} s. Command: `python bench/trl_speed.py`.",
    ]
    if args.label:
        lines += ["", args.label]
    return "\n".join(lines)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.ab_child:
        return logprob_ab_child(args.ab_child)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="genenv-bench-") as d:
        tmp = Path(d)
        model_path = build_shared_model(args, tmp)
        check_same_inputs(args, model_path)
        if args.profile:
            _, prof = ours_round(args, model_path, tmp, 0, args.warmup + 1, profile=True)
            print(prof.prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
            return
        n = args.warmup + args.steps
        ours, trl = [], []
        for r in range(args.rounds):
            timer = ours_round(args, model_path, tmp, r, n)[0]
            ours += timer.steps(args.warmup)
            timer = trl_round(args, model_path, tmp, r, n)
            trl += timer.steps(args.warmup)
            print(f"round {r + 1}/{args.rounds}: ours {median([s['cpu'] for s in ours[-args.steps:]]):.3f} CPU s/step, "
                  f"TRL {median([s['cpu'] for s in trl[-args.steps:]]):.3f} CPU s/step", flush=True)
    text = report(args, ours, trl, time.perf_counter() - t0)
    if not args.no_logprob_ab:
        text += "\n\n" + logprob_ab(args)
    print("\n" + text)
    if args.out:
        os.makedirs(os.path.dirname(args.out), exist_ok=True)
        with open(args.out, "w") as f:
            f.write("# Agent update speed: genenv_pl vs TRL GRPOTrainer (CPU)\n\n" + text + "\n")
        print(f"\nwrote {os.path.relpath(args.out)}")


if __name__ == "__main__":
    main()
