"""Word reversal: a complete environment that lives outside the package (docs/writing-an-environment.md).

    python main.py fit --config configs/quickstart.yaml --config examples/word_reverse.yaml

A task is a word over a small alphabet; the agent writes its letters in reverse order. Difficulty is the
word's length. The simulator writes a new word as JSON, {"word": "..."}; the environment validates it and
computes the answer itself, so a simulator cannot earn anything by writing a wrong gold.

Letters are shown space-separated ("c a f e"): the tiny byte-level BPE tokenizer then gives every letter
a token of its own, where an unspaced word would be merged into pieces whose letters the agent cannot see.

The held-out words are a fixed slice of the whole word space (a checksum of the word, never Python's
salted `hash`), so every rank and every process agrees on it, and no seed, warm-start example or
generated task can be one of them.
"""
from __future__ import annotations

import json
import random
import zlib
from typing import Literal

from genenv_pl.envs.base import ConfigError, Environment, InvalidTask, Message, Task

ALPHABET = "abcdefgh"
_MAX_TEXT = 200  # characters of simulator output worth parsing: a valid task is under 40


class WordReverseEnv(Environment):
    name = "word_reverse"  # keys the tiny tokenizer and warm-start caches: unique among environments
    success_threshold = 1.0  # the reward is 0 or 1: success is the exact answer

    def __init__(
        self,
        min_length: int = 2,
        max_length: int = 6,
        seed_lengths: list[int] | None = None,
        seeds_per_length: int = 8,
        eval_per_length: int = 30,
        warm_start_lengths: list[int] | None = None,
        held_out_every: int = 10,
        reward: Literal["exact", "partial"] = "exact",
        split_seed: int = 0,
    ):
        """
        Args:
            min_length: shortest word; shorter generated words are invalid.
            max_length: longest word; longer generated words are invalid (at most 12).
            seed_lengths: lengths of the seed tasks shown to the simulator (default min_length..3).
            seeds_per_length: seed tasks per seed length.
            eval_per_length: held-out tasks per length min_length..max_length (fewer where the length
                has fewer held-out words).
            warm_start_lengths: lengths the agent's supervised warm start covers (default min_length..4);
                the lengths above are what co-evolution has to teach.
            held_out_every: one word in this many (by checksum) is held out for evaluation.
            reward: the agent's reward. "exact": 1 for the reversed word, else 0 (the paper's kind).
                "partial": the fraction of letters in the right place, so that a word longer than any
                the agent has answered still gives GRPO a signal. Success is the exact answer either way.
            split_seed: seeds the choice of seed and evaluation words.
        """
        if not 1 <= min_length <= max_length <= 12:
            raise ConfigError(f"data.env_args: need 1 <= min_length <= max_length <= 12, got {min_length} and "
                              f"{max_length}")
        if held_out_every < 2:
            raise ConfigError(f"data.env_args.held_out_every: at least 2 (one word in that many is held out), "
                              f"got {held_out_every}")
        if reward not in ("exact", "partial"):
            raise ConfigError(f"data.env_args.reward: 'exact' or 'partial', got {reward!r}")
        self.min_length, self.max_length = min_length, max_length
        self.reward_mode = reward
        self.held_out_every = held_out_every
        self.seed_lengths = seed_lengths or list(range(min_length, min(3, max_length) + 1))
        self.warm_start_lengths = warm_start_lengths or list(range(min_length, min(4, max_length) + 1))
        for key, lengths in (("seed_lengths", self.seed_lengths), ("warm_start_lengths", self.warm_start_lengths)):
            if not all(min_length <= n <= max_length for n in lengths):
                raise ConfigError(f"data.env_args.{key}: lengths within {min_length}..{max_length}, got {lengths}")
        lengths = range(min_length, max_length + 1)
        self._eval = self._sample(random.Random(split_seed + 1), lengths, eval_per_length, held_out=True, prefix="eval")
        self._seeds = self._sample(random.Random(split_seed + 2), self.seed_lengths, seeds_per_length, held_out=False,
                                   prefix="seed")

    # ---- tasks --------------------------------------------------------------------------
    def is_held_out(self, word: str) -> bool:
        return zlib.crc32(word.encode()) % self.held_out_every == 0

    def make_task(self, word: str, id: str) -> Task:
        return Task(id=id, data={"word": word}, difficulty=float(len(word)), group=f"len{len(word)}")

    def _random_word(self, rng: random.Random, length: int, held_out: bool) -> str | None:
        """A word on the given side of the split; None after many misses (one-letter words: 8 in all)."""
        for _ in range(100 * self.held_out_every):  # about held_out_every draws for a held-out word, 1 for others
            word = "".join(rng.choice(ALPHABET) for _ in range(length))
            if self.is_held_out(word) == held_out:
                return word
        return None

    def _sample(self, rng: random.Random, lengths, per_length: int, held_out: bool, prefix: str) -> list[Task]:
        """Up to `per_length` distinct words of each length (short lengths have few words to give)."""
        tasks = []
        for length in lengths:
            words: list[str] = []
            for _ in range(50 * per_length):  # bounded: length 2 has only 64 words, about 7 of them held out
                if len(words) == per_length:
                    break
                word = self._random_word(rng, length, held_out)
                if word is None:
                    break
                if word not in words:
                    words.append(word)
            tasks += [self.make_task(w, f"{prefix}-len{length}-{i}") for i, w in enumerate(words)]
        return tasks

    def seed_tasks(self) -> list[Task]:
        return list(self._seeds)

    def eval_tasks(self) -> list[Task]:
        return list(self._eval)

    def task_key(self, task: Task) -> str:
        return task.data["word"]

    @staticmethod
    def spaced(letters) -> str:
        return " ".join(letters)

    def answer(self, task: Task) -> str:
        return self.spaced(reversed(task.data["word"]))

    # ---- simulator ----------------------------------------------------------------------
    @staticmethod
    def success_bucket(success_rate: float | None) -> int:
        """0..4; an unknown success rate (a seed never rolled out) counts as the middle bucket."""
        return 2 if success_rate is None else min(4, max(0, round(success_rate * 4)))

    def simulator_prompt(self, seed: Task, success_rate: float | None) -> list[Message]:
        # compact for a from-scratch simulator: the seed as the JSON it should write, then the bucket
        return [{"role": "user", "content": f"{json.dumps(seed.data)} p{self.success_bucket(success_rate)}>"}]

    def parse_task(self, text: str, seed: Task) -> Task:
        s = text.strip()
        if not s:
            raise InvalidTask("empty")
        if len(s) > _MAX_TEXT:  # before json.loads: nothing deeply nested or huge is ever parsed
            raise InvalidTask("too_long_text", f"{len(s)} characters")
        try:
            obj = json.loads(s)  # data only: JSON never executes anything
        except ValueError:
            raise InvalidTask("unparseable", s[:40]) from None
        if not isinstance(obj, dict):
            raise InvalidTask("not_object", type(obj).__name__)
        if set(obj) != {"word"}:
            raise InvalidTask("bad_keys", ",".join(sorted(map(str, obj)))[:40])
        word = obj["word"]
        if not isinstance(word, str):
            raise InvalidTask("bad_type", type(word).__name__)
        if not word or not set(word) <= set(ALPHABET):
            raise InvalidTask("bad_letters", word[:40])
        if not self.min_length <= len(word) <= self.max_length:
            raise InvalidTask("bad_length", f"{len(word)} not in {self.min_length}..{self.max_length}")
        if self.is_held_out(word):
            raise InvalidTask("held_out", "an evaluation word")
        return self.make_task(word, id=f"{seed.id}>{word}")

    # ---- agent --------------------------------------------------------------------------
    def agent_prompt(self, task: Task) -> list[Message]:
        return [{"role": "user", "content": f"reverse {self.spaced(task.data['word'])} ="}]

    def reward(self, task: Task, response: str) -> float:
        """"exact": 1.0 for the word's letters in reverse order (spacing aside), else 0.0. "partial": the
        fraction of letters in their place, over the longer of answer and response. Never raises."""
        gold, got = list(reversed(task.data["word"])), response.split()
        if self.reward_mode == "exact" or not got:
            return float(got == gold)
        return sum(g == r for g, r in zip(gold, got)) / max(len(gold), len(got))

    def score(self, task: Task, response: str) -> dict[str, float]:
        # accuracy is the exact answer whatever the training reward, so runs with either reward compare
        letters = response.split()
        well_formed = bool(letters) and all(len(x) == 1 and x in ALPHABET for x in letters)
        return {"accuracy": float(letters == list(reversed(task.data["word"]))), "format_error": float(not well_formed)}

    # ---- warm start (from-scratch models) ----------------------------------------------
    def warm_start_examples(self, role: str, n: int, seed: int) -> list[tuple[list[Message], str]]:
        """Agent: words of `warm_start_lengths` and their reversal. Simulator: the output format only,
        a word of a length drawn uniformly whatever the bucket, so difficulty alignment is learned."""
        if role not in ("agent", "simulator"):
            raise ValueError(f"unknown role {role!r}")
        rng = random.Random(seed)
        out = []
        for i in range(n):
            if role == "agent":
                word = self._random_word(rng, rng.choice(self.warm_start_lengths), False)
                if word is not None:
                    task = self.make_task(word, f"ws{i}")
                    out.append((self.agent_prompt(task), " " + self.answer(task)))
                continue
            seed_word = self._random_word(rng, rng.randint(self.min_length, self.max_length), False)
            bucket = rng.randint(0, 4)
            word = self._random_word(rng, rng.randint(self.min_length, self.max_length), False)
            if seed_word is not None and word is not None:
                prompt = self.simulator_prompt(self.make_task(seed_word, f"ws{i}"), bucket / 4)
                out.append((prompt, " " + json.dumps({"word": word})))
        return out

    def tokenizer_corpus(self) -> list[str]:
        # prompts and targets exactly as the models will see them, from fixed seeds: the same corpus (and so
        # the same cached tokenizer) for every run with these lengths
        pairs = self.warm_start_examples("agent", 300, 321) + self.warm_start_examples("simulator", 300, 123)
        return [m[0]["content"] + target for m, target in pairs]
