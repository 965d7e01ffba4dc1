"""``fleet.distributed_optimizer``: the optimizer, with Paddle's hybrid-parallel clip."""

from __future__ import annotations

import copy
import logging
import warnings
from typing import Any

import torch

from ...nn.clip import ClipGradByGlobalNorm
from .distributed_strategy import DistributedStrategy
from .fleet import _fleet, fleet_state
from .hybrid_parallel_optimizer import HybridParallelClipGrad
from .topology import ParallelMode

__all__ = ["distributed_optimizer"]

logger = logging.getLogger("paddle_compat.distributed")


def distributed_optimizer(optimizer: torch.optim.Optimizer, strategy: DistributedStrategy | None = None) -> Any:
    """Return ``optimizer`` itself, its global-norm clip made hybrid-parallel as Paddle's.

    Paddle wraps the optimizer in ``HybridParallelOptimizer``, which all-reduces the dp gradients
    in ``step`` (here ``distributed_model``'s DDP does that in ``backward``) and, outside pure data
    parallelism, replaces a ``ClipGradByGlobalNorm`` with ``HybridParallelClipGrad``: the norm
    summed over the model-parallel, pipeline and sharding ranks, a replicated parameter counted
    once. That replacement is made here too, on the optimizer itself (every parameter group's clip,
    as Paddle), with Paddle's warning, logged.

    Args:
        optimizer: a ``torch.optim.Optimizer`` (``paddle_compat.optimizer``'s included; the clip is
            that of ours: ``torch.optim``'s have none).
        strategy: as in Paddle, replaces the strategy given to ``fleet.init`` (with Paddle's
            warning); the process groups stay those ``fleet.init`` built.

    Example::

        optimizer = fleet.distributed_optimizer(optimizer)

    Differences from Paddle: no wrapper object (the optimizer is returned); sharding stage 1
    (Paddle's ``DygraphShardingOptimizer``) is not made here: shard with ``group_sharded_parallel``.
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    if strategy is not None and not isinstance(strategy, DistributedStrategy):
        raise TypeError(f"strategy must be a fleet.DistributedStrategy, got {type(strategy).__name__}")
    _, hcg = fleet_state()
    if strategy is not None:
        warnings.warn(
            "It is recommended to use DistributedStrategy in fleet.init(). The strategy here is only for "
            "compatibility. If the strategy in fleet.distributed_optimizer() is not None, then it will "
            "overwrite the DistributedStrategy in fleet.init(), which will take effect in distributed training.",
            stacklevel=2,
        )
        _fleet.strategy = copy.deepcopy(strategy)
    clip = getattr(optimizer, "_grad_clip", None)
    if (  # Paddle: in a single process the optimizer comes back as it is
        isinstance(clip, ClipGradByGlobalNorm)
        and not isinstance(clip, HybridParallelClipGrad)
        and hcg.get_parallel_mode() not in (ParallelMode.DATA_PARALLEL, None)
    ):
        logger.warning(
            "While using ClipGradByGlobalNorm in TensorParallel, PipelineParallel or Sharding, the grad clip "
            "of original optimizer will be changed."
        )
        split_norm_comm = fleet_state()[0].hybrid_configs["split_norm_comm"]
        hybrid = HybridParallelClipGrad(clip, hcg, split_norm_comm)
        optimizer._grad_clip = hybrid  # type: ignore[attr-defined]
        if getattr(optimizer, "_compat_grouped", False):
            for group in optimizer.param_groups:
                group["grad_clip"] = hybrid
    return optimizer
