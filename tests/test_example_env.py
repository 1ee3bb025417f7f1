"""An environment of your own, named by import path (`data.env: package.module:ClassName`): the shipped
example trains through the CLI as a registered environment does, and a path that leads to no usable
class stops with one line naming `data.env` (docs/writing-an-environment.md)."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genenv_pl.cli import cli_main
from genenv_pl.envs import InvalidTask, make_env

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = "examples.word_reverse:WordReverseEnv"


@pytest.fixture(autouse=True)
def repo_on_path(monkeypatch):
    """`python main.py` has main.py's folder on sys.path, which is where `examples` is found; so here."""
    monkeypatch.syspath_prepend(str(REPO))
    monkeypatch.delenv("GENENV_VERBOSE", raising=False)


def _small(tmp: Path) -> str:
    """One short epoch of the example config: barely warm-started tiny models, a few seeds and held-out words."""
    cfg = {
        "trainer": {
            "max_epochs": 1, "check_val_every_n_epoch": 1, "enable_checkpointing": False,
            "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                       "init_args": {"save_dir": str(tmp / "runs")}},
            # filtering_k 0.5 puts every seed batch in band, so the simulator update runs too
            "callbacks": [{"class_path": "callbacks.AlphaCurriculumCallback", "init_args": {"filtering_k": 0.5}}],
        },
        "model": {"cache_dir": str(tmp / "cache"),
                  "agent": {"warm_start": {"steps": 60, "batch_size": 32}},
                  "simulator": {"tiny": {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 2,
                                         "intermediate_size": 192},
                                "warm_start": {"steps": 150, "batch_size": 32}}},
        "data": {"env_args": {"max_length": 5, "seeds_per_length": 3, "eval_per_length": 4, "reward": "partial"},
                 "coevo": {"seeds_per_epoch": 4, "base_tasks_per_epoch": 4, "replay_tasks_per_epoch": 0,
                           "drop_zero_std_groups": False, "eval_batch_size": 32}},
    }
    path = tmp / "small.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_fit_trains_an_environment_given_by_import_path(tmp_path, monkeypatch):
    from examples.word_reverse import WordReverseEnv

    monkeypatch.chdir(tmp_path)  # relative paths in the configs (checkpoints, runs) stay inside tmp
    cli = cli_main(["fit", "--config", str(REPO / "configs/quickstart.yaml"),
                    "--config", str(REPO / "examples/word_reverse.yaml"), "--config", _small(tmp_path)])
    dm, module = cli.datamodule, cli.model
    assert cli.config.fit.data.env == EXAMPLE and isinstance(dm.env, WordReverseEnv)
    assert module.counters["agent_updates"] >= 1
    assert "val/accuracy" in cli.trainer.logged_metrics
    assert any(k.startswith("val/accuracy_len") for k in cli.trainer.logged_metrics)  # the env's groups
    # the simulator's JSON became word tasks that the agent rolled out
    fresh = [e["task"] for e in dm.pools.train]
    assert fresh and all(set(t["data"]) == {"word"} and not dm.env.is_held_out(t["data"]["word"]) for t in fresh)


@pytest.mark.parametrize("path, says", [
    ("examples.word_reverse:WordReverse", "module 'examples.word_reverse' has no 'WordReverse'; its Environment "
                                          "subclasses: WordReverseEnv"),
    ("examples.no_such_module:Env", "cannot import module 'examples.no_such_module'"),
    ("examples.word_reverse:Task", "is not a subclass of genenv_pl.envs.Environment"),
    ("genenv_pl.envs.base:Environment", "does not implement the abstract methods"),
    ("examples/word_reverse.py:WordReverseEnv", "nor package.module:ClassName"),
    ("word_reverse", "unknown environment 'word_reverse'"),
])
def test_a_bad_import_path_is_one_line_naming_data_env(path, says):
    with pytest.raises(SystemExit) as exit_:
        cli_main(["fit", "--config", str(REPO / "configs/quickstart.yaml"), "--data.env", path])
    message = str(exit_.value.code)
    assert message.startswith("error: data.env: ") and "\n" not in message, message
    assert says in message, message


def test_env_args_the_class_does_not_take_are_one_line():
    """The quickstart's arithmetic arguments left in place for another environment: named, not a TypeError."""
    with pytest.raises(SystemExit) as exit_:
        cli_main(["fit", "--config", str(REPO / "configs/quickstart.yaml"), "--data.env", EXAMPLE])
    message = str(exit_.value.code)
    assert message.startswith("error: data.env_args: WordReverseEnv") and "max_level" in message, message


def _env(**kwargs):
    return make_env(EXAMPLE, **kwargs)


@pytest.mark.parametrize("text, reason", [
    ("", "empty"), ("x" * 201, "too_long_text"), ("cafe", "unparseable"), ('["cafe"]', "not_object"),
    ('{"word": "cafe", "answer": "efac"}', "bad_keys"), ('{"word": 12}', "bad_type"),
    ('{"word": "cAfe"}', "bad_letters"), ('{"word": ""}', "bad_letters"), ('{"word": "a"}', "bad_length"), ('{"word": "abcdefg"}', "bad_length"),
])
def test_parse_task_rejects_with_a_reason(text, reason):
    env = _env()
    with pytest.raises(InvalidTask) as e:
        env.parse_task(text, env.seed_tasks()[0])
    assert e.value.reason == reason


def test_parse_task_computes_the_gold_and_refuses_held_out_words():
    env = _env()
    task = env.parse_task(' {"word": "bad"}\n', env.seed_tasks()[0])
    assert task.data == {"word": "bad"} and task.difficulty == 3.0 and task.group == "len3"
    assert env.reward(task, " d a b") == 1.0 and env.reward(task, "dab") == 0.0
    held_out = env.eval_tasks()[0].data["word"]
    with pytest.raises(InvalidTask, match="held_out"):
        env.parse_task(f'{{"word": "{held_out}"}}', env.seed_tasks()[0])


@functools.cache
def _default_env():
    return _env()


# (the autouse sys.path fixture is function-scoped: it need not run again for each example)
@settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(st.text(max_size=250), st.builds('{{"word": "{}"}}'.format, st.text(max_size=20))))
def test_parse_task_raises_nothing_but_invalid_task(text):
    env = _default_env()
    try:
        task = env.parse_task(text, env.seed_tasks()[0])
    except InvalidTask:
        return
    assert not env.is_held_out(task.data["word"]) and env.min_length <= task.difficulty <= env.max_length


def test_no_seed_or_warm_start_example_is_held_out():
    env = _env()
    held_out = {t.data["word"] for t in env.eval_tasks()}
    assert held_out and all(env.is_held_out(w) for w in held_out)
    assert not held_out & {t.data["word"] for t in env.seed_tasks()}
    agent = [m[0]["content"] for m, _ in env.warm_start_examples("agent", 500, 0)]
    assert not any(p == f"reverse {env.spaced(w)} =" for p in agent for w in held_out)


@pytest.mark.parametrize("response, exact, partial", [
    (" e f a c", 1.0, 1.0), ("e f a", 0.0, 0.75), ("e f a c b", 0.0, 0.8), ("", 0.0, 0.0), ("c a f e", 0.0, 0.0),
])
def test_reward_exact_and_partial(response, exact, partial):
    task = _env().make_task("cafe", "t")
    assert _env().reward(task, response) == exact
    assert _env(reward="partial").reward(task, response) == partial
    assert _env(reward="partial").score(task, response)["accuracy"] == exact
