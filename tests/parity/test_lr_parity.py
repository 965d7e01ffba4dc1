"""LR scheduler parity with real Paddle 3.3.1: the rates bitwise over thousands of steps, checkpoints,
warm-up around other schedulers, ReduceOnPlateau's metrics, and training with a scheduler.

The rates are compared as Python floats by their bits (``struct``), so 0.0 vs -0.0 or a last-bit
difference fails. Paddle's schedulers are plain Python: they run in this process without cost.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import random
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import paddle
import pytest
import torch

import paddle_compat.nn as pnn
import paddle_compat.optimizer as popt
from paddle_compat.optimizer import lr as ours_lr

from .paddle_oracle import assert_bitwise_equal, to_numpy

P = paddle.optimizer.lr
STEPS = 3000

# name -> a constructor taking the module (ours or Paddle's); the same arguments on both sides.
SCHEDULERS: dict[str, Callable[[Any], Any]] = {
    "noam": lambda m: m.NoamDecay(512, 400, learning_rate=2.0),
    "noam_default": lambda m: m.NoamDecay(64, 10),
    "piecewise": lambda m: m.PiecewiseDecay([100, 500, 1500], [0.1, 0.05, 0.01, 0.001]),
    "piecewise_extra_values": lambda m: m.PiecewiseDecay([10], [0.3, 0.2, 0.1]),
    "natural_exp": lambda m: m.NaturalExpDecay(0.5, 0.0013),
    "inverse_time": lambda m: m.InverseTimeDecay(0.5, 0.01),
    "polynomial": lambda m: m.PolynomialDecay(0.5, 700, end_lr=0.001, power=2.0),
    "polynomial_cycle": lambda m: m.PolynomialDecay(0.5, 300, end_lr=0.001, power=0.7, cycle=True),
    "warmup_float": lambda m: m.LinearWarmup(0.3, 100, 0.0, 0.3),
    "warmup_int": lambda m: m.LinearWarmup(1, 7, 0.25, 0.75),
    "warmup_cosine": lambda m: m.LinearWarmup(m.CosineAnnealingDecay(0.3, 500, eta_min=0.001), 100, 0.01, 0.3),
    "warmup_step": lambda m: m.LinearWarmup(m.StepDecay(0.2, 130, gamma=0.6), 37, 0.0, 0.2),
    "warmup_one_cycle": lambda m: m.LinearWarmup(m.OneCycleLR(0.4, 5000), 50, 0.001, 0.016),
    "warmup_restarts": lambda m: m.LinearWarmup(m.CosineAnnealingWarmRestarts(0.1, 70, 2), 30, 0.0, 0.1),
    "exponential": lambda m: m.ExponentialDecay(0.5, 0.999),
    "multi_step": lambda m: m.MultiStepDecay(0.5, [300, 800, 1700], gamma=0.3),
    "step": lambda m: m.StepDecay(0.5, 170, gamma=0.7),
    "lambda": lambda m: m.LambdaDecay(0.5, lambda e: 0.999**e),
    "cosine": lambda m: m.CosineAnnealingDecay(0.5, 370, eta_min=0.001),
    "cosine_int_eta": lambda m: m.CosineAnnealingDecay(1, 7),
    "multiplicative": lambda m: m.MultiplicativeDecay(0.5, lambda e: 0.9995),
    "one_cycle": lambda m: m.OneCycleLR(1.0, 4000, phase_pct=0.25),
    "one_cycle_three_linear": lambda m: m.OneCycleLR(
        1.0, 3500, divide_factor=10, phase_pct=0.3, anneal_strategy="linear", three_phase=True
    ),
    "cyclic": lambda m: m.CyclicLR(0.01, 0.5, 130, 70),
    "cyclic_triangular2": lambda m: m.CyclicLR(0.01, 0.5, 130, 70, mode="triangular2"),
    "cyclic_exp_range": lambda m: m.CyclicLR(0.01, 0.5, 130, mode="exp_range", exp_gamma=0.999),
    "cyclic_scale_fn": lambda m: m.CyclicLR(
        0.02, 0.2, 11, 29, scale_fn=lambda x: 1.0 / (1.0 + 0.01 * x), scale_mode="iterations"
    ),
    "linear_lr": lambda m: m.LinearLR(0.5, 1000, start_factor=0.1, end_factor=0.9),
    "linear_lr_down": lambda m: m.LinearLR(0.5, 333, start_factor=1.0, end_factor=0.05),
    "restarts": lambda m: m.CosineAnnealingWarmRestarts(0.5, 100, T_mult=2, eta_min=0.001),
    "restarts_constant_period": lambda m: m.CosineAnnealingWarmRestarts(0.5, 37, eta_min=0.01),
    "resumed_last_epoch": lambda m: m.StepDecay(0.5, 7, gamma=0.9, last_epoch=20),
}
# MultiplicativeDecay recomputes its product from epoch 1 at every step (quadratic, as Paddle).
STEPS_OF = {"multiplicative": 400}


def _bits(value: float) -> bytes:
    return struct.pack("<d", float(value))


def _assert_same_lr(ours: Any, theirs: Any, what: str) -> None:
    a, b = ours(), theirs()
    assert type(a) is type(b) and _bits(a) == _bits(b), f"{what}: ours {a!r} vs Paddle {b!r}"
    assert ours.last_epoch == theirs.last_epoch, f"{what}: last_epoch {ours.last_epoch} vs {theirs.last_epoch}"


def _paddle_keys_only(state: dict) -> dict:
    """Our state dict without the keys we save beyond Paddle's (CosineAnnealingWarmRestarts)."""
    state = {k: v for k, v in state.items() if k not in ("T_cur", "T_i")}
    if "LinearWarmup_LR" in state:
        state["LinearWarmup_LR"] = _paddle_keys_only(state["LinearWarmup_LR"])
    return state


