"""paddle_compat.optimizer.lr without Paddle: the schedulers' behaviour and errors, and how the
optimizers take a scheduler (Paddle's attributes, get_lr/set_lr/set_lr_scheduler, checkpoints)."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
import torch

import paddle_compat.nn as pnn
import paddle_compat.optimizer as popt
from paddle_compat.optimizer import lr
from paddle_compat.regularizer import L1Decay, L2Decay

OPTIMIZERS = [popt.SGD, popt.Momentum, popt.Adam, popt.AdamW]
NAMES = [
    "LRScheduler", "NoamDecay", "PiecewiseDecay", "NaturalExpDecay", "InverseTimeDecay", "PolynomialDecay",
    "LinearWarmup", "ExponentialDecay", "MultiStepDecay", "StepDecay", "LambdaDecay", "ReduceOnPlateau",
    "CosineAnnealingDecay", "MultiplicativeDecay", "OneCycleLR", "CyclicLR", "LinearLR",
    "CosineAnnealingWarmRestarts",
]


def _f32(x: float) -> float:
    return torch.tensor(x, dtype=torch.float32).item()


def _rates(sched: lr.LRScheduler, n: int) -> list[float]:
    out = []
    for _ in range(n):
        out.append(sched())
        sched.step()
    return out


# --- the module -----------------------------------------------------------------------------------
def test_module_has_paddles_schedulers() -> None:
    import paddle_compat.optimizer.lr as module

    assert module is popt.lr
    assert module.__all__ == NAMES
    for name in NAMES[1:]:
        assert issubclass(getattr(module, name), lr.LRScheduler)


def test_construction_steps_once_to_epoch_0() -> None:
    sched = lr.StepDecay(0.5, step_size=2, gamma=0.5)
    assert (sched.base_lr, sched.last_lr, sched.last_epoch, sched()) == (0.5, 0.5, 0, 0.5)
    assert sched.get_lr() == 0.5
    assert _rates(sched, 6) == [0.5, 0.5, 0.25, 0.25, 0.125, 0.125]
    assert lr.StepDecay(0.5, 2, last_epoch=3).last_epoch == 4  # resuming


def test_known_values() -> None:
    assert _rates(lr.MultiStepDecay(1.0, [2, 4], gamma=0.5), 6) == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]
    assert _rates(lr.PiecewiseDecay([1, 3], [0.3, 0.2, 0.1]), 5) == [0.3, 0.2, 0.2, 0.1, 0.1]
    assert lr.PiecewiseDecay([1], [0.3, 0.2]).base_lr == 0.1  # as Paddle
    assert _rates(lr.LinearWarmup(0.5, 4, 0.0, 0.4), 6) == [0.0, 0.1, 0.2, 0.30000000000000004, 0.5, 0.5]
    assert _rates(lr.LambdaDecay(2.0, lambda e: 1 / (e + 1)), 3) == [2.0, 1.0, 2.0 / 3]
    assert _rates(lr.ExponentialDecay(1.0, 0.5), 3) == [1.0, 0.5, 0.25]
    assert _rates(lr.MultiplicativeDecay(1.0, lambda e: 0.5), 3) == [1.0, 0.5, 0.25]
    assert _rates(lr.InverseTimeDecay(1.0, 1.0), 3) == [1.0, 0.5, 1 / 3]
    assert _rates(lr.NaturalExpDecay(1.0, 1.0), 2) == [1.0, math.exp(-1)]
    assert _rates(lr.PolynomialDecay(1.0, 2, end_lr=0.0), 4) == [1.0, 0.5, 0.0, 0.0]
    cosine = _rates(lr.CosineAnnealingDecay(1.0, 2), 5)
    assert cosine[0] == 1.0 and cosine[1] == pytest.approx(0.5) and cosine[2] == pytest.approx(0.0, abs=1e-15)
    assert cosine[3] == pytest.approx(0.5) and cosine[4] == pytest.approx(1.0)  # back up: period 2 * T_max
    assert _rates(lr.CyclicLR(0.0, 1.0, 2), 5) == [0.0, 0.5, 1.0, 0.5, 0.0]
    assert _rates(lr.LinearLR(1.0, 2, start_factor=0.5), 4) == [0.5, 0.75, 1.0, 1.0]
    one_cycle = _rates(lr.OneCycleLR(1.0, 10, divide_factor=10.0, end_learning_rate=0.0, phase_pct=0.5), 10)
    assert one_cycle[0] == pytest.approx(0.1) and one_cycle[4] == 1.0 and one_cycle[9] == 0.0
    restarts = _rates(lr.CosineAnnealingWarmRestarts(1.0, 2, T_mult=2), 7)
    assert restarts[0] == 1.0 and restarts[2] == 1.0 and restarts[6] == 1.0  # restarts at 2 and 6
    noam = lr.NoamDecay(4, 2)
    assert noam() == 0.0 and _rates(noam, 3)[1] == 0.5 * 2**-1.5


def test_a_subclass_defines_get_lr() -> None:
    class Halving(lr.LRScheduler):
        def get_lr(self) -> float:
            return self.base_lr * 0.5**self.last_epoch

    assert _rates(Halving(0.5), 3) == [0.5, 0.25, 0.125]
    with pytest.raises(NotImplementedError):
        lr.LRScheduler(0.1)


def test_step_to_an_epoch_uses_the_closed_form_when_there_is_one() -> None:
    sched = lr.CosineAnnealingDecay(1.0, 10, eta_min=0.1)
    sched.step(5)
    assert sched.last_epoch == 5
    assert sched() == 0.1 + (1.0 - 0.1) * (1 + math.cos(math.pi * 5 / 10)) / 2
    step = lr.StepDecay(1.0, 2)
    step.step(7)
    assert (step.last_epoch, step()) == (7, 1.0 * 0.1**3)


def test_warmup_steps_the_wrapped_scheduler_to_its_own_epoch() -> None:
    inner = lr.StepDecay(0.4, 2, gamma=0.5)
    sched = lr.LinearWarmup(inner, 3, 0.1, 0.4)
    assert _rates(sched, 8)[3:] == [0.4, 0.4, 0.2, 0.2, 0.1]
    assert inner.last_epoch == 5 and sched.learning_rate is inner


def test_verbose_prints_each_step(capsys: pytest.CaptureFixture[str]) -> None:
    sched = lr.StepDecay(0.5, 1, gamma=0.5, verbose=True)
    sched.step()
    plateau = lr.ReduceOnPlateau(1.0, patience=0, factor=0.5, verbose=True)
    plateau.step(1.0)
    plateau.step(1.0)
    assert capsys.readouterr().out == (
        "Epoch 0: StepDecay set learning rate to 0.5.\n"
        "Epoch 1: StepDecay set learning rate to 0.25.\n"
        "Epoch 2: ReduceOnPlateau set learning rate to 0.5.\n"
    )


def test_one_cycle_past_its_last_step_raises_and_changes_nothing() -> None:
    sched = lr.OneCycleLR(1.0, 3)
    for _ in range(3):
        sched.step()
    before = sched.state_dict()
    with pytest.raises(ValueError, match=r"^Tried to step 4 times\. However the number of total steps is 3$"):
        sched.step()
    assert sched.state_dict() == before


# --- checkpoints ----------------------------------------------------------------------------------
def test_state_dict_has_paddles_keys() -> None:
    sched = lr.StepDecay(0.5, 2)
    sched.step()
    assert sched.state_dict() == {"last_epoch": 1, "last_lr": 0.5}
    plateau = lr.ReduceOnPlateau(0.5)
    plateau.step(torch.tensor([2.0]))
    state = plateau.state_dict()
    assert list(state) == ["cooldown_counter", "best", "num_bad_epochs", "last_epoch", "last_lr"]
    assert type(state["best"]) is float and state["best"] == 2.0  # a tensor is saved as a float
    warm = lr.LinearWarmup(lr.ExponentialDecay(0.5, 0.9), 2, 0.0, 0.5)
    assert warm.state_dict() == {"last_epoch": 0, "last_lr": 0.0, "LinearWarmup_LR": {"last_epoch": 0, "last_lr": 0.5}}
    restarts = lr.CosineAnnealingWarmRestarts(0.5, 3)
    assert list(restarts.state_dict()) == ["last_epoch", "last_lr", "T_cur", "T_i"]


@pytest.mark.parametrize("method", ["set_state_dict", "set_dict"])
def test_set_state_dict_resumes(method: str) -> None:
    make = lambda: lr.LinearWarmup(lr.CosineAnnealingDecay(0.5, 7), 3, 0.0, 0.5)  # noqa: E731
    sched = make()
    for _ in range(6):
        sched.step()
    resumed = make()
    getattr(resumed, method)(sched.state_dict())
    assert _rates(resumed, 10) == _rates(sched, 10)


def test_restarts_resume_in_their_cycle_and_take_paddles_dicts() -> None:
    sched = lr.CosineAnnealingWarmRestarts(0.5, 4, T_mult=2)
    for _ in range(9):
        sched.step()
    resumed = lr.CosineAnnealingWarmRestarts(0.5, 4, T_mult=2)
    resumed.set_state_dict(sched.state_dict())
    assert (resumed.T_cur, resumed.T_i) == (sched.T_cur, sched.T_i) == (5, 8)
    paddles = lr.CosineAnnealingWarmRestarts(0.5, 4, T_mult=2)
    paddles.set_state_dict({"last_epoch": 9, "last_lr": 0.25})  # Paddle's keys only: loads as in Paddle
    assert (paddles.last_epoch, paddles(), paddles.T_cur) == (9, 0.25, 0)


def test_missing_keys_raise_naming_all_and_change_nothing() -> None:
    sched = lr.ReduceOnPlateau(0.5)
    sched.step(1.0)
    before = sched.state_dict()
    with pytest.raises(KeyError, match=r"the state_dict of ReduceOnPlateau lacks the keys \['best', 'last_lr'\]"):
        sched.set_state_dict({"cooldown_counter": 3, "num_bad_epochs": 1, "last_epoch": 9})
    assert sched.state_dict() == before
    warm = lr.LinearWarmup(lr.StepDecay(0.5, 2), 2, 0.0, 0.5)
    before = warm.state_dict()
    with pytest.raises(KeyError, match=r"lacks the keys \['last_lr'\]"):
        warm.set_state_dict({"last_epoch": 5, "last_lr": 0.1, "LinearWarmup_LR": {"last_epoch": 3}})
    with pytest.raises(KeyError, match=r"lacks the keys \['LinearWarmup_LR'\]"):
        warm.set_state_dict({"last_epoch": 5, "last_lr": 0.1})
    assert warm.state_dict() == before


def test_bad_state_values_raise_and_change_nothing() -> None:
    sched = lr.StepDecay(0.5, 2)
    with pytest.raises(
        ValueError, match=r"^state_dict\['last_lr'\] should be a finite learning rate >= 0, but received nan$"
    ):
        sched.set_state_dict({"last_epoch": 3, "last_lr": float("nan")})
    with pytest.raises(TypeError, match="state_dict should be a dict, but received list"):
        sched.set_state_dict([3, 0.1])
    assert sched.state_dict() == {"last_epoch": 0, "last_lr": 0.5}


MAKERS = {  # every scheduler, after a few steps
    "NoamDecay": lambda: lr.NoamDecay(64, 10),
    "PiecewiseDecay": lambda: lr.PiecewiseDecay([2, 4], [0.3, 0.2, 0.1]),
    "NaturalExpDecay": lambda: lr.NaturalExpDecay(0.5, 0.1),
    "InverseTimeDecay": lambda: lr.InverseTimeDecay(0.5, 0.1),
    "PolynomialDecay": lambda: lr.PolynomialDecay(0.5, 10, cycle=True),
    "LinearWarmup": lambda: lr.LinearWarmup(lr.StepDecay(0.5, 2), 3, 0.0, 0.5),
    "ExponentialDecay": lambda: lr.ExponentialDecay(0.5, 0.9),
    "MultiStepDecay": lambda: lr.MultiStepDecay(0.5, [2, 4]),
    "StepDecay": lambda: lr.StepDecay(0.5, 2),
    "LambdaDecay": lambda: lr.LambdaDecay(0.5, lambda e: 0.9**e),
    "ReduceOnPlateau": lambda: lr.ReduceOnPlateau(0.5, patience=0),
    "CosineAnnealingDecay": lambda: lr.CosineAnnealingDecay(0.5, 10),
    "MultiplicativeDecay": lambda: lr.MultiplicativeDecay(0.5, lambda e: 0.9),
    "OneCycleLR": lambda: lr.OneCycleLR(1.0, 20),
    "CyclicLR": lambda: lr.CyclicLR(0.1, 1.0, 3),
    "LinearLR": lambda: lr.LinearLR(0.5, 10),
    "CosineAnnealingWarmRestarts": lambda: lr.CosineAnnealingWarmRestarts(0.5, 3, T_mult=2),
}


def _stepped(name: str) -> lr.LRScheduler:
    sched = MAKERS[name]()
    for i in range(3):
        sched.step(float(3 - i)) if name == "ReduceOnPlateau" else sched.step()
    return sched


@pytest.mark.parametrize(("bad", "exc", "message"), [
    ("x", TypeError, "state_dict['last_epoch'] should be a float or an int, but received str"),
    (None, TypeError, "state_dict['last_epoch'] should be a float or an int, but received NoneType"),
    (True, TypeError, "state_dict['last_epoch'] should be a float or an int, but received bool"),
    (float("nan"), ValueError, "state_dict['last_epoch'] should be a finite number, but received nan"),
    (float("inf"), ValueError, "state_dict['last_epoch'] should be a finite number, but received inf"),
])
@pytest.mark.parametrize("name", list(MAKERS))
def test_every_scheduler_refuses_a_corrupt_last_epoch(name: str, bad: object, exc: type, message: str) -> None:
    assert set(MAKERS) == set(NAMES[1:])
    sched = _stepped(name)
    saved = sched.state_dict()
    before = dict(vars(sched))
    with pytest.raises(exc) as info:
        sched.set_state_dict({**saved, "last_epoch": bad})
    assert str(info.value) == message
    assert vars(sched) == before
    if name == "LinearWarmup":  # the wrapped scheduler's entry is checked too
        with pytest.raises(exc, match=r"^state_dict\['last_epoch'\]"):
            sched.set_state_dict({**saved, "LinearWarmup_LR": {**saved["LinearWarmup_LR"], "last_epoch": bad}})
        assert vars(sched) == before
    sched.set_state_dict(saved)  # what it saved still loads, and steps
    sched.step(1.0) if name == "ReduceOnPlateau" else sched.step()
    assert math.isfinite(sched())


def test_reduce_on_plateau_refuses_a_corrupt_best() -> None:
    sched = _stepped("ReduceOnPlateau")
    saved, before = sched.state_dict(), dict(vars(sched))
    for bad in ("x", [1.0], torch.ones(2)):
        with pytest.raises(TypeError, match=r"^state_dict\['best'\] should be None or a metric"):
            sched.set_state_dict({**saved, "best": bad})
        assert vars(sched) == before
    for key in ("cooldown_counter", "num_bad_epochs"):
        with pytest.raises(TypeError, match=rf"^state_dict\['{key}'\] should be an int, but received str$"):
            sched.set_state_dict({**saved, key: "1"})
        with pytest.raises(ValueError, match=rf"^state_dict\['{key}'\] should be >= 0, but received -1$"):
            sched.set_state_dict({**saved, key: -1})
    assert vars(sched) == before
    sched.set_state_dict({**saved, "best": torch.tensor([2.0])})  # a tensor metric, as step() keeps it


def test_unused_keys_warn_as_paddle() -> None:
    sched = lr.StepDecay(0.5, 2)
    with pytest.warns(UserWarning, match="There are some unused values in state_dict"):
        sched.set_state_dict({"last_epoch": 3, "last_lr": 0.05, "extra": 1})
    assert (sched.last_epoch, sched()) == (3, 0.05)


# --- ReduceOnPlateau ------------------------------------------------------------------------------
def test_reduce_on_plateau_patience_cooldown_and_floor() -> None:
    sched = lr.ReduceOnPlateau(1.0, factor=0.5, patience=1, cooldown=1, min_lr=0.3)
    rates = []
    for metric in [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]:
        sched.step(metric)
        rates.append(sched())
    assert rates == [1.0, 1.0, 0.5, 0.5, 0.5, 0.3, 0.3, 0.3]
    assert sched.last_epoch == 8


def test_reduce_on_plateau_mode_max_and_thresholds() -> None:
    sched = lr.ReduceOnPlateau(1.0, mode="max", patience=0, threshold=0.1, threshold_mode="abs")
    sched.step(1.0)
    sched.step(1.2)  # better by more than 0.1
    assert sched() == 1.0
    sched.step(1.25)  # not better by more than 0.1
    assert sched() == 0.1


def test_reduce_on_plateau_keeps_a_detached_copy_of_a_tensor_metric() -> None:
    sched = lr.ReduceOnPlateau(1.0)
    loss = torch.tensor(2.0, requires_grad=True) * 1.0
    sched.step(loss)
    assert not sched.best.requires_grad
    with torch.no_grad():
        loss.mul_(0.0)
    assert float(sched.best) == 2.0
    sched.step(torch.tensor([1.0]))
    assert float(sched.best) == 1.0
    arrays = lr.ReduceOnPlateau(1.0)
    metric = np.array([3.0])
    arrays.step(metric)
    metric[0] = 0.0
    assert arrays.best[0] == 3.0


def test_reduce_on_plateau_bad_metrics_change_nothing() -> None:
    sched = lr.ReduceOnPlateau(1.0)
    with pytest.raises(ValueError, match=r"^the size of metrics must be 1, but the current metrics.size is 2\."):
        sched.step(torch.ones(2))
    with pytest.raises(ValueError, match="the size of metrics must be 1"):
        sched.step(np.ones(3))
    with pytest.raises(
        TypeError,
        match=r"^metrics must be 'int', 'float', 'np.float64', 'numpy.ndarray' or 'torch.Tensor', "
        r"but receive <class 'str'>$",
    ):
        sched.step("1.0")
    with pytest.raises(TypeError, match="epoch should be a float or an int"):
        sched.step(1.0, epoch="3")
    assert sched.last_epoch == 0 and sched.best is None


# --- constructor errors ---------------------------------------------------------------------------
BAD = [
    (lambda: lr.StepDecay("0.1", 2), TypeError, "The type of learning rate must be float, but received <class 'str'>"),
    (lambda: lr.StepDecay(-0.1, 2), ValueError,
     "Invalid learning rate: -0.1 (learning_rate should be a finite number >= 0)"),
    (lambda: lr.StepDecay(float("nan"), 2), ValueError, "Invalid learning rate: nan"),
    (lambda: lr.StepDecay(float("inf"), 2), ValueError, "Invalid learning rate: inf"),
    (lambda: lr.StepDecay(0.1, 2, last_epoch="0"), TypeError,
     "last_epoch should be a float or an int, but received str"),
    (lambda: lr.StepDecay(0.1, 2.0), TypeError, "The type of 'step_size' must be 'int', but received <class 'float'>."),
    (lambda: lr.StepDecay(0.1, 0), ValueError, "step_size should be > 0, but received 0"),
    (lambda: lr.StepDecay(0.1, 2, gamma=1.0), ValueError, "gamma should be < 1.0."),
    (lambda: lr.StepDecay(0.1, 2, gamma=-0.5), ValueError, "gamma should be >= 0.0, but received -0.5"),
    (lambda: lr.StepDecay(0.1, 2, gamma=float("nan")), ValueError, "gamma should be a finite number, but received nan"),
    (lambda: lr.NoamDecay(0, 10), ValueError, "d_model should be grater than 0"),
    (lambda: lr.NoamDecay(8, 0), ValueError, "warmup_steps should be > 0, but received 0"),
    (lambda: lr.PiecewiseDecay([], [0.1]), ValueError, "The boundaries cannot be empty."),
    (lambda: lr.PiecewiseDecay([1, 2], [0.1, 0.2]), ValueError,
     "The values have one more element than boundaries, but received len(values) [2] < len(boundaries) + 1 [3]."),
    (lambda: lr.PiecewiseDecay((1,), 0.1), TypeError, "values should be a list or tuple, but received float"),
    (lambda: lr.PiecewiseDecay([1], [0.1, -0.2]), ValueError, "values[1] should be >= 0, but received -0.2"),
    (lambda: lr.NaturalExpDecay(0.1, 0.0), ValueError, "gamma should be > 0.0, but received 0.0"),
    (lambda: lr.InverseTimeDecay(0.1, -0.1), ValueError, "gamma should be >= 0.0, but received -0.1"),
    (lambda: lr.PolynomialDecay(0.1, 10.0), TypeError, "decay_steps should be an int, but received float"),
    (lambda: lr.PolynomialDecay(0.1, 0), ValueError, "decay_steps should be > 0, but received 0"),
    (lambda: lr.PolynomialDecay(0.1, 10, power=0.0), ValueError, "power should be > 0.0, but received 0.0"),
    (lambda: lr.PolynomialDecay(0.1, 10, end_lr=-1e-4), ValueError, "end_lr should be >= 0, but received -0.0001"),
    (lambda: lr.LinearWarmup("0.1", 10, 0.0, 0.1), TypeError,
     "the type of learning_rate should be [int, float or LRScheduler], the current type is 0.1"),
    (lambda: lr.LinearWarmup(0.1, 0, 0.0, 0.1), ValueError, "warmup_steps should be > 0, but received 0"),
    (lambda: lr.LinearWarmup(0.1, 10, 0.1, 0.1), ValueError, "end_lr 0.1 must be greater than start_lr 0.1"),
    (lambda: lr.ExponentialDecay(0.1, 1.0), ValueError,
     "gamma should be in (0.0, 1.0) so that the learning rate decays, but received 1.0"),
    (lambda: lr.MultiStepDecay(0.1, 10), TypeError,
     "The type of 'milestones' in 'MultiStepDecay' must be 'tuple, list', but received <class 'int'>."),
    (lambda: lr.MultiStepDecay(0.1, [5, 5]), ValueError, "The elements of milestones must be incremented"),
    (lambda: lr.MultiStepDecay(0.1, [5], gamma=2.0), ValueError, "gamma should be < 1.0."),
    (lambda: lr.LambdaDecay(0.1, 0.9), TypeError,
     "The type of 'lr_lambda' in 'LambdaDecay' must be 'function', but received <class 'float'>."),
    (lambda: lr.MultiplicativeDecay(0.1, None), TypeError,
     "The type of 'lr_lambda' in 'MultiplicativeDecay' must be 'function', but received <class 'NoneType'>."),
    (lambda: lr.ReduceOnPlateau(0.1, mode="lowest"), ValueError, "mode: lowest is unknown!"),
    (lambda: lr.ReduceOnPlateau(0.1, factor=1.0), ValueError,
     "factor should be < 1.0 (new_lr = origin_lr * factor), but received 1.0"),  # Paddle's text says gamma
    (lambda: lr.ReduceOnPlateau(0.1, threshold_mode="pct"), ValueError, "threshold mode: pct is unknown!"),
    (lambda: lr.ReduceOnPlateau("0.1"), TypeError,
     "The type of 'learning_rate' in 'ReduceOnPlateau' must be 'float', but received <class 'str'>."),
    (lambda: lr.ReduceOnPlateau(0.1, patience=-1), ValueError, "patience should be >= 0, but received -1"),
    (lambda: lr.ReduceOnPlateau(0.1, cooldown=1.5), TypeError, "cooldown should be an int, but received float"),
    (lambda: lr.ReduceOnPlateau(0.1, min_lr=float("nan")), ValueError,
     "min_lr should be a finite number, but received nan"),
    (lambda: lr.CosineAnnealingDecay(0.1, 10.0), TypeError,
     "The type of 'T_max' in 'CosineAnnealingDecay' must be 'int', but received <class 'float'>."),
    (lambda: lr.CosineAnnealingDecay(0.1, 10, eta_min="0"), TypeError,
     "The type of 'eta_min' in 'CosineAnnealingDecay' must be 'float, int', but received <class 'str'>."),
    (lambda: lr.CosineAnnealingDecay(0.1, 0), ValueError, "T_max should be > 0, but received 0"),
    (lambda: lr.OneCycleLR(-1.0, 10), ValueError, "'max_learning_rate' must be a positive integer."),
    (lambda: lr.OneCycleLR(1.0, 10.0), TypeError, "'total_step' must be 'int', but received <class 'float'>"),
    (lambda: lr.OneCycleLR(1.0, 10, phase_pct=1), TypeError, "'phase_pct' must be 'float', but received <class 'int'>"),
    (lambda: lr.OneCycleLR(1.0, 10, phase_pct=1.5), ValueError,
     "'phase_pct' must be between 0 and 1, but received 1.5"),
    (lambda: lr.OneCycleLR(1.0, 10, anneal_strategy="exp"), ValueError,
     "'anneal_strategy' must by one of 'cos' or 'linear', but received exp"),
    (lambda: lr.OneCycleLR(1.0, 10, phase_pct=0.5, three_phase=True), ValueError,
     "When three_phase is True, 'phase_pct' must be less than 0.5"),
    (lambda: lr.OneCycleLR(1.0, 10, phase_pct=0.1), ValueError,
     "phase_pct * total_steps should not be 1 (its first phase would last no step), "
     "but received phase_pct=0.1, total_steps=10"),
    (lambda: lr.OneCycleLR(1.0, 10, divide_factor=0), ValueError, "divide_factor should be > 0, but received 0"),
    (lambda: lr.CyclicLR(0.1, 1.0, 0), ValueError, "'step_size_up' must be a positive integer, but received 0"),
    (lambda: lr.CyclicLR(0.1, 1.0, 5, 2.5), TypeError,
     "The type of 'step_size_down' must be int, but received <class 'float'>"),
    (lambda: lr.CyclicLR(0.1, 1.0, 5, exp_gamma=1), TypeError,
     "The type of 'exp_gamma' must be float, but received <class 'int'>"),
    (lambda: lr.CyclicLR(0.1, 1.0, 5, mode="saw"), ValueError,
     "'mode' is invalid and 'scale_fn' is not specified, make sure one of 'mode' or 'scale_fn' is valid"),
    (lambda: lr.CyclicLR(0.1, 1.0, 5, scale_mode="epoch"), ValueError,
     "'scale_mode' must be one of 'cycle' or 'iterations"),
    (lambda: lr.CyclicLR(-0.1, 1.0, 5), ValueError, "Invalid learning rate: -0.1"),
    (lambda: lr.LinearLR(0.1, 10, start_factor=0.0), ValueError,
     "`start_factor` must be greater than 0 and less or equal to 1, but got 0.0"),
    (lambda: lr.LinearLR(0.1, 10, end_factor=1.5), ValueError,
     "`end_factor` must be greater than 0 and less than 1, but got 1.5"),
    (lambda: lr.LinearLR(0.1, 0), ValueError, "`total_steps` must be greater than 0, but got 0"),
    (lambda: lr.LinearLR(0.1, 10, start_factor=float("nan")), ValueError,
     "start_factor should be a finite number, but received nan"),
    (lambda: lr.CosineAnnealingWarmRestarts(0.1, 0), ValueError, "Expected positive integer T_0, but got 0"),
    (lambda: lr.CosineAnnealingWarmRestarts(0.1, 5, T_mult=0), ValueError, "Expected integer T_mult >= 1, but got 0"),
    # refused up front: each would give a negative rate (or a crash) in the middle of a run
    (lambda: lr.CosineAnnealingDecay(0.1, 10, eta_min=-0.01), ValueError, "eta_min should be >= 0, but received -0.01"),
    (lambda: lr.CosineAnnealingWarmRestarts(0.1, 5, eta_min=-0.01), ValueError,
     "eta_min should be >= 0, but received -0.01"),
    (lambda: lr.CyclicLR(0.1, 1.0, 5, mode="exp_range", exp_gamma=-0.5), ValueError,
     "exp_gamma should be >= 0, but received -0.5"),
    # the argument named is the one given
    (lambda: lr.LinearWarmup(0.1, 10, -0.1, 0.1), ValueError, "start_lr should be >= 0, but received -0.1"),
    (lambda: lr.CyclicLR("0.1", 1.0, 5), TypeError,
     "The type of learning rate (base_learning_rate) must be float, but received <class 'str'>"),
    # no string for a bool
    (lambda: lr.PolynomialDecay(0.1, 10, cycle="yes"), TypeError, "cycle should be a bool, but received str"),
    (lambda: lr.OneCycleLR(1.0, 10, three_phase="yes"), TypeError, "three_phase should be a bool, but received str"),
    (lambda: lr.StepDecay(0.1, 2, verbose="no"), TypeError, "verbose should be a bool, but received str"),
    (lambda: lr.ReduceOnPlateau(0.1, verbose=None), TypeError, "verbose should be a bool, but received NoneType"),
]


@pytest.mark.parametrize(("make", "exc", "message"), BAD, ids=[m for _, _, m in BAD])
def test_bad_arguments(make, exc: type, message: str) -> None:
    with pytest.raises(exc) as info:
        make()
    assert message in str(info.value)


def test_bad_epochs() -> None:
    with pytest.raises(ValueError, match="Expected non-negative epoch, but got -1"):
        lr.CosineAnnealingWarmRestarts(0.1, 5).step(-1)
    sched = lr.StepDecay(0.1, 2)
    with pytest.raises(ValueError, match="epoch should be a finite number, but received inf"):
        sched.step(float("inf"))
    assert sched.last_epoch == 0


# --- optimizers with a scheduler ------------------------------------------------------------------
def _params(dtype: torch.dtype = torch.float32) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(shape, generator=gen).to(dtype)) for shape in [(4, 3), (3,)]]


def _grads(params: list[torch.Tensor], seed: int = 1) -> None:
    gen = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(p.device, p.dtype)


@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_the_optimizer_keeps_the_scheduler_as_learning_rate(cls: type) -> None:
    sched = lr.StepDecay(0.1, 1, gamma=0.5)
    opt = cls(sched, parameters=_params())
    assert opt._learning_rate is sched
    assert opt.get_lr() == 0.1 and opt.param_groups[0]["lr"] == 0.1
    sched.step()
    assert opt.get_lr() == 0.05
    assert opt.state_dict()["LR_Scheduler"] == {"last_epoch": 1, "last_lr": 0.05}


@pytest.mark.filterwarnings("ignore:Accumulating with FP16/BF16")
def test_the_rate_is_read_at_each_step_in_the_lr_tensors_dtype() -> None:
    for dtype, rnd in ((torch.float32, _f32), (torch.float64, float), (torch.bfloat16, _f32)):
        params = _params(dtype)
        sched = lr.LambdaDecay(0.1, lambda e: 1.0 / (3 + e))
        opt = popt.SGD(sched, parameters=params)
        for seed in (1, 2):
            _grads(params, seed)
            before = params[0].detach().clone()
            opt.step()
            # the rate rounded to the LR tensor's dtype (float32 for bf16), then to bf16 by the CPU kernel
            rate = torch.tensor(rnd(sched()), dtype=dtype)
            assert torch.equal(params[0].detach(), before - params[0].grad * rate), (dtype, seed)
            sched.step()


def test_a_bad_rate_from_the_scheduler_raises_at_the_step_and_changes_nothing() -> None:
    params = _params()
    sched = lr.LambdaDecay(0.1, lambda e: float("nan") if e == 1 else 1.0)
    opt = popt.Adam(sched, parameters=params)
    _grads(params)
    opt.step()
    sched.step()
    before = [p.detach().clone() for p in params]
    state = {k: v.clone() for k, v in opt.state[params[0]].items()}
    with pytest.raises(
        ValueError, match=r"^the learning rate given by LambdaDecay should be finite and non-negative, but it is nan$"
    ):
        opt.step()
    assert all(torch.equal(a, p) for a, p in zip(before, params))
    assert all(torch.equal(v, opt.state[params[0]][k]) for k, v in state.items())


def test_set_lr_set_lr_scheduler_and_assigning_learning_rate() -> None:
    params = _params()
    opt = popt.Momentum(0.1, parameters=params)
    assert type(opt._learning_rate) is float and opt._learning_rate == 0.1
    sched = lr.ExponentialDecay(0.3, 0.5)
    opt.set_lr_scheduler(sched)
    assert opt._learning_rate is sched and opt.param_groups[0]["lr"] == 0.3
    with pytest.raises(RuntimeError, match="optimizer's learning rate can't be LRScheduler when invoke this API"):
        opt.set_lr(0.2)
    with pytest.raises(TypeError, match=r"must be LRScheduler, but received <class 'float'>\."):
        opt.set_lr_scheduler(0.2)
    opt._learning_rate = 0.2  # back to a float: every group's rate
    assert opt.get_lr() == 0.2 and [g["lr"] for g in opt.param_groups] == [0.2]
    opt.set_lr(0.4)
    assert opt._learning_rate == 0.4
    opt._learning_rate = sched
    assert opt._learning_rate is sched
    with pytest.raises(ValueError, match="learning_rate should be a finite, non-negative float"):
        opt._learning_rate = float("inf")
    assert opt._learning_rate is sched


def test_learning_rate_follows_torch_schedulers() -> None:
    opt = popt.AdamW(0.1, parameters=_params())
    torch_sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    opt.step()
    torch_sched.step()
    assert opt._learning_rate == 0.05 and opt.get_lr() == 0.05


@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_checkpoint_restores_the_scheduler(cls: type) -> None:
    params = _params()
    sched = lr.CosineAnnealingDecay(0.1, 5)
    opt = cls(sched, parameters=params)
    for seed in range(3):
        _grads(params, seed)
        opt.step()
        sched.step()
    saved = opt.state_dict()
    fresh_sched = lr.CosineAnnealingDecay(0.1, 5)
    fresh = cls(fresh_sched, parameters=[torch.nn.Parameter(p.detach().clone()) for p in params])
    fresh.set_state_dict(saved)
    assert fresh_sched.state_dict() == sched.state_dict()
    assert fresh.param_groups[0]["lr"] == sched()
    assert fresh.get_lr() == opt.get_lr()


def test_a_checkpoint_without_the_scheduler_is_refused_except_for_lambda_decay() -> None:
    params = _params()
    saved = popt.SGD(0.1, parameters=params).state_dict()
    sched = lr.StepDecay(0.5, 2)
    opt = popt.SGD(sched, parameters=params)
    with pytest.raises(KeyError, match="LR_Scheduler state must be included in the state dict except LambdaDecay"):
        opt.set_state_dict(saved)
    assert opt.param_groups[0]["lr"] == 0.5 and sched.last_epoch == 0
    lambda_sched = lr.LambdaDecay(0.5, lambda e: 1.0)
    opt = popt.SGD(lambda_sched, parameters=params)
    opt.set_state_dict(saved)
    assert opt.get_lr() == 0.5 and opt.param_groups[0]["lr"] == 0.5  # the scheduler still drives it


def test_a_bad_scheduler_state_in_a_checkpoint_changes_nothing() -> None:
    params = _params()
    opt = popt.Adam(lr.StepDecay(0.5, 2), parameters=params)
    _grads(params)
    opt.step()
    saved = opt.state_dict()
    saved["LR_Scheduler"] = {"last_epoch": 3}
    fresh = popt.Adam(lr.StepDecay(0.5, 2), parameters=params)
    with pytest.raises(KeyError, match=r"lacks the keys \['last_lr'\]"):
        fresh.set_state_dict(saved)
    assert not fresh.state and fresh._learning_rate.last_epoch == 0


# --- Paddle's attributes --------------------------------------------------------------------------
def test_parameter_list_and_param_groups_without_groups() -> None:
    params = _params()
    opt = popt.SGD(0.1, parameters=iter(params))
    assert opt._param_groups is opt.param_groups[0]["params"] and opt._parameter_list is opt._param_groups
    assert opt._param_groups == params and all(isinstance(p, torch.Tensor) for p in opt._param_groups)
    named = popt.Adam(0.1, parameters=[("w", params[0]), ("b", params[1])])
    assert named._parameter_list == params


def test_parameter_list_and_param_groups_with_groups() -> None:
    a, b = _params()
    opt = popt.Adam(0.1, parameters=[{"params": [a]}, {"params": [b], "learning_rate": 0.5, "beta1": 0.8}])
    groups = opt._param_groups
    assert groups is opt.param_groups and opt._parameter_list is groups
    assert groups[0]["params"] == [a] and groups[1]["learning_rate"] == 0.5 and groups[1]["beta1"] == 0.8
    assert {"params", "learning_rate", "weight_decay", "grad_clip"} <= set(groups[1])
    groups[1]["learning_rate"] = 0.25  # changed through Paddle's attribute: used by the next step
    assert opt._group_lr(opt.param_groups[1]) == _f32(_f32(0.1) * 0.25)


def test_paddles_other_attributes() -> None:
    params = _params(torch.float16)
    clip = pnn.ClipGradByGlobalNorm(1.0)
    opt = popt.SGD(0.1, parameters=params, weight_decay=0.01, grad_clip=clip, multi_precision=True, name="sgd0")
    assert (opt._grad_clip, opt._name, opt._multi_precision, opt._dtype) == (clip, "sgd0", True, torch.float16)
    assert isinstance(opt.regularization, L2Decay) and opt.regularization.coeff == 0.01
    assert popt.AdamW(0.1, parameters=_params()).regularization is None
    assert popt.Momentum(0.1, parameters=_params(), weight_decay=0.01).regularization is None  # fused L2
    l1 = L1Decay(0.01)
    assert popt.Momentum(0.1, parameters=_params(), weight_decay=l1).regularization is l1
    assert popt.Adam(0.1, parameters=_params(torch.float64))._dtype == torch.float64


# --- torch.optim's keyword names ------------------------------------------------------------------
TORCH_KEYWORDS = [
    (popt.SGD, "lr", "learning_rate"),
    (popt.Momentum, "lr", "learning_rate"),
    (popt.Adam, "lr", "learning_rate"),
    (popt.AdamW, "lr", "learning_rate"),
    (popt.SGD, "params", "parameters"),
    (popt.AdamW, "params", "parameters"),
    (popt.Adam, "eps", "epsilon"),
    (popt.AdamW, "eps", "epsilon"),
    (popt.Momentum, "nesterov", "use_nesterov"),
]


@pytest.mark.parametrize(("cls", "torch_name", "paddle_name"), TORCH_KEYWORDS)
def test_torch_keywords_name_paddles(cls: type, torch_name: str, paddle_name: str) -> None:
    message = f"{cls.__name__}() got an unexpected keyword argument '{torch_name}'; Paddle's name is '{paddle_name}'"
    with pytest.raises(TypeError) as info:
        cls(**{torch_name: 0.1})
    assert str(info.value) == message


def test_betas_and_momentum_keywords() -> None:
    with pytest.raises(TypeError) as info:
        popt.AdamW(betas=(0.9, 0.99), parameters=_params())
    assert str(info.value) == (
        "AdamW() got an unexpected keyword argument 'betas'; Paddle's names are 'beta1' and 'beta2'"
    )
    with pytest.raises(TypeError) as info:
        popt.SGD(0.1, parameters=_params(), momentum=0.9)
    assert str(info.value) == (
        "SGD() got an unexpected keyword argument 'momentum'; "
        "Paddle's SGD has none: use paddle_compat.optimizer.Momentum(momentum=...)"
    )
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'foreach'"):
        popt.Adam(0.1, parameters=_params(), foreach=True)  # no Paddle counterpart: Python's own error
    assert popt.Momentum(0.1, momentum=0.5, parameters=_params()).defaults["momentum"] == 0.5


@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_signatures_stay_paddles(cls: type) -> None:
    names = list(inspect.signature(cls).parameters)
    assert names[0] == "learning_rate" and "parameters" in names and "kwargs" not in names


def test_replacing_the_grad_clip_as_paddles_wrappers_do() -> None:
    calls = []

    def wrapper_clip(params_grads):
        calls.append(len(params_grads))
        return params_grads

    params = _params()
    opt = popt.SGD(0.1, parameters=params, grad_clip=pnn.ClipGradByNorm(1.0))
    opt._grad_clip = wrapper_clip
    _grads(params)
    opt.step()
    assert opt._grad_clip is wrapper_clip and calls == [2]
    with pytest.raises(TypeError, match="_grad_clip should be a gradient clip or None, but received float"):
        opt._grad_clip = 1.0
    a, b = _params()
    clip = pnn.ClipGradByNorm(1.0)
    grouped = popt.SGD(0.1, parameters=[{"params": [a]}, {"params": [b]}], grad_clip=clip)
    grouped._grad_clip = wrapper_clip  # groups keep the clip they were given, as in Paddle
    assert grouped._grad_clip is wrapper_clip and [g["grad_clip"] for g in grouped.param_groups] == [clip, clip]


@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_create_master_weight(cls: type) -> None:
    assert hasattr(cls, "_create_master_weight")  # how Paddle code tells that master weights exist
    params = _params(torch.float16)
    opt = cls(0.1, parameters=params, multi_precision=True)
    master = opt._create_master_weight(params[0])
    assert master.dtype == torch.float32 and torch.equal(master, params[0].detach().float())
    assert opt._create_master_weight(params[0]) is master
    initial = master.clone()
    _grads(params)
    opt.step()  # the state created with the master weight is complete: the update runs on it
    assert opt.state[params[0]]["master_weight"] is master and not torch.equal(master, initial)
    assert torch.equal(params[0].detach(), master.half())


# --- CUDA -----------------------------------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_schedulers_on_cuda() -> None:
    """A scheduler drives an optimizer of CUDA parameters, ReduceOnPlateau takes CUDA metrics, and
    a checkpoint moves between devices (the scheduler's state is plain Python)."""
    params = [p.cuda() for p in _params()]
    params = [torch.nn.Parameter(p.detach()) for p in params]
    sched = lr.ReduceOnPlateau(0.1, patience=0, factor=0.5)
    opt = popt.Adam(sched, parameters=params)
    for seed in range(3):
        _grads(params, seed)
        opt.step()
        sched.step(torch.tensor(1.0, device="cuda"))
    assert sched() == 0.025 and sched.best.device.type == "cuda"
    saved = opt.state_dict()
    assert saved["LR_Scheduler"]["best"] == 1.0
    cpu_params = [torch.nn.Parameter(p.detach().cpu()) for p in params]
    cpu_sched = lr.ReduceOnPlateau(0.1, patience=0, factor=0.5)
    cpu_opt = popt.Adam(cpu_sched, parameters=cpu_params)
    cpu_opt.set_state_dict(saved)
    assert cpu_opt.get_lr() == 0.025 and cpu_opt.state[cpu_params[0]]["moment1"].device.type == "cpu"
