"""Argument checks shared by the whole package, with one wording.

Each raises ``TypeError`` (wrong type) or ``ValueError`` (wrong value) naming the argument, and
returns the value as the caller stores it. Callers check everything before they change anything.
A bool is never taken for a number (``True`` is an ``int`` to Python), nor a number for a bool.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeGuard, TypeVar

__all__ = [
    "above", "at_least", "flag", "integer", "is_int", "is_real", "keyword_hints", "number", "real", "required",
    "unexpected_keyword",
]

P = ParamSpec("P")
R = TypeVar("R")


def required(name: str, value: Any, message: str | None = None) -> Any:
    """``value``, not ``None`` (``ValueError``: ``message``, Paddle's wording where it has one,
    else ``"<name> is not set"``)."""
    if value is None:
        raise ValueError(message or f"{name} is not set")
    return value


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


def unexpected_keyword(call: str, key: str, hint: str | None = None) -> TypeError:
    """Python's error for a keyword argument ``call`` does not take, with what to write instead:
    ``"GradScaler() got an unexpected keyword argument 'init_scale_loss'; Paddle's name is
    'init_loss_scaling'"`` (the optimizers' constructors word theirs the same way, optimizer.py)."""
    message = f"{call}() got an unexpected keyword argument {key!r}"
    return TypeError(f"{message}; {hint}" if hint else message)


def keyword_hints(hints: Mapping[str, str]) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a function so that a keyword it does not take that is in ``hints`` (torch's name,
    or a common slip, for one of Paddle's arguments) raises ``unexpected_keyword`` with the hint;
    other keywords are left to Python."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        own = set(inspect.signature(fn).parameters)

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            for key in kwargs:
                if key in hints and key not in own:
                    raise unexpected_keyword(fn.__name__, key, hints[key])
            return fn(*args, **kwargs)

        return wrapper

    return decorate
