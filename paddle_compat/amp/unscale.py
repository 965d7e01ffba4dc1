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

from .master_grad import grad_of

# Flags stay exactly 0 or 1: torch's fused optimizers skip only when found_inf == 1.


def grads_to_unscale(optimizer: torch.optim.Optimizer) -> list[Tensor]:
    """The grads the optimizer will use: each param's ``main_grad`` if master_grad made one,
    else its ``.grad``.

    An optimizer that steps on other tensors than its params' grads (a master-weight wrapper)
    names them through a ``_paddle_compat_grads()`` method.
    """
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


def _on(t: Tensor, device: torch.device, cache: dict[torch.device, Tensor]) -> Tensor:
    if device not in cache:
        cache[device] = t.to(device, non_blocking=True)
    return cache[device]


def unscale_(grads: list[Tensor], inv_scale: Tensor, found_inf: Tensor, check_output: bool) -> None:
    """In place ``g = T(f32(g) * inv_scale)``; set ``found_inf`` to 1 if any result is inf/NaN.

    ``check_output`` adds a read-only pass over the results, needed only when scale < 1.
    """
    inv_by_device = {inv_scale.device: inv_scale}
    found_by_device = {found_inf.device: found_inf}
    for (device, _), bucket in _buckets(grads).items():
        found = found_by_device.setdefault(device, torch.zeros_like(found_inf, device=device))
        torch._amp_foreach_non_finite_check_and_unscale_(bucket, found, _on(inv_scale, device, inv_by_device))
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
        peaks = _peaks(bucket)
        if peaks is None:
            continue
        # Widened to float32 as Paddle's kernel does (float64 grads stay float64).
        peaks = peaks.to(torch.promote_types(dtype, torch.float32))
        unscaled = (peaks * _on(inv_scale, device, inv_by_device)).to(dtype)
        bad = (~torch.isfinite(unscaled)).any().to(found_inf.dtype)
        found = found_by_device.setdefault(device, torch.zeros_like(found_inf, device=device))
        torch.maximum(found, bad, out=found)
    _gather(found_by_device, found_inf)


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
            torch.maximum(found_inf, found.to(found_inf.device, non_blocking=True), out=found_inf)


def all_reduce_max(found_inf: Tensor, group: Any) -> None:
    """Make ``found_inf`` the MAX over the ranks of ``group``, in place: every rank then skips
    the same steps and moves the scale the same way.

    The collective runs on the flag's device when the group's backend serves it, else on the
    other device the group serves (a CPU flag under NCCL goes through the current CUDA
    device). Issued on the current stream: on CUDA the host does not wait for it.
    """
    import torch.distributed as dist  # only distributed runs pay for the import

    device = found_inf.device
    if device.type == "cpu" and not _serves_cpu(group):
        reduced = found_inf.to(torch.device("cuda", torch.cuda.current_device()))
        dist.all_reduce(reduced, op=dist.ReduceOp.MAX, group=group)
        found_inf.copy_(reduced)
        return
    dist.all_reduce(found_inf, op=dist.ReduceOp.MAX, group=group)


def _serves_cpu(group: Any) -> bool:
    import torch.distributed as dist

    backend = str(dist.get_backend(group)).lower()
    return "gloo" in backend or "cpu" in backend or "mpi" in backend
