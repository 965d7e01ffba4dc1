"""Paddle's hybrid-parallel topology: ranks laid out on named axes, one process group per axis.

Ranks are numbered row-major over the axes in ``DistributedStrategy.hybrid_parallel_order``
(the last axis varies fastest), as in Paddle: with the default order ``dp, pp, sharding, sep,
mp``, model-parallel partners are neighbouring ranks. The groups are ordinary
``torch.distributed`` process groups, usable with any torch collective, DDP or
``DeviceMesh.from_group``.
"""

from __future__ import annotations

import collections
import datetime
import itertools
import math
from collections.abc import Sequence
from typing import Any

import torch.distributed as dist

from ... import _checks

__all__ = ["CommunicateTopology", "HybridCommunicateGroup", "ParallelMode"]

# Paddle's axis names in the topology, by the strategy's short names.
AXIS_NAMES = {"dp": "data", "pp": "pipe", "sharding": "sharding", "sep": "sep", "cp": "context", "mp": "model"}


class ParallelMode:
    """Paddle's parallel modes, as ``HybridCommunicateGroup.get_parallel_mode()`` returns them.

    Example::

        if hcg.get_parallel_mode() == ParallelMode.TENSOR_PARALLEL:
            ...
    """

    DATA_PARALLEL = 0
    TENSOR_PARALLEL = 1
    PIPELINE_PARALLEL = 2
    SHARDING_PARALLEL = 3
    SEGMENT_PARALLEL = 4


class CommunicateTopology:
    """Ranks on named axes: ``dims[i]`` ranks along ``hybrid_group_names[i]``, row-major.

    Args:
        hybrid_group_names: the axis names, outermost first (Paddle's: ``"data"``, ``"pipe"``,
            ``"sharding"``, ``"sep"``, ``"model"``, optionally ``"context"``).
        dims: the size of each axis.

    Example::

        >>> from paddle_compat.distributed.fleet import CommunicateTopology
        >>> topo = CommunicateTopology(["data", "model"], [2, 2])
        >>> topo.get_comm_list("model")
        [[0, 1], [2, 3]]
    """

    def __init__(
        self,
        hybrid_group_names: Sequence[str] = ("data", "pipe", "sharding", "sep", "model"),
        dims: Sequence[int] = (1, 1, 1, 1, 1),
    ) -> None:
        if len(hybrid_group_names) != len(dims) or len(set(hybrid_group_names)) != len(dims):
            raise ValueError("hybrid_group_names must be distinct and as many as dims")
        for i, d in enumerate(dims):
            _checks.at_least(f"dims[{i}]", _checks.integer(f"dims[{i}]", d), 1)
        self._names = list(hybrid_group_names)
        self._dims = list(dims)
        # The fields are the axis names, known only at run time.
        coordinate: Any = collections.namedtuple("Coordinate", self._names)  # type: ignore[misc]
        self.coordinate = coordinate
        self._coords: list[Any] = [coordinate(*c) for c in itertools.product(*(range(d) for d in self._dims))]
        self._ranks = {c: r for r, c in enumerate(self._coords)}

    def get_hybrid_group_names(self) -> list[str]:
        """The axis names, outermost first."""
        return list(self._names)

    def get_dim(self, axis_name: str) -> int:
        """The size of one axis (also ``get_dim_size``).

        Args:
            axis_name: e.g. ``"model"``; ``ValueError`` for a name not in the topology.

        Example::

            >>> from paddle_compat.distributed.fleet import CommunicateTopology
            >>> CommunicateTopology(["data", "model"], [4, 2]).get_dim("data")
            4
        """
        return self._dims[self._axis(axis_name)]

    get_dim_size = get_dim

    def world_size(self) -> int:
        """The number of ranks: the product of the axis sizes."""
        return math.prod(self._dims)

    def get_rank(self, **coordinates: int) -> int:
        """The rank at the given coordinate on every axis.

        Args:
            **coordinates: one index per axis, by axis name.

        Example::

            >>> from paddle_compat.distributed.fleet import CommunicateTopology
            >>> CommunicateTopology(["data", "model"], [2, 2]).get_rank(data=1, model=0)
            2
        """
        return self._ranks[self.coordinate(**coordinates)]

    def get_coord(self, rank: int) -> Any:
        """The coordinate (a namedtuple with one field per axis) of ``rank``.

        Args:
            rank: a global rank.

        Example::

            >>> from paddle_compat.distributed.fleet import CommunicateTopology
            >>> CommunicateTopology(["data", "model"], [2, 2]).get_coord(3)
            Coordinate(data=1, model=1)
        """
        return self._coords[rank]

    def get_axis_list(self, axis_name: str, index: int) -> list[int]:
        """The ranks whose coordinate on ``axis_name`` is ``index``, ascending.

        Args:
            axis_name: the axis.
            index: the coordinate on it.

        Example::

            >>> from paddle_compat.distributed.fleet import CommunicateTopology
            >>> CommunicateTopology(["data", "model"], [2, 2]).get_axis_list("model", 1)
            [1, 3]
        """
        axis = self._axis(axis_name)
        return [r for r, c in enumerate(self._coords) if c[axis] == index]

    def get_comm_list(self, axis_name: str) -> list[list[int]]:
        """The groups along ``axis_name``: ranks that differ only on that axis, one list each.

        Args:
            axis_name: the axis.

        Example::

            >>> from paddle_compat.distributed.fleet import CommunicateTopology
            >>> CommunicateTopology(["data", "model"], [2, 2]).get_comm_list("data")
            [[0, 2], [1, 3]]
        """
        axis = self._axis(axis_name)
        return [
            [self._ranks[c._replace(**{axis_name: i})] for i in range(self._dims[axis])]
            for c in self._coords
            if c[axis] == 0
        ]

    def get_rank_from_stage(self, global_rank: int, **kwargs: int) -> int:
        """The rank whose coordinate is ``global_rank``'s with the axes in ``kwargs`` replaced.

        Args:
            global_rank: the rank to start from.
            **kwargs: new indices, by axis name (e.g. ``pipe=0``).

        Example::

            >>> from paddle_compat.distributed.fleet import CommunicateTopology
            >>> CommunicateTopology(["data", "model"], [2, 2]).get_rank_from_stage(3, model=0)
            2
        """
        return self._ranks[self._coords[global_rank]._replace(**kwargs)]

    def _axis(self, axis_name: str) -> int:
        if axis_name not in self._names:
            raise ValueError(f"unknown axis {axis_name!r}; the axes are {self._names}")
        return self._names.index(axis_name)


