"""Paddle's group-sharded (ZeRO) training on FSDP2.

Level mapping (Paddle -> ``fully_shard``):

- ``"os"`` and ``"os_g"`` (Paddle implements both as stage 2): one FSDP unit for the whole model
  with ``reshard_after_forward=False``: optimizer states and gradients are sharded, parameters
  are gathered once per step and kept through backward (ZeRO-2).
- ``"p_g_os"`` (stage 3): parameters too. Every submodule whose not-yet-sharded parameters reach
  ``segment_size`` elements becomes its own unit (children first), then the root, with
  ``reshard_after_forward=True`` (ZeRO-3): parameters are gathered per unit and freed after use.

The scaler needs nothing: FSDP2 gradients are DTensors, and torch's DTensor reduces the inf/NaN
flag of the unscale over the mesh (MAX), so every rank of ``group`` skips the same steps.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ... import _checks
from ...amp.grad_scaler import AmpScaler
from .. import parallel

__all__ = ["group_sharded_parallel", "save_group_sharded_model"]

_LEVELS = ("os", "os_g", "p_g_os")


def group_sharded_parallel(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    level: str,
    scaler: AmpScaler | None = None,
    group: Any = None,
    offload: bool = False,
    sync_buffers: bool = False,
    buffer_max_size: int = 2**23,
    segment_size: int = 2**20,
    sync_comm: bool = False,
    dp_group: Any = None,
    exclude_layer: Any = None,
) -> tuple[nn.Module, torch.optim.Optimizer, AmpScaler | None]:
    """Shard the optimizer states, gradients (and parameters for ``"p_g_os"``) over ``group``.

    The model is sharded in place with FSDP2 (see the module doc for the level mapping), after
    its parameters and buffers are broadcast from the group's first rank (as Paddle does); the
    optimizer is re-pointed at the sharded parameters, and any state it already holds (e.g.
    loaded from ``save_group_sharded_model``'s ``model.pdopt``) is sharded too. The scaler is
    returned as it is (see the module doc). Every rank of ``group`` must call it.

    Args:
        model: the model, on its device.
        optimizer: a ``paddle_compat.optimizer`` or ``torch.optim`` optimizer over ``model``'s
            parameters (ours step each rank's shards with Paddle's formulas).
        level: ``"os"``, ``"os_g"`` or ``"p_g_os"``.
        scaler: a ``paddle_compat.amp.GradScaler``/``AmpScaler``, or ``None``.
        group: the process group to shard over (default: the whole world).
        offload: keep sharded parameters, gradients and optimizer states on the CPU
            (``CPUOffloadPolicy``); on a CPU model there is nothing to offload and it is ignored.
        sync_buffers: broadcast the buffers from the group's first rank before every forward.
        buffer_max_size, sync_comm: Paddle's communication tuning; accepted and ignored.
        segment_size: for ``"p_g_os"``, the smallest number of parameter elements that gets its
            own FSDP unit.
        dp_group, exclude_layer: must be ``None`` (not mapped).

    Returns ``(model, optimizer, scaler)``.

    Example::

        fleet.init(is_collective=True)
        model, optimizer, scaler = group_sharded_parallel(model, optimizer, "os_g", scaler=scaler)

    Differences from Paddle: works on CPU (gloo) too; no hybrid ``dp_group``; layers cannot be
    excluded; a model decorated with ``master_grad=True`` is refused.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"The model must be the instance of torch.nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"The optimizer must be the instance of torch.optim.Optimizer, got {type(optimizer).__name__}")
    if level not in _LEVELS:
        raise ValueError(f"The level must be os, os_g or p_g_os, got {level!r}")
    if scaler is not None and not isinstance(scaler, AmpScaler):
        raise TypeError(f"scaler must be a paddle_compat.amp.GradScaler or None, got {type(scaler).__name__}")
    for name, value in (("offload", offload), ("sync_buffers", sync_buffers), ("sync_comm", sync_comm)):
        _checks.flag(name, value)
    _checks.at_least("segment_size", _checks.integer("segment_size", segment_size), 1)
    if dp_group is not None or exclude_layer is not None:
        raise NotImplementedError("group_sharded_parallel: dp_group and exclude_layer are not supported")
    _check_optimizer(model, optimizer)
    if any(getattr(p, "_paddle_compat_master_grad", False) for p in model.parameters()):
        raise NotImplementedError(
            "group_sharded_parallel: decorate(..., master_grad=True) keeps float32 gradients through hooks on "
            "the parameters, which FSDP2 replaces; decorate without master_grad"
        )
    if not parallel.is_initialized():
        raise RuntimeError(
            "group_sharded_parallel needs a process group: call fleet.init() or init_parallel_env() first"
        )
    from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, fully_shard

    if isinstance(model, FSDPModule):
        raise ValueError("the model is already sharded")
    device_types = {p.device.type for p in model.parameters()}
    if len(device_types) != 1:
        raise ValueError(f"the model's parameters must be on one device type, got {sorted(device_types)}")
    (device_type,) = device_types

    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )
    from torch.distributed.device_mesh import DeviceMesh

    group = dist.group.WORLD if group is None else group
    source = dist.get_global_rank(group, 0)
    _broadcast(list(model.parameters()) + list(model.buffers()), source, group)
    held_state = get_optimizer_state_dict(model, optimizer) if optimizer.state else None
    owners = [(m, name, p) for m in model.modules() for name, p in m._parameters.items() if p is not None]

    options: dict[str, Any] = {"mesh": DeviceMesh.from_group(group, device_type)}
    if offload and device_type != "cpu":
        options["offload_policy"] = CPUOffloadPolicy()
    if level == "p_g_os":
        _shard_segments(model, segment_size, fully_shard, options)
        fully_shard(model, reshard_after_forward=True, **options)
    else:
        fully_shard(model, reshard_after_forward=False, **options)

    sharded = {id(p): m._parameters[name] for m, name, p in owners}
    for param_group in optimizer.param_groups:
        param_group["params"] = [sharded[id(p)] for p in param_group["params"]]
    optimizer.state.clear()
    if held_state is not None:
        set_optimizer_state_dict(model, optimizer, held_state, options=StateDictOptions(full_state_dict=True))
    if sync_buffers:
        buffers = list(model.buffers())
        model.register_forward_pre_hook(lambda module, args: _broadcast(buffers, source, group))
    return model, optimizer, scaler


