"""ALFWorld as single decision steps (the GenEnv paper's protocol) plus episode success.

Data: `<data_root>/alfworld/json_2.1.1/{valid_seen,valid_unseen}/<task dir>/<trial>/game.tw-pddl`
(see that folder's SOURCE.md). Every walkthrough is replayed in the real engine
(`alfworld_game.py`) and cut into steps: task text + first observation + expert history (actions
with the engine's feedback) + the admissible commands -> the next expert action.

Reward: 1.0 when the command read from the agent's `<response>` equals the gold after
normalization (lowercase, single spaces, no trailing period; old "put X in/on Y" = "move X to Y"),
else 0.0. `score` adds `format_error` and `admissible` (the command is one the game accepts).
`evaluate_episodes` plays whole games with any `act(list of conversations) -> list of replies`
callable (<= 50 steps, several games in lockstep) and reports success overall, per task type and split.

Split (deterministic, disjoint by game): only valid_seen / valid_unseen are shipped, so seeds come
from valid_seen. A task directory `valid_seen/<task dir>` is a seed game when
sha256(f"{split_salt}:{split}/{task dir}") mapped to [0, 1) is below `seed_fraction` (0.5);
all its trials go with it (trials of one directory share the scene and the goal). Every other
game of `eval_splits` — all of valid_unseen and the rest of valid_seen — is evaluation. The rule
reads each game's own name only, so adding games (e.g. the held-back ones) never moves another.
Task groups are "<split>/<task type>".

Simulator, two designs (`simulator_writes`):
- "step": it writes one whole new step as JSON (task, observation, history, admissible_commands?, gold).
  `parse_task` checks the gold and history commands against the command grammar and that every object
  the gold names appears in the observation text; anything else raises InvalidTask. Nothing here checks
  that the gold is right in the state the step describes; `check_gold` measures it in the engine, and
  with `reject_refused` the steps it refuses are dropped (configs/alfworld.yaml sets both).
- "actions": it writes only the commands sent so far in its seed's game (following the expert, leaving
  it, or stopping early); the engine plays them and supplies the state, the admissible commands and
  the gold (the planner's next command), so the engine vouches for every step (`alfworld_check.py`).
Either way a generated task carries `meta["checks"]` = {replayable, gold_valid} when it was checked.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
from typing import Any

from genenv_pl.envs.alfworld_check import CLOCKS, Engine
from genenv_pl.envs.alfworld_game import (
    GAME_PATTERN,
    GAMES_DIR,
    BatchPolicy,
    EpisodeReport,
    GameRef,
    evaluate_episodes,
    extract_steps,
    list_games,
)
from genenv_pl.envs.alfworld_grammar import (
    NON_GOLD_VERBS,
    actions_match,
    agent_messages,
    canonical_action,
    mentioned_objects,
    normalize_action,
    parse_agent_output,
    parse_command,
)
from genenv_pl.envs.base import ConfigError, DataError, Environment, InvalidTask, Message, Task, resolve_data_root
from genenv_pl.envs.prompting import check_sim_prompt, success_guide
from genenv_pl.envs.text_metrics import strip_tag_blocks

_MAX_TASK_CHARS = 16_000  # a generated step longer than this is rejected (prompt budget)
_MAX_HISTORY = 60
_MAX_ADMISSIBLE = 300


def stratified(games: list[GameRef], limit: int | None, salt: str) -> list[GameRef]:
    """At most `limit` games, round-robin over (split, task type) groups, each group in hash order."""
    if limit is None:
        return games
    groups: dict[tuple[str, str], list[GameRef]] = {}
    for g in sorted(games, key=lambda g: split_bucket(g.key, salt)):
        groups.setdefault((g.split, g.task_type), []).append(g)
    order = [groups[k] for k in sorted(groups, key=lambda k: (k[1], k[0]))]  # a type in both splits, then the next
    picked: list[GameRef] = []
    for i in range(max((len(v) for v in order), default=0)):
        picked += [v[i] for v in order if i < len(v)]
    return picked[:limit]


def split_bucket(key: str, salt: str) -> float:
    """A stable pseudo-random number in [0, 1) for `key` (same on every machine and run)."""
    return int(hashlib.sha256(f"{salt}:{key}".encode()).hexdigest()[:12], 16) / 16**12


class ALFWorldEnv(Environment):
    name = "alfworld"
    data_folder = "alfworld"
    data_source = ("ALFWorld game files (github.com/alfworld/alfworld): pip install alfworld, then "
                   "alfworld-download fetches them into $ALFWORLD_DATA; copy its json_2.1.1/valid_seen and "
                   "valid_unseen (the game.tw-pddl files) into alfworld/json_2.1.1/")
    success_threshold = 1.0
    simulator_writes = "step"  # (class defaults: the parsers work on an environment built without data)
    sim_prompt = "stats"
    check_gold = False

    @classmethod
    def required_files(cls, env_args: dict[str, Any] | None = None) -> list[str]:
        """The game files of the seed split and each evaluation split (at least one a split). None: the
        two shipped splits, valid_seen and valid_unseen."""
        if env_args is None:
            splits = ["valid_seen", "valid_unseen"]
        else:
            evals = env_args.get("eval_splits", ("valid_unseen", "valid_seen")) or ()
            splits = [env_args.get("seed_split", "valid_seen"), *evals]
        return [f"{GAMES_DIR}/{split}/{GAME_PATTERN}" for split in dict.fromkeys(splits) if isinstance(split, str)]

    def __init__(
        self,
        data_root: str | None = None,
        cache_dir: str | None = None,
        seed_split: str = "valid_seen",
        seed_fraction: float = 0.5,
        eval_splits: tuple[str, ...] | list[str] = ("valid_unseen", "valid_seen"),
        max_games_per_split: int | None = None,
        history_window: int | None = None,
        show_admissible: bool = True,
        max_episode_steps: int = 50,
        split_salt: str = "alfworld-v1",
        simulator_writes: str = "step",
        check_gold: bool = False,
        reject_refused: bool = False,
        engine_timeout: float = 10.0,
        engine_clock: str = "cpu",
        sim_prompt: str = "stats",
    ) -> None:
        """`simulator_writes`: "step" (a whole step as JSON) or "actions" (the commands so far in the
        seed's game; the engine supplies the rest). `check_gold`: replay every "step" in its seed's
        game to measure whether its gold is right there (about a second each; "actions" steps are
        always checked). `reject_refused` (with check_gold): a "step" the engine does not vouch for (not a
        state of its seed's game, or a gold that is not admissible and goal-advancing there) is dropped as
        invalid (`engine_refused`) instead of only being counted. `engine_timeout`: seconds one engine call
        may take (planner searches from states off the expert's path can run away); past it the step is
        rejected as engine_timeout.
        `engine_clock`: what those seconds count, "cpu" (the engine's own CPU time: the same steps are
        rejected however loaded the machine is) or "wall" (wall-clock time; the ALFWorld study's rule).
        `sim_prompt`: what the simulator's prompt says about the agent's success on the seed: "rule"
        (the rate and "make it harder" above 60%, "easier" below 40%) or "stats" (the rate alone);
        see genenv_pl/envs/prompting.py."""
        self.sim_prompt = check_sim_prompt(sim_prompt)
        if engine_clock not in CLOCKS:
            raise ConfigError(f"data.env_args.engine_clock must be one of {CLOCKS}, got {engine_clock!r}")
        if simulator_writes not in ("step", "actions"):
            raise ConfigError(f"data.env_args.simulator_writes must be 'step' or 'actions', got {simulator_writes!r}")
        self.root = resolve_data_root(data_root, self.data_folder)
        # games are listed lazily: a split folder that is not there would only show up as no tasks
        missing = [f"{GAMES_DIR}/{s}" for s in dict.fromkeys((seed_split, *eval_splits))
                   if not os.path.isdir(os.path.join(self.root, GAMES_DIR, s))]
        if missing:
            raise DataError(f"alfworld: data folder {self.root!r} is incomplete: {', '.join(missing)} missing")
        self.cache_dir = cache_dir
        self.seed_split = seed_split
        self.seed_fraction = seed_fraction
        self.eval_splits = tuple(eval_splits)
        self.max_games_per_split = max_games_per_split
        self.history_window = history_window
        self.show_admissible = show_admissible
        self.max_episode_steps = max_episode_steps
        self.split_salt = split_salt
        self.simulator_writes = simulator_writes
        if reject_refused and not check_gold and simulator_writes == "step":
            raise ConfigError("data.env_args.reject_refused drops the steps the engine refuses, which only "
                              "check_gold asks it about: set data.env_args.check_gold: true as well")
        self.check_gold = check_gold
        self.reject_refused = reject_refused
        self.engine = Engine(engine_timeout, engine_clock)
        #: (game key, reason) for every game file skipped while loading steps
        self.load_errors: list[tuple[str, str]] = []
        self._steps: dict[str, list[Task]] = {}

    # ---- split --------------------------------------------------------------------------
    def is_seed_game(self, game: GameRef) -> bool:
        bucket = split_bucket(f"{game.split}/{game.task_dir}", self.split_salt)
        return game.split == self.seed_split and bucket < self.seed_fraction

    def seed_games(self) -> list[GameRef]:
        return self._limit([g for g in list_games(self.root, [self.seed_split]) if self.is_seed_game(g)])

    def eval_games(self) -> list[GameRef]:
        return self._limit([g for g in list_games(self.root, self.eval_splits) if not self.is_seed_game(g)])

    def _limit(self, games: list[GameRef]) -> list[GameRef]:
        """At most `max_games_per_split` per split, picked in hash order (spread over types)."""
        if self.max_games_per_split is None:
            return games
        kept: list[GameRef] = []
        for split in dict.fromkeys(g.split for g in games):
            ranked = sorted((g for g in games if g.split == split), key=lambda g: split_bucket(g.key, self.split_salt))
            kept += ranked[: self.max_games_per_split]
        return sorted(kept, key=lambda g: g.key)

    @property
    def num_skipped(self) -> int:
        return len(self.load_errors)

    # ---- data ---------------------------------------------------------------------------
    def seed_tasks(self) -> list[Task]:
        return self._tasks("seed", self.seed_games())

    def eval_tasks(self) -> list[Task]:
        return self._tasks("eval", self.eval_games())

    def _tasks(self, role: str, games: list[GameRef]) -> list[Task]:
        if role not in self._steps:
            report = extract_steps(games, self.cache_dir)
            self.load_errors += report.skipped
            tasks: list[Task] = []
            for game in games:
                steps = report.steps.get(game.key, [])
                for i, step in enumerate(steps):
                    tasks.append(Task(
                        id=f"alfworld/{game.key}/{i}", data=step, difficulty=float(len(step["history"])),
                        group=f"{game.split}/{game.task_type}",
                        meta={"game": game.key, "split": game.split, "task_type": game.task_type,
                              "step": i, "num_steps": len(steps)},
                    ))
            self._steps[role] = tasks
        return list(self._steps[role])

    # ---- agent side ---------------------------------------------------------------------
    def agent_prompt(self, task: Task) -> list[Message]:
        state = dict(task.data)
        if not self.show_admissible:
            state.pop("admissible_commands", None)
        return agent_messages(state, self.history_window)

    def reward(self, task: Task, response: str) -> float:
        action, _ = parse_agent_output(response)
        return float(actions_match(action, task.data["gold"]))

    def score(self, task: Task, response: str) -> dict[str, float]:
        action, well_formed = parse_agent_output(response)
        admissible = task.data.get("admissible_commands")
        if admissible:
            ok = canonical_action(action) in {canonical_action(c) for c in admissible}
        else:
            ok = parse_command(action) is not None
        return {"accuracy": float(actions_match(action, task.data["gold"])),
                "format_error": float(not well_formed), "admissible": float(ok)}

    def evaluate_episodes(self, act: BatchPolicy, games: list[GameRef] | None = None,
                          max_steps: int | None = None, batch_size: int = 1) -> EpisodeReport:
        """Episode success of `act` on the evaluation games (or `games`); no model code here."""
        return evaluate_episodes(games if games is not None else self.eval_games(), act,
                                 max_steps or self.max_episode_steps, self.history_window, batch_size)

    def play(self, act, limit: int | None = None, batch_size: int = 1) -> dict[str, float]:
        """Episode success rate (<= max_episode_steps commands), overall, per task type and split.
        `limit` games are taken round-robin over (task type, split), each in hash order: a sample
        of 12 plays one game of every type in both splits, not 12 games of the first type; a
        sample of 2 plays one type in both splits."""
        games = self.eval_games()
        return self.evaluate_episodes(act, stratified(games, limit, self.split_salt), batch_size=batch_size).summary()

    # ---- simulator side -----------------------------------------------------------------
    def simulator_prompt(self, seed: Task, success_rate: float | None) -> list[Message]:
        if self.simulator_writes == "actions":
            return self._actions_prompt(seed, success_rate)
        guide = success_guide(
            success_rate, self.sim_prompt, stat="The agent solves variations of this seed {rate} of the time",
            harder="make it harder (more distractor objects and receptacles, a longer history, a less obvious next step).",
            easier="make it easier (fewer objects, a shorter history, an obvious next step).", keep="keep the difficulty.",
            unknown="The agent's success rate on this seed is unknown: keep a similar difficulty.")
        return [{"role": "system", "content": SIMULATOR_SYSTEM},
                {"role": "user", "content": f"Seed step:\n{json.dumps(seed.data)}\n\n{guide}\n"
                                            "Write one new step as a single JSON object."}]

    def _actions_prompt(self, seed: Task, success_rate: float | None) -> list[Message]:
        guide = success_guide(
            success_rate, self.sim_prompt, stat="The agent solves steps of this game {rate} of the time",
            harder="make it harder (a later point, more commands off the plan).",
            easier="make it easier (an earlier point, fewer commands off the plan).", keep="keep the difficulty.",
            unknown="The agent's success rate on this game is unknown: keep a similar difficulty.")
        data = seed.data
        sent = [h["action"] for h in data["history"]]
        plan = self._walkthrough(seed)
        return [{"role": "system", "content": SIMULATOR_ACTIONS_SYSTEM},
                {"role": "user", "content": f"Your task is to: {data['task']}\n\nObservation:\n{data['observation']}\n\n"
                                            f"Expert plan: {json.dumps(plan)}\n"
                                            f"Seed step, commands sent so far: {json.dumps(sent)}\n\n{guide}\n"
                                            "Write one new step as a single JSON object."}]

    def parse_task(self, text: str, seed: Task) -> Task:
        obj = _extract_json(text)
        checks = None
        if self.simulator_writes == "actions":
            data, checks = self.engine.ground_step(self._game_path(seed), _parse_actions(obj))
        else:
            data = validate_generated_step(obj)
            if self.check_gold:
                checks = self.engine.check_step(self._game_path(seed), data)
                if self.reject_refused and checks["gold_valid"] < 1.0:
                    why = "its gold does not advance the goal there" if checks["replayable"] else \
                        "it is not a state of its seed's game (goal, room or an answer differ)"
                    raise InvalidTask("engine_refused", why)
        key = json.dumps(data, sort_keys=True)
        meta = {"seed_id": seed.id, "generated": True, "task_type": seed.meta.get("task_type"),
                "game": seed.meta.get("game")}
        if checks is not None:
            meta["checks"] = checks
        return Task(id=f"alfworld/gen/{hashlib.sha256(key.encode()).hexdigest()[:16]}", data=data,
                    difficulty=float(len(data["history"])), group=seed.group, meta=meta)

    def _game_path(self, seed: Task) -> str:
        if not hasattr(self, "_paths"):
            self._paths = {g.key: g.path for g in list_games(self.root, [self.seed_split])}
        key = seed.meta.get("game")
        if key not in self._paths:
            raise InvalidTask("no_seed_game", f"the seed {seed.id!r} names no seed game")
        return self._paths[key]

    def _walkthrough(self, seed: Task) -> list[str]:
        """The expert's commands in the seed's game (its last step's history plus that step's gold)."""
        if not hasattr(self, "_plans"):
            last: dict[str, Task] = {}
            for t in self.seed_tasks():
                if t.meta["step"] == t.meta["num_steps"] - 1:
                    last[t.meta["game"]] = t
            self._plans = {g: [h["action"] for h in t.data["history"]] + [t.data["gold"]] for g, t in last.items()}
        return self._plans.get(seed.meta.get("game"), [])

    # ---- warm start of tiny models --------------------------------------------------------
    def warm_start_examples(self, role: str, n: int, seed: int) -> list[tuple[list[Message], str]]:
        seeds = self.seed_tasks()
        if not seeds:
            return []
        rng = random.Random(seed)
        targets = [t for t in seeds if _is_valid_step(t.data)] if role == "simulator" else seeds
        if not targets:
            return []
        out: list[tuple[list[Message], str]] = []
        for _ in range(n):
            task = rng.choice(seeds)
            if role == "agent":
                out.append((self.agent_prompt(task), f"<think>Next step toward the goal.</think>\n"
                                                     f"<response>{task.data['gold']}</response>"))
            elif role == "simulator" and self.simulator_writes == "actions":
                out.append((self.simulator_prompt(task, None), json.dumps({"actions": self._sample_actions(task, rng)})))
            elif role == "simulator":
                # targets must pass our own validator (some expert steps name objects never shown)
                same = [t for t in targets if t.group == task.group and t.id != task.id] or targets
                out.append((self.simulator_prompt(task, None), json.dumps(rng.choice(same).data)))
            else:
                raise ValueError(f"unknown role {role!r}")
        return out

    def _sample_actions(self, seed: Task, rng: random.Random) -> list[str]:
        """A warm-start target for the "actions" simulator: a prefix of the expert's commands with up to
        two detours ("go to" a receptacle of the room) put in at random points. Expert commands after a
        detour may no longer be admissible; the engine then answers "Nothing happens.", as in play."""
        plan = self._walkthrough(seed)
        actions = plan[: rng.randrange(len(plan))] if plan else []
        places = sorted(mentioned_objects(seed.data["observation"]))
        for _ in range(rng.choice((0, 1, 1, 2)) if places else 0):
            actions.insert(rng.randint(0, len(actions)), f"go to {rng.choice(places)}")
        return actions

    def tokenizer_corpus(self) -> list[str]:
        corpus: list[str] = [SIMULATOR_SYSTEM]
        for task in self.seed_tasks():
            corpus += [m["content"] for m in self.agent_prompt(task)] + [json.dumps(task.data)]
        return corpus


SIMULATOR_SYSTEM = (
    "You write training tasks for an agent in a household text game (ALFWorld). A task is ONE "
    "decision step: the goal, the first observation, the actions taken so far with the game's "
    "answers, optionally the commands the game accepts now, and the single correct next command.\n"
    "Write a variation of the seed step: change objects, receptacles, numbers, the room, the goal "
    "or the point in the episode, but keep it consistent.\n"
    "Objects are named '<name> <number>' (e.g. 'apple 1', 'countertop 2'). Commands: go to X, "
    "take X from Y, move X to Y, open X, close X, use X, examine X, clean X with Y, heat X with Y, "
    "cool X with Y, slice X with Y, look, inventory. Every object in the gold command must appear in "
    "the observation or in the game's answers in the history; the gold command must be in "
    "admissible_commands when you give that list.\n"
    'Output only JSON: {"task": str, "observation": str, "history": [{"action": str, '
    '"observation": str}, ...], "admissible_commands": [str, ...], "gold": str}'
)


SIMULATOR_ACTIONS_SYSTEM = (
    "You write training tasks for an agent in a household text game (ALFWorld). A task is ONE "
    "decision step in a game: the commands the agent has sent so far. The game engine plays them and "
    "works out the state and the correct next command.\n"
    "Write the commands sent so far at a new point of the seed's game: follow the expert plan for a "
    "while, leave it (go to other receptacles, open or examine things), or stop early. Use only objects "
    "of this game, named '<name> <number>' (e.g. 'apple 1', 'countertop 2'). Commands: go to X, take X "
    "from Y, move X to Y, open X, close X, use X, examine X, clean X with Y, heat X with Y, cool X with Y, "
    "slice X with Y, look, inventory.\n"
    'Output only JSON: {"actions": [str, ...]}'
)


def _parse_actions(obj: dict[str, Any]) -> list[str]:
    actions = obj.get("actions")
    if not isinstance(actions, list) or len(actions) > _MAX_HISTORY:
        raise InvalidTask("bad_history", "actions must be a list of at most 60 commands")
    if not all(isinstance(a, str) and parse_command(a) is not None for a in actions):
        raise InvalidTask("bad_history", "every action must be a command in the grammar")
    return [canonical_action(a) for a in actions]


def _extract_json(text: str) -> dict[str, Any]:
    """The first JSON object in the text (after any <think> block). Never evaluates the text."""
    body = strip_tag_blocks(text or "", "think")[:_MAX_TASK_CHARS * 2]
    decoder = json.JSONDecoder()
    start = body.find("{")
    for _ in range(20):  # bounded: a few stray braces before the object are tolerated
        if start < 0:
            break
        try:
            obj, _ = decoder.raw_decode(body, start)
            if isinstance(obj, dict):
                return obj
        except (ValueError, RecursionError):  # JSONDecodeError, a number past 4300 digits, deep nesting
            pass
        start = body.find("{", start + 1)
    raise InvalidTask("unparseable", "no JSON object")


def _is_valid_step(data: dict[str, Any]) -> bool:
    try:
        return validate_generated_step(data) == data
    except InvalidTask:
        return False


def validate_generated_step(obj: dict[str, Any]) -> dict[str, Any]:
    """The step data of a generated task, normalized; InvalidTask(reason) when unusable."""
    if len(json.dumps(obj)) > _MAX_TASK_CHARS:
        raise InvalidTask("too_long")
    task, observation = obj.get("task"), obj.get("observation")
    gold = next((obj[k] for k in ("gold", "action", "gold_action") if k in obj), None)
    if not all(isinstance(v, str) and v.strip() for v in (task, observation, gold)):
        raise InvalidTask("missing_field", "task, observation and gold must be non-empty strings")
    task = task.strip()
    if task.lower().startswith("your task is to:"):
        task = task[len("your task is to:"):].strip()

    history = obj.get("history") or []
    if not isinstance(history, list) or len(history) > _MAX_HISTORY:
        raise InvalidTask("bad_history", "history must be a list of at most 60 steps")
    steps: list[dict[str, str]] = []
    for h in history:
        pair = (h.get("action"), h.get("observation")) if isinstance(h, dict) else tuple(h) if isinstance(h, list) else ()
        if len(pair) != 2 or not all(isinstance(v, str) for v in pair) or parse_command(pair[0]) is None:
            raise InvalidTask("bad_history", f"not an (action, observation) pair in the grammar: {h!r}"[:200])
        steps.append({"action": canonical_action(pair[0]), "observation": pair[1].strip()})

    command = parse_command(gold)
    if command is None or command.verb in NON_GOLD_VERBS:
        raise InvalidTask("bad_action", f"gold {gold!r} is outside the command grammar"[:200])
    seen = mentioned_objects(" ".join([observation] + [s["observation"] for s in steps]))
    missing = [o for o in command.objects if o not in seen]
    if missing:
        raise InvalidTask("unknown_object", f"{missing} not in the observation")
    gold = canonical_action(gold)

    data: dict[str, Any] = {"task": task, "observation": observation.strip(), "history": steps}
    admissible = obj.get("admissible_commands")
    if admissible is not None:
        if (not isinstance(admissible, list) or not admissible or len(admissible) > _MAX_ADMISSIBLE
                or not all(isinstance(c, str) and parse_command(c) for c in admissible)):
            raise InvalidTask("bad_admissible", "admissible_commands must be commands in the grammar")
        admissible = list(dict.fromkeys(normalize_action(c) for c in admissible))
        if gold not in {canonical_action(c) for c in admissible}:
            raise InvalidTask("not_admissible", f"gold {gold!r} is not in admissible_commands")
        data["admissible_commands"] = admissible
    data["gold"] = gold
    return data
