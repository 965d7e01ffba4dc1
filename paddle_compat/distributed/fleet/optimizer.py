"""``fleet.distributed_optimizer``: nothing to wrap on torch."""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch

from .distributed_strategy import DistributedStrategy
from .fleet import _fleet, fleet_state

__all__ = ["distributed_optimizer"]


def distributed_optimizer(optimizer: torch.optim.Optimizer, strategy: DistributedStrategy | None = None) -> Any:
    """Return ``optimizer`` itself: it needs no wrapper on torch.

    Paddle wraps it in ``HybridParallelOptimizer``, which all-reduces the dp gradients in
    ``step`` (here ``distributed_model``'s DDP does that in ``backward``) and sums the global
    norm of ``ClipGradByGlobalNorm`` over the model-parallel ranks. The latter is not done: with
    ``mp_degree``/``pp_degree`` > 1 a global-norm clip sees this rank's gradients only, and a
    warning says so.

    Args:
        optimizer: a ``torch.optim.Optimizer`` (``paddle_compat.optimizer``'s included).
        strategy: as in Paddle, replaces the strategy given to ``fleet.init`` (with Paddle's
            warning); the process groups stay those ``fleet.init`` built.

    Example::

        optimizer = fleet.distributed_optimizer(optimizer)
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
    if hcg.get_model_parallel_world_size() > 1 or hcg.get_pipe_parallel_world_size() > 1:
        if any(_is_global_norm_clip(group.get("grad_clip")) for group in optimizer.param_groups):
            warnings.warn(
                "distributed_optimizer: ClipGradByGlobalNorm computes the norm of this rank's gradients "
                "only; Paddle sums it over the model-parallel and pipeline ranks",
                stacklevel=2,
            )
    return optimizer


def _is_global_norm_clip(clip: Any) -> bool:
    return type(clip).__name__ == "ClipGradByGlobalNorm"
