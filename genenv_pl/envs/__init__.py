"""Environment registry. A new benchmark is one module here plus a config.

Entries are import paths, imported on first use, so that optional dependencies of one
benchmark (alfworld, textworld, ...) never affect the others.
"""
from __future__ import annotations

import importlib

from genenv_pl.envs.base import DataError, Environment, InvalidTask, Message, Task, resolve_data_root

REGISTRY: dict[str, str] = {
    "arithmetic": "genenv_pl.envs.arithmetic:ArithmeticEnv",
    "bfcl": "genenv_pl.envs.bfcl:BFCLEnv",
    "api_bank": "genenv_pl.envs.api_bank:APIBankEnv",
    "alfworld": "genenv_pl.envs.alfworld:ALFWorldEnv",
    "bamboogle": "genenv_pl.envs.bamboogle:BamboogleEnv",
    "travelplanner": "genenv_pl.envs.travelplanner:TravelPlannerEnv",
}


def env_class(name: str) -> type[Environment]:
    if name not in REGISTRY:
        raise KeyError(f"unknown environment {name!r}; known: {sorted(REGISTRY)}")
    module, _, attr = REGISTRY[name].partition(":")
    return getattr(importlib.import_module(module), attr)


def make_env(name: str, **kwargs) -> Environment:
    return env_class(name)(**kwargs)


__all__ = ["DataError", "Environment", "InvalidTask", "Message", "Task", "REGISTRY", "env_class", "make_env",
           "resolve_data_root"]
