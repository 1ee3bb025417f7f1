"""Running `python main.py` on N CPU processes (gloo) for the rank-parity tests (tests/test_rank_parity.py),
and the test-only pieces those runs load by class path (tests/ is on their PYTHONPATH):

- `EvalReport`, a callback: each rank writes what its evaluation ended with (rows and metrics);
- `ArithmeticGames`, an environment: arithmetic with an interactive mode (two-turn games), whose `play`
  records which rank played, so that a test can count the episodes of a run;
- `ReplayBackend`, a generation backend that records the HF backend's generations per prompt on one run and
  replays them on another: the same epoch's data on 1, 2 and 4 ranks, so that what the ranks do with it
  (dedup, p_hat, pools, steps, updates) can be compared with the one-rank run.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L

from genenv_pl.backends.base import Generation, SamplingParams
from genenv_pl.backends.hf import HFBackend
from genenv_pl.envs.arithmetic import ArithmeticEnv

REPO = Path(__file__).resolve().parents[1]


def strategy_args(kind: str, devices: int) -> list[str]:
    """The --trainer arguments of a run on `devices` CPU processes: "ddp" or "fsdp2" (one process: none)."""
    args = ["--trainer.accelerator", "cpu", "--trainer.devices", str(devices)]
    if devices == 1:
        return args
    if kind == "ddp":
        return args + ["--trainer.strategy", "ddp_find_unused_parameters_true"]
    return args + ["--trainer.strategy", "lightning.pytorch.strategies.ModelParallelStrategy",
                   "--trainer.strategy.data_parallel_size", str(devices), "--trainer.strategy.tensor_parallel_size", "1",
                   "--trainer.strategy.save_distributed_checkpoint", "false"]


def child_env() -> dict[str, str]:
    """The environment of a `main.py` the tests start: one thread per process, tests/ and the repository
    importable (the test-only callbacks and environments load by class path), and a fault handler, so that
    an abort prints every thread's stack."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO), os.environ.get("PYTHONPATH", "")])}


def end_group(proc: subprocess.Popen) -> None:
    """Kill the process group `proc` leads (a launcher's ranks are its children), whatever happened, and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def run_main(cwd: Path, args: list[str], timeout: float) -> tuple[int | None, str]:
    """`python main.py <args>` in `cwd`, one thread per process; (exit code, output of every rank). The output
    goes to a file (a full pipe would block the ranks). Past `timeout` the whole process group is killed and
    the exit code is None (a hang)."""
    cwd.mkdir(parents=True, exist_ok=True)
    log_path = cwd / f"run-{time.monotonic_ns()}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, str(REPO / "main.py"), *args], cwd=cwd, env=child_env(), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            end_group(proc)
    return rc, log_path.read_text()


def free_port(low: int = 15000, high: int = 25000) -> int:
    """A TCP port in [low, high) that nothing listens on now."""
    import socket

    for port in range(low + os.getpid() % 1000, high):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in [{low}, {high})")


def run_nodes(cwd: Path, args: list[str], nodes: int, launcher: str, timeout: float) -> tuple[list[int | None], str]:
    """`main.py <args>` as a job of `nodes` nodes with one process each, every node's process started as the
    launcher starts it on a cluster, side by side on this machine (node i = global rank i):

    - "slurm": `python main.py` in what srun gives each task of scripts/slurm/genenv_2node.sbatch: SLURM_NTASKS,
      SLURM_NNODES, SLURM_NTASKS_PER_NODE, SLURM_PROCID, SLURM_NODEID, SLURM_LOCALID, the job's id and node list;
      Lightning's SLURMEnvironment derives the master address from the node list and the port from the job id.
    - "torchrun": `torchrun --nnodes N --node-rank i --nproc-per-node 1 --master-addr --master-port main.py`.

    Returns each node's exit code (None: killed at `timeout`) and the output of all of them."""
    port = free_port()
    base = child_env()
    for k in [k for k in base if k.startswith(("SLURM_", "MASTER_", "TORCHELASTIC_")) or k in ("RANK", "LOCAL_RANK",
                                                                                                "WORLD_SIZE")]:
        del base[k]
    cwd.mkdir(parents=True, exist_ok=True)
    procs, logs = [], []
    for node in range(nodes):
        if launcher == "slurm":
            env = {**base, "SLURM_JOB_ID": f"7{port - 15000:04d}", "SLURM_JOB_NAME": "genenv-test",
                   "SLURM_NODELIST": "localhost,localhost", "SLURM_NTASKS": str(nodes), "SLURM_NNODES": str(nodes),
                   "SLURM_NTASKS_PER_NODE": "1", "SLURM_PROCID": str(node), "SLURM_NODEID": str(node),
                   "SLURM_LOCALID": "0"}
            cmd = [sys.executable, str(REPO / "main.py"), *args]
        elif launcher == "torchrun":
            env = base
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes), "--node-rank", str(node),
                   "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port),
                   str(REPO / "main.py"), *args]
        else:
            raise ValueError(f"launcher: slurm or torchrun, not {launcher!r}")
        logs.append(open(cwd / f"node{node}-{time.monotonic_ns()}.log", "w"))
        procs.append(subprocess.Popen(cmd, cwd=cwd, env=env, stdout=logs[-1], stderr=subprocess.STDOUT,
                                      start_new_session=True))
    deadline, codes = time.monotonic() + timeout, []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(deadline - time.monotonic(), 0.1)))
        except subprocess.TimeoutExpired:
            codes.append(None)
    for proc, log in zip(procs, logs):
        end_group(proc)
        log.close()
    out = "\n".join(f"---- node {i} ----\n" + Path(log.name).read_text() for i, log in enumerate(logs))
    return codes, out


