"""The engine as the checker of generated ALFWorld steps (`alfworld_check.py`) and the two simulator
designs of `ALFWorldEnv` ("step": free-form JSON, measured by the checker; "actions": the engine builds
the step). Real games, real engine, real planner; gated as test_alfworld.py (skips without the engine
packages, except in CI)."""
from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading

import pytest

from genenv_pl.envs.alfworld import ALFWorldEnv, _is_valid_step
from genenv_pl.envs.alfworld_check import Engine, check_step, ground_step
from genenv_pl.envs.alfworld_game import list_games
from genenv_pl.envs.base import ConfigError, InvalidTask, Task
from test_alfworld import needs_engine


@pytest.fixture(scope="module")
def env(data_root: str, tmp_path_factory: pytest.TempPathFactory) -> ALFWorldEnv:
    needs_engine("alfworld")
    needs_engine("textworld")
    # one game per split: the seed side has valid_seen's first seed game (in hash order)
    return ALFWorldEnv(data_root=data_root, cache_dir=str(tmp_path_factory.mktemp("alfworld_check")),
                       max_games_per_split=1, simulator_writes="actions")


@pytest.fixture(scope="module")
def seeds(env: ALFWorldEnv) -> list[Task]:
    tasks = env.seed_tasks()
    assert len(tasks) >= 3
    return tasks


def _path(env: ALFWorldEnv, task: Task) -> str:
    return env._game_path(task)


def _expert(seed: Task) -> list[str]:
    return [h["action"] for h in seed.data["history"]]


def test_expert_steps_are_vouched_for_and_wrong_golds_are_not(env: ALFWorldEnv, seeds: list[Task]) -> None:
    for seed in seeds:
        assert check_step(_path(env, seed), seed.data) == {"replayable": 1.0, "gold_valid": 1.0}
    seed = seeds[1]
    # "look" is always admissible and never advances; an object from another game cannot be checked
    assert check_step(_path(env, seed), dict(seed.data, gold="look")) == {"replayable": 1.0, "gold_valid": 0.0}
    assert check_step(_path(env, seed), dict(seed.data, gold="take zebra 9 from desk 1"))["gold_valid"] == 0.0
    changed_goal = dict(seed.data, task="put a zebra in the fridge.")
    assert check_step(_path(env, seed), changed_goal) == {"replayable": 0.0, "gold_valid": 0.0}
    made_up = dict(seed.data, history=[{"action": seed.data["history"][0]["action"], "observation": "You win."}])
    assert check_step(_path(env, seed), made_up) == {"replayable": 0.0, "gold_valid": 0.0}


def test_ground_step_plays_the_commands_and_takes_the_planners_gold(env: ALFWorldEnv, seeds: list[Task]) -> None:
    seed = seeds[-1]
    data, checks = ground_step(_path(env, seed), _expert(seed))
    # the engine's own state: the same as the replayed walkthrough's step
    assert {k: data[k] for k in ("task", "observation", "history", "admissible_commands")} == \
        {k: seed.data[k] for k in ("task", "observation", "history", "admissible_commands")}
    assert checks == {"replayable": 1.0, "gold_valid": 1.0}
    assert data["gold"] in data["admissible_commands"]
    assert check_step(_path(env, seed), data)["gold_valid"] == 1.0  # the checker agrees with the builder
    # a command the game does not admit is played as in ALFWorld: "Nothing happens."
    data, _ = ground_step(_path(env, seed), ["take zebra 9 from desk 1"])
    assert data["history"] == [{"action": "take zebra 9 from desk 1", "observation": "Nothing happens."}]
    # the whole walkthrough wins: no next step is left
    with pytest.raises(InvalidTask) as e:
        ground_step(_path(env, seed), _expert(seed) + [seed.data["gold"]])
    assert e.value.reason == "already_won"


def test_engine_runs_in_a_child_and_a_stalled_call_costs_one_step(env: ALFWorldEnv, seeds: list[Task]) -> None:
    engine = Engine(timeout=60, clock="wall")
    seed = seeds[1]
    assert engine.check_step(_path(env, seed), seed.data)["gold_valid"] == 1.0
    engine.timeout = 1e-4  # no game plays this fast: the call is cut off and the child killed
    with pytest.raises(InvalidTask) as e:
        engine.ground_step(_path(env, seed), _expert(seed))
    assert e.value.reason == "engine_timeout"
    engine.timeout = 60  # the next call starts a fresh child
    data, checks = engine.ground_step(_path(env, seed), _expert(seed))
    assert checks["gold_valid"] == 1.0 and data["history"] == seed.data["history"]
    with pytest.raises(RuntimeError, match="alfworld engine"):  # an unreadable game: an error, not a step
        engine.check_step("no/such/game.tw-pddl", seed.data)
    engine.close()


def test_actions_simulator_parse_and_warm_start_targets(env: ALFWorldEnv, seeds: list[Task], monkeypatch) -> None:
    seed = seeds[0]
    monkeypatch.setattr(env, "sim_prompt", "rule")  # the prompt the stored warm start was trained on
    prompt = env.simulator_prompt(seed, 0.9)[-1]["content"]
    assert "Expert plan:" in prompt and "harder" in prompt
    task = env.parse_task(json.dumps({"actions": _expert(seeds[-1])}), seed)
    assert task.meta["checks"] == {"replayable": 1.0, "gold_valid": 1.0}
    assert task.meta["game"] == seed.meta["game"] and task.group == seed.group
    assert task.difficulty == len(seeds[-1].data["history"])
    for text, reason in [("no json here", "unparseable"), ('{"actions": ["fly to the moon"]}', "bad_history"),
                         ('{"actions": "go to desk 1"}', "bad_history")]:
        with pytest.raises(InvalidTask) as e:
            env.parse_task(text, seed)
        assert e.value.reason == reason
    # warm-start targets: expert prefixes with detours, each a step the engine builds and vouches for
    examples = env.warm_start_examples("simulator", 6, seed=0)
    assert len(examples) == 6
    for messages, target in examples:
        actions = json.loads(target)["actions"]
        assert isinstance(actions, list)
        owner = next(s for s in seeds if messages[-1]["content"] == env.simulator_prompt(s, None)[-1]["content"])
        assert env.parse_task(target, owner).meta["checks"]["gold_valid"] == 1.0


