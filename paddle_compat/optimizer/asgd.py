"""``paddle.optimizer.ASGD``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _checks, _native
from .._dtensor import is_dtensor
from .._numerics import round_to
from ..regularizer import WeightDecayRegularizer
from . import _multi_tensor
from ._engine import cpu_row, gpu_row
from .lr import LRScheduler
from .optimizer import Optimizer, _Item, compute_dtype

__all__ = ["ASGD"]


class ASGD(Optimizer):
    """Paddle's ASGD (stochastic average gradient over the last ``batch_num`` gradients), not
    torch's ``ASGD`` (averaged SGD).

    Per parameter: ``y`` keeps the last ``batch_num`` gradients (shape ``[batch_num, *shape]``),
    ``d`` their sum, ``m`` the update count (int64 ``[1]``). An update replaces the oldest gradient
    (``i = m % batch_num``): ``d = d - y[i] + grad``, ``y[i] = grad``, then ``param -= lr /
    min(m + 1, batch_num) * d``.

    Paddle's CPU kernel (Eigen), every operation rounded in the parameter's dtype: bit-exact to
    Paddle 3.3.1 for float32 and float64. ``d`` and ``y`` keep the parameter's dtype, also with
    master weights, as Paddle's. The same formulas run on CUDA (not compared with Paddle on a GPU); fp16/bf16
    compute in float32. Differences from Paddle: ``batch_num`` must be an int.
    """

    _host_state = ("m",)

    def __init__(
        self,
        learning_rate: float | LRScheduler = 0.001,
        batch_num: int = 1,
        parameters: Iterable[Tensor] | Iterable[dict[str, Any]] | None = None,
        weight_decay: float | WeightDecayRegularizer | None = None,
        grad_clip: Any = None,
        multi_precision: bool = False,
        name: str | None = None,
        *,
        fused: bool = False,
    ) -> None:
        _checks.required("learning_rate", learning_rate, "learning_rate should not be none")
        _checks.required("batch_num", batch_num, "batch_num should not be none")
        batch_num = _checks.integer("batch_num", batch_num)
        if not 0 < batch_num:
            raise ValueError("batch_num should be greater than 0")
        self._n = batch_num
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, multi_precision, {}, name, fused)

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        if is_dtensor(p):  # before any update: its history of gradients is not laid out as shards
            raise TypeError("ASGD cannot update sharded parameters (DTensor: FSDP2, tensor parallel)")
        state["d"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["y"] = torch.zeros((self._n, *p.shape), dtype=p.dtype, device=p.device)
        state["m"] = torch.zeros([1], dtype=torch.int64)

    def _check_state_tensor(self, where: str, index: Any, key: str, value: Tensor, p: Tensor) -> None:
        if key == "m":
            if value.dtype != torch.int64 or value.shape != (1,):
                raise TypeError(
                    f"{where} should be an int64 tensor of shape [1], got {value.dtype} {list(value.shape)}"
                )
            return
        if key == "y":
            if value.shape != (self._n, *p.shape):
                raise ValueError(
                    f"{where} has shape {list(value.shape)}, but it should have shape {[self._n, *p.shape]}"
                )
            value = value[0]
        super()._check_state_tensor(where, index, key, value, p)

    def _compiled_row(
        self, item: _Item, group: dict[str, Any], lr: float, batch: _native.Batch, gpu: bool
    ) -> bool | None:
        d, y, count = item[2]["d"], item[2]["y"], item[2]["m"]
        if gpu:  # the count moves to the device: the kernel reads it, the launch advances it there
            if not y.is_contiguous():
                return None
            return gpu_row(self, item, group, lr, batch, (d, y), ("m",), checked=(d, y[0]), power_dtype=torch.int64)
        if not (y.is_contiguous() and count.dtype == torch.int64 and count.numel() == 1 and count.is_cpu):
            return None
        # the kernel finds the slot of y[m % batch_num] itself, from the update count
        return cpu_row(self, item, group, lr, batch, (d, y), (count,), checked=(d, y[0]))

    def _compiled_call(self, kern: _native.Kernels, batch: _native.Batch, group: dict[str, Any]) -> None:
        kern.asgd(batch, self._n)

    def _multi_tensor_call(self, kern: Any, launch: Any, group: dict[str, Any], found_inf: Tensor | None) -> None:
        _multi_tensor.asgd(kern, launch, found_inf, self._n)

    def _kernel(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float
    ) -> Tensor:
        mt = compute_dtype(value)
        rnd = round_to(mt)
        count = state["m"]
        i = int(count.item()) % self._n
        count.add_(1)
        n = min(int(count.item()), self._n)
        w, g = value.to(mt), grad.to(mt)
        d, y = state["d"].to(mt), state["y"][i]
        d.sub_(y.to(mt)).add_(g)  # d - y + g
        y.copy_(g)
        w = w.sub_(torch.mul(d, rnd(lr / rnd(n)), out=self._buffer(w, mt, "tmp")))  # param - (lr/n)*d
        state["d"].copy_(d)
        return w
