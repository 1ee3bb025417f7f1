"""Two CPU processes over gloo (DDP, and FSDP2 through Lightning's ModelParallelStrategy): real
`python main.py fit` runs of the quickstart config.

Each rank generates and rolls out its own shard of an epoch's seeds and tasks; pools, success rates,
metrics and the number of training steps are global; a failing rank ends the whole job. FSDP (1),
Lightning's FSDPStrategy, needs a GPU: its wrapping is checked in process."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from ddp_helpers import digest, task_key
from rank_runs import child_env, end_group
from test_fit import _override

pytestmark = pytest.mark.slow  # several processes a test: the slow stage of .ci/run
REPO = Path(__file__).resolve().parents[1]
DDP = ["--trainer.strategy", "ddp_find_unused_parameters_true"]
FSDP2 = ["--trainer.strategy", "lightning.pytorch.strategies.ModelParallelStrategy",
         "--trainer.strategy.data_parallel_size", "2", "--trainer.strategy.tensor_parallel_size", "1",
         "--trainer.strategy.save_distributed_checkpoint", "false"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("model-cache")


def _run(tmp: Path, cache: Path, max_epochs: int, callbacks: list, *args: str, timeout: float) -> tuple[int, str, float]:
    """`python main.py fit` on 2 CPU processes; returns (exit code, output of both ranks, seconds).

    Output goes to a file (a full pipe would block the ranks); on timeout the whole process group
    (rank 0 and the rank it started) is killed and the test fails with the output so far."""
    override = _override(tmp, cache, max_epochs, extra_callbacks=callbacks)
    cmd = [sys.executable, str(REPO / "main.py"), "fit", "--config", str(REPO / "configs/quickstart.yaml"),
           "--config", override, "--trainer.accelerator", "cpu", "--trainer.devices", "2",
           "--trainer.check_val_every_n_epoch", str(max_epochs),
           "--model.agent.warm_start.steps", "50", *args]
    log_path = tmp / "ranks.log"
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=tmp, env=child_env(), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            end_group(proc)  # rank 1 is rank 0's child: end both
    out = log_path.read_text()
    if rc is None:
        pytest.fail(f"2-process run did not finish within {timeout:.0f}s (hang?); output:\n{out[-6000:]}")
    return rc, out, time.monotonic() - t0


@pytest.mark.parametrize("strategy", [DDP, FSDP2], ids=["ddp", "fsdp2"])
def test_ranks_shard_rollouts_and_keep_pools_metrics_and_weights_global(tmp_path, cache, strategy):
    reports = tmp_path / "reports"
    callbacks = [{"class_path": "ddp_helpers.RankReport", "init_args": {"out_dir": str(reports), "starve_rank": 1}}]
    # 3 seeds: rank 0 generates from 2, rank 1 from 1, so the ranks hold different shares of each step;
    # small batches make several steps per epoch.
    rc, out, _ = _run(tmp_path, cache, 2, callbacks, *strategy, "--data.coevo.seeds_per_epoch", "3",
                      "--data.coevo.base_tasks_per_epoch", "0", "--data.coevo.agent_batch_size", "2",
                      "--data.coevo.sim_batch_size", "4", timeout=420)
    assert rc == 0, out[-6000:]
    r0, r1 = (json.loads((reports / f"rank{r}.json").read_text()) for r in (0, 1))
    assert (r0["world_size"], r1["world_size"]) == (2, 2)

    # Every rank drew the same plan and took its own shard: disjoint seeds, both non-empty.
    for epoch in ("0", "1"):
        s0, s1 = set(r0["seeds"][epoch]), set(r1["seeds"][epoch])
        assert s0 and s1 and not s0 & s1, (epoch, s0, s1)
    # The same training steps on both ranks (cut from the whole epoch); rank 1, starved of its agent rows in
    # each epoch's first step, joined that step all the same (DDP: the gradient all-reduce with zeros; FSDP: a
    # blank batch, loss times 0), or the weights below would differ or the run would hang.
    assert r0["steps"] == r1["steps"]
    # DDP kept the weights equal; the checkpoint holds them.
    assert r0["agent"] == r1["agent"] and r0["simulator"] == r1["simulator"]
    assert r0["counters"] == r1["counters"] and r0["counters"]["agent_updates"] >= 1
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert digest(ckpt["state_dict"], "agent.") == r0["agent"]
    assert digest(ckpt["state_dict"], "simulator.") == r0["simulator"]

    # Pools: entries from both shards, each fresh task once, the same on both ranks.
    pools = ckpt["GenEnvDataModule"]["pools"]
    train = [task_key(e["task"]) for e in pools["train"]]
    assert len(train) == len(set(train)), "duplicate D_train entries"
    fresh = [set(sum(r["fresh"].values(), [])) for r in (r0, r1)]
    assert fresh[0] and fresh[1] and set(train) == fresh[0] | fresh[1]
    env = [json.dumps(e, sort_keys=True) for e in pools["env"]]
    assert env and len(env) == len(set(env)), "duplicate D_env entries"
    seeds = [set(sum(r["seeds"].values(), [])) for r in (r0, r1)]
    env_seeds = {e["seed_id"] for e in pools["env"]}
    assert env_seeds & seeds[0] and env_seeds & seeds[1]
    assert r0["pools"] == r1["pools"] == [len(pools["train"]), len(pools["env"])]

    # Success rates and epoch metrics describe the whole epoch, on every rank.
    rates = ckpt["GenEnvDataModule"]["success_rates"]
    assert set(rates) & seeds[0] and set(rates) & seeds[1]
    assert r0["success_rates"] == r1["success_rates"] == rates
    assert json.dumps(r0["metrics"], sort_keys=True) == json.dumps(r1["metrics"], sort_keys=True)  # (NaN-safe)
    for epoch in ("0", "1"):
        valid = len(r0["fresh"][epoch]) + len(r1["fresh"][epoch])
        assert r0["metrics"][epoch]["coevo/valid_tasks"] == valid


def test_shared_base_under_ddp_keeps_both_adapters_equal_across_ranks(tmp_path, cache):
    """Shared-base mode (one base, two adapters) under DDP: both adapters stay trainable through the
    reference passes and the gradient all-reduce keeps every weight equal on the two ranks."""
    reports = tmp_path / "reports"
    callbacks = [{"class_path": "ddp_helpers.RankReport", "init_args": {"out_dir": str(reports)}}]
    same_tiny = [a for k, v in {"hidden_size": 128, "num_layers": 4, "num_heads": 4, "num_kv_heads": 4,
                                "intermediate_size": 384}.items() for a in (f"--model.simulator.tiny.{k}", str(v))]
    rc, out, _ = _run(tmp_path, cache, 1, callbacks, *DDP, "--model.shared_base", "true", *same_tiny,
                      "--model.agent.lora.r", "4", "--model.simulator.lora.r", "4", "--model.agent.warm_start.steps", "0",
                      "--model.simulator.warm_start.steps", "0", "--data.coevo.seeds_per_epoch", "2",
                      "--data.coevo.agent_batch_size", "4", timeout=300)
    assert rc == 0, out[-6000:]
    r0, r1 = (json.loads((reports / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["counters"]["agent_updates"] >= 1
    assert r0["agent"] == r1["agent"] and r0["simulator"] == r1["simulator"]
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)
    assert digest(ckpt["state_dict"], "agent.") == r0["agent"]
    assert any(".simulator." in k for k in ckpt["state_dict"] if k.startswith("agent."))


def test_simulator_kl_cap_takes_one_decision_on_every_rank(tmp_path, cache):
    """rwr.kl_cap under DDP: a step's KL is measured over both ranks' batches and every rank undoes the same
    steps, a rank that only joins a step (its shard ran out of simulator batches) included. At lr 1 every
    step is past the cap: the simulator ends as it started, on both ranks, with the same counters."""
    reports = tmp_path / "reports"
    callbacks = [{"class_path": "ddp_helpers.RankReport", "init_args": {"out_dir": str(reports)}}]
    # 3 seeds: rank 0 has up to 8 simulator samples (two steps of 4), rank 1 up to 4 (one step).
    rc, out, _ = _run(tmp_path, cache, 1, callbacks, *DDP, "--data.coevo.seeds_per_epoch", "3",
                      "--data.coevo.sim_batch_size", "4", "--model.simulator_optimizer.init_args.lr", "1.0",
                      "--model.eval_at_start", "false", "--trainer.limit_val_batches", "0", timeout=300)
    assert rc == 0, out[-6000:]
    r0, r1 = (json.loads((reports / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["counters"] == r1["counters"]
    assert r0["counters"]["sim_skipped_kl"] >= 1 and r0["counters"]["sim_updates"] == 0
    assert r0["simulator"] == r1["simulator"] == r0["simulator_at_start"] == r1["simulator_at_start"]


def test_a_rank_failing_in_rollouts_stops_the_job_with_its_error(tmp_path, cache):
    callbacks = [{"class_path": "ddp_helpers.FailRollouts", "init_args": {"rank": 1}}]
    # The strategy as a class with a collective timeout (docs/scaling-out.md): the bound for a rank
    # that hangs; a raised error reaches the other rank at once.
    strategy = ["--trainer.strategy", "lightning.pytorch.strategies.DDPStrategy",
                "--trainer.strategy.find_unused_parameters", "true", "--trainer.strategy.timeout", "0:02:00"]
    rc, out, _ = _run(tmp_path, cache, 2, callbacks, *strategy, "--model.eval_at_start", "false",
                      "--trainer.limit_val_batches", "0", timeout=300)
    assert rc != 0, out[-6000:]
    assert "injected rollout failure on rank 1" in out, out[-6000:]
    # rank 0 learns of it at the exchange after the rollouts, instead of waiting in a collective, and
    # says which rank failed where and with what (the documented message), before the launcher's
    # child-process watchdog (which polls every few seconds) ends it
    assert ("rank 1 failed during agent rollouts (this is rank 0): RuntimeError: injected rollout failure on rank 1"
            in out), out[-6000:]
    assert not (tmp_path / "ckpt" / "last.ckpt").exists()


def test_fsdp1_wraps_each_policy_and_reference_model_per_decoder_layer(monkeypatch):
    """FSDP (1) refuses CPU-only machines ("FSDP needs a non-CPU accelerator device"), so the
    configure_model path is checked with torch's `wrap` recorded instead of run."""
    import torch.distributed.fsdp.wrap as fsdp_wrap
    from lightning.pytorch.strategies import FSDPStrategy
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    from genenv_pl.distributed import sharding
    from genenv_pl.models.tiny import TinyModelSpec, build_tiny_model
    from genenv_pl.module import GenEnvModule
    from genenv_pl.policy import Policy

    wrapped = []

    class Wrapper(torch.nn.Module):  # stands for FullyShardedDataParallel
        def __init__(self, module, **kwargs):
            super().__init__()
            self.module, self.kwargs = module, kwargs
            wrapped.append(self)

    monkeypatch.setattr(fsdp_wrap, "wrap", lambda module, **kwargs: Wrapper(module, **kwargs))
    strategy = FSDPStrategy()
    assert sharding(strategy) == "fsdp"

    class Tok:
        pad_token_id, eos_token_id, chat_template = 0, 1, None

    def policy():
        return Policy(build_tiny_model(TinyModelSpec(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=2,
                                                     intermediate_size=64), 64, 1), Tok())

    module = GenEnvModule()
    module.agent, module.simulator = policy(), policy()
    module.agent_ref, module.sim_ref = policy().model, policy().model
    module._sharded = sharding(strategy)
    module._shard_policies(strategy)

    assert len(wrapped) == 4  # agent, simulator and both reference models, each on its own
    assert module.agent.model is wrapped[0] and module.simulator.model is wrapped[1]
    assert module.agent_ref is wrapped[2] and module.sim_ref is wrapped[3]
    for w in wrapped:  # the decoder layers become nested FSDP units
        assert w.kwargs["auto_wrap_policy"]._module_classes == {Qwen2DecoderLayer}
    # generation samples from unsharded replicas of the policies
    assert set(module._replicas) == {"agent", "simulator"}
    assert not isinstance(module._replicas["agent"].model, Wrapper)


