"""torch's ``DTensor`` (FSDP2, tensor parallelism) as the optimizers and clips meet it.

The compiled kernels and the exact reductions work on plain dense tensors: a DTensor reaches
them as its local tensor (this rank's shard, or its replica), and what must hold over all
ranks (a global norm) is summed over the process groups its shards are spread on.

``torch.distributed.tensor`` is never imported from here: a process that never imported it
holds no DTensor, and pays nothing for the checks.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from torch import Tensor

__all__ = ["any_dtensor", "distribute_like", "dtensor_type", "is_dtensor", "local", "shard_groups", "wrap_like"]


def dtensor_type() -> type | None:
    """torch's ``DTensor`` class, or ``None`` while ``torch.distributed.tensor`` is not imported."""
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None) if module is not None else None


def is_dtensor(t: Any) -> bool:
    """Whether ``t`` is a ``DTensor`` (a parameter wrapping one included)."""
    cls = dtensor_type()
    return cls is not None and isinstance(t, cls)


def any_dtensor(tensors: Iterable[Any]) -> bool:
    """Whether any of ``tensors`` is a ``DTensor``, told by their types (a few at most): ``isinstance``
    on each tensor would also look up its ``__class__``, several times the cost of the rest."""
    cls = dtensor_type()
    return cls is not None and any(issubclass(kind, cls) for kind in set(map(type, tensors)))


def local(t: Tensor) -> Tensor:
    """This rank's part of ``t``: a DTensor's local tensor (sharing its storage), else ``t``."""
    return t._local_tensor if is_dtensor(t) else t  # type: ignore[attr-defined]


def shard_groups(t: Tensor, name: str = "tensor") -> tuple[Any, ...]:
    """The process groups over which the local parts of ``t`` add up to the whole (one per mesh
    dimension ``t`` is sharded on; none for a plain or replicated tensor).

    ``ValueError`` (naming ``name``) for a ``Partial`` placement: its local values are addends
    of the whole tensor, not slices of it, so no per-element formula or norm applies to them.
    """
    if not is_dtensor(t):
        return ()
    groups = []
    mesh = t.device_mesh  # type: ignore[attr-defined]
    for dim, placement in enumerate(t.placements):  # type: ignore[attr-defined]
        if placement.is_partial():
            raise ValueError(
                f"{name} is a DTensor with a Partial placement ({placement}): redistribute it to "
                "Shard or Replicate first"
            )
        if placement.is_shard():
            groups.append(mesh.get_group(dim))
    return tuple(groups)


def wrap_like(value: Tensor, like: Tensor) -> Tensor:
    """``value`` (a local tensor shaped as ``like``'s local tensor) as a DTensor placed as ``like``."""
    cls: Any = dtensor_type()
    assert cls is not None and isinstance(like, cls)
    placed: Any = like
    return cls.from_local(
        value, placed.device_mesh, placed.placements, run_check=False, shape=like.shape, stride=like.stride()
    )


def distribute_like(value: Tensor, like: Tensor) -> Tensor:
    """A whole tensor ``value`` (the same on every rank) as a DTensor placed as ``like``: each rank
    keeps its own slice, without communication."""
    from torch.distributed.tensor import distribute_tensor

    placed: Any = like
    return distribute_tensor(value, placed.device_mesh, placed.placements, src_data_rank=None)