class HybridCommunicateGroup:
    """Paddle's ``HybridCommunicateGroup``: this rank's place on the topology and its groups.

    Built by ``fleet.init``; get it with ``fleet.get_hybrid_communicate_group()``. Every group
    is created on every rank, in the same order (torch requires it). Groups that span the
    whole world are torch's default group; identical rank lists share one group.

    Args:
        topology: the layout; its world size must be the default group's.
        timeout: the timeout of the groups created (torch's default when ``None``).

    Example::

        hcg = fleet.get_hybrid_communicate_group()
        if hcg.get_model_parallel_world_size() > 1:
            torch.distributed.all_reduce(partial, group=hcg.get_model_parallel_group())

    Differences from Paddle: the getters return torch ``ProcessGroup`` objects, so a Paddle
    ``group.nranks``/``group.rank``/``group.ranks`` is ``torch.distributed.get_world_size(group)``,
    ``get_rank(group)``, ``get_process_group_ranks(group)``; pipeline p2p groups and the
    context/expert axes are not built.
    """

    def __init__(self, topology: CommunicateTopology, *, timeout: datetime.timedelta | None = None) -> None:
        self.nranks = dist.get_world_size()
        self.global_rank = dist.get_rank()
        names = topology.get_hybrid_group_names()
        if topology.world_size() != self.nranks:
            dims = {name: topology.get_dim(name) for name in names}
            raise ValueError(
                f"the hybrid degrees {dims} multiply to {topology.world_size()} ranks, but the world has {self.nranks}"
            )
        missing = {"data", "pipe", "sharding", "sep", "model"} - set(names)
        if missing:
            raise ValueError(f"the topology lacks the axes {sorted(missing)}")
        self._topo = topology
        self._timeout = timeout
        self._groups: dict[tuple[int, ...], Any] = {}
        # This rank's coordinate: its index on every axis; the degrees are the topology's dims.
        self._coord = topology.get_coord(self.global_rank)
        self.stage_id = self._coord.pipe
        self.is_first_stage = self.stage_id == 0
        self.is_last_stage = self.stage_id == topology.get_dim("pipe") - 1

        # This rank's group on each axis, created in the same order on every rank.
        self._group: dict[str, Any] = {}
        for axis in ("pipe", "data", "model", "sharding", "sep"):
            if axis != "sep" or topology.get_dim("sep") > 1:  # as Paddle: sep only when used
                self._group[axis] = self._axis_group(topology.get_comm_list(axis))
        # Paddle's check groups (inf/NaN, global norm): every rank with this rank's dp (sharding) index.
        self._check_comm_group = self._across("data")
        self.sharding_check_comm_group = self._across("sharding") if topology.get_dim("sharding") > 1 else None
        self._mesh = self._device_mesh()

    def _device_mesh(self) -> Any:
        """The topology as a torch ``DeviceMesh`` over the groups built above (see ``get_device_mesh``)."""
        import torch
        from torch.distributed.device_mesh import DeviceMesh

        names = self._topo.get_hybrid_group_names()
        # one group per axis, this rank's; the sep axis gets its own even at degree 1 (not Paddle's getter)
        groups = [self._group.get(axis) or self._axis_group(self._topo.get_comm_list(axis)) for axis in names]
        dims = [self._topo.get_dim(axis) for axis in names]
        device_type = "cuda" if "cuda" in str(dist.get_backend_config()) and torch.cuda.is_available() else "cpu"
        shorts = {full: short for short, full in AXIS_NAMES.items()}
        layout = torch.arange(self.nranks, dtype=torch.int).reshape(dims)
        return DeviceMesh.from_group(groups, device_type, layout, mesh_dim_names=tuple(shorts[a] for a in names))

    def _axis_group(self, rank_lists: list[list[int]]) -> Any:
        """The process group of the list holding this rank. Every list's group is created: that is
        a collective call, so every rank creates them all, in the same order."""
        mine = None
        for ranks in rank_lists:
            key = tuple(ranks)
            if key not in self._groups:
                if len(key) == self.nranks:
                    self._groups[key] = dist.group.WORLD
                else:
                    self._groups[key] = dist.new_group(list(key), timeout=self._timeout)
            if self.global_rank in key:
                mine = self._groups[key]
        assert mine is not None  # the lists cover every rank
        return mine

    def _across(self, axis: str) -> Any:
        """The group of every rank with this rank's index on ``axis``."""
        return self._axis_group([self._topo.get_axis_list(axis, i) for i in range(self._topo.get_dim(axis))])

    def _first_on(self, axis: str) -> int:
        """The global rank of the first member of this rank's group on ``axis`` (index 0 there)."""
        return self._topo.get_rank_from_stage(self.global_rank, **{axis: 0})

    def get_parallel_mode(self) -> int | None:
        """The ``ParallelMode`` by Paddle's rule: pipeline > tensor > segment > sharding > data;
        ``None`` when every degree is 1 (a single process), as in Paddle."""
        if self._topo.get_dim("pipe") > 1:
            return ParallelMode.PIPELINE_PARALLEL
        if self._topo.get_dim("model") > 1:
            return ParallelMode.TENSOR_PARALLEL
        if self._topo.get_dim("sep") > 1:
            return ParallelMode.SEGMENT_PARALLEL
        if self._topo.get_dim("sharding") > 1:
            return ParallelMode.SHARDING_PARALLEL
        if self._topo.get_dim("data") > 1:
            return ParallelMode.DATA_PARALLEL
        return None

    def topology(self) -> CommunicateTopology:
        """The layout the groups were built from."""
        return self._topo

    def get_global_rank(self) -> int:
        """This rank in the default group."""
        return self.global_rank

    # data parallel
    def get_data_parallel_rank(self) -> int:
        """This rank's index on the data-parallel axis."""
        return self._coord.data

    def get_data_parallel_world_size(self) -> int:
        """The data-parallel degree."""
        return self._topo.get_dim("data")

    def get_data_parallel_group(self) -> Any:
        """The torch process group of this rank's data-parallel replicas."""
        return self._group["data"]

    def get_data_parallel_group_src_rank(self) -> int:
        """The global rank of that group's first member (e.g. a broadcast's source)."""
        return self._first_on("data")

    # model (tensor) parallel
    def get_model_parallel_rank(self) -> int:
        """This rank's index on the model-parallel axis."""
        return self._coord.model

    def get_model_parallel_world_size(self) -> int:
        """The model (tensor) parallel degree."""
        return self._topo.get_dim("model")

    def get_model_parallel_group(self) -> Any:
        """The torch process group of this rank's model-parallel partners."""
        return self._group["model"]

    def get_model_parallel_group_src_rank(self) -> int:
        """The global rank of that group's first member."""
        return self._first_on("model")

    # pipeline parallel
    def get_stage_id(self) -> int:
        """This rank's pipeline stage."""
        return self.stage_id

    def get_pipe_parallel_world_size(self) -> int:
        """The pipeline-parallel degree (the number of stages)."""
        return self._topo.get_dim("pipe")

    def get_pipe_parallel_group(self) -> Any:
        """The torch process group of this rank's pipeline (one rank per stage)."""
        return self._group["pipe"]

    def get_rank_from_stage(self, stage_id: int, **kwargs: int) -> int:
        """The global rank of stage ``stage_id`` in this rank's pipeline.

        Args:
            stage_id: the stage.
            **kwargs: other axes to move along too, by axis name (e.g. ``model=0``).

        Example::

            next_stage = hcg.get_rank_from_stage(hcg.get_stage_id() + 1)
        """
        return self._topo.get_rank_from_stage(self.global_rank, pipe=stage_id, **kwargs)

    # sharding parallel
    def get_sharding_parallel_rank(self) -> int:
        """This rank's index on the sharding axis."""
        return self._coord.sharding

    def get_sharding_parallel_world_size(self) -> int:
        """The sharding degree."""
        return self._topo.get_dim("sharding")

    def get_sharding_parallel_group(self) -> Any:
        """The torch process group this rank shards its optimizer state over."""
        return self._group["sharding"]

    def get_sharding_parallel_group_src_rank(self) -> int:
        """The global rank of that group's first member."""
        return self._first_on("sharding")

    # segment (sequence) parallel: only when its degree is above 1, as in Paddle
    def get_sep_parallel_rank(self) -> int:
        """This rank's index on the segment-parallel axis."""
        return self._coord.sep

    def get_sep_parallel_world_size(self) -> int:
        """The segment (sequence) parallel degree."""
        return self._topo.get_dim("sep")

    def get_sep_parallel_group(self) -> Any:
        """The torch process group of the segment-parallel axis; ``RuntimeError`` when its
        degree is 1, as in Paddle."""
        if "sep" not in self._group:
            raise RuntimeError("sep not exist: sep_degree is 1")
        return self._group["sep"]

    # the check group: where inf/NaN flags and global norms are reduced
    def get_check_parallel_group(self, sharding: bool = False) -> Any:
        """The group Paddle reduces inf/NaN flags and global norms over: the ranks that hold
        this rank's dp replica (every axis but dp).

        Args:
            sharding: every axis but sharding instead (only when sharding_degree > 1).

        Example::

            torch.distributed.all_reduce(found_inf, op=ReduceOp.MAX, group=hcg.get_check_parallel_group())
        """
        if sharding:
            if self.sharding_check_comm_group is None:
                raise RuntimeError("the sharding check group exists only when sharding_degree > 1")
            return self.sharding_check_comm_group
        return self._check_comm_group

    def get_device_mesh(self) -> Any:
        """The topology as a torch ``DeviceMesh`` (ours; Paddle has no such getter): one dimension
        per axis, in the strategy's order, named ``"dp"``, ``"pp"``, ``"sharding"``, ``"sep"``,
        ``"mp"``, its groups those of the getters above. Slice it by name for torch's parallel
        APIs: ``mesh["mp"]`` for ``parallelize_module``, ``mesh["sharding"]`` for ``fully_shard``.

        Example::

            mesh = fleet.get_hybrid_communicate_group().get_device_mesh()
            fully_shard(model, mesh=mesh["sharding"])
        """
        return self._mesh

    def __repr__(self) -> str:
        axes = ("dp", "mp", "pp", "sharding", "sep")
        degrees = ", ".join(f"{short}={self._topo.get_dim(AXIS_NAMES[short])}" for short in axes)
        return f"HybridCommunicateGroup(rank={self.global_rank}, {degrees})"