def test_free_form_steps_are_measured_when_asked(data_root: str, env: ALFWorldEnv, seeds: list[Task]) -> None:
    free = ALFWorldEnv(data_root=data_root, cache_dir=env.cache_dir, max_games_per_split=1, check_gold=True)
    seed = next(s for s in seeds if _is_valid_step(s.data))  # (an expert step may name an object never shown)
    assert free.parse_task(json.dumps(seed.data), seed).meta["checks"] == {"replayable": 1.0, "gold_valid": 1.0}
    moved = dict(seed.data, task="put a zebra in the fridge.")
    assert free.parse_task(json.dumps(moved), seed).meta["checks"]["gold_valid"] == 0.0
    unchecked = ALFWorldEnv(data_root=data_root, cache_dir=env.cache_dir, max_games_per_split=1)
    assert "checks" not in unchecked.parse_task(json.dumps(seed.data), seed).meta
    # reject_refused (configs/alfworld.yaml): the steps the engine does not vouch for are dropped, with the reason
    strict = ALFWorldEnv(data_root=data_root, cache_dir=env.cache_dir, max_games_per_split=1, check_gold=True,
                         reject_refused=True)
    assert strict.parse_task(json.dumps(seed.data), seed).meta["checks"]["gold_valid"] == 1.0
    other = next(c for c in seed.data["admissible_commands"] if not free.engine.check_step(
        free._game_path(seed), dict(seed.data, gold=c))["gold_valid"])
    for step, why in [(moved, "not a state of its seed's game"), (dict(seed.data, gold=other), "does not advance")]:
        with pytest.raises(InvalidTask, match=why) as e:
            strict.parse_task(json.dumps(step), seed)
        assert e.value.reason == "engine_refused"
    with pytest.raises(ConfigError, match="check_gold: true"):
        ALFWorldEnv(data_root=data_root, reject_refused=True)
    with pytest.raises(ConfigError, match="simulator_writes"):
        ALFWorldEnv(data_root=data_root, simulator_writes="whole games")
    with pytest.raises(ConfigError, match="engine_clock"):
        ALFWorldEnv(data_root=data_root, engine_clock="sundial")


# The planner needs about 13 s of CPU from this game's first state (measured here): a call on it that
# is limited to one second is certain to run past the limit, wherever the machine's load is.
SLOW_GAME = "valid_seen/pick_heat_then_place_in_recep-Tomato-None-Fridge-24/trial_T20190908_033721_967359"


@pytest.mark.skipif(not hasattr(signal, "SIGXCPU"), reason="CPU-time limits are POSIX")
def test_the_kernel_ends_a_process_past_its_cpu_limit() -> None:
    # the default action of SIGXCPU runs no Python code, so it ends the planner's C++ search as it ends this loop
    code = ("from genenv_pl.envs.alfworld_check import limit_cpu; import signal; "
            "signal.signal(signal.SIGXCPU, signal.SIG_DFL); limit_cpu(0.5)\nwhile True: pass")
    proc = subprocess.run([sys.executable, "-c", code], timeout=120)
    assert proc.returncode == -signal.SIGXCPU


@pytest.mark.skipif(not hasattr(signal, "SIGXCPU"), reason="CPU-time limits are POSIX")
def test_engine_limits_cpu_time_and_names_a_killed_child(data_root: str, env: ALFWorldEnv) -> None:
    path = next(g.path for g in list_games(env.root, ["valid_seen"]) if g.key == SLOW_GAME)
    engine = Engine(timeout=1)  # CPU time, the default
    assert engine.clock == "cpu"
    with pytest.raises(InvalidTask) as e:
        engine.ground_step(path, [])
    assert e.value.reason == "engine_timeout" and "CPU time" in str(e.value)
    # a child that dies some other way (the OOM killer, say) costs the step too, under its own name
    engine.timeout = 60
    engine._start()
    killer = threading.Timer(1.0, engine._proc.kill)
    killer.start()
    with pytest.raises(InvalidTask) as e:
        engine.ground_step(path, [])
    killer.join()
    assert e.value.reason == "engine_crash" and str(-signal.SIGKILL) in str(e.value)
    with pytest.raises(ValueError, match="clock"):
        Engine(clock="sundial")


def test_sampled_detours_stay_in_the_room(env: ALFWorldEnv, seeds: list[Task]) -> None:
    rng = random.Random(0)
    plan = env._walkthrough(seeds[0])
    assert plan == _expert(seeds[-1]) + [seeds[-1].data["gold"]]
    for _ in range(20):
        actions = env._sample_actions(seeds[0], rng)
        matched, detours = 0, []
        for a in actions:  # the plan's prefix in order, the rest detours
            if matched < len(plan) and a == plan[matched]:
                matched += 1
            else:
                detours.append(a)
        assert matched < len(plan) and len(detours) <= 2  # a prefix: the game is never already won
        assert all(a.startswith("go to ") and a[6:] in seeds[0].data["observation"] for a in detours)
