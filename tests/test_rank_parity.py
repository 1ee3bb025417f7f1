"""A run on N ranks is the same run as on one (torchtitan's loss-parity tests, for GenEnv's paths):
`python main.py` on 1, 2 and 4 gloo processes on this CPU, DDP and FSDP2, with the same global settings.

- evaluation: `validate` and `test` of one checkpoint give the same per-task rows and metrics on every
  rank count, each task counted once, the test table and test_results.json over the whole set, the
  episodes played once; an evaluation set with a group smaller than the number of ranks finishes;
- the update: the same epoch's data (recorded on one rank by `rank_runs.ReplayBackend`, replayed on N)
  gives the same weights, counters, pools and simulator decisions;
- generation: every seed of an epoch is written for once across ranks, p_hat counts every rollout of its
  seed batch, the pools hold as many entries as on one rank.

Slow (about a dozen multi-process runs): marked `slow`, run by `.ci/run` in a stage of its own."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rank_runs import REPO, run_main, run_nodes, strategy_args

pytestmark = pytest.mark.slow

QUICKSTART = str(REPO / "configs/quickstart.yaml")
RANKS = [(1, "ddp"), (2, "ddp"), (2, "fsdp2"), (4, "ddp"), (4, "fsdp2")]
EVAL_TIMEOUT = 240  # seconds: an evaluation of 60 tasks takes well under a minute per run; past this, a hang


def _config(tmp: Path, cache: Path, report: Path, **data: dict) -> str:
    """The quickstart with small models, one epoch, 60 held-out tasks in batches of 7 (9 batches, so that
    ranks hold different numbers of them), and the `EvalReport` callback."""
    cfg = {
        "trainer": {
            "max_epochs": 1,
            "logger": {"class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                       "init_args": {"save_dir": str(tmp / "runs"), "name": "t"}},
            "callbacks": [
                {"class_path": "callbacks.AlphaCurriculumCallback", "init_args": {"filtering_k": 0.5}},
                {"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                 "init_args": {"dirpath": str(tmp / "ckpt"), "save_last": True, "save_top_k": 0,
                               "save_on_train_epoch_end": True}},
                {"class_path": "rank_runs.EvalReport", "init_args": {"out_dir": str(report)}},
            ],
        },
        "model": {"cache_dir": str(cache),
                  "agent": {"warm_start": {"steps": 150, "batch_size": 32}},
                  "simulator": {"tiny": {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "num_kv_heads": 2,
                                         "intermediate_size": 192},
                                "warm_start": {"steps": 300, "batch_size": 32}}},
        "data": {"env_args": {"eval_per_level": 10, "seeds_per_level": 2, **data.get("env_args", {})},
                 "coevo": {"seeds_per_epoch": 4, "eval_batch_size": 7, **data.get("coevo", {})}},
    }
    if "env" in data:
        cfg["data"]["env"] = data["env"]
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "override.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path.as_posix()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> tuple[Path, Path]:
    """A quickstart-shaped checkpoint after one epoch (one rank), and the model cache it was built with."""
    tmp = tmp_path_factory.mktemp("fit")
    cache = tmp_path_factory.mktemp("cache")
    rc, out = run_main(tmp, ["fit", "--config", QUICKSTART, "--config", _config(tmp, cache, tmp / "report"),
                             *strategy_args("ddp", 1)], timeout=600)
    assert rc == 0, out[-6000:]
    return tmp / "ckpt" / "last.ckpt", cache


def _evaluate(tmp: Path, cache: Path, ckpt: Path, command: str, devices: int, kind: str, **data) -> tuple[str, dict]:
    report = tmp / "report"
    args = [command, "--config", QUICKSTART, "--config", _config(tmp, cache, report, **data),
            *strategy_args(kind, devices), "--ckpt_path", str(ckpt)]
    rc, out = run_main(tmp, args, timeout=EVAL_TIMEOUT)
    assert rc is not None, f"{command} on {devices} ranks ({kind}) did not finish in {EVAL_TIMEOUT}s (hang?):\n{out[-6000:]}"
    assert rc == 0, out[-6000:]
    reports = {r: json.loads((report / f"{command}_rank{r}.json").read_text()) for r in range(devices)}
    return out, reports


def _rows(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: r["id"])


@pytest.mark.parametrize("devices,kind", RANKS, ids=[f"{d}-{k}" for d, k in RANKS])
def test_test_scores_the_whole_set_once_as_one_rank_does(tmp_path, checkpoint, devices, kind):
    """`main.py test --ckpt_path` on N ranks: the printed table, test_results.json and every rank's
    metrics cover all 60 tasks, each once, and equal the one-rank run's; the episodes are played once."""
    ckpt, cache = checkpoint
    games = {"env": "rank_runs:ArithmeticGames", "env_args": {"games_log": str(tmp_path / "games.log")},
             "coevo": {"eval_episodes": 5}}
    one = tmp_path / "one"
    _, ref = _evaluate(one, cache, ckpt, "test", 1, "ddp", **games)
    ref_results = json.loads(next((one / "runs").rglob("test_results.json")).read_text())
    assert ref_results["groups"]["overall"]["n"] == 60
    if devices == 1:
        return
    many = tmp_path / "many"
    out, reports = _evaluate(many, cache, ckpt, "test", devices, kind, **games)
    results = json.loads(next((many / "runs").rglob("test_results.json")).read_text())
    ids = [r["id"] for r in results["rows"]]
    assert len(ids) == len(set(ids)) == 60, "each task scored once"
    assert _rows(results["rows"]) == _rows(ref_results["rows"])
    assert results["groups"] == ref_results["groups"] and results["corpus"] == ref_results["corpus"]
    assert results["episodes"] == ref_results["episodes"]
    assert f"{'overall':<32} {60:>6}" in out, out[-3000:]
    for r in range(devices):  # every rank holds the whole evaluation's metrics
        assert reports[r]["metrics"] == ref[0]["metrics"], r
    played = [json.loads(line) for line in (tmp_path / "games.log").read_text().splitlines()]
    assert played == [{"rank": 0, "games": 5}, {"rank": 0, "games": 5}], "one rank plays the episodes, once per run"


