"""The offline BM25 search backend (genenv_pl/envs/bm25.py): the scoring term, ranking on a small corpus,
the corpus formats, and bad input."""
import json
import math

import pytest

from genenv_pl.envs.base import ConfigError
from genenv_pl.envs.bm25 import BM25Search, bm25_term, tokenize


@pytest.mark.parametrize("tf, df, n, length, avg, expected", [
    # idf log(1 + (n - df + .5) / (df + .5)) x tf (k1 + 1) / (tf + k1 (1 - b + b length / avg)), k1 1.5, b .75
    (1, 1, 10, 10, 10.0, math.log(1 + 9.5 / 1.5) * 2.5 / 2.5),
    (2, 1, 10, 10, 10.0, math.log(1 + 9.5 / 1.5) * 5.0 / 3.5),
    (1, 1, 10, 20, 10.0, math.log(1 + 9.5 / 1.5) * 2.5 / (1 + 1.5 * 1.75)),  # longer passage: less
    (1, 10, 10, 10, 10.0, math.log(1 + 0.5 / 10.5) * 1.0),  # in every passage: small, still positive
])
def test_bm25_term_table(tf, df, n, length, avg, expected):
    assert bm25_term(tf, df, n, length, avg, 1.5, 0.75) == pytest.approx(expected)


def test_tokenize():
    assert tokenize("Citibank, founded 1812 -- by N.Y.!") == ["citibank", "founded", "1812", "by", "n", "y"]


@pytest.fixture
def corpus(tmp_path):
    (tmp_path / "Citibank.txt").write_text("Citibank was founded in 1812 as the City Bank of New York.")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "James Madison.md").write_text("James Madison was president of the United States "
                                                       "from 1809 to 1817.")
    lines = [{"title": "Apple", "contents": "Apple was founded by Steve Jobs and Steve Wozniak in 1976."},
             {"text": "The iPhone is made by Apple."}, "not a dict", {"contents": ""}]
    (tmp_path / "wiki.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n{torn line")
    return tmp_path


def test_ranks_the_passage_that_answers_first(corpus):
    search = BM25Search(str(corpus), top_k=2)
    assert len(search.passages) == 4  # two text files, two usable JSON lines
    assert search.search("When was Citibank founded?")[0] == "Citibank: Citibank was founded in 1812 as the City " \
                                                             "Bank of New York."
    assert search.search("president of the United States")[0].startswith("James Madison: ")
    assert search.search("who founded Apple")[0] == "Apple: Apple was founded by Steve Jobs and Steve Wozniak in 1976."
    assert len(search.search("founded")) == 2  # top_k
    assert search.search("zebra") == [] and search.search("") == []


def test_long_files_are_cut_into_passages(tmp_path):
    (tmp_path / "long.txt").write_text(" ".join(f"w{i}" for i in range(250)))
    search = BM25Search(str(tmp_path), passage_words=100)
    assert [len(p.split()) - 1 for p in search.passages] == [100, 100, 50]
    assert search.search("w180") == ["long: " + " ".join(f"w{i}" for i in range(100, 200))]


def test_bad_corpus_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match="search_tool_kwargs.corpus: .* is not a folder"):
        BM25Search(str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="holds no .txt, .md or .jsonl document"):
        BM25Search(str(tmp_path))


def test_bamboogle_loads_it_by_import_path(data_root, corpus):
    from genenv_pl.envs import make_env

    env = make_env("bamboogle", data_root=data_root, search_tool="genenv_pl.envs.bm25:BM25Search",
                   search_tool_kwargs={"corpus": str(corpus), "top_k": 1})
    assert env.search_tool.search("Citibank founded")[0].startswith("Citibank: ")
