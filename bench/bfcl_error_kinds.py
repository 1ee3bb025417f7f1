"""What kind of mistakes does an agent make on BFCL's held-out items? Reads a `main.py test` run's
`test_results.json` (its greedy answers) and classes every wrong answer by the first thing BFCL's
AST checker would reject, using the environment's own checker on repaired calls:

    python bench/bfcl_error_kinds.py RUN/test_results.json [--sampled bench/results/.../sampled/X.json]

- format: no parseable call (or a call where none was expected);
- call_count: more or fewer calls than the gold;
- wrong_function: the call names another of the item's functions;
- missing_param / unexpected_param: a required argument left out, or an argument the gold does not allow;
- wrong_value: the call is right once the listed arguments take a gold value (each one alone, by the
  checker, the rest at gold values): which arguments, and the model's value next to the allowed ones;
- other: wrong by the checker, yet no single argument set to a gold value makes it right (the checker
  rejects a combination, e.g. of a type and a value, that none of the kinds above names).

With --sampled (a bench/real_llm_bfcl.py per-item file of the same agent), each kind is split by how
often that agent's sampled answers got the item right: GRPO can only learn from items whose groups
have mixed rewards, so an error whose samples are all wrong gives it nothing to push toward.
"""
from __future__ import annotations

import argparse
import collections
import json

from genenv_pl.envs.bfcl import BFCLEnv, _call_ok, _tool_named, concrete_call, parse_response


def error_kind(task, response: str) -> tuple[str, list[str]]:
    d = task.data
    parsed = parse_response(response)
    if parsed.format_error or not parsed.calls:
        return "format", []
    calls, gold = parsed.calls, d["gold"]
    if len(calls) != len(gold):
        return "call_count", []
    tools = d.get("typed_tools", d["tools"])
    answer, call = gold[0], calls[0]
    name = next(iter(answer))
    if call["name"] != name:
        return "wrong_function", [f"{call['name']} for {name}"]
    tool = _tool_named(tools, name)
    allowed = answer[name]
    required = tool["parameters"].get("required", [])
    missing = [p for p in required if p not in call["parameters"]]
    if missing:
        return "missing_param", missing
    extra = [p for p in call["parameters"] if p not in allowed]
    if extra:
        return "unexpected_param", extra
    right = concrete_call(tool, answer)
    wrong = []
    for p, v in call["parameters"].items():
        trial = {"name": name, "parameters": {**right["parameters"], p: v}}
        if not _call_ok(tool, trial, answer):
            wrong.append(f"{p}={json.dumps(v)} not in {json.dumps(allowed[p])}")
    left_out = [p for p in allowed if p not in call["parameters"] and "" not in allowed[p]]
    wrong += [f"{p} left out (gold: {json.dumps(allowed[p])})" for p in left_out]
    return ("wrong_value" if wrong else "other"), wrong


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results")
    p.add_argument("--sampled", help="per-item sampled scores of the same agent (real_llm_bfcl_runs/sampled/X.json)")
    p.add_argument("--examples", type=int, default=3, help="examples listed per kind")
    args = p.parse_args()
    rows = json.loads(open(args.results).read())["rows"]
    cats = sorted({r["group"] for r in rows})
    tasks = {f"{t.group}/{t.id}": t for t in BFCLEnv(categories=cats, simulator_writes="request").eval_tasks()}
    sampled = json.loads(open(args.sampled).read())["items"] if args.sampled else {}
    kinds: dict[str, list] = collections.defaultdict(list)
    for r in rows:
        if r["accuracy"] == 1.0:
            continue
        key = f"{r['group']}/{r['id']}"
        kind, detail = error_kind(tasks[key], r["response"])
        kinds[kind].append((key, detail, sampled.get(key, [None])[0]))
    wrong = sum(len(v) for v in kinds.values())
    print(f"{len(rows)} items, {wrong} wrong ({wrong / len(rows):.3f})\n")
    head = "| kind | items | of the wrong |" + (" samples all wrong | some right |" if sampled else "")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for kind, items in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
        line = f"| {kind} | {len(items)} | {len(items) / wrong:.2f} |"
        if sampled:
            zero = sum(1 for *_, s in items if s == 0.0)
            line += f" {zero} | {len(items) - zero} |"
        print(line)
    for kind, items in kinds.items():
        print(f"\n{kind}:")
        for key, detail, s in items[: args.examples]:
            print(f"- {key}: {'; '.join(detail) or '-'}" + (f" (sampled {s:.2f})" if s is not None else ""))


if __name__ == "__main__":
    main()
