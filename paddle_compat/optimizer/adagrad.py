"""``paddle.optimizer.Adagrad``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _checks, _native
from .._numerics import round_f32
from ..regularizer import WeightDecayRegularizer
from . import _multi_tensor
from ._eigen import float_attrs, sqrt_like_eigen
from ._engine import cpu_row, gpu_row
from .lr import LRScheduler
from .optimizer import Optimizer, _Item, check_range, compute_dtype, paddle_option

__all__ = ["Adagrad"]



class Adagrad(Optimizer):
    """Adagrad: ``moment += grad*grad``; ``param -= lr*grad / (sqrt(moment) + epsilon)``.

    Paddle's CPU kernel (Eigen), every operation rounded in the parameter's dtype: bit-exact to
    Paddle 3.3.1 for float64, and for float32 with the CPU's rsqrt (``_eigen.sqrt_like_eigen``).
    ``moment`` starts at ``initial_accumulator_value`` (a group may set its own). The same formulas
    run on CUDA (Paddle's CUDA kernel may contract them into fused multiply-adds: not verified on a
    GPU). Paddle has no CPU kernel for fp16/bf16: here they compute in float32 (with master weights
    under ``multi_precision``, which ``decorate`` switches on).

    Differences from Paddle: ``None`` for ``learning_rate`` or ``epsilon`` is a ``ValueError``
    (Paddle asserts); a non-finite ``epsilon`` is refused.
    """

    # Paddle's private attributes of the options (PaddleSpeech reads them)
    _epsilon = paddle_option("epsilon")
    initial_accumulator_value = paddle_option("initial_accumulator_value")

    def __init__(
        self,
        learning_rate: float | LRScheduler,
        epsilon: float = 1.0e-6,
        parameters: Iterable[Tensor] | Iterable[dict[str, Any]] | None = None,
        weight_decay: float | WeightDecayRegularizer | None = None,
        grad_clip: Any = None,
        name: str | None = None,
        initial_accumulator_value: float = 0.0,
        *,
        fused: bool = False,
    ) -> None:
        defaults = {"epsilon": epsilon, "initial_accumulator_value": initial_accumulator_value}
        self._check_group(defaults)
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, False, defaults, name, fused)

    def _check_group(self, group: dict[str, Any]) -> None:
        for key in ("epsilon", "initial_accumulator_value"):
            if key in group:
                _checks.required(key, group[key])
                _checks.real(key, group[key])
            # a negative accumulator (or epsilon) makes the root of the first step NaN
            check_range(group, key)

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        dtype = torch.float32 if self._uses_master(p) else p.dtype
        state["moment"] = torch.full_like(
            p, group["initial_accumulator_value"], dtype=dtype, memory_format=torch.preserve_format
        )

    def _compiled_row(
        self, item: _Item, group: dict[str, Any], lr: float, batch: _native.Batch, gpu: bool
    ) -> bool | None:
        return (gpu_row if gpu else cpu_row)(self, item, group, lr, batch, (item[2]["moment"],))

    def _compiled_call(self, kern: _native.Kernels, batch: _native.Batch, group: dict[str, Any]) -> None:
        kern.adagrad(batch, round_f32(group["epsilon"]))

    def _multi_tensor_call(self, kern: Any, launch: Any, group: dict[str, Any], found_inf: Tensor | None) -> None:
        _multi_tensor.adagrad(kern, launch, found_inf, round_f32(group["epsilon"]))

    def _kernel(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float
    ) -> Tensor:
        mt = compute_dtype(value)
        (eps,) = float_attrs(group, mt, "epsilon")
        w, g = value.to(mt), grad.to(mt)
        moment = state["moment"].to(mt)
        tmp, den = self._buffer(w, mt, "tmp"), self._buffer(w, mt, "den")
        moment.add_(torch.mul(g, g, out=tmp))  # moment + g*g
        sqrt_like_eigen(moment, out=den).add_(eps)
        w = w.sub_(torch.mul(g, lr, out=tmp).div_(den))  # param - lr*g / (sqrt(moment) + eps)
        state["moment"].copy_(moment)
        return w
