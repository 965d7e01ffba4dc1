"""Argument checks the optimizers share: each raises before anything changes, naming the argument."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["check_float", "check_set"]


def check_set(name: str, value: Any, message: str | None = None) -> None:
    """``None`` is refused with Paddle's message (``"<name> is not set"``; Paddle asserts in some
    optimizers, a ``ValueError`` here)."""
    if value is None:
        raise ValueError(message or f"{name} is not set")


def check_float(name: str, value: Any) -> None:
    """A finite int or float (Paddle takes NaN and infinities, and the parameters become NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} should be a float, but received {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{name} should be a finite number, but received {value}")
