"""Every run ends with one block that says what it achieved (callbacks.RunSummary, added by the CLI
without any config change): its numbers are the ones the run logged."""
from __future__ import annotations

import glob
import json
import logging
import os
import re
from pathlib import Path

import pytest

from genenv_pl.cli import cli_main
from test_fit import _override

REPO = Path(__file__).resolve().parents[1]
EPOCHS = 2


def _block(text: str, command: str) -> list[str]:
    """The summary's lines: its header and the indented lines below it."""
    lines = text.splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith(f"[genenv] run summary: {command}")]
    assert len(heads) == 1, text  # one block, once
    block = [lines[heads[0]]]
    for line in lines[heads[0] + 1:]:
        if not line.startswith("  "):
            break
        block.append(line)
    return block


def _scalars(log_dir: str) -> dict[str, list[float]]:
    """tag -> its values in the order they were logged."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[float]] = {}
    for f in sorted(glob.glob(os.path.join(log_dir, "events.out.tfevents.*"))):
        acc = EventAccumulator(f)
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend(e.value for e in sorted(acc.Scalars(tag), key=lambda e: e.wall_time))
    return out


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, cache):
    tmp = tmp_path_factory.mktemp("summary")
    cwd = os.getcwd()
    os.chdir(tmp)  # the paths in the block are relative to the working directory
    try:
        # the quickstart with test_fit's ~1M agent and short warm starts
        yield tmp, _override(tmp, cache, EPOCHS)
    finally:
        os.chdir(cwd)


def test_fit_prints_one_summary_with_the_logged_numbers(fitted, caplog):
    tmp, override = fitted
    with caplog.at_level(logging.INFO):
        cli = cli_main(["fit", "--config", str(REPO / "configs/quickstart.yaml"), "--config", override])
    block = _block("\n".join(caplog.messages), "fit")
    logged = _scalars(cli.trainer.log_dir)
    f3 = lambda v: f"{v:.3f}"  # noqa: E731  (the block's precision)

    assert block[0].startswith(f"[genenv] run summary: fit, epochs 0-{EPOCHS - 1}, wall time ")
    start, *_, end = logged["val/accuracy"]  # the first is the starting agent's (step 0)
    assert len(logged["val/accuracy"]) == EPOCHS + 1
    assert block[1] == f"  held-out accuracy (val/accuracy): start {f3(start)} -> end {f3(end)} after epoch {EPOCHS - 1}"
    groups = sorted(t.removeprefix("val/accuracy_") for t in logged if t.startswith("val/accuracy_"))
    assert groups and [line.split()[0] for line in block[2:2 + len(groups)]] == groups
    for group, line in zip(groups, block[2:]):
        values = logged[f"val/accuracy_{group}"]
        assert line.split()[1:] == [f3(values[0]), "->", f3(values[-1])], group
    rest = block[2 + len(groups):]
    fifth = max(1, EPOCHS // 5)  # epochs in a fifth of the run
    success, difficulty = logged["coevo/success_rate"], logged["coevo/difficulty"]
    assert len(success) == len(difficulty) == EPOCHS
    assert f"(coevo/success_rate): {f3(sum(success[-fifth:]) / fifth)} over the last fifth" in rest[0]
    assert (f"(coevo/difficulty): {f3(sum(difficulty[:fifth]) / fifth)} in the first fifth (epoch 0) -> "
            f"{f3(sum(difficulty[-fifth:]) / fifth)} in the last (epoch {EPOCHS - 1})") in rest[1]
    sim_updates = int(logged["sim/updates"][-1])
    assert sim_updates == cli.model.counters["sim_updates"] > 0
    assert f"simulator updates (sim/updates): {sim_updates};" in rest[2]
    assert rest[3] == "  checkpoint: ckpt/last.ckpt" and (tmp / "ckpt" / "last.ckpt").is_file()
    assert rest[4] == f"  logs: {os.path.relpath(cli.trainer.log_dir)}" and len(rest) == 5


def test_a_resumed_run_summarizes_every_epoch_of_the_checkpoint(fitted, caplog):
    """The last epoch is in the checkpoint written at its end: resuming a finished run (README's resume
    command run once too often) prints the same epochs and counts, not one epoch short."""
    tmp, override = fitted
    assert (tmp / "ckpt" / "last.ckpt").is_file()  # written by the fit test, which runs first
    with caplog.at_level(logging.INFO):
        cli_main(["fit", "--config", str(REPO / "configs/quickstart.yaml"), "--config", override,
                  "--ckpt_path", str(tmp / "ckpt" / "last.ckpt")])
    block = _block("\n".join(caplog.messages), "fit")
    logged = _scalars(sorted(glob.glob(str(tmp / "runs" / "t" / "version_*")))[0])
    assert block[0].startswith(f"[genenv] run summary: fit, epochs 0-{EPOCHS - 1}, wall time ")
    assert block[0].endswith(f"(this session, resumed at epoch {EPOCHS})")
    updates = next(line for line in block if "simulator updates" in line)
    assert updates == (f"  simulator updates (sim/updates): {int(logged['sim/updates'][-1])}; "
                       f"agent updates (agent/updates): {int(logged['agent/updates'][-1])}")


def test_test_prints_the_held_out_accuracy_per_group(fitted, caplog):
    tmp, override = fitted
    if not (tmp / "ckpt" / "last.ckpt").is_file():
        pytest.skip("needs the checkpoint of the fit test")
    with caplog.at_level(logging.INFO):
        cli = cli_main(["test", "--config", str(REPO / "configs/quickstart.yaml"), "--config", override,
                        "--ckpt_path", str(tmp / "ckpt" / "last.ckpt")])
    block = _block("\n".join(caplog.messages), "test")
    results_path = os.path.join(cli.trainer.log_dir, "test_results.json")
    groups = json.load(open(results_path))["groups"]
    assert block[1] == f"  held-out accuracy (eval/accuracy): {groups['overall']['accuracy']:.3f}"
    per_group = [g for g in groups if g != "overall"]
    assert [line.split() for line in block[2:2 + len(per_group)]] == \
        [[g, f"{groups[g]['accuracy']:.3f}"] for g in per_group]
    assert block[2 + len(per_group):] == [
        f"  agent: from the checkpoint {os.path.relpath(tmp / 'ckpt' / 'last.ckpt')}",
        f"  answers and scores: {os.path.relpath(results_path)}", f"  logs: {os.path.relpath(cli.trainer.log_dir)}"]
    assert re.match(r"\[genenv\] run summary: test, wall time [\d.]+ s$", block[0])
