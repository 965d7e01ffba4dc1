"""Lamb, RMSProp, Adagrad, Adamax, Adadelta, NAdam, RAdam, ASGD and Rprop without Paddle, what the
generic tests (test_optimizer.py, through tests/optim_db.py) do not cover: Paddle's argument checks
and messages, Adamax's beta power on skipped steps, ASGD's and Rprop's state dtypes, Rprop's rate.

(Their bits against real Paddle: the ``parity`` cases of tests/optim_db.py, and test_param_lr_parity.)
"""

from __future__ import annotations

import copy
import ctypes
from typing import Any

import numpy as np
import pytest
import torch

import paddle_compat.optimizer as popt
from paddle_compat import _native
from paddle_compat.amp import GradScaler
from paddle_compat.optimizer import _cases
from paddle_compat.optimizer import lr as plr

from .optim_db import FAMILY, info_of, new
from .test_optimizer import _params, _same, _set_grads

_STATE_IN_PARAM_DTYPE = [c for c in FAMILY if info_of(c).state_in_param_dtype]


def make(cls: type, params: list, lr: Any = 0.01, **kwargs: Any) -> Any:
    return new(cls, lr, params, **kwargs)


# --- Paddle's argument checks ----------------------------------------------------------------------
_P = [torch.nn.Parameter(torch.ones(2))]
BAD = [
    (lambda: popt.RMSProp(None, parameters=_P), ValueError, "learning_rate is not set."),
    (lambda: popt.RMSProp(0.1, rho=None, parameters=_P), ValueError, "rho is not set."),
    (lambda: popt.RMSProp(0.1, epsilon=-1.0, parameters=_P), ValueError,
     r"Invalid value of epsilon, expect epsilon >= 0\."),
    (lambda: popt.RMSProp(0.1, momentum=-0.1, parameters=_P), ValueError, "Invalid value of momentum"),
    (lambda: popt.RMSProp(0.1, rho=-0.1, parameters=_P), ValueError, r"Invalid value of rho, expect rho >= 0\."),
    (lambda: popt.RMSProp(0.1, rho="0.9", parameters=_P), TypeError, "rho should be a float"),
    (lambda: popt.Adagrad(0.1, epsilon=None, parameters=_P), ValueError, "epsilon is not set"),
    # ranges where the first step would be NaN (a negative root) or the value has no meaning
    (lambda: popt.Adagrad(0.1, initial_accumulator_value=-1.0, parameters=_P), ValueError,
     r"^Invalid value of initial_accumulator_value, expect initial_accumulator_value >= 0\.$"),
    (lambda: popt.Adagrad(0.1, epsilon=-1.0, parameters=_P), ValueError,
     r"^Invalid value of epsilon, expect epsilon >= 0\.$"),
    (lambda: popt.Adadelta(0.1, epsilon=-1.0, parameters=_P), ValueError,
     r"^Invalid value of epsilon, expect epsilon >= 0\.$"),
    (lambda: popt.Adadelta(0.1, rho=1.5, parameters=_P), ValueError, r"^Invalid value of rho, expect rho <= 1\.$"),
    (lambda: popt.Adadelta(0.1, rho=-0.5, parameters=_P), ValueError, r"^Invalid value of rho, expect rho >= 0\.$"),
    (lambda: popt.RMSProp(0.1, rho=1.5, parameters=_P), ValueError, r"^Invalid value of rho, expect rho <= 1\.$"),
    (lambda: popt.Lamb(0.1, epsilon=-1.0, parameters=_P), ValueError,
     r"^Invalid value of epsilon, expect epsilon >= 0\.$"),
    (lambda: popt.Adadelta(0.1, parameters=[{"params": _P, "rho": 1.5}]), ValueError, "expect rho <= 1"),
    (lambda: popt.Adagrad(0.1, initial_accumulator_value=float("nan"), parameters=_P), ValueError,
     "initial_accumulator_value should be a finite number"),
    (lambda: popt.Adamax(0.1, beta1=1.0, parameters=_P), ValueError,
     r"Invalid value of beta1, expect beta1 in \[0,1\)\."),
    (lambda: popt.Adamax(0.1, beta2=-0.5, parameters=_P), ValueError, r"Invalid value of beta2"),
    (lambda: popt.Adamax(0.1, epsilon=-1.0, parameters=_P), ValueError, "Invalid value of epsilon"),
    (lambda: popt.Adadelta(None, parameters=_P), ValueError, "learning_rate is not set."),
    (lambda: popt.Adadelta(0.1, rho=None, parameters=_P), ValueError, "rho is not set."),
    (lambda: popt.NAdam(-0.1, parameters=_P), ValueError, r"Invalid learning rate: -0.1, expect learning_rate >= 0\."),
    (lambda: popt.NAdam(0.1, epsilon=-1.0, parameters=_P), ValueError,
     r"Invalid epsilon value: -1.0, expect epsilon >= 0\."),
    (lambda: popt.NAdam(0.1, beta1=1.0, parameters=_P), ValueError, r"Invalid beta1: 1.0, expect 0. <= beta1 < 1.0\."),
    (lambda: popt.NAdam(0.1, momentum_decay=-1.0, parameters=_P), ValueError,
     r"Invalid momentum_decay value: -1.0, expect momentum_decay >= 0\."),
    (lambda: popt.RAdam(-0.1, parameters=_P), ValueError, "Invalid learning rate"),
    (lambda: popt.RAdam(0.1, beta2=1.5, parameters=_P), ValueError, r"Invalid beta2: 1.5, expect 0. <= beta2 < 1.0\."),
    (lambda: popt.ASGD(None, parameters=_P), ValueError, "learning_rate should not be none"),
    (lambda: popt.ASGD(0.1, batch_num=None, parameters=_P), ValueError, "batch_num should not be none"),
    (lambda: popt.ASGD(0.1, batch_num=0, parameters=_P), ValueError, "batch_num should be greater than 0"),
    (lambda: popt.ASGD(0.1, batch_num=2.0, parameters=_P), TypeError, "batch_num should be an int"),
    (lambda: popt.Rprop(1e-6, parameters=_P), ValueError,
     r"'0.0 < learning_rate_range\[0\] <= learning_rate <= learning_rate_range\[1\]' must be true"),
    (lambda: popt.Rprop(0.1, etas=(0.5, 0.9), parameters=_P), ValueError,
     r"'0.0 < etas\[0\] < 1.0 < etas\[1\]' must be true"),
    (lambda: popt.Rprop(0.1, etas=0.5, parameters=_P), TypeError, "etas should be a pair of floats"),
    (lambda: popt.Rprop(plr.StepDecay(0.1, 2), parameters=_P), TypeError, "learning_rate should be a float"),
    (lambda: popt.Lamb(0.1, beta1=None, parameters=_P), ValueError, "beta1 is not set"),
    (lambda: popt.Lamb(0.1, beta2=1.0, parameters=_P), ValueError,
     r"Invalid value of beta2, expect beta2 in \[0,1\)\."),
    (lambda: popt.Lamb(0.1, exclude_from_weight_decay_fn=3, parameters=_P), TypeError,
     "exclude_from_weight_decay_fn should be a callable"),
    (lambda: popt.Lamb(0.1, lamb_weight_decay=float("inf"), parameters=_P), ValueError,
     "lamb_weight_decay should be a finite number"),
    (lambda: popt.Lamb(0.1, parameters=_P, weight_decay=0.1), TypeError, "unexpected keyword argument 'weight_decay'"),
    (lambda: popt.RMSProp(0.1, parameters=[{"params": _P, "rho": -1.0}]), ValueError, "Invalid value of rho"),
    (lambda: popt.RMSProp(0.1, centered="yes", parameters=_P), TypeError, "centered should be a bool"),
    (lambda: popt.Lamb(0.1, always_adapt=None, parameters=_P), TypeError, "always_adapt should be a bool"),
]


