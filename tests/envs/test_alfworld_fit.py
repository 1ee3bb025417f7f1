"""configs/alfworld.yaml on a CPU with tiny models (configs/tiny/alfworld.yaml): the documented
offline override, run for real (real games, real engine, single-step protocol), then `test` on
its checkpoint."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

pytest.importorskip("alfworld")
pytest.importorskip("textworld")

from genenv_pl.cli import cli_main  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def test_tiny_override_fits_and_tests_offline(tmp_path):
    os.chdir(tmp_path)  # relative paths of the configs (runs/, checkpoints/, .cache/) stay in tmp
    override = tmp_path / "override.yaml"
    override.write_text(yaml.safe_dump({"trainer": {"max_epochs": 1, "check_val_every_n_epoch": 1}}))
    configs = ["--config", str(REPO / "configs/alfworld.yaml"), "--config", str(REPO / "configs/tiny/alfworld.yaml"),
               "--config", str(override)]
    cli = cli_main(["fit", *configs])
    assert cli.model.counters["agent_updates"] >= 1
    assert cli.trainer.callback_metrics["val/accuracy"] >= 0.0
    ckpt = tmp_path / "checkpoints" / "alfworld-tiny" / "last.ckpt"
    assert ckpt.exists()
    # A 10-step warm start writes mostly invalid steps: they are counted and dropped, never raised.
    metrics = cli.datamodule.last_round.metrics
    assert 0.0 <= metrics["coevo/invalid_rate"] <= 1.0 and metrics["coevo/valid_tasks"] >= 0

    # Plus 3 short episodes in the real engine, 2 games in lockstep through the module's batched player.
    cli_main(["test", *configs, "--ckpt_path", str(ckpt), "--data.coevo.eval_episodes", "3",
              "--data.coevo.eval_batch_size", "2", "--data.env_args.max_episode_steps", "2"])
    results = list((tmp_path / "runs").glob("alfworld-tiny/version_*/test_results.json"))
    assert results
    table = json.loads(results[-1].read_text())
    assert table["env"] == "alfworld" and table["groups"]["overall"]["n"] > 0
    assert 0.0 <= table["groups"]["overall"]["accuracy"] <= 1.0
    episodes = table["episodes"]
    assert episodes["episodes"] == 3 and episodes["skipped"] == 0
    assert 1.0 <= episodes["mean_steps"] <= 2.0 and 0.0 <= episodes["format_error_rate"] <= 1.0