def _rank() -> int:
    """The global rank of this process (0 before the process group exists)."""
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class EvalReport(L.Callback):
    """Each rank writes `<out_dir>/<stage>_rank<r>.json` at the end of a `validate` or `test`: the scalars of
    trainer.callback_metrics and the rows the module holds for that evaluation."""

    def __init__(self, out_dir: str):
        super().__init__()
        self.out_dir = out_dir

    def _write(self, trainer, pl_module, stage: str, rows) -> None:
        os.makedirs(self.out_dir, exist_ok=True)
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
        with open(os.path.join(self.out_dir, f"{stage}_rank{trainer.global_rank}.json"), "w") as f:
            json.dump({"rank": trainer.global_rank, "world_size": trainer.world_size, "metrics": metrics,
                       "rows": rows}, f)

    def on_validation_end(self, trainer, pl_module):
        if trainer.state.fn == "validate":
            self._write(trainer, pl_module, "validate", getattr(pl_module, "val_rows", None))

    def on_test_end(self, trainer, pl_module):
        self._write(trainer, pl_module, "test", getattr(pl_module, "test_rows", None))


class ArithmeticGames(ArithmeticEnv):
    """Arithmetic with an interactive mode: a game is two turns, a + b, then that sum + c, each answered by
    the agent in the conversation so far; won when both answers are right. `play` appends one line per call
    to `games_log` (the rank that played and how many games), so a test can count who played what."""

    def __init__(self, games_log: str = "games.log", **kwargs: Any):
        super().__init__(**kwargs)
        self.games_log = games_log

    def play(self, act, limit: int | None = None, batch_size: int = 1) -> dict[str, float]:
        games = self.eval_tasks()[: limit if limit is not None else None]
        wins = 0
        for start in range(0, len(games), batch_size):
            batch = games[start : start + batch_size]
            chats = [self.agent_prompt(t) for t in batch]
            first = act(chats)
            follow = [self.make_task(t.data["a"] + t.data["b"], 7, t.data["level"], t.id + "+7") for t in batch]
            chats = [c + [{"role": "assistant", "content": r}] + self.agent_prompt(f) for c, r, f in zip(chats, first, follow)]
            second = act(chats)
            wins += sum(self.score(t, r1)["accuracy"] * self.score(f, r2)["accuracy"]
                        for t, r1, f, r2 in zip(batch, first, follow, second))
        with open(self.games_log, "a") as f:
            f.write(json.dumps({"rank": _rank(), "games": len(games)}) + "\n")
        return {"success": wins / max(len(games), 1), "games": float(len(games))}


