"""Real Lightning runs of the quickstart config with a ~1M-parameter agent (short warm start)."""
from __future__ import annotations

import glob
import os
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from genenv_pl.cli import cli_main

REPO = Path(__file__).resolve().parents[1]
REQUIRED_TAGS = [
    "coevo/success_rate", "coevo/alpha_reward", "coevo/in_band_frac", "coevo/invalid_rate", "coevo/difficulty",
    "agent/loss", "agent/kl", "agent/entropy", "agent/zero_std_frac", "sim/loss", "sim/kl", "val/accuracy",
    "perf/rollout_tokens_per_s",
]


def _override(tmp: Path, cache: Path, max_epochs: int, extra_callbacks: list | None = None,
              curriculum: dict | None = None) -> str:
    cfg = {
        "trainer": {
            "max_epochs": max_epochs,
            "check_val_every_n_epoch": 1,
            "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                       "init_args": {"save_dir": str(tmp / "runs"), "name": "t"}},
            "callbacks": [
                # filtering_k 0.5 puts every seed batch in band, so the simulator update runs too.
                {"class_path": "callbacks.AlphaCurriculumCallback", "init_args": curriculum or {"filtering_k": 0.5}},
                {"class_path": "callbacks.SampleTableCallback", "init_args": {"every_n_epochs": 1}},
                {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                 "init_args": {"dirpath": str(tmp / "ckpt"), "save_last": True, "every_n_epochs": 1, "save_top_k": 0,
                               "save_on_train_epoch_end": True}},
                *(extra_callbacks or []),
            ],
        },
        # A ~1M agent with a short warm start, and a smaller simulator warm-started just enough to
        # write mostly valid tasks: enough for every code path, in seconds.
        "model": {"cache_dir": str(cache),
                  "agent": {"warm_start": {"steps": 150, "batch_size": 32}},
                  "simulator": {"tiny": {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 2,
                                         "intermediate_size": 192},
                                "warm_start": {"steps": 300, "batch_size": 32}}},
        "data": {"env_args": {"eval_per_level": 10, "seeds_per_level": 2},
                 "coevo": {"seeds_per_epoch": 6, "drop_zero_std_groups": False, "eval_batch_size": 60}},
    }
    path = tmp / "override.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)



def _fit(tmp: Path, cache: Path, max_epochs: int, *args: str, **override):
    os.chdir(tmp)  # relative paths in the config (cache, runs) stay inside tmp
    return cli_main(["fit", "--config", str(REPO / "configs/quickstart.yaml"),
                     "--config", _override(tmp, cache, max_epochs, **override), *args])


def _tags(log_root: Path) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = set()
    for f in glob.glob(str(log_root / "**/events.out.tfevents.*"), recursive=True):
        acc = EventAccumulator(f)
        acc.Reload()
        tags |= set(acc.Tags()["scalars"])
    return tags


def test_one_epoch_smoke_fit_logs_every_tag_and_checkpoints(tmp_path, cache):
    cli = _fit(tmp_path, cache, 1)
    module, dm = cli.model, cli.datamodule
    assert 0.8e6 < module.agent.num_parameters() < 1.3e6
    assert module.counters["agent_updates"] >= 1 and module.counters["sim_updates"] >= 1
    missing = set(REQUIRED_TAGS) - _tags(tmp_path / "runs")
    assert not missing, f"missing TensorBoard tags: {missing}"
    assert (tmp_path / "ckpt" / "last.ckpt").exists()
    assert len(dm.pools.train) > 0 and len(dm.pools.env) > 0


def test_checkpoint_round_trip_keeps_pools_counters_and_optimizers(tmp_path, cache):
    cli = _fit(tmp_path, cache, 2)
    pools = cli.datamodule.pools.state_dict()
    counters = dict(cli.model.counters)
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    saved = ckpt["GenEnvDataModule"]["pools"]
    assert saved == pools  # identical after a checkpoint round trip, entry for entry
    assert ckpt["genenv_counters"] == counters
    assert len(ckpt["optimizer_states"]) == 2 and all(s["state"] for s in ckpt["optimizer_states"])

    # Resume for one more epoch: the pools continue from the saved ones, nothing lost or repeated.
    cli2 = _fit(tmp_path, cache, 3, "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt"))
    resumed = cli2.datamodule.pools.state_dict()
    assert resumed["train"][: len(pools["train"])] == pools["train"]
    assert resumed["env"][: len(pools["env"])] == pools["env"]
    assert {e["epoch"] for e in resumed["train"][len(pools["train"]):]} == {2}
    assert cli2.model.counters["agent_updates"] > counters["agent_updates"]
    assert cli2.trainer.current_epoch == 3


