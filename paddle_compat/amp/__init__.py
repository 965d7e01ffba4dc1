"""``paddle.amp`` on PyTorch: loss scaling, auto-cast and their companions."""

from .auto_cast import auto_cast
from .grad_scaler import AmpScaler, GradScaler

__all__ = ["AmpScaler", "GradScaler", "auto_cast"]
