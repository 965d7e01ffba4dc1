"""Paddle's collective calls with Paddle's signatures, on ``torch.distributed``."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist
from torch import Tensor

from .. import _checks

__all__ = ["ReduceOp", "all_reduce", "barrier"]


class ReduceOp:
    """Paddle's ``ReduceOp`` names for torch's reduction ops (``AVG``: NCCL only).

    Example::

        all_reduce(loss_sum, op=ReduceOp.SUM)
    """

    SUM = dist.ReduceOp.SUM
    MAX = dist.ReduceOp.MAX
    MIN = dist.ReduceOp.MIN
    PROD = dist.ReduceOp.PRODUCT
    AVG = dist.ReduceOp.AVG


def all_reduce(tensor: Tensor, op: Any = ReduceOp.SUM, group: Any = None, sync_op: bool = True) -> Any:
    """Reduce ``tensor`` in place over the ranks of ``group`` (Paddle's argument order).

    Args:
        tensor: the tensor to reduce, the same shape on every rank.
        op: a ``ReduceOp`` (``SUM`` by default).
        group: a torch process group; ``None``: the default group.
        sync_op: ``False`` returns torch's ``Work`` (call ``.wait()`` before reading the tensor).

    Returns ``None`` when ``sync_op`` is true (Paddle returns a task either way).

    Example::

        found = torch.tensor([1 if bad else 0])
        all_reduce(found, op=ReduceOp.MAX)
    """
    _checks.flag("sync_op", sync_op)
    return dist.all_reduce(tensor, op=op, group=group, async_op=not sync_op)


def barrier(group: Any = None) -> None:
    """Wait until every rank of ``group`` reaches this call.

    Args:
        group: a torch process group; ``None``: the default group.

    Example::

        if get_rank() == 0:
            prepare_dataset()
        barrier()
    """
    dist.barrier(group=group)
