"""An offline search backend: Okapi BM25 over a folder of documents the user supplies.

Bamboogle's search evaluation (`BamboogleEnv.play`) needs something to answer the agent's
`search(query)` calls; the paper used a live web search, which a node without internet has not.
Point this at a local corpus instead (for instance a Wikipedia dump converted to JSON lines):

    data:
      env_args:
        search_tool: genenv_pl.envs.bm25:BM25Search
        search_tool_kwargs: {corpus: path/to/corpus}

The folder is read recursively: `.txt` and `.md` files are split into passages of `passage_words`
words, each prefixed with the file's name as its title; `.jsonl` files hold one document a line with
"contents" or "text" (and an optional "title"), the format of the Wikipedia dumps that Search-R1 and
FlashRAG index, each line one passage as it is. The index lives in memory: build it from a corpus
that fits there.
"""
from __future__ import annotations

import heapq
import json
import math
import re
from collections import Counter, defaultdict
from pathlib import Path

from genenv_pl.envs.base import ConfigError

_TOKEN = re.compile(r"\w+")
KEY = "data.env_args.search_tool_kwargs.corpus"


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens (letters, digits and underscores, any script)."""
    return _TOKEN.findall(text.lower())


def bm25_idf(df: int, n_docs: int) -> float:
    """A term's weight: Robertson-Sparck Jones idf, kept positive as Lucene does."""
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


def bm25_tf(tf: int, length: int, avg_length: float, k1: float, b: float) -> float:
    """A term's saturated frequency in one passage, normalised by the passage's length."""
    return tf * (k1 + 1.0) / (tf + k1 * (1.0 - b + b * length / avg_length))


def bm25_term(tf: int, df: int, n_docs: int, length: int, avg_length: float, k1: float, b: float) -> float:
    """One query term's BM25 score in one passage."""
    return bm25_idf(df, n_docs) * bm25_tf(tf, length, avg_length, k1, b)


class BM25Search:
    """`search(query)` -> the `top_k` best passages of the corpus, best first (ties: corpus order)."""

    def __init__(self, corpus: str, top_k: int = 3, passage_words: int = 100, k1: float = 1.5, b: float = 0.75):
        folder = Path(corpus)
        if not folder.is_dir():
            raise ConfigError(f"{KEY}: {corpus!r} is not a folder; give the folder of .txt, .md or .jsonl documents "
                              f"that Bamboogle's search calls are answered from")
        if top_k < 1 or passage_words < 1:
            raise ConfigError(f"data.env_args.search_tool_kwargs: top_k and passage_words must be at least 1, got "
                              f"{top_k} and {passage_words}")
        self.top_k, self.k1, self.b = top_k, k1, b
        self.passages = list(_passages(folder, passage_words))
        if not self.passages:
            raise ConfigError(f"{KEY}: {corpus!r} holds no .txt, .md or .jsonl document with text")
        self.postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
        self.lengths: list[int] = []
        for i, passage in enumerate(self.passages):
            tokens = tokenize(passage)
            self.lengths.append(len(tokens))
            for term, tf in Counter(tokens).items():
                self.postings[term].append((i, tf))
        self.avg_length = max(sum(self.lengths) / len(self.lengths), 1e-9)

    def search(self, query: str) -> list[str]:
        scores: dict[int, float] = defaultdict(float)
        for term in set(tokenize(query or "")):
            postings = self.postings.get(term, [])
            idf = bm25_idf(len(postings), len(self.passages))  # once a term, not once a passage
            for i, tf in postings:
                scores[i] += idf * bm25_tf(tf, self.lengths[i], self.avg_length, self.k1, self.b)
        best = heapq.nsmallest(self.top_k, scores.items(), key=lambda item: (-item[1], item[0]))
        return [self.passages[i] for i, _ in best]


def _passages(folder: Path, words: int):
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.suffix in (".txt", ".md"):
            tokens = path.read_text(errors="replace").split()
            for start in range(0, len(tokens), words):
                yield f"{path.stem}: " + " ".join(tokens[start:start + words])
        elif path.suffix == ".jsonl":
            for line in path.read_text(errors="replace").splitlines():
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue  # a torn line of a large dump: skipped, not fatal
                if not isinstance(doc, dict):
                    continue
                text = doc.get("contents", doc.get("text"))
                if isinstance(text, str) and text.strip():
                    title = doc.get("title")
                    yield f"{title}: {text.strip()}" if isinstance(title, str) and title else text.strip()
