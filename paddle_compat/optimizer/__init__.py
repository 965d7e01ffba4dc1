"""``paddle.optimizer`` on PyTorch: Paddle's optimizers as ``torch.optim.Optimizer`` subclasses.

Each follows Paddle 3.3.1's constructor, step order (clip -> regularization -> update) and kernel
rounding, so a Paddle training loop (``scaler.minimize(opt, loss)``) ports verbatim. Paddle's
learning-rate schedulers are in ``paddle_compat.optimizer.lr``, as ``paddle.optimizer.lr``.
"""

from . import lr  # noqa: F401  (paddle_compat.optimizer.lr, as paddle.optimizer.lr)
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam
from .adamax import Adamax
from .adamw import AdamW
from .asgd import ASGD
from .lamb import Lamb
from .momentum import Momentum
from .nadam import NAdam
from .optimizer import Optimizer
from .radam import RAdam
from .rmsprop import RMSProp
from .rprop import Rprop
from .sgd import SGD

__all__ = [
    "ASGD",
    "SGD",
    "Adadelta",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "Lamb",
    "Momentum",
    "NAdam",
    "Optimizer",
    "RAdam",
    "RMSProp",
    "Rprop",
]