class _RecordLogprobs:
    """Captures the agent's log-probs on each training batch's rollouts before and after the step."""

    def __init__(self):
        self.records = []

    def _logp(self, module, b):
        with torch.no_grad():
            logp, _ = module.agent.token_logprobs(b["input_ids"], b["attention_mask"])
        m = b["response_mask"]
        return (logp * m).sum(-1) / m.sum(-1)

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch["agent"] is not None:
            self._before = self._logp(module, batch["agent"])

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if batch["agent"] is not None:
            self.records.append((self._before, self._logp(module, batch["agent"]), batch["agent"]["advantages"]))


def test_one_agent_update_changes_log_probs_of_its_own_rollouts(tmp_path, cache):
    import lightning as L

    recorder = type("Recorder", (_RecordLogprobs, L.Callback), {})()
    os.chdir(tmp_path)
    from genenv_pl.cli import GenEnvCLI
    from genenv_pl.datamodule import GenEnvDataModule
    from genenv_pl.module import GenEnvModule

    # Per-digit partial credit: the barely warm-started agent rarely answers exactly, and a batch needs
    # rollouts with advantages of both signs for the check below.
    partial = tmp_path / "partial.yaml"
    partial.write_text(yaml.safe_dump({"data": {"env_args": {"eval_per_level": 10, "seeds_per_level": 2, "reward": "partial"}}}))
    cli = GenEnvCLI(GenEnvModule, GenEnvDataModule, run=False,
                    args=["--config", str(REPO / "configs/quickstart.yaml"), "--config", _override(tmp_path, cache, 1),
                          "--config", str(partial)])
    assert cli.datamodule.env.reward_mode == "partial"
    cli.trainer.callbacks.append(recorder)
    cli.trainer.fit(cli.model, cli.datamodule)
    assert recorder.records
    before, after, adv = recorder.records[0]
    assert (adv > 0).any() and (adv < 0).any()
    assert not torch.allclose(before, after)
    # GRPO moves probability towards rollouts with positive advantage and away from negative ones.
    assert (after - before)[adv > 0].mean() > (after - before)[adv < 0].mean()


def test_epoch_without_in_band_seed_batches_still_trains_the_agent(tmp_path, cache):
    # alpha = 5 can never be within k_min of a success rate: no seed batch is in band.
    cli = _fit(tmp_path, cache, 1, curriculum={"alpha": 5.0, "filtering_k": 0.1})
    assert cli.model.counters["sim_updates"] == 0
    assert cli.model.counters["agent_updates"] >= 1
    assert cli.datamodule.pools.env == []  # nothing out of band enters D_env
    assert len(cli.datamodule.pools.train) > 0


@pytest.mark.parametrize("poison", ["loss", "gradient"])
def test_non_finite_update_is_skipped_and_counted(tmp_path, cache, poison):
    """A NaN loss (NaN advantages), or a finite loss whose backward gives a NaN gradient: the agent's
    step is skipped and counted, its weights stay as they were, the simulator still steps."""
    import lightning as L

    class Poison(L.Callback):
        def __init__(self):
            self.unchanged: list[bool] = []  # per training batch: the agent's weights as they went in

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            self.before = [p.detach().clone() for p in module.agent.parameters()]
            if poison == "loss" and batch["agent"] is not None:
                batch["agent"]["advantages"].fill_(float("nan"))

        def on_after_backward(self, trainer, module):
            grads = [p.grad for p in module.agent.parameters() if p.grad is not None]
            if poison == "gradient" and grads:  # the agent's backward (the simulator's leaves these unset)
                grads[0].view(-1)[0] = float("nan")

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            self.unchanged.append(all(torch.equal(a, b) for a, b in zip(self.before, module.agent.parameters())))

    watch = Poison()
    cli = _fit_with_callback(tmp_path, cache, watch, "--data.coevo.agent_batch_size", "1000")
    assert cli.model.counters["nonfinite_skipped"] >= 1
    assert cli.model.counters["agent_updates"] == 0
    assert watch.unchanged and all(watch.unchanged), watch.unchanged  # no step, on any batch, moved the agent
    assert cli.model.counters["sim_updates"] >= 1


