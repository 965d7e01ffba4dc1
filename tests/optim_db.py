"""Every optimizer test case, in one table (modelled on torch's ``optim_db``).

Each ``OptimizerInfo`` describes one optimizer class: its configurations (``OptimizerInput``), each
marked with the suites that run it, and the facts those suites need. Every optimizer test module
reads its cases from ``OPTIM_DB``, so a new optimizer needs its module and one entry here.

The table is built on the package's own (``paddle_compat.optimizer._cases``, which the selfcheck
runs): the same optimizers in the same order, with the facts about each (``eigen_sqrt``,
``decay_arg``, ...) and the rate of the family's cases read from there. A new optimizer needs its
entry there first.

A configuration is written once for both APIs: ``build(api, params, **extra)`` calls ``api.optimizer``,
``api.nn`` and ``api.regularizer``, where ``api`` is ``OURS`` (paddle_compat) or the ``paddle`` module
itself (the parity tests). ``extra`` are keyword arguments a suite adds (``multi_precision``).

Suites (``OptimizerInput.suites``):

- ``forms``: the compiled, in-place and plain CPU forms agree bitwise on every dtype mix
  (test_optimizer_kernels); ``nonfinite``: the same with inf/NaN gradients.
- ``gpu``: the Triton kernels, interpreted, against the per-tensor GPU formulas; ``cuda``: the same
  on a GPU (test_optimizer_kernels).
- ``gpu_formula``: the GPU formula against ``OptimizerInfo.gpu_reference`` (test_optimizer_gpu_formulas).
- ``handover``: the GradScaler hand-over (``grad_scale``/``found_inf``) on every path.
- ``copies``: pickle and deepcopy resume the trajectory (test_optimizer_copies).
- ``parity``: bitwise against Paddle 3.3.1 (tests/parity/test_optimizer_parity); parameters come named.

Tests that construct an optimizer class themselves use ``new(cls, ...)``: it passes
``multi_precision`` and a weight decay the way each constructor takes them (see ``OptimizerInfo``).

``OptimizerInput.options`` holds a suite's settings for the configuration: ``dtype`` (of the
parameters, parity and handover), ``scaler`` and ``set_lr_at`` (parity), ``steps`` (forms: how
many, when the default 3 do not reach a branch of the update).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

import paddle_compat.nn as pnn
import paddle_compat.optimizer as popt
import paddle_compat.regularizer as pregularizer
from paddle_compat.optimizer import _cases

OURS = SimpleNamespace(optimizer=popt, nn=pnn, regularizer=pregularizer)

# The scaler of the parity runs that use one (``options={"scaler": True}``).
PARITY_SCALER = {"init_loss_scaling": 2.0**10, "incr_every_n_steps": 7}


@dataclasses.dataclass(frozen=True)
class OptimizerInput:
    """One configuration of an optimizer: ``desc`` names it (unique over the table)."""

    desc: str
    build: Callable[..., Any]
    suites: frozenset[str] = frozenset()
    options: dict[str, Any] = dataclasses.field(default_factory=dict)

    def make(self, params: Any, **extra: Any) -> Any:
        """Our optimizer in this configuration."""
        return self.build(OURS, params, **extra)


@dataclasses.dataclass(frozen=True)
class OptimizerInfo:
    """One optimizer class and what its tests need to know of it: its facts are its entry's in the
    package's table (``_cases.Entry``: ``info.eigen_sqrt`` is ``info.entry.eigen_sqrt``)."""

    cls: type
    inputs: tuple[OptimizerInput, ...]
    # Paddle's GPU kernel in NumPy, ``(param, grad, state, lr) -> param``, for the ``gpu_formula`` inputs
    gpu_reference: Callable[..., Any] | None = None

    @property
    def entry(self) -> _cases.Entry:
        return _cases.entry_of(self.cls)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or "cls" not in self.__dict__:  # (copies and pickles look before init)
            raise AttributeError(name)
        return getattr(self.entry, name)


def _groups_by_name(params: list, weight_decay: Any) -> list[dict]:
    """Weights and biases (named ``w*``/``b*``) in two groups: the biases with a 0.5 rate ratio and
    their own decay."""
    weights = [p for p in params if _name(p).startswith("w")]
    biases = [p for p in params if _name(p).startswith("b")]
    return [{"params": weights}, {"params": biases, "learning_rate": 0.5, "weight_decay": weight_decay}]


