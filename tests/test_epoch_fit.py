"""What a real fit guarantees about an epoch beyond its numbers: D_env keeps only the samples of simulator
steps that were kept, a checkpoint taken mid-epoch is refused on resume (the rest of its epoch cannot be
rebuilt), and a run without what the loop depends on (the curriculum callback, a train loader rebuilt
every epoch) stops at fit start with one line."""
from __future__ import annotations

import glob
import os
import sys
from collections import Counter
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from genenv_pl.cli import cli_main
from test_fit import REPO, _fit, _fit_with_callback



def _texts(tokenizer, b: dict[str, torch.Tensor]) -> list[str]:
    return [tokenizer.decode(ids[m.bool()].tolist(), skip_special_tokens=True)
            for ids, m in zip(b["input_ids"], b["response_mask"])]


class _SimSteps(L.Callback):
    """The response texts of each simulator batch, by whether its step was kept (sim/updates went up);
    with `poison`, the epoch's first simulator batch gets NaN weights (a non-finite loss: skipped)."""

    def __init__(self, poison: bool):
        self.poison, self.kept, self.dropped = poison, [], []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self._texts = _texts(module.simulator.tokenizer, batch["sim"]) if batch["sim"] is not None else None
        if self._texts and self.poison and not (self.kept or self.dropped):
            batch["sim"]["weights"].fill_(float("nan"))
        self._updates = module.counters["sim_updates"]

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self._texts:
            (self.kept if module.counters["sim_updates"] > self._updates else self.dropped).extend(self._texts)


@pytest.mark.parametrize("why", ["nonfinite", "kl_cap"])
def test_d_env_keeps_only_the_samples_of_simulator_steps_that_were_kept(tmp_path, cache, why):
    """A simulator step skipped as non-finite, or undone by the KL cap (lr 1: every step), did not learn
    from its samples: they do not enter D_env, from where replay would draw them again."""
    watch = _SimSteps(poison=why == "nonfinite")
    lr = ["--model.simulator_optimizer.init_args.lr", "1.0"] if why == "kl_cap" else []
    cli = _fit_with_callback(tmp_path, cache, watch, "--data.coevo.sim_batch_size", "4", *lr)
    counters, d_env = cli.model.counters, cli.datamodule.pools.env
    assert watch.dropped, counters
    if why == "nonfinite":
        assert counters["nonfinite_skipped"] >= 1 and watch.kept
    else:
        assert counters["sim_skipped_kl"] >= 2 and counters["sim_updates"] == 0 and not watch.kept
    assert Counter(e["text"] for e in d_env) == Counter(watch.kept)
    assert cli.datamodule.last_round.metrics["coevo/sim_samples"] == len(watch.kept) + len(watch.dropped)


class _SaveMidEpoch(L.Callback):
    def __init__(self, path: Path):
        self.path = path

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if batch_idx == 0 and trainer.num_training_batches > 1:
            trainer.save_checkpoint(self.path)


def test_a_checkpoint_taken_mid_epoch_is_refused_in_one_line(tmp_path, cache):
    """The epoch's steps are built from rollouts that the checkpoint does not hold; resuming it used to
    train on a placeholder and drop the rest of that epoch silently while the pools kept its tasks."""
    mid = tmp_path / "mid.ckpt"
    _fit_with_callback(tmp_path, cache, _SaveMidEpoch(mid), "--data.coevo.sim_batch_size", "4")
    assert mid.exists()
    with pytest.raises(SystemExit) as exit_:
        _fit(tmp_path, cache, 2, "--ckpt_path", str(mid))
    message = str(exit_.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    assert "mid-epoch" in message and str(mid) in message, message


def test_a_config_without_the_curriculum_callback_stops_at_startup_in_one_line(tmp_path):
    """Nothing is built (no warm start runs) before the missing callback is named."""
    os.chdir(tmp_path)
    override = tmp_path / "no-curriculum.yaml"
    override.write_text(yaml.safe_dump({"trainer": {"callbacks": [], "logger": False},
                                        "model": {"cache_dir": str(tmp_path / "cache")}}))
    with pytest.raises(SystemExit) as exit_:
        cli_main(["fit", "--config", str(REPO / "configs/quickstart.yaml"), "--config", str(override)])
    message = str(exit_.value.code)
    assert message.startswith("error: ") and "\n" not in message, message
    assert "AlphaCurriculumCallback" in message, message
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_a_trainer_that_does_not_rebuild_the_train_loader_every_epoch_is_refused_at_fit_start(tmp_path):
    """With Lightning's default reload_dataloaders_every_n_epochs=0 every epoch replayed epoch 0's rollouts
    with their stale log-probs (the CLI sets 1, a plain Trainer did not)."""
    from callbacks import AlphaCurriculumCallback
    from genenv_pl.config import CoevoConfig
    from genenv_pl.datamodule import GenEnvDataModule
    from genenv_pl.models.factory import PolicyConfig
    from genenv_pl.models.tiny import TinyModelSpec
    from genenv_pl.module import GenEnvModule
    from genenv_pl.warmstart import WarmStartConfig

    tiny = PolicyConfig(model="tiny", tiny=TinyModelSpec(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=2,
                                                         intermediate_size=64), warm_start=WarmStartConfig(steps=0))
    dm = GenEnvDataModule(env_args={"eval_per_level": 2, "seeds_per_level": 1},
                          coevo=CoevoConfig(seeds_per_epoch=2, num_generations_per_prompt=2, group_size=2))
    module = GenEnvModule(agent=tiny, simulator=tiny, cache_dir=str(tmp_path / "cache"), eval_at_start=False)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=2, limit_val_batches=0, num_sanity_val_steps=0,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=str(tmp_path), callbacks=[AlphaCurriculumCallback(print_every_n_epochs=0)])
    with pytest.raises(ValueError, match="reload_dataloaders_every_n_epochs") as error:
        trainer.fit(module, dm)
    assert "\n" not in str(error.value)
    assert trainer.current_epoch == 0 and module.agent is None  # refused before any model was built


