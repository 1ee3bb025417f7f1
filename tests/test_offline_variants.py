"""The offline variants of `data.coevo.variant`, each in a real fit with the suite's tiny models:
"static-paper" (the paper's GenEnv-Static: N variations of every base task written once by the initial
simulator) and "offline-augment" (a fixed augmentation set written once by a model named by config, by
default the initial simulator). Each writes its set in the first epoch only, trains the agent on it, never
changes the simulator, keeps the set in its checkpoints and resumes without writing it again."""
from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

import genenv_pl.epoch as epoch
from test_ablations import FROZEN, _watch
from test_fit import _fit

SETS = {"class_path": "test_offline_variants.SetWatch"}
# The writer of offline-augment: a tiny model other than the run's simulator (another seed, a shorter warm start).
OTHER_MODEL = ('{"model": "tiny", "seed": 7, "tiny": {"hidden_size": 64, "num_layers": 2, "num_heads": 2, '
               '"num_kv_heads": 2, "intermediate_size": 192}, "warm_start": {"steps": 200, "batch_size": 32}}')



@pytest.fixture
def calls(monkeypatch) -> list[tuple]:
    """Every call into simulator generation (the `generate_tasks` that `genenv_pl.epoch` calls): (policy, seeds, K)."""
    seen: list[tuple] = []
    real = epoch.generate_tasks

    def counting(env, simulator, backend, seeds, rates, params, *args, **kwargs):
        seen.append((simulator, list(seeds), params.n))
        return real(env, simulator, backend, seeds, rates, params, *args, **kwargs)

    monkeypatch.setattr(epoch, "generate_tasks", counting)
    return seen


class SetWatch(L.Callback):
    """After every epoch: the keys of the tasks the agent rolled out, in order, and how many tasks the set
    had been written with so far (its written-task count)."""

    def on_train_start(self, trainer, module):
        self.rolled, self.set_sizes = [], []

    def on_train_epoch_end(self, trainer, module):
        dm = trainer.datamodule
        self.rolled.append([dm.env.task_key(g.task) for g in dm.last_round.groups])
        self.set_sizes.append(None if dm.static_tasks is None else len(dm.static_tasks))


def _sets(cli) -> SetWatch:
    (watch,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, SetWatch)]
    return watch


def _fixed_set(dm) -> list[str]:
    """The keys of the whole fixed set: the base tasks and the written ones."""
    from genenv_pl.envs import Task

    return sorted([dm.env.task_key(t) for t in dm.env.seed_tasks()] +
                  [dm.env.task_key(Task.from_dict(d)) for d in dm.static_tasks])


def _saved(tmp_path: Path) -> dict:
    return torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["GenEnvDataModule"]