def _fit_with_callback(tmp: Path, cache: Path, callback, *args: str):
    """A one-epoch fit with an extra callback instance, or a list of them (the CLI takes callbacks only as config)."""
    from genenv_pl.cli import GenEnvCLI
    from genenv_pl.datamodule import GenEnvDataModule
    from genenv_pl.module import GenEnvModule

    os.chdir(tmp)
    cli = GenEnvCLI(GenEnvModule, GenEnvDataModule, run=False,
                    args=["--config", str(REPO / "configs/quickstart.yaml"), "--config", _override(tmp, cache, 1), *args])
    cli.trainer.callbacks.extend(callback if isinstance(callback, list) else [callback])
    cli.trainer.fit(cli.model, cli.datamodule)
    return cli


class _SimSteps:
    """For each training step with a simulator batch: whether the step counted a KL skip, and whether
    the simulator's trainable weights and optimizer state came out of it exactly as they went in."""

    def __init__(self):
        self.steps: list[tuple[bool, bool]] = []

    @staticmethod
    def _state(module):
        opt = module.optimizers()[1].optimizer
        params = [p.detach().clone() for p in module.simulator.trainable_parameters()]
        state = {i: {k: v.clone() for k, v in opt.state[p].items()}
                 for i, p in enumerate(module.simulator.trainable_parameters()) if p in opt.state}
        return params, state, module.counters["sim_skipped_kl"]

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self._before = self._state(module) if batch["sim"] is not None else None

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self._before is None:
            return
        (p0, s0, k0), (p1, s1, k1) = self._before, self._state(module)
        same = (all(torch.equal(a, b) for a, b in zip(p0, p1)) and s0.keys() == s1.keys()
                and all(torch.equal(s0[i][k], s1[i][k]) for i in s0 for k in s0[i]))
        self.steps.append((k1 == k0 + 1, same))


@pytest.mark.parametrize("lr, fires, lora", [(1.0, True, 0), (1e-6, False, 0), (1.0, True, 4)],
                         ids=["lr-1", "lr-1e-6", "lr-1-lora"])
def test_simulator_update_past_the_kl_cap_is_undone(tmp_path, cache, lr, fires, lora):
    """rwr.kl_cap (0.5 in the quickstart) caps each simulator update: on the real batches of a fit, a step
    at lr 1 moves the simulator far past it and is undone (its weights and Adam state as before the step,
    counted in sim/skipped_kl), the first step of the epoch included; a step at lr 1e-6 stays within it.
    LoRA: the adapter is what the step changed and what is restored."""
    import lightning as L

    watch = type("SimSteps", (_SimSteps, L.Callback), {})()
    cli = _fit_with_callback(tmp_path, cache, watch, "--model.simulator_optimizer.init_args.lr", str(lr),
                             "--data.coevo.sim_batch_size", "8", "--model.simulator.lora.r", str(lora))
    assert cli.model.simulator.is_lora == bool(lora)
    counters, kl = cli.model.counters, float(cli.trainer.callback_metrics["sim/update_kl"])
    assert len(watch.steps) >= 2, watch.steps  # several simulator steps in the epoch
    if fires:
        assert watch.steps == [(True, True)] * len(watch.steps)
        assert counters["sim_skipped_kl"] == len(watch.steps) and counters["sim_updates"] == 0
        assert kl > 0.5
    else:
        assert watch.steps == [(False, False)] * len(watch.steps)
        assert counters["sim_skipped_kl"] == 0 and counters["sim_updates"] == len(watch.steps)
        assert 0 < kl < 0.5