@pytest.mark.parametrize("name", SCHEDULERS)
def test_rates_are_paddles_bitwise_over_thousands_of_steps(name: str) -> None:
    make = SCHEDULERS[name]
    ours, theirs = make(ours_lr), make(P)
    assert _bits(ours.base_lr) == _bits(theirs.base_lr)
    for step in range(STEPS_OF.get(name, STEPS)):
        _assert_same_lr(ours, theirs, f"{name} step {step}")
        ours.step()
        theirs.step()
    assert _paddle_keys_only(ours.state_dict()) == theirs.state_dict()
    assert list(_paddle_keys_only(ours.state_dict())) == list(theirs.state_dict())  # Paddle's keys, its order


@pytest.mark.filterwarnings("ignore:There are some unused values in state_dict")  # Paddle's LinearWarmup
@pytest.mark.parametrize("name", SCHEDULERS)
def test_checkpoint_round_trips_mid_way(name: str) -> None:
    """Each side saves at an odd step, a fresh scheduler loads it and the run goes on, bitwise.

    Also our scheduler loaded with Paddle's dict follows Paddle's resumed scheduler."""
    make = SCHEDULERS[name]
    ours, theirs = make(ours_lr), make(P)
    crossed = None
    for step in range(min(STEPS_OF.get(name, STEPS), 1200)):
        if step in (1, 157, 611):
            ours_saved, theirs_saved = ours.state_dict(), theirs.state_dict()
            ours, theirs, crossed = make(ours_lr), make(P), make(ours_lr)
            ours.set_state_dict(ours_saved)
            theirs.set_state_dict(theirs_saved)
            crossed.set_state_dict(theirs_saved)
        if crossed is not None:
            _assert_same_lr(crossed, theirs, f"{name} step {step} (Paddle's dict)")
            if not name.startswith("restarts"):  # see test_warm_restarts_resume_their_cycle
                _assert_same_lr(ours, theirs, f"{name} step {step}")
            crossed.step()
        ours.step()
        theirs.step()


@pytest.mark.parametrize("name", ["restarts", "restarts_constant_period", "warmup_restarts"])
def test_warm_restarts_resume_their_cycle(name: str) -> None:
    """Ours saves T_cur/T_i too: resumed, it follows Paddle's *uninterrupted* run (Paddle's own
    resumed scheduler restarts the cycle: see the test above)."""
    make = SCHEDULERS[name]
    ours, theirs = make(ours_lr), make(P)
    for step in range(900):
        if step in (123, 456):
            saved = ours.state_dict()
            ours = make(ours_lr)
            ours.set_state_dict(saved)
        _assert_same_lr(ours, theirs, f"{name} step {step}")
        ours.step()
        theirs.step()


@pytest.mark.parametrize("name", [n for n in SCHEDULERS if n != "multiplicative"])
def test_step_to_an_epoch(name: str) -> None:
    """``step(epoch)``: jumps back and forth (closed forms where Paddle has them), then plain steps."""
    make = SCHEDULERS[name]
    ours, theirs = make(ours_lr), make(P)
    rng = random.Random(name)
    limit = 3000 if "one_cycle" in name else 5000
    for i in range(300):
        epoch = rng.randrange(0, limit) if i % 3 else None
        ours.step(epoch)
        theirs.step(epoch)
        _assert_same_lr(ours, theirs, f"{name} step({epoch}) #{i}")


