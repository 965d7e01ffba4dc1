"""What Paddle's CPU kernels (Eigen expressions) share, reproduced to the bit: their view of the
hyper-parameters, Adam's moment updates, libm's ``pow`` and Eigen's square root of float32
tensors (Eigen's sum of squares is ``nn.clip.squared_l2_norm``).

Eigen's float32 ``sqrt`` on packets (Paddle's build: 8 lanes, AVX, no FMA) is its fast one: the
CPU's approximate reciprocal square root (``vrsqrtps``) refined by one Newton step,
``x * (r * (1.5 - (0.5*x) * (r*r)))``, with 0 for zero and subnormal inputs (and NaN for +inf);
it is within 3 ulps of the true root. Elements past the last whole packet take ``std::sqrt``
(exact). The approximation differs between CPU makers, so the same Paddle kernel gives different
bits on Intel and AMD hosts: the emulation needs this CPU's own instruction, which the compiled
kernels (``paddle_compat._native``) provide; without them the correctly rounded root is used
(within those 3 ulps, not bit-exact). Eigen's float64 ``sqrt`` is exact.
"""

from __future__ import annotations

import ctypes
import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .. import _native, _numerics
from .._numerics import round_f32, round_to, sqrt_rn, sqrt_rn_into

__all__ = ["adam_moments_", "float_attrs", "pow_like_libm", "sqrt_like_eigen"]

_LANES = 8  # float32 lanes of Paddle's AVX build
_FLT_MIN = float(torch.finfo(torch.float32).tiny)


def float_attrs(group: dict[str, Any], dtype: torch.dtype, *keys: str) -> tuple[float, ...]:
    """The group's hyper-parameters ``keys`` as a kernel of ``dtype`` sees them: float32 attributes
    (so rounded to float32 first, also for a float64 kernel), cast to ``dtype``."""
    rnd = round_to(dtype)
    return tuple(rnd(round_f32(group[key])) for key in keys)


def adam_moments_(
    m1: Tensor, m2: Tensor, g: Tensor, b1: float, b2: float, rnd: Callable[[float], float], tmp: Tensor
) -> None:
    """Adam's moments as Paddle's Eigen kernels (Lamb, NAdam, RAdam) write them, in place, every
    operation rounded: ``m1 = b1*m1 + (1-b1)*g``, ``m2 = b2*m2 + ((1-b2)*g)*g`` (``tmp``: scratch)."""
    m1.mul_(b1).add_(torch.mul(g, rnd(1 - b1), out=tmp))
    m2.mul_(b2).add_(torch.mul(g, rnd(1 - b2), out=tmp).mul_(g))


def sqrt_like_eigen(x: Tensor, out: Tensor | None = None) -> Tensor:
    """``x.sqrt()`` as Paddle's Eigen expressions compute it on the CPU (see the module), for a
    float32 or float64 tensor, into ``out`` (which may be ``x`` itself) or a new tensor."""
    if out is None:
        out = torch.empty_like(x)
    rsqrt = _hardware_rsqrt() if x.dtype == torch.float32 and x.device.type == "cpu" else None
    if rsqrt is None:
        if x.device.type == "cpu" and (_numerics._np is not None or x.dtype == torch.float64):
            return sqrt_rn_into(out, x, None)  # no temporary
        return out.copy_(sqrt_rn(x))
    if not (x.is_contiguous() and out.is_contiguous()):
        return out.copy_(sqrt_like_eigen(x.contiguous()))
    flat, flat_out = x.view(-1), out.view(-1)
    packed = (flat.numel() // _LANES) * _LANES
    head, tail = flat[:packed], flat[packed:]
    flushed = (head < _FLT_MIN) & (head >= 0)  # before out (perhaps x) is written
    root = sqrt_rn(tail)
    r = rsqrt(head)
    r.mul_(torch.mul(r, r).mul_(torch.mul(head, 0.5)).neg_().add_(1.5))  # r*(1.5 - (0.5*x)*(r*r))
    torch.mul(head, r, out=flat_out[:packed]).masked_fill_(flushed, 0.0)
    flat_out[packed:] = root
    return out


def _hardware_rsqrt() -> Callable[[Tensor], Tensor] | None:
    """The CPU's ``rsqrtps`` over a float32 tensor (from the compiled kernels), or ``None``."""
    kernels = _native.kernels()
    return getattr(kernels, "rsqrt", None) if kernels is not None else None


def pow_like_libm(x: float, y: float, dtype: torch.dtype) -> float:
    """``std::pow`` of two values of ``dtype``, as a C++ kernel computes it: the C library's
    ``pow``, or for float32 its ``powf`` (NumPy's float32 power is its own and differs in the last
    bit; without a C library's ``powf`` the float64 power is rounded, which agrees but in rare cases)."""
    if dtype == torch.float64:
        return math.pow(x, y)
    powf = _libm_powf()
    if powf is not None:
        return float(powf(x, y))
    return round_f32(math.pow(x, y))


@functools.cache
def _libm_powf() -> Any:
    fn = _native.libm_function("powf")
    if fn is not None:
        fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float, ctypes.c_float]
    return fn
