"""PaddlePaddle's mixed-precision API on PyTorch tensors.

``paddle_compat.amp`` mirrors ``paddle.amp``. Paddle itself is never imported at run time.
"""

from . import amp

__version__ = "0.1.0"

__all__ = ["amp", "__version__"]
