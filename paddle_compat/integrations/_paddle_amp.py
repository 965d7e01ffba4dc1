"""What the Lightning plugins share: Paddle's ``auto_cast`` settings and the scaler's policy.

Lightning's ``MixedPrecision`` computes under ``torch.autocast``, which Paddle's scaler cannot
see: Paddle's dtype policy then turns a dynamic ``GradScaler`` off at its first ``scale()``
(``docs/integrations.md``). These plugins enter ``auto_cast`` around every forward instead,
which applies Paddle's per-op rules and records the AMP dtype as Paddle does. This module
imports no framework: the plugin classes mix ``PaddleAmpPlugin`` into Lightning's own.

Typing: Lightning annotates its plugin's ``scaler`` as ``torch.amp.GradScaler`` and its contexts
as ``torch.autocast``, but only duck-types them; ours are a ``paddle_compat`` scaler and
``auto_cast``, so the mixed classes tell the type checker to accept the different types.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any

import torch

from ..amp import AmpScaler, GradScaler, auto_cast
from ..amp.amp_lists import LEVELS

_PRECISION = {"float16": "16-mixed", "bfloat16": "bf16-mixed"}  # Lightning's names


class PaddleAmpPlugin:
    """Mixed into a Lightning ``MixedPrecision`` (Trainer's or Fabric's): the constructor and
    the contexts that replace ``torch.autocast`` with Paddle's ``auto_cast``."""

    def __init__(
        self,
        dtype: str | torch.dtype = "float16",
        level: str = "O1",
        *,
        custom_white_list: Iterable[str] | None = None,
        custom_black_list: Iterable[str] | None = None,
        use_promote: bool = True,
        scaler: AmpScaler | torch.amp.GradScaler | None = None,
    ) -> None:
        """Every forward runs under ``auto_cast(True, custom_white_list, custom_black_list,
        level, dtype, use_promote)``: each op gets the precision Paddle would give it, and the
        AMP dtype is recorded as Paddle records it, so a dynamic ``GradScaler`` stays on under
        float16. Lightning drives the scaler as it drives torch's. Inputs keep their dtype.

        Args:
            dtype: ``"float16"`` (default) or ``"bfloat16"``.
            level: Paddle's AMP level, ``"O1"`` by default; at ``"O2"`` the model's weights
                stay as they are (``paddle_compat.amp.decorate`` casts them, if wanted).
            custom_white_list, custom_black_list, use_promote: as for ``auto_cast``.
            scaler: ``None`` (default) makes ``GradScaler()`` with Paddle's defaults for
                float16 and uses no scaler for bfloat16. A scaler given is used with either
                dtype (Lightning's own plugin refuses one with bfloat16): under bfloat16 a
                dynamic ``GradScaler`` turns itself off at its first ``scale()`` with Paddle's
                warning, and one with ``use_dynamic_loss_scaling=False`` keeps its fixed scale
                and still skips inf/NaN steps, both as in Paddle.
        """
        name = str(dtype).removeprefix("torch.")
        if name not in _PRECISION:
            raise ValueError(f"dtype must be 'float16' or 'bfloat16', got {dtype!r}")
        if not isinstance(level, str) or level.upper() not in LEVELS:
            raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
        if scaler is not None and not isinstance(scaler, (AmpScaler, torch.amp.GradScaler)):
            raise TypeError(
                "scaler must be a paddle_compat.amp.GradScaler/AmpScaler or a torch.amp.GradScaler, "
                f"got {type(scaler).__name__}"
            )
        if scaler is None and name == "float16":
            scaler = GradScaler()
        # Lightning's classes refuse a scaler with bfloat16: they get none, ours is set after.
        # Their device only serves torch.autocast, which is not used here.
        device = "cuda" if torch.cuda.is_available() else "cpu"
        super().__init__(  # type: ignore[call-arg]  # a mixin: super() is Lightning's MixedPrecision
            _PRECISION[name], device, scaler=scaler if name == "float16" else None
        )
        self.scaler = scaler
        self.amp_dtype = name
        self.amp_level = level.upper()
        self.custom_white_list = tuple(custom_white_list or ())
        self.custom_black_list = tuple(custom_black_list or ())
        self.use_promote = bool(use_promote)

    def forward_context(self) -> AbstractContextManager[None]:
        """Paddle's ``auto_cast`` with this plugin's settings, entered around every forward."""
        return auto_cast(
            True, self.custom_white_list, self.custom_black_list, self.amp_level, self.amp_dtype, self.use_promote
        )

    def autocast_context_manager(self) -> AbstractContextManager[None]:
        """The same context (Lightning's Trainer plugin names it so)."""
        return self.forward_context()

    def convert_input(self, data: Any) -> Any:
        """Inputs keep their dtype (Fabric's plugin would cast them to the AMP dtype): Paddle
        casts nothing up front, its rules decide per op from the dtypes they meet."""
        return data


class HoldScheduleOnSkippedSteps:
    """Mixed into a ``LightningModule`` (first among its bases): a scheduler stepped per step
    (``"interval": "step"``) holds on the steps the scaler skipped, as in Paddle's loop
    (``if not scaler._cache_found_inf: sched.step()``) and under Accelerate.

    Lightning steps the schedule after every optimizer step without asking the scaler (with
    torch's scaler as with ours), so a port drifts one scheduler step per overflow. Per-epoch
    schedulers step as usual. The scaler is the precision plugin's (``PaddleMixedPrecision``,
    or Lightning's own plugin with our scaler); with a scaler that cannot tell
    (``last_step_skipped``), every step counts.

    Example::

        class Model(HoldScheduleOnSkippedSteps, lightning.pytorch.LightningModule): ...
    """

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        trainer = self.trainer  # type: ignore[attr-defined]  # a mixin: self is a LightningModule
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        skipped = getattr(scaler, "last_step_skipped", None)
        per_step = any(config.scheduler is scheduler and config.interval == "step"
                       for config in trainer.lr_scheduler_configs)
        if per_step and skipped is not None and skipped():
            return
        super().lr_scheduler_step(scheduler, metric)  # type: ignore[misc]  # Lightning's
