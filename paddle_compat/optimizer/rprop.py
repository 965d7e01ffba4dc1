"""``paddle.optimizer.Rprop``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _checks, _native
from .._numerics import round_f32
from ..regularizer import L2Decay, WeightDecayRegularizer
from . import _multi_tensor
from ._engine import cpu_row, gpu_row
from .lr import LRScheduler
from .optimizer import Optimizer, _Item

__all__ = ["Rprop"]

_NO_DECAY = L2Decay(0.0)


class Rprop(Optimizer):
    """Resilient propagation: each element has its own step size.

    Per element, with ``s = grad * prev``: ``s > 0`` multiplies the step size by ``etas[1]``,
    ``s < 0`` by ``etas[0]`` (and the gradient counts as 0 from then on), ``s == 0`` keeps it; the
    step size is clipped to ``learning_rate_range``; ``param -= sign(grad) * step_size``; ``prev =
    grad``. The accumulators keep Paddle's names: ``prevs`` and ``learning_rates`` (which start at
    ``learning_rate``).

    As in Paddle, ``learning_rate`` is only the initial step size: an LR scheduler, ``set_lr``, a
    group's ``learning_rate`` ratio and ``optimize_attr`` have no effect on the updates; the range
    and etas are rounded to the first parameter's dtype once. Paddle's regularization with
    ``weight_decay=0.0`` (``L2Decay(0.0)``) is kept: it turns ``-0.0`` gradients into ``+0.0``.

    Paddle's CPU kernel, every operation rounded in the parameter's dtype: bit-exact to Paddle 3.3.1
    for float32, float64 and bfloat16 (without master weights: bfloat16 arithmetic, as Paddle's
    CPU kernel). With ``multi_precision`` the update runs on the float32 master weight (Paddle's CPU
    kernel ignores the master weight and updates bfloat16 parameters in bfloat16). Differences from
    Paddle: ``learning_rate`` must be a float (Paddle fails comparing a scheduler with the range).
    """

    def __init__(
        self,
        learning_rate: float | LRScheduler = 0.001,
        learning_rate_range: tuple[float, float] = (1e-5, 50),
        parameters: Iterable[Tensor] | Iterable[dict[str, Any]] | None = None,
        etas: tuple[float, float] = (0.5, 1.2),
        grad_clip: Any = None,
        multi_precision: bool = False,
        name: str | None = None,
        *,
        fused: bool = False,
    ) -> None:
        _checks.required("learning_rate", learning_rate)
        _checks.real("learning_rate", learning_rate)
        for arg, value in (("learning_rate_range", learning_rate_range), ("etas", etas)):
            if not isinstance(value, (tuple, list)) or len(value) != 2:
                raise TypeError(f"{arg} should be a pair of floats, but received {value!r}")
            for v in value:
                _checks.real(arg, v)
        if not 0.0 < learning_rate_range[0] <= learning_rate <= learning_rate_range[1]:
            raise ValueError(
                "'0.0 < learning_rate_range[0] <= learning_rate <= learning_rate_range[1]' must be true"
            )
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError("'0.0 < etas[0] < 1.0 < etas[1]' must be true")
        self._initial_learning_rate = float(learning_rate)
        self._learning_rate_range = tuple(float(v) for v in learning_rate_range)
        self._etas = tuple(float(v) for v in etas)
        super().__init__(learning_rate, parameters, None, grad_clip, multi_precision, {}, name, fused)
        # Paddle rounds the range and etas to the dtype of the first parameter it updates, once:
        # that dtype is noted at the first step, the values rounded at their first use.
        self._compat_bounds: tuple[float, ...] | None = None
        self._compat_bounds_dtype: torch.dtype | None = None

    def _regularizer(self, group: dict[str, Any]) -> WeightDecayRegularizer:
        # Paddle's Rprop gives its base weight_decay=0.0: an L2Decay(0.0), unless a group sets its own
        reg = group["weight_decay"]
        return reg if reg is not None else _NO_DECAY

    def _check_param_rates(self) -> None:
        """Nothing to check: Rprop reads no ``optimize_attr`` (its rate is only the initial step size)."""

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        state["prevs"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["learning_rates"] = torch.full_like(
            p, self._initial_learning_rate, memory_format=torch.preserve_format
        )

    def _compiled_row(
        self, item: _Item, group: dict[str, Any], lr: float, batch: _native.Batch, gpu: bool
    ) -> bool | None:
        p, _, state, master = item
        self._note_bounds_dtype(p)
        states = (state["prevs"], state["learning_rates"])
        # float32/float64 accumulators (bfloat16/float16 ones compute in their own dtype: torch form)
        value = master if master is not None else p
        if not states[0].dtype == value.dtype in (torch.float32, torch.float64):
            return None
        return (gpu_row if gpu else cpu_row)(self, item, group, lr, batch, states)

    def _compiled_call(self, kern: _native.Kernels, batch: _native.Batch, group: dict[str, Any]) -> None:
        kern.rprop(batch, *self._bounds())

    def _multi_tensor_call(self, kern: Any, launch: Any, group: dict[str, Any], found_inf: Tensor | None) -> None:
        # as the torch form rounds them to its float32 accumulators
        _multi_tensor.rprop(kern, launch, found_inf, tuple(round_f32(v) for v in self._bounds()))

    def _note_bounds_dtype(self, param: Tensor) -> None:
        """Note the dtype of the first parameter updated (its dtype only: no tensor is read here,
        so that a FakeTensor parameter reaches the kernels' check and the per-tensor form, which
        names it, rather than failing on a value it cannot give)."""
        if self._compat_bounds_dtype is None:
            self._compat_bounds_dtype = param.dtype

    def _bounds(self) -> tuple[float, ...]:
        """Paddle's range and etas, rounded to the dtype noted by ``_note_bounds_dtype`` (once)."""
        if self._compat_bounds is None:
            values = torch.tensor(self._learning_rate_range + self._etas, dtype=self._compat_bounds_dtype)
            self._compat_bounds = tuple(values.tolist())
        return self._compat_bounds

    def _kernel(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float
    ) -> Tensor:
        self._note_bounds_dtype(param)
        bounds = self._bounds()
        # The kernel's dtype is the accumulators' (the parameter's, also with master weights).
        dtype = state["learning_rates"].dtype
        # each exactly representable in the dtype (a bfloat16 eta is bfloat16's)
        lo, hi, eta_minus, eta_plus = (torch.tensor(v, dtype=dtype).item() for v in bounds)
        g = grad.to(dtype)
        prevs, rates = state["prevs"], state["learning_rates"]
        product = torch.mul(g, prevs, out=self._buffer(g, dtype, "tmp"))
        rising, falling = self._buffer(g, torch.bool, "rising"), self._buffer(g, torch.bool, "falling")
        torch.gt(product, 0, out=rising)
        torch.lt(product, 0, out=falling)
        eta = product.fill_(1).masked_fill_(rising, eta_plus).masked_fill_(falling, eta_minus)
        prevs.copy_(g).masked_fill_(falling, 0)  # a sign change: the gradient counts as 0
        rates.mul_(eta).clamp_(lo, hi)
        step = torch.sign(prevs, out=eta).mul_(rates)  # sign(g)*rate: exact
        return value.sub_(step.to(value.dtype))  # param - sign(g)*rate
