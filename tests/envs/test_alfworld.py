"""ALFWorld: loading the shared games, walkthrough replay, step scoring, split, simulator checks.

Replay needs the `textworld`/`alfworld`/`fast-downward-textworld` packages and ~1-3 s per game, so
the fast tests play a small sample (one game per task type, shared through one session cache).
The full-data checks are marked `slow` and run only with GENENV_RUN_SLOW=1.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from genenv_pl.envs import make_env
from genenv_pl.envs.alfworld import ALFWorldEnv, validate_generated_step
from genenv_pl.envs.alfworld_game import (
    TASK_TYPES,
    EpisodeReport,
    EpisodeResult,
    GameRef,
    evaluate_episodes,
    extract_steps,
    list_games,
)
from genenv_pl.envs.alfworld_grammar import canonical_action, normalize_action, parse_agent_output, parse_command
from genenv_pl.envs.base import InvalidTask, Task

def needs_engine(module: str):
    """Engine tests skip cleanly where the packages are absent, except in CI, which installs them."""
    if os.environ.get("CI"):
        import importlib

        return importlib.import_module(module)
    return pytest.importorskip(module)
slow = pytest.mark.skipif(not os.environ.get("GENENV_RUN_SLOW"), reason="set GENENV_RUN_SLOW=1 for full-data runs")


def _root(data_root: str) -> str:
    return os.path.join(data_root, "alfworld")


@pytest.fixture(scope="session")
def all_games(data_root: str) -> list[GameRef]:
    return list_games(_root(data_root), ["valid_seen", "valid_unseen"])


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("alfworld_cache"))


@pytest.fixture(scope="session")
def sample_games(data_root: str, cache_dir: str, all_games: list[GameRef]) -> list[GameRef]:
    """The games of a `max_games_per_split=1` env (so its test replays nothing new), plus the
    first game of every task type not yet covered: all six types, ~6 games. Shortest first."""
    env = _env(data_root, cache_dir, max_games_per_split=1)
    picked = {g.key: g for g in env.seed_games() + env.eval_games()}
    for g in all_games:
        if g.task_type not in {p.task_type for p in picked.values()}:
            picked[g.key] = g
    return sorted(picked.values(), key=lambda g: (len(json.loads(Path(g.path).read_text())["walkthrough"]), g.key))


@pytest.fixture(scope="session")
def sample_steps(sample_games: list[GameRef], cache_dir: str) -> dict[str, list[dict]]:
    needs_engine("textworld")
    needs_engine("fast_downward")
    report = extract_steps(sample_games, cache_dir)
    assert report.skipped == []
    return report.steps


def _task(gold: str, admissible: list[str] | None = None) -> Task:
    data = {"task": "put a mug in desk.", "observation": "You see a desk 1 and a mug 1.", "history": [],
            "gold": gold}
    if admissible is not None:
        data["admissible_commands"] = admissible
    return Task(id="t", data=data)


def _env(data_root: str, cache_dir: str, **kw) -> ALFWorldEnv:
    return ALFWorldEnv(data_root=data_root, cache_dir=cache_dir, **kw)


# ---- loading and split (no engine) ----------------------------------------------------------
def test_lists_shared_games(all_games: list[GameRef]) -> None:
    splits = {g.split for g in all_games}
    assert splits == {"valid_seen", "valid_unseen"}
    assert len(all_games) > 150
    assert {g.task_type for g in all_games} == set(TASK_TYPES)
    assert all(Path(g.path).name == "game.tw-pddl" for g in all_games)
    assert len({g.key for g in all_games}) == len(all_games)


def test_split_is_deterministic_and_disjoint(data_root: str, cache_dir: str, all_games: list[GameRef]) -> None:
    env = _env(data_root, cache_dir)
    seeds, evals = env.seed_games(), env.eval_games()
    assert seeds and evals
    assert {g.split for g in seeds} == {"valid_seen"}
    # games never on both sides, nor two trials of one task directory
    assert not {g.key for g in seeds} & {g.key for g in evals}
    assert not {(g.split, g.task_dir) for g in seeds} & {(g.split, g.task_dir) for g in evals}
    assert {g.key for g in seeds} | {g.key for g in evals} == {g.key for g in all_games}
    assert all(g in evals for g in all_games if g.split == "valid_unseen")
    n_seen = sum(g.split == "valid_seen" for g in all_games)
    assert 0.3 < len(seeds) / n_seen < 0.7
    again = _env(data_root, cache_dir)
    assert again.seed_games() == seeds and again.eval_games() == evals
    other = _env(data_root, cache_dir, split_salt="another")
    assert other.seed_games() != seeds
    limited = _env(data_root, cache_dir, max_games_per_split=2)
    assert len(limited.seed_games()) == 2 and len(limited.eval_games()) == 4
    assert set(limited.seed_games()) <= set(seeds) and set(limited.eval_games()) <= set(evals)


def test_full_download_seeds_from_train_and_scores_all_of_valid_unseen(tmp_path: Path, data_root: str,
                                                                         all_games: list[GameRef]) -> None:
    """docs/benchmarks.md's setting for a data root with upstream's `train` split (not shipped here; a copy of
    valid_seen's folders stands in for it): every train game seeds, every valid_unseen game is scored, and no
    valid_seen game is on either side."""
    games = tmp_path / "alfworld" / "json_2.1.1"
    games.mkdir(parents=True)
    (games / "train").symlink_to(Path(_root(data_root), "json_2.1.1", "valid_seen"), target_is_directory=True)
    (games / "valid_unseen").symlink_to(Path(_root(data_root), "json_2.1.1", "valid_unseen"), target_is_directory=True)
    env = _env(str(tmp_path), None, seed_split="train", seed_fraction=1.0, eval_splits=["valid_unseen"])
    seeds, evals = env.seed_games(), env.eval_games()
    assert {g.split for g in seeds} == {"train"} and {g.split for g in evals} == {"valid_unseen"}
    assert len(seeds) == sum(g.split == "valid_seen" for g in all_games)
    assert len(evals) == sum(g.split == "valid_unseen" for g in all_games)


def test_registry_and_missing_root(tmp_path: Path) -> None:
    from genenv_pl.envs.base import DataError

    with pytest.raises(DataError):
        make_env("alfworld", data_root=str(tmp_path))
    (tmp_path / "alfworld" / "json_2.1.1" / "valid_seen").mkdir(parents=True)
    with pytest.raises(DataError, match="is incomplete: json_2.1.1/valid_unseen missing"):
        make_env("alfworld", data_root=str(tmp_path))


def test_environment_imports_no_training_code() -> None:
    code = ("import sys, genenv_pl.envs.alfworld; "
            "bad = [m for m in ('lightning', 'torch', 'transformers', 'textworld') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


# ---- replay on the real engine ------------------------------------------------------------------
def test_walkthrough_replay_wins_sample(sample_games: list[GameRef], sample_steps: dict[str, list[dict]]) -> None:
    for game in sample_games:
        walkthrough = json.loads(Path(game.path).read_text())["walkthrough"]
        steps = sample_steps[game.key]
        # replay raises unless every expert action is admissible and the game ends `won`
        assert [s["gold"] for s in steps] == walkthrough
        for i, step in enumerate(steps):
            assert step["gold"] in step["admissible_commands"]
            assert len(step["history"]) == i
            assert step["task"] and not step["task"].lower().startswith("your task")
            assert "Welcome" not in step["observation"]


def test_cache_reload_is_fast_and_identical(sample_games: list[GameRef], sample_steps: dict, cache_dir: str) -> None:
    t0 = time.perf_counter()
    again = extract_steps(sample_games, cache_dir)
    assert time.perf_counter() - t0 < 2.0
    assert again.cache_hits == len(sample_games) and again.steps == sample_steps


def test_unreadable_cache_entry_means_replay(tmp_path: Path) -> None:
    from genenv_pl.envs.alfworld_game import _read_cache

    entry = tmp_path / "x.json"
    entry.write_text('[{"task": "half')
    assert _read_cache(entry) is None and _read_cache(tmp_path / "missing.json") is None
    entry.write_text("[]")
    assert _read_cache(entry) == []


def test_env_tasks_on_sample(data_root: str, cache_dir: str) -> None:
    needs_engine("textworld")
    env = _env(data_root, cache_dir, max_games_per_split=1)
    seeds, evals = env.seed_tasks(), env.eval_tasks()
    assert seeds and evals and env.num_skipped == 0
    assert not {t.meta["game"] for t in seeds} & {t.meta["game"] for t in evals}
    assert len({t.id for t in seeds + evals}) == len(seeds) + len(evals)
    for t in evals:
        split, task_type = t.group.split("/")
        assert split in ("valid_seen", "valid_unseen") and task_type in TASK_TYPES
        assert env.reward(t, f"<think>plan</think><response>{t.data['gold']}</response>") == 1.0
        assert env.reward(t, "<response>look around</response>") == 0.0
    msgs = env.agent_prompt(evals[0])
    assert msgs[0]["role"] == "system" and "<response>" in msgs[0]["content"]
    assert "Admissible commands:" in msgs[1]["content"]
    no_list = _env(data_root, cache_dir, max_games_per_split=1, show_admissible=False)
    assert "Admissible commands:" not in no_list.agent_prompt(evals[0])[1]["content"]
    # real engine steps satisfy the simulator-side validator (same schema, same grammar), except
    # that the expert sometimes takes an object it was never shown, which generated tasks may not do
    for t in seeds + evals:
        try:
            assert validate_generated_step(t.data) == t.data
        except InvalidTask as e:
            assert e.reason == "unknown_object"
    examples = env.warm_start_examples("simulator", 3, seed=0)
    for _, target in examples:
        assert validate_generated_step(json.loads(target))
    prompt, target = env.warm_start_examples("agent", 1, seed=0)[0]
    assert target.endswith("</response>") and prompt[0]["role"] == "system"


# ---- step scoring -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "response, gold, reward, format_error",
    [
        ("<think>the mug is here</think><response>take mug 1 from desk 1</response>", "take mug 1 from desk 1", 1, 0),
        ("<think>x</think>\n<response>  Take  Mug 1 FROM desk 1. </response>", "take mug 1 from desk 1", 1, 0),
        ("<response>put mug 1 in/on desk 1</response>", "move mug 1 to desk 1", 1, 0),
        ("<response>put mug 1 on desk 1</response>", "move mug 1 to desk 1", 1, 0),
        ("<response>I should take it.\ntake mug 1 from desk 1</response>", "take mug 1 from desk 1", 1, 0),
        ("<response>go to desk 2</response><response>go to desk 1</response>", "go to desk 1", 1, 0),
        ("<response>go to desk 2</response>", "go to desk 1", 0, 0),
        ("<response>go to desk 11</response>", "go to desk 1", 0, 0),
        ("<response></response>", "go to desk 1", 0, 0),
        ("<think>hmm</think>\ngo to desk 1", "go to desk 1", 1, 1),  # fallback: last line
        ("Action: go to desk 1", "go to desk 1", 1, 1),
        ("<response>go to desk 1", "go to desk 1", 1, 1),  # unclosed response
        ("<think>go to desk 1</think>", "go to desk 1", 0, 1),  # only thoughts
        ("<think>go to desk 1 and never close", "go to desk 1", 0, 1),
        ("", "go to desk 1", 0, 1),
    ],
)
def test_step_scorer_table(response: str, gold: str, reward: int, format_error: int) -> None:
    env = ALFWorldEnv.__new__(ALFWorldEnv)  # scoring needs no data
    task = _task(gold)
    assert env.reward(task, response) == reward
    assert env.score(task, response)["format_error"] == format_error
    assert env.score(task, response)["accuracy"] == reward


@pytest.mark.parametrize("response", [None, "\x00\xff<response>", "<response>" * 1000, "x" * 200_000,
                                      "<think><response>a</think></response>", "{'eval': __import__('os')}"])
def test_malformed_output_never_raises(response) -> None:
    env = ALFWorldEnv.__new__(ALFWorldEnv)
    task = _task("go to desk 1", ["go to desk 1", "look"])
    assert env.reward(task, response) == 0.0
    assert set(env.score(task, response)) == {"accuracy", "format_error", "admissible"}


def test_admissible_metric() -> None:
    env = ALFWorldEnv.__new__(ALFWorldEnv)
    task = _task("go to desk 1", ["go to desk 1", "look"])
    assert env.score(task, "<response>look</response>") == {"accuracy": 0.0, "format_error": 0.0, "admissible": 1.0}
    assert env.score(task, "<response>fly away</response>")["admissible"] == 0.0
    assert env.score(_task("go to desk 1"), "<response>go to bed 1</response>")["admissible"] == 1.0


def test_normalization_and_grammar() -> None:
    assert normalize_action('  "Go To  Desk 1." ') == "go to desk 1"
    assert normalize_action("> look") == "look"
    assert canonical_action("put apple 1 in fridge 1") == "move apple 1 to fridge 1"
    assert canonical_action("move apple 1 to fridge 1") == "move apple 1 to fridge 1"
    assert parse_agent_output("<response>Inventory</response>") == ("inventory", True)
    good = ["go to desk 1", "take mug 1 from desk 1", "put mug 1 in/on shelf 2", "move mug 1 to shelf 2", "open fridge 1",
            "close fridge 1", "toggle desklamp 1", "use desklamp 1", "clean mug 1 with sinkbasin 1",
            "heat egg 1 with microwave 1", "cool pot 1 with fridge 1", "examine mug 1", "look", "inventory"]
    for command in good:
        assert parse_command(command) is not None, command
    for command in ["go to desk", "take mug from desk 1", "fly to desk 1", "open", "heat egg 1", "look around"]:
        assert parse_command(command) is None, command
    assert parse_command("clean mug 1 with sinkbasin 1").objects == ("mug 1", "sinkbasin 1")


# ---- simulator output -----------------------------------------------------------------------------
GOOD_STEP = {
    "task": "Your task is to: put a clean mug in coffeemachine.",
    "observation": "You are in the middle of a room. Looking quickly around you, you see a countertop 1, "
                   "a coffeemachine 1, and a sinkbasin 1.",
    "history": [{"action": "go to countertop 1", "observation": "You arrive at countertop 1. On the countertop 1, "
                                                                "you see a mug 2, and a knife 1."}],
    "admissible_commands": ["go to sinkbasin 1", "take mug 2 from countertop 1", "take knife 1 from countertop 1",
                            "look", "help"],
    "gold": "Take mug 2 from countertop 1",
}


def _seed() -> Task:
    return Task(id="alfworld/valid_seen/x/t/0", data={}, group="valid_seen/pick_clean_then_place_in_recep",
                meta={"task_type": "pick_clean_then_place_in_recep"})


def test_simulator_output_valid() -> None:
    env = ALFWorldEnv.__new__(ALFWorldEnv)
    text = "<think>vary the object</think>\n```json\n" + json.dumps(GOOD_STEP) + "\n```"
    task = env.parse_task(text, _seed())
    assert task.data["gold"] == "take mug 2 from countertop 1"
    assert task.data["task"] == "put a clean mug in coffeemachine."
    assert task.group == _seed().group and task.meta["seed_id"] == _seed().id
    assert task.difficulty == 1.0
    assert env.reward(task, "<response>take mug 2 from countertop 1</response>") == 1.0
    # without an admissible list, and with the old "put ... in/on" spelling
    step = {k: v for k, v in GOOD_STEP.items() if k != "admissible_commands"}
    step["gold"] = "put mug 2 in/on sinkbasin 1"
    assert env.parse_task(json.dumps(step), _seed()).data["gold"] == "move mug 2 to sinkbasin 1"
    assert env.task_key(task) == env.task_key(env.parse_task(json.dumps(GOOD_STEP), _seed()))


def _bad(**change) -> str:
    step = dict(GOOD_STEP)
    for k, v in change.items():
        if v is None:
            step.pop(k)
        else:
            step[k] = v
    return json.dumps(step)


@pytest.mark.parametrize(
    "text, reason",
    [
        ("no json here", "unparseable"),
        ("{'task': 'single quotes'}", "unparseable"),
        (_bad(gold=None), "missing_field"),
        (_bad(observation=""), "missing_field"),
        (_bad(gold="fly to the moon"), "bad_action"),
        (_bad(gold="help"), "bad_action"),
        (_bad(gold="take mug 3 from countertop 1"), "unknown_object"),  # mug 3 never shown
        (_bad(gold="go to fridge 1"), "unknown_object"),
        (_bad(gold="go to sinkbasin 1", admissible_commands=["look", "go to countertop 1"]), "not_admissible"),
        (_bad(admissible_commands=["take mug 2 from countertop 1", "dance"]), "bad_admissible"),
        (_bad(admissible_commands="take mug 2 from countertop 1"), "bad_admissible"),
        (_bad(history=[{"action": "jump", "observation": "You jump."}]), "bad_history"),
        (_bad(history="go to countertop 1"), "bad_history"),
        (_bad(observation="You see a countertop 1, a mug 2. " + "x" * 20_000), "too_long"),
    ],
)
def test_simulator_output_invalid(text: str, reason: str) -> None:
    env = ALFWorldEnv.__new__(ALFWorldEnv)
    with pytest.raises(InvalidTask) as err:
        env.parse_task(text, _seed())
    assert err.value.reason == reason


# ---- bad input files ------------------------------------------------------------------------------
def _plant(root: Path, split: str, task_dir: str, trial: str, content: bytes) -> None:
    folder = root / "alfworld" / "json_2.1.1" / split / task_dir / trial
    folder.mkdir(parents=True)
    (folder / "game.tw-pddl").write_bytes(content)


def test_corrupted_game_is_skipped_with_count(tmp_path: Path, sample_games: list[GameRef], sample_steps: dict,
                                              cache_dir: str) -> None:
    good = sample_games[0]
    raw = Path(good.path).read_bytes()
    broken = json.loads(raw)
    broken["pddl_problem"] = "(define (problem broken"  # valid JSON, unloadable PDDL
    _plant(tmp_path, "valid_seen", good.task_dir, good.trial, raw)  # same bytes: a cache hit
    _plant(tmp_path, "valid_seen", "pick_and_place_simple-Bad-None-Desk-1", "trial_a", b"{not json")
    _plant(tmp_path, "valid_seen", "pick_and_place_simple-Bad-None-Desk-2", "trial_b", json.dumps(broken).encode())
    # (this root holds valid_seen only: the only split it names)
    env = ALFWorldEnv(data_root=str(tmp_path), cache_dir=cache_dir, seed_fraction=1.0, eval_splits=("valid_seen",))
    seeds = env.seed_tasks()
    assert [t.data for t in seeds] == sample_steps[good.key]
    assert env.num_skipped == 2
    assert sorted(k.split("/")[1] for k, _ in env.load_errors) == [
        "pick_and_place_simple-Bad-None-Desk-1", "pick_and_place_simple-Bad-None-Desk-2"]
    bad_games = [g for g in env.seed_games() if "-Bad-" in g.task_dir]
    report = evaluate_episodes(bad_games, lambda convs: ["<response>look</response>"] * len(convs), max_steps=2)
    assert report.num_skipped == 2 and report.episodes == []


# ---- episode evaluation ---------------------------------------------------------------------------
def test_episode_evaluator_oracle_and_failing_policy(sample_games: list[GameRef], sample_steps: dict) -> None:
    needs_engine("textworld")
    game = sample_games[0]
    walkthrough = [s["gold"] for s in sample_steps[game.key]]
    seen: list[list[dict]] = []

    def oracle(conversations: list[list[dict]]) -> list[str]:
        seen.extend(conversations)
        return [f"<think>follow the plan</think><response>{walkthrough[len(seen) - 1]}</response>"]

    report = evaluate_episodes([game], oracle)
    assert report.episodes[0].won and report.episodes[0].steps == len(walkthrough)
    summary = report.summary()
    assert summary["success_rate"] == 1.0 and summary[f"success_rate/{game.task_type}"] == 1.0
    assert "Admissible commands:" in seen[0][-1]["content"]
    assert f"> {walkthrough[0]}" in seen[1][-1]["content"]  # history carries the executed command

    lazy = evaluate_episodes([game], lambda convs: ["I am not sure.\n\nLOOK"] * len(convs), max_steps=3)
    episode = lazy.episodes[0]
    assert not episode.won and episode.steps == 3 and episode.actions == ["look"] * 3
    assert episode.format_errors == 3
    assert lazy.summary() | {"success_rate": 0.0, "mean_steps": 3.0, "format_error_rate": 1.0} == lazy.summary()


def test_episodes_in_lockstep_refill_freed_slots(sample_games: list[GameRef], sample_steps: dict) -> None:
    """Three games, two slots: each `act` call carries every running game's prompt, the shortest game's
    slot goes to the third game once it is won, and results come back in game order."""
    needs_engine("textworld")
    games = sample_games[:3]  # shortest walkthroughs first
    walkthroughs = {g.key: [s["gold"] for s in sample_steps[g.key]] for g in games}
    intros = {g.key: sample_steps[g.key][0]["observation"] for g in games}
    assert len(set(intros.values())) == 3
    played = {g.key: 0 for g in games}
    batches: list[list[str]] = []

    def oracle(conversations: list[list[dict]]) -> list[str]:
        keys = [next(k for k, intro in intros.items() if intro in conv[-1]["content"]) for conv in conversations]
        batches.append(keys)
        replies = []
        for k in keys:
            replies.append(f"<response>{walkthroughs[k][played[k]]}</response>")
            played[k] += 1
        return replies

    report = evaluate_episodes(games, oracle, batch_size=2)
    assert [e.key for e in report.episodes] == [g.key for g in games]
    assert all(e.won and e.steps == len(walkthroughs[e.key]) for e in report.episodes)
    assert max(len(b) for b in batches) == 2 and batches[0] == [games[0].key, games[1].key]
    first_done = len(walkthroughs[games[0].key])
    assert batches[first_done] == [games[1].key, games[2].key]  # the freed slot is filled at once
    assert len(batches) < sum(len(w) for w in walkthroughs.values())
    assert report.summary()["format_error_rate"] == 0.0

    with pytest.raises(ValueError, match="1 replies for 2 prompts"):
        evaluate_episodes(games[:2], lambda convs: ["<response>look</response>"], batch_size=2)


def test_episode_summary_per_task_type() -> None:
    episodes = [EpisodeResult(f"valid_unseen/{t}-X/trial", t, i % 2 == 0, 5, []) for i, t in enumerate(TASK_TYPES)]
    episodes.append(EpisodeResult(f"valid_seen/{TASK_TYPES[0]}-Y/trial", TASK_TYPES[0], False, 50, []))
    summary = EpisodeReport(episodes, [("valid_seen/broken/trial", "bad")]).summary()
    assert summary["success_rate"] == pytest.approx(3 / 7)
    assert summary[f"success_rate/{TASK_TYPES[0]}"] == 0.5 and summary[f"success_rate/{TASK_TYPES[1]}"] == 0.0
    assert summary["success_rate/valid_unseen"] == 0.5 and summary["success_rate/valid_seen"] == 0.0
    assert summary["skipped"] == 1.0 and summary["episodes"] == 7.0
    assert summary[f"episodes/{TASK_TYPES[0]}"] == 2.0 and summary["episodes/valid_unseen"] == 6.0
    assert all(f"success_rate/{t}" in summary for t in TASK_TYPES)


def test_episode_sample_is_stratified_over_split_and_task_type(data_root: str) -> None:
    from genenv_pl.envs.alfworld import stratified

    env = ALFWorldEnv(data_root=data_root)
    games = env.eval_games()
    groups = {(g.split, g.task_type) for g in games}
    assert len(groups) == 12  # both splits ship all six task types
    sample = stratified(games, 12, env.split_salt)
    assert {(g.split, g.task_type) for g in sample} == groups  # one game of each, not 12 of the first type
    assert stratified(games, 12, env.split_salt) == sample  # deterministic
    assert {g.split for g in stratified(games, 2, env.split_salt)} == {"valid_seen", "valid_unseen"}
    assert stratified(games, 30, env.split_salt)[:12] == sample  # a larger sample extends a smaller one
    assert sorted(g.key for g in stratified(games, None, env.split_salt)) == sorted(g.key for g in games)


# ---- full data (slow) -----------------------------------------------------------------------------
@pytest.mark.slow
@slow
def test_full_data_replays_and_splits(data_root: str, tmp_path: Path) -> None:
    # with GENENV_CACHE_DIR set, reuse the default cache under it; otherwise replay all (~10 min)
    env = _env(data_root, None if os.environ.get("GENENV_CACHE_DIR") else str(tmp_path))
    seeds, evals = env.seed_tasks(), env.eval_tasks()
    assert env.num_skipped == 0, env.load_errors
    assert {t.meta["game"] for t in seeds}.isdisjoint(t.meta["game"] for t in evals)
    assert {t.meta["task_type"] for t in evals} == set(TASK_TYPES)
    assert len(seeds) + len(evals) > 1000
