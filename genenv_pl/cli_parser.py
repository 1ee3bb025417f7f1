"""The CLI's argument parser: a parse error is one line on stderr, and an unknown key names the
closest valid one. jsonargparse's own error prints the whole usage (about 180 lines for `fit`) with
the error last, where a misspelled key scrolls out of sight."""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import NoReturn

from jsonargparse._common import debug_mode_active
from lightning.pytorch.cli import LightningArgumentParser

# jsonargparse's messages for a key no parser accepts: given on the command line, in a --config file
# (the two nested forms), or a subcommand that does not exist
_UNRECOGNIZED = re.compile(r"^unrecognized arguments: (?P<args>.*)$", re.S)
_IN_CONFIG = re.compile(r"^Subcommand '\w+' does not accept option '(?P<key>[^']+)'$")
_IN_GROUP = re.compile(r"^(?:Group '(?P<group>[^']+)' does not accept option '(?P<key>[^']+)'|"
                       r"Option '(?P<option>[^']+)' is not accepted)$")
_SUBCOMMAND = re.compile(r"^argument subcommand: invalid choice: '(?P<name>[^']*)'")
# LightningCLI's usual options, which GenEnv replaces with its own (GenEnvModule.configure_optimizers)
REPLACED = {"optimizer": "model.agent_optimizer or --model.simulator_optimizer",
            "lr_scheduler": "model.grpo.warmup_updates or --model.rwr.warmup_updates (linear warm-up schedules)"}
CUTOFF = 0.75  # difflib similarity of whole dotted keys: a typo in one name scores 0.9 and more


class GenEnvArgumentParser(LightningArgumentParser):
    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or debug_mode_active():  # callers that catch the error get it unchanged
            super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self  # the parser whose keys apply
        sys.stderr.write(one_line(parser, message) + "\n")
        self.exit(2)


def one_line(parser: argparse.ArgumentParser, message: str) -> str:
    """The error as one line: an unknown key with the closest valid key, else the parser's message,
    each with where the valid keys are listed."""
    command = parser.prog.replace(" [options]", "")
    listed = f"({command} --help lists every option)"
    if m := _SUBCOMMAND.match(message):
        names = [a.dest for a in _subcommands(parser)]
        suggestion = _did_you_mean(m["name"], names, "")
        return f"error: no subcommand '{m['name']}'{suggestion} (choose from {', '.join(names)})"
    if m := _UNRECOGNIZED.match(message):
        options = [a.split("=")[0] for a in m["args"].split() if a.startswith("-")]
        if options:
            unknown = "; ".join(f"{o}{_did_you_mean(o.lstrip('-'), keys(parser), '--')}" for o in options)
            return f"error: unknown option {unknown} {listed}"
    if m := _IN_CONFIG.match(message):
        suggestion = _did_you_mean(m["key"], keys(parser), "")
        return f"error: unknown key {m['key']} (in a --config file or a dict value){suggestion} {listed}"
    if m := _IN_GROUP.match(message):
        key = f"{m['group']}.{m['key']}" if m["group"] else m["option"]
        return f"error: unknown key {key}{_did_you_mean(key, keys(parser), '')} {listed}"
    text = message.strip()
    if "is not accepted before subcommand" in text:  # `main.py --config x.yaml fit`: the order matters
        text += f"; give --config files and options after the subcommand, e.g. {command} fit --config FILE"
    return f"error: {text} {listed}" if "\n" not in text else f"error: {text}\n{listed}"


def keys(parser: argparse.ArgumentParser) -> list[str]:
    """Every key the parser accepts (`data.coevo.group_size`), without the --help actions."""
    return [a.dest for a in parser._actions
            if a.option_strings and a.dest != argparse.SUPPRESS and not a.dest.endswith(".help") and a.dest != "help"]


def _subcommands(parser: argparse.ArgumentParser) -> list:
    action = getattr(parser, "_subcommands_action", None)
    return list(action._choices_actions) if action is not None else []


def _did_you_mean(key: str, candidates: list[str], dashes: str) -> str:
    if key.split(".")[0] in REPLACED:
        return f"; did you mean {dashes}{REPLACED[key.split('.')[0]]}?"
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=CUTOFF)
    return f"; did you mean {dashes}{close[0]}?" if close else ""
