"""The stages of one epoch (genenv_pl/epoch.py) and the rank seam's merge (genenv_pl/seam.py) on hand-made
data. (The whole pipeline in real fits: tests/test_fit.py, test_curriculum_fit.py, test_epoch_fit.py.)"""
from __future__ import annotations

import random

import pytest
import torch

from callbacks.alpha_curriculum import AlphaCurriculumCallback
from genenv_pl.backends.base import Generation
from genenv_pl.coevo import Group, SeedBatch
from genenv_pl.config import CoevoConfig
from genenv_pl.epoch import EpochState, build_steps, env_entries, plan, score, simulator_samples
from genenv_pl.losses import group_advantages
from genenv_pl.pools import Pools, env_entry, train_entry
from genenv_pl.seam import Part, RankSeam, merge
from test_difficulty_unit import ENV, _batch, _gen


@pytest.mark.parametrize("unit", ["seed_batch", "task"])
def test_only_variations_the_agent_rolled_out_train_the_simulator(unit):
    """A variation that was never rolled out (its prompt past max_seq_len, or cut by the task budget) has no
    p_hat of its own; under "seed_batch" it used to train the simulator with its batch's R_env, which
    rewards writing tasks too long to roll out."""
    b = _batch([[True, False, True, False], [True, False], [False, True]])
    b.task_p_hat[1] = None
    AlphaCurriculumCallback(filtering_k=0.5).score([b])
    samples = simulator_samples([b], unit)
    assert [s.generation.text for s in samples] == ["g0", "g2"]
    assert all(s.batch is b for s in samples)


def _group(task, rewards, seed_index=None, source="fresh"):
    rollouts = [Generation([5, 6], [7, 8], "x", [-1.0, -1.0], True) for _ in rewards]
    return Group(task, source, seed_index, rollouts, rewards, [r == 1.0 for r in rewards])


def test_score_sets_p_hat_per_batch_and_task_and_the_ema_of_each_seed():
    seed = ENV.seed_tasks()[0]
    b = SeedBatch(seed=seed, prompt="p", generations=[])
    for i in range(3):
        b.tasks.append(ENV.seed_tasks()[i + 1])
        b.task_generations.append(_gen(f"g{i}"))
    groups = [_group(b.tasks[0], [1.0, 1.0, 0.0, 0.0], 0), _group(b.tasks[2], [1.0, 0.0, 0.0, 0.0], 0),
              _group(ENV.seed_tasks()[5], [1.0] * 4, None, "base")]  # not a variation: scores no batch
    rates = score([b], groups, {seed.id: 1.0}, 0.5, AlphaCurriculumCallback(filtering_k=0.2))
    assert b.successes == [True, True, False, False, True, False, False, False]
    assert b.p_hat == 3 / 8 and b.task_p_hat == [0.5, None, 0.25]
    assert rates == {seed.id: 0.5 * 1.0 + 0.5 * 3 / 8}
    assert b.in_band and b.task_in_band == [True, False, False]  # |0.375 - 0.5| <= 0.2; the unscored task is not
    far = _batch([[True] * 4, [True] * 4])  # p_hat 1: out of any band around 0.5 but the no-band ablation's
    AlphaCurriculumCallback(filtering_k=0.1).score([far], band=False)
    assert far.in_band and far.task_in_band == [True, True]


def test_plan_draws_the_same_plan_from_the_same_rng():
    cfg = CoevoConfig(seeds_per_epoch=3, base_tasks_per_epoch=2, replay_tasks_per_epoch=2)
    pools = Pools()
    for t in ENV.seed_tasks()[:4]:
        pools.train.append(train_entry(0, t, [1.0], None))
    pools.env.append(env_entry(0, "s", "prompt", "text", 0.5, 1.0))

    def drawn(rng_seed: int):
        p = plan(cfg, ENV.seed_tasks(), EpochState(random.Random(rng_seed), pools, {}, None, 0), None, 3)
        return [t.id for t in p.seeds], [(t.id, s) for t, s in p.tasks], len(p.env_replay)

    seeds, tasks, replay = drawn(1)
    assert drawn(1) == (seeds, tasks, replay) and len(seeds) == 3 and replay == 3
    assert [s for _, s in tasks] == ["base", "base", "replay", "replay"]
    static = plan(CoevoConfig(variant="genenv-random"), ENV.seed_tasks(), EpochState(random.Random(1), pools, {}, None, 0),
                  None, 3)
    assert static.env_replay == []  # a simulator that does not learn replays nothing


