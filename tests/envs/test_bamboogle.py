"""Bamboogle: loading, split, answer parsing and scoring, simulator validation, bad input."""
import json

import pytest

from genenv_pl.envs import DataError, InvalidTask, make_env
from genenv_pl.envs.bamboogle import (BamboogleEnv, answer_with_search, parse_answer, parse_tool_call,
                                      split_bucket)


@pytest.fixture(scope="module")
def env(data_root):
    return make_env("bamboogle", data_root=data_root)


def test_loads_shared_data(env):
    seeds, evals = env.seed_tasks(), env.eval_tasks()
    assert len(seeds) + len(evals) == 100 and env.skipped == {}
    assert 30 <= len(evals) <= 70  # eval_fraction 0.5 of 100 rows
    first = {t.id: t for t in seeds + evals}["bamboogle-0"]
    assert first.data == {"question": "Who was president of the United States in the year that Citibank was founded?",
                          "answer": "james madison"}


def test_split_is_disjoint_and_stable(env, data_root):
    seed_ids = {t.id for t in env.seed_tasks()}
    eval_ids = {t.id for t in env.eval_tasks()}
    assert not seed_ids & eval_ids
    assert not {env.task_key(t) for t in env.seed_tasks()} & {env.task_key(t) for t in env.eval_tasks()}
    again = BamboogleEnv(data_root=data_root)
    assert {t.id for t in again.eval_tasks()} == eval_ids
    for t in env.eval_tasks():
        assert split_bucket(t.id, env.split_salt) < env.eval_fraction


@pytest.mark.parametrize("fraction, n_eval", [(0.0, 0), (1.0, 100)])
def test_split_extremes(data_root, fraction, n_eval):
    assert len(BamboogleEnv(data_root=data_root, eval_fraction=fraction).eval_tasks()) == n_eval


@pytest.mark.parametrize("text, answer, ok", [
    ("<think>Citibank 1812.</think><response>James Madison</response>", "James Madison", True),
    ("<think>x</think><response>a</response><response>James Madison</response>", "James Madison", True),
    ("<think>x</think>\n<response>James Madison", "James Madison", False),
    ("<think>long thoughts\nmore</think>\nJames Madison", "James Madison", False),
    ("I think...\nAnswer: James Madison", "James Madison", False),
    ("<think>never closed James Madison", "", False),
    ("", "", False),
    (None, "", False),
    ('<tool_call>{"name": "search", "parameters": {"query": "q"}}</tool_call>', "", False),
])
def test_parse_answer_is_tolerant(text, answer, ok):
    assert parse_answer(text) == (answer, ok)


@pytest.mark.parametrize("response, expected", [
    ("<response>James Madison</response>", {"accuracy": 1.0, "exact_match": 1.0, "f1": 1.0, "format_error": 0.0}),
    ("<response>the James Madison.</response>", {"accuracy": 1.0, "exact_match": 1.0, "f1": 1.0, "format_error": 0.0}),
    ("<response>Madison</response>", {"accuracy": 0.0, "exact_match": 0.0, "f1": 2 / 3, "format_error": 0.0}),
    ("James Madison", {"accuracy": 1.0, "exact_match": 1.0, "f1": 1.0, "format_error": 1.0}),
    ("<response></response>", {"accuracy": 0.0, "exact_match": 0.0, "f1": 0.0, "format_error": 0.0}),
    ("\x00\ufffd garbage <<<>>>", {"accuracy": 0.0, "exact_match": 0.0, "f1": 0.0, "format_error": 1.0}),
])
def test_score_table(env, response, expected):
    task = {t.id: t for t in env.seed_tasks() + env.eval_tasks()}["bamboogle-0"]
    got = env.score(task, response)
    assert got == pytest.approx(expected)
    assert env.reward(task, response) == pytest.approx(expected["f1"])
    assert (env.reward(task, response) >= env.success_threshold) == bool(expected["exact_match"])


def test_closed_book_and_search_prompts(data_root, env):
    """Rollouts and the single-step evaluation are one turn: no tool is offered there, with a backend or
    without; the search episode's first turn describes it."""
    task = env.eval_tasks()[0]
    assert "<tool_call>" not in env.agent_prompt(task)[0]["content"]
    searching = BamboogleEnv(data_root=data_root, search_tool=FakeSearch())
    assert searching.agent_prompt(task) == env.agent_prompt(task)
    system = searching.search_prompt(task)[0]["content"]
    assert '<tool_call>{"name": "search", "parameters": {"query":' in system and "<response>" in system


