"""``paddle.distributed``'s environment functions on ``torch.distributed``.

Processes are started by ``torchrun`` (or anything that sets its variables: ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``); Paddle's own launcher and its
``PADDLE_*`` variables are not read.
"""

from __future__ import annotations

import datetime
import os
import warnings
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["get_rank", "get_world_size", "init_parallel_env", "is_initialized"]


def is_initialized() -> bool:
    """Whether torch's default process group exists (Paddle's ``is_initialized``).

    Example::

        if not paddle_compat.distributed.is_initialized():
            paddle_compat.distributed.init_parallel_env()
    """
    return dist.is_available() and dist.is_initialized()


def get_rank(group: Any = None) -> int:
    """This process's rank in ``group`` (the default group when ``None``), as Paddle's ``get_rank``.

    Before the default group exists, torchrun's ``RANK`` (0 when unset), as Paddle reads its
    launcher's variable. A process outside ``group`` gets -1.

    Args:
        group: a torch process group; ``None``: the default group (only ``None`` before it exists).

    Example::

        if paddle_compat.distributed.get_rank() == 0:
            torch.save(model.state_dict(), "model.pt")
    """
    if is_initialized():
        return dist.get_rank(group)
    if group is not None:
        raise RuntimeError("get_rank(group): the default process group is not initialized")
    return env_int("RANK", 0)


def get_world_size(group: Any = None) -> int:
    """The number of processes in ``group`` (the default group when ``None``).

    Before the default group exists, torchrun's ``WORLD_SIZE`` (1 when unset). A process outside
    ``group`` gets -1 (torch's answer).

    Args:
        group: a torch process group; ``None``: the default group (only ``None`` before it exists).

    Example::

        per_rank_batch = global_batch // paddle_compat.distributed.get_world_size()
    """
    if is_initialized():
        return dist.get_world_size(group)
    if group is not None:
        raise RuntimeError("get_world_size(group): the default process group is not initialized")
    return env_int("WORLD_SIZE", 1)


def init_parallel_env(*, backend: str | None = None, timeout: datetime.timedelta | None = None) -> Any:
    """Create torch's default process group from torchrun's environment; returns it.

    As in Paddle, a single process (``WORLD_SIZE`` unset or 1) gets a warning and nothing is
    done (``None`` is returned); an existing default group is returned as it is.

    Args:
        backend: ours (keyword only). Default: ``"cpu:gloo,cuda:nccl"`` where CUDA and NCCL are
            present (CUDA tensors on NCCL, CPU tensors on gloo), else ``"gloo"``.
        timeout: ours (keyword only): how long a collective may wait for the other ranks
            before failing; torch's default when ``None``.

    Differences from Paddle: no ``nccl_config``; on CUDA it also selects the device
    ``LOCAL_RANK`` (``torch.cuda.set_device``), which Paddle's launcher does for you.

    Example::

        # torchrun --nproc-per-node 2 train.py
        import paddle_compat.distributed as dist
        dist.init_parallel_env()
        model = torch.nn.parallel.DistributedDataParallel(model)
    """
    check_options(backend, timeout)
    if is_initialized():
        return dist.group.WORLD
    if env_int("WORLD_SIZE", 1) < 2:
        warnings.warn(
            "Currently not a parallel execution environment, "
            "`paddle.distributed.init_parallel_env` will not do anything.",
            stacklevel=2,
        )
        return None
    start(backend, timeout, single_process=False)
    return dist.group.WORLD


def default_backend() -> str:
    """``"cpu:gloo,cuda:nccl"`` where CUDA and NCCL are present, else ``"gloo"``."""
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"


def start(backend: str | None, timeout: datetime.timedelta | None, *, single_process: bool) -> None:
    """Create the default group: from torchrun's variables, or for one process with no launcher
    (an in-memory store, rank 0 of 1)."""
    backend = backend or default_backend()
    if "nccl" in backend and torch.cuda.is_available():
        torch.cuda.set_device(env_int("LOCAL_RANK", 0))
    options: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    if single_process:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, **options)
    else:
        dist.init_process_group(backend, **options)


def check_options(backend: Any, timeout: Any) -> None:
    """``TypeError`` for a ``backend`` that is not a str, a ``timeout`` that is not a timedelta."""
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"backend must be a str such as 'gloo' or 'cpu:gloo,cuda:nccl', got {type(backend).__name__}")
    if backend is not None:  # torch would assert, later, without naming the argument
        names = [part.split(":", 1)[-1].strip().lower() for part in backend.split(",")]
        known = [name for name in dist.Backend.backend_list if name != "undefined"]
        unknown = [name for name in names if name not in known]
        if unknown:
            raise ValueError(f"backend {backend!r} names no known backend ({', '.join(known)}): {unknown}")
    if timeout is not None and not isinstance(timeout, datetime.timedelta):
        raise TypeError(f"timeout must be a datetime.timedelta, got {type(timeout).__name__}")


def env_int(name: str, default: int) -> int:
    """The launcher's integer variable ``name`` (``default`` when unset or empty)."""
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {value!r}") from None
