"""``paddle.regularizer`` on torch tensors: weight decay added to the gradient before the update.

An optimizer adds ``regularizer(param, grad)`` to each gradient after clipping, as Paddle does with
``add_n([grad, term])``; the term is computed in the gradient's dtype, with the coefficient rounded
to that dtype first (Paddle's ``scale`` kernel casts its factor to the tensor's dtype).
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import _checks

__all__ = ["L1Decay", "L2Decay", "WeightDecayRegularizer"]


class WeightDecayRegularizer:
    """Base of the weight-decay regularizers: ``regularizer(param, grad)`` is the term added to
    ``grad``.

    Args:
        coeff: the decay coefficient, a finite float (Paddle takes an infinite or NaN one and
            turns every decayed parameter into NaN; here it is a ``ValueError``).

    Example::

        class NoDecay(WeightDecayRegularizer):
            def __call__(self, param, grad):
                return torch.zeros_like(grad)
    """

    def __init__(self, coeff: float = 0.0) -> None:
        # Paddle takes NaN and inf, and every decayed parameter becomes NaN
        self._coeff = float(_checks.real("coeff", coeff))

    @property
    def coeff(self) -> float:
        """The decay coefficient, as a float."""
        return self._coeff

    def __call__(self, param: Tensor, grad: Tensor) -> Tensor:
        raise NotImplementedError

    def _coeff_in(self, dtype: torch.dtype) -> float:
        return torch.tensor(self._coeff, dtype=dtype).item()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(coeff={self._coeff})"


class L2Decay(WeightDecayRegularizer):
    """``coeff * param`` (the gradient of ``0.5 * coeff * sum(param**2)``).

    Args:
        coeff: the decay coefficient (default 0.0).

    Example::

        >>> import torch
        >>> from paddle_compat.regularizer import L2Decay
        >>> L2Decay(0.1)(torch.tensor([1.0, -2.0]), torch.zeros(2))
        tensor([ 0.1000, -0.2000])
    """

    def __call__(self, param: Tensor, grad: Tensor) -> Tensor:
        return param.to(grad.dtype) * self._coeff_in(grad.dtype)

    def __str__(self) -> str:
        return f"L2Decay, coeff={self._coeff:f}"


class L1Decay(WeightDecayRegularizer):
    """``coeff * sign(param)`` (the gradient of ``coeff * sum(abs(param))``).

    Args:
        coeff: the decay coefficient (default 0.0).

    Example::

        >>> import torch
        >>> from paddle_compat.regularizer import L1Decay
        >>> L1Decay(0.1)(torch.tensor([1.0, -2.0]), torch.zeros(2))
        tensor([ 0.1000, -0.1000])
    """

    def __call__(self, param: Tensor, grad: Tensor) -> Tensor:
        return torch.sign(param.to(grad.dtype)) * self._coeff_in(grad.dtype)

    def __str__(self) -> str:
        return f"L1Decay, coeff={self._coeff:f}"
