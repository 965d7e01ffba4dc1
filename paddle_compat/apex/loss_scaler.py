"""apex's per-loss ``LossScaler`` on top of ``paddle_compat.amp.GradScaler``.

apex's dynamic policy (``apex/amp/scaler.py``): start at ``min(2**16, max_loss_scale)``; halve
the scale at every overflow, floored at ``min_loss_scale`` when one is set; double it after 2000
overflow-free updates in a row, capped at ``max_loss_scale`` (default ``2**24``). That is
Paddle 3.x's rule with ``incr_ratio=2``, ``decr_ratio=0.5``, ``incr_every_n_steps=2000``,
``decr_every_n_nan_or_inf=1`` and our ``min_loss_scaling``/``max_loss_scaling`` bounds, so each
loss gets one ``GradScaler`` with those arguments.

Where the result differs from apex:

* apex keeps the scale as a Python float: without ``min_loss_scale`` it halves down through
  float64's subnormals to 0. Here the scale is float32 and stops at ``2**-126`` (the scaler's floor).
  Above that, every scale apex can reach from its defaults is a power of two, so the values agree.
* A static scale (``loss_scale=128.0``): apex never checks the grads, so a step with inf/NaN
  grads runs. Here the step is skipped (the scale stays fixed).
* apex's Python fallback flags overflow when the *sum* of a grad tensor overflows; its fused
  kernel and this scaler look at each element (this scaler at the unscaled value, as Paddle).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..amp.grad_scaler import GradScaler
from ..amp.loss_scale import FLOAT32_MAX, FLOAT32_TINY, as_number, check_count, check_scale, round_f32

__all__ = ["LossScaler"]

APEX_INIT_SCALE = 2.0**16
APEX_SCALE_FACTOR = 2.0
APEX_SCALE_WINDOW = 2000


class LossScaler:
    """One loss's scale with apex's API (``loss_scale()``, ``dynamic``) and the private attributes
    apex scripts read and write (``_loss_scale``, ``_unskipped``, ``_scale_seq_len``).

    Args:
        loss_scale: ``"dynamic"`` or a fixed positive scale.
        min_loss_scale, max_loss_scale: bounds of a dynamic scale (``None``: no floor but
            float32's smallest normal / no ceiling but float32's largest); ignored for a fixed scale.

    Attributes:
        grad_scaler: the ``paddle_compat.amp.GradScaler`` that holds the scale, unscales the
            grads and applies the policy.

    Example::

        scaler = LossScaler("dynamic")
        scaler.loss_scale()      # 65536.0
        scaler._loss_scale = 2.0**20
    """

    def __init__(
        self, loss_scale: str | float, min_loss_scale: float | None = None, max_loss_scale: float | None = 2.0**24
    ) -> None:
        self.dynamic = loss_scale == "dynamic"
        if not self.dynamic:
            scale = check_scale("loss_scale", loss_scale)
            self._min_loss_scale, self._max_loss_scale = None, None
            self.grad_scaler = GradScaler(init_loss_scaling=scale, use_dynamic_loss_scaling=False)
            return
        if max_loss_scale is not None and max_loss_scale == math.inf:
            max_loss_scale = None  # no ceiling
        if min_loss_scale is not None:
            min_loss_scale = check_scale("min_loss_scale", min_loss_scale)
        if max_loss_scale is not None:
            max_loss_scale = check_scale("max_loss_scale", max_loss_scale)
        if min_loss_scale is not None and max_loss_scale is not None and min_loss_scale > max_loss_scale:
            raise ValueError(f"min_loss_scale ({min_loss_scale!r}) must not exceed max_loss_scale ({max_loss_scale!r})")
        self._min_loss_scale, self._max_loss_scale = min_loss_scale, max_loss_scale
        init = APEX_INIT_SCALE if max_loss_scale is None else min(APEX_INIT_SCALE, max_loss_scale)
        if min_loss_scale is not None:
            init = max(init, min_loss_scale)  # apex may start below a floor above 2**16; ours may not
        self.grad_scaler = GradScaler(
            init_loss_scaling=init,
            incr_ratio=APEX_SCALE_FACTOR,
            decr_ratio=1.0 / APEX_SCALE_FACTOR,
            incr_every_n_steps=APEX_SCALE_WINDOW,
            decr_every_n_nan_or_inf=1,
            use_dynamic_loss_scaling=True,
            min_loss_scaling=min_loss_scale,
            max_loss_scaling=max_loss_scale,
        )

    def loss_scale(self) -> float:
        """The current scale (read from the host: no device sync)."""
        return self.grad_scaler.get_scale()

    @property
    def _loss_scale(self) -> float:
        return self.loss_scale()

    @_loss_scale.setter
    def _loss_scale(self, value: Any) -> None:
        self.grad_scaler._scale = value  # checked: a positive float within the bounds

    @property
    def _unskipped(self) -> int:
        """Overflow-free updates since the scale last changed."""
        return self.grad_scaler._incr_count

    @_unskipped.setter
    def _unskipped(self, value: Any) -> None:
        self.grad_scaler._incr_count = value

    @property
    def _scale_seq_len(self) -> int:
        """Overflow-free updates in a row before the scale doubles (apex's ``scale_window``)."""
        return self.grad_scaler.get_incr_every_n_steps()

    @_scale_seq_len.setter
    def _scale_seq_len(self, value: int) -> None:
        self.grad_scaler.set_incr_every_n_steps(value)

    def state_dict(self) -> dict[str, Any]:
        """apex's entry for this loss: ``{"loss_scale": float, "unskipped": int}``."""
        return {"loss_scale": self.loss_scale(), "unskipped": self._unskipped}

    def checked_state(self, entry: Any, name: str) -> tuple[float, int]:
        """The scale and count of an apex entry, validated against this scaler; nothing changes.

        ``name`` names the entry in errors (e.g. ``"state_dict['loss_scaler0']"``).
        """
        if not isinstance(entry, Mapping) or not {"loss_scale", "unskipped"} <= entry.keys():
            raise KeyError(f"{name} must be a dict with the keys 'loss_scale' and 'unskipped', got {entry!r}")
        scale = check_scale(f"{name}['loss_scale']", as_number(entry["loss_scale"]))
        low = FLOAT32_TINY if self._min_loss_scale is None else round_f32(self._min_loss_scale)
        high = FLOAT32_MAX if self._max_loss_scale is None else round_f32(self._max_loss_scale)
        if self.dynamic and not low <= round_f32(scale) <= high:
            raise ValueError(
                f"{name}['loss_scale'] ({scale!r}) must lie within "
                f"[min_loss_scale, max_loss_scale] = [{low!r}, {high!r}]"
            )
        return scale, check_count(f"{name}['unskipped']", entry["unskipped"])

    def load_state_dict(self, entry: Mapping[str, Any]) -> None:
        """Resume from ``state_dict()`` (apex's or ours): the scale and the overflow-free count."""
        scale, unskipped = self.checked_state(entry, "state_dict")
        self._loss_scale = scale
        self._unskipped = unskipped

    def __repr__(self) -> str:
        kind = "dynamic" if self.dynamic else "static"
        return f"LossScaler({kind}, loss_scale={self.loss_scale()!r}, unskipped={self._unskipped})"