def _name(p: Any) -> str:
    return p[0] if isinstance(p, tuple) else p.name


def decay_weights_only(name: str) -> bool:
    return name.startswith("w")


# --- Paddle's GPU formulas in NumPy: float32 arithmetic, the FMAs nvcc contracts rounded once -----
f32 = np.float32


def np_fma(a: Any, b: Any, c: Any) -> Any:
    """``a*b + c`` of float32 values rounded once to float32: the float64 product is exact, the
    float64 sum is rounded to odd (its exact error from TwoSum), then to float32."""
    a, b, c = np.broadcast_arrays(np.float64(a), np.float64(b), np.float64(c))
    p = a * b
    s = p + c
    p_part = s - c
    error = (p - p_part) + (c - (s - p_part))
    bits = s.view(np.int64)
    nudge = (error != 0) & ((bits & 1) == 0) & np.isfinite(s)
    bits = bits + np.where(nudge, np.where((error > 0) == (s > 0), 1, -1), 0)
    return bits.view(np.float64).astype(f32)


def _sgd_gpu(p, g, st, lr):
    return np_fma(-f32(lr), g, p)


def _momentum_gpu(p, g, st, lr, mu=0.9, coeff=0.01, rescale=0.5, nesterov=True):
    g = g * f32(rescale)
    g = np_fma(f32(coeff), p, g)
    v = np_fma(st.get("v", np.zeros_like(p)), f32(mu), g)
    st["v"] = v
    return np_fma(-np_fma(v, f32(mu), g), f32(lr), p) if nesterov else np_fma(-f32(lr), v, p)


def _adam_gpu(p, g, st, lr, b1=0.9, b2=0.999, eps=1e-8, coeff=None):
    b1, b2, eps, lr = f32(b1), f32(b2), f32(eps), f32(lr)
    b1p, b2p = st.get("b1p", b1), st.get("b2p", b2)
    if coeff is not None:  # 1 - lr*coeff, one FMA
        p = p * np_fma(-lr, f32(coeff), f32(1))
    m = np_fma(b1, st.get("m", np.zeros_like(p)), (f32(1) - b1) * g)
    v = np_fma(b2, st.get("v", np.zeros_like(p)), ((f32(1) - b2) * g) * g)
    denom = np.sqrt(v) / np.sqrt(f32(1) - b2p) + eps
    p = np_fma(m / denom, -(lr / (f32(1) - b1p)), p)
    st.update(m=m, v=v, b1p=b1p * b1, b2p=b2p * b2)
    return p


def _in(desc: str, build: Callable[..., Any], *suites: str, **options: Any) -> OptimizerInput:
    return OptimizerInput(desc, build, frozenset(suites), options)


FORMS = ("forms",)
F64_SET_LR = {"dtype": torch.float64, "set_lr_at": {20: 0.003, 45: 0.02}}

