"""AlphaCurriculumCallback: the alpha-Curriculum Reward and band filter (GenEnv section 2, 5-6).

The DataModule asks this callback to score each seed batch while it builds the epoch's data
(the train dataloader is rebuilt before on_train_epoch_start, so scoring cannot wait for a
later hook). At the end of the epoch the callback logs the alpha-zone metrics."""
from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info

from genenv_pl.curriculum import alpha_reward, in_band


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
        self.alpha, self.beta, self.filtering_k = alpha, beta, filtering_k
        self.print_every_n_epochs = print_every_n_epochs

    def score(self, batches) -> None:
        """Set r_env and in_band on each seed batch that has a difficulty estimate p_hat, and the
        same per task on each task with its own p_hat (task_p_hat)."""
        for b in batches:
            b.r_env, b.in_band = self._score(b.p_hat)
            scored = [self._score(p) for p in b.task_p_hat]
            b.task_r_env, b.task_in_band = [r for r, _ in scored], [ok for _, ok in scored]

    def _score(self, p_hat: float | None) -> tuple[float | None, bool]:
        if p_hat is None:
            return None, False
        p = torch.tensor(p_hat)
        return float(alpha_reward(p, self.alpha, self.beta)), bool(in_band(p, self.alpha, self.filtering_k))

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