def test_fractional_epochs_of_warm_restarts() -> None:
    ours, theirs = ours_lr.CosineAnnealingWarmRestarts(0.5, 10, T_mult=3), P.CosineAnnealingWarmRestarts(0.5, 10, 3)
    for i in range(2000):
        epoch = i * 0.37
        ours.step(epoch)
        theirs.step(epoch)
        _assert_same_lr(ours, theirs, f"step({epoch})")
        assert _bits(ours.T_cur) == _bits(theirs.T_cur) and ours.T_i == theirs.T_i


def test_verbose_prints_as_paddle() -> None:
    printed = []
    for module in (ours_lr, P):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            sched = module.CosineAnnealingDecay(0.5, 3, verbose=True)
            sched.step()
            sched.step(7)
            wrapped = module.LinearWarmup(module.StepDecay(0.1, 2, verbose=True), 3, 0.0, 0.1, verbose=True)
            for _ in range(5):
                wrapped.step()
            plateau = module.ReduceOnPlateau(0.5, patience=0, verbose=True)
            for _ in range(3):
                plateau.step(1.0)
        printed.append(out.getvalue())
    assert printed[0] == printed[1]
    assert "Epoch 1: CosineAnnealingDecay set learning rate to" in printed[0]


# --- ReduceOnPlateau ------------------------------------------------------------------------------
PLATEAU_CONFIGS = [
    dict(),
    dict(mode="max", factor=0.5, patience=3, threshold=0.01, cooldown=2),
    dict(mode="min", factor=0.7, patience=2, threshold=0.05, threshold_mode="abs", min_lr=0.01),
    dict(mode="MAX", factor=0.3, patience=0, threshold_mode="ABS", cooldown=1, epsilon=1e-3),
]


def _metrics(seed: int, count: int) -> list[float]:
    """A noisy loss that falls, then plateaus, then rises: every branch of the schedule is taken."""
    rng = np.random.default_rng(seed)
    t = np.arange(count)
    return list(np.float32(np.exp(-t / 40.0) + 0.3 + 0.02 * rng.standard_normal(count) + (t > 150) * (t - 150) / 500))


@pytest.mark.parametrize("kind", ["float", "numpy_float32", "numpy_array", "tensor_0d", "tensor_1"])
@pytest.mark.parametrize("cfg", PLATEAU_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "defaults")
def test_reduce_on_plateau_follows_paddle(cfg: dict, kind: str) -> None:
    ours, theirs = ours_lr.ReduceOnPlateau(1.0, **cfg), P.ReduceOnPlateau(1.0, **cfg)
    for step, value in enumerate(_metrics(len(kind), 300)):
        if kind == "float":
            mine, paddles = float(value), float(value)
        elif kind == "numpy_float32":
            mine, paddles = np.float32(value), np.float32(value)
        elif kind == "numpy_array":
            mine, paddles = np.array([value], dtype=np.float32), np.array([value], dtype=np.float32)
        elif kind == "tensor_0d":  # float32 arithmetic on each side's own tensors
            mine, paddles = torch.tensor(value), paddle.to_tensor(value)
        else:
            mine, paddles = torch.tensor([value]), paddle.to_tensor([value])
        epoch = step + 5 if step % 50 == 49 else None
        ours.step(mine, epoch)
        theirs.step(paddles, epoch)
        assert _bits(ours()) == _bits(theirs()), f"step {step}: {ours()} vs {theirs()}"
        a, b = ours.state_dict(), theirs.state_dict()
        assert list(a) == list(b)
        best_a, best_b = a.pop("best"), b.pop("best")
        assert a == b, f"step {step}"
        assert _bits(np.asarray(best_a).item()) == _bits(np.asarray(best_b).item())


def test_reduce_on_plateau_checkpoint_round_trip() -> None:
    values = _metrics(7, 200)
    ours, theirs = ours_lr.ReduceOnPlateau(0.5, patience=2, cooldown=1), P.ReduceOnPlateau(0.5, patience=2, cooldown=1)
    for step, value in enumerate(values):
        if step in (33, 101):
            saved = theirs.state_dict()
            ours = ours_lr.ReduceOnPlateau(0.5, patience=2, cooldown=1)
            theirs = P.ReduceOnPlateau(0.5, patience=2, cooldown=1)
            ours.set_state_dict(saved)  # Paddle's dict (its best a float here)
            theirs.set_state_dict(saved)
        ours.step(torch.tensor(value))
        theirs.step(paddle.to_tensor(value))
        assert _bits(ours()) == _bits(theirs()) and ours.last_epoch == theirs.last_epoch


