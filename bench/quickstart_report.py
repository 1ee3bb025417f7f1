"""Read a quickstart run's TensorBoard events and print the numbers that show GenEnv working:
the success rate on generated tasks settling in the alpha zone, held-out accuracy rising, and
generated-task difficulty rising with it; and the paper's training curves, first fifth against last:
the agent's reward per GRPO step (Fig. 4a), its response length (Fig. 5a/b) and how many generated
tasks it solves in all, some or none of its G rollouts (Fig. 8).

    python bench/quickstart_report.py [runs/quickstart/version_N]   (default: the newest run that trained)
"""
from __future__ import annotations

import glob
import os
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


REQUIRED_TAGS = [
    "coevo/success_rate", "coevo/alpha_reward", "coevo/in_band_frac", "coevo/invalid_rate", "coevo/difficulty",
    "agent/loss", "agent/kl", "agent/entropy", "agent/zero_std_frac", "sim/loss", "sim/kl", "val/accuracy",
    "perf/rollout_tokens_per_s", "agent/step_reward", "agent/response_length", "coevo/solved_frac",
    "coevo/partial_frac", "coevo/unsolved_frac",
]


def load(run_dir: str) -> dict[str, list[float]]:
    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def fifth(xs: list[float], last: bool) -> float:
    n = max(1, len(xs) // 5)
    part = xs[-n:] if last else xs[:n]
    return sum(part) / len(part)


def trend(s: dict[str, list[float]], tag: str, fmt: str = ".3f") -> str:
    """`tag`'s first-fifth and last-fifth means, over its defined points (NaN marks an epoch without any
    generated task: a gap, not a zero)."""
    xs = [v for v in s.get(tag, []) if v == v]
    if not xs:
        return f"{tag:<22} (not logged)"
    return f"{tag:<22} first fifth {fifth(xs, False):{fmt}}  last fifth {fifth(xs, True):{fmt}}  ({len(xs)} points)"


def report(run: str, s: dict[str, list[float]]) -> list[str]:
    """The report's lines for the scalars `s` of the run in `run` (tag -> values in step order)."""
    succ, diff, val = s["coevo/success_rate"], s["coevo/difficulty"], s["val/accuracy"]
    out = [f"run: {run}  ({len(succ)} epochs)"]
    missing = [t for t in REQUIRED_TAGS if t not in s]
    out.append("tags: all required tags present" if not missing else f"tags: MISSING {missing}")
    last = fifth(succ, True)
    out.append(f"coevo/success_rate  last fifth mean {last:.3f}   (alpha zone [0.35, 0.65]: "
               f"{'in' if 0.35 <= last <= 0.65 else 'OUT'})")
    out.append(f"val/accuracy        start {val[0]:.3f}  final {val[-1]:.3f}  gain {val[-1] - val[0]:+.3f}  "
               f"({'rises' if val[-1] > val[0] else 'DOES NOT RISE'})  "
               f"lowest {min(val):.3f} ({min(val) - val[0]:+.3f}; target >= -0.03)")
    out.append("val/accuracy curve  " + " ".join(f"{v:.3f}" for v in val))
    out.append(f"coevo/difficulty    first fifth {fifth(diff, False):.2f}  last fifth {fifth(diff, True):.2f}")
    slope = s.get("sim/conditioning_slope", [])
    if slope:
        out.append(f"sim/conditioning_slope  start {slope[0]:+.3f}  end {slope[-1]:+.3f}  "
                   f"(levels per success bucket; 0: the simulator ignores the success signal)")
    gap = [v for v in s.get("coevo/task_alpha_gap", []) if v == v]
    zero = s.get("agent/zero_std_frac", [])
    if gap and zero:
        out.append(f"per-task |p - alpha| last fifth {fifth(gap, True):.3f}   agent/zero_std_frac last fifth {fifth(zero, True):.2f}")
    levels = sorted(t for t in s if t.startswith("val/accuracy_level"))
    out.append("val per level       " + "  ".join(f"{t.rsplit('_', 1)[1]} {s[t][0]:.2f}->{s[t][-1]:.2f}" for t in levels))
    # the paper's curves: reward per GRPO step (one point per agent update), response length, and the
    # solved / partial / unsolved shares of the generated tasks, also fifth by fifth (Fig. 8's bars)
    out.append(trend(s, "agent/step_reward"))
    out.append(trend(s, "agent/response_length", ".1f"))
    for tag in ("coevo/solved_frac", "coevo/partial_frac", "coevo/unsolved_frac"):
        out.append(trend(s, tag))
    shares = [fifths([v for v in s.get(f"coevo/{k}_frac", []) if v == v]) for k in ("solved", "partial", "unsolved")]
    out.append("solved/partial/unsolved by fifth  " + "  ".join(f"{a:.2f}/{b:.2f}/{c:.2f}" for a, b, c in zip(*shares)))
    return out


def fifths(xs: list[float]) -> list[float]:
    """The means of `xs` in five consecutive parts as even as they go (fewer parts for fewer than five values)."""
    k = min(5, len(xs))
    if not k:
        return []
    bounds = [len(xs) * i // k for i in range(k + 1)]
    return [sum(xs[a:b]) / (b - a) for a, b in zip(bounds, bounds[1:])]


def newest_fit(pattern: str = "runs/quickstart/version_*") -> tuple[str, dict[str, list[float]]]:
    """The newest run folder with co-evolution epochs in it: `main.py test`, `export` checks and a resume
    of a finished run log to the same place without any."""
    for run in sorted(glob.glob(pattern), key=os.path.getmtime, reverse=True):
        s = load(run)
        if s.get("coevo/success_rate"):
            return run, s
    sys.exit(f"quickstart_report: no run under {os.path.dirname(pattern)} has trained an epoch; run "
             "python main.py fit --config configs/quickstart.yaml first")


def main() -> None:
    run, s = (sys.argv[1], load(sys.argv[1])) if len(sys.argv) > 1 else newest_fit()
    print("\n".join(report(run, s)))


if __name__ == "__main__":
    main()
