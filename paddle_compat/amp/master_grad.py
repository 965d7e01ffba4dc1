"""master_grad: the float32 gradient of a low-precision parameter, kept in ``param.main_grad``.

Paddle casts such a gradient to float32 after backward and steps with it. torch requires
``param.grad`` to have the parameter's dtype, so the float32 gradient lives beside it, in
``param.main_grad``; everything that steps or unscales asks ``grad_of`` for the one to use.
"""

from __future__ import annotations

from torch import Tensor


def grad_of(param: Tensor) -> Tensor | None:
    """The gradient a step uses: the float32 ``main_grad`` when there is one, else ``.grad``."""
    main = getattr(param, "main_grad", None)
    return main if main is not None else param.grad


def accumulate_into_main_grad(param: Tensor) -> None:
    """A post-accumulate-grad hook: move the low-precision grad into the float32 ``main_grad``."""
    grad = param.grad.float()
    main = getattr(param, "main_grad", None)
    param.main_grad = grad if main is None else main.add_(grad)
    param.grad = None
