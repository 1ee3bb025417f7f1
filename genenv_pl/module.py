"""GenEnvModule: the agent and the simulator as two optimized policies (manual optimization).

One training step = at most one GRPO step of the agent and one RWR step of the simulator on
the batch that GenEnvDataModule prepared for it. Each step builds its loss from `losses.py` and
hands it to `Updater.apply` (`update.py`: backward, clip, step, and the rules for several ranks).
Global_step counts optimizer steps (two per training step), so the module keeps its own update
counters and training stops by epochs.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import warnings
from typing import Any, Iterator

import lightning as L
import torch
from lightning.pytorch.cli import OptimizerCallable
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.warnings import PossibleUserWarning

from genenv_pl.backends import make_backend
from genenv_pl.batching import Step, split_rows
from genenv_pl.config import GRPOConfig, RWRConfig
from genenv_pl.distributed import RankSync, compute_copy, full_state_dict, shard_module, sharding
from genenv_pl.epoch import Learner
from genenv_pl.evaluation import (EvalBatch, EvalSettings, act, answer, eval_metrics, eval_seed, format_table,
                                  in_set_order, samples_this_validation, start_line, table_scalars, test_table,
                                  write_results)
from genenv_pl.losses import GRPOTerms, RWRTerms, group_advantages, grpo_loss, low_var_kl, rwr_loss
from genenv_pl.envs.base import ConfigError
from genenv_pl.models.factory import PolicyConfig, build_policy, build_shared_base, resolve_model_path, trained_policy
from genenv_pl.policy import Policy, causal_logprobs
from genenv_pl.update import Updater
from genenv_pl.warmstart import WarmStartConfig

# val/* and eval/* are computed from every rank's rows, gathered: the same value on every rank, logged without
# sync_dist on purpose (see "evaluation" below), which Lightning would otherwise warn about once per key
warnings.filterwarnings("ignore", r"It is recommended to use `self.log\('(val|eval)/", category=PossibleUserWarning)


class GenEnvModule(L.LightningModule):
    def __init__(
        self,
        agent: PolicyConfig = PolicyConfig(),
        simulator: PolicyConfig = PolicyConfig(),
        grpo: GRPOConfig = GRPOConfig(),
        rwr: RWRConfig = RWRConfig(),
        agent_optimizer: OptimizerCallable | None = None,
        simulator_optimizer: OptimizerCallable | None = None,
        backend: str = "hf",
        backend_args: dict[str, Any] | None = None,
        cache_dir: str = ".cache/genenv_pl",
        eval_at_start: bool = True,
        shared_base: bool = False,
    ):
        """
        Args:
            agent: how to build the agent (model, LoRA, warm start).
            simulator: how to build the environment simulator (model, LoRA, warm start).
            grpo: agent update settings (GRPO).
            rwr: simulator update settings (reward-weighted regression).
            agent_optimizer: the agent's optimizer class with its args (default AdamW at the
                paper's 7B learning rate, 1e-6).
            simulator_optimizer: the simulator's optimizer class with its args (default AdamW at
                the paper's 7B learning rate, 5e-7).
            backend: generation backend, "hf" (in-process generate), "vllm", or a GenerationBackend subclass
                of your own as package.module:ClassName.
            backend_args: keyword arguments of the backend (see "Backend args" below).
            cache_dir: where tiny tokenizers and warm-started models are cached.
            eval_at_start: log val/accuracy of the starting agent before any update.
            shared_base: one frozen base model with an agent and a simulator LoRA adapter, instead
                of two models (about half the memory). Needs the same base and `lora.r` > 0 in both
                policy configs; not with FSDP.
        """
        super().__init__()
        self.save_hyperparameters(ignore=["agent_optimizer", "simulator_optimizer"])
        self.automatic_optimization = False
        self.agent_cfg = agent or PolicyConfig()
        self.sim_cfg = simulator or PolicyConfig()
        self.grpo = grpo or GRPOConfig()
        self.rwr = rwr or RWRConfig()
        if self.grpo.num_iterations < 1:
            raise ValueError(f"model.grpo.num_iterations: optimizer steps per batch of rollouts, at least 1; "
                             f"got {self.grpo.num_iterations}")
        self._agent_opt_fn = agent_optimizer
        self._sim_opt_fn = simulator_optimizer
        self.backend = make_backend(backend, **(backend_args or {}))
        self.cache_dir = cache_dir
        self.eval_at_start = eval_at_start
        self.shared_base = shared_base
        self.agent: Policy | None = None
        self.simulator: Policy | None = None
        self.agent_ref: torch.nn.Module | None = None
        self.sim_ref: torch.nn.Module | None = None
        # Own counters: global_step counts both optimizers' steps under manual optimization.
        self.start_metrics: dict[str, float] = {}  # val/* of the starting agent, scored in on_train_start
        self.counters = {"agent_updates": 0, "sim_updates": 0, "sim_skipped_kl": 0, "nonfinite_skipped": 0}
        self.test_rows: list[dict[str, Any]] = []  # the latest test's answers and scores, task by task
        self.updater = Updater(self)  # applies each role's loss; keeps several ranks in step
        self._sharded: str | None = None  # "fsdp" / "fsdp2" once the policies are sharded
        self._replicas: dict[str, Policy] = {}  # FSDP: local full copies that generation samples from
        # test / validate of a checkpoint (`main.py ... --ckpt_path`, set by the CLI): the agent is built
        # without its warm start, which the checkpoint's weights replace
        self.evaluating_checkpoint: str | None = None
        # The frozen references are rebuilt from the config (they are the starting policies), never saved.
        self.register_state_dict_post_hook(_drop_references)
        self.register_load_state_dict_post_hook(_references_not_missing)

    # ---- what the data module gets --------------------------------------------------------
    def setup(self, stage: str) -> None:
        # After the callbacks' setup (the curriculum has handed itself over) and before any model is built:
        # the data module checks here that the run has what the loop depends on.
        if stage == "fit":
            _check_precision(str(self.trainer.precision))
            self.trainer.datamodule.connect(self.learner())

    def learner(self) -> Learner:
        """What an epoch's generation needs of the two policies, in one object (`epoch.Learner`)."""
        return Learner(backend=self.backend, sampling_policy=self.for_generation, policy=lambda role: getattr(self, role),
                       advantages=self.advantages,
                       old_logprobs=self.old_logprobs if self.uses_recomputed_old_logp() else None,
                       autocast=self.autocast, grpo_iterations=self.grpo.num_iterations,
                       rwr_lambda=self.rwr.rwr_lambda, env_replay=self.rwr.replay_per_epoch,
                       frozen_policy=self.frozen_policy)

    @contextlib.contextmanager
    def frozen_policy(self, cfg: PolicyConfig | str) -> Iterator[Policy]:
        """A policy built from `cfg` (a policy config, or only its `model`) for generation alone: the model
        that writes offline-augment's set (data.coevo.augment_model). Built as a simulator is (its warm start,
        if any, trained once and cached), frozen, in eval mode, on this rank's device, and freed when the block
        ends (the backend releases it too: a vLLM engine of its own is shut down). Several ranks: rank 0 builds
        first, as `configure_model` does, so that a warm start is trained once."""
        cfg = PolicyConfig(model=cfg) if isinstance(cfg, str) else cfg
        strategy = self.trainer.strategy
        if self.trainer.global_rank != 0:
            strategy.barrier("genenv_build_augment_model")
        try:
            policy = build_policy(cfg, "simulator", self.env, self.cache_dir)
        except (OSError, ValueError) as e:
            raise ConfigError(f"data.coevo.augment_model: could not build {cfg.model!r}: {e}") from e
        finally:
            if self.trainer.global_rank == 0:
                strategy.barrier("genenv_build_augment_model")
        policy.model.requires_grad_(False)
        policy.model.eval()
        policy.model.to(self.device)
        rank_zero_info(f"[genenv] data.coevo.augment_model {cfg.model!r}: {policy.num_parameters():,} params, "
                       f"built to write the augmentation set")
        try:
            yield policy
        finally:
            self.backend.release(policy)
            policy.model = None  # the caller may still hold the policy; the weights go now
            del policy
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

    # ---- models -------------------------------------------------------------------------
    @property
    def env(self):
        return self.trainer.datamodule.env

    def configure_model(self) -> None:
        if self.agent is not None:
            return
        strategy = self.trainer.strategy
        if self.trainer.state.fn == "fit":
            _check_strategy(strategy)
        if self.shared_base and sharding(strategy):
            raise ValueError("model.shared_base is not supported with FSDP (the two policies would shard one "
                             "model twice): use DDP, or two models (shared_base: false)")
        # Several ranks: rank 0 builds first, so that a from-scratch model is warm-started once and
        # cached, and the other ranks load it from the cache instead of racing to write it.
        if self.trainer.global_rank != 0:
            strategy.barrier("genenv_build_policies")
        self._build_policies()
        if self.trainer.global_rank == 0:
            strategy.barrier("genenv_build_policies")
        _dropout_off(self)  # before sharding: the generation replicas are copies
        self._sharded = sharding(strategy)
        if self._sharded:
            self._shard_policies(strategy)

    def _shard_policies(self, strategy) -> None:
        """FSDP: the agent, the simulator and each reference model are sharded on their own, decoder
        layer by decoder layer. Generation samples from a local replica of each policy (`for_generation`)."""
        # bf16-mixed: FSDP2 keeps fp32 sharded masters, gathers the decoder layers in bf16 for compute and
        # reduces gradients in fp32 (`shard_module`); the replicas compute as the shards do (`compute_copy`).
        compute = self.compute_dtype if self._sharded == "fsdp2" and self.compute_dtype != torch.float32 else None
        for role in ("agent", "simulator"):
            policy = getattr(self, role)
            if policy is not None:
                replica = compute_copy(policy.model, compute) if compute else copy.deepcopy(policy.model)
                self._replicas[role] = Policy(replica, policy.tokenizer, policy.use_chat_template)
                policy.model = shard_module(policy.model, self._sharded, strategy, compute)
        for name in ("agent_ref", "sim_ref"):
            if getattr(self, name) is not None:
                setattr(self, name, shard_module(getattr(self, name), self._sharded, strategy, compute))

    def for_generation(self, role: str) -> Policy:
        """The policy that generation samples from: `agent` / `simulator` itself, or under FSDP a local
        replica loaded with its current full weights. Gathering them is a collective (every rank calls
        this equally often); generation itself then runs without one, as many forward passes as each
        rank's own prompts need. The replica lives on the device when the HF backend samples from it, in
        host memory when it only hands its weights to vLLM's engine (which holds its own copy)."""
        replica = self._replicas.get(role)
        if replica is None:
            return getattr(self, role)
        from genenv_pl.backends.hf import HFBackend

        replica.model.to(self.device if isinstance(self.backend, HFBackend) else "cpu")
        replica.model.load_state_dict(full_state_dict(getattr(self, role).model))
        return replica

    def _build_policies(self) -> None:
        if self.trainer.state.fn != "fit":  # evaluation needs only the agent
            self._build_agent_to_evaluate()
            return
        if self.shared_base:
            self.agent, self.simulator = build_shared_base(self.agent_cfg, self.sim_cfg, self.env, self.cache_dir)
        else:
            self.agent = build_policy(self.agent_cfg, "agent", self.env, self.cache_dir)
        if not self.shared_base:
            self.simulator = build_policy(self.sim_cfg, "simulator", self.env, self.cache_dir)
        # Frozen references for the KL terms: the starting agent and the initial simulator, kept in the
        # compute dtype (a frozen model needs no fp32 master). A LoRA policy needs no copy: its
        # reference is the base model with the adapter disabled.
        if self.grpo.kl_coef > 0 and not self.agent.is_lora:
            self.agent_ref = _frozen_copy(self.agent.model, self.compute_dtype)
        if self.rwr.kl_coef > 0 and not self.simulator.is_lora:
            self.sim_ref = _frozen_copy(self.simulator.model, self.compute_dtype)
        rank_zero_info(f"[genenv] agent: {self.agent.num_parameters():,} params "
                       f"({self.agent.num_parameters(True):,} trainable); simulator: "
                       f"{self.simulator.num_parameters():,} ({self.simulator.num_parameters(True):,} trainable)")

    def _build_agent_to_evaluate(self) -> None:
        """`test` and `validate` never train the model they are given. The rule:
        - with a checkpoint (`--ckpt_path`), the agent is built without its warm start: the checkpoint's
          weights replace all of it;
        - a trained policy folder (an export: `genenv_policy.json` in it, or the export's manifest beside
          it) is evaluated as it is, the config's warm start skipped;
        - a base model is the run's starting agent as the config defines it: its warm start is applied
          from the cache, where `fit` left it, and never trained here (not cached: a one-line error).
        One line names the model evaluated and what was applied."""
        cfg, path = self.agent_cfg, self.evaluating_checkpoint
        trained = trained_policy(resolve_model_path(cfg.model)) if cfg.model != "tiny" else None
        no_warm_start = dataclasses.replace(cfg, warm_start=WarmStartConfig())
        if path:
            how = f"weights from the checkpoint {path} (no warm start: the checkpoint holds its result)"
            cfg = no_warm_start
        elif trained is not None:
            how = "a trained policy" + (f" exported from {trained['checkpoint']}" if trained.get("checkpoint") else "")
            how += ", evaluated as it is" + (" (the config's warm start is skipped)" if cfg.warm_start.steps > 0 else "")
            cfg = dataclasses.replace(no_warm_start, gguf_file=None)  # an export is a plain HF folder
        elif cfg.warm_start.steps > 0:
            how = f"the config's warm start ({cfg.warm_start.steps} steps) from the cache"
        else:
            how = "as it is (no warm start)"
        if self.shared_base and path:  # the checkpoint's keys name both adapters on the one base
            sim = dataclasses.replace(self.sim_cfg, warm_start=WarmStartConfig())
            self.agent, _ = build_shared_base(cfg, sim, self.env, self.cache_dir, train_warm_start=False)
        else:  # (shared base without a checkpoint: the agent's adapter on its base is all there is to evaluate)
            self.agent = build_policy(cfg, "agent", self.env, self.cache_dir, train_warm_start=False)
        rank_zero_info(f"[genenv] evaluating the agent {cfg.model!r}: {how}; "
                       f"{self.agent.num_parameters():,} params")

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.counters.update(checkpoint.get("genenv_counters", {}))
        # evaluation: only the agent was built, load only its weights. (ModelParallelStrategy, FSDP2, has loaded the
        # weights itself by now and left no "state_dict" here.)
        if self.simulator is None and "state_dict" in checkpoint:
            checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k.startswith("agent.")}

    # ---- precision -----------------------------------------------------------------------
    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype forward passes compute in under the trainer's precision (bf16 for bf16-mixed and
        bf16-true); references and FSDP replicas are kept in it."""
        precision = str(getattr(self._trainer, "precision", "32-true")) if self._trainer is not None else "32-true"
        return torch.bfloat16 if precision.startswith("bf16") else torch.float16 if precision.startswith("16") else torch.float32

    def autocast(self):
        """The precision plugin's autocast (bf16-mixed, 16-mixed) for the forward passes Lightning does
        not wrap itself: generation and old log-probs in `train_dataloader`, the start-of-training
        evaluation. Other plugins: no context (their weights are in their compute dtype already)."""
        from lightning.pytorch.plugins.precision import MixedPrecision

        plugin = self.trainer.precision_plugin
        return plugin.autocast_context_manager() if isinstance(plugin, MixedPrecision) else contextlib.nullcontext()

    def uses_recomputed_old_logp(self) -> bool:
        """`grpo.old_logp` resolved: "auto" recomputes unless training runs in fp32 with the HF backend."""
        if self.grpo.old_logp != "auto":
            return self.grpo.old_logp == "recompute"
        from genenv_pl.backends.hf import HFBackend

        return not (self.compute_dtype == torch.float32 and isinstance(self.backend, HFBackend))

    @torch.no_grad()
    def old_logprobs(self, batches: list[dict[str, torch.Tensor]]) -> list[torch.Tensor]:
        """The old log-probs of the epoch's packed agent batches as the training step will compute them
        (verl's compute_log_prob): the agent before any update of the epoch, in the training precision,
        micro-batch by micro-batch. The data module calls this before the epoch's first update when
        `grpo.old_logp` resolves to "recompute". FSDP: the agent's local replica (no collective), brought
        to the device for the purpose if it waits in host memory (vLLM, which is asleep by now)."""
        policy = self._replicas.get("agent", self.agent)
        home = next(policy.model.parameters()).device
        policy.model.to(self.device)
        try:
            with self.autocast():
                return [self._old_logprobs(policy, b) for b in batches]
        finally:
            policy.model.to(home)

    def _old_logprobs(self, policy: Policy, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        out = torch.zeros(batch["input_ids"].shape, dtype=torch.float32)
        row = 0
        for mb in split_rows(batch, self.grpo.micro_batch_size):
            mb = {k: v.to(self.device) for k, v in mb.items()}
            n, width = mb["input_ids"].shape
            logp, _ = policy.token_logprobs(mb["input_ids"], mb["attention_mask"], float(mb["temperature"]),
                                            response_mask=mb["response_mask"], share_prompts=self._share_prompts)
            out[row : row + n, :width] = (logp.float() * mb["response_mask"]).cpu()
            row += n
        return out

    def configure_optimizers(self):
        def make(fn, policy: Policy, lr: float):
            params = policy.trainable_parameters()
            return fn(params) if fn is not None else torch.optim.AdamW(params, lr=lr)

        for role, key in ((self.agent, "agent"), (self.simulator, "simulator")):
            _require_fp32_masters(role, key, str(self.trainer.precision))

        opts = [make(self._agent_opt_fn, self.agent, 1e-6), make(self._sim_opt_fn, self.simulator, 5e-7)]
        scheds = [torch.optim.lr_scheduler.LambdaLR(o, _linear_warmup(w))
                  for o, w in zip(opts, (self.grpo.warmup_updates, self.rwr.warmup_updates))]
        return opts, scheds

    # ---- training -----------------------------------------------------------------------
    def training_step(self, batch: Step, batch_idx: int) -> None:
        """One GRPO step of the agent and one RWR step of the simulator, each on its part of the batch
        (either may be None). `Updater.run` also keeps several ranks in step (`genenv_pl/update.py`)."""
        reward = self._step_reward(batch["agent"])  # (a collective: every rank, every step, before the update)
        # agent updates since the policy that sampled this step's rollouts (the epoch's starting agent)
        age = float(self.counters["agent_updates"] - self._sampler_updates)
        self._terms: dict[str, Any] = {}
        if self.updater.run("agent", batch["agent"], self._agent_step):
            self._log_step({**reward, "agent/rollout_age": age})
            self._log_terms("agent")
        kept = self.updater.run("sim", batch["sim"], self._sim_step)
        if kept:
            self._log_terms("sim")
        self.trainer.datamodule.step_done(batch_idx, simulator_kept=kept)  # D_env keeps a kept step's samples

    def _log_terms(self, role: str) -> None:
        """The kept step's loss terms over its global batch: each rank's terms are its part of the step's sums
        (normalised by the whole step's counts), so the ranks' terms add up to the one-rank values. Logged
        only when the step was kept, which every rank agrees on."""
        terms = self._terms.get(role)
        names = [f.name for f in dataclasses.fields(GRPOTerms if role == "agent" else RWRTerms)]
        values = RankSync(self.trainer).sums([float(getattr(terms, n)) if terms is not None else 0.0 for n in names])
        prefix = "agent/" if role == "agent" else "sim/"
        self.log_dict({prefix + n: v for n, v in zip(names, values)}, on_step=False, on_epoch=True,
                      batch_size=int(self.updater.totals[role][0]))
        if role == "agent":
            self.log("agent/updates", float(self.counters["agent_updates"]), on_step=False, on_epoch=True,
                     reduce_fx="max", batch_size=1)

    def _step_reward(self, b: dict[str, torch.Tensor] | None) -> dict[str, float]:
        """The mean reward of the rollouts this training step's agent update learns from, over every rank's
        batch: the ranks' sums and counts are added, not their means averaged (ranks hold different numbers
        of rows). Empty when no rank has any (no update to log it at)."""
        total, n = reward_sum(b)
        sync = RankSync(self.trainer)
        total, n = sync.sum(total), sync.sum(n)
        return {"agent/step_reward": total / n} if n else {}

    def _log_step(self, metrics: dict[str, float]) -> None:
        """Per-update scalars, one point per kept update, written to the loggers directly: `self.log(on_step=True)`
        would keep only every `trainer.log_every_n_steps`-th. At the step Lightning logs the others at
        (the training step: the batch's index across epochs, one optimizer step of each policy at most), so they
        share TensorBoard's x axis. (TensorBoard logs on rank 0 alone.)"""
        if metrics:
            step = self.trainer.fit_loop.total_batch_idx
            for logger in self.loggers:
                logger.log_metrics(metrics, step=step)

    def advantages(self, rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """GRPO's group-normalized advantages of [groups, G] rewards (and which groups have zero spread).
        The data module calls this when it builds the epoch's agent batches."""
        return group_advantages(rewards, eps=self.grpo.adv_eps)

    def _agent_step(self, b: dict[str, torch.Tensor]) -> None:
        """GRPO: the clipped surrogate on the batch's advantages, the KL to the starting agent and an
        entropy bonus, on response tokens; log-probs at the temperature the rollouts were sampled at.
        One optimizer step over the batch, in micro-batches of `grpo.micro_batch_size` rollouts."""
        micro = self.updater.micro_batches("agent", b)
        # the whole step's token count (every rank's): the micro-batches' and the ranks' terms add up to the step's
        n_rows, n_tokens = self.updater.totals["agent"]
        terms: list[GRPOTerms] = []

        def losses():
            for mb in micro:
                mask, temperature = mb["response_mask"], float(mb["temperature"])
                logp, entropy = self.agent.token_logprobs(mb["input_ids"], mb["attention_mask"], temperature,
                                                          with_entropy=True, response_mask=mask,
                                                          share_prompts=self._share_prompts)
                logp_ref = self._ref_logprobs(self.agent, self.agent_ref, mb) if self.grpo.kl_coef > 0 else None
                t = grpo_loss(logp, mb["old_logp"], logp_ref, entropy, mb["advantages"], mask,
                              self.grpo.clip_eps, self.grpo.kl_coef, self.grpo.entropy_coef, n_tokens, n_rows)
                terms.append(_detached(t))
                yield t.loss

        if self.updater.apply("agent", losses()):
            self._terms["agent"] = _summed(terms)

    def _sim_step(self, b: dict[str, torch.Tensor]) -> None:
        """Reward-weighted regression: the simulator's generations, weighted by their R_env (mean-1
        weights), plus the KL to the initial simulator. One optimizer step over the batch, in
        micro-batches of `rwr.micro_batch_size` samples; a step past `rwr.kl_cap` is undone (`Updater`)."""
        micro = self.updater.micro_batches("sim", b)
        n_rows, n_tokens = self.updater.totals["sim"]  # the whole step's (every rank's), as for the agent
        terms: list[RWRTerms] = []
        before: list[torch.Tensor] = []  # each micro-batch's log-probs before the step, for the KL cap

        def losses():
            for mb in micro:
                mask = mb["response_mask"]
                logp, _ = self.simulator.token_logprobs(mb["input_ids"], mb["attention_mask"], float(mb["temperature"]),
                                                        response_mask=mask, share_prompts=self._share_prompts)
                logp_ref = self._ref_logprobs(self.simulator, self.sim_ref, mb) if self.rwr.kl_coef > 0 else None
                t = rwr_loss(logp, logp_ref, mb["weights"], mask, self.rwr.kl_coef, n_rows, n_tokens)
                terms.append(_detached(t))
                before.append(logp.detach())
                yield t.loss

        def kl_of_update() -> tuple[float, float]:
            sums = [self._kl_of_update(lp, mb) for lp, mb in zip(before, micro)]
            return sum(s for s, _ in sums), sum(n for _, n in sums)

        if self.updater.apply("sim", losses(), kl_of_update=kl_of_update):
            self._terms["sim"] = _summed(terms)

    def _kl_of_update(self, logp_before: torch.Tensor, b: dict[str, torch.Tensor]) -> tuple[float, float]:
        """KL(before || after) of the simulator, estimated (low_var_kl) on the response tokens of `b`:
        its sum over them and their number."""
        mask = b["response_mask"]
        with torch.no_grad():
            after, _ = self.simulator.token_logprobs(b["input_ids"], b["attention_mask"], float(b["temperature"]),
                                                     response_mask=mask, share_prompts=self._share_prompts)
        return float((low_var_kl(logp_before, after) * mask).sum()), float(mask.sum())

    def _ref_logprobs(self, policy: Policy, ref, b) -> torch.Tensor:
        """Reference log-probs on the response tokens (0 elsewhere; only those enter the KL)."""
        args = (b["input_ids"], b["attention_mask"], float(b["temperature"]))
        kw = {"response_mask": b["response_mask"], "share_prompts": self._share_prompts}
        with torch.no_grad():
            if ref is None:  # LoRA: the base model is the reference
                with policy.base_only():
                    return policy.token_logprobs(*args, **kw)[0]
            return causal_logprobs(ref, *args, **kw)[0]

    @property
    def _share_prompts(self) -> bool:
        """Rows with the same prompt (a GRPO group's rollouts) run it once in the training forward passes
        (`shared_prompt_logprobs`). Not under FSDP: whether a batch shares prompts decides how many
        forward passes run, and sharded forward passes must run alike on every rank (`Updater`, rule 4)."""
        return not self._sharded

    def on_train_epoch_end(self) -> None:
        # Logged every epoch so that an epoch without in-band seed batches shows as such.
        self.log("sim/updates", float(self.counters["sim_updates"]), on_step=False, on_epoch=True, reduce_fx="max", batch_size=1)
        # data.coevo.agent_task_budget: this epoch's checkpoint (ModelCheckpoint runs after this hook) is the last
        if getattr(self.trainer.datamodule, "budget_spent", False):
            self.trainer.should_stop = True

    # ---- evaluation (genenv_pl/evaluation.py) ------------------------------------------
    # Each rank answers its whole batches of the held-out set (`GenEnvDataModule._eval_loader`); at the end of
    # the evaluation the ranks gather every row, so every rank computes and logs the same metrics over the
    # whole set, once per task (no `sync_dist`: a mean of means would weigh ranks, and a group missing from
    # a rank's share would leave the ranks in different collectives).
    def _eval_settings(self) -> EvalSettings:
        return EvalSettings.of(self.trainer.datamodule.cfg)

    def _start_eval(self, sampled: bool = True) -> None:
        # FSDP: the agent's full weights are gathered once per evaluation (a collective, every rank), not per
        # batch: ranks hold different numbers of batches.
        # (in a dict: a Policy attribute would register as a submodule and enter the checkpoint)
        self._eval = {"agent": self.for_generation("agent"), "parts": [], "sampled": sampled}

    def _sampled_validation(self) -> bool:
        if self.trainer.state.fn != "fit":  # `validate` answers as it is asked
            return True
        return samples_this_validation(self.current_epoch, self.trainer.check_val_every_n_epoch,
                                       self._eval_settings().samples_every)

    def _answer(self, batch: EvalBatch) -> None:
        s = self._eval_settings()
        if not self._eval["sampled"]:
            s = dataclasses.replace(s, samples=0)
        # sampled answers (eval_samples) draw from a generator seeded by the batch, not by what ran before on
        # this rank: the same answers on any number of ranks, and the run's own random state untouched
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(eval_seed(self.trainer.datamodule.seed, batch.index))
            rows = answer(self.env, self.backend, self._eval["agent"], batch.tasks, s)
        self._eval["parts"].append((batch.index, rows))

    def _gathered_rows(self) -> list[dict[str, Any]]:
        parts, self._eval["parts"] = RankSync(self.trainer).exchange(self._eval["parts"], phase="evaluation"), []
        return in_set_order(parts)

    def _log_eval(self, rows, prefix: str) -> None:
        for name, (value, n) in eval_metrics(rows, prefix).items():
            self.log(name, value, batch_size=n, on_epoch=True)  # the same value on every rank (see above)

    def on_validation_epoch_start(self) -> None:
        self._start_eval(sampled=self._sampled_validation())

    def validation_step(self, batch: EvalBatch, batch_idx: int) -> None:
        self._answer(batch)

    def on_validation_epoch_end(self) -> None:
        self.val_rows = self._gathered_rows()  # the latest validation's answers and scores, task by task
        if self.val_rows:
            self._log_eval(self.val_rows, "val")

    def on_train_epoch_start(self) -> None:
        # The epoch's rollouts were sampled in train_dataloader(), which Lightning runs before this hook,
        # by the agent as it is now.
        self._sampler_updates = self.counters["agent_updates"]

    def on_train_start(self) -> None:
        # val/* of the starting (warm-started) agent, before any co-evolution update, on the batches and
        # ranks that the validation loop uses: the start and the later scores cover the same set.
        if not self.eval_at_start or self.counters["agent_updates"] > 0 or self.trainer.limit_val_batches == 0:
            return
        self._start_eval()
        with self.autocast():  # as the validation loop computes
            for batch in self.trainer.datamodule.val_dataloader():
                self._answer(batch)
        rows = self._gathered_rows()
        if not rows:
            return
        metrics = {name: value for name, (value, _) in eval_metrics(rows, "val").items()}
        self.start_metrics = metrics
        for logger in self.loggers:
            logger.log_metrics(metrics, step=0)
        rank_zero_info(start_line(metrics))

    def on_test_epoch_start(self) -> None:
        self._start_eval()

    def test_step(self, batch: EvalBatch, batch_idx: int) -> None:
        self._answer(batch)

    def on_test_epoch_end(self) -> None:
        self.test_rows = rows = self._gathered_rows()
        s = self._eval_settings()
        sync = RankSync(self.trainer)
        agent = self._eval["agent"]  # (FSDP: the local replica `_start_eval` loaded: no collective per turn)

        def play(conversations):
            return act(self.backend, agent, conversations, s.max_new_tokens)

        # the episodes are played once, by rank 0, and every rank reports them
        with self.autocast():  # the agent plays in the precision it was evaluated (and trained) in
            table = test_table(self.env, rows, s, play if sync.rank == 0 else None)
        episodes = sync.exchange(table.get("episodes"), phase="episodes")[0]
        if episodes is not None:
            table["episodes"] = episodes
        if rows:
            self._log_eval(rows, "eval")
        rank_zero_info(format_table(table))
        for name, value in table_scalars(table).items():
            self.log(name, value, batch_size=1)
        out_dir = self.trainer.log_dir or self.trainer.default_root_dir  # (log_dir is a collective: every rank)
        if self.trainer.is_global_zero:
            path = write_results(out_dir, self.env.name, table, rows)
            rank_zero_info(f"[genenv] wrote {path}")

    # ---- checkpoint ---------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["genenv_counters"] = dict(self.counters)
        # the latest logged scalars (the epoch's coevo/agent/sim terms, the last val/*): `export` reports them
        checkpoint["genenv_metrics"] = {k: float(v) for k, v in self.trainer.callback_metrics.items() if v.numel() == 1}



def reward_sum(b: dict[str, torch.Tensor] | None) -> tuple[float, float]:
    """(sum, number) of the rewards of an agent batch's rollouts; (0, 0) without a batch, or for a batch
    without rewards (a blank one, which runs only to join the ranks' collectives)."""
    if b is None or "rewards" not in b:
        return 0.0, 0.0
    return float(b["rewards"].double().sum()), float(b["rewards"].numel())


def _linear_warmup(steps: int):
    return lambda update: min(1.0, (update + 1) / steps) if steps > 0 else 1.0


def _check_strategy(strategy) -> None:
    """The two policies learn in separate backward passes, each leaving the other's parameters
    without a gradient: DDP has to be told (find_unused_parameters), or it fails at the second step."""
    from lightning.pytorch.strategies import DDPStrategy

    if isinstance(strategy, DDPStrategy) and not getattr(strategy, "_ddp_kwargs", {}).get("find_unused_parameters"):
        raise ValueError("GenEnv under DDP needs find_unused_parameters=True (the agent's and the simulator's updates are "
                         "separate backward passes): use --trainer.strategy ddp_find_unused_parameters_true, or "
                         "DDPStrategy with init_args {find_unused_parameters: true}")


def _dropout_off(module: torch.nn.Module) -> None:
    """Dropout off in every forward pass of co-evolution, for good. Each pass of an RL update must be the function
    that measured it: the old log-probs (the ratio's denominator, 1 on an epoch's first step), the reference
    log-probs, the simulator before and after a step (the KL cap), and generation; with dropout on, each pass
    draws its own mask and the ratio and the cap measure noise. TRL (`disable_dropout`), OpenRLHF and verl
    train their policies so too. Its probability is set to 0, not the module put in eval mode: Lightning keeps
    each module's mode as built and PEFT switches adapters' modes when it activates one. (LoRA's `dropout`
    acts in the supervised warm start, which has run by now.)"""
    for m in module.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p = 0.0


def _check_precision(precision: str) -> None:
    """fp16 mixed precision needs a gradient scaler, which the manual updates (`Updater`: finite-gradient
    check, clipping, the KL cap's undo) do not drive: refused, with the precisions that work."""
    if precision.startswith("16"):
        raise ConfigError(f"trainer.precision {precision}: fp16 training needs loss scaling, which GenEnv's two "
                          f"manual optimizers do not do; use bf16-mixed (bf16 compute, fp32 master weights; any GPU "
                          f"since Ampere) or 32-true")


def _detached(terms):
    return dataclasses.replace(terms, **{f.name: getattr(terms, f.name).detach() for f in dataclasses.fields(terms)})


def _summed(terms: list):
    """One step's loss terms from its micro-batches' (each normalised by the whole step's counts)."""
    return dataclasses.replace(terms[0], **{f.name: sum(getattr(t, f.name) for t in terms)
                                            for f in dataclasses.fields(terms[0])})


def _frozen_copy(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """The frozen reference: its decoder layers in the compute dtype (a frozen model needs no fp32
    master), its embeddings, final norm and head as the policy's, so that it computes as the policy
    does (`compute_copy`; an all-bf16 copy would carry its residual stream in bf16)."""
    ref = compute_copy(model, dtype) if dtype != torch.float32 else copy.deepcopy(model)
    ref.requires_grad_(False)
    ref.eval()
    return ref


_REFERENCES = ("agent_ref.", "sim_ref.")


def _drop_references(module, state_dict, prefix, local_metadata) -> None:
    """state_dict post-hook: the frozen reference policies are not saved (a checkpoint holds what
    training changed; restoring rebuilds the references from the config, as the first start did)."""
    for key in [k for k in state_dict if k.startswith(tuple(prefix + r for r in _REFERENCES))]:
        del state_dict[key]


def _references_not_missing(module, incompatible_keys) -> None:
    """load_state_dict post-hook: a checkpoint without reference weights loads strictly."""
    missing = incompatible_keys.missing_keys
    missing[:] = [k for k in missing if not any(r in k for r in _REFERENCES)]


def _require_fp32_masters(policy: Policy | None, role: str, precision: str) -> None:
    """Refuse training weights held in a 16-bit dtype. An AdamW step moves each weight by about lr, which
    is less than half a bf16 ulp (|w| / 2^8 to |w| / 2^9) for |w| above about 500 lr, 5e-4 at lr 1e-6: the
    update rounds away (one step at lr 1e-6 moved 2% of a 1024 x 1024 bf16 matrix with std 0.02).
    Trainable weights must be fp32 masters."""
    if policy is None:
        return
    low = sorted({str(p.dtype).removeprefix("torch.") for p in policy.trainable_parameters() if p.dtype != torch.float32})
    if low:
        raise ValueError(f"model.{role}.dtype: the {role}'s trainable weights are {', '.join(low)} (trainer.precision "
                         f"{precision}), so optimizer steps of size lr round away (no fp32 master weights). Use "
                         f"model.{role}.dtype float32 with trainer.precision bf16-mixed (bf16 compute, fp32 masters), "
                         f"or LoRA (model.{role}.lora.r > 0) over a frozen {low[0]} base, whose adapters are fp32")
