"""Fault tests: a run killed mid-epoch (SIGKILL, real subprocess) resumes with its pools intact;
an unreadable checkpoint falls back or fails with a clear message."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

REPO = Path(__file__).resolve().parents[1]


def _config(tmp: Path, cache: Path, max_epochs: int, save_top_k: int = 0) -> str:
    cfg = {
        "trainer": {
            "max_epochs": max_epochs, "check_val_every_n_epoch": 1000, "logger": False,
            "callbacks": [
                {"class_path": "callbacks.AlphaCurriculumCallback", "init_args": {"filtering_k": 0.5}},
                {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                 "init_args": {"dirpath": str(tmp / "ckpt"), "save_last": True, "every_n_epochs": 1,
                               "save_top_k": save_top_k, "monitor": None}},
            ],
        },
        "model": {"cache_dir": str(cache), "eval_at_start": False,
                  "agent": {"warm_start": {"steps": 150, "batch_size": 32}},
                  "simulator": {"tiny": {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 2,
                                         "intermediate_size": 192},
                                "warm_start": {"steps": 300, "batch_size": 32}}},
        "data": {"env_args": {"eval_per_level": 5, "seeds_per_level": 2}, "coevo": {"seeds_per_epoch": 6}},
    }
    path = tmp / f"faults-{max_epochs}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _cmd(tmp: Path, cache: Path, max_epochs: int, *extra: str) -> list[str]:
    return [sys.executable, str(REPO / "main.py"), "fit", "--config", str(REPO / "configs/quickstart.yaml"),
            "--config", _config(tmp, cache, max_epochs), *extra]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fault-cache")


def _pools(path: Path) -> dict:
    return torch.load(path, weights_only=False)["GenEnvDataModule"]["pools"]


def _epoch(path: Path) -> int:
    try:  # the file may be mid-write
        return torch.load(path, weights_only=False)["epoch"]
    except Exception:
        return -1


def _keys(entries: list[dict]) -> list[tuple]:
    return [(e["epoch"], e["task"]["id"]) if "task" in e else (e["epoch"], e["seed_id"], e["text"]) for e in entries]


def test_sigkill_mid_run_then_resume_keeps_pools(tmp_path, cache):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    last = tmp_path / "ckpt" / "last.ckpt"
    proc = subprocess.Popen(_cmd(tmp_path, cache, 1000), cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None:
            # Kill once two epochs are checkpointed: the run is then somewhere inside a later epoch.
            if _epoch(last) >= 1:
                break
            time.sleep(0.5)
        assert proc.poll() is None, proc.stderr.read()[-3000:]
        time.sleep(1.0)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    saved = _pools(last)
    saved_epoch = torch.load(last, weights_only=False)["epoch"]
    assert saved["train"]

    resumed = subprocess.run(_cmd(tmp_path, cache, saved_epoch + 3, "--ckpt_path", "last"), cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    after = _pools(last)
    for pool in ("train", "env"):
        assert after[pool][: len(saved[pool])] == saved[pool]  # nothing lost
        keys = _keys(after[pool])
        assert len(keys) == len(set(keys))  # nothing duplicated
        assert all(e["epoch"] > saved_epoch for e in after[pool][len(saved[pool]):])  # training continued
    assert len(after["train"]) > len(saved["train"])


def test_corrupted_last_checkpoint_fails_clearly_or_falls_back(tmp_path, cache):
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    first = subprocess.run(_cmd(tmp_path, cache, 2), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    last = tmp_path / "ckpt" / "last.ckpt"
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])  # a torn write

    failed = subprocess.run(_cmd(tmp_path, cache, 3, "--ckpt_path", "last"), cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=600)
    assert failed.returncode != 0
    assert "unreadable" in failed.stderr and "last.ckpt" in failed.stderr
    assert "Traceback" not in failed.stderr

    # With an intact checkpoint beside it, the run falls back to that one and continues.
    intact = tmp_path / "ckpt" / "epoch=1-intact.ckpt"
    intact.write_bytes(data)
    os.utime(last, None)
    resumed = subprocess.run(_cmd(tmp_path, cache, 3, "--ckpt_path", "last"), cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming from" in resumed.stderr and "epoch=1-intact.ckpt" in resumed.stderr
