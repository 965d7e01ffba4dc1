"""``paddle.device.amp``: the same scaler and auto-cast as ``paddle_compat.amp``, as in Paddle."""

from ..amp import GradScaler, auto_cast, autocast

__all__ = ["GradScaler", "auto_cast", "autocast"]
