"""Paddle's schedulers speak torch's scheduler protocol too (added names only): what PyTorch's
frameworks call on a scheduler, and the groups' ``lr`` following ``step()`` at once."""

from __future__ import annotations

import copy
import math
import pickle

import pytest
import torch

import paddle_compat.optimizer as popt
from paddle_compat.optimizer import lr

# One of each of Paddle's 17 schedulers.
SCHEDULERS = {
    "NoamDecay": lambda: lr.NoamDecay(d_model=8, warmup_steps=3, learning_rate=1.0),
    "PiecewiseDecay": lambda: lr.PiecewiseDecay([1, 3], [0.1, 0.05, 0.01]),
    "NaturalExpDecay": lambda: lr.NaturalExpDecay(0.1, gamma=0.5),
    "InverseTimeDecay": lambda: lr.InverseTimeDecay(0.1, gamma=0.5),
    "PolynomialDecay": lambda: lr.PolynomialDecay(0.1, decay_steps=4),
    "LinearWarmup": lambda: lr.LinearWarmup(lr.CosineAnnealingDecay(0.1, T_max=5), 2, 0.0, 0.1),
    "ExponentialDecay": lambda: lr.ExponentialDecay(0.1, gamma=0.5),
    "MultiStepDecay": lambda: lr.MultiStepDecay(0.1, milestones=[1, 2]),
    "StepDecay": lambda: lr.StepDecay(0.1, step_size=1),
    "LambdaDecay": lambda: lr.LambdaDecay(0.1, lambda epoch: 0.5**epoch),
    "ReduceOnPlateau": lambda: lr.ReduceOnPlateau(0.1, patience=0),
    "CosineAnnealingDecay": lambda: lr.CosineAnnealingDecay(0.1, T_max=3),
    "MultiplicativeDecay": lambda: lr.MultiplicativeDecay(0.1, lambda epoch: 0.5),
    "OneCycleLR": lambda: lr.OneCycleLR(0.1, total_steps=10),
    "CyclicLR": lambda: lr.CyclicLR(0.01, 0.1, step_size_up=2),
    "LinearLR": lambda: lr.LinearLR(0.1, total_steps=4),
    "CosineAnnealingWarmRestarts": lambda: lr.CosineAnnealingWarmRestarts(0.1, T_0=2),
}


def test_every_scheduler_is_listed() -> None:
    assert sorted(SCHEDULERS) == sorted(name for name in lr.__all__ if name != "LRScheduler")


def _step(sched: lr.LRScheduler, metric: float = 1.0) -> None:
    if isinstance(sched, lr.ReduceOnPlateau):
        sched.step(metric)
    else:
        sched.step()


def _params(n: int = 2) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(torch.ones(3)) for _ in range(n)]


@pytest.mark.parametrize("name", SCHEDULERS)
def test_torchs_names_on_every_scheduler(name: str) -> None:
    sched = SCHEDULERS[name]()
    torch_class = torch.optim.lr_scheduler.ReduceLROnPlateau if name == "ReduceOnPlateau" else (
        torch.optim.lr_scheduler.LRScheduler
    )
    assert isinstance(sched, torch_class)
    assert sched.optimizer is None and sched.get_last_lr() == [sched()]
    p, q = _params()
    opt = popt.SGD(learning_rate=sched, parameters=[{"params": [p]}, {"params": [q], "learning_rate": 0.5}])
    assert sched.optimizer is opt
    saved, rates = sched.state_dict(), []
    for i in range(4):
        _step(sched, metric=1.0 + i)  # a metric that never improves: ReduceOnPlateau lowers the rate
        rates.append(sched())
        # the groups follow at once (the ratio stays apart, in "learning_rate", as in Paddle)
        assert [g["lr"] for g in opt.param_groups] == [sched(), sched()] == sched.get_last_lr()
    assert isinstance(sched.last_epoch, int) and len(set(rates)) > 1
    sched.load_state_dict(saved)  # torch's name for set_state_dict; the groups follow it too
    assert opt.param_groups[0]["lr"] == sched() == saved["last_lr"]


