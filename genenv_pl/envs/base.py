"""The environment interface: how a benchmark turns text into tasks and scores.

An environment knows nothing of Lightning, training or generation backends. It owns
seed tasks, the prompts shown to the simulator and the agent, parsing and validating
simulator output, the agent reward, and the benchmark's held-out evaluation set.
"""
from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": str}

DATA_ROOT_ENV = "GENENV_DATA_ROOT"


@dataclass
class Task:
    """One task instance: what the agent sees plus the evaluation spec (gold)."""

    id: str
    data: dict[str, Any]  # environment-specific payload; must be JSON-serializable
    difficulty: float = 0.0
    group: str = "all"  # evaluation bucket (level, category, task type)
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Task":
        return cls(**d)


class InvalidTask(ValueError):
    """Raised by `Environment.parse_task` for simulator output that does not parse or validate.

    `reason` is a short machine-friendly label (e.g. "unparseable", "bad_type") counted in metrics.
    """

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class DataError(ValueError):
    """A malformed benchmark file or record; the message names the file and the record id."""


class ConfigError(ValueError):
    """Environment arguments that cannot work (e.g. a category that is not supported); the message
    says why in one line, which the CLI prints without a traceback."""


def read_jsonl(path: str, benchmark: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line of a JSON-lines benchmark file. A line that is
    not a JSON object raises DataError naming the benchmark, the file and the line."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{benchmark}: {path}: line {lineno}"
            try:
                row = json.loads(line)
            except ValueError as e:
                raise DataError(f"{where} is not valid JSON ({e})") from None
            if not isinstance(row, dict):
                raise DataError(f"{where}: expected a JSON object")
            yield lineno, row


def resolve_data_root(data_root: str | None, benchmark: str) -> str:
    """The folder holding `<benchmark>/`: the explicit config key wins, then $GENENV_DATA_ROOT."""
    root = data_root or os.environ.get(DATA_ROOT_ENV)
    if not root:
        raise DataError(
            f"{benchmark}: no data root. Set `data_root` in the environment config or the "
            f"{DATA_ROOT_ENV} environment variable to the folder that contains `{benchmark}/` "
            "(see README, 'Benchmark data')."
        )
    path = os.path.join(root, benchmark)
    if not os.path.isdir(path):
        raise DataError(f"{benchmark}: data folder {path!r} does not exist (data_root={root!r}); see README, "
                        f"'Benchmark data', for what goes in it and where to get it")
    return path


class Environment(ABC):
    """A benchmark as seen by GenEnv. Subclasses are constructed from config (init args)."""

    name: str = "env"
    #: a rollout counts as a success for p_hat when its reward is at least this
    success_threshold: float = 1.0

    # ---- data -------------------------------------------------------------------------
    @abstractmethod
    def seed_tasks(self) -> list[Task]:
        """Base training data: seeds for the simulator and base tasks for the agent."""

    @abstractmethod
    def eval_tasks(self) -> list[Task]:
        """Held-out evaluation set; never used for training. Disjoint from `seed_tasks`."""

    # ---- simulator side -----------------------------------------------------------------
    @abstractmethod
    def simulator_prompt(self, seed: Task, success_rate: float | None) -> list[Message]:
        """Prompt asking the simulator for one variation of `seed`, given the agent's recent
        success rate on this seed's variations (None when unknown)."""

    @abstractmethod
    def parse_task(self, text: str, seed: Task) -> Task:
        """Parse and validate one simulator generation; raise `InvalidTask` when it is not usable.

        Must never execute the text. The returned task carries its own gold/evaluation spec,
        computed or checked by the environment wherever possible. Measures of a valid task's quality
        (e.g. ALFWorld's `gold_valid`, from replaying it in the engine) go in `task.meta["checks"]`
        as {name: value}; their mean over an epoch's generated tasks is logged as `coevo/check/<name>`."""

    def task_key(self, task: Task) -> str:
        """Identity for de-duplication (exact duplicates are dropped)."""
        import json

        return json.dumps(task.data, sort_keys=True)

    # ---- agent side ---------------------------------------------------------------------
    @abstractmethod
    def agent_prompt(self, task: Task) -> list[Message]:
        """The messages shown to the agent for `task`."""

    @abstractmethod
    def reward(self, task: Task, response: str) -> float:
        """R_agent in [0, 1] for one agent response (never raises on malformed text)."""

    def score(self, task: Task, response: str) -> dict[str, float]:
        """Benchmark metrics for one evaluation response. Keys are metric names; the default is
        `accuracy` (success by `success_threshold`) and `format_error` (0/1)."""
        r = self.reward(task, response)
        return {"accuracy": float(r >= self.success_threshold), "format_error": 0.0}

    def aggregate(self, scores: list[dict[str, float]]) -> dict[str, float]:
        """Corpus-level metrics from the per-task `score` dicts, beyond per-task means (e.g. micro
        rates that are ratios of summed counts). Default: none."""
        return {}

    def play(self, act, limit: int | None = None, batch_size: int = 1) -> dict[str, float]:
        """Interactive evaluation for environments with a real engine (ALFWorld episodes): `act`
        maps a list of conversations (chat messages) to the agent's raw replies, one each.
        `limit` caps the number of episodes; up to `batch_size` of them run in lockstep.
        Default: the environment has none."""
        return {}

    # ---- optional: offline warm start of tiny models -----------------------------------
    def warm_start_examples(self, role: str, n: int, seed: int) -> list[tuple[list[Message], str]]:
        """`n` supervised (prompt messages, target text) pairs for `role` in {"agent", "simulator"}.

        Only needed for models trained from scratch (the quickstart); instruct models skip it."""
        raise NotImplementedError(f"{self.name} has no warm-start data")

    def tokenizer_corpus(self) -> list[str]:
        """Text to train a tiny tokenizer on (only for models built from scratch)."""
        raise NotImplementedError(f"{self.name} has no tokenizer corpus")
