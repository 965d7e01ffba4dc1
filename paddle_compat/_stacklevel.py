"""Where a warning raised inside the package should point: the user's line."""

from __future__ import annotations

import os
import sys
from types import FrameType

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_TORCH_WRAPPERS = frozenset({"torch._compile", "torch.utils._contextlib"})  # decorators' wrapper frames
# Frameworks whose wrappers call the scaler for the user's line: Accelerate's AcceleratedOptimizer
# calls ``scaler.step`` from ``optimizer.step()``, its Accelerator ``scale`` from ``backward``.
_FRAMEWORKS = ("accelerate.",)


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning raised by the caller of this function point at
    the user's line: the first frame outside the paddle_compat package and outside torch's
    wrappers around our entry points (``torch.compiler.disable``'s, which ``compile_boundary``
    puts around the scaler's methods; ``torch.optim``'s around an optimizer's ``step``, and
    ``torch.no_grad()``'s), and outside Accelerate, whose wrappers make those calls for the user's
    ``optimizer.step()`` and ``accelerator.backward(loss)``."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and _passed_over(frame):
        frame, level = frame.f_back, level + 1
    return level


def _passed_over(frame: FrameType) -> bool:
    if os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        return True
    module = frame.f_globals.get("__name__", "")
    return module in _TORCH_WRAPPERS or module.startswith(("torch._dynamo.", "torch.optim.", *_FRAMEWORKS))
