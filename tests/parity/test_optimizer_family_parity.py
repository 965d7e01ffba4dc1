"""Parity of Lamb, RMSProp, Adagrad, Adamax, Adadelta, NAdam, RAdam, ASGD and Rprop with real
Paddle 3.3.1 on CPU: the loops of ``test_optimizer_parity`` (the same model trained side by side,
parameters compared bitwise after every step, overflow injected under the scalers)."""

from __future__ import annotations

from typing import Any

import paddle
import pytest
import torch

import paddle_compat.nn as pnn
import paddle_compat.optimizer as popt
from paddle_compat.optimizer import _eigen
from paddle_compat.regularizer import L1Decay, L2Decay

from .test_optimizer_parity import SCALER, Config, _groups, run_parity


def _pair(name: str, ctor: str, *args: Any, clip: tuple | None = None, groups: Any = "none", **kwargs: Any):
    """``(ours, Paddle's)`` constructors of ``ctor`` with the same arguments; ``clip``: (kind, value);
    ``groups``: a group ``weight_decay`` to split the parameters in two groups with."""

    def make(module: Any, nn: Any, reg: Any) -> Any:
        def build(ps: list) -> Any:
            kw = {k: (v(reg) if callable(v) and k == "weight_decay" else v) for k, v in kwargs.items()}
            if clip is not None:
                kw["grad_clip"] = getattr(nn, clip[0])(clip[1])
            params = ps if groups == "none" else _groups(ps, groups(reg) if callable(groups) else groups)
            return getattr(module, ctor)(*args, parameters=params, **kw)

        return build

    return make(popt, pnn, _OURS_REG), make(paddle.optimizer, paddle.nn, paddle.regularizer)


class _OursReg:
    L1Decay = L1Decay
    L2Decay = L2Decay


_OURS_REG = _OursReg


def _cfg(name: str, ctor: str, *args: Any, scaler: bool = False, dtype: torch.dtype = torch.float32,
         clip: tuple | None = None, groups: Any = "none", set_lr_at: dict | None = None, **kwargs: Any) -> Config:
    ours, theirs = _pair(name, ctor, *args, clip=clip, groups=groups, **kwargs)
    return Config(name, ours, theirs, scaler=SCALER if scaler else None, dtype=dtype, set_lr_at=set_lr_at or {})


def _l1(reg: Any) -> Any:
    return reg.L1Decay(0.001)


def _l2(reg: Any) -> Any:
    return reg.L2Decay(0.02)


def _skip_biases(p: Any) -> bool:
    return len(p.shape) == 1  # Paddle's and torch's parameters alike


CONFIGS = [
    # Adagrad
    _cfg("adagrad", "Adagrad", 0.1),
    _cfg("adagrad_init_l2_globalnorm_scaler", "Adagrad", 0.1, epsilon=1e-5, initial_accumulator_value=0.1,
         weight_decay=0.01, clip=("ClipGradByGlobalNorm", 0.5), scaler=True),
    _cfg("adagrad_l1_groups_bynorm", "Adagrad", 0.1, weight_decay=_l1, groups=_l2, clip=("ClipGradByNorm", 0.3)),
    # RMSProp
    _cfg("rmsprop", "RMSProp", 0.01),
    _cfg("rmsprop_centered_momentum_scaler", "RMSProp", 0.01, rho=0.9, epsilon=1e-5, momentum=0.9, centered=True,
         weight_decay=0.01, clip=("ClipGradByGlobalNorm", 0.5), scaler=True),
    _cfg("rmsprop_groups_byvalue", "RMSProp", 0.01, momentum=0.5, weight_decay=_l1, groups=0.03,
         clip=("ClipGradByValue", 0.2)),
    # Adadelta
    _cfg("adadelta", "Adadelta", 1.0),
    _cfg("adadelta_l2_bynorm_scaler", "Adadelta", 1.0, epsilon=1e-5, rho=0.9, weight_decay=0.01,
         clip=("ClipGradByNorm", 0.3), scaler=True),
    _cfg("adadelta_groups_l1", "Adadelta", 0.5, weight_decay=_l1, groups=_l2),
    # Adamax
    _cfg("adamax", "Adamax", 0.01),
    _cfg("adamax_l2_globalnorm_scaler", "Adamax", 0.01, beta1=0.8, beta2=0.99, epsilon=1e-6, weight_decay=0.01,
         clip=("ClipGradByGlobalNorm", 0.5), scaler=True),
    _cfg("adamax_groups_byvalue", "Adamax", 0.01, weight_decay=_l1, groups=0.02, clip=("ClipGradByValue", 0.2)),
    # NAdam
    _cfg("nadam", "NAdam", 0.01),
    _cfg("nadam_l2_globalnorm_scaler", "NAdam", 0.01, beta1=0.8, beta2=0.99, epsilon=1e-6, momentum_decay=0.01,
         weight_decay=0.01, clip=("ClipGradByGlobalNorm", 0.5), scaler=True),
    _cfg("nadam_groups_l1", "NAdam", 0.01, weight_decay=_l1, groups=_l2),
    # RAdam
    _cfg("radam", "RAdam", 0.01),
    _cfg("radam_l2_globalnorm_scaler", "RAdam", 0.01, beta1=0.8, beta2=0.9, epsilon=1e-6, weight_decay=0.01,
         clip=("ClipGradByGlobalNorm", 0.5), scaler=True),
    _cfg("radam_groups_bynorm", "RAdam", 0.01, weight_decay=_l1, groups=_l2, clip=("ClipGradByNorm", 0.3)),
    # ASGD
    _cfg("asgd", "ASGD", 0.05),
    _cfg("asgd_batches_l2_globalnorm_scaler", "ASGD", 0.05, batch_num=4, weight_decay=0.01,
         clip=("ClipGradByGlobalNorm", 0.5), scaler=True),
    _cfg("asgd_groups_l1", "ASGD", 0.05, batch_num=3, weight_decay=_l1, groups=_l2),
    # Rprop
    _cfg("rprop", "Rprop", 0.01),
    _cfg("rprop_range_etas_globalnorm_scaler", "Rprop", 0.01, learning_rate_range=(1e-4, 0.05), etas=(0.4, 1.3),
         clip=("ClipGradByGlobalNorm", 0.5), scaler=True),
    _cfg("rprop_groups_byvalue", "Rprop", 0.01, groups=None, clip=("ClipGradByValue", 0.2)),
    # Lamb
    _cfg("lamb", "Lamb", 0.01),
    _cfg("lamb_decay_globalnorm_scaler", "Lamb", 0.01, lamb_weight_decay=0.05, beta1=0.8, beta2=0.99, epsilon=1e-5,
         clip=("ClipGradByGlobalNorm", 0.5), scaler=True),
    _cfg("lamb_exclude", "Lamb", 0.01, exclude_from_weight_decay_fn=_skip_biases),
    _cfg("lamb_exclude_always_adapt", "Lamb", 0.01, exclude_from_weight_decay_fn=_skip_biases, always_adapt=True),
    _cfg("lamb_no_decay", "Lamb", 0.01, lamb_weight_decay=0.0),
    _cfg("lamb_groups_bynorm", "Lamb", 0.01, groups="none", clip=("ClipGradByNorm", 0.3)),
]

