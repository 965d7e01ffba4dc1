"""The dynamic loss-scale policy: how the scale and its counters move, and nothing else.

``next_state`` is a pure function of the state and one ``found_inf`` flag. It is written once
and evaluated by two backends: ``HOST`` on Python numbers (the scaler's host replica, which
knows the scale without reading the device) and ``DEVICE`` on torch tensors (the sync-free
path, where the flag never leaves the device). Both give the same float32 results.

Paddle's rule (``AmpScaler._update``): an overflow resets ``incr_count`` and bumps
``decr_count``; ``decr_every_n_nan_or_inf`` consecutive overflows multiply the scale by
``decr_ratio``; ``incr_every_n_steps`` consecutive finite steps multiply it by ``incr_ratio``.
Each product is ``round_f32(scale * f32(ratio))``. Differences from Paddle, all to keep a run
alive: growth that would overflow to inf keeps the old scale, decreases stop at the smallest
normal float32 (or ``min_loss_scaling``), growth stops at ``max_loss_scaling``, and a counter
that already exceeds its period (after a setter lowered the period) fires instead of counting
forever.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import torch

from .. import _checks
from .._numerics import round_f32

FLOAT32_TINY = 2.0**-126  # smallest normal float32: the floor under every decrease
FLOAT32_MAX = float(torch.finfo(torch.float32).max)
_INT32_MAX = 2**31 - 1


def check_ratio(name: str, value: Any, low: float, high: float | None) -> float:
    """``value`` as a float strictly inside (low, high); TypeError/ValueError naming ``name``."""
    value = float(_checks.number(name, value))
    bounds = f"> {low:g}" if high is None else f"in ({low:g}, {high:g})"
    if not (math.isfinite(value) and value > low and (high is None or value < high)):
        raise ValueError(f"{name} must be a finite number {bounds}, got {value!r}")
    return value


def check_period(name: str, value: Any) -> int:
    """``value`` as a positive int that fits the int32 counters."""
    value = _checks.integer(name, value)
    if not 1 <= value <= _INT32_MAX:
        raise ValueError(f"{name} must be an integer in [1, {_INT32_MAX}], got {value!r}")
    return value


def check_scale(name: str, value: Any) -> float:
    """A loss scale: a float > 0 that is a finite, normal float32.

    A subnormal scale has an infinite reciprocal: every unscaled gradient would be inf or NaN
    and every step skipped.
    """
    value = check_ratio(name, value, 0.0, None)
    if not FLOAT32_TINY <= round_f32(value) < math.inf:
        raise ValueError(f"{name} must be a finite number > 0 in float32's normal range, got {value!r}")
    return value


def as_number(value: Any) -> Any:
    """A numpy scalar or 1-element tensor (as saved dicts hold them) as a Python number;
    anything else unchanged, for the caller's check to refuse."""
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value
    return value.item() if getattr(value, "size", None) == 1 and hasattr(value, "item") else value


def check_count(name: str, value: Any) -> int:
    """A counter (from a checkpoint or a setter): a non-negative int, also as a 1-element
    tensor or numpy value."""
    value = _checks.integer(name, as_number(value))
    _checks.at_least(name, value, 0)
    return value


@dataclass(frozen=True, kw_only=True)
class LossScalePolicy:
    """Validated hyper-parameters of the dynamic loss scale, given by name (two ratios and two
    periods side by side are easy to swap by position)."""

    incr_ratio: float = 2.0
    decr_ratio: float = 0.5
    incr_every_n_steps: int = 2000
    decr_every_n_nan_or_inf: int = 1
    min_loss_scaling: float | None = None
    max_loss_scaling: float | None = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: validate and normalise in one place
        set_(self, "incr_ratio", check_ratio("incr_ratio", self.incr_ratio, 1.0, None))
        set_(self, "decr_ratio", check_ratio("decr_ratio", self.decr_ratio, 0.0, 1.0))
        # The scale is multiplied by the float32 ratio: one that rounds to 1 (or to inf or 0)
        # would leave the scale stuck, or end the run.
        if not 1.0 < round_f32(self.incr_ratio) < math.inf:
            raise ValueError(f"incr_ratio must stay finite and > 1 in float32, got {self.incr_ratio!r}")
        if not FLOAT32_TINY <= round_f32(self.decr_ratio) < 1.0:
            raise ValueError(f"decr_ratio must stay a normal float32 below 1, got {self.decr_ratio!r}")
        set_(self, "incr_every_n_steps", check_period("incr_every_n_steps", self.incr_every_n_steps))
        set_(self, "decr_every_n_nan_or_inf", check_period("decr_every_n_nan_or_inf", self.decr_every_n_nan_or_inf))
        for name in ("min_loss_scaling", "max_loss_scaling"):
            if getattr(self, name) is not None:
                set_(self, name, check_scale(name, getattr(self, name)))
        if self.min_loss_scaling is not None and self.max_loss_scaling is not None:
            if self.min_loss_scaling > self.max_loss_scaling:
                raise ValueError(
                    f"min_loss_scaling ({self.min_loss_scaling!r}) must not exceed "
                    f"max_loss_scaling ({self.max_loss_scaling!r})"
                )

    @functools.cached_property
    def lowest(self) -> float:
        """The floor, as a float32 value."""
        return round_f32(max(FLOAT32_TINY, self.min_loss_scaling or 0.0))

    @functools.cached_property
    def highest(self) -> float:
        """The ceiling, as a float32 value."""
        return round_f32(self.max_loss_scaling) if self.max_loss_scaling is not None else FLOAT32_MAX