class _OldLogpCheck:
    """At the first training step of each epoch, before any update of that epoch, the log-probs the
    backend reported while sampling must equal the training model's on the same tokens (used with the
    vLLM backend too, in tests/test_vllm_backend.py). Rows replayed from D_env were not sampled (NaN)."""

    def __init__(self):
        self.diffs = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch_idx != 0:
            return
        cfg = trainer.datamodule.cfg
        for role, policy, temp in (("agent", module.agent, cfg.agent_sampling.temperature),
                                   ("sim", module.simulator, cfg.sim_sampling.temperature)):
            b = batch[role]
            if b is None:
                continue
            with torch.no_grad():
                logp, _ = policy.token_logprobs(b["input_ids"], b["attention_mask"], temp, response_mask=b["response_mask"])
            m = b["response_mask"].bool() & torch.isfinite(b["old_logp"])
            self.diffs.append((trainer.current_epoch, role, float((logp - b["old_logp"])[m].abs().max())))


class _StaleAgent:
    """After epoch 2's rollouts were sampled, moves the agent: what an engine serving stale weights does."""

    def on_train_epoch_start(self, trainer, module):
        if trainer.current_epoch == 2:
            with torch.no_grad():
                for p in module.agent.trainable_parameters():
                    p.add_(0.05 * torch.randn_like(p))


def test_hf_sampling_log_probs_equal_the_training_models(tmp_path, cache):
    """The HF backend's sampling log-probs (the old log-probs of GRPO's ratio) equal the training model's on
    the first step of each epoch, for the agent and the simulator, after the updates of the epochs before.
    The check can fail: in epoch 2 the agent is moved after sampling, and its difference shows."""
    import lightning as L

    check = type("Check", (_OldLogpCheck, _StaleAgent, L.Callback), {})()
    _fit_with_callback(tmp_path, cache, check, "--trainer.max_epochs", "3", "--model.eval_at_start", "false",
                       "--trainer.limit_val_batches", "0")
    diffs = {(epoch, role): d for epoch, role, d in check.diffs}
    assert set(diffs) == {(e, role) for e in range(3) for role in ("agent", "sim")}
    assert max(d for (epoch, _), d in diffs.items() if epoch < 2) < 1e-4, diffs
    assert diffs[2, "sim"] < 1e-4 and diffs[2, "agent"] > 1e-2, diffs


class _StartEvalCalls(L.Callback):
    """Records the prompts per `backend.generate` call of the evaluation that `on_train_start` runs
    (this callback's hook runs before the module's; the first training batch ends the recording)."""

    def __init__(self):
        self.sizes: list[int] = []

    def on_train_start(self, trainer, module):
        real = module.backend.generate

        def counted(policy, prompts, params):
            self.sizes.append(len(prompts))
            return real(policy, prompts, params)
        module.backend.generate, self._restore = counted, lambda: setattr(module.backend, "generate", real)

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if hasattr(self, "_restore"):
            self._restore()
            del self._restore


def test_heap_trim_runs_after_every_phase_and_the_starting_evaluation_runs_in_eval_batches(tmp_path, cache):
    from callbacks import HeapTrim

    trim, start_eval = HeapTrim(), _StartEvalCalls()
    # 60 held-out tasks (10 per level) in batches of 16: one generate call for all of them would hold
    # every row's KV cache at once (a 12 GB static cache for BFCL's 239 prompts with SmolLM2).
    cli = _fit_with_callback(tmp_path, cache, [trim, start_eval], "--data.coevo.eval_batch_size", "16")
    assert start_eval.sizes == [16, 16, 16, 12]
    steps = cli.trainer.fit_loop.epoch_loop.batch_progress.total.completed
    assert steps >= 1 and trim.calls["train_step"] == steps
    assert trim.calls["simulate"] >= 1 and trim.calls["rollout"] >= 1
    assert trim.calls["setup"] == 1 and trim.calls["validation"] >= 1


