"""LightningCLI wiring: the trainer defaults every GenEnv run needs, setup errors as one line with the fix, and the `export` subcommand."""
from __future__ import annotations

import argparse
import gc
import glob
import logging
import os
import sys
import zipfile

import torch.distributed as dist
from jsonargparse import DefaultHelpFormatter, namespace_to_dict, set_parsing_settings
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities import rank_zero_warn

from callbacks.run_summary import RunSummary
from genenv_pl.cli_help import backend_args_help, callbacks_help
from genenv_pl.cli_parser import GenEnvArgumentParser
from genenv_pl.datamodule import GenEnvDataModule
from genenv_pl.envs.base import ConfigError, DataError
from genenv_pl.module import GenEnvModule
from genenv_pl.preflight import data_problem, gpu_problem, models_problem

VERBOSE_ENV = "GENENV_VERBOSE"
DATA_HELP = "see docs/benchmarks.md, 'Data', for where to get each benchmark"
DESCRIPTION = ("GenEnv: co-evolve an LLM agent with an LLM environment simulator. Start with: python main.py fit "
               "--config configs/quickstart.yaml.")
# Lightning's subcommand texts are its Trainer methods' first docstring lines, which can stop mid-sentence,
# and speak of generic models; these say what each does here. (`export` has its own docstring.)
SUBCOMMANDS = {
    "fit": "Co-evolve the agent and the simulator, evaluating the agent on the environment's held-out set every "
           "trainer.check_val_every_n_epoch epochs; ends with a summary of what the run achieved.",
    "validate": "Evaluate the agent once on the environment's held-out set (val/accuracy, per group).",
    "test": "Evaluate the agent on the environment's held-out set: accuracy per group, every answer written to "
            "test_results.json in the log folder (--ckpt_path: the agent of a fit's checkpoint).",
}
# The module's and the data module's group titles, where their classes have no docstring to give one
# (a title, so no period: the help ends it with a colon)
GROUP_TITLES = {
    "model": "The agent and the simulator: their models, updates, optimizers and generation backend",
    "data": "The environment and the data of each co-evolution epoch",
}


