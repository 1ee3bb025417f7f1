"""bench/real_llm_bfcl.py compares genenv with a baseline only at the same seed, and pools each
variant's seeds item by item before pairing with the warm start."""
import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).parents[1] / "bench"))
import real_llm_bfcl as study  # noqa: E402

WARM = {"a": [1.0, 0.0], "b": [0.0, 0.0], "c": [0.0, 0.0], "d": [1.0, 0.0]}


def _run(*right: str) -> dict:
    return {k: [1.0 if k in right else 0.0, 0.0] for k in WARM}


@pytest.mark.parametrize("stages, want_pairs", [
    ({"genenv_s0": _run("a"), "static_s0": _run("a", "b")}, ["genenv_s0 - static_s0"]),
    # a baseline of another seed is not paired with genenv
    ({"genenv_s0": _run("a"), "static_s1": _run("a", "b")}, []),
    ({"genenv_s0": _run(), "genenv_s1": _run(), "genenv-random_s1": _run(), "static_s0": _run()},
     ["genenv_s0 - static_s0", "genenv_s1 - genenv-random_s1"]),
])
def test_genenv_paired_only_at_the_same_seed(stages, want_pairs):
    result: dict = {}
    study.paired_lines({"warm_start": WARM} | stages, result)
    assert sorted(k for k in result["paired"] if not k.endswith("warm_start")) == want_pairs


@pytest.mark.parametrize("seeds, want_diff, want_se_seeds, want_per_seed", [
    # seed 0 gains b, seed 1 loses d: item means b 0.5, d 0.5 -> pooled difference 0, but the seeds
    # disagree by 0.5: SE over seeds stdev(+0.25, -0.25) / sqrt(2) = 0.25
    ([("a", "b", "d"), ("a",)], 0.0, 0.25, "+0.250, -0.250"),
    ([("a", "b", "d"), ("a", "b", "c", "d")], 0.375, 0.125, "+0.250, +0.500"),
])
def test_seeds_pooled_item_by_item(seeds, want_diff, want_se_seeds, want_per_seed):
    result: dict = {}
    lines = study.paired_lines({"warm_start": WARM} | {f"static_s{i}": _run(*r) for i, r in enumerate(seeds)}, result)
    pooled = result["paired_by_variant"]["static"]
    assert pooled["diff"] == pytest.approx(want_diff) and pooled["seeds"] == ["0", "1"] and pooled["n"] == 4
    assert pooled["se_seeds"] == pytest.approx(want_se_seeds)
    assert lines[-1].startswith("| static | 2 |") and lines[-1].endswith(f"| {want_se_seeds:.3f} | {want_per_seed} |")


def test_no_pooled_table_while_every_variant_has_one_seed():
    result: dict = {}
    lines = study.paired_lines({"warm_start": WARM, "genenv_s0": _run("a"), "static_s0": _run()}, result)
    assert result["paired_by_variant"] == {} and not any("over its scored seeds" in line for line in lines)


@pytest.mark.parametrize("stages, want", [
    # seed 0: genenv gains b over static; seed 1: static gains c over genenv -> pooled 0
    ({"genenv_s0": _run("a", "b"), "static_s0": _run("a"), "genenv_s1": _run(), "static_s1": _run("c")},
     {"static": (0.0, ["0", "1"], "+0.250, -0.250")}),
    # only seeds both variants have count; genenv-random shares one seed, so it gets no pooled row
    ({"genenv_s0": _run("a", "b"), "genenv_s1": _run("b"), "genenv_s2": _run("d"), "static_s1": _run(),
      "static_s2": _run(), "genenv-random_s0": _run()},
     {"static": (0.25, ["1", "2"], "+0.250, +0.250")}),
])
def test_genenv_minus_baseline_pooled_over_shared_seeds(stages, want):
    result: dict = {}
    lines = study.paired_lines({"warm_start": WARM} | stages, result)
    pooled = result["paired_genenv_minus_pooled"]
    assert sorted(pooled) == sorted(want)
    for baseline, (diff, seeds, per_seed) in want.items():
        p = pooled[baseline]
        assert p["diff"] == pytest.approx(diff) and p["seeds"] == seeds
        assert p["se_seeds"] == pytest.approx(study.real_llm.seed_se([float(d) for d in per_seed.split(", ")]))
        assert f"| {baseline} | {len(seeds)} | {diff:+.3f} | {p['se']:.3f} | {p['se_seeds']:.3f} | {per_seed} |" in lines


@pytest.mark.parametrize("diffs, want", [
    ([0.1], float("nan")),  # one seed says nothing about the seeds' spread
    ([0.1, 0.1], 0.0),
    ([0.124, -0.030], 0.077),
    ([0.012, -0.032, 0.005], 0.0136),
])
def test_seed_se(diffs, want):
    assert study.real_llm.seed_se(diffs) == pytest.approx(want, abs=5e-4, nan_ok=True)
