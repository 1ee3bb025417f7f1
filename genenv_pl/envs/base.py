"""The environment interface: how a benchmark turns text into tasks and scores.

An environment knows nothing of Lightning, training or generation backends. It owns
seed tasks, the prompts shown to the simulator and the agent, parsing and validating
simulator output, the agent reward, and the benchmark's held-out evaluation set.
`Environment`'s docstrings are the reference for writing one; docs/writing-an-environment.md
walks through a complete example (examples/word_reverse.py).
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
    """One task instance: what the agent sees plus the evaluation spec (gold).

    Tasks travel as `to_dict()` through data loaders, the training pool saved in checkpoints and the
    exchange between ranks, so `data` and `meta` hold JSON-serializable values only, and everything
    `agent_prompt`, `reward` and `score` need must be in the task (not in the parser's local state)."""

    id: str  # stable and unique among the seeds (success rates are kept per seed id) and among eval tasks
    data: dict[str, Any]  # environment-specific payload, gold included; must be JSON-serializable
    difficulty: float = 0.0  # the env's own scale (level, length); logged as coevo/difficulty, probed by callbacks
    group: str = "all"  # evaluation bucket (level, category, task type): val/accuracy_<group>
    meta: dict[str, Any] = field(default_factory=dict)  # extras; "checks": {name: value} is logged (parse_task)

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


def data_root_source(data_root: str | None) -> tuple[str | None, str]:
    """The data root and where it comes from: the config key wins, then $GENENV_DATA_ROOT; (None, "") without
    either. The one rule that environments (`resolve_data_root`) and the data check (`datacheck`) follow."""
    if data_root:
        return str(data_root), "data.env_args.data_root"
    if os.environ.get(DATA_ROOT_ENV):
        return os.environ[DATA_ROOT_ENV], f"${DATA_ROOT_ENV}"
    return None, ""


def resolve_data_root(data_root: str | None, benchmark: str) -> str:
    """The folder holding `<benchmark>/`, the root chosen by `data_root_source`."""
    root, _ = data_root_source(data_root)
    if not root:
        raise DataError(
            f"{benchmark}: no data root. Set `data_root` in the environment config or the "
            f"{DATA_ROOT_ENV} environment variable to the folder that contains `{benchmark}/` "
            "(see docs/benchmarks.md, 'Data')."
        )
    path = os.path.join(root, benchmark)
    if not os.path.isdir(path):
        raise DataError(f"{benchmark}: data folder {path!r} does not exist (data_root={root!r}); see docs/benchmarks.md, "
                        f"'Data', for what goes in it and where to get it")
    return path


class Environment(ABC):
    """A benchmark as seen by GenEnv.

    Config: `data.env` names the class, registered (genenv_pl/envs/__init__.py) or by import path
    (`package.module:ClassName`); `data.env_args` are its constructor's keyword arguments, documented in
    the constructor's docstring (its Args). The constructor reads and checks everything up front: an
    argument that cannot work raises `ConfigError`, a malformed data file `DataError`, each with a
    one-line message that names the key or the file (the CLI prints it without a traceback).

    One instance is built in every process (each rank of a multi-GPU run, each `test` of a checkpoint),
    so the constructor and every method are deterministic: the same arguments give the same seed tasks,
    eval tasks, prompts and warm-start data everywhere (seed any randomness from the arguments; never use
    Python's salted `hash()`).

    `parse_task`, `reward` and `score` run for every generation: they must be cheap, never execute model
    text, and never raise on malformed text other than as documented (the loop counts an unexpected
    exception as a parser error or a reward of 0, but it is a bug).

    A fit calls, each epoch: `seed_tasks` (a sample of them become the simulator's seeds and the
    agent's base tasks), `simulator_prompt` and `parse_task` (K variations per seed), `task_key`
    (de-duplication against the seeds and within the epoch), `agent_prompt` and `reward` (G rollouts
    per task); validation calls `eval_tasks`, `agent_prompt` and `score`; `test` also `aggregate` and
    `play`. Models trained from scratch ("tiny") call `tokenizer_corpus` and `warm_start_examples`.
    """

    name: str = "env"
    """Short unique identifier: it names the cached tokenizers and warm starts and the test results."""
    success_threshold: float = 1.0
    """A rollout counts as a success (for p_hat, the difficulty estimate the curriculum scores, and for
    the default `score`'s accuracy) when its reward is at least this."""
    data_folder: str | None = None
    """The benchmark's folder under the data root (`<data_root>/<data_folder>/`); None: the environment
    reads no data files (its tasks are built in, as arithmetic's)."""
    data_source: str = ""
    """Where to get that folder's files, in one line: scripts/check_data.py and the CLI's data check
    print it when a file of `required_files` is missing."""

    @classmethod
    def required_files(cls, env_args: dict[str, Any] | None = None) -> list[str]:
        """The files under `<data_root>/<data_folder>/` that the environment reads, as paths relative to
        that folder; a path with `*` is a glob pattern that must match at least one file.

        `env_args`: the constructor's arguments (`data.env_args`): the files an instance built with them
        reads (what `main.py` checks before building anything; arguments the constructor would refuse
        may be ignored here, it reports them). None: every file the environment reads under any
        arguments it supports, the whole benchmark (what scripts/check_data.py checks). Default: none."""
        return []

    # ---- data -------------------------------------------------------------------------
    @abstractmethod
    def seed_tasks(self) -> list[Task]:
        """Base training data: seeds for the simulator and base tasks for the agent.

        Called every epoch: the same tasks in the same order each time, as a new list (`list(self._seeds)`),
        with unique, stable ids. Never an evaluation task (`eval_tasks`)."""

    @abstractmethod
    def eval_tasks(self) -> list[Task]:
        """Held-out evaluation set; never used for training. Disjoint from `seed_tasks`.

        The same list on every call and every rank. Each task's `group` becomes a metric,
        val/accuracy_<group> (keep groups few and metric-name friendly); `data.coevo.eval_limit_per_group`
        takes the first tasks of each group in this order."""

    def val_tasks(self) -> list[Task]:
        """The validation set: what `fit` validates on, and so what a learning rate, a budget or an early stop
        is chosen on. Disjoint from `seed_tasks`; an environment with a split of its own keeps it disjoint from
        `eval_tasks` too, so that nothing is chosen on the test set. Default: `eval_tasks`."""
        return self.eval_tasks()

    # ---- simulator side -----------------------------------------------------------------
    @abstractmethod
    def simulator_prompt(self, seed: Task, success_rate: float | None) -> list[Message]:
        """Prompt asking the simulator for one variation of `seed`, given the agent's recent
        success rate on this seed's variations (None when unknown).

        Show the success rate: it is the simulator's only view of the agent, and what lets it learn to
        write harder variations after success and easier ones after failure (SimulatorConditioningCallback
        measures whether it does). Ask for output that `parse_task` reads, e.g. one JSON object."""

    @abstractmethod
    def parse_task(self, text: str, seed: Task) -> Task:
        """Parse and validate one simulator generation; raise `InvalidTask` when it is not usable.

        `text` is the decoded generation (without special tokens). Must never execute the text (no
        eval/exec, no code it names); parse it as data (json.loads, a regex) with a bound on its length.
        Raise `InvalidTask(reason)` for everything unusable: reasons are short labels counted per epoch
        (coevo/invalid_rate); any other exception is counted as "parser_error:<type>" and is a bug.
        Reject a task that copies an evaluation task, so nothing held out is trained on.

        The returned task carries its own gold/evaluation spec, computed or checked by the environment
        wherever possible: a simulator that may write its own answers can earn reward for wrong ones.
        Its `difficulty` is on the same scale as the seeds'; its id may derive from `seed.id`. Exact
        duplicates (`task_key`) of the seeds or of another task of the epoch are dropped afterwards, as
        are truncated generations. Measures of a valid task's quality
        (e.g. ALFWorld's `gold_valid`, from replaying it in the engine) go in `task.meta["checks"]`
        as {name: value}; their mean over an epoch's generated tasks is logged as `coevo/check/<name>`."""

    def task_key(self, task: Task) -> str:
        """Identity for de-duplication (exact duplicates are dropped): by default `data` as sorted JSON.
        Override to ignore what does not change the task (an id inside `data`, whitespace)."""
        import json

        return json.dumps(task.data, sort_keys=True)

    # ---- agent side ---------------------------------------------------------------------
    @abstractmethod
    def agent_prompt(self, task: Task) -> list[Message]:
        """The messages shown to the agent for `task`: chat messages, rendered with the model's chat
        template, or for models without one ("tiny") their contents joined by newlines. Must not show
        the gold."""

    @abstractmethod
    def reward(self, task: Task, response: str) -> float:
        """R_agent in [0, 1] for one agent response (never raises on malformed text).

        Called for each of the G rollouts of every training task: cheap and deterministic. A value
        outside [0, 1] is clipped, NaN or an exception counts as 0. Binary rewards are what the paper
        uses and what the alpha band assumes; partial credit is allowed (see `success_threshold`)."""

    def score(self, task: Task, response: str) -> dict[str, float]:
        """Benchmark metrics for one evaluation response (greedy; with `eval_samples`, sampled too).
        Keys are metric names, values floats; `accuracy` is required (val/accuracy, eval/accuracy) and
        `format_error` (0/1, a response that does not parse) is logged as a rate. The default is
        `accuracy` (success by `success_threshold`) and `format_error` 0. An exception scores
        accuracy 0, format_error 1."""
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
        """Up to `n` supervised (prompt messages, target text) pairs for `role` in {"agent", "simulator"}.

        The target is appended to the rendered prompt as is and followed by EOS, so it starts exactly
        as the model should continue (e.g. with the space the prompt leaves out). Agent pairs teach the
        answer format and some of the skill (the quickstart leaves its harder levels to co-evolution);
        simulator pairs teach the output format `parse_task` accepts. Deterministic in (role, n, seed):
        the pairs for n = 64 key the cached warm start. Never an evaluation task.

        Needed for models trained from scratch (the quickstart) and for any `warm_start.steps` > 0;
        instruct models usually skip it."""
        raise NotImplementedError(f"{self.name} has no warm-start data")

    def tokenizer_corpus(self) -> list[str]:
        """Text to train a tiny tokenizer on (only for models built from scratch): the prompts and targets
        as the models will see them. Deterministic: the tokenizer is cached by a digest of this text, and
        the agent and the simulator share it."""
        raise NotImplementedError(f"{self.name} has no tokenizer corpus")