@pytest.mark.parametrize("devices,kind", RANKS[1:], ids=[f"{d}-{k}" for d, k in RANKS[1:]])
def test_validate_gives_the_one_rank_rows_and_metrics(tmp_path, checkpoint, devices, kind):
    ckpt, cache = checkpoint
    _, ref = _evaluate(tmp_path / "one", cache, ckpt, "validate", 1, "ddp")
    _, reports = _evaluate(tmp_path / "many", cache, ckpt, "validate", devices, kind)
    assert len(ref[0]["rows"]) == 60
    for r in range(devices):
        assert _rows(reports[r]["rows"]) == _rows(ref[0]["rows"]), r
        assert reports[r]["metrics"] == ref[0]["metrics"], r


@pytest.mark.parametrize("devices,kind", [(2, "ddp"), (4, "fsdp2")], ids=["2-ddp", "4-fsdp2"])
def test_a_group_smaller_than_the_ranks_does_not_hang(tmp_path, checkpoint, devices, kind):
    """One task per level and one task per batch: most ranks see only some of the groups. Every rank must still
    log every group's accuracy (the same collectives), and the run must finish."""
    ckpt, cache = checkpoint
    small = {"env_args": {"eval_per_level": 1}, "coevo": {"eval_batch_size": 1}}
    _, ref = _evaluate(tmp_path / "one", cache, ckpt, "validate", 1, "ddp", **small)
    _, reports = _evaluate(tmp_path / "many", cache, ckpt, "validate", devices, kind, **small)
    groups = {k for k in ref[0]["metrics"] if k.startswith("val/accuracy_")}
    assert len(groups) == 6
    for r in range(devices):
        assert reports[r]["metrics"] == ref[0]["metrics"], r


# ---- the update -------------------------------------------------------------------------------------
FIT = ["--trainer.max_epochs", "2", "--trainer.limit_val_batches", "0", "--model.eval_at_start", "false",
       "--data.coevo.seeds_per_epoch", "4", "--data.coevo.base_tasks_per_epoch", "2",
       "--data.coevo.replay_tasks_per_epoch", "2", "--data.coevo.group_size", "4",
       "--data.coevo.agent_batch_size", "3", "--data.coevo.sim_batch_size", "4",
       "--data.coevo.drop_zero_std_groups", "false", "--model.grpo.micro_batch_size", "4",
       "--model.rwr.micro_batch_size", "3", "--model.rwr.replay_per_epoch", "2"]
FIT_TIMEOUT = 420


