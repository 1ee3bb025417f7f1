"""API-Bank's simulated APIs, executed as upstream's evaluator executes them (see `core`).

    world = Simulator(data_root_api_bank)
    world.execute("QueryBalance", {"token": "...", "account": "..."})   # upstream's result dict
    world.correct(call_result, gold_result)                             # upstream's check for that API
"""
from __future__ import annotations

import inspect
import json
import os
from typing import Any, Sequence

from genenv_pl.envs.api_bank_sim import account, health, home, knowledge, schedule, tool_search  # (importing registers the APIs)
from genenv_pl.envs.base import DataError
from genenv_pl.envs.api_bank_sim.core import REGISTRY, ApiError, Database, Result, Session, default_check  # noqa: F401

Earlier = tuple[str, dict[str, Any], Any]  # an earlier call of the dialogue: name, arguments, recorded output

__all__ = ["Simulator", "ApiError", "simulated_apis"]


def simulated_apis() -> list[str]:
    return sorted(REGISTRY)


def _text(value: Any) -> str:
    """What upstream's call parser hands an API for a value the model wrote (it reads text)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def convert(value: Any, declared: str) -> Any:
    """A model's argument as upstream's `ToolManager.api_call` converts it to the declared type.
    Raises ValueError where upstream's conversion fails (the call is then incorrect)."""
    text = _text(value)
    if declared == "int":
        if not text.isdigit():
            raise ValueError(f"invalid parameter type. parameter: {text}")
        return int(text)
    if declared == "float":
        if not text.replace(".", "", 1).isdigit():
            raise ValueError("invalid parameter type.")
        return float(text)
    if declared in ("list", "list(str)"):
        return json.loads(text.replace("'", '"'))
    if declared == "bool":
        return text == "True"
    return text  # str (and types upstream leaves as text)


FAMILIES = (account, health, home, knowledge, schedule, tool_search)
# {API: {parameter: upstream's declared type}}: each family's `PARAMETERS`, from upstream's classes.
# all_apis.csv is no source: it lists an older design of several APIs (`DeleteReminder(token,
# reminder_id)`, where upstream's class and every recorded call use content and time).
TYPES: dict[str, dict[str, str]] = {name: params for family in FAMILIES for name, params in family.PARAMETERS.items()}
if set(TYPES) != set(REGISTRY):  # a family that registers an API without declaring its parameters
    raise ImportError(f"api_bank_sim: parameters not declared for {sorted(set(REGISTRY) - set(TYPES))}")


class Simulator:
    """The simulated APIs over `<root>/init_database`."""

    def __init__(self, root: str):
        folder = os.path.join(root, "init_database")
        if not os.path.isdir(folder):
            raise DataError(f"api-bank: executing calls needs {folder}; without it set "
                            "data.env_args.scoring: input (the first call's input compared, no execution)")
        self.db = Database(folder)

    def execute(self, name: str, arguments: dict[str, Any], before: Sequence[Earlier] = ()) -> Result:
        """Run one call after replaying `before`, the dialogue's earlier calls (name, arguments, recorded
        output), on a fresh copy of the initial database. Raises ValueError where upstream's evaluator
        finds no result at all (unknown API or parameter, a value its type conversion rejects, missing
        arguments)."""
        session = Session(self.db)
        for earlier_name, earlier_args, recorded in before:
            session.recorded = recorded
            try:
                self._run(session, earlier_name, earlier_args)
            except ValueError:
                pass  # an earlier call that does not run changes nothing, as in the dialogue
        session.recorded = None
        return self._run(session, name, arguments)

    def _run(self, session: Session, name: str, arguments: dict[str, Any]) -> Result:
        if name not in REGISTRY:
            raise ValueError(f"unknown API {name!r}")
        types = TYPES[name]
        unknown = [k for k in arguments if k not in types]
        if unknown:
            raise ValueError(f"invalid parameter name. parameter: {unknown[0]}")
        args = {k: convert(v, types[k]) for k, v in arguments.items()}
        api = REGISTRY[name]
        try:
            inspect.signature(api.run).bind(session, **args)
        except TypeError as e:  # a required argument missing: upstream's call() raises before it runs
            raise ValueError(str(e)) from None
        try:
            output, exception = api.run(session, **args), None
        except Exception as e:  # noqa: BLE001  upstream's call() turns any failure into the result's exception
            output, exception = None, str(e)
        return {"api_name": name, "input": api.input_of(args), "output": output, "exception": exception}

    def correct(self, response: Result, gold: Result) -> bool:
        # some recorded results lack `api_name` (upstream's RegisterUser, DeleteAccount, ForgotPassword)
        api = REGISTRY.get(str(response.get("api_name") or gold.get("api_name")))
        try:
            return bool((api.check if api else default_check)(response, gold))
        except (KeyError, TypeError, AttributeError):  # upstream: a check that cannot read the result is wrong
            return False
