"""Fault tests with real `python main.py fit` subprocesses: a run SIGKILLed mid-run resumes from its last
checkpoint with its pools, counters and optimizers intact; an unreadable last checkpoint falls back to an
intact one beside it, or fails with one clear line.

The runs use the quickstart config with its own ModelCheckpoint settings (only the folder and the interval
changed), so a config that never writes last.ckpt before the end of training fails here. Output goes to
files, never to an unread pipe (a full pipe blocks the child). The warm-started tiny models are cached
once per module (model.cache_dir)."""
from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml

# Subprocess fits killed and resumed (about a minute on one core): the slow stage of `.ci/run` runs them.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "quickstart.yaml"
WAIT_FOR_CHECKPOINT_S = 240  # warm start (first run of the module) + startup + two epochs, on a loaded 2-core box
RUN_TIMEOUT_S = 300
TINY = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 2, "intermediate_size": 192}


def _shipped_checkpoint_args() -> dict:
    cbs = yaml.safe_load(QUICKSTART.read_text())["trainer"]["callbacks"]
    (ckpt,) = [c for c in cbs if c["class_path"].endswith("ModelCheckpoint")]
    return dict(ckpt.get("init_args") or {})


def _override(tmp: Path, cache: Path, max_epochs: int) -> str:
    ckpt_args = {**_shipped_checkpoint_args(), "dirpath": str(tmp / "ckpt"), "every_n_epochs": 1}
    cfg = {
        "trainer": {
            "max_epochs": max_epochs, "logger": False, "limit_val_batches": 0, "check_val_every_n_epoch": 1,
            "callbacks": [
                # print every epoch: the resumed run's first printed epoch shows where it continued.
                {"class_path": "callbacks.AlphaCurriculumCallback",
                 "init_args": {"filtering_k": 0.5, "print_every_n_epochs": 1}},
                {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", "init_args": ckpt_args},
            ],
        },
        # Two ~0.1M policies: the agent needs no skill here; the simulator is warm-started just enough to
        # write mostly valid tasks, so that both pools fill.
        "model": {"cache_dir": str(cache), "eval_at_start": False,
                  "agent": {"tiny": TINY, "warm_start": {"steps": 60, "batch_size": 32}},
                  "simulator": {"tiny": TINY, "warm_start": {"steps": 200, "batch_size": 32}}},
        "data": {"env_args": {"eval_per_level": 5, "seeds_per_level": 2},
                 "coevo": {"seeds_per_epoch": 6, "drop_zero_std_groups": False}},
    }
    path = tmp / f"override-{max_epochs}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _cmd(tmp: Path, cache: Path, max_epochs: int, *extra: str) -> list[str]:
    return [sys.executable, str(REPO / "main.py"), "fit", "--config", str(QUICKSTART),
            "--config", _override(tmp, cache, max_epochs), *extra]


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


class _Logs:
    """stdout/stderr of one child in files (an unread PIPE fills up and blocks the child)."""

    def __init__(self, tmp: Path, name: str):
        self.out, self.err = tmp / f"{name}.out", tmp / f"{name}.err"

    def open(self):
        return open(self.out, "w"), open(self.err, "w")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace") if self.err.exists() else ""

    def tail(self, n: int = 4000) -> str:
        return f"--- stderr tail ({self.err}) ---\n{self.stderr()[-n:]}"


def _run(tmp: Path, name: str, cmd: list[str]) -> tuple[int, _Logs]:
    logs = _Logs(tmp, name)
    out, err = logs.open()
    with out, err:
        rc = subprocess.run(cmd, cwd=tmp, env=_env(), stdout=out, stderr=err, timeout=RUN_TIMEOUT_S).returncode
    return rc, logs


def _printed_epochs(logs: _Logs) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"^epoch\s+(\d+) \|", logs.stderr(), re.M)]


def _load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=False)


def _resume_target(ckpt_dir: Path) -> Path:
    """The checkpoint `--ckpt_path last` resumes from, as the CLI decides it (a torn last.ckpt falls back)."""
    import warnings

    from lightning.pytorch.callbacks import ModelCheckpoint

    from genenv_pl.cli import checked_checkpoint

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = SimpleNamespace(callbacks=[ModelCheckpoint(dirpath=str(ckpt_dir))])
        return Path(checked_checkpoint("last", trainer))


def _entry_counts(entries: list[dict]) -> collections.Counter:
    return collections.Counter(json.dumps(e, sort_keys=True) for e in entries)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fault-model-cache")