# --- training with a scheduler --------------------------------------------------------------------
SHAPES = [(6, 5), (5,), (5, 3)]
_UNIQUE = itertools.count()


def _initial(dtype: str) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [(rng.standard_normal(s) * 0.5).astype(dtype) for s in SHAPES]


def _grads(step: int, dtype: str) -> list[np.ndarray]:
    rng = np.random.default_rng(100 + step)
    return [(rng.standard_normal(s) * 0.3).astype(dtype) for s in SHAPES]


def _groups(params: list) -> list[dict]:
    """Two groups, the second with a rate ratio of 0.3 (multiplied into the rate in its dtype)."""
    return [{"params": params[:2]}, {"params": params[2:], "learning_rate": 0.3}]


TRAINING = {
    "sgd": (lambda s, ps: popt.SGD(s, parameters=ps), lambda s, ps: paddle.optimizer.SGD(s, parameters=ps)),
    "sgd_groups": (
        lambda s, ps: popt.SGD(s, parameters=_groups(ps), weight_decay=0.01),
        lambda s, ps: paddle.optimizer.SGD(s, parameters=_groups(ps), weight_decay=0.01),
    ),
    "momentum": (
        lambda s, ps: popt.Momentum(s, 0.9, parameters=ps, use_nesterov=True, weight_decay=0.01),
        lambda s, ps: paddle.optimizer.Momentum(s, 0.9, parameters=ps, use_nesterov=True, weight_decay=0.01),
    ),
    "adam": (
        lambda s, ps: popt.Adam(s, parameters=_groups(ps), grad_clip=pnn.ClipGradByGlobalNorm(0.5)),
        lambda s, ps: paddle.optimizer.Adam(s, parameters=_groups(ps), grad_clip=paddle.nn.ClipGradByGlobalNorm(0.5)),
    ),
    "adamw": (
        lambda s, ps: popt.AdamW(s, parameters=ps, weight_decay=0.05),
        lambda s, ps: paddle.optimizer.AdamW(s, parameters=ps, weight_decay=0.05),
    ),
}
# The scheduler of each run (odd rates: the value must be rounded to the LR tensor's dtype as Paddle does).
RUN_SCHEDULERS = {
    "warmup_cosine": lambda m: m.LinearWarmup(m.CosineAnnealingDecay(0.0137, 23), 7, 0.0011, 0.0137),
    "one_cycle": lambda m: m.OneCycleLR(0.0213, 25, phase_pct=0.2),
    "plateau": lambda m: m.ReduceOnPlateau(0.0173, patience=1, factor=0.37),
}


# float64 parameters: Paddle's LR tensor is float64 then (the rate is not rounded to float32). Adam and
# AdamW are left out: their float64 kernels differ from Paddle's in the last bit now and then with or
# without a scheduler (torch's CPU float64 sqrt is not correctly rounded), a matter of the kernels.
RUNS = [(o, s, "float32") for o in TRAINING for s in RUN_SCHEDULERS] + [
    ("sgd_groups", "warmup_cosine", "float64"), ("momentum", "plateau", "float64"), ("sgd", "one_cycle", "float64")
]