def test_plain_ddp_is_refused_with_the_strategy_to_use():
    from lightning.pytorch.strategies import DDPStrategy

    from genenv_pl.module import _check_strategy

    with pytest.raises(ValueError, match="ddp_find_unused_parameters_true"):
        _check_strategy(DDPStrategy())
    _check_strategy(DDPStrategy(find_unused_parameters=True))


@pytest.mark.parametrize("strategy", [DDP, FSDP2], ids=["ddp", "fsdp2"])
def test_micro_batches_on_several_ranks_take_the_one_pass_step(tmp_path, cache, strategy):
    """Gradient accumulation with several ranks: each rank splits its own batch, every rank runs as many
    passes as the rank with the most micro-batches (the others pad with blank ones), and the step is the
    one of one pass per rank. The same first batches (replayed) with and without micro-batches, plain
    SGD at lr 1 and no clipping, so that the update is the gradient itself."""
    sgd = ["--model.agent_optimizer.class_path", "torch.optim.SGD", "--model.agent_optimizer.init_args.lr", "1.0",
           "--model.simulator_optimizer.class_path", "torch.optim.SGD", "--model.simulator_optimizer.init_args.lr", "1.0",
           "--model.grpo.grad_clip", "1e9", "--model.rwr.grad_clip", "1e9", "--model.rwr.kl_cap", "null",
           "--model.grpo.warmup_updates", "0", "--data.coevo.drop_zero_std_groups", "false",
           "--data.coevo.seeds_per_epoch", "3", *strategy]
    updates = []
    for micro, replay in ((None, None), (2, tmp_path / "null" / "probe")):
        tmp = tmp_path / ("null" if micro is None else "micro")
        tmp.mkdir()
        probe = {"class_path": "ddp_helpers.PrecisionProbe",
                 "init_args": {"out_dir": str(tmp / "probe"), **({"replay": str(replay)} if replay else {})}}
        extra = ["--model.grpo.micro_batch_size", str(micro), "--model.rwr.micro_batch_size", str(micro)] if micro else []
        rc, out, _ = _run(tmp, cache, 1, [probe], *sgd, *extra, timeout=420)
        assert rc == 0, out[-6000:]
        updates.append(torch.load(tmp / "probe" / "update.pt"))
    steps = [torch.load(tmp_path / "null" / "probe" / f"step_rank{r}.pt") for r in (0, 1)]
    rows = [s["agent"]["input_ids"].shape[0] for s in steps]
    assert max(rows) > 2 and rows[0] != rows[1], rows  # several passes, and not as many on both ranks
    for role in ("agent", "simulator"):
        one_pass, accumulated = updates[0][role], updates[1][role]
        assert one_pass.abs().max() > 0, role
        assert torch.allclose(accumulated, one_pass, rtol=1e-3, atol=1e-5 * float(one_pass.abs().max())), role