def test_build_steps_pairs_each_simulator_chunk_with_its_d_env_entries():
    b = _batch([[True, False]] * 5)
    AlphaCurriculumCallback(filtering_k=0.5).score([b])
    samples = simulator_samples([b], "seed_batch")
    groups = [_group(ENV.seed_tasks()[k], [1.0, 0.0]) for k in range(3)]
    cfg = CoevoConfig(agent_batch_size=1, sim_batch_size=2)
    steps, chunks, zero = build_steps(cfg, groups, samples, (0, 0), group_advantages, random.Random(0))
    assert len(steps) == 3 and zero == 0 and all(s["agent"] is not None for s in steps)
    assert [len(c) for c in chunks] == [2, 2, 1]
    entries = env_entries(4, chunks)
    for step, chunk, es in zip(steps, chunks, entries):
        assert step["sim"]["r_env"].tolist() == pytest.approx([s.r_env for s in chunk])
        assert [e["text"] for e in es] == [s.generation.text for s in chunk] and {e["epoch"] for e in es} == {4}
    assert sorted(e["text"] for es in entries for e in es) == [f"g{i}" for i in range(5)]


def test_merge_puts_the_ranks_parts_in_the_one_rank_order():
    """Rank 0 wrote for seed positions 0 and 2, rank 1 for position 1 (round robin): the whole epoch has the
    batches by position and the groups by their place in the work list, each fresh group's seed index
    pointing at its batch in the joined list."""
    b0, b2, b1 = _batch([[True, False]]), _batch([[True, True]]), _batch([[False, False]])
    b0.position, b2.position, b1.position = 0, 2, 1
    g0, g2 = _group(b0.tasks[0], [1.0, 0.0], 0), _group(b2.tasks[0], [1.0, 1.0], 1)
    g1, base = _group(b1.tasks[0], [0.0, 0.0], 0), _group(b1.tasks[0], [1.0], None, "base")
    g0.order, g2.order, g1.order, base.order = 0, 2, 1, 3
    r0 = Part({"a": 0.5}, [b0, b2], [g0, g2], 1.0, 1)
    r1 = Part({"b": 0.0}, [b1], [g1, base], 3.0, 0)
    whole = merge([r0, r1])
    assert whole.rates == {"a": 0.5, "b": 0.0}
    assert whole.batches == [b0, b1, b2]
    assert [g.order for g in whole.groups] == [0, 1, 2, 3] and [g.seed_index for g in whole.groups] == [0, 1, 2, None]
    assert [whole.batches[g.seed_index] for g in whole.groups[:3]] == [b0, b1, b2]
    assert (whole.seconds, whole.overlong) == (3.0, 1)


def test_the_task_budget_takes_the_first_tasks_of_the_whole_work_list():
    """One process: fresh tasks by seed position, then the plan's other tasks, cut at the budget."""
    seam = RankSeam(None)
    b0, b1 = _batch([[True], [True]]), _batch([[True]])
    b0.position, b1.position = 0, 1
    others = [(t, "base") for t in ENV.seed_tasks()[:2]]
    work = seam.work([b0, b1], {0: 2, 1: 1}, others, None)
    assert [(w[1], w[2], w[3]) for w in work] == [("fresh", 0, 0), ("fresh", 0, 1), ("fresh", 1, 2), ("base", None, 3),
                                                  ("base", None, 4)]
    assert [w[3] for w in seam.work([b0, b1], {0: 2, 1: 1}, others, 4)] == [0, 1, 2, 3]
