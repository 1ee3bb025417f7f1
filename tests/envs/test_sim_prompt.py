"""`data.env_args.sim_prompt`: what each simulator prompt says about the agent's success.

"rule" must stay byte-identical to the prompts written before the option existed: stored results and
cached warm starts (keyed on the warm-start examples, prompts included) depend on them, and the CPU
study recipes (configs/cpu/bfcl.yaml, configs/cpu/alfworld.yaml) set it. "stats" is the default. The literal sentences below are those prompts' success sentences; the digests are whole prompts
captured before the change for environments that need no benchmark data to write one.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from genenv_pl.envs import ConfigError, make_env
from genenv_pl.envs.alfworld import ALFWorldEnv
from genenv_pl.envs.api_bank import APIBankEnv
from genenv_pl.envs.arithmetic import ArithmeticEnv
from genenv_pl.envs.bamboogle import BamboogleEnv
from genenv_pl.envs.base import Task
from genenv_pl.envs.bfcl import BFCLEnv
from genenv_pl.envs.prompting import UNKNOWN_STATS, success_guide
from genenv_pl.envs.toolcall import difficulty_hint
from genenv_pl.envs.travelplanner import TravelPlannerEnv

RATES = (None, 0.2, 0.5, 0.8)

ALF_SEED = Task(id="alf-seed", data={"task": "put a mug in the sink", "observation": "You are in the kitchen.",
                                     "history": [{"action": "go to countertop 1", "observation": "You see a mug 1."}],
                                     "admissible": ["take mug 1 from countertop 1"],
                                     "gold": "take mug 1 from countertop 1"},
                group="pick", meta={"game": "g1", "task_type": "pick"})

TOOLCALL_RULE = {
    None: "The agent's success rate on this seed is unknown: keep a similar difficulty.",
    0.2: "The agent solved 20% of recent variations of this seed: make the new task easier (e.g. fewer arguments, "
         "values stated explicitly, fewer functions).",
    0.5: "The agent solved 50% of recent variations of this seed: keep a similar difficulty.",
    0.8: "The agent solved 80% of recent variations of this seed: make the new task harder (e.g. more arguments, "
         "values that need a small inference or conversion, distractor functions).",
}
TOOLCALL_STAT = "The agent solved {rate} of recent variations of this seed."

# env id -> (benchmark folder, the rule sentences before sim_prompt existed, the stats sentence)
CASES = {
    "alfworld": ("alfworld", {
        None: "The agent's success rate on this seed is unknown: keep a similar difficulty.",
        0.2: "The agent solves variations of this seed only 20% of the time: make it easier (fewer objects, a shorter "
             "history, an obvious next step).",
        0.5: "The agent solves variations of this seed 50% of the time: keep the difficulty.",
        0.8: "The agent solves variations of this seed 80% of the time: make it harder (more distractor objects and "
             "receptacles, a longer history, a less obvious next step).",
    }, "The agent solves variations of this seed {rate} of the time."),
    "alfworld-actions": ("alfworld", {
        None: "The agent's success rate on this game is unknown: keep a similar difficulty.",
        0.2: "The agent solves steps of this game only 20% of the time: make it easier (an earlier point, fewer "
             "commands off the plan).",
        0.5: "The agent solves steps of this game 50% of the time: keep the difficulty.",
        0.8: "The agent solves steps of this game 80% of the time: make it harder (a later point, more commands off "
             "the plan).",
    }, "The agent solves steps of this game {rate} of the time."),
    "bamboogle": ("bamboogle", {
        None: "Keep the difficulty similar to the example.",
        0.2: "The agent answers only 20% of such questions: make the new one easier (well-known entities, a direct "
             "bridge fact).",
        0.5: "The agent answers 50% of such questions: keep a similar difficulty.",
        0.8: "The agent answers 80% of such questions: make the new one harder (less famous entities, a less obvious "
             "bridge fact).",
    }, "The agent answers {rate} of such questions."),
    "travelplanner": ("travelplanner", {
        None: "Keep the difficulty similar.",
        0.2: "The agent satisfies only 20% of such queries: make it easier (a looser budget, fewer travellers or "
             "constraints).",
        0.5: "The agent satisfies 50% of such queries: keep a similar difficulty.",
        0.8: "The agent satisfies 80% of such queries: make it harder (a tighter but feasible budget, more travellers, "
             "more local constraints).",
    }, "The agent satisfies {rate} of such queries."),
    "bfcl": ("bfcl", TOOLCALL_RULE, TOOLCALL_STAT),
    "bfcl-request": ("bfcl", TOOLCALL_RULE, TOOLCALL_STAT),
    "api_bank": ("api-bank", TOOLCALL_RULE, TOOLCALL_STAT),
}

# sha256 of json.dumps(simulator_prompt(ALF_SEED, rate)) for the default env, captured before the change
ALF_DIGESTS = {
    "alfworld": {None: "df14b8d0d18090bc7070904073b87027a5b03bbeb5c86c079b57a72919819c4c",
                 0.2: "d0b2bb041794dbd922872e3e99f0a95cc9526ed81c9c908317f170bbc2b8c87a",
                 0.5: "b8e16e5e9f897c62675fdf9d81b00ffe543f928d31618d089a2c06561fb5c6e3",
                 0.8: "ab793fe07b5aed92fdf9f048b54e1de54908b0412f1e5b72b4112ba925802b79"},
    "alfworld-actions": {None: "d1520e0abf85ea7ec8ddcfc4261b72e901e897784122a68c758e3be1b3441378",
                         0.2: "57611a11174bbaed8f175ba037d0643e511312e7d4061276b15b0b849f78f4da",
                         0.5: "c2952548327911dbf02e996149723ce5250e9e7bb44f0aa63abd1e825d06f4c4",
                         0.8: "46b858391e7ef446983f9cd00c63c7d9170a01a91a43231e869947bdedd02cdd"},
}


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj).encode()).hexdigest()


def _need(data_root: str, folder: str) -> None:
    if not (Path(data_root) / folder).is_dir():
        if os.environ.get("CI"):
            raise pytest.UsageError(f"CI: benchmark data {folder} is missing")
        pytest.skip(f"no {folder} data under GENENV_DATA_ROOT")


def _build(case: str, data_root: str, **kw):
    """(env, seed) for a case; the ALFWorld seed is written here, so its prompt needs no engine."""
    if case.startswith("alfworld"):
        env = ALFWorldEnv(data_root=data_root, simulator_writes="actions" if case == "alfworld-actions" else "step", **kw)
        env._plans = {"g1": ["go to countertop 1", "take mug 1 from countertop 1"]}  # the walkthrough, engine-free
        return env, ALF_SEED
    if case == "bamboogle":
        env = BamboogleEnv(data_root=data_root, **kw)
    elif case == "travelplanner":
        env = TravelPlannerEnv(data_root=data_root, **kw)
    elif case.startswith("bfcl"):
        env = BFCLEnv(data_root=data_root, categories=["simple_python"],
                      simulator_writes="request" if case == "bfcl-request" else "task", **kw)
    else:
        env = APIBankEnv(data_root=data_root, **kw)
    return env, env.seed_tasks()[0]


@pytest.fixture(scope="module", params=sorted(CASES))
def envs(request, data_root):
    """(case, {mode: env}, seed): the default env and one per mode."""
    _need(data_root, CASES[request.param][0])
    default, seed = _build(request.param, data_root)
    return request.param, {"default": default, "rule": _build(request.param, data_root, sim_prompt="rule")[0],
                           "stats": _build(request.param, data_root, sim_prompt="stats")[0]}, seed


def _text(env, seed, rate) -> str:
    return "\n".join(m["content"] for m in env.simulator_prompt(seed, rate))


@pytest.mark.parametrize("rate", RATES)
def test_prompt_shows_the_statistic_and_only_rule_says_what_to_do(envs, rate):
    case, by_mode, seed = envs
    _, rule_sentences, stat = CASES[case]
    rule_text, stats_text = _text(by_mode["rule"], seed, rate), _text(by_mode["stats"], seed, rate)
    rule_sentence = rule_sentences[rate]
    stats_sentence = UNKNOWN_STATS if rate is None else stat.format(rate=f"{rate:.0%}")
    assert rule_sentence in rule_text and stats_sentence in stats_text
    # the rest of the prompt is the same in both modes: only the success sentence differs
    assert stats_text == rule_text.replace(rule_sentence, stats_sentence)
    if rate is not None:
        assert f"{rate:.0%}" in stats_sentence and f"{rate:.0%}" in rule_sentence
    for word in ("harder", "easier", "keep", "difficult", "only"):
        assert word not in stats_sentence.lower()
    assert ("harder" in rule_sentence) == (rate == 0.8) and ("easier" in rule_sentence) == (rate == 0.2)


@pytest.mark.parametrize("rate", RATES + (0.0, 0.39, 0.4, 0.6, 0.61, 1.0))
def test_rule_is_the_prompt_as_before_and_stats_the_default(envs, rate):
    case, by_mode, seed = envs
    assert by_mode["default"].sim_prompt == "stats"
    assert by_mode["default"].simulator_prompt(seed, rate) == by_mode["stats"].simulator_prompt(seed, rate)
    rule = by_mode["rule"].simulator_prompt(seed, rate)
    if rate in CASES[case][1]:
        assert CASES[case][1][rate] in "\n".join(m["content"] for m in rule)
    if case in ALF_DIGESTS and rate in ALF_DIGESTS[case]:
        assert _digest(rule) == ALF_DIGESTS[case][rate]


def test_rule_thresholds():
    """Harder strictly above 60%, easier strictly below 40%, as the prompts always had it."""
    kw = dict(stat="{rate}", harder="H", easier="E", keep="K", unknown="U")
    assert [success_guide(r, "rule", **kw) for r in (0.0, 0.39, 0.4, 0.6, 0.61, 1.0, None)] == [
        "only 0%: E", "only 39%: E", "40%: K", "60%: K", "61%: H", "100%: H", "U"]
    assert [success_guide(r, "stats", **kw) for r in (0.0, 0.6, None)] == ["0%.", "60%.", UNKNOWN_STATS]
    assert difficulty_hint(0.8, "rule") == TOOLCALL_RULE[0.8] and difficulty_hint(0.8, "stats") == "The agent solved 80% of " \
        "recent variations of this seed."


def test_warm_start_examples_follow_the_prompt(data_root):
    """A cached warm start is keyed on the env's warm-start examples: "rule"'s are the ones stored
    warm starts were keyed on, and "stats" (the default) changes them (no stale adapter)."""
    for folder, name, kw in (("bfcl", "bfcl", {"categories": ["simple_python"], "simulator_writes": "request"}),
                             ("api-bank", "api_bank", {})):
        if not (Path(data_root) / folder).is_dir():
            continue
        default, rule, stats = (make_env(name, data_root=data_root, **kw, **extra).warm_start_examples("simulator", 8, 0)
                                for extra in ({}, {"sim_prompt": "rule"}, {"sim_prompt": "stats"}))
        assert default == stats and stats != rule
        assert [t for _, t in stats] == [t for _, t in rule]  # same targets, other prompts


def test_arithmetic_prompt_is_unchanged_and_stats_only():
    """The quickstart's prompt shows a success bucket and no instruction: "stats", its only value."""
    env = ArithmeticEnv()
    assert env.sim_prompt == "stats"
    seed = env.seed_tasks()[0]
    assert {r: _digest(env.simulator_prompt(seed, r)) for r in (None, 0.2, 0.8)} == {
        None: "cd55c8b181a5c8e11a690f2f559ef70a438b1ad33925c0f711242fb377d3681d",
        0.2: "664d9cb6f80489a684d67920e2eeb9ca9d4c42dec26f4c57104256132a41ff60",
        0.8: "a56bc78ebd7fc89d1d3882c67bff14d0dbe8d135421297df8f8b88d8a145ea1b"}
    # what keys the quickstart's cached simulator warm start
    assert _digest(env.warm_start_examples("simulator", 8, seed=0)) == \
        "ca00ef1cc31b0fe6af5fd89b0c2f500db3b55dead1c144186d90d0d0dcfa00ac"
    assert ArithmeticEnv(sim_prompt="stats").simulator_prompt(seed, 0.8) == env.simulator_prompt(seed, 0.8)
    with pytest.raises(ConfigError, match=r"data\.env_args\.sim_prompt.*sim_warm_start: curriculum") as e:
        make_env("arithmetic", sim_prompt="rule")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["alfworld", "bamboogle", "travelplanner", "bfcl", "api_bank", "arithmetic"])
@pytest.mark.parametrize("bad", ["harder", "Rule", None])
def test_bad_value_is_one_config_error_line(name, bad, tmp_path):
    """Checked before any data is read: a folder without benchmarks still fails on the option."""
    with pytest.raises(ConfigError, match=r"^data\.env_args\.sim_prompt must be .*'stats'.*, got ") as e:
        make_env(name, **({} if name == "arithmetic" else {"data_root": str(tmp_path)}), sim_prompt=bad)
    assert "\n" not in str(e.value)
