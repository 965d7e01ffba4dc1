"""``paddle.regularizer`` on torch tensors: weight decay added to the gradient before the update.

An optimizer adds ``regularizer(param, grad)`` to each gradient after clipping, as Paddle does with
``add_n([grad, term])``; the term is computed in the gradient's dtype, with the coefficient rounded
to that dtype first (Paddle's ``scale`` kernel casts its factor to the tensor's dtype).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["L1Decay", "L2Decay", "WeightDecayRegularizer"]


class WeightDecayRegularizer:
    """Base of the weight-decay regularizers."""

    def __init__(self, coeff: float = 0.0) -> None:
        if isinstance(coeff, bool) or not isinstance(coeff, (int, float)):
            raise TypeError(f"coeff should be a float, but received {type(coeff).__name__}")
        if not math.isfinite(coeff):  # Paddle takes it, and every decayed parameter becomes NaN
            raise ValueError(f"coeff should be a finite number, but received {coeff}")
        self._coeff = float(coeff)

    @property
    def coeff(self) -> float:
        return self._coeff

    def __call__(self, param: Tensor, grad: Tensor) -> Tensor:
        raise NotImplementedError

    def _coeff_in(self, dtype: torch.dtype) -> float:
        return torch.tensor(self._coeff, dtype=dtype).item()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(coeff={self._coeff})"


class L2Decay(WeightDecayRegularizer):
    """``coeff * param`` (the gradient of ``0.5 * coeff * sum(param**2)``)."""

    def __call__(self, param: Tensor, grad: Tensor) -> Tensor:
        return param.to(grad.dtype) * self._coeff_in(grad.dtype)

    def __str__(self) -> str:
        return f"L2Decay, coeff={self._coeff:f}"


class L1Decay(WeightDecayRegularizer):
    """``coeff * sign(param)`` (the gradient of ``coeff * sum(abs(param))``)."""

    def __call__(self, param: Tensor, grad: Tensor) -> Tensor:
        return torch.sign(param.to(grad.dtype)) * self._coeff_in(grad.dtype)

    def __str__(self) -> str:
        return f"L1Decay, coeff={self._coeff:f}"
