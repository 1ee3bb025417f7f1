"""`bench/episode_batching.py --padding-ab` runs end to end on real games (tiny model): one lockstep round
at histories of different lengths, sent as one padded call and as `act`'s groups, timed and compared."""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from test_alfworld import needs_engine

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("episode_batching", ROOT / "bench" / "episode_batching.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["episode_batching"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # a benchmark's end-to-end run (about 100 s): the slow stage of .ci/run
def test_padding_ab_times_both_ways_of_sending_one_round(tmp_path):
    needs_engine("textworld")
    out = tmp_path / "episode_padding.md"
    _bench().main(["--model", "tiny", "--games", "4", "--padding-ab", "6", "--max-new-tokens", "4", "--out", str(out)])
    text = out.read_text()
    lengths = re.search(r"prompts of (\d+) to (\d+) tokens", text)
    assert lengths and int(lengths[1]) < int(lengths[2])  # the games' histories differ in length
    assert re.search(r"\| one padded call \(before\) \| 1 \| [\d.]+ \| [\d.]+ \|", text)
    calls = re.search(r"\| groups of similar length \(`act`, now\) \| (\d+) \|", text)
    assert calls and int(calls[1]) > 1
    assert re.search(r"Same reply in \d of 4 games", text)