OPTIM_DB: list[OptimizerInfo] = [
    OptimizerInfo(
        popt.SGD,
        (
            _in("sgd", lambda api, ps, **kw: api.optimizer.SGD(0.1, parameters=ps, **kw), *FORMS, "gpu_formula",
                "parity"),
            _in("sgd_l2", lambda api, ps, **kw: api.optimizer.SGD(0.1, parameters=ps, weight_decay=0.01, **kw),
                *FORMS, "nonfinite", "gpu", "cuda", "copies"),
            _in("sgd_l1_groups", lambda api, ps, **kw: api.optimizer.SGD(
                0.1, parameters=[{"params": ps[:1]}, {"params": ps[1:], "learning_rate": 0.3}],
                weight_decay=api.regularizer.L1Decay(0.01), **kw), *FORMS),
            _in("sgd_handover", lambda api, ps, **kw: api.optimizer.SGD(
                0.1, parameters=ps, weight_decay=0.01, grad_clip=api.nn.ClipGradByGlobalNorm(1.0), **kw), "handover"),
            _in("sgd_l2_globalnorm_scaler", lambda api, ps, **kw: api.optimizer.SGD(
                0.1, parameters=ps, weight_decay=0.01, grad_clip=api.nn.ClipGradByGlobalNorm(0.5), **kw),
                "parity", scaler=True),
            _in("sgd_l1_groups_by_name", lambda api, ps, **kw: api.optimizer.SGD(
                0.1, parameters=_groups_by_name(ps, api.regularizer.L2Decay(0.05)),
                weight_decay=api.regularizer.L1Decay(0.001), **kw), "parity"),
            _in("sgd_groups_without_decay", lambda api, ps, **kw: api.optimizer.SGD(
                0.1, parameters=_groups_by_name(ps, None), weight_decay=api.regularizer.L1Decay(0.01), **kw),
                "parity"),
            # Paddle's CPU build only has a bf16 kernel for SGD (and it has no master weights)
            _in("sgd_bf16_l2", lambda api, ps, **kw: api.optimizer.SGD(0.1, parameters=ps, weight_decay=0.01, **kw),
                "parity", dtype=torch.bfloat16),
            _in("sgd_float64_set_lr", lambda api, ps, **kw: api.optimizer.SGD(
                0.01, parameters=ps, weight_decay=0.01, **kw), "parity", **F64_SET_LR),
        ),
        gpu_reference=_sgd_gpu,
    ),
    OptimizerInfo(
        popt.Momentum,
        (
            _in("momentum", lambda api, ps, **kw: api.optimizer.Momentum(0.1, parameters=ps, **kw), *FORMS),
            _in("momentum_nesterov_l2", lambda api, ps, **kw: api.optimizer.Momentum(
                0.1, 0.8, parameters=ps, use_nesterov=True, weight_decay=0.01, rescale_grad=0.5, **kw),
                *FORMS, "nonfinite", "gpu", "cuda"),
            _in("momentum_l1_groups", lambda api, ps, **kw: api.optimizer.Momentum(
                0.1, parameters=[{"params": ps[:1], "weight_decay": 0.02}, {"params": ps[1:], "learning_rate": 0.3}],
                weight_decay=api.regularizer.L1Decay(0.01), **kw), *FORMS, "gpu"),
            _in("momentum_nesterov_copies", lambda api, ps, **kw: api.optimizer.Momentum(
                0.1, parameters=ps, use_nesterov=True, **kw), "copies"),
            _in("momentum_handover", lambda api, ps, **kw: api.optimizer.Momentum(
                0.1, parameters=ps, weight_decay=0.01, grad_clip=api.nn.ClipGradByGlobalNorm(1.0), **kw), "handover"),
            _in("momentum_gpu_formula", lambda api, ps, **kw: api.optimizer.Momentum(
                0.05, 0.9, parameters=ps, use_nesterov=True, weight_decay=0.01, rescale_grad=0.5, **kw),
                "gpu_formula"),
            _in("momentum_parity", lambda api, ps, **kw: api.optimizer.Momentum(0.05, 0.9, parameters=ps, **kw),
                "parity"),
            _in("momentum_nesterov_l2_bynorm_scaler", lambda api, ps, **kw: api.optimizer.Momentum(
                0.05, 0.9, parameters=ps, use_nesterov=True, weight_decay=0.01, grad_clip=api.nn.ClipGradByNorm(0.3),
                rescale_grad=0.5, **kw), "parity", scaler=True),
            _in("momentum_l1_groups_globalnorm", lambda api, ps, **kw: api.optimizer.Momentum(
                0.05, 0.8, parameters=_groups_by_name(ps, 0.02), weight_decay=api.regularizer.L1Decay(0.001),
                grad_clip=api.nn.ClipGradByGlobalNorm(1.0), **kw), "parity"),
            # Paddle's merged multi-tensor Momentum rounds as the per-tensor kernel
            _in("momentum_multi_tensor", lambda api, ps, **kw: api.optimizer.Momentum(
                0.05, 0.9, parameters=ps, use_multi_tensor=True, **kw), "parity"),
            _in("momentum_groups_without_decay", lambda api, ps, **kw: api.optimizer.Momentum(
                0.05, 0.9, parameters=_groups_by_name(ps, None), weight_decay=0.01, **kw), "parity"),
            _in("momentum_float64_set_lr", lambda api, ps, **kw: api.optimizer.Momentum(
                0.01, 0.9, parameters=ps, weight_decay=0.01, **kw), "parity", **F64_SET_LR),
        ),
        gpu_reference=_momentum_gpu,
    ),
    OptimizerInfo(
        popt.Adam,
        (
            _in("adam", lambda api, ps, **kw: api.optimizer.Adam(0.01, parameters=ps, **kw), *FORMS, "gpu_formula",
                "parity"),
            _in("adam_l2_amsgrad", lambda api, ps, **kw: api.optimizer.Adam(
                0.01, 0.8, 0.99, 1e-6, parameters=ps, weight_decay=0.01, amsgrad=True, **kw),
                *FORMS, "nonfinite", "gpu", "cuda"),
            _in("adam_l1_groups_globalnorm", lambda api, ps, **kw: api.optimizer.Adam(
                0.01, parameters=[{"params": ps[:1], "weight_decay": 0.02}, {"params": ps[1:], "beta1": 0.7}],
                weight_decay=api.regularizer.L1Decay(0.01), grad_clip=api.nn.ClipGradByGlobalNorm(1.0), **kw),
                *FORMS, "gpu"),
            _in("adam_scheduler", lambda api, ps, **kw: api.optimizer.Adam(
                api.optimizer.lr.StepDecay(0.01, step_size=2), parameters=ps, **kw), "copies"),
            _in("adam_handover", lambda api, ps, **kw: api.optimizer.Adam(
                0.01, parameters=ps, weight_decay=0.01, grad_clip=api.nn.ClipGradByGlobalNorm(1.0), **kw),
                "handover"),
            _in("adam_l2_globalnorm_scaler", lambda api, ps, **kw: api.optimizer.Adam(
                0.01, 0.8, 0.99, 1e-6, parameters=ps, weight_decay=0.01, grad_clip=api.nn.ClipGradByGlobalNorm(0.5),
                **kw), "parity", scaler=True),
            _in("adam_amsgrad_byvalue_groups", lambda api, ps, **kw: api.optimizer.Adam(
                0.01, parameters=_groups_by_name(ps, 0.03), amsgrad=True, grad_clip=api.nn.ClipGradByValue(0.2),
                **kw), "parity"),
            _in("adam_float64_set_lr", lambda api, ps, **kw: api.optimizer.Adam(
                0.01, parameters=ps, grad_clip=api.nn.ClipGradByGlobalNorm(0.5), **kw), "parity", **F64_SET_LR),
        ),
        gpu_reference=_adam_gpu,
    ),
    OptimizerInfo(
        popt.AdamW,
        (
            _in("adamw", lambda api, ps, **kw: api.optimizer.AdamW(0.01, parameters=ps, **kw), *FORMS, "nonfinite",
                "parity"),
            _in("adamw_ratio_lowmoment_amsgrad", lambda api, ps, **kw: api.optimizer.AdamW(
                0.01, parameters=ps, lr_ratio=lambda p: 0.5 if p.numel() > 100 else 1.0,
                use_lowprecision_moment=True, amsgrad=True, grad_clip=api.nn.ClipGradByNorm(1.0), **kw),
                *FORMS, "gpu", "cuda"),
            _in("adamw_clip", lambda api, ps, **kw: api.optimizer.AdamW(
                0.01, parameters=ps, grad_clip=api.nn.ClipGradByGlobalNorm(1.0), **kw), "copies"),
            _in("adamw_master_handover", lambda api, ps, **kw: api.optimizer.AdamW(
                0.01, parameters=ps, multi_precision=True, grad_clip=api.nn.ClipGradByGlobalNorm(1.0), **kw),
                "handover", dtype=torch.bfloat16),
            # a rate where 1 - lr*0.1 rounded once (an FMA) and twice differ
            _in("adamw_gpu_formula", lambda api, ps, **kw: api.optimizer.AdamW(
                0.005612671375274658, parameters=ps, weight_decay=0.1, **kw), "gpu_formula", "gpu"),
            _in("adamw_globalnorm_decayfun_scaler", lambda api, ps, **kw: api.optimizer.AdamW(
                0.01, parameters=ps, weight_decay=0.1, apply_decay_param_fun=decay_weights_only,
                grad_clip=api.nn.ClipGradByGlobalNorm(0.5), **kw), "parity", scaler=True),
            _in("adamw_amsgrad", lambda api, ps, **kw: api.optimizer.AdamW(0.01, parameters=ps, amsgrad=True, **kw),
                "parity"),
            _in("adamw_groups_bynorm", lambda api, ps, **kw: api.optimizer.AdamW(
                0.01, 0.85, 0.995, parameters=_groups_by_name(ps, 0.0), weight_decay=0.05,
                grad_clip=api.nn.ClipGradByNorm(0.2), **kw), "parity"),
            _in("adamw_float64_set_lr", lambda api, ps, **kw: api.optimizer.AdamW(
                0.01, parameters=ps, weight_decay=0.1, **kw), "parity", **F64_SET_LR),
        ),
        gpu_reference=lambda p, g, st, lr: _adam_gpu(p, g, st, lr, coeff=0.1),
    ),
]

