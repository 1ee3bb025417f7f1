import random
import string

import pytest

from genenv_pl.envs import InvalidTask, make_env

ENV = make_env("arithmetic", max_level=6, seeds_per_level=4, eval_per_level=20)
SEED = ENV.seed_tasks()[0]


def test_seed_and_eval_sets_are_disjoint_and_cover_every_level():
    seeds = {ENV.task_key(t) for t in ENV.seed_tasks()}
    evals = {ENV.task_key(t) for t in ENV.eval_tasks()}
    assert not seeds & evals
    assert {t.group for t in ENV.eval_tasks()} == {f"level{i}" for i in range(1, 7)}


@pytest.mark.parametrize(
    "a, b, expr, answer",
    [(1, 2, "100000+200000", "3000000"), (123, 45, "321000+540000", "8610000"), (999999, 1, "999999+100000", "0000001")],
)
def test_format_is_reversed_and_zero_padded(a, b, expr, answer):
    t = ENV.make_task(a, b, len(str(max(a, b))), "x")
    assert ENV.expression(t) == expr
    assert ENV.answer(t) == answer
    assert ENV.agent_prompt(t)[0]["content"] == expr + "="
    assert ENV.reward(t, answer) == 1.0
    assert ENV.score(t, answer)["accuracy"] == 1.0


@pytest.mark.parametrize(
    "response, expected",
    [("8610000", 1.0), ("8610001", 6 / 7), ("0000000", 4 / 7), ("", 0.0), ("86100000000", 7 / 11), ("  8610000\n", 1.0),
     ("abc", 0.0)],
)
def test_reward_partial_credit(response, expected):
    env = make_env("arithmetic", max_level=6, seeds_per_level=4, eval_per_level=20, reward="partial")
    t = env.make_task(123, 45, 3, "x")
    assert env.reward(t, response) == pytest.approx(expected)


@pytest.mark.parametrize(
    "response, expected",
    [("8610000", 1.0), ("8610001", 0.0), ("0000000", 0.0), ("", 0.0), ("86100000000", 0.0), ("  8610000\n", 1.0),
     ("abc", 0.0)],
)
def test_reward_exact_is_binary_and_the_default(response, expected):
    t = ENV.make_task(123, 45, 3, "x")
    assert ENV.reward_mode == "exact"
    assert ENV.reward(t, response) == expected


@pytest.mark.parametrize("key, value", [("reward", "digits"), ("sim_warm_start", "rule")])
def test_bad_option_names_the_key(key, value):
    with pytest.raises(ValueError, match=key):
        make_env("arithmetic", **{key: value})


@pytest.mark.parametrize(
    "text, level",
    [("321000+540000", 3), ("1+2", 1), ("000001+000002", 6), (" 12+34 ", 2), ("0+0", 1)],
)
def test_parse_valid_generations(text, level):
    task = ENV.parse_task(text, SEED)
    assert task.data["level"] == level
    # The environment computes the answer; the simulator cannot supply a wrong one.
    assert int(ENV.answer(task)[::-1]) == task.data["a"] + task.data["b"]


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty"),
        ("   ", "empty"),
        ("12+", "unparseable"),  # truncated
        ("12+34=46", "unparseable"),
        ("12-34", "unparseable"),
        ("1" * 5000 + "+1", "too_many_digits"),  # huge number
        ("1234567+1", "too_many_digits"),
        ("\x00\xff\x13+", "unparseable"),
        ("12+34+56", "unparseable"),
        ("٣+٤", "unparseable"),  # non-ASCII digits are not our digits
    ],
)
def test_parse_rejects_malformed_output(text, reason):
    with pytest.raises(InvalidTask) as e:
        ENV.parse_task(text, SEED)
    assert e.value.reason == reason


def test_parse_rejects_held_out_copies():
    t = ENV.eval_tasks()[5]
    with pytest.raises(InvalidTask) as e:
        ENV.parse_task(ENV.expression(t), SEED)
    assert e.value.reason == "held_out"


def test_parser_never_raises_anything_but_invalid_task_on_random_bytes():
    rng = random.Random(0)
    alphabet = string.printable + "\x00\u00e9\u4e00+0123456789"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        try:
            ENV.parse_task(text, SEED)
        except InvalidTask:
            pass


def _warm_start_shifts(env, n: int = 2000) -> dict[int, list[int]]:
    """Target level minus seed level of the simulator's warm-start pairs, per success bucket shown."""
    shifts: dict[int, list[int]] = {b: [] for b in range(5)}
    for messages, target in env.warm_start_examples("simulator", n, seed=1):
        prompt = messages[0]["content"]
        bucket = int(prompt.rsplit(";p", 1)[1].rstrip(":"))
        expr = prompt.split("=")[0]
        seed_level = max(len(str(int(x[::-1]))) for x in expr.split("+"))
        target_level = env.parse_task(target, SEED).difficulty
        shifts[bucket].append(target_level - seed_level)
    return shifts


@pytest.mark.parametrize("bucket, shift_sign", [(0, -1), (4, +1)])
def test_curriculum_warm_start_follows_success(bucket, shift_sign):
    shifts = _warm_start_shifts(make_env("arithmetic", sim_warm_start="curriculum", warm_start_noise=0.0), 400)[bucket]
    assert shifts and shift_sign * sum(shifts) / len(shifts) > 0.5


def test_format_warm_start_is_the_default_and_its_levels_do_not_depend_on_the_bucket():
    env = make_env("arithmetic")
    assert env.sim_warm_start == "format"
    examples = env.warm_start_examples("simulator", 2000, seed=1)
    levels: dict[int, list[float]] = {b: [] for b in range(5)}
    for messages, target in examples:
        bucket = int(messages[0]["content"].rsplit(";p", 1)[1].rstrip(":"))
        levels[bucket].append(env.parse_task(target, SEED).difficulty)
    # every bucket sees the same spread of target levels (uniform over 1..6, less the level-1 targets
    # that would copy a held-out task), and the change against the seed's level has no slope over the buckets
    overall = sum(sum(ls) for ls in levels.values()) / sum(len(ls) for ls in levels.values())
    for b, ls in levels.items():
        assert len(ls) > 300 and set(ls) == {1, 2, 3, 4, 5, 6}
        assert abs(sum(ls) / len(ls) - overall) < 0.25
    import torch
    from genenv_pl.curriculum import conditioning_slope

    shifts = _warm_start_shifts(env)
    means = torch.tensor([sum(v) / len(v) for _, v in sorted(shifts.items())])
    assert abs(float(conditioning_slope(torch.arange(5), means))) < 0.1
    curriculum = _warm_start_shifts(make_env("arithmetic", sim_warm_start="curriculum"))
    means = torch.tensor([sum(v) / len(v) for _, v in sorted(curriculum.items())])
    assert float(conditioning_slope(torch.arange(5), means)) > 0.3  # the rule-teaching start: a clear slope


def test_both_warm_starts_share_one_tokenizer_corpus():
    # the agent (and its tokenizer) must be the same whichever simulator warm start is chosen
    assert make_env("arithmetic").tokenizer_corpus() == make_env("arithmetic", sim_warm_start="curriculum").tokenizer_corpus()
