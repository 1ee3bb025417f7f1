"""What a run achieved, printed once at its end: without it, the answer is spread over hundreds of
epoch lines and a TensorBoard folder. Every run gets this callback (genenv_pl/cli.py)."""
from __future__ import annotations

import math
import os
import time
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_info

EPOCH_KEYS = ("coevo/success_rate", "coevo/difficulty")  # logged by the curriculum callback, which runs before this one
COUNTERS = {"sim/updates": "sim_updates", "agent/updates": "agent_updates"}  # GenEnvModule.counters


class RunSummary(L.Callback):
    """Prints one block at the end of `fit`, `validate` and `test`: held-out accuracy at the start and
    the end (per group), success and difficulty of generated tasks, the simulator's updates, wall time,
    and where the checkpoint and the logs are.

    Every run gets it (genenv_pl/cli.py). The blocks are built on every rank (trainer.log_dir is a
    collective) and printed on rank zero."""

    def __init__(self) -> None:
        super().__init__()
        self.start: dict[str, float] = {}  # val/* of the starting agent (GenEnvModule.on_train_start)
        self.val: list[tuple[int, dict[str, float]]] = []  # (epoch, val/*) of each validation in fit
        self.epochs: list[tuple[int, dict[str, float]]] = []  # (epoch, EPOCH_KEYS and COUNTERS) of each training epoch
        self._began = time.perf_counter()
        self._resumed_at: int | None = None  # the first epoch of this session when it resumed a checkpoint

    # ---- collecting ------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._began = time.perf_counter()  # before the models are built: the warm starts count

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._resumed_at = trainer.current_epoch if self.epochs else None  # (restored by load_state_dict)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._take_start(pl_module)

    def _take_start(self, pl_module: L.LightningModule) -> None:
        # The module scores the starting agent in its own on_train_start, after this callback's; a resumed
        # run does not score it again and keeps the one restored by load_state_dict.
        start = getattr(pl_module, "start_metrics", None)
        if start and not self.start:
            self.start.update({k: float(v) for k, v in start.items() if k.startswith("val/")})

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Recorded here, before the epoch's checkpoint is written (the CLI puts this callback ahead of
        # the checkpoint callbacks), so that a resumed run's summary has every epoch. The update counts
        # come from the module's counters: it logs them in its own on_train_epoch_end, after this hook.
        found = _scalars(trainer.callback_metrics)
        record = {k: found[k] for k in EPOCH_KEYS if k in found}
        counters = getattr(pl_module, "counters", {})
        record.update({tag: float(counters[name]) for tag, name in COUNTERS.items() if name in counters})
        self.epochs.append((trainer.current_epoch, record))

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Here, not in on_validation_epoch_end: callbacks run that hook before the module's, where the module
        # logs val/* (from every rank's rows, gathered), and callback_metrics have them only after it.
        if trainer.state.fn == "validate":
            rank_zero_info("\n".join(self.eval_lines(trainer, "validate", "val/")))
        elif not trainer.sanity_checking:
            self.val.append((trainer.current_epoch, _prefixed(trainer.callback_metrics, "val/")))

    # ---- printing --------------------------------------------------------------------------
    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._take_start(pl_module)  # (a run of no epoch)
        rank_zero_info("\n".join(self.fit_lines(trainer)))

    def on_test_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rank_zero_info("\n".join(self.eval_lines(trainer, "test", "eval/")))

    def fit_lines(self, trainer: L.Trainer) -> list[str]:
        span = _span(self.epochs)
        wall = _duration(time.perf_counter() - self._began)
        if self._resumed_at is not None:
            wall += f" (this session, resumed at epoch {self._resumed_at})"
        lines = [f"[genenv] run summary: fit, {span}, {wall}"]
        end_epoch, end = self.val[-1] if self.val else (None, {})
        start_text = _num(self.start.get("val/accuracy")) if self.start else \
            "not recorded (trainer.logger is off)" if not trainer.loggers else "not evaluated"
        end_text = f"{_num(end['val/accuracy'])} after epoch {end_epoch}" if "val/accuracy" in end else "not evaluated"
        lines.append(f"  held-out accuracy (val/accuracy): start {start_text} -> end {end_text}")
        for key in sorted({k for k in {**self.start, **end} if k.startswith("val/accuracy_")}):
            group = key.removeprefix("val/accuracy_")
            lines.append(f"    {group:<24} {_num(self.start.get(key))} -> {_num(end.get(key))}")
        fifth = max(1, len(self.epochs) // 5)
        first, last = self.epochs[:fifth], self.epochs[-fifth:]
        lines.append(f"  generated tasks solved (coevo/success_rate): {_num(_mean(last, 'coevo/success_rate'))} "
                     f"over the last fifth ({_span(last)})")
        lines.append(f"  generated task difficulty (coevo/difficulty): {_num(_mean(first, 'coevo/difficulty'))} in "
                     f"the first fifth ({_span(first)}) -> {_num(_mean(last, 'coevo/difficulty'))} in the last "
                     f"({_span(last)})")
        final = self.epochs[-1][1] if self.epochs else {}
        lines.append(f"  simulator updates (sim/updates): {_count(final.get('sim/updates'))}; "
                     f"agent updates (agent/updates): {_count(final.get('agent/updates'))}")
        lines.append(f"  checkpoint: {_checkpoints(trainer)}")
        lines.append(f"  logs: {_path(trainer.log_dir) if trainer.loggers else 'none (trainer.logger is off)'}")
        return lines

    def eval_lines(self, trainer: L.Trainer, command: str, prefix: str) -> list[str]:
        found = _prefixed(trainer.callback_metrics, prefix)
        lines = [f"[genenv] run summary: {command}, {_duration(time.perf_counter() - self._began)}",
                 f"  held-out accuracy ({prefix}accuracy): {_num(found.get(prefix + 'accuracy'))}"]
        for key in sorted(k for k in found if k.startswith(prefix + "accuracy_")):
            lines.append(f"    {key.removeprefix(prefix + 'accuracy_'):<24} {_num(found[key])}")
        episodes = {k: v for k, v in found.items() if k.startswith(prefix + "episodes/")}
        if episodes:
            lines.append("  episodes: " + ", ".join(f"{k.removeprefix(prefix + 'episodes/')} {_num(v)}"
                                                    for k, v in sorted(episodes.items())))
        if trainer.ckpt_path:
            lines.append(f"  agent: from the checkpoint {_path(trainer.ckpt_path)}")
        if command == "test":  # where GenEnvModule.on_test_epoch_end writes every answer
            out = os.path.join(trainer.log_dir or trainer.default_root_dir, "test_results.json")
            lines.append(f"  answers and scores: {_path(out)}")
        lines.append(f"  logs: {_path(trainer.log_dir) if trainer.loggers else 'none (trainer.logger is off)'}")
        return lines

    # A resumed run's summary covers the epochs before the checkpoint too.
    def state_dict(self) -> dict[str, Any]:
        return {"start": self.start, "val": self.val, "epochs": self.epochs}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.start = dict(state_dict.get("start", {}))
        self.val = [tuple(v) for v in state_dict.get("val", [])]
        self.epochs = [tuple(e) for e in state_dict.get("epochs", [])]
        # (on_train_start sets it again; a run resumed after its last epoch never gets there)
        self._resumed_at = self.epochs[-1][0] + 1 if self.epochs else None


def _scalars(metrics: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if getattr(v, "numel", lambda: 1)() == 1}


def _prefixed(metrics: dict[str, Any], prefix: str) -> dict[str, float]:
    return {k: v for k, v in _scalars(metrics).items() if k.startswith(prefix)}


def _mean(epochs: list[tuple[int, dict[str, float]]], key: str) -> float | None:
    """Mean over the epochs that have a value (NaN: an epoch without a valid generated task)."""
    values = [m[key] for _, m in epochs if key in m and not math.isnan(m[key])]
    return sum(values) / len(values) if values else None


def _span(epochs: list[tuple[int, dict[str, float]]]) -> str:
    if not epochs:
        return "no epoch"
    return f"epoch {epochs[0][0]}" if len(epochs) == 1 else f"epochs {epochs[0][0]}-{epochs[-1][0]}"


def _num(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.3f}"


def _count(value: float | None) -> str:
    return "n/a" if value is None or math.isnan(value) else str(int(value))


def _duration(seconds: float) -> str:
    minutes, rest = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"wall time {hours} h {minutes} min" if hours else f"wall time {minutes} min {rest} s" if minutes \
        else f"wall time {seconds:.1f} s"


def _path(path: str | None) -> str:
    """Relative to the working directory where it lies below it (as the configs write paths)."""
    if not path:
        return "n/a"
    rel = os.path.relpath(path)
    return rel if not rel.startswith("..") else path


def _checkpoints(trainer: L.Trainer) -> str:
    paths = []
    for cb in trainer.checkpoint_callbacks:
        path = getattr(cb, "last_model_path", "") or getattr(cb, "best_model_path", "")
        paths.append(_path(path) if path else f"none saved (in {_path(getattr(cb, 'dirpath', None))})")
    return "; ".join(paths) if paths else "none (no ModelCheckpoint callback)"
