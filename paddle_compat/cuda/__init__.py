"""``paddle.cuda`` on PyTorch: only its ``amp`` namespace (``paddle_compat.cuda.amp``)."""

from . import amp

__all__ = ["amp"]