def test_static_paper_writes_n_variations_of_every_base_task_once_and_resumes_without_writing(tmp_path, cache, calls):
    n = 3
    args = ("--data.coevo.variant", "static-paper", "--data.coevo.offline_variations", str(n))
    cli = _fit(tmp_path, cache, 2, *args, extra_callbacks=[FROZEN, SETS])
    dm, module = cli.datamodule, cli.model
    seeds = dm.env.seed_tasks()
    # written once, in the first epoch: one call with every base task, N variations each
    assert len(calls) == 1 and calls[0][2] == n and len(calls[0][1]) == len(seeds)
    assert calls[0][0] is module.simulator  # the initial simulator (the variant never trains it)
    stats = dm.offline_stats
    assert stats["generations"] == n * len(seeds)
    assert stats["written"] == stats["generations"] - stats["invalid"] - stats["duplicates"] == len(dm.static_tasks)
    assert stats["written"] > 0 and sum(stats["invalid_reasons"].values()) == stats["invalid"]
    assert dm.last_round.metrics["coevo/offline_set_size"] == len(seeds) + stats["written"]
    # each epoch trains on the whole set (originals + variations), each task once
    watch = _sets(cli)
    assert watch.set_sizes == [stats["written"]] * 2
    assert [sorted(r) for r in watch.rolled] == [_fixed_set(dm)] * 2
    assert module.counters["sim_updates"] == 0 and module.counters["agent_updates"] >= 2
    assert _watch(cli).unchanged == [True, True]  # the simulator, bit for bit
    assert dm.pools.env == [] and {e["epoch"] for e in dm.pools.train} == {0}  # the set enters D_train once
    saved = _saved(tmp_path)
    assert saved["static_tasks"] == dm.static_tasks and saved["offline_stats"] == stats

    # Resumed from the end of epoch 2: no simulator generation, the same set, the whole of it again.
    fixed, written_before = _fixed_set(dm), list(dm.static_tasks)
    calls.clear()
    cli2 = _fit(tmp_path, cache, 3, *args, "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt"),
                extra_callbacks=[FROZEN, SETS])
    dm2 = cli2.datamodule
    assert calls == []
    assert dm2.static_tasks == written_before and dm2.offline_stats == stats
    assert [sorted(r) for r in _sets(cli2).rolled] == [fixed]
    assert _watch(cli2).unchanged == [True] and cli2.model.counters["sim_updates"] == 0
    assert cli2.model.counters["agent_updates"] > module.counters["agent_updates"]


def test_offline_augment_with_another_model_writes_its_set_once_and_resumes_mid_pass(tmp_path, cache, calls):
    size, per_epoch = 14, 10
    args = ("--data.coevo.variant", "offline-augment", "--data.coevo.augment_size", str(size),
            "--data.coevo.augment_model", OTHER_MODEL, "--data.coevo.offline_tasks_per_epoch", str(per_epoch))
    cli = _fit(tmp_path, cache, 1, *args, extra_callbacks=[FROZEN, SETS])
    dm, module = cli.datamodule, cli.model
    assert calls and all(c[2] == dm.cfg.num_generations_per_prompt for c in calls)
    writer = calls[0][0]
    assert writer is not module.simulator and writer is not module.agent and all(c[0] is writer for c in calls)
    assert writer.model is None  # built for the writing alone, and freed after it
    stats = dm.offline_stats
    assert stats["written"] == size == len(dm.static_tasks) and "'tiny'" in stats["writer"]
    assert stats["generations"] == stats["written"] + stats["surplus"] + stats["invalid"] + stats["duplicates"]
    assert _watch(cli).unchanged == [True] and module.counters["sim_updates"] == 0
    assert module.counters["agent_updates"] >= 1
    assert len(_sets(cli).rolled[0]) == per_epoch
    saved = _saved(tmp_path)
    assert saved["static_tasks"] == dm.static_tasks and len(saved["offline_pass"]) == len(_fixed_set(dm)) - per_epoch

    # Resumed: the augment model is not built again (no generation at all), the same set, and the pass goes on
    # where the checkpoint left it: the first len(set) tasks of epochs 0-2 are the whole set, each once.
    fixed, first = _fixed_set(dm), _sets(cli).rolled[0]
    calls.clear()
    cli2 = _fit(tmp_path, cache, 3, *args, "--ckpt_path", str(tmp_path / "ckpt" / "last.ckpt"),
                extra_callbacks=[FROZEN, SETS])
    assert calls == [] and cli2.datamodule.static_tasks == dm.static_tasks
    rolled = first + [k for epoch in _sets(cli2).rolled for k in epoch]
    assert len(rolled) == 3 * per_epoch and sorted(rolled[: len(fixed)]) == fixed
    assert _watch(cli2).unchanged == [True, True]


