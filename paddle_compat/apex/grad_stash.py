"""Gradients set aside while a backward pass runs under a loss scale.

Several backward passes may add into the same ``.grad`` before one ``optimizer.step()``: two
losses with their own scales, or micro-batches. Only the part a pass adds carries that pass's
scale, so (as apex does) the grads already there are taken out before the pass, the new ones are
unscaled alone, and the two are added afterwards. The sum is written into the tensor that was
set aside, so a ``.grad`` tensor keeps its identity across passes.

``main_grad`` (the float32 grad ``paddle_compat.amp.decorate(..., master_grad=True)`` keeps) is
set aside the same way.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ..amp.master_grad import main_grad_of, set_main_grad

__all__ = ["Held", "put_back", "take"]


class Held(NamedTuple):
    """A parameter and the grads taken out of it."""

    param: Tensor
    grad: Tensor | None
    main_grad: Tensor | None


def take(optimizer: torch.optim.Optimizer) -> list[Held]:
    """Take the optimizer's current grads out of its parameters (they become ``None``)."""
    held = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            grad, main = p.grad, main_grad_of(p)
            if grad is None and main is None:
                continue  # also a parameter listed twice: its grads are already held
            held.append(Held(p, grad, main))
            p.grad = None
            if main is not None:
                set_main_grad(p, None)
    return held


def put_back(held: list[Held], keep_new: bool = True) -> None:
    """Give the held grads back, plus what the parameters gained meanwhile (``keep_new``) or
    instead of it (after a failed backward pass)."""
    for p, grad, main in held:
        p.grad = _sum(grad, p.grad) if keep_new else grad
        new_main = main_grad_of(p)
        if main is not None or new_main is not None:
            set_main_grad(p, _sum(main, new_main) if keep_new else main)


def _sum(old: Tensor | None, new: Tensor | None) -> Tensor | None:
    if old is None or new is None:
        return new if old is None else old
    return old.add_(new)
