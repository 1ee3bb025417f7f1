"""BFCL environment: split, prompts, simulator validation, malformed data, and agreement of the
scorer with BFCL's own checkers (the `bfcl-eval` package, installed with --no-deps)."""
from __future__ import annotations

import copy
import itertools
import json
import os
import random
import re
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from genenv_pl.envs import make_env
from genenv_pl.envs.base import ConfigError, DataError, InvalidTask, Task
from genenv_pl.envs.bfcl import (
    ADDED_FUNCTIONS_PROMPT,
    AST_CATEGORIES,
    LANGUAGE_CATEGORIES,
    MULTI_TURN_CATEGORIES,
    SUPPORTED,
    BFCLEnv,
    split_bucket,
)
from genenv_pl.envs.toolcall import normalize_text, render_calls

# ---- the reference checkers ---------------------------------------------------------------------


def _load_reference_ast_checker():
    """bfcl-eval's ast_checker. Its module imports the model registry, which imports every vendor
    SDK (anthropic, openai, ...); the checker only reads one flag from it (underscore_to_dot, for
    models that rename dotted functions). Without those SDKs we register a one-entry registry for
    that import; the checker code itself runs unchanged."""
    try:
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
        return ast_checker, "gorilla-openfunctions-v2"
    except ImportError:
        pass
    name = "bfcl_eval.constants.model_config"
    registry = types.ModuleType(name)
    registry.MODEL_CONFIG_MAPPING = {"genenv": types.SimpleNamespace(underscore_to_dot=False)}
    sys.modules[name] = registry
    try:
        from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    finally:
        del sys.modules[name]
    return ast_checker, "genenv"


@pytest.fixture(scope="module")
def reference_checker():
    """(ast_checker, model name), loaded once: a second load would find the module cached with the
    one-entry registry and miss the real model name."""
    return _load_reference_ast_checker()


@pytest.fixture(scope="module")
def reference_ast(reference_checker):
    from bfcl_eval.constants.enums import Language

    checker, model_name = reference_checker

    def verdict(task: Task, calls: list[dict]) -> bool:
        out = [{c["name"]: c["parameters"]} for c in calls]
        d = task.data
        return checker(d["tools"], out, d["gold"], Language.PYTHON, d["category"], model_name)["valid"]

    return verdict


@pytest.fixture(scope="module")
def env() -> BFCLEnv:
    return BFCLEnv(categories=list(SUPPORTED))


def as_text(calls: list[dict]) -> str:
    return "<think>\nok\n</think>\n" + render_calls(calls)


def score(env: BFCLEnv, task: Task, calls: list[dict]) -> float:
    return env.score(task, as_text(calls) if calls else "<response>none</response>")["accuracy"]


# ---- perturbations ------------------------------------------------------------------------------