@pytest.mark.parametrize("case", range(len(BAD)))
def test_paddle_argument_checks(case: int) -> None:
    build, exc, message = BAD[case]
    with pytest.raises(exc, match=message):
        build()


# --- skipped steps --------------------------------------------------------------------------------
def _state_snapshot(opt: torch.optim.Optimizer, params: list[torch.Tensor], but: str = "") -> list:
    snap = [p.detach().clone() for p in params]
    for p in params:
        snap += [v.clone() for k, v in opt.state[p].items() if isinstance(v, torch.Tensor) and k != but]
    return snap


@pytest.mark.parametrize("scaler_kind", ["paddle_compat", "torch"])
def test_adamax_beta_power_advances_on_a_skipped_step(scaler_kind: str) -> None:
    """Paddle's _finish_update scales it after every step, a skipped one too (the rest stays:
    test_optimizer.test_skipped_step_touches_nothing)."""
    params = _params()
    # torch's scaler calls no step on a skip unless the optimizer takes the flag itself (fused)
    opt = popt.Adamax(0.01, parameters=params, fused=scaler_kind == "torch")
    scaler: Any = GradScaler(init_loss_scaling=1024.0) if scaler_kind == "paddle_compat" else (
        torch.amp.GradScaler("cpu", init_scale=1024.0)
    )
    for step in range(4):
        _set_grads(params, step)
        if step in (0, 3):  # also the first: the state is created on a skipped step, as in Paddle
            params[0].grad[0, 0] = float("inf")
        if scaler_kind == "paddle_compat":
            scaler.minimize(opt, torch.tensor(0.0))
        else:
            scaler.scale(torch.tensor(1.0))
            scaler.step(opt)
            scaler.update()
        opt.clear_grad()
    b1 = torch.tensor(0.9)
    for p in params:
        assert _same(opt.state[p]["beta1_pow_acc"], (b1 * b1 * b1 * b1 * b1).reshape(1))
    _set_grads(params, 4)
    opt._skipped_step()  # a scaler that skips on the host (not handing over) calls this instead
    assert _same(opt.state[params[0]]["beta1_pow_acc"], (b1 * b1 * b1 * b1 * b1 * b1).reshape(1))