class FakeSearch:
    def __init__(self, answer="Citibank was founded in 1812."):
        self.answer, self.queries = answer, []

    def search(self, query):
        self.queries.append(query)
        return [self.answer, "other snippet"]


def test_search_loop_with_a_plugged_backend(data_root):
    env = BamboogleEnv(data_root=data_root, search_tool="tests.envs.test_bamboogle:FakeSearch",
                       search_tool_kwargs={"answer": "1812"})
    task = {t.id: t for t in env.seed_tasks() + env.eval_tasks()}["bamboogle-0"]
    seen = []

    def generate(messages):
        seen.append(messages)
        if len(seen) == 1:
            return ('<think>find year</think>'
                    '<tool_call>{"name": "search", "parameters": {"query": "Citibank founded"}}</tool_call>')
        return "<think>1812 -> Madison</think><response>James Madison</response>"

    transcript = answer_with_search(env, task, generate)
    assert env.search_tool.queries == ["Citibank founded"]
    assert "<tool_response>" in seen[1][-1]["content"] and "1812" in seen[1][-1]["content"]
    assert env.score(task, transcript)["exact_match"] == 1.0


def test_search_loop_stops_after_max_calls(data_root):
    env = BamboogleEnv(data_root=data_root, search_tool=FakeSearch())
    task = env.eval_tasks()[0]
    call = '<tool_call>{"name": "search", "parameters": {"query": "again"}}</tool_call>'
    transcript = answer_with_search(env, task, lambda m: call, max_calls=2)
    assert env.search_tool.queries == ["again", "again"] and transcript.count("<tool_call>") == 3


@pytest.mark.parametrize("text, query", [
    ('<tool_call>{"name": "search", "parameters": {"query": "x y"}}</tool_call>', "x y"),
    ('<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>', "x"),
    ('<tool_call>{"name": "lookup", "parameters": {"query": "x"}}</tool_call>', None),
    ("<tool_call>not json</tool_call>", None),
    ('<tool_call>{"name": "search", "parameters": {}}</tool_call>', None),
])
def test_parse_tool_call(text, query):
    assert parse_tool_call(text) == query


def test_play_runs_search_episodes_in_lockstep_and_scores_them(data_root, env):
    """`test`'s episodes (`play`): a player that searches once, then answers with the first snippet it was
    shown: questions answered from the backend score, the others do not; batches of 3 in lockstep."""
    golds = {t.data["question"]: t.data["answer"] for t in env.eval_tasks()}

    class Oracle:  # knows half of the answers
        def search(self, query):
            return [golds[query]] if sorted(golds).index(query) % 2 == 0 else ["no idea"]

    searching = BamboogleEnv(data_root=data_root, search_tool=Oracle())
    batches = []

    def act(chats):
        batches.append(len(chats))
        out = []
        for chat in chats:
            if chat[-1]["content"].startswith("<tool_response>"):
                snippet = chat[-1]["content"].split("[1] ", 1)[1].split("\n")[0]
                out.append(f"<think>found it</think><response>{snippet}</response>")
            else:
                question = chat[-1]["content"].removeprefix("Question: ")
                out.append(f'<tool_call>{{"name": "search", "parameters": {{"query": "{question}"}}}}</tool_call>')
        return out

    got = searching.play(act, limit=7, batch_size=3)
    first = sorted(t.data["question"] for t in env.eval_tasks()[:7])
    known = sum(sorted(golds).index(q) % 2 == 0 for q in first)
    assert got == {"exact_match": pytest.approx(known / 7), "f1": pytest.approx(known / 7), "format_error": 0.0,
                   "searches": 1.0, "questions": 7.0}
    assert batches == [3, 3, 3, 3, 1, 1]  # two turns a batch: ask, then answer
    assert env.play(act, limit=7) == {}  # no backend: no episodes


def test_bad_search_tool_spec(data_root):
    with pytest.raises(ValueError):
        BamboogleEnv(data_root=data_root, search_tool="no_colon_here")


GOOD = {"question": "Who founded the company that makes the iPhone?", "answer": "Steve Jobs",
        "hops": ["Which company makes the iPhone?", "Who founded Apple?"]}


