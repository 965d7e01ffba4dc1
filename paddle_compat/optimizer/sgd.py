"""``paddle.optimizer.SGD``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _devices, _native
from .._numerics import fma
from . import _multi_tensor
from ._engine import kernels_take
from .lr import LRScheduler
from .optimizer import Optimizer, _Item, compute_dtype

__all__ = ["SGD"]


class SGD(Optimizer):
    """Plain gradient descent, ``param = param - lr * grad``, as Paddle's kernels round it.

    CPU: a product and a difference, each rounded in the parameter's own dtype, as Paddle's CPU
    kernel (bit-exact to Paddle 3.3.1 for fp32, and for bf16 without master weights, where the rate
    is rounded to bf16 too). CUDA: float32 arithmetic for fp16/bf16 and one fused multiply-add,
    assuming nvcc's default contraction of Paddle's kernel (not compared with Paddle on a GPU).

    With ``multi_precision=True`` the update runs on the fp32 master weight on every device. Paddle's
    CPU kernel ignores the master weight and updates bf16 parameters in bf16 arithmetic, where small
    updates round away; here the master weight is kept, as on GPU.
    """

    def __init__(
        self,
        learning_rate: float | LRScheduler = 0.001,
        parameters: Iterable[Tensor] | Iterable[dict[str, Any]] | None = None,
        weight_decay: float | Any = None,
        grad_clip: Any = None,
        multi_precision: bool = False,
        name: str | None = None,
        *,
        fused: bool = False,
    ) -> None:
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, multi_precision, {}, name, fused)

    def _compiled_row(
        self, item: _Item, group: dict[str, Any], lr: float, batch: _native.Batch, gpu: bool
    ) -> bool | None:
        p, g, _, master = item
        value = master if master is not None else p
        if not kernels_take(value, g, lr, gpu, p):
            return None
        rate = self._row_rate(p, value, group, lr, gpu)[0]
        g, l2, fresh = self._grad_for_kernel(p, g, group)
        batch.add(value, g, p if master is not None else None, lr=rate, l2=l2)
        return not fresh

    def _row_rate(
        self, p: Tensor, value: Tensor, group: dict[str, Any], lr: float, gpu: bool
    ) -> tuple[float, float | None]:
        # on the CPU, the rate as Paddle's kernel casts it to the dtype
        return (lr if gpu or value.dtype == torch.float64 else torch.tensor(lr, dtype=value.dtype).item()), None

    def _compiled_call(self, kern: _native.Kernels, batch: _native.Batch, group: dict[str, Any]) -> None:
        kern.sgd(batch.rows, batch.per)

    def _multi_tensor_call(self, kern: Any, launch: Any, group: dict[str, Any], found_inf: Tensor | None) -> None:
        _multi_tensor.sgd(kern, launch, found_inf)

    def _kernel(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float
    ) -> Tensor:
        if _devices.gpu_kernels(value):
            w = value.to(compute_dtype(value))
            return fma(-lr, grad.to(w.dtype), w)
        rate = torch.tensor(lr, dtype=value.dtype)  # Paddle's CPU kernel casts the rate to the dtype
        g = grad.to(value.dtype)
        if not self._same_layout(value, g):
            return value - g * rate
        # value - grad*rate, two separately rounded operations, in place: same kernels, same bits
        step = torch.mul(g, rate, out=self._buffer(value, value.dtype, "step"))
        return value.sub_(step)
