"""API-Bank environment: tasks from dialogues, split, scoring, simulator validation, bad data."""
from __future__ import annotations

import copy
import glob
import json
import os
from pathlib import Path

import pytest

from genenv_pl.envs import make_env
from genenv_pl.envs.api_bank import TOOL_SEARCHER, APIBankEnv, canonical_value, split_bucket
from genenv_pl.envs.base import DataError, InvalidTask, Task
from genenv_pl.envs.toolcall import render_calls


@pytest.fixture(scope="module")
def env(data_root: str) -> APIBankEnv:
    return APIBankEnv(data_root=data_root)


@pytest.fixture(scope="module")
def input_env(data_root: str) -> APIBankEnv:
    return APIBankEnv(data_root=data_root, scoring="input")


@pytest.fixture(scope="module", params=["execute", "input"])
def any_env(request, env: APIBankEnv, input_env: APIBankEnv) -> APIBankEnv:
    return env if request.param == "execute" else input_env


def as_text(calls: list[dict]) -> str:
    return "<think>\nnext step\n</think>\n" + render_calls(calls)


def api_turns(data_root: str) -> list[tuple[str, dict]]:
    """(level/dialogue/index, API turn) for every API turn in the shipped dialogues."""
    out = []
    for level, folder in (("level-1", "level-1-given-desc"), ("level-2", "level-2-toolsearcher")):
        for path in sorted(glob.glob(os.path.join(data_root, "api-bank", "lv1-lv2-samples", folder, "*.jsonl"))):
            with open(path) as f:
                turns = [json.loads(line) for line in f if line.strip()]
            stem = os.path.basename(path)[:-6]
            out += [(f"{level}/{stem}/{i}", t) for i, t in enumerate(turns) if t["role"] == "API"]
    return out


def test_one_task_per_api_turn(env: APIBankEnv, data_root: str) -> None:
    turns = dict(api_turns(data_root))
    tasks = env.seed_tasks() + env.eval_tasks()
    assert sorted(t.id for t in tasks) == sorted(turns) and len(tasks) == 404
    assert {t.group for t in tasks} == {"level-1", "level-2"}


def test_shipped_calls_score_one(any_env: APIBankEnv, data_root: str) -> None:
    """Executed or compared by input, the gold (the executed input) and the call as written in the
    dialogue (string values, as upstream parses `[Api(key='value')]`) score 1 on every shipped turn."""
    env = any_env
    turns = dict(api_turns(data_root))
    for task in env.seed_tasks() + env.eval_tasks():
        written = {"name": turns[task.id]["api_name"], "parameters": turns[task.id]["param_dict"]}
        assert env.score(task, as_text([task.data["gold"]])) == {"accuracy": 1.0, "format_error": 0.0}
        assert env.score(task, as_text([written]))["accuracy"] == 1.0, task.id


def _perturbed(gold: dict) -> dict[str, dict]:
    out = {"wrong_api": {**gold, "name": gold["name"] + "X"},
           "extra_param": {**gold, "parameters": {**gold["parameters"], "zz": "1"}}}
    if gold["parameters"]:
        k = next(iter(gold["parameters"]))
        out["missing_param"] = {**gold, "parameters": {p: v for p, v in gold["parameters"].items() if p != k}}
        wrong = copy.deepcopy(gold)
        v = wrong["parameters"][k]
        wrong["parameters"][k] = (v + "x") if isinstance(v, str) else [v, "x"]
        out["wrong_value"] = wrong
    return out


def test_perturbed_calls_score_zero(any_env: APIBankEnv) -> None:
    env, counts = any_env, {}
    for task in env.seed_tasks() + env.eval_tasks():
        for kind, call in _perturbed(task.data["gold"]).items():
            if env.scoring == "execute" and call["name"] == "ToolSearcher" and kind == "wrong_value":
                continue  # upstream's ToolSearcher check compares the tool found, not the keywords (below)
            assert env.score(task, as_text([call])) == {"accuracy": 0.0, "format_error": 0.0}, (task.id, kind)
            counts[kind] = counts.get(kind, 0) + 1
    assert counts["wrong_value"] > 350 and counts["missing_param"] > 350