@pytest.mark.parametrize(("opt_name", "sched_name", "dtype"), RUNS)
def test_training_with_a_scheduler_is_bitwise(opt_name: str, sched_name: str, dtype: str) -> None:
    """Paddle's optimizer and ours, each driven by its own scheduler; parameters bitwise after each step.

    Mid-run our optimizer and scheduler are checkpointed and restored into fresh objects (Paddle's
    run goes on uninterrupted), and at step 22 both switch to another scheduler (``set_lr_scheduler``).
    """
    ours_make, paddle_make = TRAINING[opt_name]
    make_sched = RUN_SCHEDULERS[sched_name]
    init = _initial(dtype)
    tparams = [torch.nn.Parameter(torch.from_numpy(v.copy())) for v in init]
    pparams = []
    for v in init:
        p = paddle.create_parameter(list(v.shape), dtype, name=f"lr_parity_{next(_UNIQUE)}")
        p.set_value(v)
        pparams.append(p)
    ours_sched, paddle_sched = make_sched(ours_lr), make_sched(P)
    ours, theirs = ours_make(ours_sched, tparams), paddle_make(paddle_sched, pparams)
    assert ours._learning_rate is ours_sched and theirs._learning_rate is paddle_sched
    for step in range(30):
        if step == 11:  # checkpoint and restore ours (through torch.save, weights_only)
            buffer = io.BytesIO()
            torch.save(ours.state_dict(), buffer)
            buffer.seek(0)
            ours_sched = make_sched(ours_lr)
            ours = ours_make(ours_sched, tparams)
            ours.set_state_dict(torch.load(buffer, weights_only=True))
        if step == 22:
            ours_sched, paddle_sched = ours_lr.ExponentialDecay(0.0071, 0.93), P.ExponentialDecay(0.0071, 0.93)
            ours.set_lr_scheduler(ours_sched)
            theirs.set_lr_scheduler(paddle_sched)
        for tp, pp, g in zip(tparams, pparams, _grads(step, dtype)):
            tp.grad = torch.from_numpy(g.copy())
            pp.grad = paddle.to_tensor(g)
        assert _bits(ours.get_lr()) == _bits(theirs.get_lr())
        ours.step()
        theirs.step()
        for i, (tp, pp) in enumerate(zip(tparams, pparams)):
            assert_bitwise_equal(tp, to_numpy(pp), f"{opt_name}/{sched_name} param {i} after step {step}")
        if isinstance(ours_sched, ours_lr.ReduceOnPlateau):
            metric = float(sum(float((t.detach() ** 2).sum()) for t in tparams))
            ours_sched.step(metric)
            paddle_sched.step(metric)
        else:
            ours_sched.step()
            paddle_sched.step()


# --- the attributes Paddle code reads -------------------------------------------------------------
@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("opt_name", ["sgd", "momentum", "adam", "adamw"])
def test_optimizer_attributes_are_paddles(opt_name: str, grouped: bool) -> None:
    ours_cls = {"sgd": popt.SGD, "momentum": popt.Momentum, "adam": popt.Adam, "adamw": popt.AdamW}[opt_name]
    paddle_cls = getattr(paddle.optimizer, ours_cls.__name__)
    init = _initial("float32")
    tparams = [torch.nn.Parameter(torch.from_numpy(v.copy())) for v in init]
    pparams = [paddle.create_parameter(list(v.shape), "float32", name=f"lr_attr_{next(_UNIQUE)}") for v in init]
    kwargs = dict(weight_decay=0.01, multi_precision=True, name="opt0")
    ours_sched, paddle_sched = ours_lr.StepDecay(0.1, 3), P.StepDecay(0.1, 3)
    ours = ours_cls(ours_sched, parameters=_groups(tparams) if grouped else tparams,
                    grad_clip=pnn.ClipGradByGlobalNorm(1.0), **kwargs)
    theirs = paddle_cls(paddle_sched, parameters=_groups(pparams) if grouped else pparams,
                        grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0), **kwargs)
    assert ours._learning_rate is ours_sched and theirs._learning_rate is paddle_sched
    assert _bits(ours.get_lr()) == _bits(theirs.get_lr())
    for attr in ("_parameter_list", "_param_groups"):
        mine, paddles = getattr(ours, attr), getattr(theirs, attr)
        assert len(mine) == len(paddles)
        assert [type(x) is dict for x in mine] == [type(x) is dict for x in paddles]
        if grouped:
            assert [len(g["params"]) for g in mine] == [len(g["params"]) for g in paddles]
            assert [g.get("learning_rate", 1.0) for g in mine] == [g.get("learning_rate", 1.0) for g in paddles]
    assert (ours._name, ours._multi_precision) == (theirs._name, theirs._multi_precision)
    assert str(ours._dtype).removeprefix("torch.") == str(theirs._dtype).removeprefix("paddle.")
    assert type(ours._grad_clip).__name__ == type(theirs._grad_clip).__name__
    assert type(ours.regularization).__name__ == type(theirs.regularization).__name__
    if theirs.regularization is not None:
        assert ours.regularization.coeff == theirs.regularization._coeff
    assert hasattr(type(ours), "_create_master_weight") and hasattr(type(theirs), "_create_master_weight")
    assert ours.state_dict()["LR_Scheduler"] == theirs.state_dict()["LR_Scheduler"]
    with pytest.raises(RuntimeError) as mine_error:
        ours.set_lr(0.5)
    with pytest.raises(RuntimeError) as paddles_error:
        theirs.set_lr(0.5)
    assert str(mine_error.value) == str(paddles_error.value)
