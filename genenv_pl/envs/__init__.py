"""Environment registry. A new benchmark is one module here plus a config; an environment of your own
needs neither: `data.env: package.module:ClassName` names it (docs/writing-an-environment.md).

Entries are import paths, imported on first use, so that optional dependencies of one
benchmark (alfworld, textworld, ...) never affect the others.
"""
from __future__ import annotations

import importlib
import inspect
import re

from genenv_pl.envs.base import ConfigError, DataError, Environment, InvalidTask, Message, Task, resolve_data_root

REGISTRY: dict[str, str] = {
    "arithmetic": "genenv_pl.envs.arithmetic:ArithmeticEnv",
    "bfcl": "genenv_pl.envs.bfcl:BFCLEnv",
    "api_bank": "genenv_pl.envs.api_bank:APIBankEnv",
    "alfworld": "genenv_pl.envs.alfworld:ALFWorldEnv",
    "bamboogle": "genenv_pl.envs.bamboogle:BamboogleEnv",
    "travelplanner": "genenv_pl.envs.travelplanner:TravelPlannerEnv",
}

_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")
_KEY = "data.env"  # every message names the config key, so that the CLI's one line says what to fix


def env_class(name: str) -> type[Environment]:
    """The class that `data.env` names: a registered name (REGISTRY) or `package.module:ClassName`, an
    `Environment` subclass in a module Python can import (beside main.py, installed, or on PYTHONPATH).
    A name that leads to no usable class raises ConfigError, which the CLI prints as one line."""
    if ":" not in name:
        if name not in REGISTRY:
            raise ConfigError(f"{_KEY}: unknown environment {name!r}; registered: {', '.join(sorted(REGISTRY))}; "
                              "or your own Environment subclass as package.module:ClassName")
        module, _, attr = REGISTRY[name].partition(":")
        # registered modules are ours: an import error there (an optional engine not installed) keeps its traceback
        return getattr(importlib.import_module(module), attr)
    return _dotted_class(name)


def _dotted_class(path: str) -> type[Environment]:
    if not _DOTTED.fullmatch(path):
        raise ConfigError(f"{_KEY}: {path!r} is neither a registered environment ({', '.join(sorted(REGISTRY))}) nor "
                          "package.module:ClassName")
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        # Only a missing module becomes one line; any other error in the user's module (a syntax error,
        # an exception at import) keeps its traceback, which points at the line to fix.
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise ConfigError(f"{_KEY}: cannot import module {module_name!r} of {path!r} (no module named {e.name!r}); "
                              "it must be importable: a package beside main.py, installed, or on PYTHONPATH") from e
        raise ConfigError(f"{_KEY}: module {module_name!r} of {path!r} imports {e.name!r}, which is not "
                          "installed") from e
    cls = getattr(module, attr, None)
    if cls is None:
        found = sorted(n for n, v in vars(module).items() if _is_env_class(v) and v.__module__ == module_name)
        raise ConfigError(f"{_KEY}: module {module_name!r} has no {attr!r}; its Environment subclasses: "
                          f"{', '.join(found) or 'none'}")
    if not _is_env_class(cls):
        raise ConfigError(f"{_KEY}: {path!r} is not a subclass of genenv_pl.envs.Environment "
                          f"(it is {_describe(cls)}); see docs/writing-an-environment.md")
    if inspect.isabstract(cls):
        raise ConfigError(f"{_KEY}: {path!r} does not implement the abstract methods "
                          f"{', '.join(sorted(cls.__abstractmethods__))} of Environment")
    return cls


def _is_env_class(obj: object) -> bool:
    return inspect.isclass(obj) and issubclass(obj, Environment)


def _describe(obj: object) -> str:
    return f"the class {obj.__name__}" if inspect.isclass(obj) else f"a {type(obj).__name__}"


def make_env(name: str, **kwargs) -> Environment:
    """An instance of the class `name` names (see env_class), built from `data.env_args`. Arguments the
    constructor does not take raise ConfigError (one line) rather than a TypeError from deep in the CLI."""
    cls = env_class(name)
    try:
        inspect.signature(cls).bind(**kwargs)
    except TypeError as e:
        raise ConfigError(f"data.env_args: {cls.__name__} ({name}): {e}; its arguments are the Args of its "
                          "constructor's docstring") from e
    return cls(**kwargs)


__all__ = ["ConfigError", "DataError", "Environment", "InvalidTask", "Message", "Task", "REGISTRY", "env_class",
           "make_env", "resolve_data_root"]
