"""What stands in for ``optimizer.step`` while apex's contract says the next step must not run.

apex's ``scale_loss`` lets the user call ``optimizer.step()`` themselves, so skipping a step on
overflow means intercepting that call. Two reasons to intercept it, possibly both at once:

* ``skip``: a ``scale_loss`` found inf/NaN in the grads; the next ``step()`` does nothing and
  puts the original ``step`` back (apex's one-shot patch);
* ``scaled``: the grads are still multiplied by the loss scale (``delay_unscale=True``); a
  ``step()`` now would apply them scaled, so it raises until a ``scale_loss`` with
  ``delay_unscale=False`` unscales them.

The guard is an instance attribute shadowing the class's ``step``. It remembers what the
instance held before (nothing, or a wrapper such as the one torch's LR schedulers install) and
restores exactly that. If someone wrapped ``step`` again on top of the guard, the guard cannot be
removed without dropping their wrapper, so it stays and passes every call through.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

__all__ = ["StepGuard", "guard_of", "reset", "scaled_by", "unscaled"]

logger = logging.getLogger("paddle_compat.apex")

_ABSENT = object()


class StepGuard:
    """Stands in for one optimizer's ``step``; see the module doc.

    Attributes:
        skip_message: set when the next ``step()`` must be skipped: the line logged then.
        scaled_by: the ``loss_id`` whose scale the grads still carry, or ``None``.
    """

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self._optimizer = optimizer
        self._previous = optimizer.__dict__.get("step", _ABSENT)
        self.skip_message: str | None = None
        self.scaled_by: int | None = None
        optimizer.step = self  # type: ignore[method-assign]  # an instance attribute shadowing the method

    @property
    def idle(self) -> bool:
        """Whether the guard has nothing left to do (it can be removed)."""
        return self.skip_message is None and self.scaled_by is None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.scaled_by is not None:
            raise RuntimeError(
                "optimizer.step() was called while the gradients are still multiplied by the loss scale: "
                f"the last amp.scale_loss(..., loss_id={self.scaled_by}) for this optimizer used "
                "delay_unscale=True. Run the last backward pass before the step under "
                "amp.scale_loss(..., delay_unscale=False)."
            )
        if self.skip_message is not None:
            if kwargs.get("closure") is not None or (args and args[0] is not None):
                raise RuntimeError("amp.scale_loss does not support optimizer.step(closure).")
            logger.info(self.skip_message)
            self.skip_message = None
            self._remove()
            return None
        return self._original()(*args, **kwargs)

    def _original(self) -> Any:
        if self._previous is not _ABSENT:
            return self._previous
        return type(self._optimizer).step.__get__(self._optimizer)

    def _remove(self) -> bool:
        """Put back what ``step`` was; ``False`` if another wrapper now sits on top of the guard."""
        opt = self._optimizer.__dict__
        if opt.get("step") is not self:
            return False
        if self._previous is _ABSENT:
            del opt["step"]
        else:
            opt["step"] = self._previous
        return True


def guard_of(optimizer: torch.optim.Optimizer) -> StepGuard:
    """The optimizer's guard, installed now if it has none."""
    existing = _find(optimizer)
    return existing if existing is not None else StepGuard(optimizer)


def scaled_by(optimizer: torch.optim.Optimizer) -> int | None:
    """The ``loss_id`` whose scale the optimizer's grads still carry, or ``None``."""
    guard = _find(optimizer)
    return None if guard is None else guard.scaled_by


def unscaled(optimizer: torch.optim.Optimizer) -> None:
    """The grads are unscaled and finite: ``step`` may run (a skip already pending stays)."""
    guard = _find(optimizer)
    if guard is not None:
        guard.scaled_by = None
        if guard.idle:
            guard._remove()


def reset(optimizer: torch.optim.Optimizer) -> None:
    """Forget any pending skip or scaled state and restore ``step`` (re-initialization)."""
    guard = _find(optimizer)
    if guard is not None:
        guard.skip_message = guard.scaled_by = None
        guard._remove()


def _find(optimizer: torch.optim.Optimizer) -> StepGuard | None:
    """The guard on the optimizer, also one that a later wrapper has covered."""
    step = optimizer.__dict__.get("step")
    while step is not None:
        if isinstance(step, StepGuard):
            return step if step._optimizer is optimizer else None
        # Wrappers that keep the function they wrap (functools.wraps) are followed.
        step = getattr(step, "__wrapped__", None)
    return None
