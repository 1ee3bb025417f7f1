"""Typed configuration groups. Every field is settable from YAML or the command line."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from genenv_pl.backends.base import SamplingParams
from genenv_pl.models.factory import PolicyConfig


@dataclass
class GRPOConfig:
    """Agent update (GenEnv section 2, step 7). Defaults are the paper's."""

    clip_eps: float = 0.2
    """Clip range of the probability ratio pi/pi_old in the surrogate, [1 - eps, 1 + eps]. Paper: 0.2."""
    kl_coef: float = 0.001
    """low_var_kl (k3) to the frozen initial agent, per token; 0 drops the reference model. Paper: 0.001."""
    entropy_coef: float = 0.001
    """Weight of the entropy bonus (mean per response token, nats). Paper: 0.001."""
    grad_clip: float = 1.0
    """Largest global L2 norm of the agent's gradient per update. Paper: 1.0."""
    adv_eps: float = 1e-6
    """A_i = (r_i - mean) / (std + adv_eps) within each group of G rollouts."""
    warmup_updates: int = 0
    """Linear lr warm-up over the first agent updates (Adam's first steps are large), in optimizer steps; 0: none."""
    num_iterations: int = 1
    """Optimizer steps taken on each batch of rollouts, one after another (DeepSeekMath's GRPO iterations
    mu, TRL's num_iterations, verl's ppo_epochs). From the second on, the policy has moved away from the
    one that sampled the rollouts, and the ratio to their stored log-probs and its clip do their work.
    1 (the paper): each rollout is used once. That is on-policy only for an epoch's first agent step: an
    epoch's rollouts are all sampled up front by its starting agent, so its k-th step trains on rollouts k - 1
    updates old (the ratio and its clip account for it). More steps per rollout where sampling costs far more
    than a training step, as on a CPU."""
    old_logp: Literal["auto", "recompute", "rollout"] = "auto"
    """Where the ratio's old log-probs come from. "recompute" (verl's compute_log_prob): one no-grad
    forward pass of the agent over the epoch's rollouts before its first update, computed as the
    training step computes (same precision and kernels), so that on-policy the ratio is 1 to float
    rounding. "rollout": the log-probs the generation backend returned while sampling (no extra pass),
    which match the training forward only where both run the same arithmetic: in bf16 a KV-cached
    decode step and a full forward pass differ by a few 1e-3 in log-prob, and vLLM's kernels differ
    from HF's in any precision. "auto": "rollout" for fp32 training with the HF backend, else "recompute"."""
    micro_batch_size: int | None = None
    """Rollouts per forward/backward pass (verl's ppo_micro_batch_size_per_gpu): gradients of the
    micro-batches accumulate into one optimizer step over the whole batch (coevo.agent_batch_size
    groups), with the loss normalised as if it ran at once. A multiple of G keeps each group's shared
    prompt in one pass. None: the whole batch in one pass. With several ranks each rank splits its own
    batch, and every rank runs as many passes as the rank with the most micro-batches."""


@dataclass
class RWRConfig:
    """Simulator update (GenEnv section 2, step 8): reward-weighted regression on in-band samples."""

    rwr_lambda: float = 1.0
    """w ∝ exp(lambda * R_env), normalized to mean 1 over the epoch's update (all steps and ranks)."""
    kl_coef: float = 0.1
    """KL penalty to the initial simulator (low_var_kl per token); the paper has the penalty, 0.1 is ours."""
    kl_cap: float | None = 0.05
    """A cap on each update, as the paper has (0.05 is ours: the paper gives no value): after every
    simulator step, the mean per-token KL (low_var_kl) between the simulator before and after that step, on the response tokens of its batch (all ranks'
    batches together). A step past the cap is undone, parameters and optimizer state restored, and
    counted in sim/skipped_kl. Undone, not scaled back: under Adam the KL of a scaled step is not known
    without more forward passes (a search that could still overshoot), and the rejected step must not
    stay in Adam's moments either. The price is a copy of the trainable parameters (LoRA: the adapter)
    and their optimizer state at each step; None turns the cap, and the copy, off."""
    grad_clip: float = 1.0
    """Largest global L2 norm of the simulator's gradient per update."""
    warmup_updates: int = 0
    """Linear lr warm-up over the first simulator updates, in optimizer steps; 0: none."""
    micro_batch_size: int | None = None
    """Simulator samples per forward/backward pass; gradients accumulate into one step over the whole
    batch (coevo.sim_batch_size samples), and the KL cap measures that whole step. None: the whole
    batch in one pass. With several ranks, as for `grpo.micro_batch_size`."""
    replay_per_epoch: int = 0
    """Beyond the paper: samples drawn from D_env (with replacement, with their stored R_env) and added to
    each epoch's simulator update, in band or not this epoch; 0 (Algorithm 1): the epoch's own set only."""


