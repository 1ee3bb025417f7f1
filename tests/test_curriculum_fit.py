"""The alpha-curriculum path in real fits, on an environment whose success odds are known: which seed
batches train the simulator, with which weights, and what D_env keeps."""
from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path

import lightning as L
import pytest
import torch

from genenv_pl.envs import REGISTRY
from genenv_pl.envs.arithmetic import ArithmeticEnv
from test_fit import REPO, _override

G = 4  # the quickstart's group_size


class KnownOdds(ArithmeticEnv):
    """Arithmetic whose seeds, each with all its variations, are solved by every answer ("always"), by none
    ("never") or by every second answer scored for the task ("half": G/2 of its G rollouts, G even),
    whatever the agent writes."""

    KINDS = ("always", "never", "half")
    P_HAT = {"always": 1.0, "never": 0.0, "half": 0.5}

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        for i, seed in enumerate(self._seeds):
            seed.meta["kind"] = self.KINDS[i % len(self.KINDS)]
        self._scored: Counter = Counter()

    def parse_task(self, text, seed):
        task = super().parse_task(text, seed)
        task.meta["kind"] = seed.meta["kind"]
        return task

    def reward(self, task, response: str) -> float:
        kind = task.meta.get("kind")
        if kind == "half":
            self._scored[task.id] += 1
            return float(self._scored[task.id] % 2)
        return float(kind == "always")



@pytest.fixture(autouse=True)
def known_odds(monkeypatch):
    monkeypatch.setitem(REGISTRY, "known_odds", f"{__name__}:KnownOdds")


class _Record(L.Callback):
    """Per epoch: what generation produced (the data module's RoundStats) and the simulator batches the
    module was given."""

    def __init__(self):
        self.rounds, self.sim = [], []

    def on_train_epoch_start(self, trainer, module):
        self.rounds.append(trainer.datamodule.last_round)
        self.sim.append([])

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if batch["sim"] is not None:
            self.sim[-1].append({k: v.clone() for k, v in batch["sim"].items()})


def _fit(tmp: Path, cache: Path, epochs: int, curriculum: dict, *args: str):
    from genenv_pl.cli import GenEnvCLI
    from genenv_pl.datamodule import GenEnvDataModule
    from genenv_pl.module import GenEnvModule

    os.chdir(tmp)
    record = _Record()
    cli = GenEnvCLI(GenEnvModule, GenEnvDataModule, run=False,
                    args=["--config", str(REPO / "configs/quickstart.yaml"),
                          "--config", _override(tmp, cache, epochs, curriculum=curriculum), "--data.env", "known_odds",
                          # one seed per level, levels 1-6: each epoch's six seeds are two of each kind
                          "--data.env_args", json.dumps({"eval_per_level": 10, "seeds_per_level": 1}),
                          "--model.eval_at_start", "false", "--trainer.limit_val_batches", "0", *args])
    assert isinstance(cli.datamodule.env, KnownOdds)
    cli.trainer.callbacks.append(record)
    cli.trainer.fit(cli.model, cli.datamodule)
    return cli, record


def test_rwr_weights_have_mean_one_over_the_epochs_whole_update(tmp_path, cache):
    """Every scored seed batch in band (k_min 0.5): R_env is exp(-0.5) for the always and never batches,
    1 for the half ones. The update runs in steps of 3 samples; a sample's weight is exp(lam R) over its
    mean on the epoch's whole update, not on its own step."""
    cli, record = _fit(tmp_path, cache, 1, {"filtering_k": 0.5}, "--data.coevo.sim_batch_size", "3")
    steps = record.sim[0]
    assert len(steps) >= 2
    r, w = torch.cat([b["r_env"] for b in steps]).double(), torch.cat([b["weights"] for b in steps]).double()
    assert r.min().item() == pytest.approx(math.exp(-0.5)) and r.max().item() == pytest.approx(1.0)
    assert len(r) == len(cli.datamodule.pools.env)  # the whole in-band set, in these steps
    raw = torch.exp(cli.model.rwr.rwr_lambda * r)
    assert torch.allclose(w, raw / raw.mean(), rtol=1e-5)
    assert w.mean().item() == pytest.approx(1.0)
    assert max(abs(b["weights"].mean().item() - 1.0) for b in steps) > 0.01  # no step has mean 1 on its own


def _texts(tokenizer, b: dict[str, torch.Tensor]) -> list[str]:
    """The response text of each row of a simulator batch."""
    return [tokenizer.decode(ids[m.bool()].tolist(), skip_special_tokens=True)
            for ids, m in zip(b["input_ids"], b["response_mask"])]


