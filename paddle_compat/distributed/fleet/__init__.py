"""``paddle.distributed.fleet`` on ``torch.distributed``: collective training with Paddle's names.

``init`` starts torch's process groups from torchrun's environment, ``distributed_model`` wraps
in ``DistributedDataParallel``, ``distributed_optimizer`` returns the optimizer,
``distributed_scaler`` makes a ``paddle_compat.amp.GradScaler`` agree across ranks, and
``get_hybrid_communicate_group`` gives the dp/mp/pp/sharding groups, ``utils.recompute`` recomputes
activations under the forward's ``auto_cast``. See docs/distributed.md.
"""

from . import recompute, utils
from .distributed_strategy import DistributedStrategy
from .fleet import (
    barrier_worker,
    get_hybrid_communicate_group,
    init,
    is_first_worker,
    local_rank,
    worker_index,
    worker_num,
)
from .model import distributed_model
from .optimizer import distributed_optimizer
from .scaler import distributed_scaler
from .topology import CommunicateTopology, HybridCommunicateGroup, ParallelMode

__all__ = [
    "CommunicateTopology",
    "DistributedStrategy",
    "HybridCommunicateGroup",
    "ParallelMode",
    "barrier_worker",
    "distributed_model",
    "distributed_optimizer",
    "distributed_scaler",
    "get_hybrid_communicate_group",
    "init",
    "is_first_worker",
    "local_rank",
    "recompute",
    "utils",
    "worker_index",
    "worker_num",
]
