"""LightningCLI wiring: the trainer defaults every GenEnv run needs."""
from __future__ import annotations

import argparse
import glob
import logging
import os
import zipfile

from jsonargparse import DefaultHelpFormatter, set_parsing_settings
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities import rank_zero_warn

from genenv_pl.cli_help import backend_args_help, callbacks_help
from genenv_pl.datamodule import GenEnvDataModule
from genenv_pl.module import GenEnvModule


class HelpFormatter(argparse.RawDescriptionHelpFormatter, DefaultHelpFormatter):
    """jsonargparse's help, with the line breaks of group descriptions kept (the backend-args and
    callbacks lists below are laid out one argument per line)."""


class GenEnvCLI(LightningCLI):
    def __init__(self, *args, **kwargs):
        # `fit --help` shows the docstring under each config dataclass field (LitGPT style).
        set_parsing_settings(docstring_parse_attribute_docstrings=True)
        super().__init__(*args, **kwargs)

    def init_parser(self, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        return super().init_parser(**kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        # The epoch's data is generated inside train_dataloader(), so it must be rebuilt every
        # epoch; validation runs the environment's held-out set; there is no sanity check to run.
        parser.set_defaults({
            "trainer.reload_dataloaders_every_n_epochs": 1,
            "trainer.num_sanity_val_steps": 0,
        })
        parser.add_argument_group("Backend args", description=backend_args_help())
        parser.add_argument_group("GenEnv callbacks", description=callbacks_help())

    def before_fit(self) -> None:
        cfg = self.config_init[self.subcommand]
        if cfg.get("ckpt_path"):
            cfg["ckpt_path"] = checked_checkpoint(cfg["ckpt_path"], self.trainer)


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
    return GenEnvCLI(GenEnvModule, GenEnvDataModule, args=args, save_config_kwargs={"overwrite": True})


def _show_info_logs() -> None:
    """genenv_pl's INFO lines (e.g. the progress of a long episode evaluation) on stderr, as Lightning
    does for its own logger; left alone when the application configured logging itself."""
    logger = logging.getLogger("genenv_pl")
    if not logging.getLogger().handlers and not logger.handlers:
        logger.setLevel(logging.INFO)
        logger.addHandler(logging.StreamHandler())