def _other_value(v: Any) -> Any:
    """A value of the same type that no gold list holds (checked by the callers' agreement)."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + 7919
    if isinstance(v, float):
        return v + 7919.5
    if isinstance(v, str):
        return v + "zq"  # letters: BFCL ignores case, spaces and ,./-_*^ only
    if isinstance(v, list):
        return v + (v[:1] or ["zq"])
    if isinstance(v, dict):
        return {**v, "zq": 1}
    return "zq"


def perturbations(calls: list[dict], tools: list[dict]) -> dict[str, list[dict]]:
    """Systematic wrong answers derived from a correct one (each must score 0)."""
    out: dict[str, list[dict]] = {"no_call": []}
    if not calls:
        return out
    c = copy.deepcopy(calls)
    c[0]["name"] += "_zq"
    out["wrong_function"] = c
    c = copy.deepcopy(calls)
    c[0]["parameters"]["zq_extra"] = 1
    out["extra_param"] = c
    for i, call in enumerate(calls):
        if call["parameters"]:
            k = next(iter(call["parameters"]))
            c = copy.deepcopy(calls)
            c[i]["parameters"][k] = _other_value(c[i]["parameters"][k])
            out["wrong_value"] = c
            break
    for i, call in enumerate(calls):
        tool = next(t for t in tools if t["name"] == call["name"])
        required = [r for r in tool["parameters"].get("required", []) if r in call["parameters"]]
        if required:
            c = copy.deepcopy(calls)
            del c[i]["parameters"][required[0]]
            out["missing_required"] = c
            break
    if len(calls) > 1:
        out["drop_call"] = copy.deepcopy(calls[:-1])
    return out


def fuzzed(calls: list[dict], rng: random.Random) -> list[dict]:
    """Random edits that are sometimes still correct (case, separators, int/float, types)."""
    def edit(v: Any) -> Any:
        options = [str(v), 1, 1.0, True, None, [v], {"a": v}, ""]
        if isinstance(v, str):
            options += [v.upper(), v.replace(" ", "-"), v.replace(" ", ""), f" {v} "]
        if isinstance(v, int) and not isinstance(v, bool):
            options.append(float(v))
        if isinstance(v, float) and v.is_integer():
            options.append(int(v))
        if isinstance(v, list):
            options += [v[::-1], [str(x) for x in v]]
        return rng.choice(options)

    c = copy.deepcopy(calls)
    for call in c:
        for k in list(call["parameters"]):
            if rng.random() < 0.5:
                call["parameters"][k] = edit(call["parameters"][k])
    return c


# ---- AST scorer vs bfcl-eval ----------------------------------------------------------------------

def test_ast_scorer_agrees_with_bfcl_eval(env: BFCLEnv, reference_ast) -> None:
    """Every AST gold answer, systematic perturbations of it and random edits: same verdict."""
    rng = random.Random(0)
    tasks = [t for t in env.seed_tasks() + env.eval_tasks() if t.group in AST_CATEGORIES]
    assert len(tasks) == 1880  # all AST entries shipped
    verdicts: dict[str, list[tuple[bool, bool]]] = {}
    for task in tasks:
        gold = env._gold_calls(task.data)
        cases = {"gold": gold, **perturbations(gold, task.data["tools"])}
        if len(gold) > 1:
            cases["reordered"] = gold[::-1]
        for j in range(3):
            cases[f"fuzz{j}"] = fuzzed(gold, rng)
        for kind, calls in cases.items():
            ours, ref = score(env, task, calls) == 1.0, reference_ast(task, calls)
            verdicts.setdefault(kind.rstrip("0123456789"), []).append((ours, ref))
            assert ours == ref, (task.id, kind, calls)
    # gold is correct except for 4 entries whose gold no answer satisfies (bfcl-eval agrees)
    assert sum(not o for o, _ in verdicts["gold"]) == 4
    for kind in ("no_call", "wrong_function", "extra_param", "wrong_value", "missing_required", "drop_call"):
        assert verdicts[kind] and not any(o for o, _ in verdicts[kind]), kind
    assert sum(o for o, _ in verdicts["reordered"]) >= len(verdicts["reordered"]) - 1  # order-free
    fuzz = [o for o, _ in verdicts["fuzz"]]
    assert 0 < sum(fuzz) < len(fuzz)  # the random edits hit both outcomes


# ---- Java and JavaScript vs bfcl-eval --------------------------------------------------------------

def source_edits(value: Any, rng: random.Random) -> Any:
    """Random rewrites of an argument's source text: other literal forms of the same value (quotes,
    suffixes, spacing), other types, and non-string values (BFCL wants every argument as a string)."""
    text = value if isinstance(value, str) else json.dumps(value)
    options = [text.upper(), f'"{text}"', f"'{text}'", text + "L", text + "f", text + "n", text.rstrip("Lfn"),
               text.replace('"', "'"), text.replace(", ", ","), text.replace("{", "{ ").replace("}", " }"),
               "true", "false", "1", "1.0", "-3", "null", "new int[]{1, 2}", '["a", "b"]', "{}",
               "new ArrayList<>()", "new HashMap<>()", 1, True, None, [text]]
    return rng.choice(options)


def test_java_and_javascript_scorer_agrees_with_bfcl_eval(env: BFCLEnv, reference_checker) -> None:
    """Every shipped simple_java / simple_javascript entry: BFCL's checker with Language.JAVA /
    JAVASCRIPT and the declared types, against ours on the gold written as source text, systematic
    perturbations and random rewrites of the text."""
    from bfcl_eval.constants.enums import Language

    checker, model_name = reference_checker
    language = {"simple_java": Language.JAVA, "simple_javascript": Language.JAVASCRIPT}
    rng = random.Random(0)
    tasks = [t for t in env.seed_tasks() + env.eval_tasks() if t.group in LANGUAGE_CATEGORIES]
    assert len(tasks) == 120  # all shipped entries: 80 Java, 40 JavaScript
    verdicts: dict[str, list[bool]] = {}
    for task in tasks:
        d = task.data
        # the agent's view: every parameter a string, the real type in its description
        assert all(p["type"] == "string" for t in d["tools"] for p in t["parameters"]["properties"].values())
        gold = env._gold_calls(d)
        assert all(isinstance(v, str) for c in gold for v in c["parameters"].values())
        cases = {"gold": gold, **perturbations(gold, d["tools"])}
        # BFCL's collection readers search the text, so a suffix would not change the value: change a word inside
        wrong = copy.deepcopy(gold)
        (k, text), = list(wrong[0]["parameters"].items())[:1]
        wrong[0]["parameters"][k] = re.sub(r"\w+", lambda m: m.group(0) + "zq", text, count=1)
        cases["wrong_value"] = wrong
        for j in range(6):
            c = copy.deepcopy(gold)
            for call in c:
                for k in list(call["parameters"]):
                    if rng.random() < 0.5:
                        call["parameters"][k] = source_edits(call["parameters"][k], rng)
            cases[f"fuzz{j}"] = c
        for kind, calls in cases.items():
            out = [{c["name"]: c["parameters"]} for c in calls]
            ref = checker(copy.deepcopy(d["typed_tools"]), out, d["gold"], language[d["category"]], d["category"],
                          model_name)["valid"]
            ours = score(env, task, calls) == 1.0
            assert ours == ref, (task.id, kind, calls)
            verdicts.setdefault(kind.rstrip("0123456789"), []).append(ours)
    # gold written as source text is correct except where BFCL's reader cannot produce the gold:
    # simple_java_64 (a HashMap gold whose value is not a list of options) and simple_java_65 (an
    # ArrayList of `any` read as strings against a gold holding booleans)
    assert sum(not ok for ok in verdicts["gold"]) == 2
    for kind in ("no_call", "wrong_function", "extra_param", "wrong_value", "missing_required"):
        assert verdicts[kind] and not any(verdicts[kind]), kind
    assert 0 < sum(verdicts["fuzz"]) < len(verdicts["fuzz"])  # the rewrites hit both outcomes


def test_java_source_text_is_read_as_bfcl_reads_it(env: BFCLEnv) -> None:
    """BFCL's reader, including its quirk: the elements of a Java Array of String keep their quotes."""
    from genenv_pl.envs.bfcl_languages import read_argument

    java = [("5L", {"type": "long"}, 5), ("5", {"type": "long"}, "5"), ("2.5f", {"type": "float"}, 2.5),
            ("true", {"type": "boolean"}, True), ("new int[]{1, 2}", {"type": "Array", "items": {"type": "integer"}}, [1, 2]),
            ('new String[]{"a"}', {"type": "Array", "items": {"type": "String"}}, ['"a"']),
            ("new String[]{a}", {"type": "Array", "items": {"type": "String"}}, ["a"]),
            ('new ArrayList<String>(Arrays.asList("a", "b"))', {"type": "ArrayList", "items": {"type": "String"}}, ["a", "b"]),
            ('new HashMap<String, String>() {{ put("k", "v"); }}', {"type": "HashMap"}, {"k": "v"})]
    for text, spec, value in java:
        assert read_argument(text, spec, "java")[0] == value, text
    js = [("'abc'", {"type": "String"}, "abc"), ("3.0", {"type": "float"}, 3.0), ("7n", {"type": "Bigint"}, 7),
          ('["a", "b"]', {"type": "array", "items": {"type": "String"}}, ["a", "b"]),
          ("{'method': 'GET', 'retry': true}", {"type": "dict"}, {"method": "GET", "retry": True})]
    for text, spec, value in js:
        assert read_argument(text, spec, "javascript")[0] == value, text