def test_offline_augment_by_default_writes_with_the_initial_simulator_within_the_task_budget(tmp_path, cache, calls):
    cli = _fit(tmp_path, cache, 3, "--data.coevo.variant", "offline-augment", "--data.coevo.augment_size", "8",
               "--data.coevo.agent_task_budget", "15", extra_callbacks=[FROZEN, SETS])
    dm = cli.datamodule
    assert calls and all(c[0] is cli.model.simulator for c in calls)
    assert len(dm.static_tasks) == dm.offline_stats["written"] == 8
    # the whole set (base + 8) is more than the budget: epoch 0 rolls out 15 of it, and is the last
    assert len(_sets(cli).rolled) == 1 and len(_sets(cli).rolled[0]) == 15 == dm.tasks_seen
    assert cli.trainer.current_epoch == 1 and _watch(cli).unchanged == [True]


@pytest.mark.parametrize("args, key", [
    (["--data.coevo.variant", "offline-augment"], "data.coevo.augment_size"),
    (["--data.coevo.variant", "offline-augment", "--data.coevo.augment_size", "0"], "data.coevo.augment_size"),
    (["--data.coevo.variant", "static-paper", "--data.coevo.offline_variations", "0"], "data.coevo.offline_variations"),
    (["--data.coevo.variant", "static-paper", "--data.coevo.offline_tasks_per_epoch", "0"],
     "data.coevo.offline_tasks_per_epoch"),
    (["--data.coevo.augment_model", "some/model"], "data.coevo.augment_model"),  # set, but the variant is genenv
])
def test_a_bad_offline_setting_stops_in_one_line_naming_its_key(tmp_path, cache, args, key):
    with pytest.raises(SystemExit) as exit_:
        _fit(tmp_path, cache, 1, *args)
    message = str(exit_.value.code)
    assert message.startswith("error: ") and "\n" not in message and key in message, message


def test_an_augment_model_that_cannot_be_loaded_is_named_in_one_line(tmp_path, cache):
    with pytest.raises(SystemExit) as exit_:
        _fit(tmp_path, cache, 1, "--data.coevo.variant", "offline-augment", "--data.coevo.augment_size", "4",
             "--data.coevo.augment_model", str(tmp_path / "no-such-model"), "--model.eval_at_start", "false")
    message = str(exit_.value.code)
    assert message.startswith("error: ") and "data.coevo.augment_model" in message and "no-such-model" in message


def test_the_vllm_backend_releases_a_policy_s_own_engine_and_forgets_it_in_a_shared_one(tmp_path):
    """`release` (called when the augment model is freed), on engines faked without vLLM: an engine that served
    the released policy alone is shut down and its folder removed; a shared one only forgets it."""
    from types import SimpleNamespace

    from genenv_pl.backends.vllm import VLLMBackend, _Engine

    class FakeLLM:
        def __init__(self):
            self.shut = False
            self.llm_engine = SimpleNamespace(engine_core=SimpleNamespace(shutdown=self._shutdown), remove_lora=lambda i: None)

        def _shutdown(self):
            self.shut = True

    class Policy:  # (weak references: the backend keys its policies weakly)
        pass

    backend = VLLMBackend()
    writer, agent, simulator = Policy(), Policy(), Policy()
    own, shared = tmp_path / "own", tmp_path / "shared"
    own.mkdir(), shared.mkdir()
    backend._engines = {"big": _Engine(FakeLLM(), "big", str(own), False),
                        "small": _Engine(FakeLLM(), "small", str(shared), False)}
    uids = {p: backend._uid(p) for p in (writer, agent, simulator)}
    backend._engine_of = {uids[writer]: "big", uids[agent]: "small", uids[simulator]: "small"}
    backend._engines["small"].loaded = (uids[simulator], ())
    llm = backend._engines["big"].llm
    backend.release(writer)
    assert llm.shut and not own.exists() and set(backend._engines) == {"small"}
    backend.release(simulator)  # shares its engine with the agent: the engine stays, and pushes anew next time
    assert not backend._engines["small"].llm.shut and shared.exists() and backend._engines["small"].loaded is None
    assert backend._engine_of == {uids[agent]: "small"}
    backend.release(Policy())  # a policy it never served: nothing to do