def test_execution_scores_results_not_spelling(env: APIBankEnv, input_env: APIBankEnv) -> None:
    """Executed, a call is right when its result is (by the API's upstream check); compared by input, only
    when its arguments equal the gold's."""
    def task_of(api: str):
        return next(t for t in env.seed_tasks() + env.eval_tasks()
                    if t.data["gold"]["name"] == api and "reference" not in t.data)

    search = task_of("ToolSearcher")
    other_words = {**search.data["gold"], "parameters": {"keywords": search.data["gold"]["parameters"]["keywords"] + " api"}}
    assert env.score(search, as_text([other_words]))["accuracy"] == 1.0  # the same tool found
    assert input_env.score(search, as_text([other_words]))["accuracy"] == 0.0
    stock = task_of("QueryStock")
    lower = {**stock.data["gold"], "parameters": {**stock.data["gold"]["parameters"],
                                                  "stock_code": stock.data["gold"]["parameters"]["stock_code"].lower()}}
    assert env.score(stock, as_text([lower]))["accuracy"] == 1.0  # upstream upper-cases the code
    balance = task_of("QueryBalance")  # a wrong value that executes to a different result
    wrong = {**balance.data["gold"], "parameters": {"token": "o8i7u6y5t4r3e2w1q0"}}  # another user's token
    assert wrong["parameters"] != balance.data["gold"]["parameters"]
    assert env.score(balance, as_text([wrong]))["accuracy"] == 0.0
    # the shipped turns execution cannot reproduce are scored by input, and listed
    assert len(env.input_scored) == 24 and input_env.input_scored == []


def test_level3_scenarios(data_root: str) -> None:
    env = APIBankEnv(data_root=data_root, levels=["level-3"])
    tasks = env.seed_tasks() + env.eval_tasks()
    # the 8 scenarios list 34 gold calls; 17 run cleanly, the rest follow a call that does not (a wrong
    # token in the file, a call that does not parse), each with its reason
    assert {t.group for t in tasks} == {"level-3"} and len(tasks) == 17 and len(env.level3_dropped) == 34 - 17
    assert all(env.score(t, as_text([t.data["gold"]]))["accuracy"] == 1.0 for t in tasks)
    # each step's history holds the scenario's earlier calls and the results of executing them
    last = max((t for t in tasks if t.id.startswith("level-3/Hotel Booking/")), key=lambda t: len(t.data["before"]))
    # QueryMeeting finds the meeting AddMeeting made: the scenario's calls run in one session
    assert [b[0] for b in last.data["before"]] == ["BookHotel", "GetUserToken", "AddAgenda", "AddMeeting", "QueryMeeting"]
    assert "Beijing Hilton Hotel" in last.data["messages"][0]["content"]
    assert env.level3_dropped["level-3/Shopping/1"] == "the gold call raises: The token is invalid."


def test_level3_tasks_do_not_depend_on_the_global_random_state(data_root: str) -> None:
    """Upstream's RegisterUser and AppointmentRegistration draw a new token or id at random; here each is drawn
    from a generator seeded by its call, so every build, and every rank, has the same level-3 tasks (a rank
    with other tasks would train on another epoch)."""
    import random

    builds = []
    for seed in (1, 2):
        random.seed(seed)
        env = APIBankEnv(data_root=data_root, levels=["level-3"])
        builds.append(([t.to_dict() for t in env.seed_tasks() + env.eval_tasks()], dict(env.level3_dropped)))
    assert builds[0] == builds[1] and builds[0][0]


