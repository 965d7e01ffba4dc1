"""The optimizers of ``paddle_compat.optimizer``, in one table: each class, the facts about it that
its checks need, and the configurations the selfcheck runs.

The selfcheck (``paddle_compat.selfcheck``) runs every configuration here; the test suite's case
table (``tests/optim_db.py``) is built on this one (its entries, in this order, with these facts),
and a test checks that every optimizer ``paddle_compat.optimizer`` exports is here. A new optimizer
needs its entry here and its cases there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import _native
from ..nn import ClipGradByGlobalNorm, ClipGradByNorm
from ..regularizer import L1Decay
from ._engine import defines
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam
from .adamax import Adamax
from .adamw import AdamW
from .asgd import ASGD
from .lamb import Lamb
from .momentum import Momentum
from .nadam import NAdam
from .optimizer import Optimizer
from .radam import RAdam
from .rmsprop import RMSProp
from .rprop import Rprop
from .sgd import SGD

__all__ = ["TABLE", "Config", "Entry", "entry_of"]


@dataclass(frozen=True)
class Config:
    """One configuration: ``label`` names it after the class's name (``""``: the defaults);
    ``kwargs(params)`` gives the constructor's keyword arguments but ``multi_precision`` (fresh
    objects each time: clips and regularizers are not shared between optimizers)."""

    label: str
    kwargs: Callable[[list[Any]], dict[str, Any]]
    steps: int = 3  # how many steps reach every branch of the update


@dataclass(frozen=True)
class Entry:
    """One optimizer class and what its checks need to know of it."""

    cls: type[Optimizer]
    learning_rate: float  # a rate its cases take when they take no other
    configs: tuple[Config, ...]
    # Paddle's constructor takes ``multi_precision`` (else ``decorate`` switches ``_multi_precision`` on)
    takes_multi_precision: bool = True
    # the constructor's weight-decay argument (Lamb's own decoupled one; None: there is none, Rprop)
    decay_arg: str | None = "weight_decay"
    # Paddle's float32 CPU kernel depends on the host: the profiles of paddle_compat._paddle_cpu
    cpu_profiles: bool = False
    # accumulators keep the parameter's dtype under multi_precision, as Paddle's (ASGD, Rprop)
    state_in_param_dtype: bool = False
    # state a skipped step still changes (Paddle's _finish_update: Adamax's beta power)
    changed_when_skipped: tuple[str, ...] = ()
    # the rate is only the initial step size (Rprop): schedulers, set_lr and rate ratios change nothing
    rate_is_initial_step: bool = False
    # beta1, beta2 and epsilon may be given as one-element tensors, as Paddle's
    tensor_options: bool = False
    # its GPU forms follow Paddle's GPU kernels (emulated exactly on the CPU); the others, whose
    # Paddle kernels were compared on the CPU only, run their CPU formulas in float32 on a GPU
    paddle_gpu_formulas: bool = False
    # the update computes in the accumulators' dtype, the parameter's also with master weights (Rprop):
    # the GPU kernels (float32 arithmetic) take float32 parameters only
    computes_in_param_dtype: bool = False

    @property
    def name(self) -> str:
        return self.cls.__name__

    @property
    def eigen_sqrt(self) -> bool:
        """Float32 updates take Eigen's fast sqrt: bitwise to Paddle only with the CPU's rsqrt
        (the compiled kernels; ``_native.ROOTS_DIFFER``)."""
        return self.name in _native.ROOTS_DIFFER

    @property
    def gpu_kernels(self) -> bool:
        """The class has a form for the GPU multi-tensor kernels (the others update GPU tensors one
        at a time with their torch form)."""
        return defines(self.cls, "_compiled_row", "_multi_tensor_call")

    def new(self, learning_rate: Any, params: Any, *, multi_precision: bool = False, weight_decay: Any = None,
            **kwargs: Any) -> Optimizer:
        """``cls(learning_rate, parameters=params, **kwargs)``, with ``multi_precision`` and
        ``weight_decay`` given as the class takes them (none for Rprop; Lamb's ``lamb_weight_decay``)."""
        if weight_decay is not None and self.decay_arg is not None:
            kwargs[self.decay_arg] = weight_decay
        if multi_precision and self.takes_multi_precision:
            kwargs["multi_precision"] = True
        opt = self.cls(learning_rate, parameters=params, **kwargs)
        if multi_precision and not self.takes_multi_precision:
            opt._multi_precision = True  # what decorate(level="O2") does
        return opt

    def build(self, config: Config, params: list[Any], multi_precision: bool = False) -> Optimizer:
        """The optimizer of ``config`` (one of this entry's) over ``params``."""
        kwargs = config.kwargs(params)
        learning_rate = kwargs.pop("learning_rate", self.learning_rate)
        return self.new(learning_rate, kwargs.pop("parameters", params), multi_precision=multi_precision, **kwargs)

    def title(self, config: Config) -> str:
        """The configuration's name: the class's, then its label."""
        return f"{self.name} {config.label}".rstrip()


def _plain(params: list[Any]) -> dict[str, Any]:
    return {}


TABLE: tuple[Entry, ...] = (
    Entry(SGD, 0.1, (
        Config("", _plain),
        Config("L2", lambda ps: {"weight_decay": 0.01}),
        Config("L1, groups", lambda ps: {
            "parameters": [{"params": ps[:1]}, {"params": ps[1:], "learning_rate": 0.3}],
            "weight_decay": L1Decay(0.01)}),
    ), paddle_gpu_formulas=True),
    Entry(Momentum, 0.05, (
        Config("", lambda ps: {"learning_rate": 0.1}),
        Config("Nesterov L2", lambda ps: {"learning_rate": 0.1, "momentum": 0.8, "use_nesterov": True,
                                          "weight_decay": 0.01, "rescale_grad": 0.5}),
    ), paddle_gpu_formulas=True),
    Entry(Adam, 0.01, (
        Config("", _plain),
        Config("L2 AMSGrad, global norm", lambda ps: {
            "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6, "weight_decay": 0.01, "amsgrad": True,
            "grad_clip": ClipGradByGlobalNorm(1.0)}),
    ), cpu_profiles=True, tensor_options=True, paddle_gpu_formulas=True),
    Entry(AdamW, 0.01, (
        Config("", _plain),
        Config("lr_ratio, low-precision moments", lambda ps: {
            "learning_rate": 0.005612671375274658, "weight_decay": 0.1,
            "lr_ratio": lambda p: 0.5 if p.numel() > 100 else 1.0, "use_lowprecision_moment": True,
            "amsgrad": True, "grad_clip": ClipGradByNorm(1.0)}),
    ), cpu_profiles=True, tensor_options=True, paddle_gpu_formulas=True),
    # the rest of paddle.optimizer (CPU kernels only in Paddle's CPU build: their GPU forms here run
    # the CPU formulas in float32)
    Entry(Lamb, 0.01, (
        Config("decay, global norm", lambda ps: {
            "lamb_weight_decay": 0.05, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-5,
            "grad_clip": ClipGradByGlobalNorm(0.5)}),
    ), decay_arg="lamb_weight_decay", tensor_options=True),
    Entry(RMSProp, 0.01, (
        Config("centered, L2, global norm", lambda ps: {
            "rho": 0.9, "epsilon": 1e-5, "momentum": 0.9, "centered": True, "weight_decay": 0.01,
            "grad_clip": ClipGradByGlobalNorm(0.5)}),
    ), takes_multi_precision=False),
    Entry(Adagrad, 0.1, (
        Config("L2, global norm", lambda ps: {
            "epsilon": 1e-5, "initial_accumulator_value": 0.1, "weight_decay": 0.01,
            "grad_clip": ClipGradByGlobalNorm(0.5)}),
    ), takes_multi_precision=False),
    Entry(Adamax, 0.01, (
        Config("L2, global norm", lambda ps: {
            "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6, "weight_decay": 0.01,
            "grad_clip": ClipGradByGlobalNorm(0.5)}),
    ), takes_multi_precision=False, changed_when_skipped=("beta1_pow_acc",), tensor_options=True),
    Entry(Adadelta, 1.0, (
        Config("L2, norm", lambda ps: {
            "epsilon": 1e-5, "rho": 0.9, "weight_decay": 0.01, "grad_clip": ClipGradByNorm(0.3)}),
    ), takes_multi_precision=False),
    Entry(NAdam, 0.01, (
        Config("L2, global norm", lambda ps: {
            "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6, "momentum_decay": 0.01, "weight_decay": 0.01,
            "grad_clip": ClipGradByGlobalNorm(0.5)}),
    ), takes_multi_precision=False, tensor_options=True),
    Entry(RAdam, 0.01, (
        # the rectified update starts at the sixth step
        Config("rectified, L2", lambda ps: {"beta1": 0.8, "beta2": 0.9, "weight_decay": 0.01}, steps=7),
    ), takes_multi_precision=False, tensor_options=True),
    Entry(ASGD, 0.05, (
        # past batch_num steps: the oldest gradient leaves the sum
        Config("batches, L1", lambda ps: {"batch_num": 2, "weight_decay": L1Decay(0.001)}),
    ), state_in_param_dtype=True),
    Entry(Rprop, 0.01, (
        Config("range, etas", lambda ps: {
            "learning_rate": 0.04, "learning_rate_range": (1e-4, 0.05), "etas": (0.4, 1.3)}),
    ), decay_arg=None, state_in_param_dtype=True, rate_is_initial_step=True, computes_in_param_dtype=True),
)


# the rest of paddle.optimizer, after SGD, Momentum, Adam and AdamW (Paddle's kernels compared on the CPU only)
FAMILY: tuple[Entry, ...] = tuple(entry for entry in TABLE if not entry.paddle_gpu_formulas)


def entry_of(cls: type) -> Entry:
    """The table's entry of optimizer class ``cls``."""
    for entry in TABLE:
        if entry.cls is cls:
            return entry
    raise KeyError(f"{cls.__name__} is not in the optimizers' table (paddle_compat.optimizer._cases)")