def _fit(tmp: Path, cache: Path, recording: Path | None, mode: str, devices: int, kind: str,
         *args: str, launcher: str | None = None) -> tuple[dict, dict]:
    """A fit with `rank_runs.FitReport` (and, given a recording, `ReplayBackend` in `mode`): each rank's
    report, and rank 0's weights and the backend's calls. `launcher` ("slurm", "torchrun"): `devices` nodes of
    one process each, started as that launcher starts them (`rank_runs.run_nodes`), instead of one node's."""
    report = tmp / "report"
    backend = ["--model.backend", "rank_runs:ReplayBackend", "--model.backend_args",
               json.dumps({"path": str(recording), "mode": mode, "calls_log": str(tmp / "calls.log")})] if recording else []
    cfg = _config(tmp, cache, tmp / "eval")
    callbacks = yaml.safe_load(Path(cfg).read_text())
    callbacks["trainer"]["callbacks"].append({"class_path": "rank_runs.FitReport", "init_args": {"out_dir": str(report)}})
    Path(cfg).write_text(yaml.safe_dump(callbacks))
    argv = ["fit", "--config", QUICKSTART, "--config", cfg, *strategy_args(kind, devices), *FIT, *backend, *args]
    if launcher is None:
        rc, out = run_main(tmp, argv, timeout=FIT_TIMEOUT)
    else:
        codes, out = run_nodes(tmp, [*argv, "--trainer.num_nodes", str(devices), "--trainer.devices", "1"], devices,
                               launcher, timeout=FIT_TIMEOUT)
        rc = None if None in codes else max(codes, key=abs)
    assert rc is not None, f"fit on {devices} ranks ({kind}) did not finish in {FIT_TIMEOUT}s (hang?):\n{out[-6000:]}"
    assert rc == 0, out[-6000:]
    import torch

    ranks = {r: json.loads((report / f"rank{r}.json").read_text()) for r in range(devices)}
    weights = {name: torch.load(report / f"weights_{name}.pt") for name in ("start", "end")}
    calls = [json.loads(line) for line in (tmp / "calls.log").read_text().splitlines()] if recording else []
    return ranks, {"weights": weights, "calls": calls, "out": out}


@pytest.fixture(scope="module")
def one_rank_fit(tmp_path_factory, checkpoint):
    """Two epochs on one rank, generations recorded, then the same fit replaying them: the reference."""
    _, cache = checkpoint
    tmp = tmp_path_factory.mktemp("one")
    recording = tmp / "generations.json"
    _fit(tmp / "record", cache, recording, "record", 1, "ddp")
    ranks, extra = _fit(tmp / "replay", cache, recording, "replay", 1, "ddp")
    return recording, cache, ranks[0], extra


@pytest.mark.parametrize("devices,kind", RANKS[1:], ids=[f"{d}-{k}" for d, k in RANKS[1:]])
def test_the_same_epochs_on_n_ranks_train_the_one_rank_weights(tmp_path, one_rank_fit, devices, kind):
    """The same generations (replayed) on N ranks: the same seed batches, p_hat, groups, pools, steps,
    counters and metrics as on one rank, every seed written for once, and the same weights within float
    rounding (see `_close`)."""
    recording, cache, ref, ref_extra = one_rank_fit
    ranks, extra = _fit(tmp_path, cache, recording, "replay", devices, kind)
    for r, rep in ranks.items():
        assert rep["rounds"] == ref["rounds"], r  # batches (p_hat over all their rollouts), groups, metrics
        assert rep["pools"] == ref["pools"] and rep["success_rates"] == ref["success_rates"], r
        assert rep["counters"] == ref["counters"], r  # updates, KL-cap undos, skips
        assert rep["steps"] == ref["steps"], r  # the same global steps on every rank
    for epoch, rows in ref["rows"].items():  # the ranks packed the one-rank rows between them, each once
        for role in ("agent", "sim"):
            assert sum(ranks[r]["rows"][epoch][role] for r in ranks) == rows[role], (epoch, role)
    # every seed of an epoch was written for once, by one rank (the simulator's calls: its max_new_tokens)
    sim_tokens = yaml.safe_load(Path(QUICKSTART).read_text())["data"]["coevo"]["sim_sampling"]["max_new_tokens"]
    sim_calls = [c for c in extra["calls"] if c["max_new_tokens"] == sim_tokens]
    ref_sim = [c for c in ref_extra["calls"] if c["max_new_tokens"] == sim_tokens]
    asked = sorted(p for c in sim_calls for p in c["prompts"])
    assert asked == sorted(p for c in ref_sim for p in c["prompts"]) and len(asked) == 8
    assert {c["rank"] for c in sim_calls} == set(range(min(devices, 4)))
    _close(extra["weights"], ref_extra["weights"])