def test_micro_batches_accumulate_to_the_same_step_as_the_whole_batch(tmp_path, cache, monkeypatch):
    """grpo.micro_batch_size / rwr.micro_batch_size: the same epoch with each optimizer step run in
    micro-batches (3 rollouts, splitting groups of G 4; 2 simulator samples) takes the same first agent
    and simulator steps (their clipped gradients) and logs the same loss terms as with each step in one
    pass, and it did take more backward passes. (Weights are not compared: Adam's first step moves every
    weight by +-lr whatever its gradient's size, so a gradient at rounding level can flip a weight's move.)"""
    import lightning as L

    from genenv_pl.module import GenEnvModule

    class FirstSteps(L.Callback):
        def __init__(self):
            self.grads = {}

        def on_before_optimizer_step(self, trainer, module, optimizer):
            role = "agent" if optimizer is module.optimizers()[0].optimizer else "sim"
            policy = module.agent if role == "agent" else module.simulator
            self.grads.setdefault(role, [p.grad.detach().clone() for p in policy.trainable_parameters()])

    passes = []
    real = GenEnvModule.manual_backward
    monkeypatch.setattr(GenEnvModule, "manual_backward", lambda self, loss, *a, **k: (passes.append(1), real(self, loss, *a, **k))[1])
    partial = ["--data.env_args.reward", "partial"]  # groups with unequal rewards: the agent's loss has a gradient
    runs = {}
    for name, micro in (("whole", []), ("micro", ["--model.grpo.micro_batch_size", "3", "--model.rwr.micro_batch_size", "2"])):
        passes.clear()
        (tmp_path / name).mkdir()
        first = FirstSteps()
        cli = _fit_with_callback(tmp_path / name, cache, first, *partial, *micro)
        runs[name] = (len(passes), dict(cli.model.counters), first.grads,
                      {k: float(v) for k, v in cli.trainer.callback_metrics.items() if k.startswith(("agent/", "sim/"))})
    (n_whole, c_whole, g_whole, log_whole), (n_micro, c_micro, g_micro, log_micro) = runs["whole"], runs["micro"]
    assert c_whole["agent_updates"] >= 1 and c_whole["sim_updates"] >= 1
    assert (c_micro["agent_updates"], c_micro["sim_updates"]) == (c_whole["agent_updates"], c_whole["sim_updates"])
    assert n_micro > n_whole
    for role in ("agent", "sim"):
        assert any(g.abs().max() > 0 for g in g_whole[role])
        for a, b in zip(g_whole[role], g_micro[role]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
    for k in ("agent/loss", "agent/pg_loss", "agent/kl", "agent/entropy", "agent/clip_frac", "sim/loss", "sim/nll", "sim/kl"):
        assert log_micro[k] == pytest.approx(log_whole[k], rel=1e-3, abs=1e-6), k


def test_sampled_evaluation_scores_k_samples_and_leaves_the_greedy_answers_alone(tmp_path, cache):
    """`eval_samples` k: each test row gets the mean accuracy of k sampled answers besides its greedy
    one, which stays what it was; sampled near temperature 0, the samples are the greedy answer."""
    import json

    os.chdir(tmp_path)
    base = ["test", "--config", str(REPO / "configs/quickstart.yaml"), "--config", _override(tmp_path, cache, 1),
            "--trainer.logger", "false"]
    runs = {}
    for name, extra in (("greedy", []), ("k3", ["--data.coevo.eval_samples", "3"]),
                        ("cold", ["--data.coevo.eval_samples", "2", "--data.coevo.agent_sampling.temperature", "1e-4"])):
        cli = cli_main([*base, *extra])
        runs[name] = (json.loads((tmp_path / "test_results.json").read_text()),
                      {k: float(v) for k, v in cli.trainer.callback_metrics.items()})
    (greedy, g_logged), (k3, k3_logged), (cold, _) = runs["greedy"], runs["k3"], runs["cold"]
    assert [r["response"] for r in k3["rows"]] == [r["response"] for r in greedy["rows"]]
    assert "sampled_accuracy" not in greedy["rows"][0] and "eval/sampled_accuracy" not in g_logged
    sampled = [r["sampled_accuracy"] for r in k3["rows"]]
    assert len(sampled) == 60 and all(round(3 * s, 6) in (0, 1, 2, 3) for s in sampled)
    assert any(s != r["accuracy"] for s, r in zip(sampled, k3["rows"]))  # sampled at temperature 1, not greedy
    assert k3_logged["eval/sampled_accuracy"] == pytest.approx(sum(sampled) / len(sampled), abs=1e-6)
    assert k3["groups"]["overall"]["sampled_accuracy"] == pytest.approx(sum(sampled) / len(sampled))
    assert [r["sampled_accuracy"] for r in cold["rows"]] == [r["accuracy"] for r in cold["rows"]]
    assert 0 < sum(r["accuracy"] for r in greedy["rows"]) < len(greedy["rows"])  # not a trivially uniform agent


def test_grpo_num_iterations_takes_that_many_agent_steps_on_the_same_rollouts(tmp_path, cache):
    # The first epoch's rollouts come from the same seeded agent either way, so two iterations take
    # exactly twice the agent steps of one.
    updates = {}
    for mu in (1, 2):
        (tmp_path / str(mu)).mkdir()
        cli = _fit(tmp_path / str(mu), cache, 1, f"--model.grpo.num_iterations={mu}")
        updates[mu] = cli.model.counters["agent_updates"]
    assert updates[1] >= 1 and updates[2] == 2 * updates[1]


def test_training_does_not_depend_on_evaluation_or_on_resuming(tmp_path, cache):
    """What is trained on comes from (seed, epoch, rank), not from what drew from torch's generator
    before: a run that evaluates at the start and after every epoch (sampling at the start and after every
    second epoch, `eval_samples_every`), and one that never evaluates and is stopped after epoch 0 and resumed
    from its checkpoint, sample the same rollouts and end with the same weights. (Before, a starting
    evaluation alone changed every later epoch's sampling.)"""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    evaluating = _fit(tmp_path / "a", cache, 2, "--model.eval_at_start", "true", "--data.coevo.eval_samples", "2",
                      "--data.coevo.eval_samples_every", "2")
    events = EventAccumulator(glob.glob(str(tmp_path / "a" / "runs" / "**" / "events.out.tfevents.*"), recursive=True)[0])
    events.Reload()
    greedy, sampled = ([e.step for e in events.Scalars(tag)] for tag in ("val/accuracy", "val/sampled_accuracy"))
    assert len(greedy) == 3 and sampled == [greedy[0], greedy[2]]  # the start, and after epoch 1 (not epoch 0)
    quiet = ["--model.eval_at_start", "false", "--trainer.limit_val_batches", "0"]
    _fit(tmp_path / "b", cache, 1, *quiet)
    resumed = _fit(tmp_path / "b", cache, 2, *quiet, "--ckpt_path", str(tmp_path / "b" / "ckpt" / "last.ckpt"))

    def rollouts(cli):
        return cli.datamodule.pools.state_dict()["train"]

    assert len(rollouts(evaluating)) > 0 and rollouts(evaluating) == rollouts(resumed)
    for role in ("agent", "simulator"):
        a = dict(getattr(evaluating.model, role).named_parameters())
        b = dict(getattr(resumed.model, role).named_parameters())
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), role


