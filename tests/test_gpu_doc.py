"""docs/gpu.md and scripts/slurm/genenv_2node.sbatch keep their promises: every `python main.py` command the page
shows, and the script's `srun` command, parse (`--print_config` needs no GPU) with the values the page states; the
smoke run's first line is what `epoch_shape` prints for it; the script's SLURM layout is the one Lightning accepts
for its trainer arguments; the page shows the script as it is; the vllm extra pins the version the page names."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

from test_readme import _resolved  # (parses a command as main.py does, from the repository)

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "gpu.md").read_text()
SBATCH_PATH = REPO / "scripts" / "slurm" / "genenv_2node.sbatch"
SBATCH = SBATCH_PATH.read_text()


def _bash_blocks(text: str) -> list[str]:
    return [b.replace("\\\n", " ") for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def _doc_commands() -> list[list[str]]:
    """Every `python main.py ...` line of the page's bash blocks, as argv after `main.py` (comments dropped)."""
    out = []
    for block in _bash_blocks(DOC):
        for line in block.splitlines():
            line = line.split("#")[0].strip()
            if line.startswith("python main.py ") and "<" not in line:
                out.append(shlex.split(line)[2:])
    return out


def _srun_command() -> list[str]:
    (line,) = [ln for ln in SBATCH.replace("\\\n", " ").splitlines() if ln.startswith("srun ")]
    argv = shlex.split(line.rstrip("& "))
    return argv[argv.index("main.py") + 1:]


def _sbatch(option: str) -> str:
    (value,) = re.findall(rf"^#SBATCH --{option}=(\S+)", SBATCH, flags=re.M)
    return value


def test_every_command_parses_and_the_smoke_run_prints_its_stated_epoch(capsys):
    from genenv_pl.config import CoevoConfig
    from genenv_pl.epoch import epoch_shape

    commands = _doc_commands()
    smoke = [c for c in commands if "--trainer.max_epochs" in c]
    assert len(smoke) == 1 and len(commands) >= 3, commands
    for argv in commands:
        cfg = _resolved(capsys, argv)
        if argv is not smoke[0]:
            continue
        assert cfg["trainer"]["max_epochs"] == 1
        (ckpt,) = [c for c in cfg["trainer"]["callbacks"] if c["class_path"].endswith("ModelCheckpoint")]
        assert ckpt["init_args"]["dirpath"] == "checkpoints/alfworld_smoke"  # not the full run's folder
        c = cfg["data"]["coevo"]
        keys = ("seeds_per_epoch", "num_generations_per_prompt", "group_size", "base_tasks_per_epoch",
                "replay_tasks_per_epoch", "agent_batch_size", "sim_batch_size")
        shape = epoch_shape(CoevoConfig(**{k: c[k] for k in keys}), 1, cfg["model"]["grpo"]["num_iterations"],
                            cfg["model"]["rwr"]["replay_per_epoch"])
        assert shape in DOC.splitlines(), shape


def test_the_sbatch_script_runs_the_layout_lightning_accepts(capsys):
    cfg = _resolved(capsys, _srun_command())
    t = cfg["trainer"]
    nodes, per_node = int(_sbatch("nodes")), int(_sbatch("ntasks-per-node"))
    # Lightning's SLURMEnvironment.validate_settings: --nodes == num_nodes, --ntasks-per-node == devices
    assert (t["num_nodes"], int(t["devices"])) == (nodes, per_node) == (2, 8)
    assert _sbatch("gres") == f"gpu:{per_node}"
    # ModelParallelStrategy: data x tensor parallel size == world size
    args = t["strategy"]["init_args"]
    assert args["data_parallel_size"] * args["tensor_parallel_size"] == nodes * per_node
    assert cfg["ckpt_path"] == "last" and cfg["model"]["backend"] == "vllm"
    # requeued by the batch shell, not by Lightning's in-handler save: the signal goes to the script only
    assert _sbatch("signal").startswith("B:USR1@") and "--requeue" in SBATCH and "trap requeue USR1" in SBATCH
    if shutil.which("bash"):
        subprocess.run(["bash", "-n", str(SBATCH_PATH)], check=True)


def test_the_page_shows_the_sbatch_script_as_it_is():
    (shown,) = [b for b in re.findall(r"```bash\n(.*?)```", DOC, flags=re.S) if b.startswith("#!/bin/bash")]
    lines = set(SBATCH.splitlines())
    assert [ln for ln in shown.splitlines() if ln.strip() and ln not in lines] == []


def test_the_vllm_extra_pins_the_version_the_page_names():
    pyproject = (REPO / "pyproject.toml").read_text()
    (pin,) = re.findall(r'^vllm = \["vllm==(\d+\.\d+\.\d+)"\]$', pyproject, flags=re.M)
    assert f"vllm=={pin}" in DOC
