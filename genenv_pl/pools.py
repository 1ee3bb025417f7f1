"""The accumulating data pools of GenEnv (section 2, step 9), saved in every checkpoint.

D_train holds the valid generated tasks with the agent's rollouts and rewards (replayed to the agent
with `coevo.replay_tasks_per_epoch`); D_env holds the simulator samples that entered its reward-weighted
updates, with the p_hat and R_env that weighted them (replayed into the simulator's update with
`rwr.replay_per_epoch`): only those of steps that were kept, not of a step undone by the KL cap or
skipped as non-finite (`GenEnvDataModule.step_done`)."""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from genenv_pl.envs.base import Task


@dataclass
class Pools:
    train: list[dict[str, Any]] = field(default_factory=list)  # D_train
    env: list[dict[str, Any]] = field(default_factory=list)  # D_env

    def sample_train_tasks(self, rng: random.Random, n: int) -> list[Task]:
        if not self.train or n <= 0:
            return []
        return [Task.from_dict(self.train[rng.randrange(len(self.train))]["task"]) for _ in range(n)]

    def sample_env(self, rng: random.Random, n: int) -> list[dict[str, Any]]:
        if not self.env or n <= 0:
            return []
        return [self.env[rng.randrange(len(self.env))] for _ in range(n)]

    def state_dict(self) -> dict[str, Any]:
        return {"train": self.train, "env": self.env}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.train = list(state["train"])
        self.env = list(state["env"])


def train_entry(epoch: int, task: Task, rewards: list[float], rollouts: list[str] | None) -> dict[str, Any]:
    """One D_train entry: a task the agent rolled out, with its rewards (and rollout texts)."""
    return {"epoch": epoch, "task": task.to_dict(), "rewards": rewards, "rollouts": rollouts}


def env_entry(epoch: int, seed_id: str, prompt: str, text: str, p_hat: float, r_env: float) -> dict[str, Any]:
    """One D_env entry: a simulator sample with the difficulty score that weighted it."""
    return {"epoch": epoch, "seed_id": seed_id, "prompt": prompt, "text": text, "p_hat": p_hat, "r_env": r_env}
