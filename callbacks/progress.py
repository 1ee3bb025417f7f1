"""Progress during rollout phases, which can take minutes with large models."""
from __future__ import annotations

import time

import lightning as L
from lightning.pytorch.utilities import rank_zero_info


class RolloutProgress(L.Callback):
    """Reports a generation phase (simulate / rollout) when it starts and, if it was long, how long it took."""

    def __init__(self, min_seconds: float = 5.0):
        """
        Args:
            min_seconds: report a phase's duration when it took at least this many seconds; short
                phases of tiny models stay silent.
        """
        super().__init__()
        self.min_seconds = min_seconds
        self._start: dict[str, float] = {}

    def on_rollout_progress(self, trainer: L.Trainer, phase: str, done: int, total: int) -> None:
        now = time.perf_counter()
        if done == 0:
            self._start[phase] = now
            return
        elapsed = now - self._start.get(phase, now)
        if elapsed >= self.min_seconds:
            rank_zero_info(f"[epoch {trainer.current_epoch}] {phase}: {done}/{total} prompts in {elapsed:.1f}s "
                           f"({done / elapsed:.1f} prompts/s)")