@pytest.mark.parametrize("model,gold,equal", [
    ({"on": "True"}, {"on": True}, True),
    ({"code": "970420"}, {"code": 970420}, True),
    ({"who": "['John Smith', 'Jane Doe']"}, {"who": ["John Smith", "Jane Doe"]}, True),
    ({"who": '["John Smith", "Jane Doe"]'}, {"who": ["John Smith", "Jane Doe"]}, True),
    ({"time": " 2021-10-14 08:00:00 "}, {"time": "2021-10-14 08:00:00"}, True),
    ({"time": "2021-10-14 8:00:00"}, {"time": "2021-10-14 08:00:00"}, False),
    ({"name": "john"}, {"name": "John"}, False),
    ({"amount": 1.0}, {"amount": "1"}, True),
    ({"who": ["Jane Doe", "John Smith"]}, {"who": ["John Smith", "Jane Doe"]}, False),
])
def test_value_normalization(model: dict, gold: dict, equal: bool) -> None:
    assert (canonical_value(model) == canonical_value(gold)) is equal


def test_first_call_is_scored_and_format_errors(env: APIBankEnv) -> None:
    task = next(t for t in env.seed_tasks() if t.data["gold"]["name"] == "AddAlarm")
    gold, other = task.data["gold"], {"name": "GetUserToken", "parameters": {"username": "foo", "password": "bar"}}
    table = [
        (as_text([gold, other]), 1.0, 0.0),  # upstream reads the first [Api(...)] of the output
        (as_text([other, gold]), 0.0, 0.0),
        ("<tool_call>\n" + "AddAlarm(" + ", ".join(f"{k}={v!r}" for k, v in gold["parameters"].items())
         + ")\n</tool_call>", 1.0, 0.0),
        ("<response>Your alarm is set.</response>", 0.0, 1.0),
        ("", 0.0, 1.0),
        ('<tool_call>{"name": "AddAlarm", "parameters": {"time": </tool_call>', 0.0, 1.0),
    ]
    for text, accuracy, format_error in table:
        assert env.score(task, text) == {"accuracy": accuracy, "format_error": format_error}, text
        assert env.reward(task, text) == accuracy


def test_split(env: APIBankEnv, data_root: str) -> None:
    seed_ids, eval_ids = {t.id for t in env.seed_tasks()}, {t.id for t in env.eval_tasks()}
    assert seed_ids and eval_ids and not seed_ids & eval_ids
    dialogue = lambda task_id: task_id.rsplit("/", 1)[0]  # noqa: E731
    assert not {dialogue(i) for i in seed_ids} & {dialogue(i) for i in eval_ids}
    assert all(split_bucket(dialogue(i), 0) < 0.5 for i in eval_ids)
    again = APIBankEnv(data_root=data_root)
    assert [t.id for t in again.eval_tasks()] == [t.id for t in env.eval_tasks()]
    assert {t.id for t in APIBankEnv(data_root=data_root, split_seed=3).eval_tasks()} != eval_ids
    only_1 = APIBankEnv(data_root=data_root, levels=["level-1"], eval_fraction=0.0)
    assert only_1.eval_tasks() == [] and {t.group for t in only_1.seed_tasks()} == {"level-1"}
    with pytest.raises(ValueError, match="level-4"):
        APIBankEnv(data_root=data_root, levels=["level-4"])
    with pytest.raises(ValueError, match="data.env_args.scoring"):
        APIBankEnv(data_root=data_root, scoring="exact")


def test_tasks_are_json(env: APIBankEnv) -> None:
    for task in env.seed_tasks():
        assert Task.from_dict(json.loads(json.dumps(task.to_dict()))) == task
        assert task.difficulty == 1 + len(task.data["gold"]["parameters"])


def test_agent_prompt(env: APIBankEnv) -> None:
    level1 = next(t for t in env.seed_tasks() if t.group == "level-1" and t.data["gold"]["name"] == "AddAlarm")
    messages = env.agent_prompt(level1)
    system = messages[0]["content"]
    assert messages[0]["role"] == "system" and "2023" in system
    assert {t["name"] for t in level1.data["tools"]} == {"AddAlarm", "GetUserToken"}
    assert all(json.dumps(t, ensure_ascii=False) in system for t in level1.data["tools"])
    roles = [m["role"] for m in messages[1:]]
    assert all(a != b for a, b in zip(roles, roles[1:]))  # strictly alternating
    history = "\n".join(m["content"] for m in messages)
    assert '"name": "GetUserToken"' in history and "<tool_response>" in history and "z9x8c7v6b5n4m3q2w1" in history
    level2 = next(t for t in env.seed_tasks() if t.group == "level-2" and t.data["gold"]["name"] != "ToolSearcher")
    assert level2.data["tools"] == [TOOL_SEARCHER]
    assert level2.data["gold"]["name"] in "\n".join(m["content"] for m in env.agent_prompt(level2))


