"""`Updater` (genenv_pl/update.py) on its own, in one process: a stand-in for the module with one linear
"policy" per role and plain torch optimizers, so that each rule is checked on numbers known in advance.
(Several ranks: tests/test_ddp.py.)"""
from __future__ import annotations

import math

import pytest
import torch

from genenv_pl.config import GRPOConfig, RWRConfig
from genenv_pl.update import Updater


class _Policy:
    def __init__(self, n: int = 3):
        self.model = torch.nn.Linear(n, 1, bias=False)
        with torch.no_grad():
            self.model.weight.copy_(torch.arange(1.0, n + 1).unsqueeze(0))
        self.pad_id = 0

    def trainable_parameters(self):
        return list(self.model.parameters())

    @property
    def weight(self) -> torch.Tensor:
        return self.model.weight


class _Backend:
    def __init__(self):
        self.synced = 0

    def sync(self, policy) -> None:
        self.synced += 1


class _Module:
    """What `Updater` uses of `GenEnvModule`, without a trainer (so: one process)."""

    def __init__(self, optimizer=torch.optim.SGD, lr: float = 0.1, warmup: int = 0, kl_cap: float | None = None,
                 grad_clip: float = 1e9):
        self.agent, self.simulator = _Policy(), _Policy()
        self.grpo = GRPOConfig(grad_clip=grad_clip, warmup_updates=warmup)
        self.rwr = RWRConfig(grad_clip=grad_clip, kl_cap=kl_cap, warmup_updates=warmup)
        self._opts = [optimizer(p.trainable_parameters(), lr=lr) for p in (self.agent, self.simulator)]
        steps = warmup if warmup > 0 else 1
        self._scheds = [torch.optim.lr_scheduler.LambdaLR(o, lambda u: min(1.0, (u + 1) / steps)) for o in self._opts]
        self.backend = _Backend()
        self.counters = {"agent_updates": 0, "sim_updates": 0, "sim_skipped_kl": 0, "nonfinite_skipped": 0}
        self.trainer, self._sharded, self.device, self.current_epoch = None, None, torch.device("cpu"), 0
        self.logged: dict[str, float] = {}

    def optimizers(self):
        return self._opts

    def lr_schedulers(self):
        return self._scheds

    def manual_backward(self, loss) -> None:
        loss.backward()

    def clip_gradients(self, opt, gradient_clip_val, gradient_clip_algorithm) -> None:
        torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], gradient_clip_val)

    def log(self, name, value, **kwargs) -> None:
        self.logged[name] = float(value)


X1, X2 = torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0.0, 3.0, -1.0])


def _losses(policy: _Policy, *xs: torch.Tensor, built: list | None = None):
    """One loss per micro-batch, w . x, built only when asked for (as GenEnvModule's steps build them)."""
    for x in xs:
        if built is not None:
            built.append(policy.weight.grad.clone() if policy.weight.grad is not None else None)
        yield (policy.model.weight[0] * x).sum()


def test_micro_batches_accumulate_into_one_step():
    m = _Module(lr=0.1)
    w0 = m.agent.weight.detach().clone()
    grads_seen: list = []
    assert Updater(m).apply("agent", _losses(m.agent, X1, X2, built=grads_seen))
    # each loss is built after the one before went backward: the second sees the first's gradient
    assert grads_seen[0] is None and torch.equal(grads_seen[1], X1.unsqueeze(0))
    torch.testing.assert_close(m.agent.weight.detach(), w0 - 0.1 * (X1 + X2).unsqueeze(0))
    assert m.counters["agent_updates"] == 1 and m.backend.synced == 1
    assert torch.equal(m.simulator.weight.detach(), torch.tensor([[1.0, 2.0, 3.0]]))  # the other role untouched


def test_the_gradient_is_clipped_to_the_roles_norm():
    m = _Module(lr=1.0, grad_clip=1.0)
    w0 = m.agent.weight.detach().clone()
    Updater(m).apply("agent", _losses(m.agent, X1))
    torch.testing.assert_close(m.agent.weight.detach(), w0 - (X1 / X1.norm()).unsqueeze(0))


@pytest.mark.parametrize("role", ["agent", "sim"])
def test_a_non_finite_loss_skips_the_whole_step(role):
    m = _Module()
    policy = m.agent if role == "agent" else m.simulator
    w0 = policy.weight.detach().clone()
    losses = [(policy.model.weight[0] * X1).sum(), torch.tensor(float("nan"))]
    assert not Updater(m).apply(role, iter(losses))
    assert torch.equal(policy.weight.detach(), w0) and policy.weight.grad is None
    assert m.counters["nonfinite_skipped"] == 1 and m.counters[f"{role}_updates"] == 0
    assert m.lr_schedulers()[0 if role == "agent" else 1].last_epoch == 0 and m.backend.synced == 0


