"""LightningCLI wiring: the trainer defaults every GenEnv run needs."""
from __future__ import annotations

from lightning.pytorch.cli import LightningCLI

from genenv_pl.datamodule import GenEnvDataModule
from genenv_pl.module import GenEnvModule


class GenEnvCLI(LightningCLI):
    def add_arguments_to_parser(self, parser) -> None:
        # The epoch's data is generated inside train_dataloader(), so it must be rebuilt every
        # epoch; validation runs the environment's held-out set; there is no sanity check to run.
        parser.set_defaults({
            "trainer.reload_dataloaders_every_n_epochs": 1,
            "trainer.num_sanity_val_steps": 0,
        })


def cli_main(args=None) -> GenEnvCLI:
    return GenEnvCLI(GenEnvModule, GenEnvDataModule, args=args, save_config_kwargs={"overwrite": True})
