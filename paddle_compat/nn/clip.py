"""``paddle.nn.ClipGradBy*`` on torch tensors.

A clip object is handed to an optimizer (``grad_clip=``), which calls it inside ``step()`` on the
list of ``(param, grad)`` pairs, after a GradScaler has unscaled the gradients and before weight decay.
As in Paddle, ``ClipGradByGlobalNorm`` scales the gradients in place (``param.grad`` changes) while
``ClipGradByValue`` and ``ClipGradByNorm`` return new gradients and leave ``param.grad`` as it was.
Parameters with ``need_clip = False`` are passed through unclipped.

On CPU the squared L2 norms are summed in the order of Paddle's CPU kernel (Eigen's AVX reduction:
8 float32 or 4 float64 lanes, two accumulators, halving above 1024 packets), so fp32/fp64 clipping is
bit-exact to Paddle on CPU. On CUDA Paddle reduces with cub, whose order is not reproduced: there the
norm can differ from Paddle's by a few ulps.

DTensor gradients (FSDP2, tensor parallelism) are clipped by the norm of the whole tensors: each rank
sums the squares of its shards, the sums are all-reduced over the groups the shards are spread on
(``_dtensor.shard_groups``), and each rank scales its own shards. The partial sums add up in another
order than one process's, as in Paddle's sharded clip: a few ulps apart.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from .. import _checks, _native
from .._devices import PLAIN_TYPES
from .._dtensor import any_dtensor, local, shard_groups, wrap_like
from .._numerics import sqrt_rn

__all__ = ["ClipGradBase", "ClipGradByGlobalNorm", "ClipGradByNorm", "ClipGradByValue", "GradientClipBase"]

ParamsGrads = list[tuple[Tensor, Tensor]]


# --- Paddle's CPU reduction order ------------------------------------------------------------------
_PACKET_BYTES = 32  # Paddle's CPU wheels vectorise Eigen with AVX (256-bit packets)
_LEAF_PACKETS = 1024  # Eigen halves a reduction above this many packets


def _split_plan(first: int, num: int, lanes: int) -> tuple[Any, ...]:
    """The tree of contiguous leaves Eigen reduces ``num`` values starting at ``first`` into."""
    if num <= lanes * _LEAF_PACKETS:
        return (first, num)
    half = -(-num // 2)
    split = lanes * -(-(first + half) // lanes)  # the split point is aligned on a packet boundary
    num_left = min(split - first, num)
    left = _split_plan(first, num_left, lanes)
    if num_left == num:
        return left
    return (left, _split_plan(split, num - num_left, lanes))


def _leaves(plan: tuple[Any, ...]) -> list[tuple[int, int]]:
    if isinstance(plan[0], int):
        return [plan]
    return _leaves(plan[0]) + _leaves(plan[1])


def _eigen_sum(x: Tensor) -> Tensor:
    """Sum of a 1-D float32/float64 CPU tensor, rounded step by step as Eigen's AVX reduction does.

    Within a leaf, packets are accumulated alternately into two packet accumulators (a trailing odd
    packet goes to the first), the two are added, the packet is folded as ``(a0+a2)+(a1+a3)`` after
    adding its upper half to its lower half, and the scalar tail (summed left to right) is added last.
    Leaves are combined along the halving tree. Zero padding keeps every rounding step unchanged
    because all inputs are squares (non-negative).
    """
    lanes = _PACKET_BYTES // x.element_size()
    plan = _split_plan(0, x.numel(), lanes)
    leaves = _leaves(plan)
    rows = max(n // (2 * lanes) + (1 if (n // lanes) % 2 else 0) for _, n in leaves)
    # acc[r, 0] and acc[r, 1]: row r of the two packet accumulators' inputs, for every leaf at once
    # (laid out so that each row is one contiguous tensor: one add per row, not per leaf).
    acc = torch.zeros(max(rows, 1), 2, len(leaves), lanes, dtype=x.dtype)
    tail = torch.zeros(len(leaves), lanes, dtype=x.dtype)
    for i, (first, num) in enumerate(leaves):
        pairs = num // (2 * lanes)
        packets = num // lanes
        acc[:pairs, :, i] = x[first : first + pairs * 2 * lanes].view(pairs, 2, lanes)
        if packets % 2:
            acc[pairs, 0, i] = x[first + pairs * 2 * lanes : first + packets * lanes]
        rest = num - packets * lanes
        tail[i, :rest] = x[first + packets * lanes : first + num]
    # Each lane is summed row after row in x's dtype, as before: in-place adds round identically.
    pab = torch.zeros_like(acc[0])
    for row in acc:
        pab.add_(row)
    pa, pb = pab[0], pab[1]
    pa = pa + pb
    half = pa[:, : lanes // 2] + pa[:, lanes // 2 :]
    if lanes == 8:
        folded = (half[:, 0] + half[:, 2]) + (half[:, 1] + half[:, 3])
    else:
        folded = half[:, 0] + half[:, 1]
    scalar = torch.zeros(len(leaves), dtype=x.dtype)
    for k in range(lanes - 1):
        scalar = scalar + tail[:, k]
    leaf_sums = iter(list((scalar + folded).unbind(0)))

    def combine(node: tuple[Any, ...]) -> Tensor:
        if isinstance(node[0], int):
            return next(leaf_sums)
        return combine(node[0]) + combine(node[1])

    return combine(plan)


def _sum(x: Tensor) -> Tensor:
    """Paddle's ``sum`` of a 1-D tensor of non-negative values, in ``x``'s dtype (0-D result)."""
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        return _eigen_sum(x.reshape(-1))
    # Low precision (and CUDA, where cub's order is not reproduced): accumulate in float32 at least.
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    return x.reshape(-1).to(acc).sum().to(x.dtype)


def squared_l2_norm(x: Tensor) -> Tensor:
    """``sum(x*x)`` in ``x``'s dtype, as Paddle's ``squared_l2_norm`` kernel."""
    return squared_l2_norms([x])[0]


def squared_l2_norms(xs: Sequence[Tensor]) -> list[Tensor]:
    """``squared_l2_norm`` of each tensor (0-D tensors), a few calls for many tensors.

    On CPU the compiled kernels sum float32/float64 tensors in one call, in Eigen's order as
    ``_eigen_sum``; on CUDA one multi-tensor norm per (device, dtype) computes ``sqrt(sum(x*x))``
    in float32 (float64 for float64), squared back: within an ulp or two of the sum of squares,
    whose order on the GPU is not Paddle's anyway.
    """
    out: list[Tensor | None] = [None] * len(xs)
    # (a GPU-only run never looks for the CPU kernels, nor warns that they are missing)
    kern = _native.kernels() if any(x.is_cpu for x in xs) else None
    if kern is not None:
        for dtype in (torch.float32, torch.float64):
            # plain CPU tensors (``_devices.addressable``, checked cheaply at every step: a meta tensor is
            # not on the CPU, and a lazily negated one squares to the same sum)
            picked = [
                i for i, x in enumerate(xs)
                if type(x) in PLAIN_TYPES and x.is_cpu and x.dtype == dtype and x.is_contiguous()
            ]
            if picked:
                rows = array("q")
                for i in picked:
                    rows.extend((xs[i].numel(), xs[i].data_ptr(), _native.DTYPE[dtype]))
                for i, total in zip(picked, torch.tensor(kern.sumsq(rows), dtype=dtype).unbind()):
                    out[i] = total  # a float32 sum is exact as the double the kernel returns
    buckets: dict[tuple[torch.device, torch.dtype], list[int]] = {}
    for i, x in enumerate(xs):
        if out[i] is None and x.is_cuda:
            buckets.setdefault((x.device, x.dtype), []).append(i)
    for (_, dtype), picked in buckets.items():
        acc = torch.float64 if dtype == torch.float64 else torch.float32
        norms = torch.stack(torch._foreach_norm([xs[i] for i in picked], 2, dtype=acc))
        for i, sq in zip(picked, (norms * norms).to(dtype).unbind()):
            out[i] = sq
    return [sq if sq is not None else _squared_l2_norm_torch(x) for sq, x in zip(out, xs)]


def _squared_l2_norm_torch(x: Tensor) -> Tensor:
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        return _eigen_sum((x * x).reshape(-1))
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xa = x.reshape(-1).to(acc)
    return (xa * xa).sum().to(x.dtype)


def _total(grads: Sequence[Tensor], sum_dtype: torch.dtype) -> Tensor:
    """The sum of the squares of ``grads`` (plain tensors) in Paddle's order: per tensor in its
    dtype, per dtype group (fp16+bf16, fp32, fp64), then the groups, in ``sum_dtype``."""
    low: list[Tensor] = []
    fp32: list[Tensor] = []
    fp64: list[Tensor] = []
    for sq in squared_l2_norms(grads):
        bucket = low if sq.dtype in (torch.float16, torch.bfloat16) else fp32 if sq.dtype == torch.float32 else fp64
        bucket.append(sq)
    device = grads[0].device
    parts = []
    if low:
        dtypes = {t.dtype for t in low}
        low_dtype = dtypes.pop() if len(dtypes) == 1 else torch.float32  # fp16 and bf16: float32
        parts.append(_sum(torch.stack([t.to(low_dtype) for t in low])).to(sum_dtype))
    if fp32:
        parts.append(_sum(torch.stack(fp32)).to(sum_dtype))
    if fp64:
        parts.append(_sum(torch.stack(fp64)))
    return _sum(torch.stack([t.to(device) for t in parts]))


class ClipGradBase:
    """Base class of the gradient clips an optimizer accepts as ``grad_clip``."""

    def __call__(self, params_grads: Sequence[tuple[Tensor, Tensor | None]]) -> ParamsGrads:
        with torch.no_grad():
            return self._clip(params_grads)

    def _clip(self, params_grads: Sequence[tuple[Tensor, Tensor | None]]) -> ParamsGrads:
        """Clip each gradient on its own into a new tensor (``_clip_one``); drop missing gradients."""
        return [
            (p, self._clip_one(g) if getattr(p, "need_clip", True) else g) for p, g in params_grads if g is not None
        ]

    def _clip_one(self, g: Tensor) -> Tensor:
        raise NotImplementedError


GradientClipBase = ClipGradBase  # Paddle's other name for the base class


def _check_float(name: str, value: object) -> float:
    return float(_checks.number(name, value))  # NaN too: the callers' texts (Paddle's) refuse it


class ClipGradByValue(ClipGradBase):
    """Clamp every gradient element into ``[min, max]``; ``min`` defaults to ``-max`` (``max > 0``).

    Bad bounds raise ``ValueError`` here, at construction: ``min > max`` or a NaN bound with
    Paddle's message (Paddle raises it at the first clip), ``max <= 0`` without ``min`` (Paddle
    asserts).
    """

    def __init__(self, max: float, min: float | None = None) -> None:  # noqa: A002 (Paddle's names)
        max_ = _check_float("max", max)
        if min is None:
            if not max_ > 0.0:
                raise ValueError(f"max should be greater than 0 when min is not given, but received {max_}")
            min_ = -max_
        else:
            min_ = _check_float("min", min)
        if not min_ <= max_:
            raise ValueError(
                f"max should be greater than or equal to min. But received min = {min_:f}, max = {max_:f}"
            )
        self.max = max_
        self.min = min_

    def __str__(self) -> str:
        return f"Clip Gradient By Value, min = {self.min:f}, max={self.max:f}"

    def _clip_one(self, g: Tensor) -> Tensor:
        return torch.clamp(g, self.min, self.max)


class ClipGradByNorm(ClipGradBase):
    """Scale each gradient whose own L2 norm exceeds ``clip_norm`` by ``clip_norm / norm``.

    ``clip_norm`` must be > 0 (infinity: never clip); a bad one raises ``ValueError`` with Paddle's
    message here, at construction (Paddle raises it at the first clip).
    """

    def __init__(self, clip_norm: float) -> None:
        clip_norm = _check_float("clip_norm", clip_norm)
        if not clip_norm > 0:
            raise ValueError(f"clip_norm should be greater than 0. Received clip_norm is {clip_norm:f}.")
        self.clip_norm = clip_norm

    def __str__(self) -> str:
        return f"Gradient Clip By Norm, clip_norm={self.clip_norm:f}"

    def _clip_one(self, g: Tensor) -> Tensor:
        # Paddle's kernel, in g's dtype: scaling = 1 when norm <= clip_norm, else
        # clip_norm / (norm + eps) with eps = 1e-6 only when norm <= 1e-30.
        # A DTensor's norm is the whole tensor's (its shards' squares summed over the ranks);
        # each rank scales its own shard.
        shard = local(g)
        sq = squared_l2_norm(shard)
        for group in shard_groups(g, "the gradient"):
            sq = sq.reshape(1)
            dist.all_reduce(sq, group=group)
            sq = sq.reshape(())
        norm = sqrt_rn(sq)
        max_norm = torch.full((), self.clip_norm, dtype=torch.float32, device=shard.device).to(shard.dtype)
        eps = (norm <= 1e-30).to(shard.dtype) * 1e-6
        scaling = torch.where(norm <= max_norm, torch.ones_like(norm), max_norm / (norm + eps))
        return wrap_like(shard * scaling, g) if shard is not g else g * scaling


class ClipGradByGlobalNorm(ClipGradBase):
    """Scale all gradients by ``clip_norm / max(global_norm, clip_norm)``, in place.

    As in Paddle the factor is always multiplied in (it is 1.0 under the limit) unless
    ``auto_skip_clip=True``, which skips the multiply under the limit at the cost of one host sync.
    Squared norms are computed in each gradient's dtype and summed per dtype group (fp16+bf16,
    fp32, fp64); the total is float64 if any gradient is, else float32.

    ``clip_norm`` must be finite and > 0 (``ValueError``): Paddle takes any value, and NaN or
    infinity turn every gradient into NaN, 0 zeroes them, a negative value flips their sign.
    """

    def __init__(self, clip_norm: float, group_name: str = "default_group", auto_skip_clip: bool = False) -> None:
        clip_norm = _check_float("clip_norm", clip_norm)
        if not 0 < clip_norm < math.inf:
            raise ValueError(f"clip_norm should be a finite number greater than 0, but received {clip_norm}")
        self.clip_norm = clip_norm
        self.auto_skip_clip = _checks.flag("auto_skip_clip", auto_skip_clip)
        if not isinstance(group_name, str):
            raise TypeError(f"group_name should be a str, but received {type(group_name).__name__}")
        self.group_name = group_name

    def __str__(self) -> str:
        return f"Gradient Clip By GlobalNorm, global_norm={self.clip_norm:f}"

    def global_norm(self, grads: Sequence[Tensor]) -> Tensor:
        """The global norm Paddle would compute for these gradients (a 0-D tensor).

        DTensor gradients (FSDP2, tensor parallelism) count whole: the squares of each rank's
        shards are summed as above, that sum is all-reduced over the groups the shards are spread
        on, and the sum of the plain or replicated gradients is added once. The partial sums thus
        add up in another order than one process's sum over whole tensors (as in Paddle's sharded
        clip): the norm can differ from one process's by a few ulps.
        """
        sum_dtype = torch.float64 if any(g.dtype == torch.float64 for g in grads) else torch.float32
        if not any_dtensor(grads):
            return sqrt_rn(_total(grads, sum_dtype))
        spread: dict[tuple[Any, ...], list[Tensor]] = {}  # shard groups -> local shards
        for i, g in enumerate(grads):
            spread.setdefault(shard_groups(g, f"gradient {i}"), []).append(local(g))
        totals = []
        for groups, shards in spread.items():
            total = _total(shards, sum_dtype).reshape(1)
            for group in groups:
                dist.all_reduce(total, group=group)
            totals.append(total.reshape(()))
        return sqrt_rn(totals[0] if len(totals) == 1 else _sum(torch.stack(totals)))

    def _clip(self, params_grads: Sequence[tuple[Tensor, Tensor | None]]) -> ParamsGrads:
        """Scale the gradients in place, as Paddle does, also on a step a GradScaler skips (its
        optimizers clip before they skip): an inf or NaN norm makes them 0 or NaN there."""
        present = [(p, g) for p, g in params_grads if g is not None]
        grads = [g for p, g in present if getattr(p, "need_clip", True)]
        if not grads:
            return present
        norm = self.global_norm(grads)
        max_norm = torch.full((), self.clip_norm, dtype=norm.dtype, device=norm.device)
        if self.auto_skip_clip:
            if not bool(norm > max_norm):  # a host sync, as in Paddle
                return present
            factor = max_norm / norm
        else:
            factor = max_norm / torch.maximum(norm, max_norm)
        scale_(grads, factor)
        return present


def scale_(grads: Sequence[Tensor], factor: Tensor) -> None:
    """Multiply ``grads`` by the 0-D ``factor`` in place, as Paddle's global-norm clips do, a
    DTensor's local shard where it lies; one pass per (device, dtype), ``factor`` cast to each."""
    buckets: dict[tuple[torch.device, torch.dtype], list[Tensor]] = {}
    for g in map(local, grads):
        buckets.setdefault((g.device, g.dtype), []).append(g)
    for (device, dtype), bucket in buckets.items():
        torch._foreach_mul_(bucket, factor.to(device=device, dtype=dtype))
