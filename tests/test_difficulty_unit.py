"""Difficulty per seed batch (the paper) or per generated task (`data.coevo.difficulty_unit`), and
the probe of the simulator's learned conditioning on the success signal. (A real fit with per-task
scoring and the probe: tests/test_ablations.py.)"""
from __future__ import annotations

import math
import random

import pytest
import torch

from callbacks.alpha_curriculum import AlphaCurriculumCallback
from callbacks.conditioning import probe_conditioning
from genenv_pl.backends.base import Generation
from genenv_pl.coevo import SeedBatch
from genenv_pl.epoch import build_steps
from genenv_pl.epoch import simulator_samples as _simulator_samples
from genenv_pl.envs import make_env
from genenv_pl.envs.base import Task

ENV = make_env("arithmetic", seeds_per_level=2, eval_per_level=10)


def _gen(text: str) -> Generation:
    return Generation(prompt_ids=[1], response_ids=[2], text=text, logprobs=[-1.0], finished=True)


def _batch(task_successes: list[list[bool]]) -> SeedBatch:
    """A seed batch of len(task_successes) valid tasks with the given rollout successes each."""
    seed = ENV.seed_tasks()[0]
    b = SeedBatch(seed=seed, prompt="p", generations=[])
    for i, succ in enumerate(task_successes):
        b.tasks.append(Task(id=f"t{i}", data={"i": i}))
        b.task_generations.append(_gen(f"g{i}"))
        b.successes.extend(succ)
    b.task_p_hat = [sum(s) / len(s) for s in task_successes]
    b.p_hat = sum(b.successes) / len(b.successes)
    return b


# One trivial and one impossible variation (batch p_hat 0.5), and a batch of two tasks near alpha.
BIMODAL = [[True] * 4, [False] * 4]
NEAR = [[True, True, False, False], [True, False, False, False]]


def test_per_task_scores_on_a_hand_made_batch():
    cb = AlphaCurriculumCallback(alpha=0.5, beta=2.0, filtering_k=0.1)
    bimodal, near = _batch(BIMODAL), _batch(NEAR)
    cb.score([bimodal, near])
    # per batch: p_hat over all K_valid * G rollouts
    assert bimodal.p_hat == 0.5 and bimodal.r_env == pytest.approx(1.0) and bimodal.in_band
    assert near.p_hat == 0.375 and near.r_env == pytest.approx(math.exp(-2 * 0.125**2)) and not near.in_band
    # per task: each task's own G rollouts
    assert bimodal.task_p_hat == [1.0, 0.0]
    assert bimodal.task_r_env == pytest.approx([math.exp(-0.5), math.exp(-0.5)]) and bimodal.task_in_band == [False, False]
    assert near.task_p_hat == [0.5, 0.25]
    assert near.task_r_env == pytest.approx([1.0, math.exp(-2 * 0.0625)]) and near.task_in_band == [True, False]


def test_the_unit_decides_which_generations_train_the_simulator():
    cb = AlphaCurriculumCallback(alpha=0.5, beta=2.0, filtering_k=0.1)
    bimodal, near = _batch(BIMODAL), _batch(NEAR)
    cb.score([bimodal, near])
    per_batch = _simulator_samples([bimodal, near], "seed_batch")
    assert [s.generation.text for s in per_batch] == ["g0", "g1"]  # the whole bimodal batch, with its R_env
    assert [(s.p_hat, s.r_env) for s in per_batch] == [(0.5, pytest.approx(1.0))] * 2
    per_task = _simulator_samples([bimodal, near], "task")
    assert [s.generation.text for s in per_task] == ["g0"] and per_task[0].batch is near
    assert (per_task[0].p_hat, per_task[0].r_env) == (0.5, pytest.approx(1.0))


def test_a_task_without_rollouts_is_not_scored():
    b = _batch(NEAR)
    b.task_p_hat[1] = None  # e.g. its prompt was over max_seq_len
    AlphaCurriculumCallback(filtering_k=0.5).score([b])
    assert b.task_r_env[1] is None and b.task_in_band == [True, False]


class _RuleSimulator:
    """A hand-made simulator with a known conditioning: it writes a task `shift` levels from the seed per
    success bucket above the middle (bucket 4: +2 * shift), plus one unparseable output per prompt."""

    def __init__(self, shift: int):
        self.shift = shift

    def __call__(self, messages):
        outs = []
        for m in messages:
            content = m[0]["content"]
            bucket = int(content.rsplit(";p", 1)[1].rstrip(":"))
            seed_level = max(len(str(int(x[::-1]))) for x in content.split("=")[0].split("+"))
            level = seed_level + self.shift * (bucket - 2)
            a = "7" * level  # 77..7 + 1: level digits, never a held-out copy (eval operands are random)
            outs.append([a[::-1].ljust(6, "0") + "+100000", "not a task"])
        return outs