def test_d_env_replay_joins_the_simulator_update_with_its_stored_r_env(tmp_path, cache):
    """rwr.replay_per_epoch 3: from the second epoch on, the simulator's update holds the epoch's in-band
    samples plus 3 drawn from D_env (its earlier epochs), which carry their stored R_env into the weights
    (normalized over the whole update), have no sampling log-probs, and are not added to D_env again."""
    cli, record = _fit(tmp_path, cache, 2, {"filtering_k": 0.5}, "--model.rwr.replay_per_epoch", "3")
    tokenizer, lam, d_env = cli.model.simulator.tokenizer, cli.model.rwr.rwr_lambda, cli.datamodule.pools.env
    stored = {(e["text"], e["r_env"]) for e in d_env if e["epoch"] == 0}
    for epoch, steps in enumerate(record.sim):
        own = [e for e in d_env if e["epoch"] == epoch]
        rows = [(text, float(r), float(w), bool(torch.isnan(old[m.bool()]).all()))
                for b in steps for text, r, w, old, m in zip(_texts(tokenizer, b), b["r_env"], b["weights"], b["old_logp"],
                                                             b["response_mask"])]
        replayed = [row for row in rows if row[3]]
        assert len(replayed) == (3 if epoch else 0)  # D_env is empty when the first epoch draws
        assert all(any(text == t and r == pytest.approx(s) for t, s in stored) for text, r, _, _ in replayed)
        assert sorted(text for text, _, _, nan in rows if not nan) == sorted(e["text"] for e in own)
        r, w = torch.tensor([row[1] for row in rows], dtype=torch.float64), torch.tensor([row[2] for row in rows])
        raw = torch.exp(lam * r)
        assert torch.allclose(w.double(), raw / raw.mean(), rtol=1e-5)
    assert {e["epoch"] for e in d_env} == {0, 1}


def test_alpha_curriculum_path_on_known_success_odds(tmp_path, cache):
    """Two epochs at alpha 0.5, k_min 0.1: always-solved seed batches (p_hat 1) and never-solved ones
    (p_hat 0) stay out of band, half-solved ones (0.5) are in. Per seed batch, p_hat = successes / (K_valid G)
    and R_env = exp(-beta (p_hat - alpha)^2); the simulator trains on exactly the in-band batches'
    generations, each with its batch's R_env and a weight of mean 1, and D_env holds exactly those."""
    alpha, beta, k_min = 0.5, 2.0, 0.1
    cli, record = _fit(tmp_path, cache, 2, {"alpha": alpha, "beta": beta, "filtering_k": k_min})
    rewards = {"always": [1.0] * G, "never": [0.0] * G, "half": [1.0, 0.0] * (G // 2)}
    n_steps = 0
    for epoch, (stats, steps) in enumerate(zip(record.rounds, record.sim)):
        kinds = [b.seed.meta["kind"] for b in stats.batches]
        assert sorted(kinds) == sorted(KnownOdds.KINDS * 2)  # the six seeds, two of each kind
        for i, (b, kind) in enumerate(zip(stats.batches, kinds)):
            groups = [g for g in stats.groups if g.seed_index == i]
            assert b.tasks and sorted(g.task.id for g in groups) == sorted(t.id for t in b.tasks)  # K_valid tasks
            assert all(g.rewards == rewards[kind] for g in groups)
            successes = sum(s for g in groups for s in g.successes)
            assert b.p_hat == successes / (len(b.tasks) * G) == KnownOdds.P_HAT[kind]
            assert b.r_env == pytest.approx(math.exp(-beta * (b.p_hat - alpha) ** 2))
            assert b.in_band == (abs(b.p_hat - alpha) <= k_min) == (kind == "half")

        in_band = [(b, g) for b in stats.batches if b.in_band for g in b.task_generations]
        # The epoch's simulator update: each in-band generation once, as sampled, with its batch's R_env.
        rows = Counter((tuple(ids[a.bool()].tolist()), round(float(r), 6))
                       for s in steps for ids, a, r in zip(s["input_ids"], s["attention_mask"], s["r_env"]))
        assert rows == Counter((tuple(g.prompt_ids + g.response_ids), round(b.r_env, 6)) for b, g in in_band)
        weights = torch.cat([s["weights"] for s in steps])
        assert weights.mean().item() == pytest.approx(1.0)
        n_steps += len(steps)
        # D_env: exactly those samples, with their scores.
        d_env = [(e["seed_id"], e["prompt"], e["text"], e["p_hat"], e["r_env"])
                 for e in cli.datamodule.pools.env if e["epoch"] == epoch]
        assert Counter(d_env) == Counter((b.seed.id, b.prompt, g.text, b.p_hat, b.r_env) for b, g in in_band)
    assert n_steps >= 2 and cli.model.counters["sim_updates"] + cli.model.counters["sim_skipped_kl"] == n_steps