@pytest.mark.parametrize("launcher,kind", [("slurm", "fsdp2"), ("torchrun", "ddp")], ids=["slurm-fsdp2", "torchrun-ddp"])
def test_two_nodes_started_by_their_launcher_train_the_one_rank_weights(tmp_path, one_rank_fit, launcher, kind):
    """docs/gpu.md's multi-node launch on this machine: two "nodes" of one process each (`--trainer.num_nodes 2
    --trainer.devices 1`), each started as srun starts a task of scripts/slurm/genenv_2node.sbatch (SLURM's
    variables; the master address and port derived by Lightning from the node list and job id) or as
    `torchrun --nnodes 2 --node-rank i` starts it. Held to the one-rank run as the one-node runs are."""
    recording, cache, ref, ref_extra = one_rank_fit
    ranks, extra = _fit(tmp_path, cache, recording, "replay", 2, kind, launcher=launcher)
    env = "SLURMEnvironment" if launcher == "slurm" else "TorchElasticEnvironment"
    for r, rep in ranks.items():
        assert rep["world_size"] == 2 and rep["environment"] == env and rep["node_rank"] == r, rep["environment"]
        assert rep["rounds"] == ref["rounds"] and rep["pools"] == ref["pools"], r
        assert rep["counters"] == ref["counters"] and rep["steps"] == ref["steps"], r
    for epoch, rows in ref["rows"].items():
        for role in ("agent", "sim"):
            assert sum(ranks[r]["rows"][epoch][role] for r in ranks) == rows[role], (epoch, role)
    assert {c["rank"] for c in extra["calls"]} == {0, 1}  # both nodes sampled
    _close(extra["weights"], ref_extra["weights"])


def _close(weights: dict, ref: dict) -> None:
    """The end weights of both runs agree, from the same start, to float rounding: the difference is at most
    1e-4 of the change training made in norm, and 1e-2 of the largest change element by element. Why not bit
    for bit: N ranks sum a step's gradient in another order (each rank its rows, then the all-reduce; FSDP2
    also runs a group's prompts unshared), and float addition is not associative. The gradients differ in
    their last bits and single weights land an fp32 ulp or two apart (a few 1e-7 near 1, 1e-6 near 10).
    Measured on 2 and 4 ranks, DDP and FSDP2, over these two epochs (14 agent steps): 0.5-1.9e-5 in
    norm, 3.9-9.4e-4 element by element; the bounds leave 5x and 10x. (`-s` prints the figures.)"""
    import torch

    for role in ("agent", "simulator"):
        start, ref_start = (torch.cat([w.flatten() for w in x["start"][role]]) for x in (weights, ref))
        end, ref_end = (torch.cat([w.flatten() for w in x["end"][role]]) for x in (weights, ref))
        assert torch.equal(start, ref_start), role
        change = ref_end - ref_start
        moved, diff = float(change.abs().max()), float((end - ref_end).abs().max())
        norm = float((end - ref_end).norm() / change.norm())
        print(f"{role}: largest change {moved:.3e}, largest difference {diff:.3e} ({diff / moved:.1e} of it); "
              f"difference / change in norm {norm:.1e}")
        assert moved > 0, role
        assert norm <= 1e-4 and diff <= 1e-2 * moved, (role, diff, moved, norm)


# ---- one seed ---------------------------------------------------------------------------------------
def test_seed_everything_decides_the_run(tmp_path, checkpoint):
    """`data.seed` follows `seed_everything` unless set: two seeds give two runs, one seed twice gives one."""
    _, cache = checkpoint
    rounds = {name: _fit(tmp_path / name, cache, None, "", 1, "ddp", "--seed_everything", str(seed),
                         "--trainer.max_epochs", "1")[0][0]["rounds"] for name, seed in (("a", 1), ("b", 2), ("c", 1))}
    assert rounds["a"] == rounds["c"]
    assert rounds["a"] != rounds["b"]
    pinned = _fit(tmp_path / "d", cache, None, "", 1, "ddp", "--seed_everything", "2", "--data.seed", "1",
                  "--trainer.max_epochs", "1")[0][0]["rounds"]
    assert pinned == rounds["a"]  # set, data.seed is what decides


@pytest.mark.parametrize("devices,kind", [(2, "ddp"), (2, "fsdp2")], ids=["2-ddp", "2-fsdp2"])
def test_the_start_of_training_score_covers_the_set_later_validations_do(tmp_path, checkpoint, devices, kind):
    """On N ranks the starting agent is scored on the validation loop's batches and ranks: with nothing
    learned (lr 0), the score at the start and after the epoch are the same, group by group."""
    _, cache = checkpoint
    frozen = ["--model.agent_optimizer.init_args.lr", "0.0", "--model.simulator_optimizer.init_args.lr", "0.0",
              "--model.eval_at_start", "true", "--trainer.limit_val_batches", "1.0",
              "--trainer.check_val_every_n_epoch", "1", "--trainer.max_epochs", "1"]
    _, extra = _fit(tmp_path, cache, None, "", devices, kind, *frozen)
    summary = extra["out"][extra["out"].index("[genenv] run summary: fit"):]
    start_end = [line.split() for line in summary.splitlines()[1:8] if "->" in line]
    assert len(start_end) == 7, summary[:1500]  # overall and the 6 levels
    for words in start_end:
        i = words.index("->")
        start, end = words[i - 1], words[i + 2] if words[i + 1] == "end" else words[i + 1]
        assert start == end, (words, summary[:1500])
