"""SQuAD-style normalization, exact match and token F1 on known answers."""
import pytest

from genenv_pl.envs.text_metrics import (best_over_golds, exact_match, extract_json_object, extract_tag,
                                         normalize_answer, strip_tag_blocks, token_f1)


@pytest.mark.parametrize("text, normalized", [
    ("The Eiffel Tower", "eiffel tower"),
    ("  James   Madison. ", "james madison"),
    ("George VI\n", "george vi"),
    ("an apple a day", "apple day"),
    ("U.S.A.", "usa"),
    ("Theatre", "theatre"),  # articles only as whole words
    ("", ""),
])
def test_normalize_answer(text, normalized):
    assert normalize_answer(text) == normalized


@pytest.mark.parametrize("pred, gold, em, f1", [
    ("James Madison", "james madison", 1.0, 1.0),
    ("the Titan IIIE", "Titan IIIE", 1.0, 1.0),
    ("Madison", "James Madison", 0.0, 2 * (1.0 * 0.5) / 1.5),
    ("President James Madison", "James Madison", 0.0, 2 * (2 / 3 * 1.0) / (2 / 3 + 1.0)),
    ("1999", "1,999", 1.0, 1.0),  # SQuAD drops the comma, so the strings agree
    ("Paris", "London", 0.0, 0.0),
    ("", "London", 0.0, 0.0),
    ("", "", 1.0, 1.0),
    ("a", "the", 1.0, 1.0),  # both normalize to empty
])
def test_exact_match_and_f1(pred, gold, em, f1):
    assert exact_match(pred, gold) == em
    assert token_f1(pred, gold) == pytest.approx(f1)


def test_f1_counts_repeated_tokens_once_per_occurrence():
    assert token_f1("new new york", "new york") == pytest.approx(2 * (2 / 3) * 1.0 / (2 / 3 + 1.0))


def test_best_over_golds():
    assert best_over_golds(exact_match, "NYC", ["New York City", "nyc"]) == 1.0
    assert best_over_golds(token_f1, "x", []) == 0.0


@pytest.mark.parametrize("text, content", [
    ("<response>A</response>", "A"),
    ("<response>A</response> then <response> B </response>", "B"),
    ("<RESPONSE>A</RESPONSE>", "A"),
    ("<response>unclosed", None),
    ("no tags", None),
])
def test_extract_tag(text, content):
    assert extract_tag(text, "response") == content


def test_strip_tag_blocks():
    assert strip_tag_blocks("a<think>x</think>b<think>rest", "think") == "a b"


@pytest.mark.parametrize("text, obj", [
    ('{"a": 1}', {"a": 1}),
    ('Sure!\n```json\n{"a": {"b": [1, 2]}}\n```\nDone.', {"a": {"b": [1, 2]}}),
    ('{broken {"a": 1}', {"a": 1}),
    ("{'a': 1}", None),  # Python literals are not JSON and are never evaluated
    ("[1, 2]", None),
    ("{" * 5000, None),
    ("", None),
    (None, None),
])
def test_extract_json_object(text, obj):
    assert extract_json_object(text) == obj
