"""The embedded default environment: multi-digit addition with a difficulty ladder.

Level d means two d-digit operands. Numbers are written lowest digit first and zero-padded to a
fixed width (max_level digits, the answer max_level + 1): each answer digit then sits at a fixed
distance from the two digits and the carry it depends on, which makes the task learnable by a
tiny transformer in about a minute on a CPU.

The simulator writes only the expression; the environment validates it and computes the
answer itself, so a simulator cannot earn reward by writing wrong answers.

Two choices decide whether the curriculum is something GenEnv has to earn here:
- `sim_warm_start="format"` (default) teaches the from-scratch simulator only the output format:
  variations at levels drawn uniformly, whatever success rate its prompt shows. Like the paper's
  instruct-model simulator, it starts out knowing nothing about the agent, so difficulty alignment has
  to come from reward-weighted regression. `"curriculum"` also teaches the rule itself (harder when
  the agent succeeds, easier when it fails): a never-trained simulator is then already aligned, which
  is useful only as a reference point.
- `reward="exact"` (default) is binary, as the paper's tool-call rewards are and as the argument
  for alpha = 0.5 assumes (the policy-gradient variance of a binary reward is proportional to
  p (1 - p)). `"partial"` gives credit per answer digit: tasks far above the agent's exact-match
  frontier then still carry GRPO signal, which blurs what the alpha band selects.

The simulator's prompt shows the seed's success as a bucket token (`p0`..`p4`, round(4 x rate)) and no
instruction: it is `sim_prompt="stats"` (the only value here). The other environments' "rule" prompt
tells an instruct model "harder above 60%, easier below 40%"; a simulator trained from scratch reads no
instructions, so here the rule can only be taught, which is `sim_warm_start="curriculum"`.
"""
from __future__ import annotations

import random
import re
from typing import Literal

from genenv_pl.envs.base import ConfigError, Environment, InvalidTask, Message, Task
from genenv_pl.envs.prompting import check_sim_prompt

_EXPR = re.compile(r"([0-9]+)\+([0-9]+)")  # ASCII digits only: \d also matches other scripts


def _rev(n: int, width: int) -> str:
    return str(n).zfill(width)[::-1]


def _unrev(s: str) -> int:
    return int(s[::-1])