# ---- multi-turn scorer vs bfcl-eval ----------------------------------------------------------------

_model_names = itertools.count()


def _raw_rows(data_root: str, category: str) -> tuple[dict[str, dict], dict[str, list]]:
    base = Path(data_root) / "bfcl"
    with open(base / f"BFCL_v4_{category}.json") as f:
        entries = {r["id"]: r for r in map(json.loads, f)}
    with open(base / "possible_answer" / f"BFCL_v4_{category}.json") as f:
        gold = {r["id"]: r["ground_truth"] for r in map(json.loads, f)}
    return entries, gold


def _call_string(c: dict) -> str:
    return f"{c['name']}(" + ", ".join(f"{k}={v!r}" for k, v in c["parameters"].items()) + ")"


def _reference_turn(entry: dict, gold: list[list[str]], turn: int, calls: list[dict]) -> bool:
    """bfcl-eval's multi-turn verdict (execute on its simulated backends, compare state and
    results) for `calls` at `turn` after the gold turns before it."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    model = [[g] if g else [] for g in gold[:turn]] + [[[_call_string(c) for c in calls]] if calls else []]
    category = entry["id"].rsplit("_", 1)[0]
    # a fresh model name per check: bfcl-eval caches backend instances by name
    return multi_turn_checker(model, gold[: turn + 1], entry, category, f"genenv{next(_model_names)}")["valid"]


@pytest.mark.parametrize("category", MULTI_TURN_CATEGORIES)
def test_multi_turn_gold_scores_one_in_both(env: BFCLEnv, data_root: str, category: str) -> None:
    """Our parsed gold calls, written back as calls, pass bfcl-eval on every turn of every entry."""
    entries, gold = _raw_rows(data_root, category)
    tasks = [t for t in env.seed_tasks() + env.eval_tasks() if t.group == category]
    assert sum(len(g) for g in gold.values()) == len(tasks)  # one task per user turn
    by_entry: dict[str, list[Task]] = {}
    for task in tasks:
        assert score(env, task, task.data["gold"]) == 1.0, task.id
        by_entry.setdefault(task.id.rsplit("/turn", 1)[0], []).append(task)
    for rid, turns in by_entry.items():  # all turns in one run: the same checks, linear time
        last = turns[-1]
        model = [[[_call_string(c) for c in t.data["gold"]]] if t.data["gold"] else [] for t in turns]
        from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

        verdict = multi_turn_checker(model, gold[rid], entries[rid], category, f"genenv{next(_model_names)}")
        assert verdict["valid"] and len(turns) == len(gold[rid]) and last.meta["turn"] == len(turns) - 1, rid


def test_multi_turn_perturbations(env: BFCLEnv, data_root: str) -> None:
    """Ours rejects every perturbation. bfcl-eval compares backend states and results instead of
    calls, so it accepts a few (e.g. `ls(a=False)` when no hidden file exists); measured on
    multi_turn_long_context: 95-100% agreement per kind."""
    category = "multi_turn_long_context"
    entries, gold = _raw_rows(data_root, category)
    agree: dict[str, list[bool]] = {}
    for task in [t for t in env.seed_tasks() if t.group == category][::2]:  # half of them: time
        rid, turn = task.id.rsplit("/turn", 1)
        for kind, calls in perturbations(task.data["gold"], task.data["tools"]).items():
            if not task.data["gold"]:
                continue
            assert score(env, task, calls) == 0.0, (task.id, kind)
            agree.setdefault(kind, []).append(not _reference_turn(entries[rid], gold[rid], int(turn), calls))
    for kind, same in agree.items():
        assert sum(same) / len(same) >= 0.93, (kind, sum(same), len(same))


# ---- relevance and text-level scoring --------------------------------------------------------------

def test_relevance_and_irrelevance(env: BFCLEnv) -> None:
    irrelevant = next(t for t in env.seed_tasks() if t.group == "irrelevance")
    relevant = next(t for t in env.seed_tasks() if t.group == "live_relevance")
    call = render_calls([{"name": irrelevant.data["tools"][0]["name"], "parameters": {}}])
    broken = '<tool_call>{"name": "f", "parameters": {</tool_call>'
    no_call = "<think>none of these fit</think><response>I can't do that with these tools.</response>"
    table = [
        (irrelevant, no_call, 1.0, 0.0), (irrelevant, "Sorry, no.", 1.0, 0.0), (irrelevant, call, 0.0, 0.0),
        (irrelevant, broken, 0.0, 1.0),
        (relevant, render_calls([{"name": relevant.data["tools"][0]["name"], "parameters": {"x": 1}}]), 1.0, 0.0),
        (relevant, no_call, 0.0, 1.0), (relevant, broken, 0.0, 1.0),
    ]
    for task, text, accuracy, format_error in table:
        assert env.score(task, text) == {"accuracy": accuracy, "format_error": format_error}, (task.id, text)
        assert env.reward(task, text) == accuracy


def test_score_from_text_formats(env: BFCLEnv) -> None:
    task = next(t for t in env.seed_tasks() if t.group == "parallel")
    gold = env._gold_calls(task.data)
    python_style = "<tool_call>[" + ", ".join(_call_string(c) for c in gold) + "]</tool_call>"
    qwen_style = "\n".join('<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'
                           % (c["name"], json.dumps(c["parameters"])) for c in gold)
    for text in (as_text(gold), python_style, qwen_style, as_text(gold[::-1]), as_text(gold)[:-len("</tool_call>")]):
        assert env.score(task, text) == {"accuracy": 1.0, "format_error": 0.0}, text
    for text in ("", "I would call the functions.", "<tool_call>oops</tool_call>"):
        assert env.score(task, text) == {"accuracy": 0.0, "format_error": 1.0}, text


# ---- split -------------------------------------------------------------------------------------

def test_split_is_disjoint_deterministic_and_by_entry(env: BFCLEnv, data_root: str) -> None:
    seed_ids = {t.id for t in env.seed_tasks()}
    eval_ids = {t.id for t in env.eval_tasks()}
    assert seed_ids and eval_ids and not seed_ids & eval_ids
    assert len(seed_ids) == len(env.seed_tasks()) and len(eval_ids) == len(env.eval_tasks())
    entry = lambda task_id: task_id.split("/turn")[0]  # noqa: E731
    assert not {entry(i) for i in seed_ids} & {entry(i) for i in eval_ids}  # dialogues stay whole
    assert all(split_bucket(entry(i), 0) < 0.5 for i in eval_ids)
    assert 0.4 < len(eval_ids) / (len(seed_ids) + len(eval_ids)) < 0.6
    again = BFCLEnv(data_root=data_root, categories=list(SUPPORTED))
    assert [t.id for t in again.eval_tasks()] == [t.id for t in env.eval_tasks()]
    other = BFCLEnv(categories=["simple_python"], split_seed=1)
    assert {t.id for t in other.eval_tasks()} != {t.id for t in env.eval_tasks() if t.group == "simple_python"}
    assert BFCLEnv(categories=["parallel"], eval_fraction=0.0).eval_tasks() == []
    assert BFCLEnv(categories=["parallel"], eval_fraction=1.0).seed_tasks() == []


def test_a_validation_split_is_carved_from_the_held_out_half_and_leaves_the_seeds_alone() -> None:
    """docs/results/protocol.md's split: a third of the held-out entries (by a second, salted hash) for
    validation, the rest the test split; seeds, the requests a generation may not copy and the warm start's
    examples (and so the cached warm starts) stay as they were."""
    from genenv_pl.datamodule import GenEnvDataModule

    args = {"categories": ["simple_python", "multiple"], "simulator_writes": "request", "sim_prompt": "rule"}
    whole, split = BFCLEnv(**args), BFCLEnv(**args, val_fraction=1 / 3)
    val, test = {t.id for t in split.val_tasks()}, {t.id for t in split.eval_tasks()}
    assert (len(split.seed_tasks()), len(val), len(test)) == (241, 76, 163)
    assert not val & test and val | test == {t.id for t in whole.eval_tasks()}
    assert all(split_bucket(i, "validation:0") < 1 / 3 for i in val)
    assert [t.id for t in split.seed_tasks()] == [t.id for t in whole.seed_tasks()]
    assert split._known_requests == whole._known_requests
    for role in ("agent", "simulator"):
        assert split.warm_start_examples(role, 64, 0) == whole.warm_start_examples(role, 64, 0)
    assert [t.id for t in whole.val_tasks()] == [t.id for t in whole.eval_tasks()]  # no split: validate on held-out
    # fit validates on the validation split, test scores the test split
    dm = GenEnvDataModule(env="bfcl", env_args={**args, "val_fraction": 1 / 3})
    assert {t.id for b in dm.val_dataloader() for t in b.tasks} == val
    assert {t.id for b in dm.test_dataloader() for t in b.tasks} == test
    with pytest.raises(ConfigError, match="val_fraction"):
        BFCLEnv(**args, val_fraction=1.0)


def test_default_and_registry(data_root: str) -> None:
    env = make_env("bfcl", data_root=data_root)
    assert {t.group for t in env.seed_tasks() + env.eval_tasks()} == {"multi_turn_long_context"}
    with pytest.raises(ValueError, match="simple_jawa"):
        BFCLEnv(categories=["simple_jawa"])


def test_extra_seed_categories_add_seeds_and_no_held_out_items() -> None:
    base = BFCLEnv(categories=["simple_python"])
    more = BFCLEnv(categories=["simple_python"], extra_seed_categories=["live_simple"])
    live = BFCLEnv(categories=["live_simple"])
    assert [t.id for t in more.eval_tasks()] == [t.id for t in base.eval_tasks()]
    assert [t.id for t in more.seed_tasks()] == [t.id for t in base.seed_tasks() + live.seed_tasks()]
    assert {t.group for t in more.seed_tasks()} == {"simple_python", "live_simple"}
    short = BFCLEnv(categories=["simple_python"], extra_seed_categories=["live_simple"], extra_seed_max_chars=1500)
    chars = {t.id: sum(len(m["content"]) for m in live.agent_prompt(t)) for t in live.seed_tasks()}
    assert [t.id for t in short.seed_tasks()] == [t.id for t in base.seed_tasks()] + [i for i, n in chars.items() if n <= 1500]
    assert 0 < sum(n <= 1500 for n in chars.values()) < len(chars)
    with pytest.raises(ConfigError, match="extra_seed_categories.*simple_python"):
        BFCLEnv(categories=["simple_python"], extra_seed_categories=["simple_python"])
    with pytest.raises(ConfigError, match="data.env_args.extra_seed_categories"):
        BFCLEnv(categories=["simple_python"], extra_seed_categories=["web_search"])


@pytest.mark.parametrize("category, why", [("memory", "live memory backend"), ("web_search", "live web search")])
def test_agentic_categories_are_refused_with_the_reason(category: str, why: str) -> None:
    with pytest.raises(ConfigError) as refused:
        BFCLEnv(categories=["simple_python", category])
    message = str(refused.value)
    assert category in message and why in message and "\n" not in message


def test_tasks_are_json_and_well_formed(env: BFCLEnv) -> None:
    for task in env.seed_tasks()[::25]:
        restored = Task.from_dict(json.loads(json.dumps(task.to_dict())))
        assert restored == task and task.difficulty >= 1.0 and task.group in SUPPORTED


# ---- prompts -------------------------------------------------------------------------------------

def test_agent_prompt_single_turn(env: BFCLEnv) -> None:
    task = next(t for t in env.seed_tasks() if t.group == "live_simple" and t.data["context"])
    messages = env.agent_prompt(task)
    assert messages[0]["role"] == "system" and task.data["context"] in messages[0]["content"]
    assert json.dumps(task.data["tools"][0], ensure_ascii=False) in messages[0]["content"]
    assert "<tool_call>" in messages[0]["content"] and messages[-1]["role"] == "user"
    assert [m["role"] for m in messages[1:]] == ["user"]


def test_agent_prompt_multi_turn_history_and_missed_functions(env: BFCLEnv, data_root: str) -> None:
    entries, gold = _raw_rows(data_root, "multi_turn_miss_func")
    tasks = {t.id: t for t in env.seed_tasks() + env.eval_tasks() if t.group == "multi_turn_miss_func"}
    rid, entry = next(iter(entries.items()))
    (turn, names), = entry["missed_function"].items()
    turn = int(turn)
    before, at = tasks[f"{rid}/turn{turn - 1}"], tasks[f"{rid}/turn{turn}"]
    assert not set(names) & {t["name"] for t in before.data["tools"]}
    assert set(names) <= {t["name"] for t in at.data["tools"]}
    messages = env.agent_prompt(at)
    assert messages[-1] == {"role": "user", "content": ADDED_FUNCTIONS_PROMPT}
    roles = [m["role"] for m in messages]
    assert roles == ["system"] + ["user", "assistant"] * turn + ["user"]
    assert "Initial state" in messages[0]["content"]
    first_gold = tasks[f"{rid}/turn0"].data["gold"]
    assert messages[2]["content"] == render_calls(first_gold)  # gold history, not model output


# ---- simulator --------------------------------------------------------------------------------------

def _seed(env: BFCLEnv, group: str) -> Task:
    return next(t for t in env.seed_tasks() if t.group == group and env._gold_calls(t.data))


def test_simulator_prompt(env: BFCLEnv, monkeypatch) -> None:
    monkeypatch.setattr(env, "sim_prompt", "rule")  # (tests/envs/test_sim_prompt.py covers both modes)
    seed = _seed(env, "simple_python")
    messages = env.simulator_prompt(seed, 0.9)
    assert [m["role"] for m in messages] == ["system", "user"]
    view = json.loads(messages[1]["content"].split("\n", 1)[1].split("\n\n")[0])
    assert view["calls"] == env._gold_calls(seed.data) and view["question"] in messages[1]["content"]
    assert "harder" in messages[1]["content"] and "easier" in env.simulator_prompt(seed, 0.1)[1]["content"]
    assert "unknown" in env.simulator_prompt(seed, None)[1]["content"]
    long_seed = _seed(env, "multi_turn_base")
    assert len(env.simulator_prompt(long_seed, 0.5)[1]["content"]) < len(env.agent_prompt(long_seed)[0]["content"])


def test_parse_task_good_generations(env: BFCLEnv) -> None:
    seed = _seed(env, "simple_python")
    tool = seed.data["tools"][0]
    gold = env._gold_calls(seed.data)[0]
    # 1) a copy of the seed's request (any layout): rejected, it teaches nothing new
    copy_of_seed = json.dumps({"question": "  " + env._question(seed.data).upper(), "tools": [tool["name"]], "calls": [gold]})
    with pytest.raises(InvalidTask) as err:
        env.parse_task(copy_of_seed, seed)
    assert err.value.reason == "copies_seed"
    # 2) a new function with two parallel calls, in prose and fences
    new_tool = {"name": "convert_currency", "description": "Convert money.", "parameters": {
        "type": "dict", "properties": {"amount": {"type": "float"}, "to": {"type": "string"},
                                       "round": {"type": "boolean", "default": False}},
        "required": ["amount", "to"]}}
    calls = [{"name": "convert_currency", "parameters": {"amount": 10, "to": "EUR"}},
             {"name": "convert_currency", "parameters": {"amount": 2.5, "to": "JPY"}}]
    text = "<think>harder: two calls</think>\n```json\n" + json.dumps(
        {"question": "Convert 10 USD to EUR and 2.5 USD to JPY.", "tools": [new_tool, tool["name"]], "calls": calls}
    ) + "\n```"
    task = env.parse_task(text, seed)
    assert task.data["mode"] == "parallel" and task.group == seed.group and task.difficulty == 6.0
    assert env.task_key(task) != env.task_key(seed)
    json.dumps(task.to_dict())
    assert env.score(task, as_text(calls[::-1]))["accuracy"] == 1.0
    assert env.score(task, as_text([*calls[:1], {**calls[1], "parameters": {"amount": 2.5, "to": "jpy ",
                                                                             "round": False}}]))["accuracy"] == 1.0
    assert env.score(task, as_text(calls[:1]))["accuracy"] == 0.0
    assert env.score(task, as_text([calls[0], {**calls[1], "parameters": {"amount": 3, "to": "JPY"}}]))[
        "accuracy"] == 0.0
    # 3) no listed function fits: an irrelevance task
    none = env.parse_task(json.dumps({"question": "Tell me a joke.", "tools": [tool["name"]], "calls": []}), seed)
    assert none.data["mode"] == "irrelevance" and env.score(none, "<response>No.</response>")["accuracy"] == 1.0


def test_parse_task_from_multi_turn_seed(env: BFCLEnv) -> None:
    seed = _seed(env, "multi_turn_long_context")
    calls = env._gold_calls(seed.data)
    text = json.dumps({"question": "Please do it again.", "tools": sorted({c["name"] for c in calls}), "calls": calls})
    task = env.parse_task(text, seed)
    assert task.data["mode"] == "sequence" and task.data["context"] == seed.data["context"]
    assert env.score(task, as_text(calls))["accuracy"] == 1.0
    if len(calls) > 1 and calls != calls[::-1]:
        assert env.score(task, as_text(calls[::-1]))["accuracy"] == 0.0  # order matters here


@pytest.mark.parametrize("generation,reason", [
    ("I made the task harder by adding units.", "unparseable"),
    ('{"question": "", "tools": ["{tool}"], "calls": []}', "bad_question"),
    ('{"question": "q", "tools": ["no_such_function"], "calls": []}', "unknown_tool"),
    ('{"question": "q", "tools": ["{tool}"], "calls": [{"name": "other", "parameters": {}}]}', "unknown_function"),
    ('{"question": "q", "tools": ["{tool}"], "calls": [{"name": "{tool}", "parameters": {}}]}', "missing_required"),
    ('{"question": "q", "tools": ["{tool}"], "calls": [{"name": "{tool}", "parameters": {gold+zz}}]}',
     "unknown_param"),
])
def test_parse_task_bad_generations(env: BFCLEnv, generation: str, reason: str) -> None:
    seed = _seed(env, "simple_python")
    gold_plus = {**env._gold_calls(seed.data)[0]["parameters"], "zz": 1}
    text = generation.replace("{tool}", seed.data["tools"][0]["name"]).replace("{gold+zz}", json.dumps(gold_plus))
    with pytest.raises(InvalidTask) as err:
        env.parse_task(text, seed)
    assert err.value.reason == reason


def test_parse_task_bad_type(env: BFCLEnv) -> None:
    seed = next(t for t in env.seed_tasks() if t.group == "simple_python" and any(
        s["type"] == "integer" for s in t.data["tools"][0]["parameters"]["properties"].values()))
    tool = seed.data["tools"][0]
    pname = next(p for p, s in tool["parameters"]["properties"].items() if s["type"] == "integer")
    call = env._gold_calls(seed.data)[0]
    bad = {"name": tool["name"], "parameters": {**call["parameters"], pname: "seven"}}
    with pytest.raises(InvalidTask) as err:
        env.parse_task(json.dumps({"question": "q", "tools": [tool["name"]], "calls": [bad]}), seed)
    assert err.value.reason == "bad_type"


def test_warm_start_examples(env: BFCLEnv) -> None:
    agent = env.warm_start_examples("agent", 3, seed=0)
    assert len(agent) == 3 and all("<tool_call>" in target or "<response>" in target for _, target in agent)
    for prompt, target in env.warm_start_examples("simulator", 3, seed=0):
        json.loads(target)


def test_generated_copy_of_an_evaluation_item_is_rejected(env: BFCLEnv) -> None:
    """A generation that repeats a held-out request would leak the evaluation set into training."""
    seed = _seed(env, "simple_python")
    held_out = next(t for t in env.eval_tasks() if t.group == "simple_python")
    text = json.dumps({"question": env._question(held_out.data), "tools": [seed.data["tools"][0]["name"]], "calls": []})
    with pytest.raises(InvalidTask) as err:
        env.parse_task(text, seed)
    assert err.value.reason == "copies_eval"


# ---- request-only simulator mode ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def request_env() -> BFCLEnv:
    return BFCLEnv(categories=["simple_python", "multiple"], simulator_writes="request")


def test_request_mode_prompt_and_good_generation(request_env: BFCLEnv) -> None:
    env = request_env
    seed = _seed(env, "multiple")
    messages = env.simulator_prompt(seed, 0.5)
    assert "do not write them" in messages[0]["content"] and '"tools"' not in messages[0]["content"].split("Rules")[0]
    gold = env._gold_calls(seed.data)[0]
    question = env._question(seed.data) + " A brand new request, please."  # it states the seed's values
    text = "Sure!\n```json\n" + json.dumps({"question": question, "calls": [gold]}) + "\n```"
    task = env.parse_task(text, seed)
    # the task keeps every seed function (distractors included) and scores with BFCL's rules
    assert task.data["tools"] == seed.data["tools"] and task.data["mode"] == "multiple"
    assert task.data["messages"] == [{"role": "user", "content": question}]
    assert env.score(task, as_text([gold]))["accuracy"] == 1.0
    other = next((t["name"] for t in seed.data["tools"] if t["name"] != gold["name"]), None)
    if other is not None:
        assert env.score(task, as_text([{**gold, "name": other}]))["accuracy"] == 0.0
    two = env.parse_task(json.dumps({"question": question + " Twice.", "calls": [gold, gold]}), seed)
    assert two.data["mode"] == "parallel"


SEED_Q = "Distance from New York, USA to Miami, USA in 2022, at most 8 stops, 200 miles a day, 5% slower."
SEED_GOLD = {"start": ["New York, USA", "New York"], "end": ["Miami, USA", "Miami", "Miami, FL"],
             "year": [2022], "stops": [8, ""], "pace": [200.0], "unit": ["", "km"], "toll": [True], "slower": [0.05]}


@pytest.mark.parametrize("params,question,unstated", [
    ({"year": 2023}, "... Miami, USA in 2023 ...", None),  # changed and stated
    ({"year": 2023}, "... Miami, USA in 2022 ...", "year=2023"),  # changed in the call only
    ({"end": "Miami, USA"}, "to Los Angeles, USA", "end='Miami, USA'"),  # changed in the request only
    ({"end": "Miami"}, "to Miami, FL", None),  # kept: any of the seed's options may be stated
    ({"end": "Orlando"}, "to orlando", None),  # case-insensitive
    ({"end": " Orlando "}, "to Orlando.", None),  # stray spaces in the value
    ({"pace": 150.0}, "150 miles a day", None),  # 150.0 written as 150
    ({"stops": 2}, "at most 20 stops", "stops=2"),  # not inside a longer number
    ({"unit": "km"}, "in miles", None),  # optional, unstated in the seed, kept at the seed's value
    ({"unit": "mi"}, "in mi", None),  # optional, unstated in the seed, changed and stated
    ({"unit": "mi"}, "in miles", "unit='mi'"),  # optional, unstated in the seed, changed without a word
    ({"ferry": "yes"}, "no ferries", "ferry='yes'"),  # not in the seed's gold at all: as optional
    ({"slower": 0.07}, "7% slower", None),  # required, and not written as such in the seed: not checked
    ({"toll": False}, "no tolls", None),  # booleans are not checked
    ({"start": "A", "stops": [1, 2]}, "from A", None),  # nor lists
    ({"year": 2023, "stops": 9}, "in 2023, 8 stops", "stops=9"),
])
def test_unstated_change(params: dict, question: str, unstated: str | None) -> None:
    """A request-mode variation's gold must agree with its own request on what the seed's request states."""
    from genenv_pl.envs.bfcl import unstated_change

    assert unstated_change({"name": "f", "parameters": params}, SEED_GOLD, SEED_Q, question) == unstated
    assert unstated_change({"name": "f", "parameters": params}, None, SEED_Q, question) is None


SCHEMA = [{"name": "f", "description": "", "parameters": {"type": "dict", "properties": {
    "start": {"type": "string"}, "end": {"type": "string"}, "year": {"type": "integer"},
    "stops": {"type": "integer", "default": 8}, "pace": {"type": "float"},
    "unit": {"type": "string", "default": "km"}, "toll": {"type": "boolean"}}, "required": ["start", "end"]}}]


@pytest.mark.parametrize("params,expected", [
    # kept values keep every option of the seed; changed ones accept only themselves
    ({"start": "New York", "end": "Orlando"}, {"start": SEED_GOLD["start"], "end": ["Orlando"]}),
    ({"start": "new york, usa", "end": "Miami"}, {"start": SEED_GOLD["start"], "end": SEED_GOLD["end"]}),
    ({"start": "A", "end": "B", "year": 2022, "pace": 200}, {"year": [2022], "pace": [200.0]}),
    # left out: the seed's options when the seed may leave it out, else omit-or-default as without a seed
    ({"start": "A", "end": "B"}, {"stops": [8, ""], "unit": ["", "km"], "year": [""], "toll": [""]}),
    ({"start": "A", "end": "B", "stops": 3, "toll": True}, {"stops": [3], "toll": [True]}),
])
def test_generated_gold_inherits_the_seeds_options(params: dict, expected: dict) -> None:
    """Without the seed, a variation is stricter than its seed: an agent that answers as BFCL accepts
    ("Miami, FL", an optional argument left out) would score 0 on it."""
    from genenv_pl.envs.bfcl import _answer_from_call

    allowed = _answer_from_call({"name": "f", "parameters": params}, SCHEMA, SEED_GOLD)["f"]
    assert {k: allowed[k] for k in expected} == expected
    alone = _answer_from_call({"name": "f", "parameters": params}, SCHEMA)["f"]
    assert alone["start"] == [params["start"]]
    assert alone["stops"] == ([params["stops"]] if "stops" in params else ["", 8])


def test_request_mode_gold_follows_the_seed(request_env: BFCLEnv) -> None:
    """Through parse_task, on the warm start's variations: arguments the variation kept accept every
    spelling the seed accepts; the same call under a request that states another number for one of
    its arguments is counted as `unstated_value`."""
    from genenv_pl.envs.bfcl import value_variation

    env = request_env
    kept = rejected = 0
    for seed in env.seed_tasks():
        v = value_variation(seed.data, random.Random(0))
        if v is None or len(seed.data["gold"]) != 1:
            continue
        question, calls = v
        if normalize_text(question) in env._known_requests:
            continue
        task = env.parse_task(json.dumps({"question": question, "calls": calls}), seed)
        ((name, options),), ((_, allowed),) = seed.data["gold"][0].items(), task.data["gold"][0].items()
        for pname, value in calls[0]["parameters"].items():
            if value in options.get(pname, []) and not isinstance(value, bool):
                assert allowed[pname] == options[pname]
                kept += 1
        for pname, value in calls[0]["parameters"].items():
            literal = re.compile(r"(?<![\w.])" + re.escape(str(value)) + r"(?![\w]|\.\d)")
            if type(value) is int and len(literal.findall(question)) == 1:
                other = literal.sub(str(value + 1), question)
                with pytest.raises(InvalidTask) as err:
                    env.parse_task(json.dumps({"question": other, "calls": calls}), seed)
                assert err.value.reason in ("unstated_value", "copies_seed", "copies_eval")
                rejected += err.value.reason == "unstated_value"
                break
    assert kept >= 50 and rejected >= 50


def _enum_seed(env: BFCLEnv) -> tuple[Task, str, dict]:
    for t in env.seed_tasks():
        call = (env._gold_calls(t.data) or [None])[0]
        tool = next((x for x in t.data["tools"] if call and x["name"] == call["name"]), None)
        for pname, spec in (tool or {}).get("parameters", {}).get("properties", {}).items():
            if spec.get("enum") and spec.get("type") == "string":
                return t, pname, call
    raise AssertionError("no seed with a string enum")


@pytest.mark.parametrize("case,reason", [
    ("prose", "unparseable"), ("empty_question", "bad_question"), ("no_call", "no_call"),
    ("calls_not_list", "bad_call"), ("other_function", "unknown_function"), ("missing", "missing_required"),
    ("extra", "unknown_param"), ("type", "bad_type"), ("enum", "bad_type"), ("copy", "copies_seed"),
    ("eval_copy", "copies_eval"),
])
def test_request_mode_bad_generations(request_env: BFCLEnv, case: str, reason: str) -> None:
    """Checked against the seed's JSON schemas; each way of failing is counted under its own reason."""
    env = request_env
    seed, enum_param, enum_call = _enum_seed(env)
    call = env._gold_calls(seed.data)[0]
    tool = next(x for x in seed.data["tools"] if x["name"] == call["name"])
    required = tool["parameters"]["required"]
    typed = {p: s for p, s in tool["parameters"]["properties"].items() if s["type"] in ("string", "integer")}
    pname = next(iter(typed))
    wrong = 7 if typed[pname]["type"] == "string" else "seven"
    obj: Any = {"question": "Something new.", "calls": [call]}
    if case == "prose":
        obj = "I would ask for the weather."
    elif case == "empty_question":
        obj["question"] = " "
    elif case == "no_call":
        obj["calls"] = []
    elif case == "calls_not_list":
        obj["calls"] = "get it"
    elif case == "other_function":
        obj["calls"] = [{"name": "no_such_function", "parameters": {}}]
    elif case == "missing":
        obj["calls"] = [{"name": call["name"], "parameters": {k: v for k, v in call["parameters"].items() if k != required[0]}}]
    elif case == "extra":
        obj["calls"] = [{"name": call["name"], "parameters": {**call["parameters"], "zz_unknown": 1}}]
    elif case == "type":
        obj["calls"] = [{"name": call["name"], "parameters": {**call["parameters"], pname: wrong}}]
    elif case == "enum":
        obj["calls"] = [{"name": enum_call["name"], "parameters": {**enum_call["parameters"], enum_param: "not-an-allowed-value"}}]
    elif case == "copy":
        obj["question"] = env._question(seed.data)
    elif case == "eval_copy":
        obj["question"] = env._question(env.eval_tasks()[0].data)
    text = obj if isinstance(obj, str) else json.dumps(obj)
    with pytest.raises(InvalidTask) as err:
        env.parse_task(text, seed)
    assert err.value.reason == reason


