"""Sample tables in TensorBoard: what the simulator wrote and how the agent answered."""
from __future__ import annotations

import lightning as L


def _cell(s: str, n: int = 160) -> str:
    s = s.replace("|", "\\|").replace("\n", " ")
    return s if len(s) <= n else s[: n - 1] + "…"


class SampleTableCallback(L.Callback):
    """Markdown tables in TensorBoard: seeds with what the simulator wrote, tasks with the agent's answers."""

    def __init__(self, every_n_epochs: int = 10, max_rows: int = 8):
        """
        Args:
            every_n_epochs: write the tables after every this many epochs.
            max_rows: seed batches (two generations each) and agent groups per table.
        """
        super().__init__()
        self.every_n_epochs = every_n_epochs
        self.max_rows = max_rows

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        stats = getattr(trainer.datamodule, "last_round", None)
        if stats is None or trainer.current_epoch % self.every_n_epochs or not trainer.is_global_zero:
            return
        rows = ["| seed | p_hat | in band | simulator wrote | difficulty |", "|---|---|---|---|---|"]
        for b in stats.batches[: self.max_rows]:
            for g in b.generations[:2]:
                p = "-" if b.p_hat is None else f"{b.p_hat:.2f}"
                rows.append(f"| {_cell(b.seed.id, 40)} | {p} | {b.in_band} | {_cell(g.text)} | "
                            f"{b.tasks[0].difficulty if b.tasks else '-'} |")
        agent = ["| task | source | answer | reward |", "|---|---|---|---|"]
        for g in stats.groups[: self.max_rows]:
            agent.append(f"| {_cell(g.task.id, 40)} | {g.source} | {_cell(g.rollouts[0].text)} | {g.rewards[0]:.2f} |")
        for logger in trainer.loggers:
            exp = getattr(logger, "experiment", None)
            if hasattr(exp, "add_text"):
                exp.add_text("samples/simulator", "\n".join(rows), global_step=trainer.current_epoch)
                exp.add_text("samples/agent", "\n".join(agent), global_step=trainer.current_epoch)
