"""GenEnvModule: the agent and the simulator as two optimized policies (manual optimization).

One training step = at most one GRPO step of the agent and one RWR step of the simulator on
the batch that GenEnvDataModule prepared for it. Global_step counts optimizer steps (two per
training step), so the module keeps its own update counters and training stops by epochs.
"""
from __future__ import annotations

import copy
import json
import math
import os
from collections import defaultdict
from typing import Any

import lightning as L
import torch
from lightning.pytorch.cli import OptimizerCallable
from lightning.pytorch.utilities import rank_zero_info

from genenv_pl.backends import SamplingParams, make_backend
from genenv_pl.config import GRPOConfig, RWRConfig
from genenv_pl.curriculum import rwr_weights
from genenv_pl.losses import grpo_loss, low_var_kl, masked_mean, rwr_loss
from genenv_pl.models.factory import PolicyConfig, build_policy
from genenv_pl.policy import Policy


class GenEnvModule(L.LightningModule):
    def __init__(
        self,
        agent: PolicyConfig | None = None,
        simulator: PolicyConfig | None = None,
        grpo: GRPOConfig | None = None,
        rwr: RWRConfig | None = None,
        agent_optimizer: OptimizerCallable | None = None,
        simulator_optimizer: OptimizerCallable | None = None,
        backend: str = "hf",
        backend_args: dict[str, Any] | None = None,
        cache_dir: str = ".cache/genenv_pl",
        eval_at_start: bool = True,
    ):
        """
        Args:
            agent, simulator: how to build each policy (model, LoRA, warm start).
            grpo: agent update settings; rwr: simulator update settings.
            agent_optimizer, simulator_optimizer: optimizer classes with their args
                (default AdamW at the paper's 7B learning rates, 1e-6 and 5e-7).
            backend: generation backend, "hf" (in-process generate) or "vllm".
            cache_dir: where tiny tokenizers and warm-started models are cached.
            eval_at_start: log val/accuracy of the starting agent before any update.
        """
        super().__init__()
        self.save_hyperparameters(ignore=["agent_optimizer", "simulator_optimizer"])
        self.automatic_optimization = False
        self.agent_cfg = agent or PolicyConfig()
        self.sim_cfg = simulator or PolicyConfig()
        self.grpo = grpo or GRPOConfig()
        self.rwr = rwr or RWRConfig()
        self._agent_opt_fn = agent_optimizer
        self._sim_opt_fn = simulator_optimizer
        self.backend = make_backend(backend, **(backend_args or {}))
        self.cache_dir = cache_dir
        self.eval_at_start = eval_at_start
        self.agent: Policy | None = None
        self.simulator: Policy | None = None
        self.agent_ref: torch.nn.Module | None = None
        self.sim_ref: torch.nn.Module | None = None
        # Own counters: global_step counts both optimizers' steps under manual optimization.
        self.counters = {"agent_updates": 0, "sim_updates": 0, "sim_skipped_kl": 0, "nonfinite_skipped": 0}
        self._test_rows: list[dict[str, Any]] = []

    # ---- models -------------------------------------------------------------------------
    @property
    def env(self):
        return self.trainer.datamodule.env

    def configure_model(self) -> None:
        if self.agent is not None:
            return
        self.agent = build_policy(self.agent_cfg, "agent", self.env, self.cache_dir)
        if self.trainer.state.fn != "fit":  # evaluation needs only the agent
            rank_zero_info(f"[genenv] agent: {self.agent.num_parameters():,} params")
            return
        self.simulator = build_policy(self.sim_cfg, "simulator", self.env, self.cache_dir)
        # Frozen references for the KL terms: the starting agent and the initial simulator. A
        # LoRA policy needs no copy: its reference is the base model with the adapter disabled.
        if self.grpo.kl_coef > 0 and not self.agent.is_lora:
            self.agent_ref = _frozen_copy(self.agent.model)
        if self.rwr.kl_coef > 0 and not self.simulator.is_lora:
            self.sim_ref = _frozen_copy(self.simulator.model)
        rank_zero_info(f"[genenv] agent: {self.agent.num_parameters():,} params "
                       f"({self.agent.num_parameters(True):,} trainable); simulator: "
                       f"{self.simulator.num_parameters():,} ({self.simulator.num_parameters(True):,} trainable)")

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.counters.update(checkpoint.get("genenv_counters", {}))
        if self.simulator is None:  # evaluation: only the agent was built, load only its weights
            checkpoint["state_dict"] = {k: v for k, v in checkpoint["state_dict"].items() if k.startswith("agent.")}

    def configure_optimizers(self):
        def make(fn, policy: Policy, lr: float):
            params = [p for p in policy.parameters() if p.requires_grad]
            return fn(params) if fn is not None else torch.optim.AdamW(params, lr=lr)

        opts = [make(self._agent_opt_fn, self.agent, 1e-6), make(self._sim_opt_fn, self.simulator, 5e-7)]
        scheds = [torch.optim.lr_scheduler.LambdaLR(o, _linear_warmup(w))
                  for o, w in zip(opts, (self.grpo.warmup_updates, self.rwr.warmup_updates))]
        return opts, scheds

    # ---- training -----------------------------------------------------------------------
    def training_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        opt_agent, opt_sim = self.optimizers()
        temp = self.trainer.datamodule.cfg.agent_sampling.temperature
        if batch["agent"] is not None:
            self._agent_step(batch["agent"], opt_agent, temp)
        if batch["sim"] is not None:
            self._sim_step(batch["sim"], opt_sim, self.trainer.datamodule.cfg.sim_sampling.temperature)

    def _agent_step(self, b: dict[str, torch.Tensor], opt, temperature: float) -> None:
        mask = b["response_mask"]
        logp, entropy = self.agent.token_logprobs(b["input_ids"], b["attention_mask"], temperature, with_entropy=True)
        logp_ref = self._ref_logprobs(self.agent, self.agent_ref, b, temperature) if self.grpo.kl_coef > 0 else None
        t = grpo_loss(logp, b["old_logp"], logp_ref, entropy, b["advantages"], mask,
                      self.grpo.clip_eps, self.grpo.kl_coef, self.grpo.entropy_coef)
        if not self._optimize("agent", t.loss, opt, self.grpo.grad_clip, scheduler=0):
            return
        n = int(b["input_ids"].shape[0])
        self.log_dict({"agent/loss": t.loss.detach(), "agent/pg_loss": t.pg_loss.detach(), "agent/kl": t.kl.detach(),
                       "agent/entropy": t.entropy.detach(), "agent/clip_frac": t.clip_frac},
                      on_step=False, on_epoch=True, batch_size=n)
        self.log("agent/updates", float(self.counters["agent_updates"]), on_step=False, on_epoch=True, reduce_fx="max", batch_size=1)

    def _sim_step(self, b: dict[str, torch.Tensor], opt, temperature: float) -> None:
        mask = b["response_mask"]
        logp, _ = self.simulator.token_logprobs(b["input_ids"], b["attention_mask"], temperature)
        # KL per update, measured against the policy that generated these samples this epoch.
        update_kl = masked_mean(low_var_kl(b["old_logp"], logp.detach()), mask)
        self.log("sim/update_kl", update_kl, on_step=False, on_epoch=True, batch_size=1)
        if update_kl > self.rwr.kl_cap:
            self.counters["sim_skipped_kl"] += 1
            self.log("sim/skipped_kl", float(self.counters["sim_skipped_kl"]), on_step=False, on_epoch=True, reduce_fx="max",
                     batch_size=1)
            return
        logp_ref = self._ref_logprobs(self.simulator, self.sim_ref, b, temperature) if self.rwr.kl_coef > 0 else None
        t = rwr_loss(logp, logp_ref, rwr_weights(b["r_env"], self.rwr.rwr_lambda), mask, self.rwr.kl_coef)
        if not self._optimize("sim", t.loss, opt, self.rwr.grad_clip, scheduler=1):
            return
        self.log_dict({"sim/loss": t.loss.detach(), "sim/nll": t.nll.detach(), "sim/kl": t.kl.detach()},
                      on_step=False, on_epoch=True, batch_size=int(b["input_ids"].shape[0]))

    def _optimize(self, who: str, loss: torch.Tensor, opt, grad_clip: float, scheduler: int) -> bool:
        """One optimizer step on `loss`; a non-finite loss skips the step (counted, logged)."""
        if not torch.isfinite(loss):
            self._skip_nonfinite(who)
            return False
        opt.zero_grad(set_to_none=True)
        self.manual_backward(loss)
        self.clip_gradients(opt, gradient_clip_val=grad_clip, gradient_clip_algorithm="norm")
        opt.step()
        self.lr_schedulers()[scheduler].step()
        self.counters[f"{who}_updates"] += 1
        return True

    def _ref_logprobs(self, policy: Policy, ref, b, temperature: float) -> torch.Tensor:
        with torch.no_grad():
            if ref is None:  # LoRA: the base model is the reference
                with policy.model.disable_adapter():
                    return policy.token_logprobs(b["input_ids"], b["attention_mask"], temperature)[0]
            logits = ref(input_ids=b["input_ids"], attention_mask=b["attention_mask"], use_cache=False).logits
            logp = torch.log_softmax(logits[:, :-1].float() / temperature, -1).gather(-1, b["input_ids"][:, 1:, None])
            return torch.nn.functional.pad(logp.squeeze(-1), (1, 0))

    def _skip_nonfinite(self, who: str) -> None:
        self.counters["nonfinite_skipped"] += 1
        rank_zero_info(f"[genenv] non-finite {who} loss at epoch {self.current_epoch}: update skipped")
        self.log("train/nonfinite_skipped", float(self.counters["nonfinite_skipped"]), on_step=False, on_epoch=True,
                 reduce_fx="max", batch_size=1)

    def on_train_epoch_end(self) -> None:
        # Logged every epoch so that an epoch without in-band seed batches shows as such.
        self.log("sim/updates", float(self.counters["sim_updates"]), on_step=False, on_epoch=True, reduce_fx="max", batch_size=1)

    # ---- evaluation ---------------------------------------------------------------------
    def evaluate_tasks(self, tasks) -> list[dict[str, Any]]:
        """Greedy agent answers scored by the environment: one row of metrics per task."""
        dm = self.trainer.datamodule
        prompts = [self.agent.render(self.env.agent_prompt(t)) for t in tasks]
        params = SamplingParams(max_new_tokens=dm.cfg.eval_max_new_tokens, greedy=True)
        gens = self.backend.generate(self.agent, prompts, params)
        rows = []
        for task, g in zip(tasks, gens):
            try:
                metrics = self.env.score(task, g[0].text)
            except Exception:  # a scorer must not end an evaluation; count it as a format error
                metrics = {"accuracy": 0.0, "format_error": 1.0}
            rows.append({"id": task.id, "group": task.group, "response": g[0].text, **metrics})
        return rows

    def validation_step(self, batch, batch_idx: int) -> None:
        rows = self.evaluate_tasks(batch)
        self._log_eval(rows, "val")

    def _log_eval(self, rows, prefix: str) -> None:
        n = len(rows)
        self.log(f"{prefix}/accuracy", sum(r["accuracy"] for r in rows) / n, batch_size=n, on_epoch=True, sync_dist=True)
        self.log(f"{prefix}/format_error_rate", sum(r.get("format_error", 0.0) for r in rows) / n, batch_size=n,
                 on_epoch=True, sync_dist=True)
        groups = defaultdict(list)
        for r in rows:
            groups[r["group"]].append(r["accuracy"])
        for g, accs in groups.items():
            self.log(f"{prefix}/accuracy_{g}", sum(accs) / len(accs), batch_size=len(accs), on_epoch=True, sync_dist=True)

    def on_train_start(self) -> None:
        # val/accuracy of the starting (warm-started) agent, before any co-evolution update.
        if not self.eval_at_start or self.counters["agent_updates"] > 0 or self.trainer.limit_val_batches == 0:
            return
        rows = self.evaluate_tasks(self.trainer.datamodule.eval_tasks())
        acc = sum(r["accuracy"] for r in rows) / max(len(rows), 1)
        groups = defaultdict(list)
        for r in rows:
            groups[r["group"]].append(r["accuracy"])
        metrics = {"val/accuracy": acc, **{f"val/accuracy_{g}": sum(v) / len(v) for g, v in groups.items()}}
        for logger in self.loggers:
            logger.log_metrics(metrics, step=0)
        rank_zero_info(f"[genenv] starting agent: val/accuracy {acc:.3f} " +
                       " ".join(f"{g} {sum(v) / len(v):.2f}" for g, v in sorted(groups.items())))

    def test_step(self, batch, batch_idx: int) -> None:
        rows = self.evaluate_tasks(batch)
        self._test_rows.extend(rows)
        self._log_eval(rows, "eval")

    def on_test_epoch_end(self) -> None:
        rows, self._test_rows = self._test_rows, []
        table = _summarize(rows)
        scores = [{k: v for k, v in r.items() if k not in ("id", "group", "response")} for r in rows]
        table["corpus"] = self.env.aggregate(scores)
        n_episodes = self.trainer.datamodule.cfg.eval_episodes
        if n_episodes:
            table["episodes"] = self.env.play(self._act, None if n_episodes < 0 else n_episodes)
        lines = [f"{'group':<32} {'n':>6} " + " ".join(f"{k:>14}" for k in table["metrics"])]
        for g, stats in table["groups"].items():
            lines.append(f"{g:<32} {stats['n']:>6} " + " ".join(f"{stats[k]:>14.4f}" for k in table["metrics"]))
        for section in ("corpus", "episodes"):
            lines += [f"{section}/{k:<40} {v:.4f}" for k, v in table.get(section, {}).items()]
        rank_zero_info("\n".join(lines))
        for section in ("corpus", "episodes"):
            for k, v in table.get(section, {}).items():
                self.log(f"eval/{section}/{k}", float(v), batch_size=1)
        out_dir = self.trainer.log_dir or self.trainer.default_root_dir
        if self.trainer.is_global_zero:
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, "test_results.json"), "w") as f:
                json.dump({"env": self.env.name, **table, "rows": rows}, f, indent=1)
            rank_zero_info(f"[genenv] wrote {os.path.join(out_dir, 'test_results.json')}")

    def _act(self, messages: list[dict[str, str]]) -> str:
        """The agent as an interactive player: greedy text for one turn."""
        params = SamplingParams(max_new_tokens=self.trainer.datamodule.cfg.eval_max_new_tokens, greedy=True)
        return self.backend.generate(self.agent, [self.agent.render(messages)], params)[0][0].text

    # ---- checkpoint ---------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["genenv_counters"] = dict(self.counters)



def _linear_warmup(steps: int):
    return lambda update: min(1.0, (update + 1) / steps) if steps > 0 else 1.0


def _frozen_copy(model: torch.nn.Module) -> torch.nn.Module:
    ref = copy.deepcopy(model)
    ref.requires_grad_(False)
    ref.eval()
    return ref


def _summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    metric_keys = sorted({k for r in rows for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    groups: dict[str, list] = defaultdict(list)
    for r in rows:
        groups[r["group"]].append(r)
    groups["overall"] = rows

    def stats(rs):
        out = {"n": len(rs)}
        for k in metric_keys:
            vals = [r[k] for r in rs if k in r and not (isinstance(r[k], float) and math.isnan(r[k]))]
            out[k] = sum(vals) / len(vals) if vals else float("nan")
        return out

    return {"metrics": metric_keys, "groups": {g: stats(rs) for g, rs in sorted(groups.items())}}