def test_request_mode_warm_start_variations_are_valid_new_tasks(request_env: BFCLEnv) -> None:
    """Every seed that has a variation: the variation parses back through the simulator's own path,
    asks something else than the seed, and its calls score 1 on the task it defines."""
    from genenv_pl.envs.bfcl import value_variation

    env = request_env
    n = 0
    for seed in env.seed_tasks():
        for r in range(3):
            v = value_variation(seed.data, random.Random(r))
            if v is None:
                continue
            question, calls = v
            if " ".join(question.lower().split()) in env._known_requests:  # landed on another seed's request
                with pytest.raises(InvalidTask):
                    env.parse_task(json.dumps({"question": question, "calls": calls}), seed)
                continue
            task = env.parse_task(json.dumps({"question": question, "calls": calls}), seed)
            assert question != env._question(seed.data) and calls != env._gold_calls(seed.data)
            assert env.score(task, as_text(calls))["accuracy"] == 1.0
            assert env.score(task, as_text(env._gold_calls(seed.data)))["accuracy"] == 0.0
            n += 1
    assert n >= 300  # about half of the 241 seeds state a number or an enum value in their request
    examples = env.warm_start_examples("simulator", 20, seed=0)
    assert len(examples) == 20
    for messages, target in examples:
        assert set(json.loads(target)) == {"question", "calls"} and "do not write them" in messages[0]["content"]


