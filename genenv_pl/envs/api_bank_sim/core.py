"""The simulated APIs' machinery: a registry, the state a call runs on, and upstream's result shape.

Upstream API-Bank (`evaluator.py`) builds a new ToolManager for every evaluated call, so each call runs
on the initial database (`init_database/*.json`). That scores some gold calls wrong: a login with the
password the dialogue set earlier, a query of the id an earlier call created. Here a call of a shipped
dialogue runs after the dialogue's earlier calls are replayed on a fresh copy (`Session`); a call
without earlier calls (a generated task) runs on the initial state, as upstream's.
Arguments arrive as upstream's `ToolManager.api_call` leaves them: converted to each parameter's declared
type (each family's `PARAMETERS`, upstream's `input_parameters`). A call returns `{"api_name", "input", "output",
"exception"}`; an API signals a failure by raising `ApiError`, whose message becomes `exception` (with
`output` None), as upstream's `call` methods catch their exceptions.

The APIs here are written for this project from upstream's documented behaviour and the shipped
data; no upstream code is copied. `tests/envs/test_api_bank_sim.py` checks that every gold call in the
shipped dialogues executes to its recorded result.
"""
from __future__ import annotations

import copy
import datetime
import json
import os
from dataclasses import dataclass
from typing import Any, Callable

Result = dict[str, Any]
# The `init_database/<table>.json` files the APIs read (`Session.table` refuses any other name, so this list
# stays what the code reads): what scripts/check_data.py and the CLI's data check require of the folder.
TABLES = ("Account", "Agenda", "Alarm", "Appointments", "Bank", "HealthData", "History", "Hotel", "Meeting",
          "QuestionAnswering", "Reminder", "Scenes", "SearchEngine", "Stock", "Symptom", "TimeSwitch", "Wiki")


class ApiError(Exception):
    """An API's failure: its message is the result's `exception`."""


class Database:
    """`init_database/*.json` by file stem, read once; each evaluated call gets a `Session` over it."""

    def __init__(self, folder: str):
        self.tables: dict[str, Any] = {}
        for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
            if name.endswith(".json"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    self.tables[name[:-5]] = json.load(f)


class Session:
    """The APIs' state for one evaluated call: the initial tables, copied when first read, which the
    dialogue's earlier calls (replayed first) and the call itself may change; `state` holds what
    upstream keeps in API objects (an issued verification code). While an earlier call is replayed,
    `recorded` is its recorded output, so that an API that draws a random value (a new id) takes the
    one the dialogue goes on to use."""

    def __init__(self, db: Database):
        self._db, self._tables = db, {}
        self.state: dict[str, Any] = {}
        self.recorded: Any = None

    def table(self, name: str) -> Any:
        if name not in TABLES:  # a programming error: a new table must be declared, so that the data check requires it
            raise AssertionError(f"api-bank: table {name!r} is not declared in api_bank_sim.core.TABLES")
        if name not in self._tables:
            if name not in self._db.tables:
                raise KeyError(f"api-bank: init_database has no {name}.json")
            self._tables[name] = copy.deepcopy(self._db.tables[name])
        return self._tables[name]


def default_check(response: Result, gold: Result) -> bool:
    """Upstream's `check_api_call_correctness` of most APIs: input, output and exception all equal."""
    return (response.get("input") == gold.get("input") and response.get("output") == gold.get("output")
            and response.get("exception") == gold.get("exception"))


@dataclass(frozen=True)
class Api:
    name: str
    run: Callable[..., Any]  # run(session, **arguments) -> output; raises ApiError
    check: Callable[[Result, Result], bool] = default_check
    # optional parameters and their defaults: upstream's result `input` lists them even when not given
    defaults: dict[str, Any] | None = None

    def input_of(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return {**(self.defaults or {}), **arguments}


REGISTRY: dict[str, Api] = {}


def api(name: str, check: Callable[[Result, Result], bool] = default_check, defaults: dict[str, Any] | None = None):
    """Register `run(session, **arguments)` as the simulated API `name`."""
    def register(run: Callable[..., Any]) -> Callable[..., Any]:
        if name in REGISTRY:
            raise ValueError(f"api-bank: {name} registered twice")
        REGISTRY[name] = Api(name, run, check, defaults)
        return run
    return register


def check_token(db: Session, token: str) -> str:
    """The user a token belongs to (upstream's CheckToken over Account.json)."""
    for username, account in db.table("Account").items():
        if account.get("token") == token:
            return username
    raise ApiError("The token is invalid.")


def upstream_time(text: str, fmt: str) -> str:
    """`text` normalised as upstream's `format_check`s do: stripped, a short year zero-padded to four
    digits (when the text has exactly three '-' parts), parsed with `fmt` and printed back.
    Raises ValueError (strptime's message, which upstream reports as the exception)."""
    text = text.strip()
    parts = text.split("-")
    if len(parts) == 3:
        parts[0] = parts[0].zfill(4)
        text = "-".join(parts)
    return datetime.datetime.strptime(text, fmt).strftime(fmt)


def comparable_time(text: Any, fmt: str) -> Any:
    """What upstream's checks compare for a date argument: the normalised text, or, for a value that
    does not parse, a fresh object (upstream compares two distinct exception objects: never equal)."""
    try:
        return upstream_time(text, fmt)
    except (ValueError, AttributeError):
        return object()
