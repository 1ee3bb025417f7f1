"""bench/sim_audit.py: the counts it keeps (table-driven), and a real audit of the quickstart's simulator,
initial and from a fit's checkpoint (whose data-module state it must restore)."""
from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from genenv_pl.backends.base import Generation
from genenv_pl.cli import cli_main
from genenv_pl.coevo import SeedBatch
from genenv_pl.envs.base import Task

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO / "bench"))
import sim_audit  # noqa: E402


def _batch(n_out: int, checks: list[dict | None], invalid: dict | None = None, duplicates: int = 0) -> SeedBatch:
    seed = Task(id="s", data={})
    b = SeedBatch(seed=seed, prompt="p", generations=[Generation([], [], "", [], True) for _ in range(n_out)])
    b.tasks = [Task(id=f"t{i}", data={}, meta={} if c is None else {"checks": c}) for i, c in enumerate(checks)]
    b.invalid, b.duplicates = Counter(invalid or {}), duplicates
    return b


@pytest.mark.parametrize("batches, want", [
    # 4 written: 2 valid (both checked, one gold valid), 1 unparseable, 1 duplicate
    ([_batch(4, [{"gold_valid": 1.0, "replayable": 1.0}, {"gold_valid": 0.0, "replayable": 1.0}],
             {"unparseable": 1}, duplicates=1)],
     {"generated": 4, "valid": 2, "valid_rate": 0.5, "checked": 2, "checks": {"gold_valid": 0.5, "replayable": 1.0},
      "invalid": {"unparseable": 1}, "duplicates": 1}),
    # a seed whose prompt was too long: its K outputs were never generated but count as written and invalid
    ([_batch(2, [{"gold_valid": 1.0}]), _batch(0, [], {"overlong_prompt": 2})],
     {"generated": 4, "valid": 1, "valid_rate": 0.25, "checked": 1, "checks": {"gold_valid": 1.0},
      "invalid": {"overlong_prompt": 2}, "duplicates": 0}),
    # an environment that checks nothing: a valid rate, no gold validity
    ([_batch(3, [None, None])], {"generated": 3, "valid": 2, "valid_rate": 2 / 3, "checked": 0, "checks": {},
                                 "invalid": {}, "duplicates": 0}),
    ([], {"generated": 0, "valid": 0, "valid_rate": None, "checked": 0, "checks": {}, "invalid": {}, "duplicates": 0}),
])
def test_audit_batches_counts(batches, want):
    assert sim_audit.audit_batches(batches) == want


def test_audit_of_the_initial_simulator_and_of_a_checkpoint(tmp_path, cache):
    os.chdir(tmp_path)  # the config's relative paths (cache, runs, checkpoints) stay here
    quick = tmp_path / "quick.yaml"  # short warm starts (as tests/test_fit.py's): a simulator that writes valid tasks
    quick.write_text(yaml.safe_dump({
        "trainer": {"max_epochs": 1, "logger": False, "callbacks": [
            {"class_path": "callbacks.AlphaCurriculumCallback", "init_args": {"filtering_k": 0.5}},
            {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
             "init_args": {"dirpath": str(tmp_path / "ckpt"), "save_last": True, "save_top_k": 0}}]},
        "model": {"eval_at_start": False, "cache_dir": str(cache),  # (the session's: test_fit's models)
                  "agent": {"warm_start": {"steps": 150, "batch_size": 32}},
                  "simulator": {"tiny": {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 2,
                                         "intermediate_size": 192}, "warm_start": {"steps": 300, "batch_size": 32}}},
        "data": {"env_args": {"eval_per_level": 10, "seeds_per_level": 2}, "coevo": {"seeds_per_epoch": 4}}}))
    configs = ["--config", str(REPO / "configs/quickstart.yaml"), "--config", str(quick)]

    initial = sim_audit.main([*configs, "--seeds-per-round", "3", "--max-rounds", "2", "--out", str(tmp_path / "a.json")])
    assert initial["seeds"] == 6 and initial["generated"] == 6 * 4  # two rounds of 3 seeds, K 4 (nothing checked)
    assert json.loads((tmp_path / "a.json").read_text()) == initial
    assert initial["success_rates_shown"] == 0 and initial["ckpt"] is None
    assert not (tmp_path / "ckpt").exists()  # the fit it rode on stopped at its start

    cli_main(["fit", *configs])
    ckpt = tmp_path / "ckpt" / "last.ckpt"
    after = sim_audit.main([*configs, "--ckpt_path", str(ckpt), "--seeds-per-round", "3", "--max-rounds", "1",
                            "--out", str(tmp_path / "b.json")])
    # the simulator's prompt shows the success rates the fit measured: the data module's state was restored
    assert after["success_rates_shown"] > 0 and after["generated"] == 3 * 4
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["last.ckpt"]  # nothing written beside it
