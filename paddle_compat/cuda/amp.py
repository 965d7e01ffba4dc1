"""``paddle.cuda.amp`` (torch's ``torch.cuda.amp`` spelling): the same classes as ``paddle_compat.amp``."""

from ..amp import GradScaler, auto_cast, autocast

__all__ = ["GradScaler", "auto_cast", "autocast"]
