"""PaddlePaddle's mixed-precision training API on PyTorch tensors.

``paddle_compat.amp`` mirrors ``paddle.amp`` (also reachable as ``paddle_compat.device.amp`` and
``paddle_compat.cuda.amp``, as in Paddle); ``paddle_compat.optimizer`` (with ``optimizer.lr``),
``paddle_compat.nn`` (gradient clipping) and ``paddle_compat.regularizer`` give the optimizers it
serves, with Paddle's numerics; ``paddle_compat.distributed`` maps Paddle's fleet calls onto
``torch.distributed``. Opt-in, imported on demand: ``paddle_compat.parity`` (the parity kit),
``paddle_compat.apex`` (apex's ``amp.scale_loss``), ``paddle_compat.integrations`` (Lightning).
Paddle itself is never imported at run time. ``native_status()`` says whether the optimizers'
CPU updates run the compiled kernels built at install, or their torch forms, and why.
"""

from . import _version, amp, cuda, device, distributed, nn, optimizer, regularizer
from ._native import NativeStatus
from ._native import status as native_status

__version__ = _version.version()

__all__ = [
    "NativeStatus", "amp", "cuda", "device", "distributed", "native_status", "nn", "optimizer", "regularizer",
    "__version__",
]
