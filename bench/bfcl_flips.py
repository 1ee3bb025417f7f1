"""Which held-out items the final agents of several fits flip against the warm-started agent, and how
often: are the greedy gains and losses the same items in every run (near ties any update tips) or
different items each time (what a run learnt)?

    python bench/bfcl_flips.py bench/results/real_llm_bfcl_runs/items/warm_start.json \\
        bench/results/real_llm_bfcl_runs/superseded/items/*.json

Each file is a per-item stage of `bench/real_llm_bfcl.py` (item -> [accuracy, format error]). Prints, for
flips up and down, how many items flipped in exactly k of the n runs, next to what independent runs that
flip items at the observed mean rate would give.
"""
from __future__ import annotations

import argparse
import json
from collections import Counter
from math import comb
from pathlib import Path


def flips(warm: dict, runs: dict[str, dict]) -> tuple[Counter, Counter]:
    """Per item, the number of runs that answer it right where the warm start is wrong (up) and the reverse (down)."""
    up, down = Counter(), Counter()
    for items in runs.values():
        for k, (acc, *_) in items.items():
            if k in warm:
                d = acc - warm[k][0]
                up[k] += d > 0
                down[k] += d < 0
    return up, down


def table(counts: Counter, pool: int, n: int) -> list[str]:
    """Items flipped in exactly k runs, observed and expected from independent runs at the mean rate."""
    p = sum(counts.values()) / (pool * n) if pool else 0.0
    hist = Counter(v for v in counts.values() if v)
    rows = ["| runs flipping it | items | independent runs would give |", "|---|---|---|"]
    for k in range(1, n + 1):
        rows.append(f"| {k} | {hist.get(k, 0)} | {pool * comb(n, k) * p ** k * (1 - p) ** (n - k):.1f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("warm_start")
    ap.add_argument("finals", nargs="+")
    a = ap.parse_args()
    warm = json.loads(Path(a.warm_start).read_text())["items"]
    runs = {f: json.loads(Path(f).read_text())["items"] for f in a.finals}  # by path: stems repeat across studies
    up, down = flips(warm, runs)
    wrong = sum(1 for v in warm.values() if v[0] < 1)
    n = len(runs)
    print(f"{n} final agents against the warm start ({len(warm)} items, {wrong} wrong at the start)\n")
    print(f"Wrong at the start, right at the end ({sum(1 for v in up.values() if v)} distinct items):\n")
    print("\n".join(table(up, wrong, n)))
    print(f"\nRight at the start, wrong at the end ({sum(1 for v in down.values() if v)} distinct items):\n")
    print("\n".join(table(down, len(warm) - wrong, n)))


if __name__ == "__main__":
    main()