# --- the rest of paddle.optimizer (CPU kernels only in Paddle's CPU build: no GPU form here) --------
def _family(name: str, *inputs: tuple[str, dict[str, Any], tuple[str, ...], dict[str, Any]]) -> OptimizerInfo:
    """An ``OptimizerInfo`` of ``paddle.optimizer.<name>``: each input is (desc, constructor keyword
    arguments, suites, options); ``clip``/``regularizer``/``groups`` arguments name what to build per
    API: ``("ClipGradByNorm", 0.3)``, ``("L1Decay", 0.001)``, and a group ``weight_decay``. The rate
    is the table's (``_cases.Entry.learning_rate``) unless an input gives one."""
    lr = _cases.entry_of(getattr(popt, name)).learning_rate

    def build(kwargs: dict[str, Any]) -> Callable[..., Any]:
        def make(api: Any, ps: Any, **kw: Any) -> Any:
            args = dict(kwargs)
            if "grad_clip" in args:
                args["grad_clip"] = getattr(api.nn, args["grad_clip"][0])(args["grad_clip"][1])
            if isinstance(args.get("weight_decay"), tuple):
                args["weight_decay"] = getattr(api.regularizer, args["weight_decay"][0])(args["weight_decay"][1])
            if "groups" in args:
                decay = args.pop("groups")
                if isinstance(decay, tuple):
                    decay = getattr(api.regularizer, decay[0])(decay[1])
                ps = _groups_by_name(ps, decay)
            rate = args.pop("learning_rate", lr)
            if isinstance(rate, tuple):  # a scheduler: (its name, its keyword arguments)
                rate = getattr(api.optimizer.lr, rate[0])(**rate[1])
            return getattr(api.optimizer, name)(rate, parameters=ps, **args, **kw)

        return make

    return OptimizerInfo(
        getattr(popt, name),
        tuple(_in(desc, build(kwargs), *suites, **options) for desc, kwargs, suites, options in inputs),
    )


