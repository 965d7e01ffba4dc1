"""``fleet.init`` and the queries around it: one fleet per process, as in Paddle."""

from __future__ import annotations

import copy
import datetime
import logging
import warnings
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from .. import parallel
from .distributed_strategy import DistributedStrategy
from .topology import AXIS_NAMES, CommunicateTopology, HybridCommunicateGroup

__all__ = [
    "barrier_worker",
    "get_hybrid_communicate_group",
    "init",
    "is_first_worker",
    "local_rank",
    "worker_index",
    "worker_num",
]

logger = logging.getLogger("paddle_compat.distributed")

_REFUSED_DEGREES = ("cp_degree", "ep_degree", "moe_sharding_degree", "cp_sharding_degree")


@dataclass
class _Fleet:
    strategy: DistributedStrategy | None = None
    hcg: HybridCommunicateGroup | None = None


_fleet = _Fleet()


def init(
    role_maker: Any = None,
    is_collective: bool = False,
    strategy: DistributedStrategy | None = None,
    log_level: int | str = "INFO",
    *,
    backend: str | None = None,
    timeout: datetime.timedelta | None = None,
) -> None:
    """Start collective training: torch's default process group and the hybrid groups.

    The default group comes from torchrun's environment (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``, ...); an existing one is kept. A single process without a launcher gets a
    one-rank group, so the same script also runs alone. Then the topology of
    ``strategy.hybrid_configs`` is laid out and its groups are created
    (``get_hybrid_communicate_group()``); ``dp_degree=-1`` takes the ranks the other degrees
    leave. Every rank must call it.

    Args:
        role_maker: must be ``None`` (ranks come from the launcher's environment).
        is_collective: accepted for Paddle's signature; as Paddle's dynamic-graph mode does,
            both values start collective training (parameter servers are not supported).
        strategy: a ``DistributedStrategy`` (default: Paddle's defaults, pure data parallel);
            copied, as in Paddle.
        log_level: the level of the ``paddle_compat.distributed`` logger.
        backend, timeout: ours (keyword only), as ``paddle_compat.distributed.init_parallel_env``.

    Example::

        # torchrun --nproc-per-node 4 train.py
        strategy = fleet.DistributedStrategy()
        strategy.hybrid_configs = {"dp_degree": 2, "mp_degree": 2, "pp_degree": 1}
        fleet.init(is_collective=True, strategy=strategy)
        hcg = fleet.get_hybrid_communicate_group()

    Differences from Paddle: no role makers or parameter-server mode; a second call rebuilds
    the hybrid groups from its strategy (Paddle keeps the first ones); degrees for the context,
    expert and MoE-sharding axes must stay 1.
    """
    if role_maker is not None:
        raise NotImplementedError(
            "fleet.init(role_maker=...) is not supported: paddle_compat takes the ranks from the "
            "launcher's environment (torchrun)"
        )
    if not isinstance(is_collective, bool):
        raise ValueError(f"`is_collective` should be instance of `bool`, but got {type(is_collective)}")
    if strategy is None:
        strategy = DistributedStrategy()
    if not isinstance(strategy, DistributedStrategy):
        raise TypeError(f"strategy must be a fleet.DistributedStrategy, got {type(strategy).__name__}")
    strategy = copy.deepcopy(strategy)
    hybrid = strategy.hybrid_configs
    refused = {k: hybrid[k] for k in _REFUSED_DEGREES if hybrid[k] > 1}
    if refused:
        raise NotImplementedError(f"hybrid_configs {refused}: only dp, mp, pp, sharding and sep degrees are supported")
    parallel.check_options(backend, timeout)
    if not isinstance(log_level, (int, str)) or isinstance(log_level, bool):
        raise TypeError(f"log_level must be an int or a level name, got {type(log_level).__name__}")
    if isinstance(log_level, str) and not isinstance(logging.getLevelName(log_level.upper()), int):  # a known name
        raise ValueError(f"log_level must be an int or a level name such as 'INFO', got {log_level!r}")
    world_size = parallel.get_world_size()  # the default group's, else torchrun's WORLD_SIZE
    topology = _topology(strategy, world_size)  # checked before any group exists

    logger.setLevel(log_level.upper() if isinstance(log_level, str) else log_level)
    unhonoured = strategy.unhonoured_settings()
    if unhonoured:
        warnings.warn(
            f"fleet.init: these DistributedStrategy settings have no effect in paddle_compat: {', '.join(unhonoured)}",
            stacklevel=2,
        )
    if parallel.is_initialized():
        logger.info("fleet.init: using the existing default process group")
    else:
        parallel.start(backend, timeout, single_process=world_size < 2)
    _fleet.strategy = strategy
    _fleet.hcg = HybridCommunicateGroup(topology, timeout=timeout)
    logger.info("fleet.init: %r", _fleet.hcg)


