"""torch.distributed.checkpoint's calls into an optimizer, told apart from a user's by their caller.

``get_state_dict``/``set_state_dict`` create a fresh optimizer's state with a step at rate 0 on
zero gradients (``_init_optim_state``), and load a state dict that keeps only ``"state"`` and
``"param_groups"`` (``_load_optim_state_dict``). Our optimizers treat those two calls apart: the
step only creates the state (a scheduler would put its own rate back), and the load does without
Paddle's ``"LR_Scheduler"`` entry (the scheduler is checkpointed beside it). They are recognised
by the function on the call stack, not by the values, which a user's own step can also have (a
warmup from rate 0 on zero gradients is a real step in Paddle: Adam's beta powers advance).
"""

from __future__ import annotations

import inspect
import sys
from types import FrameType

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
    function = getattr(sys.modules.get(_MODULE), name, None)
    if function is None:
        return False
    code = inspect.unwrap(function).__code__  # past a decorator such as torch.no_grad()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False
