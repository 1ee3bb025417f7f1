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


def _main_help() -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        cli_main(["--help"])
    return out.getvalue()


def test_main_help_lists_each_subcommand_in_a_complete_sentence() -> None:
    """No `predict` (the module has no predict_step), and no description cut off at its first line."""
    text = _main_help()
    listing = " ".join(text.split("Available subcommands:")[1].split())
    entries = dict(re.findall(r"(fit|validate|test|export) (.+?)(?= (?:fit|validate|test|export) |$)",
                              listing.removeprefix("(required) ")))
    assert list(entries) == ["fit", "validate", "test", "export"] and "predict" not in text
    for name, description in entries.items():
        assert description.endswith("."), (name, description)


def test_fit_help_offers_only_the_options_the_module_uses(help_text: str) -> None:
    assert "--optimizer" not in help_text and "--lr_scheduler" not in help_text  # model.*_optimizer instead


def test_genenv_help_texts_are_complete_sentences(help_text: str) -> None:
    from genenv_pl.cli import SUBCOMMANDS, GenEnvTrainer
    from genenv_pl.cli_help import SUMMARY

    assert _flat(SUBCOMMANDS["fit"]) in help_text  # the subcommand's own description, under its usage
    assert all(text.endswith(".") for text in SUBCOMMANDS.values())
    for module, name in CALLBACKS + [SUMMARY]:  # each summary in full, not its docstring's first line
        summary = init_args(module, name)[0]
        assert summary.endswith(".") and _flat(summary) in help_text, name
    assert "<class" not in help_text  # every group has a title
    title = GenEnvTrainer.__doc__.split("\n")[0]
    assert title.endswith(".") and _flat(title.rstrip(".")) + ":" in help_text
    assert _flat("stops with one line that says how to fix it.") in help_text  # --verbose


def test_help_says_how_to_set_one_key_of_a_dict_option(help_text: str) -> None:
    assert _flat("Set one key with a dotted option, e.g. --model.backend_args.max_batch_size 64, which keeps "
                 "the config's other keys") in help_text
