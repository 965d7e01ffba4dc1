"""Gradient mechanics: which grads to unscale, and one fused pass per (device, dtype) bucket.

Paddle's kernel (``check_finite_and_unscale``) computes ``T(f32(g) * f32(1 / scale))`` and flags
inf/NaN in that unscaled result. torch's ``_amp_foreach_non_finite_check_and_unscale_`` does
the same multiply in one read-and-write pass per bucket, bit for bit, but flags inf/NaN in its
*input*. The two flags agree whenever scale >= 1, since unscaling then cannot overflow; below
1 the caller asks for an extra read-only check of the output.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _native
from .._devices import addressable, copy_to, on_device
from .master_grad import grad_of

# Flags stay exactly 0 or 1: torch's fused optimizers skip only when found_inf == 1.


def grads_to_unscale(optimizer: torch.optim.Optimizer) -> list[Tensor]:
    """The grads the optimizer will use: each param's ``main_grad`` if master_grad made one,
    else its ``.grad``.

    An optimizer that steps on other tensors than its params' grads (a master-weight wrapper)
    names them through a ``_paddle_compat_grads()`` method.
    """
    check = getattr(optimizer, "_compat_check_grads", None)  # ours: a gradient the step would refuse, refused now
    if check is not None:
        check()
    hook = getattr(optimizer, "_paddle_compat_grads", None)
    grads = hook() if hook is not None else (grad_of(p) for group in optimizer.param_groups for p in group["params"])
    grads = [g for g in grads if g is not None]
    for g in grads:
        if g.is_sparse:
            raise NotImplementedError("GradScaler does not support sparse gradients (Paddle has none either)")
    return grads


def _buckets(grads: Iterable[Tensor]) -> dict[tuple[torch.device, torch.dtype], list[Tensor]]:
    buckets: dict[tuple[torch.device, torch.dtype], list[Tensor]] = defaultdict(list)
    for g in grads:
        buckets[(g.device, g.dtype)].append(g)
    return buckets


def _flag_on(found_inf: Tensor, device: torch.device, flags: dict[torch.device, Tensor]) -> Tensor:
    """The flag for grads on ``device``: ``found_inf`` itself on its own device, a zeroed one
    elsewhere (``_gather`` folds those in). Made only when missing: this runs every step."""
    if device not in flags:
        flags[device] = torch.zeros_like(found_inf, device=device)
    return flags[device]


def unscale_(grads: list[Tensor], inv_scale: Tensor, found_inf: Tensor | None, check_output: bool) -> None:
    """In place ``g = T(f32(g) * inv_scale)``; set ``found_inf`` to 1 if any result is inf/NaN.

    ``check_output`` adds a read-only pass over the results, needed only when scale < 1.
    ``found_inf=None``: no flag is wanted (an optimizer unscaling what a scaler has checked already).
    """
    flag = found_inf if found_inf is not None else torch.zeros((), device=inv_scale.device)
    inv_by_device = {inv_scale.device: inv_scale}
    found_by_device = {flag.device: flag}
    for (device, _), bucket in _buckets(grads).items():
        found = _flag_on(flag, device, found_by_device)
        # 0-d views: with FSDP2's DTensor grads, a shape-[1] operand makes DTensor warn.
        inv = on_device(inv_scale, device, inv_by_device).view(())
        torch._amp_foreach_non_finite_check_and_unscale_(bucket, found.view(()), inv)
    if found_inf is None:
        return
    if check_output:
        one = torch.ones_like(inv_scale)
        any_nonfinite(grads, one, found_inf)
    _gather(found_by_device, found_inf)


def any_nonfinite(grads: list[Tensor], inv_scale: Tensor, found_inf: Tensor) -> None:
    """Set ``found_inf`` to 1 if ``T(f32(g) * inv_scale)`` has an inf/NaN, without writing ``g``.

    Rounding is monotone, so the unscaled tensor overflows exactly where its largest magnitude
    does: one max-abs reduction per tensor (a read pass) decides it, NaN included.
    """
    inv_by_device = {inv_scale.device: inv_scale}
    found_by_device = {found_inf.device: found_inf}
    for (device, dtype), bucket in _buckets(grads).items():
        compiled = _compiled_check(bucket, inv_scale)
        if compiled is not None:
            if compiled:
                _flag_on(found_inf, device, found_by_device).fill_(1)
            continue
        peaks = _peaks(bucket)
        if peaks is None:
            continue
        # Widened to float32 as Paddle's kernel does (float64 grads stay float64).
        peaks = peaks.to(torch.promote_types(dtype, torch.float32))
        unscaled = (peaks * on_device(inv_scale, device, inv_by_device).view(())).to(dtype)
        # Magnitudes (or NaN): finite exactly when at most the dtype's largest value (NaN
        # compares false). One comparison where isfinite decomposes into four operations.
        bad = (unscaled <= torch.finfo(dtype).max).all().logical_not()
        found = _flag_on(found_inf, device, found_by_device)
        torch.maximum(found.view(()), bad, out=found.view(()))
    _gather(found_by_device, found_inf)


def _compiled_check(bucket: list[Tensor], inv_scale: Tensor) -> bool | None:
    """The flag of CPU grads, from the compiled kernels: every tensor read once, in one call, and
    no torch operation after (about 3x faster than the torch path below on a 1M-parameter model's
    grads); ``None`` where they cannot take the bucket."""
    if bucket[0].device.type != "cpu" or inv_scale.device.type != "cpu" or bucket[0].dtype not in _native.DTYPE:
        return None
    kern = _native.kernels()
    if kern is None or not (all(map(addressable, bucket)) and all(map(Tensor.is_contiguous, bucket))):
        return None
    return kern.nonfinite(bucket, inv_scale.item())


def _peaks(bucket: list[Tensor]) -> Tensor | None:
    """The largest magnitude of each tensor (NaN where it holds a NaN), one read of each."""
    if bucket[0].device.type != "cpu":
        return torch.stack(torch._foreach_norm(bucket, math.inf))
    # On CPU torch's foreach norm falls back to a slow per-tensor path; aminmax is a
    # vectorised single read, about 30x faster. It has no value for an empty tensor.
    pairs = [torch.aminmax(g) for g in bucket if g.numel()]
    if not pairs:
        return None
    lows, highs = zip(*pairs)
    return torch.maximum(torch.stack(lows).neg(), torch.stack(highs))


def _gather(found_by_device: dict[torch.device, Tensor], found_inf: Tensor) -> None:
    for device, found in found_by_device.items():
        if device != found_inf.device:
            torch.maximum(found_inf, copy_to(found, found_inf.device), out=found_inf)


def all_reduce_max(found_inf: Tensor, group: Any) -> None:
    """Make ``found_inf`` the MAX over the ranks of ``group``, in place: every rank then skips
    the same steps and moves the scale the same way.

    The collective runs on the flag's device when the group's backend serves that device type,
    else on one it serves: a CPU flag (CPU-offloaded grads) under an NCCL-only group goes
    through the current CUDA device, a CUDA flag under a CPU-only group through the host.

    Synchronous in torch's sense (``async_op=False``): on NCCL that enqueues the collective and
    makes the current stream wait for it, without blocking the host, so the fused optimizer
    path stays free of host syncs; ``async_op=True`` without ``work.wait()`` would let the
    optimizer read the flag before the collective wrote it. On gloo the host waits for it.
    Detours through another device (above) copy back with a host sync.
    """
    import torch.distributed as dist  # only distributed runs pay for the import

    device = _reduction_device(found_inf.device, dist.get_backend_config(group))
    flag = found_inf if device == found_inf.device else found_inf.to(device)
    try:
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    except RuntimeError as error:  # DistBackendError, a peer that died or timed out
        raise RuntimeError(
            "GradScaler: the all-reduce (MAX) of found_inf over its process_group failed. Every rank "
            "of the group must call unscale_/step/minimize on the same iterations; if another rank "
            f"failed, its own error is the cause. {type(error).__name__}: {error}"
        ) from error
    if flag is not found_inf:
        found_inf.copy_(flag)


def _reduction_device(device: torch.device, backend_config: str) -> torch.device:
    """Where to reduce a flag that lives on ``device``, for a group whose backend config reads
    like ``"cpu:gloo,cuda:nccl"`` (``torch.distributed.get_backend_config``)."""
    served = [part.split(":", 1)[0].strip() for part in backend_config.split(",") if ":" in part]
    if device.type in served:
        return device
    if "cpu" in served:
        return torch.device("cpu")
    if served:  # an accelerator the group serves: its current device
        return torch.device(served[0], torch.get_device_module(served[0]).current_device())
    raise RuntimeError(f"GradScaler: process_group serves no device ({backend_config!r})")
