"""``fleet.distributed_model``: DistributedDataParallel over the data-parallel group."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .fleet import fleet_state

__all__ = ["distributed_model"]


def distributed_model(model: nn.Module) -> nn.Module:
    """Make ``model`` data parallel as fleet would: gradients averaged over the dp group.

    With more than one dp rank the model is wrapped in ``DistributedDataParallel`` over
    ``hcg.get_data_parallel_group()`` (the whole world under pure data parallel), with
    ``find_unused_parameters`` and ``bucket_cap_mb=fuse_grad_size_in_MB`` from the strategy; on
    CUDA, ``device_ids`` is the model's device. DDP averages the gradients in ``backward``, so an
    inf/NaN on any rank reaches every rank's gradients and the scaler needs nothing more.
    Under tensor or pipeline parallelism (``mp_degree``/``pp_degree`` > 1) the same holds
    within each dp group; the model's own layers do the model-parallel communication (e.g.
    ``torch.distributed.tensor.parallel`` on the groups of ``get_hybrid_communicate_group()``),
    and the scaler needs ``distributed_scaler``. With ``strategy.amp`` and
    ``amp_configs["use_pure_fp16"]`` (or ``use_pure_bf16``) the model is first cast for O2 by
    ``paddle_compat.amp.decorate``, as Paddle does.

    Args:
        model: the model, already on its device.

    Returns the wrapped model, or ``model`` itself when there is one dp rank.

    Example::

        fleet.init(is_collective=True)
        model = fleet.distributed_model(model)

    Differences from Paddle: sharding (``sharding_degree`` > 1) and segment parallelism are
    not mapped here (use ``paddle_compat.distributed.sharding.group_sharded_parallel`` for
    sharding); no pipeline engine (``PipelineLayer``/``train_batch``); the global GradScaler
    Paddle creates from ``amp_configs`` and never uses is not created.
    """
    if model is None:
        raise ValueError("model should not be None")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    strategy, hcg = fleet_state()
    if hcg.get_sharding_parallel_world_size() > 1 or hcg.get_sep_parallel_world_size() > 1:
        raise NotImplementedError(
            "distributed_model: sharding_degree/sep_degree > 1 are not mapped; shard with "
            "paddle_compat.distributed.sharding.group_sharded_parallel(model, optimizer, level, "
            "group=hcg.get_sharding_parallel_group())"
        )
    if strategy.amp:
        amp = strategy.amp_configs
        if amp["use_pure_fp16"] or amp["use_pure_bf16"]:
            from ...amp import decorate

            dtype = "float16" if amp["use_pure_fp16"] else "bfloat16"
            model = decorate(models=model, level="O2", dtype=dtype)
    if hcg.get_data_parallel_world_size() == 1:
        return model
    return torch.nn.parallel.DistributedDataParallel(
        model,
        device_ids=_device_ids(model),
        process_group=hcg.get_data_parallel_group(),
        find_unused_parameters=strategy.find_unused_parameters,
        bucket_cap_mb=strategy.fuse_grad_size_in_MB,
    )


def _device_ids(model: nn.Module) -> Any:
    devices = {p.device for p in model.parameters()}
    if len(devices) == 1:
        (device,) = devices
        if device.type == "cuda":
            return [device]
    return None  # CPU or multi-device modules: DDP takes no device_ids
