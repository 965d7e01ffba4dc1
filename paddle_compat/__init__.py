"""PaddlePaddle's mixed-precision training API on PyTorch tensors.

``paddle_compat.amp`` mirrors ``paddle.amp``; ``paddle_compat.optimizer``, ``paddle_compat.nn``
(gradient clipping) and ``paddle_compat.regularizer`` give the optimizers it serves, with
Paddle's numerics. Paddle itself is never imported at run time.
"""

from . import amp, nn, optimizer, regularizer

__version__ = "0.1.0"

__all__ = ["amp", "nn", "optimizer", "regularizer", "__version__"]