# --- multi-precision ------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", _STATE_IN_PARAM_DTYPE)
def test_asgd_and_rprop_keep_their_state_in_the_parameter_dtype(cls: type) -> None:
    (p,) = _params(torch.bfloat16)[:1]
    opt = make(cls, [p], multi_precision=True)
    _set_grads([p], 0)
    before = p.detach().clone()
    opt.step()
    state = opt.state[p]
    assert state["master_weight"].dtype == torch.float32 and not _same(p.detach(), before)
    for key in ("d", "y", "prevs", "learning_rates"):
        if key in state:
            assert state[key].dtype == torch.bfloat16, key
    if cls is popt.ASGD:
        assert state["y"].shape == (1, *p.shape) and state["m"].dtype == torch.int64


# --- checkpoints and copies -----------------------------------------------------------------------
@pytest.mark.parametrize("cls", FAMILY)
def test_a_wrong_state_is_refused_and_nothing_changes(cls: type) -> None:
    params = _params()
    opt = make(cls, params)
    _set_grads(params, 0)
    opt.step()
    sd = opt.state_dict()
    key = next(k for k, v in sd["state"][0].items() if isinstance(v, torch.Tensor) and v.dim() >= 2)
    bad = copy.deepcopy(sd)
    bad["state"][0][key] = bad["state"][0][key][:1]
    saved = copy.deepcopy(opt.state_dict())
    with pytest.raises((ValueError, TypeError)):
        opt.set_state_dict(bad)
    now = opt.state_dict()
    assert all(_same(now["state"][0][k], v) for k, v in saved["state"][0].items() if isinstance(v, torch.Tensor))


# --- learning rates -------------------------------------------------------------------------------
def _trajectory(cls: type, lr: Any, torch_scheduler: Any = None) -> list[torch.Tensor]:
    params = _params()
    opt = make(cls, params, lr=lr)
    sched = torch_scheduler(opt) if torch_scheduler is not None else None
    for step in range(3):
        _set_grads(params, step)
        opt.step()
        if sched is not None:
            sched.step()
        if not isinstance(lr, float):
            lr.step()
    return [p.detach().clone() for p in params]


@pytest.mark.parametrize("cls", FAMILY)
def test_schedulers_drive_the_rate_but_rprop_s(cls: type) -> None:
    fixed = _trajectory(cls, 0.1)
    torch_sched = _trajectory(cls, 0.1, lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5))
    paddle_sched = _trajectory(cls, plr.StepDecay(0.1, step_size=1, gamma=0.5) if cls is not popt.Rprop else 0.1)
    differs = not all(_same(a, b) for a, b in zip(fixed, torch_sched))
    assert differs == (cls is not popt.Rprop)  # Rprop's rate is only its initial step size, as in Paddle
    if cls is not popt.Rprop:
        assert not all(_same(a, b) for a, b in zip(fixed, paddle_sched))


@pytest.mark.parametrize("cls", FAMILY)
def test_optimize_attr_scales_one_parameter(cls: type) -> None:
    params = _params()
    params[1].optimize_attr = {"learning_rate": 0.0}
    before = params[1].detach().clone()
    opt = make(cls, params)
    _set_grads(params, 0)
    opt.step()
    frozen = _same(params[1].detach(), before)
    assert frozen == (cls is not popt.Rprop)