def test_catalog_schemas(env: APIBankEnv) -> None:
    """Every API called in the data has a schema that accepts its gold calls."""
    from genenv_pl.envs.toolcall import schema_problem

    for task in env.seed_tasks() + env.eval_tasks():
        schema = env.catalog[task.data["gold"]["name"]]
        assert schema_problem(schema) is None
        params = schema["parameters"]
        assert set(params["required"]) <= set(task.data["gold"]["parameters"]) <= set(params["properties"])


# ---- simulator ---------------------------------------------------------------------------------

def test_simulator_prompt_and_seed_copy(env: APIBankEnv, monkeypatch) -> None:
    monkeypatch.setattr(env, "sim_prompt", "rule")  # (tests/envs/test_sim_prompt.py covers both modes)
    for seed in (next(t for t in env.seed_tasks() if t.group == g) for g in ("level-1", "level-2")):
        messages = env.simulator_prompt(seed, 0.2)
        assert [m["role"] for m in messages] == ["system", "user"] and "easier" in messages[1]["content"]
        view = env._seed_view(seed.data)
        assert json.dumps(view, ensure_ascii=False) in messages[1]["content"]
        copy_of_seed = env.parse_task(json.dumps(view), seed)
        assert env.task_key(copy_of_seed) == env.task_key(seed)
        assert env.score(copy_of_seed, as_text(view["calls"]))["accuracy"] == 1.0


def test_parse_task_good_generation(env: APIBankEnv) -> None:
    seed = next(t for t in env.seed_tasks() if t.data["gold"]["name"] == "AddAlarm")
    text = "<think>easier: token given</think>\n" + json.dumps({
        "question": "User: Set an alarm for 7 am on 2023-03-02, my token is abc123.\nAI: Setting it now.",
        "tools": ["AddAlarm"],
        "calls": [{"name": "AddAlarm", "parameters": {"token": "abc123", "time": "2023-03-02 07:00:00"}}]})
    task = env.parse_task(text, seed)
    assert [m["role"] for m in task.data["messages"]] == ["user", "assistant"]
    assert task.group == seed.group and task.meta["seed_id"] == seed.id and env.task_key(task) != env.task_key(seed)
    call = {"name": "AddAlarm", "parameters": {"time": "2023-03-02 07:00:00", "token": "abc123"}}
    assert env.score(task, as_text([call]))["accuracy"] == 1.0
    assert env.score(task, as_text([{**call, "parameters": {"token": "abc123"}}]))["accuracy"] == 0.0
    json.dumps(task.to_dict())


def test_generated_gold_must_execute(env: APIBankEnv, input_env: APIBankEnv) -> None:
    """The executable checker: a generated gold call that upstream's argument conversion rejects (its list
    parser turns every ' into ", so a name with an apostrophe breaks it) is not a task; by input it is."""
    seed = next(t for t in env.seed_tasks() if t.data["gold"]["name"] == "AddMeeting")
    gold = {**seed.data["gold"], "parameters": {**seed.data["gold"]["parameters"], "attendees": ["Ann O'Neil"]}}
    text = json.dumps({"question": "User: book the review with Ann O'Neil", "tools": ["AddMeeting"], "calls": [gold]})
    with pytest.raises(InvalidTask) as err:
        env.parse_task(text, seed)
    assert err.value.reason == "gold_not_executable"
    assert input_env.score(input_env.parse_task(text, seed), as_text([gold]))["accuracy"] == 1.0