def test_agent_task_budget_stops_training_at_that_many_tasks_and_a_resume_trains_no_more(tmp_path, cache):
    # Seed tasks only (no simulator variations), 3 an epoch: a budget of 7 is epochs 0 and 1 whole and
    # 1 task of epoch 2, which is the last epoch although max_epochs allows 10.
    args = ["--data.coevo.seeds_per_epoch", "0", "--data.coevo.base_tasks_per_epoch", "3",
            "--data.coevo.agent_task_budget", "7", "--trainer.limit_val_batches", "0"]
    cli = _fit(tmp_path, cache, 10, *args)
    assert cli.datamodule.tasks_seen == 7
    assert cli.trainer.current_epoch == 3  # epochs 0, 1, 2 ran
    updates = cli.model.counters["agent_updates"]
    assert updates >= 1

    resumed = _fit(tmp_path, cache, 10, *args, "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt"))
    assert resumed.datamodule.tasks_seen == 7 and resumed.model.counters["agent_updates"] == updates


def test_agent_task_budget_trims_the_simulators_tasks_of_the_last_epoch(tmp_path, cache):
    cli = _fit(tmp_path, cache, 3, "--data.coevo.base_tasks_per_epoch", "0", "--data.coevo.agent_task_budget", "5",
               "--trainer.limit_val_batches", "0")
    dm = cli.datamodule
    assert dm.tasks_seen == 5 and len(dm.pools.train) == 5  # every trained task is a simulator variation in D_train


def test_agent_task_budget_below_one_names_the_key():
    from genenv_pl.config import CoevoConfig
    from genenv_pl.datamodule import GenEnvDataModule

    with pytest.raises(ValueError, match="data.coevo.agent_task_budget"):
        GenEnvDataModule(coevo=CoevoConfig(agent_task_budget=0))
