"""The command line's edges a new user meets first: a misspelled key is one line with the closest
valid key (not the whole usage with the error last), and options the module ignores are not offered."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from genenv_pl.cli import cli_main

REPO = Path(__file__).resolve().parents[1]


def _stderr_lines(capsys, *args: str) -> list[str]:
    with pytest.raises(SystemExit) as exit_:
        cli_main(list(args))
    assert exit_.value.code not in (0, None)
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_a_misspelled_option_is_one_line_with_the_closest_key():
    """The command of the issue, run as a user would (a real `python main.py`: all it prints)."""
    run = subprocess.run([sys.executable, "main.py", "fit", "--config", "configs/quickstart.yaml",
                          "--data.coevo.group_sizee", "3"], cwd=REPO, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert run.returncode != 0 and run.stdout == ""
    assert run.stderr.splitlines() == ["error: unknown option --data.coevo.group_sizee; did you mean "
                                       "--data.coevo.group_size? (main.py fit --help lists every option)"]


def test_a_misspelled_key_in_a_config_file_is_one_line_with_the_closest_key(capsys, tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("data:\n  coevo:\n    group_sizee: 3\n")
    lines = _stderr_lines(capsys, "fit", "--config", str(REPO / "configs/quickstart.yaml"), "--config", str(overlay))
    assert len(lines) == 1 and lines[0].startswith("error: unknown key data.coevo.group_sizee (in a --config file or "
                                                   "a dict value); did you mean data.coevo.group_size? (")


def test_lightnings_optimizer_options_point_to_the_modules_own(capsys):
    lines = _stderr_lines(capsys, "fit", "--config", str(REPO / "configs/quickstart.yaml"), "--optimizer", "Adam")
    assert len(lines) == 1 and "did you mean --model.agent_optimizer or --model.simulator_optimizer?" in lines[0]


def test_a_misspelled_subcommand_names_the_closest(capsys):
    lines = _stderr_lines(capsys, "fitt", "--config", str(REPO / "configs/quickstart.yaml"))
    assert lines == ["error: no subcommand 'fitt'; did you mean fit? (choose from fit, validate, test, export)"]


def test_a_wrong_value_is_the_message_without_the_usage(capsys):
    lines = _stderr_lines(capsys, "fit", "--config", str(REPO / "configs/quickstart.yaml"), "--trainer.max_epochs", "x")
    assert lines[0].startswith('error: Parser key "trainer.max_epochs":') and not any("usage:" in line for line in lines)
