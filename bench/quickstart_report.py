"""Read a quickstart run's TensorBoard events and print the numbers that show GenEnv working:
the success rate on generated tasks settling in the alpha zone, held-out accuracy rising, and
generated-task difficulty rising with it.

    python bench/quickstart_report.py [runs/quickstart/version_N]   (default: the newest run)
"""
from __future__ import annotations

import glob
import os
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


REQUIRED_TAGS = [
    "coevo/success_rate", "coevo/alpha_reward", "coevo/in_band_frac", "coevo/invalid_rate", "coevo/difficulty",
    "agent/loss", "agent/kl", "agent/entropy", "agent/zero_std_frac", "sim/loss", "sim/kl", "val/accuracy",
    "perf/rollout_tokens_per_s",
]


def load(run_dir: str) -> dict[str, list[float]]:
    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [e.value for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def fifth(xs: list[float], last: bool) -> float:
    n = max(1, len(xs) // 5)
    part = xs[-n:] if last else xs[:n]
    return sum(part) / len(part)


def main() -> None:
    run = sys.argv[1] if len(sys.argv) > 1 else max(glob.glob("runs/quickstart/version_*"), key=os.path.getmtime)
    s = load(run)
    succ, diff, val = s["coevo/success_rate"], s["coevo/difficulty"], s["val/accuracy"]
    print(f"run: {run}  ({len(succ)} epochs)")
    missing = [t for t in REQUIRED_TAGS if t not in s]
    print("tags: all required tags present" if not missing else f"tags: MISSING {missing}")
    print(f"coevo/success_rate  last fifth mean {fifth(succ, True):.3f}   (alpha zone target [0.35, 0.65])")
    print(f"val/accuracy        start {val[0]:.3f}  final {val[-1]:.3f}  gain {val[-1] - val[0]:+.3f}  (target >= +0.10)  "
          f"lowest {min(val):.3f} ({min(val) - val[0]:+.3f}; target >= -0.03)")
    print("val/accuracy curve  " + " ".join(f"{v:.3f}" for v in val))
    print(f"coevo/difficulty    first fifth {fifth(diff, False):.2f}  last fifth {fifth(diff, True):.2f}")
    slope = s.get("sim/conditioning_slope", [])
    if slope:
        print(f"sim/conditioning_slope  start {slope[0]:+.3f}  end {slope[-1]:+.3f}  "
              f"(levels per success bucket; 0: the simulator ignores the success signal)")
    gap = [v for v in s.get("coevo/task_alpha_gap", []) if v == v]
    zero = s.get("agent/zero_std_frac", [])
    if gap and zero:
        print(f"per-task |p - alpha| last fifth {fifth(gap, True):.3f}   agent/zero_std_frac last fifth {fifth(zero, True):.2f}")
    levels = sorted(t for t in s if t.startswith("val/accuracy_level"))
    print("val per level       " + "  ".join(f"{t.rsplit('_', 1)[1]} {s[t][0]:.2f}->{s[t][-1]:.2f}" for t in levels))


if __name__ == "__main__":
    main()
