"""Keeping several processes (DDP / FSDP ranks) in step during co-evolution.

Each rank generates and rolls out its own shard of an epoch's tasks; what must be global (pools,
per-seed success rates, epoch metrics, the number of training steps) is exchanged here. Every
helper is a no-op in a single process: no collective, no copy, the same results as before.

Failures: a rank that raises while the ranks work apart (generation, rollouts) would otherwise
leave the others waiting in their next collective. `RankSync.guard` catches the exception and
`RankSync.exchange` hands it to every rank, so that all of them raise: the failed rank its own
error, the others an error that names the failed rank and its message.
"""
from __future__ import annotations

import traceback
from contextlib import contextmanager
from typing import Any, Iterator, Sequence, TypeVar

import torch

T = TypeVar("T")


class Failure:
    """What a `guard` block caught (None while nothing failed)."""

    error: Exception | None = None


class RankSync:
    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.rank = int(getattr(trainer, "global_rank", 0))
        self.world = int(getattr(trainer, "world_size", 1))

    @property
    def distributed(self) -> bool:
        return self.world > 1 and torch.distributed.is_available() and torch.distributed.is_initialized()

    def shard(self, items: Sequence[T]) -> list[T]:
        """This rank's share of a list that every rank drew identically (round robin)."""
        return list(items[self.rank :: self.world]) if self.distributed else list(items)

    @contextmanager
    def guard(self) -> Iterator[Failure]:
        """Catch an exception of this rank's work so that it can be exchanged (single process: re-raised)."""
        failure = Failure()
        try:
            yield failure
        except Exception as e:
            if not self.distributed:
                raise
            failure.error = e

    def exchange(self, payload: Any, failure: Failure | None = None, phase: str = "") -> list[Any]:
        """All-gather one picklable object per rank (rank order). If any rank failed, every rank raises."""
        error = failure.error if failure is not None else None
        if not self.distributed:
            if error is not None:
                raise error
            return [payload]
        items: list[Any] = [None] * self.world
        mine = (None, payload) if error is None else (_describe(error), None)
        torch.distributed.all_gather_object(items, mine)
        if error is not None:
            raise error
        failed = [(r, msg) for r, (msg, _) in enumerate(items) if msg is not None]
        if failed:
            r, msg = failed[0]
            raise RuntimeError(f"rank {r} failed during {phase or 'generation'} (this is rank {self.rank}): {msg}")
        return [p for _, p in items]

    def sum(self, value: float) -> float:
        """Sum of a number over ranks (a small all-reduce), e.g. how many ranks have a batch."""
        return self.sums([value])[0]

    def sums(self, values: list[float]) -> list[float]:
        """Several numbers, each summed over ranks, in one all-reduce. In float64, never the default dtype:
        `bf16-true` makes bf16 the default inside the step, and bf16 counts only integers up to 256 exactly
        (token counts, KL sums)."""
        if not self.distributed:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self.trainer.strategy.root_device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
        return t.tolist()

    def max(self, value: float) -> float:
        """Largest value of a number over ranks (a small all-reduce)."""
        if not self.distributed:
            return value
        t = torch.tensor(float(value), dtype=torch.float64, device=self.trainer.strategy.root_device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        return float(t)


def _describe(e: BaseException) -> str:
    """The exception and the innermost frames of its traceback, short enough to send to every rank."""
    tb = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.endswith(("contextlib.py", __file__))][-3:]
    where = "; ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}" for f in tb)
    return "".join(traceback.format_exception_only(type(e), e)).strip() + (f" [at {where}]" if where else "")


# ---- sharded strategies (FSDP) ----------------------------------------------------------------
def sharding(strategy: Any) -> str | None:
    """"fsdp2" for Lightning's ModelParallelStrategy (torch `fully_shard`), "fsdp" for FSDPStrategy, else None."""
    from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy

    if isinstance(strategy, ModelParallelStrategy):
        return "fsdp2"
    if isinstance(strategy, FSDPStrategy):
        return "fsdp"
    return None


def decoder_layer_classes(model: torch.nn.Module) -> set[type]:
    """The transformer block classes of a Hugging Face model (its `_no_split_modules`), LoRA or not."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(base, "_no_split_modules", None) or [])
    return {type(m) for m in model.modules() if type(m).__name__ in names}


def shard_module(model: torch.nn.Module, kind: str, strategy: Any, compute_dtype: torch.dtype | None = None
                 ) -> torch.nn.Module:
    """Shard one model on its own: every decoder layer is a unit, the rest (embeddings, head) the root.

    fsdp2: `fully_shard` over all ranks (data parallel only), in place. fsdp: FSDP-wrapped with the
    strategy's settings (call inside Lightning's `configure_model`, which runs in the strategy's
    `enable_wrap` context); the decoder layers become nested units unless the strategy sets its own
    `auto_wrap_policy`. Returns the sharded module (fsdp: the wrapper).

    `compute_dtype` (fsdp2, bf16-mixed): the shards stay in their own dtype (fp32 masters for a trained
    policy) and gradients are reduced in fp32 (torch's `MixedPrecisionPolicy`). The decoder layers are
    gathered in `compute_dtype`, the root (embeddings, final norm, LM head) as it is, and no layer's input
    is cast: the residual stream stays in the embeddings' fp32 and the precision plugin's autocast runs the
    matrix products in bf16, as bf16-mixed computes in one process. (All-bf16 compute, verl's policy, put
    the residual stream in bf16: one step of the tiny simulator then moved its weights with cosine 0.976-0.990
    to the fp32 step, against >= 0.99 here.) `compute_copy` is a local model that computes the same way."""
    layers = decoder_layer_classes(model)
    if kind == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(strategy.root_device.type, (torch.distributed.get_world_size(),))
        layer_mp, root_mp = {}, {}
        if compute_dtype is not None:
            layer_mp = {"mp_policy": MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32,
                                                          cast_forward_inputs=False)}
            root_mp = {"mp_policy": MixedPrecisionPolicy(reduce_dtype=torch.float32, cast_forward_inputs=False)}
        for m in list(model.modules()):
            if type(m) in layers:
                fully_shard(m, mesh=mesh, **layer_mp)
        fully_shard(model, mesh=mesh, **root_mp)
        return model
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy, wrap

    own_policy = "auto_wrap_policy" in getattr(strategy, "kwargs", {})
    return wrap(model, **({} if own_policy or not layers else {"auto_wrap_policy": ModuleWrapPolicy(layers)}))


def compute_copy(model: torch.nn.Module, compute_dtype: torch.dtype) -> torch.nn.Module:
    """A local copy of `model` that computes as its FSDP2 shards do under `shard_module(..., compute_dtype)`:
    the decoder layers' parameters in `compute_dtype`, the rest (and every buffer) as they are."""
    import copy

    from genenv_pl.policy import cast_parameters

    replica = copy.deepcopy(model)
    layers = decoder_layer_classes(replica)
    for m in replica.modules():
        if type(m) in layers:
            cast_parameters(m, compute_dtype)
    return replica


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The full (unsharded) weights of a sharded model on every rank: a collective, every rank calls it."""
    from torch.distributed.tensor import DTensor

    state = model.state_dict()  # FSDP (1): full tensors in its default FULL_STATE_DICT mode; FSDP2: DTensors
    return {k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in state.items()}