def save_group_sharded_model(model: nn.Module, output: str, optimizer: torch.optim.Optimizer | None = None) -> None:
    """Save the full (unsharded) model, and optionally optimizer, state from a sharded model.

    Every rank must call it (the shards are gathered); global rank 0 writes
    ``output/model.pdmodel`` (the model's ``state_dict``) and ``output/model.pdopt`` (the
    optimizer's, in ``torch.optim``'s own format, with our optimizers' ``"LR_Scheduler"``) with
    ``torch.save``; all ranks return once the files exist. To resume, load them into the
    unsharded model and optimizer, then call ``group_sharded_parallel`` (as Paddle documents).

    Args:
        model: a model returned by ``group_sharded_parallel``.
        output: a directory (created if missing).
        optimizer: the optimizer returned with it, or ``None`` to save the model only.

    Example::

        save_group_sharded_model(model, "ckpt", optimizer)
        # later, before sharding:
        model.load_state_dict(torch.load("ckpt/model.pdmodel"))
        optimizer.load_state_dict(torch.load("ckpt/model.pdopt"))
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(model, FSDPModule):
        raise ValueError("Please use the layer which is wrapped with group_sharded_parallel.")
    if not isinstance(output, (str, os.PathLike)):
        raise TypeError(f"output must be a path, got {type(output).__name__}")
    if os.path.isfile(output):
        raise ValueError(f"Saving directory ({output}) should be a directory, not a file")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}")
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)  # values on rank 0 only
    model_state = get_model_state_dict(model, options=options)
    optim_state = get_optimizer_state_dict(model, optimizer, options=options) if optimizer is not None else None
    if dist.get_rank() == 0:
        os.makedirs(output, exist_ok=True)
        torch.save(model_state, os.path.join(output, "model.pdmodel"))
        if optimizer is not None and optim_state is not None:
            # torch's gathered dict keeps only "state" and "param_groups": the optimizer's other
            # entries (our optimizers' "LR_Scheduler", as in Paddle's .pdopt) are added back
            own = {k: v for k, v in optimizer.state_dict().items() if k not in ("state", "param_groups")}
            torch.save({**_indexed(optim_state), **own}, os.path.join(output, "model.pdopt"))
    dist.barrier()


def _check_optimizer(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    if hasattr(optimizer, "_paddle_compat_grads"):
        raise NotImplementedError(
            "group_sharded_parallel: decorate's master-weight wrapper of a torch.optim optimizer steps float32 "
            "copies of the parameters, which FSDP2 does not shard; use paddle_compat.optimizer's optimizers "
            "with multi_precision=True"
        )
    in_model = {id(p) for p in model.parameters()}
    if any(id(p) not in in_model for g in optimizer.param_groups for p in g["params"]):
        raise ValueError("the optimizer holds parameters that are not the model's")


@torch.no_grad()
def _broadcast(tensors: list[torch.Tensor], source: int, group: Any) -> None:
    for tensor in tensors:
        dist.broadcast(tensor.detach(), src=source, group=group)


def _shard_segments(model: nn.Module, segment_size: int, fully_shard: Any, options: dict[str, Any]) -> None:
    """Make each submodule holding >= segment_size not-yet-sharded parameter elements a unit."""

    def visit(module: nn.Module) -> int:
        pending = sum(p.numel() for p in module._parameters.values() if p is not None)
        pending += sum(visit(child) for child in module.children())
        if module is not model and pending >= segment_size:
            fully_shard(module, reshard_after_forward=True, **options)
            return 0
        return pending

    visit(model)


def _indexed(optim_state: dict[str, Any]) -> dict[str, Any]:
    """A parameter-name-keyed optimizer state as ``torch.optim.Optimizer.state_dict()`` keys it:
    parameters numbered in param-group order."""
    number: dict[str, int] = {}
    groups = []
    for group in optim_state["param_groups"]:
        group = dict(group)
        group["params"] = [number.setdefault(name, len(number)) for name in group["params"]]
        groups.append(group)
    return {"state": {number[name]: s for name, s in optim_state["state"].items()}, "param_groups": groups}