def test_simulator_writes_is_checked(data_root: str) -> None:
    with pytest.raises(ValueError, match="simulator_writes"):
        BFCLEnv(categories=["simple_python"], simulator_writes="tools")


# ---- malformed data ---------------------------------------------------------------------------------

SIMPLE = {"id": "simple_python_0", "question": [[{"role": "user", "content": "Area of a 10 by 5 triangle?"}]],
          "function": [{"name": "area", "description": "", "parameters": {
              "type": "dict", "properties": {"base": {"type": "integer"}, "height": {"type": "integer"}},
              "required": ["base", "height"]}}]}
ANSWER = {"id": "simple_python_0", "ground_truth": [{"area": {"base": [10], "height": [5]}}]}
MULTI = {"id": "multi_turn_base_0", "question": [[{"role": "user", "content": "Go to docs."}]],
         "initial_config": {}, "involved_classes": ["GorillaFileSystem"]}
MULTI_ANSWER = {"id": "multi_turn_base_0", "ground_truth": [["cd(folder='docs')"]]}


def _write(root: Path, category: str, rows: list, answers: list | None) -> None:
    (root / "bfcl" / "possible_answer").mkdir(parents=True, exist_ok=True)
    lines = lambda xs: "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in xs)  # noqa: E731
    (root / "bfcl" / f"BFCL_v4_{category}.json").write_text(lines(rows))
    if answers is not None:
        (root / "bfcl" / "possible_answer" / f"BFCL_v4_{category}.json").write_text(lines(answers))


