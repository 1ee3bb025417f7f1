"""AlphaCurriculumCallback: the alpha-Curriculum Reward and band filter (GenEnv section 2, 5-6).

A callback (the design card's choice: the curriculum is configured with the trainer's callbacks), with
an explicit dependency: in `setup` it hands itself to the data module (`use_curriculum`), which scores
each epoch's seed batches with it while it builds the epoch's data (the train loader is rebuilt before
on_train_epoch_start, so scoring cannot wait for a later hook). A run without it stops at fit start in
one line. At the end of the epoch it logs the epoch's metrics, the alpha zone among them."""
from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info

from genenv_pl.config import CurriculumConfig
from genenv_pl.curriculum import alpha_reward, in_band


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


class AlphaCurriculumCallback(L.Callback):
    """R_env = exp(-beta (p_hat - alpha)^2) for each seed batch, the |p_hat - alpha| <= k_min band, alpha-zone metrics."""

    def __init__(self, alpha: float = 0.5, beta: float = 2.0, filtering_k: float = 0.1, print_every_n_epochs: int = 1):
        """
        Args:
            alpha: target success rate of generated tasks (the paper's 0.5).
            beta: sharpness of R_env = exp(-beta (p_hat - alpha)^2); the paper leaves it open, the
                reference config declares 2.0.
            filtering_k: k_min; seed batches with |p_hat - alpha| > k_min skip the simulator update (the paper's 0.1).
            print_every_n_epochs: how often to print a one-line epoch summary (0: never).
        """
        super().__init__()
        self.config = CurriculumConfig(alpha, beta, filtering_k)
        self.print_every_n_epochs = print_every_n_epochs

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if trainer.datamodule is not None and hasattr(trainer.datamodule, "use_curriculum"):
            trainer.datamodule.use_curriculum(self)

    # ---- scoring and filtering ----------------------------------------------------------------
    def score(self, batches, band: bool = True) -> None:
        """Set r_env and in_band on each seed batch that has a difficulty estimate p_hat, and the same per
        task on each task with its own p_hat (task_p_hat). `band` False (the "no-band" ablation): every
        scored batch and task is in band."""
        for b in batches:
            b.r_env, b.in_band = self._score(b.p_hat, band)
            scored = [self._score(p, band) for p in b.task_p_hat]
            b.task_r_env, b.task_in_band = [r for r, _ in scored], [ok for _, ok in scored]

    def _score(self, p_hat: float | None, band: bool = True) -> tuple[float | None, bool]:
        if p_hat is None:
            return None, False
        c, p = self.config, torch.tensor(p_hat)
        return float(alpha_reward(p, c.alpha, c.beta)), not band or bool(in_band(p, c.alpha, c.filtering_k))

    def zone_metrics(self, batches) -> dict[str, float]:
        """Where the epoch's difficulty estimates fall against alpha (NaN without any)."""
        scored = [b for b in batches if b.p_hat is not None]
        tasks = [(p, ok) for b in batches for p, ok in zip(b.task_p_hat, b.task_in_band) if p is not None]
        return {"coevo/alpha_reward": _mean([b.r_env for b in scored]),
                "coevo/in_band_frac": _mean([float(b.in_band) for b in scored]),
                "coevo/task_in_band_frac": _mean([float(ok) for _, ok in tasks]),
                "coevo/task_alpha_gap": _mean([abs(p - self.config.alpha) for p, _ in tasks])}

    # ---- logging --------------------------------------------------------------------------------
    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        stats = getattr(trainer.datamodule, "last_round", None)
        if stats is None:
            return
        # NaN where undefined (no valid generated task this epoch): the tag still appears, as a gap.
        # The metrics are already global (the data module gathers them from every rank): equal on all
        # ranks, with the same keys, so the sync is a no-op average that keeps Lightning's ranks consistent.
        pl_module.log_dict(dict(stats.metrics), on_step=False, on_epoch=True, batch_size=1, sync_dist=True)
        n = self.print_every_n_epochs
        if n and (trainer.current_epoch % n == 0 or trainer.current_epoch == trainer.max_epochs - 1):
            m = stats.metrics
            cb = trainer.callback_metrics
            rank_zero_info(
                f"epoch {trainer.current_epoch:4d} | success {m['coevo/success_rate']:.2f} "
                f"in-band {m['coevo/in_band_frac']:.2f} difficulty {m['coevo/difficulty']:.2f} "
                f"invalid {m['coevo/invalid_rate']:.2f} | agent loss {float(cb.get('agent/loss', float('nan'))):+.4f} "
                f"zero-std {m['agent/zero_std_frac']:.2f} | {m['perf/rollout_tokens_per_s']:.0f} tok/s"
            )
