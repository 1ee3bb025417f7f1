"""configs/alfworld.yaml on a CPU with tiny models (configs/tiny/alfworld.yaml): the documented
offline override, run for real (real games, real engine, single-step protocol), then `test` on
its checkpoint. The data and the engine are gated as in test_alfworld.py: missing, the test skips,
except in CI, where it fails."""
from __future__ import annotations

import json
import math
import os
from collections import Counter
from pathlib import Path

import pytest
import yaml

from genenv_pl.cli import cli_main
from genenv_pl.envs.alfworld_game import TASK_TYPES
from test_alfworld import needs_engine

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "configs/tiny/alfworld.yaml"
# What the epoch's evaluation covers (data.env_args.max_games_per_split 3): 5 groups of step tasks.
EVAL_GROUPS = 5


@pytest.mark.slow  # an ALFWorld fit, test and episodes with tiny models (about 95 s): the slow stage of .ci/run
def test_tiny_override_fits_and_tests_offline(tmp_path):
    needs_engine("alfworld")
    needs_engine("textworld")
    os.chdir(tmp_path)  # relative paths of the configs (runs/, checkpoints/, .cache/) stay in tmp
    override = tmp_path / "override.yaml"
    override.write_text(yaml.safe_dump({"trainer": {"max_epochs": 1, "check_val_every_n_epoch": 1}}))
    configs = ["--config", str(REPO / "configs/alfworld.yaml"), "--config", str(TINY), "--config", str(override)]
    coevo = yaml.safe_load(TINY.read_text())["data"]["coevo"]
    seeds, k, g = coevo["seeds_per_epoch"], coevo["num_generations_per_prompt"], coevo["group_size"]
    base, limit = coevo["base_tasks_per_epoch"], coevo["eval_limit_per_group"]

    cli = cli_main(["fit", *configs])
    module, dm = cli.model, cli.datamodule
    stats, counters = dm.last_round, module.counters
    metrics = stats.metrics
    # Generation: K outputs for each seed; a 10-step warm start writes mostly invalid steps, which are
    # counted by reason and dropped, never raised.
    assert len(stats.batches) == seeds
    assert all(len(b.generations) + b.invalid.get("overlong_prompt", 0) == k for b in stats.batches)
    valid = sum(len(b.tasks) for b in stats.batches)
    invalid = sum(sum(b.invalid.values()) for b in stats.batches)
    duplicates = sum(b.duplicates for b in stats.batches)
    assert valid + invalid + duplicates == seeds * k
    assert metrics["coevo/valid_tasks"] == valid
    assert metrics["coevo/invalid_rate"] == pytest.approx(invalid / (seeds * k))
    assert metrics["coevo/duplicate_rate"] == pytest.approx(duplicates / (seeds * k))
    reasons = {key for key in metrics if key.startswith("coevo/invalid/")}
    assert reasons == {f"coevo/invalid/{r}" for b in stats.batches for r in b.invalid}
    assert set(metrics) - reasons == {
        "coevo/success_rate", "coevo/alpha_reward", "coevo/in_band_frac", "coevo/task_success_rate",
        "coevo/task_in_band_frac", "coevo/task_alpha_gap", "coevo/sim_samples", "coevo/invalid_rate",
        "coevo/duplicate_rate", "coevo/difficulty", "coevo/valid_tasks", "coevo/overlong_tasks",
        "agent/zero_std_frac", "agent/train_reward", "agent/tasks_seen", "perf/rollout_tokens_per_s",
        "perf/generation_seconds", "agent/response_length", "coevo/solved_frac", "coevo/partial_frac",
        "coevo/unsolved_frac"}
    # Rollouts: G for each valid task and each base task (D_train is still empty when epoch 0 draws replays;
    # every prompt fits max_seq_len).
    assert metrics["coevo/overlong_tasks"] == 0
    assert Counter(gr.source for gr in stats.groups) == Counter({"fresh": valid, "base": base})
    assert all(len(gr.rewards) == g for gr in stats.groups)
    rolled = valid + base
    assert dm.tasks_seen == metrics["agent/tasks_seen"] == rolled
    assert len(dm.pools.train) == valid and len(dm.pools.env) == metrics["coevo/sim_samples"]
    # Training steps: one agent step per agent_batch_size groups, one simulator step per sim_batch_size samples.
    assert counters["agent_updates"] == math.ceil(rolled / coevo["agent_batch_size"]) >= 1
    assert counters["sim_updates"] + counters["sim_skipped_kl"] == math.ceil(len(dm.pools.env) / coevo["sim_batch_size"])
    assert counters["nonfinite_skipped"] == 0
    # Validation: `limit` tasks of each group, the overall accuracy their mean.
    val = {key: float(v) for key, v in cli.trainer.callback_metrics.items() if key.startswith("val/")}
    groups = {key for key in val if key.startswith("val/accuracy_")}
    assert len(groups) == EVAL_GROUPS and set(val) == {"val/accuracy", "val/format_error_rate"} | groups
    assert len(dm.eval_tasks()) == limit * EVAL_GROUPS
    assert val["val/accuracy"] == pytest.approx(sum(val[key] for key in groups) / EVAL_GROUPS)
    ckpt = tmp_path / "checkpoints" / "alfworld-tiny" / "last.ckpt"
    assert ckpt.exists()

    # Plus 3 short episodes in the real engine, 2 games in lockstep through the module's batched player.
    cli_main(["test", *configs, "--ckpt_path", str(ckpt), "--data.coevo.eval_episodes", "3",
              "--data.coevo.eval_batch_size", "2", "--data.env_args.max_episode_steps", "2"])
    results = list((tmp_path / "runs").glob("alfworld-tiny/version_*/test_results.json"))
    assert len(results) == 1
    table = json.loads(results[0].read_text())
    assert table["env"] == "alfworld"
    per_group = {name: s for name, s in table["groups"].items() if name != "overall"}
    assert len(per_group) == EVAL_GROUPS and all(s["n"] == limit for s in per_group.values())
    overall = table["groups"]["overall"]
    assert overall["n"] == limit * EVAL_GROUPS
    assert overall["accuracy"] == pytest.approx(sum(s["accuracy"] for s in per_group.values()) / EVAL_GROUPS)
    episodes = table["episodes"]
    assert episodes["episodes"] == 3 and episodes["skipped"] == 0
    assert sum(episodes.get(f"episodes/{split}", 0.0) for split in ("valid_seen", "valid_unseen")) == 3
    assert sum(episodes.get(f"episodes/{t}", 0.0) for t in TASK_TYPES) == 3
    # An episode that is not won plays all max_episode_steps (2) commands.
    assert episodes["mean_steps"] == 2.0 or episodes["success_rate"] > 0
    assert 1.0 <= episodes["mean_steps"] <= 2.0 and 0.0 <= episodes["format_error_rate"] <= 1.0