@pytest.mark.parametrize("shift, slope", [(0, 0.0), (1, 1.0)])
def test_conditioning_probe_measures_a_known_slope(shift, slope):
    env = make_env("arithmetic", eval_per_level=10)
    seeds = [t for t in env.seed_tasks() if t.difficulty == 3][:4]  # level 3: 3 +- 2 stays inside 1..6
    m = probe_conditioning(env, _RuleSimulator(shift), seeds, [0.0, 0.25, 0.5, 0.75, 1.0])
    assert m["sim/conditioning_slope"] == pytest.approx(slope)
    assert [m[f"sim/delta_level_bucket{b}"] for b in range(5)] == pytest.approx([shift * (b - 2) for b in range(5)])
    assert m["sim/probe_valid_frac"] == pytest.approx(0.5)


@pytest.mark.parametrize("eps", [1e-6, 1.0])
def test_grpo_advantages_use_the_configured_eps(eps):
    # GRPOConfig.adv_eps reaches the advantages the epoch's steps carry (it used to be ignored).
    from genenv_pl.coevo import Group
    from genenv_pl.config import CoevoConfig, GRPOConfig
    from genenv_pl.datamodule import GenEnvDataModule
    from genenv_pl.module import GenEnvModule

    dm = GenEnvDataModule(env_args={"seeds_per_level": 2, "eval_per_level": 10},
                          coevo=CoevoConfig(group_size=4, drop_zero_std_groups=False))
    rewards = [1.0, 0.0, 0.0, 1.0]
    rollouts = [Generation(prompt_ids=[5, 6], response_ids=[7, 8], text="x", logprobs=[-1.0, -1.0], finished=True)
                for _ in rewards]
    group = Group(ENV.seed_tasks()[0], "base", None, rollouts, rewards, [r == 1.0 for r in rewards])
    steps, _, _ = build_steps(dm.cfg, [group], [], (0, 0), GenEnvModule(grpo=GRPOConfig(adv_eps=eps)).advantages,
                              random.Random(0))
    std = torch.tensor(rewards).std(unbiased=True)
    expected = (torch.tensor(rewards) - 0.5) / (std + eps)
    assert torch.allclose(steps[0]["agent"]["advantages"], expected)


@pytest.mark.parametrize("iterations", [1, 3])
def test_grpo_num_iterations_repeats_each_agent_batch(iterations):
    # grpo.num_iterations: each chunk of agent_batch_size groups becomes that many consecutive steps on the
    # same rollouts (same rows, advantages and stored log-probs), in the chunks' order; simulator chunks
    # are not repeated.
    from genenv_pl.coevo import Group
    from genenv_pl.config import CoevoConfig, GRPOConfig
    from genenv_pl.datamodule import GenEnvDataModule
    from genenv_pl.module import GenEnvModule

    dm = GenEnvDataModule(env_args={"seeds_per_level": 2, "eval_per_level": 10},
                          coevo=CoevoConfig(group_size=2, agent_batch_size=1, drop_zero_std_groups=True))
    groups = []
    for k, rewards in enumerate([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]):  # the last has no spread: dropped
        rollouts = [Generation(prompt_ids=[5, 6], response_ids=[7 + k, 8], text="x", logprobs=[-1.0 - k, -1.0],
                               finished=True) for _ in rewards]
        groups.append(Group(ENV.seed_tasks()[k], "base", None, rollouts, rewards, [r == 1.0 for r in rewards]))
    module = GenEnvModule(grpo=GRPOConfig(num_iterations=iterations))
    steps, _, zero = build_steps(dm.cfg, groups, [], (0, 0), module.advantages, random.Random(0),
                                 iterations=module.grpo.num_iterations)
    assert zero / len(groups) == pytest.approx(1 / 3)
    assert len(steps) == 2 * iterations
    firsts = [steps[i]["agent"]["input_ids"][0, 2].item() for i in range(len(steps))]
    assert firsts == [firsts[0]] * iterations + [firsts[-1]] * iterations and firsts[0] != firsts[-1]
    for i in range(0, len(steps), iterations):
        for j in range(i + 1, i + iterations):
            for key in ("input_ids", "advantages", "old_logp"):
                assert torch.equal(steps[i]["agent"][key], steps[j]["agent"][key])
    assert all(s["sim"] is None for s in steps)


def test_grpo_num_iterations_below_one_names_the_key():
    from genenv_pl.config import GRPOConfig
    from genenv_pl.module import GenEnvModule

    with pytest.raises(ValueError, match="model.grpo.num_iterations"):
        GenEnvModule(grpo=GRPOConfig(num_iterations=0))