def _gen(**change):
    obj = {**GOOD, **change}
    return json.dumps({k: v for k, v in obj.items() if v is not ...})


@pytest.mark.parametrize("text, reason", [
    ("no json here", "unparseable"),
    ("{'question': 'python dict'}", "unparseable"),
    (_gen(question=...), "missing_field"),
    (_gen(question="   "), "missing_field"),
    (_gen(answer=""), "missing_field"),
    (_gen(answer=None), "missing_field"),
    (_gen(answer=True), "missing_field"),
    (_gen(hops=...), "bad_hops"),
    (_gen(hops=["only one"]), "bad_hops"),
    (_gen(hops=["a", ""]), "bad_hops"),
    (_gen(question="Who? " * 100), "question_too_long"),
    (_gen(answer="a very long answer that goes on and on for many words"), "answer_too_long"),
    (_gen(question="Who was president of the United States in the year that Citibank was founded?"), "copy_of_seed"),
    (_gen(question="Who was the president of the United States in the year Citibank was founded?"), "copy_of_seed"),
    (_gen(question="Which company did Steve Jobs found?"), "answer_in_question"),
])
def test_parse_task_rejects(env, text, reason):
    seed = {t.id: t for t in env.seed_tasks() + env.eval_tasks()}["bamboogle-0"]
    with pytest.raises(InvalidTask) as err:
        env.parse_task(text, seed)
    assert err.value.reason == reason


def test_parse_task_rejects_eval_questions(env):
    held_out = env.eval_tasks()[0].data
    with pytest.raises(InvalidTask) as err:
        env.parse_task(_gen(question=held_out["question"], answer="zzz"), env.seed_tasks()[0])
    assert err.value.reason == "eval_leak"


@pytest.mark.parametrize("text", [
    _gen(),
    "Sure! ```json\n" + _gen() + "\n```",
    _gen(hops=[{"question": "Which company makes the iPhone?", "answer": "Apple"}, {"question": "Who founded Apple?"}]),
    _gen(answer=1976, question="In which year was the company that makes the iPhone founded?"),
])
def test_parse_task_accepts(env, text):
    seed = env.seed_tasks()[0]
    task = env.parse_task(text, seed)
    assert task.group == "generated" and task.meta["seed_id"] == seed.id
    assert len(task.data["hops"]) == 2 and task.data["answer"]
    json.dumps(task.to_dict())
    assert env.parse_task(text, seed).id == task.id  # same text, same id


def test_task_key_ignores_hops(env):
    seed = env.seed_tasks()[0]
    a = env.parse_task(_gen(), seed)
    b = env.parse_task(_gen(hops=["x?", "y?"]), seed)
    assert env.task_key(a) == env.task_key(b)


def _write(tmp_path, lines):
    folder = tmp_path / "bamboogle"
    folder.mkdir()
    (folder / "test.jsonl").write_text("\n".join(lines) + "\n")
    return str(tmp_path)


def _row(index, question="Q?", answer="A"):
    row = {"prompt": [{"role": "user", "content": question}], "reward_model": {"ground_truth": answer},
           "extra_info": {"index": index, "question": question, "answer": answer}}
    return row


def test_record_missing_a_field_is_skipped_and_counted(tmp_path):
    no_answer = _row(1)
    del no_answer["reward_model"], no_answer["extra_info"]["answer"]
    no_index = _row(2)
    del no_index["extra_info"]["index"]
    root = _write(tmp_path, [json.dumps(_row(0)), json.dumps(no_answer), json.dumps(no_index), json.dumps(_row(0))])
    env = BamboogleEnv(data_root=root, eval_fraction=0.0)
    assert [t.id for t in env.seed_tasks()] == ["bamboogle-0"]
    assert env.skipped == {"missing field 'answer'": 1, "missing field 'index'": 1, "duplicate index": 1}


@pytest.mark.parametrize("bad_line", ["{not json", "[1, 2]"])
def test_malformed_file_raises_data_error_naming_it(tmp_path, bad_line):
    root = _write(tmp_path, [json.dumps(_row(0)), bad_line])
    with pytest.raises(DataError, match=r"test\.jsonl: line 2"):
        BamboogleEnv(data_root=root)


def test_missing_data_folder(tmp_path):
    with pytest.raises(DataError, match="bamboogle"):
        BamboogleEnv(data_root=str(tmp_path))
