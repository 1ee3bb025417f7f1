"""The ALFWorld engine as the checker of generated steps (the paper's "evaluation specification: an
executable checker").

A generated step claims a state (the goal, the room, the commands sent so far with the game's answers)
and a gold next command. Only the engine can vouch for it: `check_step` replays the step's commands in
its seed game and asks whether the state it reaches is the one the step describes, and whether the gold
is admissible there and goal-advancing (it wins, or the planner's plan from the state after it is
shorter than from the state before it). `ground_step` builds a step the other way round: the engine
plays the commands a simulator wrote and supplies the state, the admissible commands and the gold (the
planner's next command), so every step it returns is one the engine vouches for by construction.

Like `alfworld_game.py`, this plays games only when asked (textworld, fast_downward imported there).
`Engine` runs both in a child process with a time limit: the planner's search from a state off the
expert's path can run away (one of ten detoured states took 56 s here), and a stalled planner must cost
one rejected step, not a stalled epoch. The limit is on the child's CPU time by default, so that whether
a step is rejected does not depend on what else the machine runs (on a wall clock, a run beside another
rejected more of the same steps).
"""
from __future__ import annotations

import json
import math
import os
import select
import signal
import subprocess
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from genenv_pl.envs.alfworld_game import _engine_command, open_game, split_intro
from genenv_pl.envs.alfworld_grammar import canonical_action
from genenv_pl.envs.base import InvalidTask

NOTHING = "nothing happens."


@dataclass
class _Session:
    """One game from its start: the engine, its latest state, and the commands played so far."""

    env: Any
    state: Any
    task: str
    room: str
    history: list[dict[str, str]] = field(default_factory=list)

    @property
    def admissible(self) -> list[str]:
        return list(self.state["admissible_commands"])

    @property
    def won(self) -> bool:
        return bool(self.state["won"])

    def send(self, action: str) -> bool:
        """Play one command as an agent would (ALFWorld answers an inadmissible one "Nothing
        happens." and costs a move); True when the engine admitted it."""
        command = _engine_command(action, self.admissible)
        admitted = command in self.admissible
        self.state, _, _ = self.env.step(command)
        self.history.append({"action": command, "observation": self.state.feedback.strip()})
        return admitted

    def plan(self) -> list[str]:
        """The planner's commands from the current state to the goal ([] when it finds none)."""
        inner = self.env
        while hasattr(inner, "_wrapped_env"):  # textworld wrappers (the name demangler) hold the PddlEnv
            inner = inner._wrapped_env
        return list(inner._pddl_state.replan(inner._entity_infos) or [])

    def advances(self, command: str, before: list[str] | None = None) -> bool:
        """Whether `command` (admissible now) wins or shortens the plan to the goal. Plays it. `before`:
        the plan from here, where the caller has it (one planner search can take tens of seconds)."""
        before = self.plan() if before is None else before
        if not before or command not in self.admissible:
            return False
        self.send(command)
        return self.won or len(self.plan()) < len(before)


_TRANSLATIONS: dict = {}  # PDDL translations of the games this process has started (a few MB for all)


@contextmanager
def _session(path: str) -> Iterator[_Session]:
    env, state = open_game(path, _TRANSLATIONS)
    try:
        task, room = split_intro(state.feedback)
        yield _Session(env, state, task, room)
    finally:
        env.close()


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.lower().split()).rstrip(".") == " ".join(b.lower().split()).rstrip(".")


def check_step(path: str, data: dict[str, Any]) -> dict[str, float]:
    """How far the engine vouches for a generated step of the game at `path`.

    `replayable`: the step describes a state of this game (same goal and room; each history command's
    answer is the engine's). `gold_valid`: it does, and its gold is admissible and goal-advancing there.
    A step that changed the goal or the objects describes a game that cannot be checked, and counts
    as not vouched for (0, 0)."""
    no = {"replayable": 0.0, "gold_valid": 0.0}
    with _session(path) as game:
        if not (_same_text(game.task, data["task"]) and _same_text(game.room, data["observation"])):
            return no
        for h in data["history"]:
            game.send(h["action"])
            if game.won or not _same_text(game.history[-1]["observation"], h["observation"]):
                return no
        gold = _engine_command(data["gold"], game.admissible)
        return {"replayable": 1.0, "gold_valid": float(game.advances(gold))}


def ground_step(path: str, actions: list[str]) -> tuple[dict[str, Any], dict[str, float]]:
    """(step data, checks) for the state the engine reaches by playing `actions` from the start of the
    game at `path`: the engine's own answers as history, its admissible commands, and the planner's
    next command as gold. Raises InvalidTask when the commands win the game (no next step is left) or
    the planner finds no way to the goal."""
    with _session(path) as game:
        for action in actions:
            game.send(action)
            if game.won:
                raise InvalidTask("already_won", "the commands win the game: no next step is left")
        plan = game.plan()
        if not plan:
            raise InvalidTask("no_plan", "the planner finds no way to the goal from this state")
        data = {"task": game.task, "observation": game.room, "history": [dict(h) for h in game.history],
                "admissible_commands": game.admissible, "gold": canonical_action(plan[0])}
        # measured as check_step measures a free-form step (the planner is not guaranteed optimal)
        checks = {"replayable": 1.0, "gold_valid": float(game.advances(_engine_command(plan[0], game.admissible), plan))}
    return data, checks


_CALLS = {"check_step": check_step, "ground_step": ground_step}

try:
    import resource