# --- what the CPU kernels take from Eigen and libm ------------------------------------------------
def test_eigen_sqrt_refines_the_hardware_rsqrt_on_whole_packets_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mechanics around the CPU's rsqrt (here a stand-in: 1/sqrt rounded, whose Newton step
    still moves some results): packets of 8 get the refined root, the tail the exact one, zero and
    subnormal inputs 0, +inf NaN; in place too."""
    from paddle_compat._numerics import sqrt_rn
    from paddle_compat.optimizer import _eigen

    monkeypatch.setattr(_eigen, "_hardware_rsqrt", lambda: torch.rsqrt)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(8 * 5 + 3, generator=gen) * 100
    x[:4] = torch.tensor([0.0, 1e-40, float("inf"), 4.0])
    got = _eigen.sqrt_like_eigen(x)
    head = x[:40]
    r = torch.rsqrt(head)
    expected = head * (r * (1.5 - (head * 0.5) * (r * r)))
    assert got[0] == 0 and got[1] == 0 and torch.isnan(got[2]) and got[3] == 2
    assert torch.equal(got[4:40], expected[4:40]) and torch.equal(got[40:], sqrt_rn(x[40:]))
    assert not torch.equal(got[4:40], sqrt_rn(head[4:])), "the stand-in should leave a trace"
    same = x.clone()
    assert _same(_eigen.sqrt_like_eigen(same, out=same), got)


def test_pow_is_the_c_librarys_powf_not_numpys() -> None:
    """NAdam's schedule: libm's powf, as the kernel's std::pow (NumPy's float32 power differs)."""
    from paddle_compat.optimizer import _eigen

    x = np.float32(1)
    for _ in range(14):
        x = np.float32(x * np.float32(0.96))
    ours = _eigen.pow_like_libm(float(x), float(np.float32(0.004)), torch.float32)
    assert np.float32(ours) == np.float32(float(x) ** float(np.float32(0.004)))  # correctly rounded here
    powf = _native.libm_function("powf")  # the C library's own (NumPy's float32 power differs on some hosts)
    if powf is not None:
        powf.restype, powf.argtypes = ctypes.c_float, [ctypes.c_float, ctypes.c_float]
        assert np.float32(ours) == np.float32(powf(float(x), float(np.float32(0.004))))


def test_the_compiled_kernels_give_the_cpus_rsqrt() -> None:
    """``pc_rsqrt``: the CPU's approximation (within its documented 1.5 * 2**-12), not an exact
    root, and what Eigen's sqrt emulation takes."""
    from paddle_compat import _native
    from paddle_compat.optimizer import _eigen

    kernels = _native.kernels()
    if kernels is None or kernels.rsqrt is None:
        pytest.skip("no compiled kernels, or a CPU without rsqrtps")
    x = torch.rand(1 << 16, generator=torch.Generator().manual_seed(0)) * 1e4 + 1e-3
    r = kernels.rsqrt(x)
    exact = 1.0 / torch.sqrt(x.double())
    assert ((r.double() - exact).abs() / exact).max() <= 1.5 * 2**-12
    assert not torch.equal(r, torch.rsqrt(x))  # an approximation, as Paddle's Eigen build sees it
    assert _eigen._hardware_rsqrt() == kernels.rsqrt


# --- the optimizers' table ------------------------------------------------------------------------
def test_every_optimizer_of_the_package_is_in_the_table() -> None:
    """The table of ``optimizer/_cases`` (which the selfcheck runs and optim_db is built on) holds
    every optimizer ``paddle_compat.optimizer`` exports, and every subclass of ``Optimizer`` the
    package defines."""
    exported = [getattr(popt, name) for name in popt.__all__]
    optimizers = {c for c in exported if isinstance(c, type) and issubclass(c, popt.Optimizer)} - {popt.Optimizer}
    table = [entry.cls for entry in _cases.TABLE]
    assert len(table) == len(set(table)) and set(table) == optimizers

    def subclasses(cls: type) -> set[type]:
        return {s for c in cls.__subclasses__() for s in (c, *subclasses(c))}

    defined = {c for c in subclasses(popt.Optimizer) if c.__module__.startswith("paddle_compat.")}
    assert defined <= set(table), defined - set(table)
    for entry in _cases.TABLE:
        assert entry.configs and all(c.steps > 0 for c in entry.configs), entry.name
        opt = entry.build(entry.configs[0], [torch.nn.Parameter(torch.ones(3))])
        assert type(opt) is entry.cls
