"""The paper's ablations as one-line switches (`data.coevo.variant`), each in a real two-epoch fit."""
from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

from test_fit import _fit, _tags

FROZEN = {"class_path": "test_ablations.SimulatorWatch"}



def _sim_params(module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.simulator.parameters()]


class SimulatorWatch(L.Callback):
    """After every epoch: whether each of the simulator's parameters is bit for bit what it was when
    training started (after the warm start), not merely whether an update was counted."""

    def on_train_start(self, trainer, module):
        self.start, self.unchanged = _sim_params(module), []

    def on_train_epoch_end(self, trainer, module):
        now = _sim_params(module)
        self.unchanged.append(len(now) == len(self.start) and all(torch.equal(a, b) for a, b in zip(self.start, now)))


def _watch(cli) -> SimulatorWatch:
    (watch,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, SimulatorWatch)]
    return watch


def test_genenv_random_generates_every_epoch_but_never_trains_the_simulator(tmp_path, cache):
    cli = _fit(tmp_path, cache, 2, "--data.coevo.variant", "genenv-random", extra_callbacks=[FROZEN])
    dm, module = cli.datamodule, cli.model
    assert module.counters["sim_updates"] == 0 and module.counters["agent_updates"] >= 1
    assert _watch(cli).unchanged == [True, True]  # the simulator's weights, bit for bit, after every epoch
    assert dm.pools.env == []  # no simulator samples are kept for a simulator that does not learn
    assert {e["epoch"] for e in dm.pools.train} == {0, 1}  # fresh tasks every epoch


def test_static_generates_once_then_trains_the_agent_on_the_fixed_set(tmp_path, cache):
    cli = _fit(tmp_path, cache, 3, "--data.coevo.variant", "static", extra_callbacks=[FROZEN])
    dm, module = cli.datamodule, cli.model
    assert module.counters["sim_updates"] == 0 and module.counters["agent_updates"] >= 2
    assert _watch(cli).unchanged == [True, True, True]
    fixed = {t["id"] for t in dm.static_tasks}
    assert fixed and len(dm.pools.train) == len(fixed)  # the set is added to D_train once, not per epoch
    assert {e["epoch"] for e in dm.pools.train} == {0}
    stats = dm.last_round
    assert {g.task.id for g in stats.groups if g.source == "static"} <= fixed
    assert stats.batches == []  # the simulator is not asked again after the first epoch
    assert 0.0 <= stats.metrics["coevo/success_rate"] <= 1.0  # success on the fixed tasks, for the calibration plot
    # The fixed set survives a checkpoint round trip: a resumed run trains on the same tasks.
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert ckpt["GenEnvDataModule"]["static_tasks"] == dm.static_tasks


def test_no_band_trains_the_simulator_on_every_scored_seed_batch(tmp_path, cache):
    # alpha = 5 puts no batch in band: only the no-band variant still updates the simulator.
    cli = _fit(tmp_path, cache, 1, "--data.coevo.variant", "no-band", curriculum={"alpha": 5.0, "filtering_k": 0.1})
    stats = cli.datamodule.last_round
    scored = [b for b in stats.batches if b.p_hat is not None]
    assert scored and all(b.in_band for b in scored)
    assert cli.model.counters["sim_updates"] >= 1 and len(cli.datamodule.pools.env) > 0


def test_unknown_variant_names_the_key(tmp_path, cache, capsys):
    with pytest.raises(SystemExit):
        _fit(tmp_path, cache, 1, "--data.coevo.variant", "genenv-typo")
    assert "variant" in capsys.readouterr().err


def test_tasks_seen_counts_every_rolled_out_training_task(tmp_path, cache):
    cli = _fit(tmp_path, cache, 2, extra_callbacks=[FROZEN])
    dm = cli.datamodule
    assert dm.tasks_seen > 0 and dm.last_round.metrics["agent/tasks_seen"] == dm.tasks_seen
    # the full method trains the simulator: the watch of the two ablations above does see a change
    assert cli.model.counters["sim_updates"] >= 1 and _watch(cli).unchanged[-1] is False


def test_per_task_fit_trains_the_simulator_on_its_in_band_tasks_only(tmp_path, cache):
    probe = {"class_path": "callbacks.SimulatorConditioningCallback", "init_args": {"every_n_epochs": 1, "num_probe_seeds": 3,
                                                                                  "samples_per_prompt": 2}}
    cli = _fit(tmp_path, cache, 2, "--data.coevo.difficulty_unit", "task", curriculum={"alpha": 0.0, "filtering_k": 0.1},
               extra_callbacks=[probe])  # alpha 0: the band holds the tasks the barely warm-started agent never solves
    dm = cli.datamodule
    stats = dm.last_round
    fresh = [g for g in stats.groups if g.source == "fresh"]
    assert fresh
    for g in fresh:  # each task's p_hat comes from its own G rollouts
        b = stats.batches[g.seed_index]
        i = next(i for i, t in enumerate(b.tasks) if t is g.task)
        assert b.task_p_hat[i] == pytest.approx(sum(g.successes) / len(g.successes))
        assert b.task_in_band[i] == (b.task_p_hat[i] <= 0.1 + 1e-6)
    expected = sorted(g.text for b in stats.batches for g, ok in zip(b.task_generations, b.task_in_band) if ok)
    assert expected  # some tasks in band, so the simulator update is exercised
    last = [e for e in dm.pools.env if e["epoch"] == stats.epoch]
    assert sorted(e["text"] for e in last) == expected  # D_env holds exactly this epoch's in-band tasks
    assert all(e["p_hat"] <= 0.1 + 1e-6 for e in last)
    assert stats.metrics["coevo/sim_samples"] == len(expected)
    assert 0.0 <= stats.metrics["coevo/task_alpha_gap"] <= 1.0
    # the conditioning probe logged its tags before training and after each epoch
    tags = _tags(tmp_path / "runs")
    assert {"sim/conditioning_slope", "sim/probe_valid_frac", *(f"sim/delta_level_bucket{b}" for b in range(5))} <= tags
