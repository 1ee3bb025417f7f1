"""SimulatorConditioningCallback: has the simulator learned to use the success signal in its prompt?

Every `every_n_epochs` epochs (and once before training) the simulator writes variations of a
fixed probe set of seeds, each seed shown once with every success rate in `success_rates`. For
each of those buckets b it logs the mean difficulty written minus the seed's difficulty
(`sim/delta_level_bucket{b}`) and the least-squares slope of that against b
(`sim/conditioning_slope`, difficulty levels per bucket). A simulator that ignores the signal has a
slope of about 0; one that writes harder tasks after success and easier ones after failure has a
positive slope. The probe samples in a forked RNG, so it leaves the run's own sampling unchanged.
"""
from __future__ import annotations

from dataclasses import replace

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info

from genenv_pl.curriculum import conditioning_slope
from genenv_pl.envs.base import Environment, Task


def probe_conditioning(env: Environment, generate, seeds: list[Task], success_rates: list[float]) -> dict[str, float]:
    """`generate(prompts)` returns a list of sample texts per prompt. Returns the mean difficulty change
    per bucket (NaN where nothing valid came back), the slope, and the valid fraction."""
    prompts, keys = [], []
    for b, rate in enumerate(success_rates):
        for s in seeds:
            prompts.append(env.simulator_prompt(s, rate))
            keys.append((b, s))
    outs = generate(prompts)
    deltas: dict[int, list[float]] = {b: [] for b in range(len(success_rates))}
    total = valid = 0
    for (b, seed), texts in zip(keys, outs):
        for text in texts:
            total += 1
            try:
                task = env.parse_task(text, seed)
            except Exception:  # InvalidTask, or an environment bug that must not end the run: not counted valid
                continue
            valid += 1
            deltas[b].append(task.difficulty - seed.difficulty)
    means = [sum(d) / len(d) if d else float("nan") for d in deltas.values()]
    slope = conditioning_slope(torch.arange(len(means)), torch.tensor(means))
    return {**{f"sim/delta_level_bucket{b}": m for b, m in enumerate(means)},
            "sim/conditioning_slope": float(slope), "sim/probe_valid_frac": valid / max(total, 1)}


class SimulatorConditioningCallback(L.Callback):
    """Probes whether the simulator writes harder tasks when its prompt shows a higher success rate."""

    def __init__(self, every_n_epochs: int = 25, num_probe_seeds: int = 12, samples_per_prompt: int = 8,
                 success_rates: list[float] | None = None):
        """
        Args:
            every_n_epochs: probe after every this many epochs (and once before the first).
            num_probe_seeds: seeds in the probe set, spread evenly over the environment's seed list.
            samples_per_prompt: variations sampled per (seed, success rate) at the simulator's
                training temperature (`data.coevo.sim_sampling`).
            success_rates: the success rates shown, one bucket each (default 0, 0.25, 0.5, 0.75, 1).
        """
        super().__init__()
        self.every_n_epochs = every_n_epochs
        self.num_probe_seeds = num_probe_seeds
        self.samples_per_prompt = samples_per_prompt
        self.success_rates = success_rates if success_rates is not None else [0.0, 0.25, 0.5, 0.75, 1.0]

    def probe(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, float]:
        dm = trainer.datamodule
        seeds = dm.env.seed_tasks()
        step = max(1, len(seeds) // self.num_probe_seeds)
        seeds = seeds[::step][: self.num_probe_seeds]
        simulator = pl_module.for_generation("simulator")
        params = replace(dm.cfg.sim_sampling, n=self.samples_per_prompt)

        def generate(messages):
            gens = pl_module.backend.generate(simulator, [simulator.render(m) for m in messages], params)
            return [[g.text for g in per_prompt] for per_prompt in gens]

        with torch.random.fork_rng():  # the probe must not change what the run samples next
            return probe_conditioning(dm.env, generate, seeds, self.success_rates)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch > 0:  # resumed: the starting point was logged by the first run
            return
        metrics = {**self.probe(trainer, pl_module), "sim/probe_epoch": 0.0}
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=0)
        rank_zero_info(f"[genenv] starting simulator: conditioning slope {metrics['sim/conditioning_slope']:+.3f}")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.every_n_epochs or (trainer.current_epoch + 1) % self.every_n_epochs:
            return
        metrics = {**self.probe(trainer, pl_module), "sim/probe_epoch": float(trainer.current_epoch + 1)}
        pl_module.log_dict(metrics, on_step=False, on_epoch=True, batch_size=1, rank_zero_only=True)
