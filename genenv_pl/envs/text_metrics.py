"""Short-answer metrics (SQuAD style) and tolerant reading of model output (tags, JSON).

Pure functions, shared by the environments. The normalization is the one of the SQuAD v1.1
evaluation script, which is also what Search-R1 / FlashRAG use for Bamboogle "EM": lower case,
drop ASCII punctuation, drop the articles a/an/the, collapse whitespace. Keeping it identical
keeps our numbers comparable with the literature.
"""
from __future__ import annotations

import json
import re
import string
from collections import Counter
from typing import Any

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lower, strip punctuation, drop articles, collapse whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalized strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """Harmonic mean of token precision and recall over normalized tokens (bag of words).

    Two empty strings score 1.0 (nothing to find, nothing wrong); one empty side scores 0.0.
    """
    pred = normalize_answer(prediction).split()
    ref = normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = Counter(pred) & Counter(ref)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred)
    recall = overlap / len(ref)
    return 2 * precision * recall / (precision + recall)


def best_over_golds(metric, prediction: str, golds: list[str]) -> float:
    """Max of `metric(prediction, g)` over several gold aliases (0.0 when there are none)."""
    return max((metric(prediction, g) for g in golds), default=0.0)


def extract_tag(text: str, tag: str) -> str | None:
    """Content of the last complete `<tag>...</tag>` block, or None when there is none.

    The last block wins because models sometimes restate or correct an earlier answer.
    """
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", text, flags=re.DOTALL | re.IGNORECASE)
    return blocks[-1].strip() if blocks else None


def strip_tag_blocks(text: str, tag: str) -> str:
    """`text` without any `<tag>...</tag>` block; an unclosed opening tag drops the rest."""
    text = re.sub(rf"<{tag}>.*?</{tag}>", " ", text, flags=re.DOTALL | re.IGNORECASE)
    return re.split(rf"<{tag}>", text, flags=re.IGNORECASE)[0]


def extract_json_object(text: str, max_chars: int = 20_000) -> dict[str, Any] | None:
    """The first JSON object in `text` (code fences and chatter around it allowed), or None.

    Only `json` decoding: nothing in the text is ever executed. Work is bounded by `max_chars`
    and by the number of decoding attempts.
    """
    text = (text or "")[:max_chars]
    decoder = json.JSONDecoder()
    for n, match in enumerate(re.finditer(r"\{", text)):
        if n >= 64:  # each attempt may scan to the end: bound the work on brace soup
            break
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None