# float64 parameters (Paddle's double kernels), with set_lr
CONFIGS += [
    _cfg(f"{ctor.lower()}_float64_set_lr", ctor, lr, dtype=torch.float64, set_lr_at={20: lr / 3, 45: lr * 2})
    for ctor, lr in [("Adagrad", 0.1), ("RMSProp", 0.01), ("Adadelta", 1.0), ("Adamax", 0.01), ("NAdam", 0.01),
                     ("RAdam", 0.01), ("ASGD", 0.05), ("Lamb", 0.01)]
]
CONFIGS.append(_cfg("rprop_float64", "Rprop", 0.01, dtype=torch.float64))
# bf16 parameters: Paddle's CPU build has a bf16 kernel for Rprop (bf16 arithmetic, no master weights)
CONFIGS.append(_cfg("rprop_bf16", "Rprop", 0.01, dtype=torch.bfloat16))


# Paddle's float32 Eigen sqrt is the CPU's approximate rsqrt refined (see _eigen): bitwise only with
# this CPU's instruction, which the compiled kernels give.
_EIGEN_SQRT = ("adagrad", "rmsprop", "adadelta", "nadam", "radam")


def needs_hardware_rsqrt(cfg: Config) -> None:
    if cfg.dtype == torch.float32 and cfg.name.startswith(_EIGEN_SQRT) and _eigen._hardware_rsqrt() is None:
        pytest.skip("Eigen's float32 sqrt needs the CPU's rsqrt from the compiled kernels, not available here")


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_bitwise_parity_with_paddle(cfg: Config) -> None:
    needs_hardware_rsqrt(cfg)
    run_parity(cfg)


# --- per-parameter rates: ParamAttr(learning_rate=...) and group ratios ------------------------------
_RATIOS = {"w1": 0.3, "b2": 2.5}  # the other parameters keep 1.0


def _with_param_rates(build: Any) -> Any:
    """``build``, after giving w1 and b2 Paddle's ``optimize_attr`` learning-rate ratio."""

    def make(ps: list) -> Any:
        for p in ps:
            name, tensor = p if isinstance(p, tuple) else (p.name.split("_")[0], p)
            if name in _RATIOS:
                if isinstance(p, tuple):
                    tensor.optimize_attr = {"learning_rate": _RATIOS[name]}
                else:
                    tensor.optimize_attr["learning_rate"] = _RATIOS[name]
        return build(ps)

    return make


_EVERY = [("SGD", 0.1), ("Momentum", 0.05), ("Adam", 0.01), ("AdamW", 0.01), ("Adagrad", 0.1), ("RMSProp", 0.01),
          ("Adadelta", 1.0), ("Adamax", 0.01), ("NAdam", 0.01), ("RAdam", 0.01), ("ASGD", 0.05), ("Rprop", 0.01),
          ("Lamb", 0.01)]
RATE_CONFIGS = []
for _ctor, _lr in _EVERY:
    _ours, _theirs = _pair(_ctor, _ctor, _lr)
    RATE_CONFIGS.append(Config(f"{_ctor.lower()}_param_attr_rates", _with_param_rates(_ours),
                               _with_param_rates(_theirs), steps=25))
    # with groups, Paddle overwrites optimize_attr with the group's ratio: the attribute no longer counts
    _ours, _theirs = _pair(_ctor, _ctor, _lr, groups=0.0 if _ctor == "AdamW" else None)
    RATE_CONFIGS.append(Config(f"{_ctor.lower()}_group_rates_over_param_attr", _with_param_rates(_ours),
                               _with_param_rates(_theirs), steps=25))


@pytest.mark.parametrize("cfg", RATE_CONFIGS, ids=lambda c: c.name)
def test_per_parameter_rates_as_paddle(cfg: Config) -> None:
    needs_hardware_rsqrt(cfg)
    run_parity(cfg)