class ArithmeticEnv(Environment):
    name = "arithmetic"

    def __init__(
        self,
        max_level: int = 6,
        seed_levels: list[int] | None = None,
        seeds_per_level: int = 8,
        eval_per_level: int = 100,
        warm_start_levels: list[int] | None = None,
        sim_warm_start: Literal["format", "curriculum"] = "format",
        warm_start_noise: float = 0.3,
        reward: Literal["exact", "partial"] = "exact",
        split_seed: int = 0,
        sim_prompt: Literal["stats"] = "stats",
    ):
        """
        Args:
            max_level: largest operand length; longer generated expressions are invalid.
            seed_levels: levels of the seed tasks shown to the simulator (default 1..max_level).
            seeds_per_level: seed tasks per seed level.
            eval_per_level: held-out tasks per level 1..max_level (fixed, never trained on).
            warm_start_levels: levels the agent's supervised warm start covers (default 1..3);
                the levels above are what co-evolution has to teach.
            sim_warm_start: what the simulator's supervised warm start teaches. "format": valid
                variations at a level drawn uniformly from 1..max_level, independent of the success
                rate in the prompt (the simulator must learn difficulty alignment). "curriculum":
                a level shifted by the success bucket (harder after success, easier after failure).
            warm_start_noise: "curriculum" only: fraction of targets at a random level instead of
                the success-driven shift, so the simulator starts out able to write any level.
            reward: the agent's reward. "exact": 1 for the exact answer, else 0 (the paper's kind).
                "partial": the fraction of answer digits right, position by position.
            split_seed: seeds the generation of seed and evaluation tasks.
            sim_prompt: what the simulator's prompt says about the agent's success: "stats" only,
                the success bucket with no instruction (see the module docstring); "rule" is refused.
        """
        if sim_prompt == "rule":
            raise ConfigError("data.env_args.sim_prompt: arithmetic's simulator is trained from scratch and reads no "
                              "instructions, so its prompt shows only the success bucket ('stats'); the rule is "
                              "what data.env_args.sim_warm_start: curriculum teaches")
        self.sim_prompt = check_sim_prompt(sim_prompt, allowed=("stats",))
        self.max_level = max_level
        self.seed_levels = seed_levels or list(range(1, max_level + 1))
        self.seeds_per_level = seeds_per_level
        self.eval_per_level = eval_per_level
        self.warm_start_levels = warm_start_levels or [1, 2, 3]
        if sim_warm_start not in ("format", "curriculum"):
            raise ValueError(f"sim_warm_start must be 'format' or 'curriculum', got {sim_warm_start!r}")
        if reward not in ("exact", "partial"):
            raise ValueError(f"reward must be 'exact' or 'partial', got {reward!r}")
        self.sim_warm_start = sim_warm_start
        self.warm_start_noise = warm_start_noise
        self.reward_mode = reward
        self.split_seed = split_seed
        self._eval = self._make_tasks("eval", range(1, max_level + 1), eval_per_level, split_seed + 1)
        eval_keys = {self.task_key(t) for t in self._eval}
        # Seeds never coincide with held-out items.
        self._seeds = [t for t in self._make_tasks("seed", self.seed_levels, seeds_per_level, split_seed + 2)
                       if self.task_key(t) not in eval_keys]
        self._eval_keys = eval_keys

    # ---- tasks --------------------------------------------------------------------------
    def make_task(self, a: int, b: int, level: int, id: str) -> Task:
        return Task(id=id, data={"a": a, "b": b, "level": level}, difficulty=float(level), group=f"level{level}")

    def _random_task(self, rng: random.Random, level: int, id: str) -> Task:
        lo, hi = 10 ** (level - 1), 10**level - 1
        return self.make_task(rng.randint(lo, hi), rng.randint(lo, hi), level, id)

    def _make_tasks(self, prefix: str, levels, per_level: int, seed: int) -> list[Task]:
        rng = random.Random(seed)
        tasks, seen = [], set()
        for level in levels:
            n = 0
            while n < per_level:
                t = self._random_task(rng, level, f"{prefix}-L{level}-{n}")
                if self.task_key(t) in seen and level > 1:
                    continue
                seen.add(self.task_key(t))
                tasks.append(t)
                n += 1
        return tasks

    def seed_tasks(self) -> list[Task]:
        return list(self._seeds)

    def eval_tasks(self) -> list[Task]:
        return list(self._eval)

    def task_key(self, task: Task) -> str:
        return f"{task.data['level']}:{task.data['a']}+{task.data['b']}"

    def expression(self, task: Task) -> str:
        w = self.max_level
        return f"{_rev(task.data['a'], w)}+{_rev(task.data['b'], w)}"

    def answer(self, task: Task) -> str:
        return _rev(task.data["a"] + task.data["b"], self.max_level + 1)

    # ---- simulator ----------------------------------------------------------------------
    @staticmethod
    def success_bucket(success_rate: float | None) -> int:
        """0..4; unknown success counts as the middle bucket."""
        return 2 if success_rate is None else min(4, max(0, round(success_rate * 4)))

    def simulator_prompt(self, seed: Task, success_rate: float | None) -> list[Message]:
        b = self.success_bucket(success_rate)
        return [{"role": "user", "content": f"{self.expression(seed)}={self.answer(seed)};p{b}:"}]

    def parse_task(self, text: str, seed: Task) -> Task:
        s = text.strip()
        if not s:
            raise InvalidTask("empty")
        m = _EXPR.fullmatch(s)
        if m is None:
            raise InvalidTask("unparseable", s[:40])
        ra, rb = m.groups()
        if max(len(ra), len(rb)) > self.max_level:  # also guards against absurdly long numbers
            raise InvalidTask("too_many_digits", f"{max(len(ra), len(rb))} > {self.max_level}")
        a, b = _unrev(ra), _unrev(rb)
        level = max(len(str(a)), len(str(b)))  # significant digits of the longer operand
        task = self.make_task(a, b, level, id=f"{seed.id}>{a}+{b}")
        if self.task_key(task) in self._eval_keys:
            raise InvalidTask("held_out", "copies an evaluation task")
        return task

    # ---- agent --------------------------------------------------------------------------
    def agent_prompt(self, task: Task) -> list[Message]:
        return [{"role": "user", "content": f"{self.expression(task)}="}]

    def reward(self, task: Task, response: str) -> float:
        """"exact": 1.0 for the exact answer, else 0.0. "partial": the fraction of answer digits
        right, position by position (success = all of them)."""
        gold, got = self.answer(task), response.strip()
        if self.reward_mode == "exact":
            return float(got == gold)
        if not got:
            return 0.0
        hits = sum(g == r for g, r in zip(gold, got))
        return hits / max(len(gold), len(got))

    def score(self, task: Task, response: str) -> dict[str, float]:
        got = response.strip()
        return {"accuracy": float(got == self.answer(task)), "format_error": float(not got.isdigit())}

    # ---- warm start (from-scratch models) ----------------------------------------------
    def warm_start_examples(self, role: str, n: int, seed: int) -> list[tuple[list[Message], str]]:
        return self._warm_start_examples(role, n, seed, self.sim_warm_start, self.warm_start_noise)

    def _warm_start_examples(self, role: str, n: int, seed: int, sim_mode: str,
                             noise: float) -> list[tuple[list[Message], str]]:
        rng = random.Random(seed)
        out = []
        for i in range(n):
            if role == "agent":
                t = self._random_task(rng, rng.choice(self.warm_start_levels), f"ws{i}")
                if self.task_key(t) in self._eval_keys:
                    continue
                out.append((self.agent_prompt(t), self.answer(t)))
            elif role == "simulator":
                seed_task = self._random_task(rng, rng.randint(1, self.max_level), f"ws{i}")
                bucket = rng.randint(0, 4)
                if sim_mode == "format" or rng.random() < noise:
                    level = rng.randint(1, self.max_level)
                else:  # agent succeeds -> harder; fails -> easier
                    shift = {0: -2, 1: -1, 2: 0, 3: 1, 4: 2}[bucket]
                    level = min(self.max_level, max(1, seed_task.data["level"] + shift + rng.choice([0, 0, -1, 1])))
                target = self._random_task(rng, level, f"ws{i}t")
                if self.task_key(target) in self._eval_keys:
                    continue
                out.append((self.simulator_prompt(seed_task, bucket / 4), self.expression(target)))
            else:
                raise ValueError(f"unknown role {role!r}")
        return out

    def tokenizer_corpus(self) -> list[str]:
        # Fixed, whatever the warm-start options: every variant shares one tokenizer (and so one agent).
        # The BPE merges decide whether digits stay aligned (a corpus rich in zero padding merges "000"
        # runs, and the agent's warm start then fails), so this is the corpus the recipe was tuned on.
        pairs = (self._warm_start_examples("simulator", 300, 123, "curriculum", 0.3)
                 + self._warm_start_examples("agent", 300, 321, "curriculum", 0.3))
        return [m[0]["content"] + target for m, target in pairs]