SCALER = {"scaler": True}
# a scheduler as the rate (stepped after every step by the parity runs), in _family's form
COSINE = ("CosineAnnealingDecay", {"learning_rate": 1.0, "T_max": 4})
F64 = {"dtype": torch.float64}
GLOBAL = ("ClipGradByGlobalNorm", 0.5)
L1 = ("L1Decay", 0.001)
L2 = ("L2Decay", 0.02)

OPTIM_DB += [
    _family(
        "Lamb",
        ("lamb", {}, ("parity", "copies", "forms", "nonfinite", "gpu"), {}),
        ("lamb_decay_globalnorm_scaler", {"lamb_weight_decay": 0.05, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-5,
                                          "grad_clip": GLOBAL}, ("parity", "handover", "forms", "gpu", "cuda"), SCALER),
        ("lamb_exclude", {"exclude_from_weight_decay_fn": lambda p: len(p.shape) == 1}, ("parity",), {}),
        ("lamb_exclude_always_adapt", {"exclude_from_weight_decay_fn": lambda p: len(p.shape) == 1,
                                       "always_adapt": True}, ("parity", "forms", "gpu"), {}),
        ("lamb_no_decay", {"lamb_weight_decay": 0.0}, ("parity", "forms", "gpu"), {}),
        ("lamb_bynorm", {"grad_clip": ("ClipGradByNorm", 0.3)}, ("parity",), {}),
        ("lamb_float64_set_lr", {}, ("parity",), F64_SET_LR),
    ),
    _family(
        "RMSProp",
        ("rmsprop", {}, ("parity", "copies", "forms", "nonfinite", "gpu"), {}),
        ("rmsprop_cosine", {"learning_rate": ("CosineAnnealingDecay", {"learning_rate": 0.01, "T_max": 4})},
         ("parity",), {}),
        ("rmsprop_centered_momentum_scaler", {"rho": 0.9, "epsilon": 1e-5, "momentum": 0.9, "centered": True,
                                              "weight_decay": 0.01, "grad_clip": GLOBAL},
         ("parity", "handover", "forms", "gpu", "cuda"), SCALER),
        ("rmsprop_centered_l1_byvalue", {"momentum": 0.5, "centered": True, "weight_decay": L1,
                                         "grad_clip": ("ClipGradByValue", 0.2)}, (*FORMS, "gpu"), {}),
        ("rmsprop_groups_byvalue", {"momentum": 0.5, "weight_decay": L1, "groups": 0.03,
                                    "grad_clip": ("ClipGradByValue", 0.2)}, ("parity",), {}),
        ("rmsprop_float64_set_lr", {}, ("parity",), F64_SET_LR),
    ),
    _family(
        "Adagrad",
        ("adagrad", {}, ("parity", "copies", "forms", "nonfinite", "gpu"), {}),
        ("adagrad_init_l2_globalnorm_scaler", {"epsilon": 1e-5, "initial_accumulator_value": 0.1,
                                               "weight_decay": 0.01, "grad_clip": GLOBAL},
         ("parity", "handover", "forms", "gpu", "cuda"), SCALER),
        ("adagrad_l1_bynorm", {"weight_decay": L1, "grad_clip": ("ClipGradByNorm", 0.3)}, (*FORMS, "gpu"), {}),
        ("adagrad_l1_groups_bynorm", {"weight_decay": L1, "groups": L2, "grad_clip": ("ClipGradByNorm", 0.3)},
         ("parity",), {}),
        ("adagrad_float64_set_lr", {}, ("parity",), F64_SET_LR),
    ),
    _family(
        "Adamax",
        ("adamax", {}, ("parity", "copies", "forms", "nonfinite", "gpu"), {}),
        ("adamax_l2_globalnorm_scaler", {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6, "weight_decay": 0.01,
                                         "grad_clip": GLOBAL}, ("parity", "handover", "forms", "gpu", "cuda"), SCALER),
        ("adamax_l1_byvalue", {"weight_decay": L1, "grad_clip": ("ClipGradByValue", 0.2)}, (*FORMS, "gpu"), {}),
        ("adamax_groups_byvalue", {"weight_decay": L1, "groups": 0.02, "grad_clip": ("ClipGradByValue", 0.2)},
         ("parity",), {}),
        ("adamax_float64_set_lr", {}, ("parity",), F64_SET_LR),
    ),
    _family(
        "Adadelta",
        ("adadelta", {}, ("parity", "copies", "forms", "nonfinite", "gpu"), {}),
        ("adadelta_l2_bynorm_scaler", {"epsilon": 1e-5, "rho": 0.9, "weight_decay": 0.01,
                                       "grad_clip": ("ClipGradByNorm", 0.3)},
         ("parity", "handover", "forms", "gpu", "cuda"), SCALER),
        ("adadelta_l1", {"learning_rate": 0.5, "weight_decay": L1}, (*FORMS, "gpu"), {}),
        ("adadelta_groups_l1", {"learning_rate": 0.5, "weight_decay": L1, "groups": L2}, ("parity",), {}),
        ("adadelta_float64_set_lr", {}, ("parity",), F64_SET_LR),
        ("adadelta_cosine", {"learning_rate": COSINE}, ("parity", "copies"), {}),
    ),
    _family(
        "NAdam",
        ("nadam", {}, ("parity", "copies", "forms", "nonfinite", "gpu"), {}),
        ("nadam_l2_globalnorm_scaler", {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6, "momentum_decay": 0.01,
                                        "weight_decay": 0.01, "grad_clip": GLOBAL},
         ("parity", "handover", "forms", "gpu", "cuda"), SCALER),
        ("nadam_l1", {"weight_decay": L1, "momentum_decay": 0.5}, (*FORMS, "gpu"), {}),
        ("nadam_groups_l1", {"weight_decay": L1, "groups": L2}, ("parity",), {}),
        ("nadam_float64_set_lr", {}, ("parity",), F64_SET_LR),
    ),
    _family(
        "RAdam",
        ("radam", {}, ("parity", "copies", "forms", "nonfinite", "gpu"), {}),
        ("radam_l2_globalnorm_scaler", {"beta1": 0.8, "beta2": 0.9, "epsilon": 1e-6, "weight_decay": 0.01,
                                        "grad_clip": GLOBAL}, ("parity", "handover", "forms", "gpu"), SCALER),
        ("radam_l1_bynorm", {"weight_decay": L1, "grad_clip": ("ClipGradByNorm", 0.3)}, (*FORMS, "gpu"), {}),
        # the rectified update starts at the sixth step
        ("radam_rectified", {"beta1": 0.8, "beta2": 0.9, "weight_decay": 0.01}, (*FORMS, "gpu", "cuda"), {"steps": 8}),
        ("radam_groups_bynorm", {"weight_decay": L1, "groups": L2, "grad_clip": ("ClipGradByNorm", 0.3)},
         ("parity",), {}),
        ("radam_float64_set_lr", {}, ("parity",), F64_SET_LR),
    ),
    _family(
        "ASGD",
        ("asgd", {}, ("parity", "copies", "forms", "nonfinite", "gpu"), {}),
        ("asgd_batches_l2_globalnorm_scaler", {"batch_num": 4, "weight_decay": 0.01, "grad_clip": GLOBAL},
         ("parity", "handover", "forms", "gpu"), SCALER),
        # past batch_num steps: the oldest gradient leaves the sum
        ("asgd_batches_l1", {"batch_num": 2, "weight_decay": L1}, (*FORMS, "gpu", "cuda"), {"steps": 5}),
        ("asgd_groups_l1", {"batch_num": 3, "weight_decay": L1, "groups": L2}, ("parity",), {}),
        ("asgd_float64_set_lr", {}, ("parity",), F64_SET_LR),
    ),
    _family(
        "Rprop",
        ("rprop", {}, ("parity", "copies", "forms", "nonfinite", "gpu"), {}),
        ("rprop_range_etas_globalnorm_scaler", {"learning_rate_range": (1e-4, 0.05), "etas": (0.4, 1.3),
                                                "grad_clip": GLOBAL}, ("parity", "handover"), SCALER),
        ("rprop_range_etas", {"learning_rate": 0.04, "learning_rate_range": (1e-4, 0.05), "etas": (0.4, 1.3)},
         (*FORMS, "gpu", "cuda"), {"steps": 5}),
        ("rprop_groups_byvalue", {"groups": None, "grad_clip": ("ClipGradByValue", 0.2)}, ("parity",), {}),
        ("rprop_float64", {}, ("parity",), F64),
        # Paddle's CPU build has a bf16 Rprop kernel (bf16 arithmetic, no master weights)
        ("rprop_bf16", {}, ("parity",), {"dtype": torch.bfloat16}),
    ),
]