@dataclass
class CurriculumConfig:
    """The alpha-Curriculum (GenEnv section 2, steps 5-6), set through `callbacks.AlphaCurriculumCallback`."""

    alpha: float = 0.5
    """Target success rate of generated tasks. Paper: 0.5."""
    beta: float = 2.0
    """Sharpness of R_env = exp(-beta (p_hat - alpha)^2); the paper leaves it open, the reference config declares 2.0."""
    filtering_k: float = 0.1
    """k_min: difficulty estimates with |p_hat - alpha| > k_min do not train the simulator. Paper: 0.1."""


@dataclass
class CoevoConfig:
    """One co-evolution epoch: seeds -> K variations -> G rollouts each -> updates."""

    seeds_per_epoch: int = 64
    """Seed tasks the simulator writes variations of each epoch, in all: with several ranks each writes for
    its share of them (so the epoch is the same whatever the number of ranks)."""
    num_generations_per_prompt: int = 4
    """K: simulator variations per seed. Paper: 4."""
    group_size: int = 8
    """G: agent rollouts per task. Paper: 8."""
    base_tasks_per_epoch: int = 0
    """Seed tasks the agent also trains on each epoch."""
    replay_tasks_per_epoch: int = 0
    """Tasks replayed from the D_train pool each epoch."""
    agent_task_budget: int | None = None
    """Stop training once the agent has rolled out this many training tasks (groups of G), summed over
    epochs and ranks: the epoch that reaches it rolls out only what is left (the rest of its tasks are
    dropped) and is the last one. Variants write different numbers of valid tasks an epoch ("static" all
    of its K per seed, "genenv" only the simulator's valid ones), so comparing them at equal epochs is
    comparing them at unequal training data; this compares them at equal data. None: stop by epochs
    only (trainer.max_epochs, which still bounds a budgeted run)."""
    agent_batch_size: int = 64
    """Tasks (groups of G rollouts) per agent optimizer step, in all (the global batch): with several ranks,
    each packs the groups of the step that it rolled out, about agent_batch_size / world size, and the
    gradient is the one of the whole batch. Paper: 64. Memory per pass: `grpo.micro_batch_size`."""
    sim_batch_size: int = 256
    """Simulator samples per simulator optimizer step, in all (the global batch), as agent_batch_size."""
    drop_zero_std_groups: bool = False
    """Skip groups with equal rewards (no advantage; saves compute)."""
    success_ema: float = 0.5
    """Smoothing of each seed's success rate shown to the simulator (weight of the old value, 0-1)."""
    variant: Literal["genenv", "genenv-random", "static", "static-paper", "offline-augment", "no-band"] = "genenv"
    """The paper's ablations, one line each: "genenv" (full method); "genenv-random" (the simulator
    generates every epoch but never learns); "static" (K variations of every seed generated once
    before training, then plain GRPO on that fixed set, seeds_per_epoch x K of its tasks an epoch: an
    equal-budget ablation); "static-paper" (the paper's GenEnv-Static: `offline_variations` variations
    of every base task written once by the initial simulator, then plain GRPO on originals + variations,
    the whole set each epoch); "offline-augment" (`augment_size` tasks written once by `augment_model`,
    then plain GRPO on base + augmentation, the whole set each epoch); "no-band" (every scored seed
    batch trains the simulator, no |p_hat - alpha| filter). The simulator never trains in the offline
    ones ("static", "static-paper", "offline-augment"), whose set is in the checkpoints. The alpha sweep
    is the curriculum callback's `alpha`."""
    offline_variations: int = 5
    """"static-paper": variations the initial simulator writes of every base (seed) task before training
    (one sampling call per task, n = this). Invalid and duplicate ones are counted and dropped; the
    fixed set is the base tasks plus the valid variations. Paper: 5 of each of 544 base samples (3,264
    tasks with the originals)."""
    augment_model: PolicyConfig | str | None = None
    """"offline-augment": the model that writes the augmentation set, as `model.simulator` is given (a
    policy config: model, gguf_file, dtype, tiny, warm_start, ...) or only its `model` (a folder, a
    package that ships weights, a hub id, "tiny"). Built once, frozen, for that generation only, then
    freed; it writes with the simulator's prompt and `sim_sampling`. None: the simulator's initial
    weights (the simulator itself, which these variants never train)."""
    augment_size: int | None = None
    """"offline-augment" (required there): valid, distinct generated tasks in the augmentation set, on
    top of the base tasks (so the fixed set is base + augment_size tasks). Written in rounds of
    `num_generations_per_prompt` variations of base tasks taken in a shuffled cycle, each round sized by
    the valid share so far, until this many are valid (invalid and duplicate ones counted and dropped);
    it stops short, with a warning, if three rounds in a row add nothing. "Nx GenEnv's data" is N times the tasks GenEnv's simulator writes over
    its run: epochs x seeds_per_epoch x K (bench/data_efficiency.py computes it for its study)."""
    offline_tasks_per_epoch: int | None = None
    """"static-paper" and "offline-augment": agent tasks of the fixed set an epoch. None (the paper's
    epochs): the whole set, shuffled, each epoch. A number: that many, taken in order from passes over
    the set (each pass a new shuffle, carried across epochs and checkpoints): every task is seen once
    per pass, and each epoch's rollouts come from the current agent (a whole-set epoch rolls out every
    task with the agent of the epoch's start, then takes all its steps). These variants train on the
    set alone: `base_tasks_per_epoch` and `replay_tasks_per_epoch` are not used (the set holds the base
    tasks; D_train replay belongs to GenEnv)."""
    difficulty_unit: Literal["seed_batch", "task"] = "seed_batch"
    """What one difficulty estimate p_hat covers. "seed_batch" (the paper): all K_valid * G rollouts of
    a seed's variations; R_env and the band apply to the whole batch, so one trivial and one
    impossible variation average to p_hat = 0.5 and both train the simulator. "task" (beyond the
    paper): each variation is scored by its own G rollouts and enters the simulator update alone."""
    agent_sampling: SamplingParams = field(default_factory=lambda: SamplingParams(max_new_tokens=256))
    """How the agent samples its G rollouts per task."""
    sim_sampling: SamplingParams = field(default_factory=lambda: SamplingParams(max_new_tokens=512))
    """How the simulator samples its K variations per seed."""
    max_seq_len: int | None = None
    """Longest prompt + response in tokens (the paper: 9,000). A task or seed whose prompt leaves less
    than max_new_tokens is skipped, counted in coevo/overlong_tasks and coevo/invalid/overlong_prompt."""
    eval_max_new_tokens: int = 256
    """Tokens the agent may write per evaluation answer (greedy, and sampled with eval_samples)."""
    eval_batch_size: int = 64
    """Evaluation tasks per batch (with eval_samples k, a sampled batch is k times as many rows)."""
    eval_samples: int = 0
    """Also answer each evaluation task this many times sampled like the rollouts (agent_sampling's
    temperature and top_p) and report the mean score, `sampled_accuracy`: the policy's expected accuracy,
    which GRPO optimises and which moves smoothly where greedy answers flip on near ties. 0: greedy only."""
    eval_samples_every: int = 1
    """During fit, the sampled answers only at the start-of-training validation and at every validation whose
    epoch count is a multiple of this times trainer.check_val_every_n_epoch (2: every other one); greedy at
    each. Sampled answers cost about eval_samples times the greedy decoding. `validate` and `test` always sample."""
    eval_limit_per_group: int | None = None
    """Evaluate only the first N tasks of each group (smoke runs)."""
    eval_episodes: int = 0
    """`test` also plays this many interactive episodes where the env has an engine (eval_batch_size at a time, in lockstep); -1: all."""
    keep_rollout_text: bool = True
    """Store rollout texts in D_train (checkpoint size grows with it)."""