def test_the_update_uses_the_rate_the_groups_show() -> None:
    sched = lr.StepDecay(0.5, step_size=1, gamma=0.5)
    p = torch.nn.Parameter(torch.zeros(1))
    opt = popt.SGD(learning_rate=sched, parameters=[p])
    sched.step()
    shown = opt.param_groups[0]["lr"]
    p.grad = torch.ones(1)
    opt.step()
    assert shown == 0.25 and p.item() == -0.25


def test_a_scheduler_shared_by_two_optimizers_drives_both() -> None:
    sched = lr.ExponentialDecay(0.1, gamma=0.5)
    first, second = popt.SGD(learning_rate=sched, parameters=_params(1)), popt.Adam(sched, parameters=_params(1))
    sched.step()
    assert first.param_groups[0]["lr"] == second.param_groups[0]["lr"] == 0.05
    assert sched.optimizer is first
    first._learning_rate = 0.3  # Paddle's way to give the first a fixed rate again: it leaves the scheduler
    sched.step()
    assert sched.optimizer is second and second.param_groups[0]["lr"] == 0.025 and first.param_groups[0]["lr"] == 0.3
    other = lr.StepDecay(0.2, step_size=1)
    second.set_lr_scheduler(other)
    assert sched.optimizer is None and other.optimizer is second
    sched.step()
    assert second.param_groups[0]["lr"] == 0.2


def test_a_rate_the_step_refuses_is_left_for_the_step() -> None:
    sched = lr.LambdaDecay(0.1, lambda epoch: 1.0 if epoch < 1 else math.nan)
    p = torch.nn.Parameter(torch.ones(2))
    opt = popt.SGD(learning_rate=sched, parameters=[p])
    sched.step()  # nothing raises here: the scheduler moved, the optimizer has not used it yet
    assert opt.param_groups[0]["lr"] == 0.1
    p.grad = torch.ones(2)
    with pytest.raises(ValueError, match="the learning rate given by LambdaDecay should be finite"):
        opt.step()


def test_copies_drive_their_own_groups() -> None:
    sched = lr.StepDecay(0.1, step_size=1)
    opt = popt.Momentum(learning_rate=sched, parameters=_params(1))
    for copied in (copy.deepcopy(opt), pickle.loads(pickle.dumps(opt))):
        copied_sched = copied._learning_rate
        assert copied_sched is not sched and copied_sched.optimizer is copied
        copied_sched.step()
        assert copied.param_groups[0]["lr"] == 0.010000000000000002 and opt.param_groups[0]["lr"] == 0.1
    assert pickle.loads(pickle.dumps(sched)).optimizer is None  # a scheduler alone does not carry optimizers


def test_a_scheduler_of_your_own_follows_too() -> None:
    class Halving(lr.LRScheduler):
        def get_lr(self) -> float:
            return self.base_lr * 0.5**self.last_epoch

        def step(self, epoch: int | None = None) -> None:
            super().step(epoch)

    sched = Halving(learning_rate=0.4)
    opt = popt.SGD(learning_rate=sched, parameters=_params(1))
    sched.step()
    assert opt.param_groups[0]["lr"] == 0.2 and sched.get_last_lr() == [0.2]


@pytest.mark.parametrize("through", ["scheduler", "optimizer"])
def test_the_unused_values_warning_points_at_the_users_line(through: str) -> None:
    sched = lr.StepDecay(0.1, step_size=1)
    opt = popt.SGD(learning_rate=sched, parameters=_params(1))
    saved = opt.state_dict()
    saved["LR_Scheduler"]["surplus"] = 1
    with pytest.warns(UserWarning, match="There are some unused values in state_dict") as caught:
        sched.set_state_dict(saved["LR_Scheduler"]) if through == "scheduler" else opt.load_state_dict(saved)
    assert caught[0].filename == __file__


def test_swalr_drives_an_optimizer_with_a_float_rate() -> None:
    from torch.optim.swa_utils import SWALR

    p = torch.nn.Parameter(torch.zeros(1))
    opt = popt.SGD(learning_rate=0.1, parameters=[p])
    swa = SWALR(opt, swa_lr=0.05, anneal_epochs=1, anneal_strategy="linear")
    p.grad = torch.ones(1)
    opt.step()
    swa.step()
    assert opt.param_groups[0]["lr"] == opt.get_lr() == 0.05
    opt.step()
    assert p.item() == pytest.approx(-0.15)  # the second step used SWALR's rate