class _AgentUpdates(L.Callback):
    """(training step, mean reward of its agent batch) of every training step whose agent update was kept,
    and the agent updates its epoch had made before it (the age of its rollouts, sampled at the epoch's start)."""

    def __init__(self):
        self.updates: list[tuple[int, float]] = []
        self.ages: list[float] = []

    def on_train_epoch_start(self, trainer, module):
        self._epoch_start = module.counters["agent_updates"]

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self._before = module.counters["agent_updates"]
        self._age = float(self._before - self._epoch_start)
        agent = batch["agent"]
        self._reward = float(agent["rewards"].mean()) if agent is not None else None
        self._step = trainer.fit_loop.epoch_loop._batches_that_stepped

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if module.counters["agent_updates"] > self._before:
            self.updates.append((self._step, self._reward))
            self.ages.append(self._age)


def _scalars(log_root: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[tuple[int, float]]] = {}
    for f in sorted(glob.glob(str(log_root / "**/events.out.tfevents.*"), recursive=True)):
        acc = EventAccumulator(f, size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
    return out


def test_a_fit_logs_the_papers_figure_quantities(tmp_path, cache):
    """agent/step_reward once per agent update, at its training step, the mean reward of the rollouts it
    learned from (Fig. 4a); per epoch the agent's response length (Fig. 5a/b) and the solved / partial /
    unsolved shares of the generated tasks (Fig. 8), which add up to 1; and the quickstart report finds them."""
    watch = _AgentUpdates()
    cli = _fit_with_callback(tmp_path, cache, watch, "--trainer.max_epochs", "2",
                             "--data.coevo.agent_batch_size", "3")  # several agent steps an epoch
    s = _scalars(tmp_path / "runs")
    assert cli.model.counters["agent_updates"] >= 2 and len(watch.updates) == cli.model.counters["agent_updates"]
    logged = s["agent/step_reward"]
    assert [step for step, _ in logged] == [step for step, _ in watch.updates]
    assert [v for _, v in logged] == pytest.approx([r for _, r in watch.updates])
    assert all(0.0 <= v <= 1.0 for _, v in logged)
    # agent/rollout_age at the same steps: 0, 1, 2, ... within each epoch (the rollouts are the epoch's start's)
    ages = s["agent/rollout_age"]
    assert [step for step, _ in ages] == [step for step, _ in watch.updates]
    assert [v for _, v in ages] == watch.ages and watch.ages[0] == 0.0 and max(watch.ages) >= 1.0

    fracs = [[v for _, v in s[f"coevo/{k}_frac"]] for k in ("solved", "partial", "unsolved")]
    assert len(fracs[0]) == 2 and all(len(f) == 2 for f in fracs)  # one point per epoch
    for shares in zip(*fracs):
        assert sum(shares) == pytest.approx(1.0) and all(0.0 <= x <= 1.0 for x in shares)
    lengths = [v for _, v in s["agent/response_length"]]
    max_new = cli.datamodule.cfg.agent_sampling.max_new_tokens
    assert len(lengths) == 2 and all(0 < n <= max_new for n in lengths)

    # the last epoch's numbers from its groups: success as p_hat counts it, reward >= success_threshold
    round_, threshold = cli.datamodule.last_round, cli.datamodule.env.success_threshold
    fresh = [[r >= threshold for r in g.rewards] for g in round_.groups if g.source == "fresh"]
    assert fresh and fracs[0][-1] == pytest.approx(sum(all(f) for f in fresh) / len(fresh))
    assert fracs[2][-1] == pytest.approx(sum(not any(f) for f in fresh) / len(fresh))
    rollouts = [r for g in round_.groups for r in g.rollouts]
    assert lengths[-1] == pytest.approx(sum(len(r.response_ids) for r in rollouts) / len(rollouts))

    sys.path.append(str(REPO / "bench"))
    import quickstart_report

    run = glob.glob(str(tmp_path / "runs" / "t" / "version_*"))[0]
    lines = quickstart_report.report(run, quickstart_report.load(run))
    assert "tags: all required tags present" in lines, lines
    assert any(line.startswith("agent/step_reward") and f"({len(logged)} points)" in line for line in lines), lines