def _topology(strategy: DistributedStrategy, world_size: int) -> CommunicateTopology:
    hybrid = strategy.hybrid_configs
    degrees = {axis: hybrid.get(f"{axis}_degree", 1) for axis in AXIS_NAMES}
    for axis, degree in degrees.items():
        if degree < 1 and not (axis == "dp" and degree == -1):
            raise ValueError(f"hybrid_configs['{axis}_degree'] must be >= 1 (dp_degree may be -1), got {degree}")
    others = degrees["mp"] * degrees["pp"] * degrees["sharding"] * degrees["sep"]
    if degrees["dp"] == -1:  # the ranks the other axes leave
        degrees["dp"] = max(world_size // others, 1)
    if degrees["dp"] * others != world_size:
        raise ValueError(
            f"the hybrid degrees {dict((f'{a}_degree', d) for a, d in degrees.items() if a != 'cp')} "
            f"multiply to {degrees['dp'] * others} ranks, but there are {world_size}"
        )
    order = [axis for axis in strategy.hybrid_parallel_order if axis != "cp"]
    return CommunicateTopology([AXIS_NAMES[a] for a in order], [degrees[a] for a in order])


def fleet_state() -> tuple[DistributedStrategy, HybridCommunicateGroup]:
    """The strategy and groups of the last ``init``; raises if there is none (or they died)."""
    if _fleet.hcg is None or _fleet.strategy is None:
        raise RuntimeError("fleet.init(is_collective=True, ...) must be called first")
    if not parallel.is_initialized():
        raise RuntimeError("the default process group was destroyed after fleet.init(); call fleet.init() again")
    return _fleet.strategy, _fleet.hcg


def get_hybrid_communicate_group() -> HybridCommunicateGroup:
    """This rank's ``HybridCommunicateGroup`` (after ``init``).

    Example::

        hcg = fleet.get_hybrid_communicate_group()
        mp_group = hcg.get_model_parallel_group()
        torch.distributed.all_reduce(partial_sum, group=mp_group)
    """
    return fleet_state()[1]


def worker_index() -> int:
    """This process's rank (torchrun's ``RANK`` before ``init``).

    Example::

        print(f"worker {fleet.worker_index()} of {fleet.worker_num()}")
    """
    return parallel.get_rank()


def worker_num() -> int:
    """The number of processes (torchrun's ``WORLD_SIZE`` before ``init``).

    Example::

        steps_per_epoch = len(dataset) // (batch_size * fleet.worker_num())
    """
    return parallel.get_world_size()


def is_first_worker() -> bool:
    """Whether this is rank 0.

    Example::

        if fleet.is_first_worker():
            torch.save(model.state_dict(), "model.pt")
    """
    return worker_index() == 0


def local_rank() -> int:
    """This process's rank on its machine (torchrun's ``LOCAL_RANK``, 0 when unset). Paddle
    returns it as a string.

    Example::

        device = torch.device("cuda", fleet.local_rank())
    """
    return parallel.env_int("LOCAL_RANK", 0)


def barrier_worker() -> None:
    """Wait for every rank (nothing to wait for in a single process without a group).

    Example::

        if fleet.is_first_worker():
            write_vocabulary()
        fleet.barrier_worker()
    """
    if parallel.is_initialized():
        dist.barrier()