class LossScaleState(NamedTuple):
    """Scale (float32 value) and Paddle's two counters, as numbers or as device tensors."""

    scale: Any
    incr_count: Any
    decr_count: Any


class Backend(Protocol):
    """What ``next_state`` computes with: the same few operations on numbers or on tensors."""

    def where(self, cond: Any, a: Any, b: Any) -> Any:
        """``a`` where ``cond``, else ``b``."""

    def mul_f32(self, scale: Any, ratio: float) -> Any:
        """``scale * f32(ratio)``, rounded to float32."""

    def isfinite(self, x: Any) -> Any:
        """Whether ``x`` is finite."""

    def clamp(self, x: Any, low: float, high: float) -> Any:
        """``x`` within ``[low, high]``."""

    def is_true(self, flag: Any) -> Any:
        """A ``found_inf`` flag as a truth value."""


class _Host:
    """Backend over Python numbers; float32 rounding made explicit."""

    @staticmethod
    def where(cond: Any, a: Any, b: Any) -> Any:
        return a if cond else b

    @staticmethod
    def mul_f32(scale: float, ratio: float) -> float:
        # A float32 x float32 product is exact in float64, so one rounding gives float32's result.
        return round_f32(scale * round_f32(ratio))

    @staticmethod
    def isfinite(x: float) -> bool:
        return math.isfinite(x)

    @staticmethod
    def clamp(x: float, low: float, high: float) -> float:
        return min(max(x, low), high)

    @staticmethod
    def is_true(flag: Any) -> bool:
        return bool(flag)


class _Device:
    """Backend over torch tensors: no branch reads the device, so nothing syncs."""

    isfinite = staticmethod(torch.isfinite)

    @staticmethod
    def where(cond: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.where(cond, a, b)

    @staticmethod
    def mul_f32(scale: torch.Tensor, ratio: float) -> torch.Tensor:
        return scale * round_f32(ratio)  # float32 tensor times a float32-exact scalar

    @staticmethod
    def clamp(x: torch.Tensor, low: float, high: float) -> torch.Tensor:
        return x.clamp(low, high)

    @staticmethod
    def is_true(flag: torch.Tensor) -> torch.Tensor:
        return flag != 0


HOST: Backend = _Host()
DEVICE: Backend = _Device()


def next_state(
    state: LossScaleState, found_inf: Any, policy: LossScalePolicy, xp: Backend = HOST
) -> tuple[LossScaleState, Any]:
    """One update of Paddle's dynamic loss scale. Returns the new state and whether it decreased.

    Args:
        state: the scale and the two counters (Python numbers for ``HOST``, tensors for ``DEVICE``).
        found_inf: this step's flag (a bool, or a float32 tensor that is 0 or 1).
        policy: the hyper-parameters.
        xp: the backend, ``HOST`` or ``DEVICE``.

    Example::

        >>> from paddle_compat.amp.loss_scale import LossScalePolicy, LossScaleState, next_state
        >>> next_state(LossScaleState(1024.0, 5, 0), True, LossScalePolicy())
        (LossScaleState(scale=512.0, incr_count=0, decr_count=0), True)
    """
    bad = xp.is_true(found_inf)
    decr_count = xp.where(bad, state.decr_count + 1, state.decr_count * 0)
    incr_count = xp.where(bad, state.incr_count * 0, state.incr_count + 1)
    # Paddle fires on ``count == period``; ``>=`` only differs once a setter lowered the period
    # below the running count, where Paddle would never fire again.
    decrease = bad & (decr_count >= policy.decr_every_n_nan_or_inf)
    increase = incr_count >= policy.incr_every_n_steps
    decr_count = xp.where(decrease, decr_count * 0, decr_count)
    incr_count = xp.where(increase, incr_count * 0, incr_count)

    grown = xp.mul_f32(state.scale, policy.incr_ratio)
    grown = xp.where(xp.isfinite(grown), grown, state.scale)
    shrunk = xp.mul_f32(state.scale, policy.decr_ratio)
    scale = xp.where(decrease, shrunk, xp.where(increase, grown, state.scale))
    scale = xp.clamp(scale, policy.lowest, policy.highest)
    return LossScaleState(scale, incr_count, decr_count), decrease
