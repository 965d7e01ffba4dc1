"""``paddle.optimizer.RMSProp``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _checks, _native
from .._numerics import round_f32, round_to
from ..regularizer import WeightDecayRegularizer
from . import _multi_tensor
from ._eigen import float_attrs, sqrt_like_eigen
from ._engine import cpu_row, gpu_row
from .lr import LRScheduler
from .optimizer import Optimizer, _Item, check_range, compute_dtype, paddle_option

__all__ = ["RMSProp"]



class RMSProp(Optimizer):
    """RMSProp with Paddle's momentum form: the step is accumulated, not the gradient.

    ``mean_square = rho*mean_square + (1-rho)*grad*grad``; ``momentum = mu*momentum + lr*grad /
    sqrt(mean_square + epsilon)`` (centered: ``sqrt(mean_square - mean_grad**2 + epsilon)`` with
    ``mean_grad = rho*mean_grad + (1-rho)*grad``); ``param -= momentum``. Note that ``epsilon`` is
    inside the root, unlike ``torch.optim.RMSprop``.

    Paddle's CPU kernel (Eigen), every operation rounded in the parameter's dtype: bit-exact to
    Paddle 3.3.1 for float64, and for float32 with the CPU's rsqrt (``_eigen.sqrt_like_eigen``). The
    same formulas run on CUDA (not compared with Paddle on a GPU). Paddle has no CPU kernel for fp16/bf16: here
    they compute in float32 (with master weights under ``multi_precision``, which ``decorate``
    switches on). Differences from Paddle: non-finite hyper-parameters are refused.
    """

    # Paddle's private attributes of the options (PaddleSpeech reads them)
    _rho, _epsilon = paddle_option("rho"), paddle_option("epsilon")
    _momentum, _centered = paddle_option("momentum"), paddle_option("centered")

    def __init__(
        self,
        learning_rate: float | LRScheduler,
        rho: float = 0.95,
        epsilon: float = 1.0e-6,
        momentum: float = 0.0,
        centered: bool = False,
        parameters: Iterable[Tensor] | Iterable[dict[str, Any]] | None = None,
        weight_decay: float | WeightDecayRegularizer | None = None,
        grad_clip: Any = None,
        name: str | None = None,
        *,
        fused: bool = False,
    ) -> None:
        _checks.required("learning_rate", learning_rate, "learning_rate is not set.")
        defaults = {"rho": rho, "epsilon": epsilon, "momentum": momentum, "centered": centered}
        self._check_group(defaults)
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, False, defaults, name, fused)

    def _check_group(self, group: dict[str, Any]) -> None:
        for key in ("rho", "epsilon", "momentum"):
            if key in group:
                _checks.required(key, group[key], f"{key} is not set.")
                _checks.real(key, group[key])
        for key in ("epsilon", "momentum"):
            check_range(group, key)
        check_range(group, "rho", 0.0, 1.0)  # above 1 the mean square turns negative, its root NaN
        if "centered" in group:
            group["centered"] = _checks.flag("centered", group["centered"])

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        dtype = torch.float32 if self._uses_master(p) else p.dtype
        for key in ("momentum", "mean_square", "mean_grad"):
            state[key] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)

    def _compiled_row(
        self, item: _Item, group: dict[str, Any], lr: float, batch: _native.Batch, gpu: bool
    ) -> bool | None:
        keys = ("momentum", "mean_square", "mean_grad") if group["centered"] else ("momentum", "mean_square")
        states = tuple(item[2][key] for key in keys)
        return (gpu_row if gpu else cpu_row)(self, item, group, lr, batch, states)

    def _compiled_call(self, kern: _native.Kernels, batch: _native.Batch, group: dict[str, Any]) -> None:
        rho, eps, mu = (round_f32(group[key]) for key in ("rho", "epsilon", "momentum"))
        kern.rmsprop(batch, rho, eps, mu, group["centered"])

    def _multi_tensor_call(self, kern: Any, launch: Any, group: dict[str, Any], found_inf: Tensor | None) -> None:
        rho, eps, mu = (round_f32(group[key]) for key in ("rho", "epsilon", "momentum"))
        _multi_tensor.rmsprop(kern, launch, found_inf, rho, eps, mu, group["centered"])

    def _kernel(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float
    ) -> Tensor:
        mt = compute_dtype(value)
        rnd = round_to(mt)
        rho, eps, mu = float_attrs(group, mt, "rho", "epsilon", "momentum")
        keep = rnd(1 - rho)
        w, g = value.to(mt), grad.to(mt)
        ms, mom = state["mean_square"].to(mt), state["momentum"].to(mt)
        tmp, den = self._buffer(w, mt, "tmp"), self._buffer(w, mt, "den")
        ms.mul_(rho).add_(torch.mul(g, keep, out=tmp).mul_(g))  # rho*ms + ((1-rho)*g)*g
        if group["centered"]:
            mg = state["mean_grad"].to(mt)
            mg.mul_(rho).add_(torch.mul(g, keep, out=tmp))  # rho*mg + (1-rho)*g
            torch.sub(ms, torch.mul(mg, mg, out=den), out=den).add_(eps)  # (ms - mg^2) + eps
            state["mean_grad"].copy_(mg)
        else:
            torch.add(ms, eps, out=den)  # ms + eps
        sqrt_like_eigen(den, out=den)
        mom.mul_(mu).add_(torch.mul(g, lr, out=tmp).div_(den))  # mu*mom + (lr*g)/denom
        w = w.sub_(mom)
        state["mean_square"].copy_(ms)
        state["momentum"].copy_(mom)
        return w
