"""``paddle.distributed`` on ``torch.distributed``: what ported training scripts call.

``fleet`` (``init``, ``distributed_model``, ``distributed_optimizer``, ``distributed_scaler``,
``get_hybrid_communicate_group``), ``sharding.group_sharded_parallel`` (on FSDP2) and the basics
below. Importing it creates nothing: process groups appear when ``init_parallel_env`` or
``fleet.init`` is called. See docs/distributed.md.
"""

from . import fleet, sharding
from .communication import ReduceOp, all_reduce, barrier
from .fleet.topology import ParallelMode
from .parallel import get_rank, get_world_size, init_parallel_env, is_initialized

__all__ = [
    "ParallelMode",
    "ReduceOp",
    "all_reduce",
    "barrier",
    "fleet",
    "get_rank",
    "get_world_size",
    "init_parallel_env",
    "is_initialized",
    "sharding",
]
