"""``PaddleMixedPrecision`` for the standalone ``pytorch_lightning`` package, whose ``Trainer``
accepts only its own plugin classes. Importing this module imports ``pytorch_lightning``."""

from __future__ import annotations

from pytorch_lightning.plugins.precision import MixedPrecision

from ._paddle_amp import HoldScheduleOnSkippedSteps, PaddleAmpPlugin

__all__ = ["HoldScheduleOnSkippedSteps", "PaddleMixedPrecision"]


class PaddleMixedPrecision(PaddleAmpPlugin, MixedPrecision):  # type: ignore[misc]  # see _paddle_amp
    """``pytorch_lightning.Trainer`` plugin: as ``paddle_compat.integrations.lightning.
    PaddleMixedPrecision`` (Paddle's ``auto_cast`` around every forward, a ``paddle_compat``
    ``GradScaler`` driven by Lightning). Arguments: see ``__init__``.

    Example::

        trainer = pytorch_lightning.Trainer(plugins=[PaddleMixedPrecision("float16")])
    """
