"""`fit --help` documents every field of every config group, every module and datamodule argument,
the backend args and the callbacks' init args: each description in the code shows up in the help."""
from __future__ import annotations

import ast
import dataclasses
import inspect
import re

import docstring_parser
import pytest

from genenv_pl.backends.base import SamplingParams
from genenv_pl.cli import cli_main
from genenv_pl.cli_help import BACKENDS, CALLBACKS, init_args
from genenv_pl.config import CoevoConfig, GRPOConfig, RWRConfig
from genenv_pl.datamodule import GenEnvDataModule
from genenv_pl.models.factory import PolicyConfig
from genenv_pl.models.tiny import TinyModelSpec
from genenv_pl.module import GenEnvModule
from genenv_pl.policy import LoraSettings
from genenv_pl.warmstart import WarmStartConfig

GROUPS = [PolicyConfig, TinyModelSpec, LoraSettings, WarmStartConfig, GRPOConfig, RWRConfig, CoevoConfig, SamplingParams]


@pytest.fixture(scope="module")
def help_text() -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        cli_main(["fit", "--help"])
    assert exit_.value.code in (0, None)
    return _flat(out.getvalue())


def _flat(text: str) -> str:
    """Help text wraps lines (also after hyphens): compare without any whitespace."""
    return re.sub(r"\s+", "", text)


def attribute_docstrings(cls) -> dict[str, str]:
    """field -> the string literal right after it in the class body (None where there is none)."""
    body = ast.parse(inspect.getsource(cls)).body[0].body
    docs = {}
    for node, after in zip(body, body[1:] + [None]):
        if isinstance(node, ast.AnnAssign):
            is_doc = isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)
            docs[node.target.id] = after.value.value if is_doc else None
    return docs


@pytest.mark.parametrize("group", GROUPS, ids=lambda c: c.__name__)
def test_every_config_field_is_documented_in_fit_help(help_text: str, group) -> None:
    docs = attribute_docstrings(group)
    assert set(docs) == {f.name for f in dataclasses.fields(group)}
    missing = [name for name, doc in docs.items() if not doc]
    assert not missing, f"{group.__name__}: no docstring for {missing}"
    for name, doc in docs.items():  # (a nested group's docstring is its section title: "." becomes ":")
        assert _flat(doc).rstrip(".") in help_text, f"{group.__name__}.{name}"


@pytest.mark.parametrize("cls", [GenEnvModule, GenEnvDataModule], ids=lambda c: c.__name__)
def test_module_and_datamodule_arguments_are_documented(help_text: str, cls) -> None:
    described = {p.arg_name: p.description for p in docstring_parser.parse(cls.__init__.__doc__).params}
    for name in list(inspect.signature(cls.__init__).parameters)[1:]:
        assert described.get(name), f"{cls.__name__}: no description for {name}"
        assert _flat(described[name]).rstrip(".") in help_text, name


@pytest.mark.parametrize("module, name", list(BACKENDS.values()) + CALLBACKS, ids=lambda x: x)
def test_backend_and_callback_init_args_are_documented(help_text: str, module: str, name: str) -> None:
    summary, rows = init_args(module, name)
    assert rows
    for arg, kind, text in rows:
        assert text, f"{name}: no description for {arg}"
        assert _flat(f"{arg} ({kind})") in help_text and _flat(text) in help_text, arg


def test_paper_values_and_units_are_in_the_help(help_text: str) -> None:
    for text in ["[1 - eps, 1 + eps]. Paper: 0.2.", "K: simulator variations per seed. Paper: 4.",
                 "G: agent rollouts per task. Paper: 8.", "Longest prompt + response in tokens (the paper: 9,000).",
                 "target success rate of generated tasks (the paper's 0.5)"]:
        assert _flat(text) in help_text, text
