"""How two agents' BFCL answers differ, item by item: the `test_results.json` of two `main.py test`
runs on the same items (for the study, `bench/out/real_llm_bfcl/test_runs/<stage>/version_0/`).

    python bench/bfcl_output_diff.py BEFORE/test_results.json AFTER/test_results.json

Prints the items AFTER lost and gained against BEFORE, each sorted by how the call changed (format,
function, parameters dropped, parameters added, values), and how many of AFTER's calls set more
or fewer parameters than BEFORE's: a drift in the number of parameters is the first thing to look
for when GRPO moves a near-greedy agent (recipe 3 added them, recipe 4's seed 1 dropped them).
"""
from __future__ import annotations

import argparse
import json
from collections import Counter

from genenv_pl.envs.toolcall import parse_response


def first_call(response: str) -> dict | None:
    """The first call of a response as the scorer reads it (`parse_response`), or None when the
    response has no call or a `<tool_call>` block the parser could not read (a format error)."""
    parsed = parse_response(response)
    return parsed.calls[0] if parsed.calls and not parsed.format_error else None


def change(before: str, after: str) -> str:
    """How the call changed between two responses: format, function, dropped, added or values."""
    a, b = first_call(before), first_call(after)
    if a is None or b is None:
        return "format"
    if a.get("name") != b.get("name"):
        return "function"
    pa, pb = set(a.get("parameters") or {}), set(b.get("parameters") or {})
    return "dropped" if pb < pa else "added" if pb > pa else "values"


def diff(before: dict[str, dict], after: dict[str, dict]) -> dict:
    lost, gained, n_params = Counter(), Counter(), Counter()
    for key in sorted(set(before) & set(after)):
        b, a = before[key], after[key]
        delta = float(a["accuracy"]) - float(b["accuracy"])
        if delta:
            (gained if delta > 0 else lost)[change(b["response"], a["response"])] += 1
        cb, ca = first_call(b["response"]), first_call(a["response"])
        if cb and ca:
            nb, na = len(cb.get("parameters") or {}), len(ca.get("parameters") or {})
            n_params["more" if na > nb else "fewer" if na < nb else "same"] += 1
    return {"lost": dict(lost), "gained": dict(gained), "parameters_set": dict(n_params)}


def _rows(path: str) -> dict[str, dict]:
    return {f"{r['group']}/{r['id']}": r for r in json.loads(open(path).read())["rows"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("before")
    p.add_argument("after")
    args = p.parse_args()
    print(json.dumps(diff(_rows(args.before), _rows(args.after)), indent=1))


if __name__ == "__main__":
    main()