def test_sigkill_mid_run_then_resume_keeps_pools_counters_and_epochs(tmp_path, cache):
    ckpt_dir, last = tmp_path / "ckpt", tmp_path / "ckpt" / "last.ckpt"
    logs = _Logs(tmp_path, "killed")
    out, err = logs.open()
    with out, err:
        proc = subprocess.Popen(_cmd(tmp_path, cache, 1000), cwd=tmp_path, env=_env(), stdout=out, stderr=err)
    try:
        # Wait for last.ckpt and the end of epoch 1 (cheap polling: a file and the child's stderr), then let the
        # run go on into the next epoch and kill it there.
        deadline = time.monotonic() + WAIT_FOR_CHECKPOINT_S
        while not (last.exists() and max(_printed_epochs(logs), default=-1) >= 1):
            if proc.poll() is not None:
                pytest.fail(f"the run exited (rc {proc.returncode}) before checkpointing epoch 1\n{logs.tail()}")
            if time.monotonic() > deadline:
                files = sorted(p.name for p in ckpt_dir.glob("*")) if ckpt_dir.exists() else []
                pytest.fail(f"no last.ckpt and epoch 1 after {WAIT_FOR_CHECKPOINT_S}s (files in {ckpt_dir}: {files}); "
                            f"does the ModelCheckpoint write last.ckpt at every epoch end? Lightning >= 2.6 writes "
                            f"it only together with a top-k save (save_top_k: 0 never does before training ends)"
                            f"\n{logs.tail()}")
            time.sleep(0.1)
        time.sleep(0.5)  # an epoch takes a second or two here: the kill lands inside the next one
        assert proc.poll() is None, f"the run ended before it could be killed\n{logs.tail()}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    killed_epochs = _printed_epochs(logs)

    source = _resume_target(ckpt_dir)  # last.ckpt, or its intact sibling when the kill tore last.ckpt
    saved = _load(source)
    e = saved["epoch"]
    assert e >= 1 and saved["GenEnvDataModule"]["pools"]["train"], source
    assert max(killed_epochs) <= e + 1  # the killed run had not finished a later epoch than the one saved + 1

    rc, resumed_logs = _run(tmp_path, "resumed", _cmd(tmp_path, cache, e + 3, "--ckpt_path", "last"))
    assert rc == 0, resumed_logs.tail()
    final = _load(last)

    # Epochs continue right after the checkpointed one: none repeated, none skipped.
    assert _printed_epochs(resumed_logs) == [e + 1, e + 2], resumed_logs.tail()
    assert final["epoch"] == e + 2

    # Counters and optimizers continue from the checkpoint's values.
    c0, c1 = saved["genenv_counters"], final["genenv_counters"]
    assert all(c1[k] >= v for k, v in c0.items()), (c0, c1)
    assert c1["agent_updates"] > c0["agent_updates"] and final["global_step"] > saved["global_step"]
    agent_opt, sim_opt = final["optimizer_states"]
    assert {int(s["step"]) for s in agent_opt["state"].values()} == {c1["agent_updates"]}
    assert {int(s["step"]) for s in sim_opt["state"].values()} == {c1["sim_updates"]}

    # Pools: every entry of the killed run's checkpoint exactly once, in order, then entries of the resumed
    # epochs only (an entry of epoch <= e would come from generating an already finished epoch again).
    dm0, dm1 = saved["GenEnvDataModule"], final["GenEnvDataModule"]
    for name in ("train", "env"):
        before, after = dm0["pools"][name], dm1["pools"][name]
        assert after[: len(before)] == before, f"D_{name}: the checkpointed entries changed"
        counts_after = _entry_counts(after)
        assert all(counts_after[k] == c for k, c in _entry_counts(before).items()), f"D_{name}: an entry lost or duplicated"
        added = collections.Counter(x["epoch"] for x in after[len(before):])
        assert set(added) <= {e + 1, e + 2}, (
            f"D_{name}: the resumed run added entries of already checkpointed epochs (epoch -> entries: {dict(added)}; "
            f"checkpoint of epoch {e}): train_dataloader() generated epoch {e} again on resume")
    assert {x["epoch"] for x in dm1["pools"]["train"][len(dm0["pools"]["train"]):]} == {e + 1, e + 2}
    assert len(dm1["pools"]["env"]) > len(dm0["pools"]["env"])
    assert set(dm0["success_rates"]) <= set(dm1["success_rates"])


def test_unreadable_last_checkpoint_falls_back_beside_it_or_fails_in_one_line(tmp_path, cache):
    ckpt_dir, last = tmp_path / "ckpt", tmp_path / "ckpt" / "last.ckpt"
    rc, logs = _run(tmp_path, "first", _cmd(tmp_path, cache, 2))
    assert rc == 0, logs.tail()
    siblings = [p for p in ckpt_dir.glob("*.ckpt") if p != last]
    assert last.exists() and siblings, f"expected last.ckpt and an epoch checkpoint in {sorted(ckpt_dir.iterdir())}"
    intact = max(siblings, key=lambda p: p.stat().st_mtime)
    intact_state = _load(intact)

    # 1. Bytes overwritten inside last.ckpt (its size unchanged): resume falls back to the intact sibling.
    data = bytearray(last.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 4096] = os.urandom(4096)
    last.write_bytes(bytes(data))
    rc, logs = _run(tmp_path, "fallback", _cmd(tmp_path, cache, 3, "--ckpt_path", "last"))
    assert rc == 0, logs.tail()
    err = logs.stderr()
    assert f"checkpoint {last} is unreadable" in err and f"resuming from {intact} instead" in err, logs.tail()
    assert _printed_epochs(logs) == [intact_state["epoch"] + 1], logs.tail()
    newest = max(ckpt_dir.glob("last*.ckpt"), key=lambda p: p.stat().st_mtime)
    resumed = _load(newest)
    assert resumed["epoch"] == intact_state["epoch"] + 1
    before = intact_state["GenEnvDataModule"]["pools"]["train"]
    assert resumed["GenEnvDataModule"]["pools"]["train"][: len(before)] == before

    # 2. A torn (truncated) last.ckpt with no readable checkpoint beside it: one clear line, no traceback.
    for p in ckpt_dir.glob("*.ckpt"):  # the epoch checkpoints (and a last-v1.ckpt, if the fallback wrote one)
        if p != last:
            p.unlink()
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 3])
    rc, logs = _run(tmp_path, "torn", _cmd(tmp_path, cache, 4, "--ckpt_path", "last"))
    err = logs.stderr()
    assert rc != 0, logs.tail()
    lines = [ln for ln in err.splitlines() if "unreadable" in ln]
    assert lines == [f"error: checkpoint {last} is unreadable (truncated or corrupted) and no other checkpoint is beside "
                     f"it; delete it to start afresh, or pass --ckpt_path to an intact checkpoint."], logs.tail()
    assert "Traceback" not in err, logs.tail()
    assert not _printed_epochs(logs)  # nothing trained
    assert last.stat().st_size == len(data) // 3  # the torn file is left for the user to inspect
