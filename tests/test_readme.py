"""The README keeps its promises: at most 300 lines, every file it names exists, every config key it names
resolves, and every `main.py` command it shows parses (GPU ones included: `--print_config` needs no GPU)."""
from __future__ import annotations

import inspect
import os
import re
import shlex
from pathlib import Path

import pytest
import yaml

from genenv_pl.cli import cli_main
from genenv_pl.envs import REGISTRY, env_class

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
# What a run writes (logs, checkpoints, exports, caches, venvs): named by the README, absent from a clone.
RUN_OUTPUTS = ("runs/", "checkpoints/", "export", ".cache/", ".venv", "test_results.json", "bench/out/")
PATH = re.compile(r"^[\w.-]+(/[\w.-]+)*/?$")
FILE_SUFFIX = re.compile(r"\.(py|ya?ml|md|sh|txt|json|png|cff|toml)$")
KEY = re.compile(r"^(?:--)?((?:data|model|trainer)\.[a-z_][\w.]*)$")


def _code_spans() -> list[str]:
    """Inline code spans and the lines of fenced blocks (a line continued with a backslash joined to the next)."""
    fenced = [block.replace("\\\n", " ") for block in re.findall(r"```[a-z]*\n(.*?)```", README, flags=re.S)]
    outside = re.sub(r"```[a-z]*\n.*?```", "", README, flags=re.S)
    return re.findall(r"`([^`\n]+)`", outside) + [line for block in fenced for line in block.splitlines()]


def _tokens() -> set[str]:
    return {tok.strip("'\",;():") for span in _code_spans() for tok in span.split()}


def _named_paths() -> set[str]:
    links = {target for target in re.findall(r"\]\(([^)#\s]+)\)", README) if "://" not in target}
    tops = {p.name for p in REPO.iterdir()}
    paths = {tok for tok in _tokens() if PATH.match(tok) and "://" not in tok
             and (FILE_SUFFIX.search(tok) or (tok.endswith("/") and tok.split("/")[0] in tops))}
    return {p for p in links | paths if not p.startswith(RUN_OUTPUTS)}


def _commands() -> list[list[str]]:
    """Every `python main.py ...` the README shows, as argv after `main.py` (comments dropped)."""
    out = []
    for span in _code_spans():
        for part in span.split("&&"):
            part = part.split("#")[0].strip()
            if part.startswith("python main.py ") and "--help" not in part and "<" not in part:
                out.append(shlex.split(part)[2:])
    return out


def _resolved(capsys, argv: list[str]) -> dict:
    os.chdir(REPO)  # the README's paths are relative to the repository (conftest restores the directory)
    with pytest.raises(SystemExit) as exit_:
        cli_main([*argv, "--print_config"])
    assert exit_.value.code in (0, None), f"main.py {' '.join(argv)}: {capsys.readouterr().err[-500:]}"
    return yaml.safe_load(capsys.readouterr().out)


def test_the_readme_is_at_most_300_lines():
    assert len(README.splitlines()) <= 300


def test_the_readme_names_a_handful_of_files_and_every_one_exists():
    named = _named_paths()
    assert {"configs/quickstart.yaml", "genenv_pl/epoch.py", "docs/results/", "LICENSE"} <= named
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert not missing, f"the README names files that do not exist: {missing}"


def test_every_main_py_command_in_the_readme_parses(capsys):
    commands = _commands()
    assert any("configs/gpu/paper_8gpu.yaml" in c for c in commands)  # the GPU recipes are among them
    assert ["fit", "--config", "configs/quickstart.yaml"] in commands
    for argv in commands:
        _resolved(capsys, argv)


def _has(cfg, dotted: str) -> bool:
    node = cfg
    for part in dotted.split("."):
        if isinstance(node, dict) and part not in node and "init_args" in node:  # (--a.b.x sets a class's init arg x)
            node = node["init_args"]
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_every_config_key_the_readme_names_resolves(capsys):
    keys = {m.group(1).rstrip(".") for tok in _tokens() if (m := KEY.match(tok))}
    assert {"data.coevo.group_size", "model.shared_base", "data.env_args.data_root"} <= keys
    configs = [_resolved(capsys, ["fit", "--config", "configs/quickstart.yaml"]),
               _resolved(capsys, ["fit", "--config", "configs/alfworld.yaml", "--config", "configs/gpu/paper_8gpu.yaml"])]
    # data.env_args is the environment's own arguments: a key there is a parameter of some environment
    env_params = set()
    for name in REGISTRY:
        try:
            env_params |= set(inspect.signature(env_class(name).__init__).parameters)
        except ImportError:  # an optional engine (alfworld) not installed: its keys cannot be checked here
            continue
    unknown = sorted(k for k in keys if not any(_has(c, k) for c in configs)
                     and not (k.startswith("data.env_args.") and k.split(".")[2] in env_params))
    assert not unknown, f"the README names config keys that do not exist: {unknown}"


def test_the_scaling_examples_train_the_papers_global_batch_on_1_8_and_16_gpus(capsys):
    """The README's 1-, 8- and 16-GPU commands: batch sizes are global, so each trains on the paper's 64 tasks
    per agent step, and FSDP2's data-parallel mesh spans every rank."""
    from genenv_pl.epoch import epoch_shape
    from genenv_pl.config import CoevoConfig

    worlds = {}
    for argv in _commands():
        if argv[:3] != ["fit", "--config", "configs/alfworld.yaml"] or "configs/cpu/alfworld.yaml" in argv:
            continue
        t = (cfg := _resolved(capsys, argv))["trainer"]
        world = t["devices"] * t["num_nodes"]
        coevo = cfg["data"]["coevo"]
        worlds[world] = coevo
        assert coevo["agent_batch_size"] == 64, argv
        if "ModelParallelStrategy" in str(t["strategy"]):
            assert t["strategy"]["init_args"]["data_parallel_size"] == world, argv
        shape = epoch_shape(CoevoConfig(seeds_per_epoch=coevo["seeds_per_epoch"], agent_batch_size=64,
                                        base_tasks_per_epoch=coevo["base_tasks_per_epoch"],
                                        replay_tasks_per_epoch=coevo["replay_tasks_per_epoch"]), world, 1, 0)
        assert "agent steps of 64 tasks (global batch" in shape, shape
    assert {1, 8, 16} <= set(worlds), sorted(worlds)