@pytest.mark.parametrize("calls,reason", [
    ([], "call_count"),
    ([{"name": "AddAlarm", "parameters": {"token": "t", "time": "x"}}] * 2, "call_count"),
    ([{"name": "AddAlarm", "parameters": {"token": "t"}}], "missing_required"),
    ([{"name": "AddAlarm", "parameters": {"token": "t", "time": "x", "repeat": "daily"}}], "unknown_param"),
    ([{"name": "AddAlarm", "parameters": {"token": "t", "time": 7}}], "bad_type"),
    ([{"name": "DeleteAlarm", "parameters": {"token": "t", "time": "x"}}], "unknown_function"),
])
def test_parse_task_bad_generations(env: APIBankEnv, calls: list, reason: str) -> None:
    seed = next(t for t in env.seed_tasks() if t.data["gold"]["name"] == "AddAlarm")
    text = json.dumps({"question": "User: wake me at 7", "tools": ["AddAlarm"], "calls": calls})
    with pytest.raises(InvalidTask) as err:
        env.parse_task(text, seed)
    assert err.value.reason == reason


def test_warm_start_examples(env: APIBankEnv) -> None:
    for prompt, target in env.warm_start_examples("agent", 2, seed=1):
        assert prompt[0]["role"] == "system" and "<tool_call>" in target
    for prompt, target in env.warm_start_examples("simulator", 2, seed=1):
        assert json.loads(target)["calls"]


# ---- malformed data ----------------------------------------------------------------------------

GOOD_LINES = [
    {"role": "User", "text": "Set an alarm at 8."},
    {"role": "API", "api_name": "AddAlarm", "param_dict": {"token": "t", "time": "08:00"},
     "result": {"api_name": "AddAlarm", "input": {"token": "t", "time": "08:00"}, "output": "success",
                "exception": None}},
]


def _dialogue(root: Path, lines: list, name: str = "AddAlarm-level-1-1.jsonl") -> None:
    for folder in ("level-1-given-desc", "level-2-toolsearcher"):
        (root / "api-bank" / "lv1-lv2-samples" / folder).mkdir(parents=True, exist_ok=True)
    path = root / "api-bank" / "lv1-lv2-samples" / "level-1-given-desc" / name
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))


@pytest.mark.parametrize("lines,match", [
    (['{"role": "User", "text": "hi"', GOOD_LINES[1]], r"AddAlarm-level-1-1\.jsonl: line 1 is not valid JSON"),
    ([GOOD_LINES[0], {"role": "Robot", "text": "beep"}], r"AddAlarm-level-1-1\.jsonl: line 2: unknown role"),
    ([GOOD_LINES[0], {"role": "API", "api_name": "AddAlarm", "result": {}}], r"line 2: API turn needs"),
    ([{"role": "User"}], r"line 1: User turn without 'text'"),
])
def test_malformed_data_raises(tmp_path: Path, lines: list, match: str) -> None:
    _dialogue(tmp_path, lines)
    with pytest.raises(DataError, match=match):
        APIBankEnv(data_root=str(tmp_path), levels=["level-1"], scoring="input")


def test_missing_data(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="api-bank"):
        APIBankEnv(data_root=str(tmp_path))
    _dialogue(tmp_path, GOOD_LINES)
    with pytest.raises(DataError, match="no dialogues"):
        APIBankEnv(data_root=str(tmp_path), levels=["level-2"], scoring="input")
    with pytest.raises(DataError, match="init_database.*scoring: input"):  # execution needs the database
        APIBankEnv(data_root=str(tmp_path), levels=["level-1"])


def test_tiny_data_without_catalog(tmp_path: Path) -> None:
    """Without data/all_apis.csv the schema is inferred from the calls alone."""
    _dialogue(tmp_path, GOOD_LINES)
    env = make_env("api_bank", data_root=str(tmp_path), levels=["level-1"], eval_fraction=0.0, scoring="input")
    (task,) = env.seed_tasks()
    assert task.data["tools"][0]["parameters"]["required"] == ["time", "token"]
    call = {"name": "AddAlarm", "parameters": {"token": "t", "time": "08:00"}}
    assert env.score(task, as_text([call])) == {"accuracy": 1.0, "format_error": 0.0}
