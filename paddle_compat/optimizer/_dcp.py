"""torch.distributed.checkpoint's calls into an optimizer, told apart from a user's by their caller.

``get_state_dict``/``set_state_dict`` create a fresh optimizer's state with a step at rate 0 on
zero gradients (``_init_optim_state``), and load a state dict that keeps only ``"state"`` and
``"param_groups"`` (``_load_optim_state_dict``). Our optimizers treat those two calls apart: the
step only creates the state (a scheduler would put its own rate back), and the load does without
Paddle's ``"LR_Scheduler"`` entry (the scheduler is checkpointed beside it). They are recognised
by the function on the call stack, not by the values, which a user's own step can also have (a
warmup from rate 0 on zero gradients is a real step in Paddle: Adam's beta powers advance).
Those functions are private to torch: a release that renames one is met with a warning (once),
not a silent change of behaviour, and the suite's checkpoint tests fail on it.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from types import FrameType

import torch

from .._stacklevel import user_stacklevel

__all__ = ["creating_state", "loading_state"]

_MODULE = "torch.distributed.checkpoint.state_dict"


def creating_state() -> bool:
    """Whether the running step is torch.distributed.checkpoint's state creation."""
    return _called_from("_init_optim_state")


def loading_state() -> bool:
    """Whether the running ``load_state_dict`` is torch.distributed.checkpoint's."""
    return _called_from("_load_optim_state_dict")


def _called_from(name: str) -> bool:
    """Whether the function ``name`` of torch.distributed.checkpoint is on the call stack (never
    while that module is not imported: then nothing of it runs)."""
    module = sys.modules.get(_MODULE)
    if module is None:
        return False
    function = getattr(module, name, None)
    if function is None:
        _warn_missing(name)
        return False
    code = inspect.unwrap(function).__code__  # past a decorator such as torch.no_grad()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


_warned: set[str] = set()

# what each call does when it is not recognised
_CONSEQUENCE = {
    "_init_optim_state": "its state creation (a step at rate 0 on zero gradients) is taken for a "
    "real step: Adam's beta powers advance and a scheduler's rate is not restored",
    "_load_optim_state_dict": "its load is taken for a user's, which needs Paddle's 'LR_Scheduler' entry",
}


def _warn_missing(name: str) -> None:
    if name in _warned:
        return
    _warned.add(name)
    warnings.warn(
        f"paddle_compat: torch {torch.__version__}'s {_MODULE} has no {name}, the call paddle_compat "
        f"recognises torch.distributed.checkpoint by: {_CONSEQUENCE[name]}. Please report it with "
        "your torch version.",
        RuntimeWarning,
        stacklevel=user_stacklevel(),
    )