CLASSES = [info.cls for info in OPTIM_DB]
assert CLASSES == [entry.cls for entry in _cases.TABLE], "OPTIM_DB follows the package's table, in its order"
FAMILY = [entry.cls for entry in _cases.FAMILY]  # the rest of paddle.optimizer, after SGD ... AdamW


def info_of(cls: type) -> OptimizerInfo:
    return next(info for info in OPTIM_DB if info.cls is cls)


def new(cls: type, learning_rate: Any, params: Any, *, multi_precision: bool = False, weight_decay: Any = None,
        **kwargs: Any) -> Any:
    """``cls(learning_rate, parameters=params, **kwargs)``, with ``multi_precision`` and
    ``weight_decay`` given as ``cls`` takes them (none for Rprop; Lamb's ``lamb_weight_decay``)."""
    return _cases.entry_of(cls).new(learning_rate, params, multi_precision=multi_precision,
                                    weight_decay=weight_decay, **kwargs)


def cases(suite: str) -> list[tuple[OptimizerInfo, OptimizerInput]]:
    """Every (optimizer, configuration) pair that ``suite`` runs, in table order."""
    return [(info, inp) for info in OPTIM_DB for inp in info.inputs if suite in inp.suites]


def case(desc: str) -> OptimizerInput:
    """The configuration named ``desc``."""
    return next(inp for info in OPTIM_DB for inp in info.inputs if inp.desc == desc)


def ids(pairs: list[tuple[OptimizerInfo, OptimizerInput]]) -> list[str]:
    return [inp.desc for _, inp in pairs]


_descs = [inp.desc for info in OPTIM_DB for inp in info.inputs]
assert len(_descs) == len(set(_descs)), "configuration names must be unique"
