"""Argument checks shared by the whole package, with one wording.

Each raises ``TypeError`` (wrong type) or ``ValueError`` (wrong value) naming the argument, and
returns the value as the caller stores it. Callers check everything before they change anything.
A bool is never taken for a number (``True`` is an ``int`` to Python), nor a number for a bool.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, TypeGuard

__all__ = ["above", "at_least", "flag", "integer", "is_int", "is_real", "number", "real"]


def is_real(value: object) -> TypeGuard[float]:
    """An int or a float (numpy's scalars included), never a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value).__name__ != "bool_"


def number(name: str, value: Any) -> Any:
    """``value``, an int or float, whatever its value (for callers whose own texts say which)."""
    if not is_real(value):
        raise TypeError(f"{name} should be a float or an int, but received {type(value).__name__}")
    return value


def real(name: str, value: Any, *, finite: bool = True) -> Any:
    """``value``, an int or float that is not NaN (nor infinite, when ``finite``)."""
    number(name, value)
    if math.isnan(value):
        raise ValueError(f"{name} should be a {'finite ' if finite else ''}number, but received {value}")
    if finite and math.isinf(value):
        raise ValueError(f"{name} should be a finite number, but received {value}")
    return value


def is_int(value: object) -> TypeGuard[int]:
    """An int (numpy's integers included), never a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and type(value).__name__ != "bool_"


def integer(name: str, value: Any) -> int:
    """``value``, an int (numpy's integers included), never a bool."""
    if not is_int(value):
        raise TypeError(f"{name} should be an int, but received {type(value).__name__}")
    return int(value)


def flag(name: str, value: Any, *, int_ok: bool = False) -> bool:
    """``value`` as a bool: a bool (or a numpy bool; an int too with ``int_ok``, for arguments Paddle
    takes as ints). A string such as ``'no'`` or ``None`` would pass a truth test silently."""
    bool_like = isinstance(value, bool) or type(value).__name__ == "bool_"
    if not (bool_like or (int_ok and isinstance(value, numbers.Integral))):
        raise TypeError(f"{name} should be a bool, but received {type(value).__name__}")
    return bool(value)


def at_least(name: str, value: Any, low: float) -> None:
    """``value >= low`` (NaN is not)."""
    if not value >= low:
        raise ValueError(f"{name} should be >= {low}, but received {value}")


def above(name: str, value: Any, low: float) -> None:
    """``value > low`` (NaN is not)."""
    if not value > low:
        raise ValueError(f"{name} should be > {low}, but received {value}")
