"""``fleet.distributed_scaler``: one skip decision for all ranks when the gradients differ."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from ...amp.grad_scaler import AmpScaler
from .fleet import fleet_state
from .topology import ParallelMode

__all__ = ["distributed_scaler"]


def distributed_scaler(scaler: AmpScaler, *, group: Any = None) -> AmpScaler:
    """Make every rank skip the same steps and keep the same scale, as Paddle's fleet does.

    Sets ``scaler.process_group``, so each step's inf/NaN flag is MAX-all-reduced over it
    (``GradScaler(process_group=...)``), and returns the same scaler. Like Paddle, it does
    nothing under pure data parallelism (the hybrid degrees of ``fleet.init``'s strategy:
    ``dp_degree`` > 1, every other degree 1), where ``distributed_model``'s DDP has already
    made the gradients, and with them the flags, equal on every rank; nor in a single process.
    Otherwise (tensor, pipeline, sharding or segment parallelism) the flag is reduced over the
    whole world, as Paddle does.

    Args:
        scaler: a ``paddle_compat.amp.GradScaler`` or ``AmpScaler``.
        group: ours (keyword only): reduce over this process group instead, whatever the mode
            (and without ``fleet.init``), e.g. the model-parallel group when DDP already
            syncs the data-parallel replicas.

    Example::

        scaler = paddle_compat.amp.GradScaler(init_loss_scaling=1024)
        scaler = fleet.distributed_scaler(scaler)

    Differences from Paddle: the scaler is configured, not patched; it also works with fused
    optimizers (torch's, and ours with ``fused=True``) without a host sync.
    """
    if not isinstance(scaler, AmpScaler):
        raise TypeError(f"scaler must be a paddle_compat.amp.GradScaler or AmpScaler, got {type(scaler).__name__}")
    if group is not None:
        scaler.process_group = group
        return scaler
    _, hcg = fleet_state()
    if hcg.get_parallel_mode() not in (ParallelMode.DATA_PARALLEL, None):  # None: a single process
        scaler.process_group = dist.group.WORLD
    return scaler
