"""``paddle.optimizer`` on PyTorch: Paddle's optimizers as ``torch.optim.Optimizer`` subclasses.

Each follows Paddle 3.3.1's constructor, step order (clip -> regularization -> update) and kernel
rounding, so a Paddle training loop (``scaler.minimize(opt, loss)``) ports verbatim. Paddle's
learning-rate schedulers are in ``paddle_compat.optimizer.lr``, as ``paddle.optimizer.lr``.
"""

from . import lr  # noqa: F401  (paddle_compat.optimizer.lr, as paddle.optimizer.lr)
from .adam import Adam
from .adamw import AdamW
from .momentum import Momentum
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["SGD", "Adam", "AdamW", "Momentum", "Optimizer"]
