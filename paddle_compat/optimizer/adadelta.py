"""``paddle.optimizer.Adadelta``."""

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

__all__ = ["Adadelta"]



class Adadelta(Optimizer):
    """Adadelta: ``avg_sq_grad = rho*avg_sq_grad + (1-rho)*grad**2``; ``update =
    -sqrt(avg_sq_update + eps) / sqrt(avg_sq_grad + eps) * grad``; ``param += lr*update``;
    ``avg_sq_update = rho*avg_sq_update + (1-rho)*update**2``.

    Paddle's CPU kernel (Eigen), every operation rounded in the compute dtype: bit-exact to Paddle
    3.3.1 for float64, and for float32 with the CPU's rsqrt (``_eigen.sqrt_like_eigen``). The
    accumulators keep Paddle's names (``_avg_squared_grad``, ``_avg_squared_update``). The same
    formulas run on CUDA (not compared with Paddle on a GPU); fp16/bf16 compute in float32 (Paddle has no CPU
    kernel for them). Differences from Paddle: non-finite hyper-parameters are refused.
    """

    # Paddle's private attributes of the options (PaddleSpeech reads them)
    _epsilon, _rho = paddle_option("epsilon"), paddle_option("rho")

    def __init__(
        self,
        learning_rate: float | LRScheduler = 0.001,
        epsilon: float = 1.0e-6,
        rho: float = 0.95,
        parameters: Iterable[Tensor] | Iterable[dict[str, Any]] | None = None,
        weight_decay: float | WeightDecayRegularizer | None = None,
        grad_clip: Any = None,
        name: str | None = None,
        *,
        fused: bool = False,
    ) -> None:
        _checks.required("learning_rate", learning_rate, "learning_rate is not set.")
        defaults = {"epsilon": epsilon, "rho": rho}
        self._check_group(defaults)
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, False, defaults, name, fused)

    def _check_group(self, group: dict[str, Any]) -> None:
        for key in ("epsilon", "rho"):
            if key in group:
                _checks.required(key, group[key], f"{key} is not set.")
                _checks.real(key, group[key])
        # a negative epsilon or a rho above 1 makes the averages negative and their roots NaN
        check_range(group, "epsilon")
        check_range(group, "rho", 0.0, 1.0)

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        dtype = torch.float32 if self._uses_master(p) else p.dtype
        for key in ("_avg_squared_grad", "_avg_squared_update"):
            state[key] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)

    def _compiled_row(
        self, item: _Item, group: dict[str, Any], lr: float, batch: _native.Batch, gpu: bool
    ) -> bool | None:
        state = item[2]
        states = (state["_avg_squared_grad"], state["_avg_squared_update"])
        return (gpu_row if gpu else cpu_row)(self, item, group, lr, batch, states)

    def _compiled_call(self, kern: _native.Kernels, batch: _native.Batch, group: dict[str, Any]) -> None:
        kern.adadelta(batch, round_f32(group["rho"]), round_f32(group["epsilon"]))

    def _multi_tensor_call(self, kern: Any, launch: Any, group: dict[str, Any], found_inf: Tensor | None) -> None:
        _multi_tensor.adadelta(kern, launch, found_inf, round_f32(group["rho"]), round_f32(group["epsilon"]))

    def _kernel(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float
    ) -> Tensor:
        mt = compute_dtype(value)
        rnd = round_to(mt)
        rho, eps = float_attrs(group, mt, "rho", "epsilon")
        keep = rnd(1 - rho)
        w, g = value.to(mt), grad.to(mt)
        asg, asu = state["_avg_squared_grad"].to(mt), state["_avg_squared_update"].to(mt)
        tmp, update, den = (self._buffer(w, mt, slot) for slot in ("tmp", "update", "den"))
        asg.mul_(rho).add_(torch.mul(g, g, out=tmp).mul_(keep))  # rho*asg + (1-rho)*(g*g)
        # -(sqrt(asu + eps)/sqrt(asg + eps)*g)
        sqrt_like_eigen(torch.add(asu, eps, out=update), out=update)
        update.div_(sqrt_like_eigen(torch.add(asg, eps, out=den), out=den)).mul_(g).neg_()
        w = w.add_(torch.mul(update, lr, out=tmp))  # param + lr*update
        asu.mul_(rho).add_(update.mul_(update).mul_(keep))  # rho*asu + (1-rho)*(update*update)
        state["_avg_squared_grad"].copy_(asg)
        state["_avg_squared_update"].copy_(asu)
        return w