def test_a_finite_loss_with_a_non_finite_gradient_skips_the_step():
    m = _Module()
    w0 = m.agent.weight.detach().clone()
    hook = m.agent.weight.register_hook(lambda g: torch.full_like(g, float("nan")))
    assert not Updater(m).apply("agent", _losses(m.agent, X1))
    hook.remove()
    assert torch.equal(m.agent.weight.detach(), w0) and m.agent.weight.grad is None
    assert m.counters["nonfinite_skipped"] == 1 and m.counters["agent_updates"] == 0
    assert m.lr_schedulers()[0].last_epoch == 0


@pytest.mark.parametrize("kl, undone", [(0.2, True), (0.01, False), (float("nan"), True)])
def test_a_simulator_step_past_the_kl_cap_is_undone_with_its_optimizer_state(kl, undone):
    """kl_cap 0.05 on the mean per-token KL of the step (sum 4 kl over 4 tokens): past it, the parameters and
    Adam's state are restored (the first step: no state at all), the scheduler does not step, the backend is
    not told of weights that were never kept; a NaN KL is past any cap."""
    m = _Module(optimizer=torch.optim.Adam, lr=0.1, kl_cap=0.05)
    updater = Updater(m)
    assert updater.apply("sim", _losses(m.simulator, X1), kl_of_update=lambda: (0.01, 1.0))  # within: kept
    opt = m.optimizers()[1]
    w1 = m.simulator.weight.detach().clone()
    state1 = {k: v.clone() for k, v in opt.state[m.simulator.weight].items()}
    kept = updater.apply("sim", _losses(m.simulator, X2), kl_of_update=lambda: (4 * kl, 4.0))
    assert kept is not undone
    assert m.logged["sim/update_kl"] == pytest.approx(kl, nan_ok=True)
    state2 = opt.state[m.simulator.weight]
    if undone:
        assert torch.equal(m.simulator.weight.detach(), w1)
        assert state2.keys() == state1.keys() and all(torch.equal(state2[k], state1[k]) for k in state1)
        assert m.counters == {**m.counters, "sim_updates": 1, "sim_skipped_kl": 1}
        assert m.lr_schedulers()[1].last_epoch == 1 and m.backend.synced == 1
    else:
        assert not torch.equal(m.simulator.weight.detach(), w1) and int(state2["step"]) == 2
        assert m.counters["sim_updates"] == 2 and m.counters["sim_skipped_kl"] == 0
        assert m.lr_schedulers()[1].last_epoch == 2 and m.backend.synced == 2


def test_the_scheduler_steps_once_per_kept_update_and_never_on_a_skip():
    """Linear warm-up over 4 updates: the lr of update k is base * (k + 1) / 4, counted in kept updates only."""
    m = _Module(lr=0.4, warmup=4)
    updater, opt = Updater(m), m.optimizers()[0]
    lrs = [opt.param_groups[0]["lr"]]
    for loss_is_finite in (True, False, True, True, False, True):
        losses = _losses(m.agent, X1) if loss_is_finite else iter([torch.tensor(math.inf)])
        updater.apply("agent", losses)
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == pytest.approx([0.1, 0.2, 0.2, 0.3, 0.4, 0.4, 0.4])
    assert m.counters["agent_updates"] == 4 and m.counters["nonfinite_skipped"] == 2


@pytest.mark.parametrize("kl", [0.01, 1.0], ids=["kept", "undone"])
def test_gradients_are_freed_after_each_step(kl):
    """Both models' full gradients must not stay in memory through the other role's backward and the next
    generation phase: after a step (kept or undone by the KL cap) no parameter holds a gradient."""
    m = _Module(optimizer=torch.optim.Adam, kl_cap=0.05)
    updater = Updater(m)
    updater.apply("agent", _losses(m.agent, X1))
    assert m.agent.weight.grad is None
    updater.apply("sim", _losses(m.simulator, X2), kl_of_update=lambda: (kl, 1.0))
    assert m.simulator.weight.grad is None and m.agent.weight.grad is None


def test_run_steps_a_role_with_a_batch_and_reports_whether_its_step_was_kept():
    m = _Module(kl_cap=0.05)
    updater = Updater(m)
    step = lambda b: updater.apply("sim", _losses(m.simulator, b["x"]), kl_of_update=lambda: (b["kl"], 1.0))  # noqa: E731
    packed = {"input_ids": torch.zeros(1, 2, dtype=torch.long), "response_mask": torch.ones(1, 2)}  # (a batch's shape)
    assert updater.run("sim", {"x": X1, "kl": 0.0, **packed}, step) is True
    assert updater.totals["sim"] == (1.0, 2.0)  # the step's rows and response tokens (one process: its own)
    assert updater.run("sim", {"x": X1, "kl": 1.0, **packed}, step) is False  # undone by the cap
    assert updater.run("sim", None, step) is False  # no batch: nothing to step
    assert m.counters["sim_updates"] == 1 and m.counters["sim_skipped_kl"] == 1