@pytest.mark.parametrize("category,rows,answers,match", [
    ("simple_python", ['{"id": "simple_python_0", "question": [[', SIMPLE], [ANSWER],
     r"BFCL_v4_simple_python\.json.*line 1"),
    ("simple_python", [{k: v for k, v in SIMPLE.items() if k != "function"}], [ANSWER],
     "simple_python_0.*'function'"),
    ("simple_python", [{"question": SIMPLE["question"]}], [ANSWER], "line 1 has no string 'id'"),
    ("simple_python", [{**SIMPLE, "function": [{"name": "area"}]}], [ANSWER], "simple_python_0.*function schema"),
    ("simple_python", [SIMPLE], [{"id": "simple_python_9", "ground_truth": []}], r"possible_answer.*simple_python_0"),
    ("simple_python", [SIMPLE], None, "missing answer file"),
    ("multi_turn_base", [MULTI], [{**MULTI_ANSWER, "ground_truth": [["cd(folder=docs)"]]}],
     "multi_turn_base_0.*unreadable gold call"),
    ("multi_turn_base", [MULTI], [{**MULTI_ANSWER, "ground_truth": []}], "multi_turn_base_0.*one ground_truth list"),
    ("multi_turn_base", [{**MULTI, "involved_classes": ["Teleporter"]}], [MULTI_ANSWER], "unknown backend 'Teleporter'"),
])
def test_malformed_data_raises(tmp_path: Path, data_root: str, category, rows, answers, match) -> None:
    _write(tmp_path, category, rows, answers)
    docs = tmp_path / "bfcl" / "multi_turn_func_doc"
    docs.mkdir()
    src = Path(data_root) / "bfcl" / "multi_turn_func_doc" / "gorilla_file_system.json"
    (docs / src.name).write_text(src.read_text())
    with pytest.raises(DataError, match=match):
        BFCLEnv(data_root=str(tmp_path), categories=[category])


def test_well_formed_tiny_data(tmp_path: Path) -> None:
    _write(tmp_path, "simple_python", [SIMPLE], [ANSWER])
    env = BFCLEnv(data_root=str(tmp_path), categories=["simple_python"], eval_fraction=0.0)
    (task,) = env.seed_tasks()
    assert env.score(task, as_text([{"name": "area", "parameters": {"base": 10, "height": 5}}]))["accuracy"] == 1.0


def test_missing_data_root(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="bfcl"):
        BFCLEnv(data_root=str(tmp_path))
    with pytest.raises(DataError, match="missing data file"):
        (tmp_path / "bfcl").mkdir()
        BFCLEnv(data_root=str(tmp_path), categories=["parallel"])


def test_data_root_from_environment(monkeypatch: pytest.MonkeyPatch, data_root: str) -> None:
    monkeypatch.setenv("GENENV_DATA_ROOT", data_root)
    assert BFCLEnv(categories=["live_parallel"]).root == os.path.join(data_root, "bfcl")
