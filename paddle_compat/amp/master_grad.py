"""master_grad: the float32 gradient of a low-precision parameter, kept in ``param.main_grad``.

Paddle casts such a gradient to float32 after backward and steps with it. torch requires
``param.grad`` to have the parameter's dtype, so the float32 gradient lives beside it, in
``param.main_grad``; everything that steps or unscales asks ``grad_of`` for the one to use.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor


def main_grad_of(param: Any) -> Tensor | None:
    """The float32 ``main_grad`` kept beside ``param.grad``, or None.

    Args:
        param: a parameter (any object: one without ``main_grad`` gives None).

    Example::

        >>> import torch
        >>> from paddle_compat.amp.master_grad import main_grad_of
        >>> main_grad_of(torch.nn.Parameter(torch.ones(2))) is None
        True
    """
    return getattr(param, "main_grad", None)


def set_main_grad(param: Tensor, value: Tensor | None) -> None:
    """Set (or, with None, clear) ``param.main_grad``.

    Args:
        param: a parameter.
        value: its float32 gradient, or None.

    Example::

        >>> import torch
        >>> from paddle_compat.amp.master_grad import main_grad_of, set_main_grad
        >>> p = torch.nn.Parameter(torch.ones(2, dtype=torch.bfloat16))
        >>> set_main_grad(p, torch.zeros(2))
        >>> main_grad_of(p).dtype
        torch.float32
    """
    # An attribute of our own on torch's Tensor, which its type does not declare.
    setattr(param, "main_grad", value)


def grad_of(param: Tensor) -> Tensor | None:
    """The gradient a step uses: the float32 ``main_grad`` when there is one, else ``.grad``.

    Args:
        param: a parameter.

    Example::

        >>> import torch
        >>> from paddle_compat.amp.master_grad import grad_of
        >>> p = torch.nn.Parameter(torch.ones(2, dtype=torch.float16))
        >>> p.main_grad = torch.ones(2)
        >>> grad_of(p).dtype
        torch.float32
    """
    main = main_grad_of(param)
    return main if main is not None else param.grad


def accumulate_into_main_grad(param: Tensor) -> None:
    """A post-accumulate-grad hook: move the low-precision grad into the float32 ``main_grad``
    (added to it when there is one), leaving ``param.grad`` None.

    Args:
        param: the parameter whose gradient was just accumulated.

    Example::

        >>> import torch
        >>> from paddle_compat.amp.master_grad import accumulate_into_main_grad
        >>> p = torch.nn.Parameter(torch.ones(2, dtype=torch.float16))
        >>> _ = p.register_post_accumulate_grad_hook(accumulate_into_main_grad)
        >>> (p * 3).sum().backward()
        >>> p.grad is None, p.main_grad.dtype
        (True, torch.float32)
    """
    if param.grad is None:  # another hook took it already
        return
    grad = param.grad.float()
    main = main_grad_of(param)
    set_main_grad(param, grad if main is None else main.add_(grad))
    param.grad = None


def clear_grads(param: Tensor, set_to_none: bool) -> None:
    """Clear ``param.grad`` and ``param.main_grad`` the same way: drop them, or detach them
    from any graph and zero them in place (torch.optim's ``zero_grad(set_to_none=False)``).

    Args:
        param: a parameter.
        set_to_none: drop the gradients instead of zeroing them.

    Example::

        >>> import torch
        >>> from paddle_compat.amp.master_grad import clear_grads
        >>> p = torch.nn.Parameter(torch.ones(2, dtype=torch.float16))
        >>> p.grad, p.main_grad = torch.ones(2, dtype=torch.float16), torch.ones(2)
        >>> clear_grads(p, set_to_none=False)
        >>> p.grad.tolist(), p.main_grad.tolist()
        ([0.0, 0.0], [0.0, 0.0])
    """
    grad = param.grad
    if grad is not None:
        if set_to_none:
            param.grad = None
        else:
            if grad.grad_fn is not None:
                grad.detach_()
            else:
                grad.requires_grad_(False)
            grad.zero_()
    main = main_grad_of(param)
    if main is not None:
        if set_to_none:
            set_main_grad(param, None)
        else:
            main.zero_()
