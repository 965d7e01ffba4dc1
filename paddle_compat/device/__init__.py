"""``paddle.device`` on PyTorch: only its ``amp`` namespace (``paddle_compat.device.amp``)."""

from . import amp

__all__ = ["amp"]