class ReplayBackend(HFBackend):
    """The HF backend's generations, recorded per (prompt, sampling) on one run and replayed on another.

    mode "record": generate with HF the first time a (prompt, n) is asked for, keep it, and give the kept
    generations for every later ask; the recording is written to `path` after each call. mode "replay":
    give the recorded generations; a prompt that was not recorded is an error. Greedy evaluation always
    runs HF (it is deterministic and the evaluation tests compare it across ranks). `calls_log`: each call
    appends a line there (the rank, max_new_tokens and the prompts), so a test can see who generated what."""

    def __init__(self, path: str, mode: str = "replay", calls_log: str | None = None):
        super().__init__()
        self.path, self.mode, self.calls_log = path, mode, calls_log
        self.store: dict[str, list[dict]] = {}
        if mode == "replay" or os.path.exists(path):
            with open(path) as f:
                self.store = json.load(f)

    @staticmethod
    def _key(prompt: str, params: SamplingParams) -> str:
        return json.dumps([prompt, params.n, params.max_new_tokens, params.temperature])

    def generate(self, policy, prompts: list[str], params: SamplingParams) -> list[list[Generation]]:
        if params.greedy:
            return super().generate(policy, prompts, params)
        if self.calls_log:
            with open(self.calls_log, "a") as f:
                f.write(json.dumps({"rank": _rank(), "max_new_tokens": params.max_new_tokens,
                                    "prompts": prompts}) + "\n")
        missing = [p for p in dict.fromkeys(prompts) if self._key(p, params) not in self.store]
        if missing and self.mode == "replay":
            raise KeyError(f"ReplayBackend: {len(missing)} prompts were not recorded, e.g. {missing[0]!r}")
        if missing:
            for p, gens in zip(missing, super().generate(policy, missing, params)):
                self.store[self._key(p, params)] = [g.__dict__ for g in gens]
            if _rank() == 0:
                with open(self.path, "w") as f:
                    json.dump(self.store, f)
        return [[Generation(**g) for g in self.store[self._key(p, params)]] for p in prompts]


class FitReport(L.Callback):
    """What a fit did, for comparing runs on different numbers of ranks. Each rank writes
    `<out_dir>/rank<r>.json`: its training steps and the rows it packed per epoch, the epoch's seed batches
    (seed, p_hat, rollouts counted, in band) and metrics, the counters, the pools and the success rates.
    Rank 0 writes `weights_start.pt` and `weights_end.pt`: each role's trainable weights, whole (FSDP2:
    gathered from the shards, a collective every rank joins)."""

    def __init__(self, out_dir: str):
        super().__init__()
        self.out_dir = out_dir
        self.steps: dict[int, int] = {}
        self.rows: dict[int, dict[str, int]] = {}
        self.rounds: dict[int, dict] = {}

    def _weights(self, trainer, pl_module, name: str) -> None:
        import torch
        from torch.distributed.tensor import DTensor

        weights = {role: [(p.full_tensor() if isinstance(p, DTensor) else p).detach().float().clone()
                          for g in opt.param_groups for p in g["params"]]
                   for role, opt in zip(("agent", "simulator"), pl_module.optimizers())}
        if trainer.global_rank == 0:
            os.makedirs(self.out_dir, exist_ok=True)
            torch.save(weights, os.path.join(self.out_dir, name))

    def on_train_start(self, trainer, pl_module):
        self._weights(trainer, pl_module, "weights_start.pt")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        e = trainer.current_epoch
        self.steps[e] = self.steps.get(e, 0) + 1
        rows = self.rows.setdefault(e, {"agent": 0, "sim": 0})
        for role in ("agent", "sim"):
            rows[role] += int(batch[role]["input_ids"].shape[0]) if batch[role] is not None else 0

    def on_train_epoch_end(self, trainer, pl_module):
        stats = trainer.datamodule.last_round
        self.rounds[trainer.current_epoch] = {
            "metrics": {k: v for k, v in stats.metrics.items() if k != "perf/rollout_tokens_per_s"
                        and k != "perf/generation_seconds"},
            "batches": [{"seed": b.seed.id, "position": b.position, "p_hat": b.p_hat, "rollouts": len(b.successes),
                         "tasks": len(b.tasks), "in_band": b.in_band, "duplicates": b.duplicates} for b in stats.batches],
            "groups": [[g.task.id, g.source, g.rewards] for g in stats.groups]}

    def on_train_end(self, trainer, pl_module):
        self._weights(trainer, pl_module, "weights_end.pt")
        dm = trainer.datamodule
        report = {"rank": trainer.global_rank, "world_size": trainer.world_size, "node_rank": trainer.node_rank,
                  "environment": type(getattr(trainer.strategy, "cluster_environment", None)).__name__, "steps": self.steps, "rows": self.rows,
                  "rounds": self.rounds, "counters": pl_module.counters, "success_rates": dm.success_rates,
                  "pools": {"train": [[e["task"]["id"], e["rewards"]] for e in dm.pools.train],
                            "env": [[e["seed_id"], e["text"], e["r_env"]] for e in dm.pools.env]}}
        os.makedirs(self.out_dir, exist_ok=True)
        with open(os.path.join(self.out_dir, f"rank{trainer.global_rank}.json"), "w") as f:
            json.dump(report, f)