except ImportError:  # not POSIX (Windows): only the wall clock can limit a call
    resource = None  # type: ignore[assignment]


def limit_cpu(seconds: float | None) -> None:
    """Let this process use `seconds` more CPU time, up to one second more (the kernel's limit is in whole
    seconds); None: no limit. Past it the kernel sends SIGXCPU, whose default action ends the process
    wherever it is. A Python timer would not do: its handler runs only once the planner's C++ search
    returns to Python."""
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = resource.RLIM_INFINITY if seconds is None else math.ceil(sum(os.times()[:2]) + seconds)
    if hard != resource.RLIM_INFINITY:
        soft = hard if soft == resource.RLIM_INFINITY else min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _serve() -> None:
    """The child's loop, one JSON line per call on stdin and per reply on stdout: [name, args, CPU
    seconds or null] in; ["ok", value], ["invalid", reason, detail] or ["error", type, message] out."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever the engine prints goes to stderr, not into the replies
    if resource is not None:
        signal.signal(signal.SIGXCPU, signal.SIG_DFL)  # the limit ends the child ...
        resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))  # ... without a core file
    replies.write('["ready"]\n')
    for line in sys.stdin:
        name, args, cpu_seconds = json.loads(line)
        if resource is not None:
            limit_cpu(cpu_seconds)
        try:
            reply = ["ok", _CALLS[name](*args)]
        except InvalidTask as e:
            reply = ["invalid", e.reason, str(e)]
        except Exception as e:  # noqa: BLE001 - a game the engine cannot play: the caller counts it
            reply = ["error", type(e).__name__, str(e)[:500]]
        replies.write(json.dumps(reply) + "\n")


CLOCKS = ("cpu", "wall")
WALL_BACKSTOP = 10
"""Under the CPU clock a call still ends after this many times `timeout` on the wall clock: a child
that gets under a tenth of a core is stalled, not slow."""


class Engine:
    """`check_step` and `ground_step` in one long-lived child process (`python -m` this module), each
    call limited to `timeout` seconds of the child's CPU time (`clock="cpu"`) or of wall-clock time
    (`clock="wall"`). A call past it ends the child (the next call starts a new one) and raises
    InvalidTask("engine_timeout"); a child that dies otherwise raises InvalidTask("engine_crash"); an
    engine error (an unreadable game) raises RuntimeError."""

    def __init__(self, timeout: float = 10.0, clock: str = "cpu") -> None:
        if clock not in CLOCKS:
            raise ValueError(f"engine clock must be one of {CLOCKS}, got {clock!r}")
        if clock == "cpu" and resource is None:
            warnings.warn("no CPU-time limits on this platform: the ALFWorld engine's limit is on the wall clock")
            clock = "wall"
        self.timeout = timeout
        self.clock = clock
        self._proc: subprocess.Popen | None = None

    def check_step(self, path: str, data: dict[str, Any]) -> dict[str, float]:
        return self._call("check_step", path, data)

    def ground_step(self, path: str, actions: list[str]) -> tuple[dict[str, Any], dict[str, float]]:
        data, checks = self._call("ground_step", path, actions)
        return data, checks

    def _call(self, name: str, *args: Any) -> Any:
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        self._proc.stdin.write(json.dumps([name, list(args), self.timeout if self.clock == "cpu" else None]) + "\n")
        self._proc.stdin.flush()
        reply = self._reply(self._wall_limit)
        if not reply:
            self._raise_no_reply(ended=reply == [])
        if reply[0] == "ok":
            return reply[1]
        if reply[0] == "invalid":
            raise InvalidTask(reply[1], reply[2])
        raise RuntimeError(f"alfworld engine: {reply[1]}: {reply[2]}")

    @property
    def _wall_limit(self) -> float:
        """Seconds a call may take on the wall clock: the limit itself, or the CPU clock's backstop."""
        return self.timeout * (WALL_BACKSTOP if self.clock == "cpu" else 1)

    def _raise_no_reply(self, ended: bool) -> None:
        code = self._proc.wait() if ended else None  # a child that closed its replies has ended
        self.close()
        sigxcpu = getattr(signal, "SIGXCPU", None)  # POSIX only
        if sigxcpu is not None and code == -sigxcpu:
            raise InvalidTask("engine_timeout", f"the engine took over {self.timeout:g} s of CPU time")
        if code is None:
            raise InvalidTask("engine_timeout", f"the engine took over {self._wall_limit:g} s")
        raise InvalidTask("engine_crash", f"the engine's process ended (exit {code})")

    def _reply(self, timeout: float) -> list | None:
        """The child's next reply: None past `timeout`, [] when the child ended without one."""
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
        if not ready:
            return None
        line = self._proc.stdout.readline()
        return json.loads(line) if line else []

    def _start(self) -> None:
        # a fresh interpreter, not a fork: the parent runs torch threads, and a forked child may
        # inherit a held lock; `-m` rather than multiprocessing's spawn, which re-imports the caller's script
        self._proc = subprocess.Popen([sys.executable, "-m", "genenv_pl.envs.alfworld_check"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
        if self._reply(120) != ["ready"]:  # imports only; generous for a loaded machine
            self.close()
            raise RuntimeError("alfworld engine: the worker process did not start")

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            for f in (self._proc.stdin, self._proc.stdout):
                f.close()
        self._proc = None

    def __getstate__(self) -> dict[str, Any]:  # a copied environment starts its own child
        return {"timeout": self.timeout, "clock": self.clock, "_proc": None}

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


if __name__ == "__main__":
    _serve()