class SetupError(RuntimeError):
    """A setup problem with a one-line fix, raised with its traceback under --verbose."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """jsonargparse's help, with the line breaks of group descriptions kept (the backend-args and
    callbacks lists below are laid out one argument per line)."""


class GenEnvTrainer(Trainer):
    """Lightning's Trainer, with an `export` subcommand.

    LightningCLI builds a subcommand's arguments from the Trainer method of that name, so this is where
    `python main.py export` gets its own."""

    def export(self, model, datamodule=None, ckpt_path: str | None = None, out: str = "export") -> None:
        """Write a checkpoint's agent and simulator as Hugging Face model folders (docs/export.md).

        Args:
            ckpt_path: the run's Lightning checkpoint (e.g. checkpoints/<run>/last.ckpt); the
                config must be the run's (its policies are rebuilt and the weights loaded strictly).
            out: the folder to write: agent/ and simulator/ (model folders with the tokenizer), for
                LoRA the adapters alone (and their base where it is not the published model),
                genenv_export.json (the config, epoch and metrics).
        """
        from genenv_pl.export import export_checkpoint

        manifest = export_checkpoint(model.agent_cfg, model.sim_cfg, model.shared_base, datamodule.env, model.cache_dir,
                                     ckpt_path, out, getattr(self, "genenv_config", None))
        print(f"[genenv] exported epoch {manifest['epoch']} of {ckpt_path} to {out}: {', '.join(sorted(os.listdir(out)))}")


class GenEnvCLI(LightningCLI):
    def __init__(self, *args, **kwargs):
        # `fit --help` shows the docstring under each config dataclass field (LitGPT style). Reading
        # them takes seconds for every parser built (6 s instead of 1 s here), so only for help.
        set_parsing_settings(docstring_parse_attribute_docstrings=_asks_for_help(kwargs.get("args")))
        kwargs.setdefault("trainer_class", GenEnvTrainer)
        kwargs.setdefault("parser_class", GenEnvArgumentParser)  # a parse error is one line
        # The module builds its own optimizers from model.agent_optimizer and model.simulator_optimizer:
        # Lightning's --optimizer and --lr_scheduler would be accepted and ignored.
        kwargs.setdefault("auto_configure_optimizers", False)
        super().__init__(*args, **kwargs)

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        commands = LightningCLI.subcommands()
        del commands["predict"]  # GenEnvModule has no predict_step
        # Trainer.validate/test's own `verbose` (print the results: left at its default, on) gives way
        # to the --verbose of every subcommand here (tracebacks of setup errors).
        for name in ("validate", "test"):
            commands[name] = commands[name] | {"verbose"}
        commands["export"] = {"model", "datamodule"}
        return commands

    def init_parser(self, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("description", DESCRIPTION)  # (the subcommands' parsers are given theirs)
        return super().init_parser(**kwargs)

    def _add_subcommands(self, parser, **kwargs) -> None:
        # (LightningCLI's only way in: it takes each subcommand's help from the Trainer method's docstring)
        for name, text in SUBCOMMANDS.items():
            kwargs[name] = {"description": text, **kwargs.get(name, {})}
        super()._add_subcommands(parser, **kwargs)
        for choice in parser._subcommands_action._choices_actions:  # the list in `main.py --help`
            choice.help = SUBCOMMANDS.get(choice.dest, choice.help)
        for name, sub in self._subcommand_parsers.items():  # the title above --ckpt_path and the like
            if name in sub.groups:
                sub.groups[name].title = f"Arguments of {name}"

    def add_arguments_to_parser(self, parser) -> None:
        # The epoch's data is generated inside train_dataloader(), so it must be rebuilt every
        # epoch; validation runs the environment's held-out set; there is no sanity check to run.
        parser.set_defaults({
            "trainer.reload_dataloaders_every_n_epochs": 1,
            "trainer.num_sanity_val_steps": 0,
        })
        parser.add_argument("--verbose", action="store_true",
                            help=f"Show the traceback of a setup error (or set {VERBOSE_ENV}=1). Without it, "
                                 "a config that cannot run (no GPU, a model that cannot be found, missing "
                                 "benchmark data) stops with one line that says how to fix it.")
        for key, title in GROUP_TITLES.items():
            if parser.groups[key].title.startswith("<class "):  # (no class docstring to take it from)
                parser.groups[key].title = title
        parser.add_argument_group("Backend args", description=backend_args_help())
        parser.add_argument_group("GenEnv callbacks", description=callbacks_help())

    # ---- setup errors: one line with the fix, before any model is loaded --------------------------
    def _run_config(self):
        sub = self.config.get("subcommand")
        return sub, (self.config[sub] if sub else self.config)

    def fail(self, message: str, cause: BaseException | None = None):
        _, cfg = self._run_config()
        if cfg.get("verbose") or os.environ.get(VERBOSE_ENV, "") not in ("", "0"):
            raise SetupError(message) from cause
        raise SystemExit(f"error: {message} (--verbose or {VERBOSE_ENV}=1 for the traceback)")

    def parse_arguments(self, parser, args) -> None:
        super().parse_arguments(parser, args)
        # checked here, before the seed is set and anything is built
        sub, cfg = self._run_config()
        if sub == "export":
            self._prepare_export(cfg)
        roles = ["agent"] if sub in ("test", "validate") or cfg.model.shared_base else \
            ["agent", "simulator"]  # (shared base: the simulator's base is the agent's)
        # (the data first: it is local and quick, the models' check may wait on the hub)
        problem = gpu_problem(cfg, sub or "fit") or data_problem(cfg) or models_problem(cfg, roles)
        if problem:
            self.fail(problem)

    def _prepare_export(self, cfg) -> None:
        # export reads a checkpoint and writes files: the run's GPU and logger settings do not apply
        for key, value in {"accelerator": "cpu", "devices": 1, "num_nodes": 1, "strategy": "auto", "logger": False}.items():
            cfg.trainer[key] = value
        if not cfg.ckpt_path or not os.path.isfile(cfg.ckpt_path):
            self.fail(f"export needs --ckpt_path, a Lightning checkpoint file (got {cfg.ckpt_path!r}); a sharded "
                      "checkpoint folder (FSDP) is first consolidated into one file: python -m "
                      "lightning.pytorch.utilities.consolidate_checkpoint <folder>")

    def instantiate_trainer(self, **kwargs) -> Trainer:
        trainer = super().instantiate_trainer(**kwargs)
        if not any(isinstance(cb, RunSummary) for cb in trainer.callbacks):  # every run says what it achieved
            # before the checkpoint callbacks (Lightning runs those last): an epoch is recorded in the
            # checkpoint written at its end, so a resumed run's summary misses none
            at = next((i for i, cb in enumerate(trainer.callbacks) if isinstance(cb, Checkpoint)), len(trainer.callbacks))
            trainer.callbacks.insert(at, RunSummary())
        return trainer

    def instantiate_classes(self) -> None:
        try:
            super().instantiate_classes()
        except DataError as e:  # the environment reads its data when it is built, before any model
            self.fail(str(e) if "docs/benchmarks.md" in str(e) else f"{str(e).rstrip('.')}; {DATA_HELP}", e)
        except ConfigError as e:
            self.fail(str(e), e)

    def before_export(self) -> None:
        run = namespace_to_dict(self.config["export"].clone())
        for key in ("config", "ckpt_path", "out", "verbose"):  # the export command's own arguments
            run.pop(key, None)
        self.trainer.genenv_config = run

    def _run_subcommand(self, subcommand: str) -> None:
        try:
            super()._run_subcommand(subcommand)
        except ConfigError as e:  # found while building the models (configure_model): one line, as above
            self.fail(str(e), e)

    def _evaluating(self) -> None:
        # `test`/`validate` of a checkpoint: the agent is built without its warm start (GenEnvModule)
        self.model.evaluating_checkpoint = self.config_init[self.subcommand].get("ckpt_path")

    before_test = before_validate = _evaluating

    def before_fit(self) -> None:
        cfg = self.config_init[self.subcommand]
        if cfg.get("ckpt_path"):
            cfg["ckpt_path"] = checked_checkpoint(cfg["ckpt_path"], self.trainer)


def _asks_for_help(args) -> bool:
    argv = sys.argv[1:] if args is None else args
    return isinstance(argv, (list, tuple)) and any(
        isinstance(a, str) and (a in ("-h", "--help") or a.split("=")[0].endswith(".help")) for a in argv)


def _readable(path: str) -> bool:
    """A Lightning checkpoint is a zip archive; a torn or overwritten file fails its CRC check."""
    try:
        with zipfile.ZipFile(path) as z:
            return z.testzip() is None
    except (zipfile.BadZipFile, OSError):
        return False


def checked_checkpoint(ckpt_path: str, trainer) -> str:
    """Resolve `last` and refuse an unreadable checkpoint with a clear message, falling back to
    the newest readable checkpoint beside it when there is one."""
    path = ckpt_path
    if ckpt_path == "last":
        dirs = [cb.dirpath for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint) and cb.dirpath]
        found = [p for d in dirs for p in glob.glob(os.path.join(d, "last*.ckpt"))]
        if not found:
            return ckpt_path  # Lightning reports that there is nothing to resume from
        path = max(found, key=os.path.getmtime)
    if not os.path.isfile(path) or _readable(path):
        return path
    others = [p for p in glob.glob(os.path.join(os.path.dirname(path) or ".", "*.ckpt")) if p != path and _readable(p)]
    if others:
        fallback = max(others, key=os.path.getmtime)
        rank_zero_warn(f"checkpoint {path} is unreadable (truncated or corrupted); resuming from {fallback} instead")
        return fallback
    raise SystemExit(f"error: checkpoint {path} is unreadable (truncated or corrupted) and no other checkpoint is "
                     f"beside it; delete it to start afresh, or pass --ckpt_path to an intact checkpoint.")


def cli_main(args=None) -> GenEnvCLI:
    _show_info_logs()
    cli = GenEnvCLI(GenEnvModule, GenEnvDataModule, args=args, save_config_kwargs={"overwrite": True})
    _end_process_group()
    return cli


def _end_process_group() -> None:
    """Destroy the process group a multi-process run opened, once the run has ended well.

    Lightning leaves it to the script. Left open, gloo's worker threads can outlive the interpreter's
    finalization and abort a finished run at exit (SIGABRT, "terminate called without an active
    exception"). Only on success, as torchtitan does: after an error the other ranks may be blocked in
    a collective, and destroying the group would hang this one. The garbage collection first frees, while
    the interpreter is whole, the unreachable cycles of the finished fit that may still hold tensors a
    collective's work refers to (CI once saw the abort on a 2-rank FSDP2 fit with the group destroyed;
    six reruns here did not repeat it)."""
    if dist.is_available() and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def _show_info_logs() -> None:
    """genenv_pl's INFO lines (e.g. the progress of a long episode evaluation) on stderr, as Lightning
    does for its own logger; left alone when the application configured logging itself."""
    logger = logging.getLogger("genenv_pl")
    if not logging.getLogger().handlers and not logger.handlers:
        logger.setLevel(logging.INFO)
        logger.addHandler(logging.StreamHandler())
