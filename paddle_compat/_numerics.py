"""Floating-point building blocks that make formulas round exactly as Paddle's kernels do.

Shared by the optimizers and the gradient clips (it imports neither). torch's own CPU ``sqrt`` is
not correctly rounded (about one float32 result in six, and one float64 result in eighty, differ
from IEEE), whereas Paddle's kernels use the hardware instruction, which is. And Paddle's AVX-512
Adam/AdamW kernels and its GPU kernels use fused multiply-adds, which torch has no operation for
(which of Paddle's CPU forms a process reproduces: ``_paddle_cpu``).
These are the torch forms; the compiled CPU kernels (``_native``) use the instructions themselves.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterator
from fractions import Fraction
from types import ModuleType

import torch
from torch import Tensor

_np: ModuleType | None
try:  # only for correctly rounded square roots of CPU tensors; torch itself warns without numpy
    import numpy

    _np = numpy
except ImportError:  # pragma: no cover - numpy comes with nearly every torch install
    _np = None

__all__ = [
    "CHUNK", "chunks", "cuda_div", "fma", "fma_into", "fma_scalar", "round_f32", "round_to", "sqrt_rn",
    "sqrt_rn_into",
]


def round_f32(x: float) -> float:
    """Round a Python float to the nearest float32 (ties to even), as a Python float (an infinity
    beyond float32's range, as the float32 operation gives)."""
    try:
        return struct.unpack("f", struct.pack("f", x))[0]
    except OverflowError:  # raised only when the rounded value is infinite
        return math.copysign(math.inf, x)


def round_to(dtype: torch.dtype) -> Callable[[float], float]:
    """A function rounding a Python float to the nearest value of ``dtype`` (float32 or float64).

    Scalar prologues use it: an IEEE float32 operation equals the float64 operation rounded to
    float32 (for +, -, *, / and sqrt, float64 is wide enough to make that double rounding harmless).
    """
    return float if dtype == torch.float64 else round_f32


def cuda_div(x: Tensor, s: float, out: Tensor) -> Tensor:
    """``torch.div(x, s, out=out)`` for a float32/float64 ``x`` as torch computes it on CUDA, on any
    device: ``x`` times ``1/s`` rounded to its dtype (torch's CUDA kernel divides by a host scalar
    so; its CPU kernel divides). The GPU forms take it, so that they compute the same on the CPU."""
    return torch.mul(x, round_to(x.dtype)(1 / s), out=out)


def fma(a: Tensor | float, b: Tensor | float, c: Tensor) -> Tensor:
    """``a*b + c`` with one rounding to ``c``'s dtype (float32 or lower), as an FMA instruction.

    The product of two float32 numbers is exact in float64, and so is the error of the float64
    sum (``_sum_round_to_odd``); rounding that sum "to odd" before the final rounding to float32
    makes the two roundings one: the result is the correctly rounded ``fma``, bit for bit.
    Python-float scalars are used as given: callers pass values already rounded to the dtype.
    A float64 ``c`` takes ``_fma64``: one rounding too, whatever torch's own kernels would fuse.
    """
    if c.dtype == torch.float64:
        return _fma64(a, b, c)
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        product = a.double() * b.double()
    else:
        if isinstance(a, Tensor):
            a, b = b, a
        if isinstance(b, Tensor):
            product = b.double() * float(a)
        else:
            product = torch.tensor(float(a) * float(b), dtype=torch.float64)
    return _narrow(_sum_round_to_odd(product, c.double()), c.dtype)


def _fma64(a: Tensor | float, b: Tensor | float, c: Tensor) -> Tensor:
    """``a*b + c`` in float64 with one rounding (Boldo and Melquiond's emulation of an FMA).

    The product is split exactly into ``uh + ul`` (Dekker), ``c + uh`` into ``th + tl`` (TwoSum),
    and ``tl + ul`` is rounded to odd before the last addition, which then rounds once. Where the
    splitting over- or underflows (magnitudes beyond 2**996, or a product below 2**-969) or a value
    is not finite, it is ``a*b + c`` with two roundings, which for inf and NaN is the FMA's result.
    """
    a_t = torch.as_tensor(a, dtype=torch.float64, device=c.device)
    b_t = torch.as_tensor(b, dtype=torch.float64, device=c.device)
    uh = a_t * b_t
    ah, al = _split(a_t)
    bh, bl = _split(b_t)
    ul = ((ah * bh - uh) + ah * bl + al * bh) + al * bl
    th = c + uh
    c_part = th - uh
    tl = (c - c_part) + (uh - (th - c_part))
    z = th + _sum_round_to_odd(tl, ul)
    exact = torch.isfinite(ul) & torch.isfinite(tl) & ((uh == 0) | (uh.abs() >= 2.0**-969))
    return torch.where(exact, z, th)


def _split(x: Tensor) -> tuple[Tensor, Tensor]:
    """Veltkamp's splitting: ``x = hi + lo`` exactly, each with at most 26 significant bits."""
    scaled = x * 134217729.0  # 2**27 + 1
    hi = scaled - (scaled - x)
    return hi, x - hi


def fma_scalar(a: float, b: float, c: float, dtype: torch.dtype) -> float:
    """``a*b + c`` for Python floats holding ``dtype`` values (float32 or float64), rounded once to
    ``dtype``: an FMA instruction's result, computed exactly (``Fraction``).

    For float32 the exact value is rounded to odd in float64 first, which then rounds to float32
    as the exact value would.
    """
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    nearest = float(exact)  # correctly rounded to float64
    if dtype == torch.float64 or not math.isfinite(nearest) or Fraction(nearest) == exact:
        return nearest if dtype == torch.float64 else round_f32(nearest)
    if struct.unpack("<q", struct.pack("<d", nearest))[0] & 1 == 0:  # even: the odd neighbour toward exact
        nearest = math.nextafter(nearest, math.inf if exact > Fraction(nearest) else -math.inf)
    return round_f32(nearest)


def _narrow(odd: Tensor, dtype: torch.dtype) -> Tensor:
    """A float64 value rounded to odd, rounded to nearest in ``dtype`` (float32 or narrower).

    torch casts float64 to bfloat16/float16 through float32, rounding twice: the float32 step is
    made a rounding to odd too (nudged off an even neighbour when inexact), so that the last
    rounding is the only one that counts.
    """
    nearest = odd.float()
    if dtype == torch.float32:
        return nearest
    bits = nearest.view(torch.int32)
    inexact = (nearest.double() != odd) & torch.isfinite(nearest)
    nudge = inexact & ((bits & 1) == 0)
    away = odd.abs() > nearest.double().abs()
    step = (torch.where(away, 1, -1) * nudge).to(torch.int32)
    return (bits + step).view(torch.float32).to(dtype)


def _sum_round_to_odd(x: Tensor, y: Tensor) -> Tensor:
    """``x + y`` in float64 rounded to odd: the nearest float64 when exact, else of the two float64
    neighbours of the exact sum the one whose last bit is 1.

    A value rounded to odd with at least two bits more than the target format rounds to nearest
    (ties to even) in that format exactly as the exact value would: no double-rounding error.
    The rounding error of the sum comes from Knuth's TwoSum (exact in round-to-nearest).
    """
    s = x + y
    x_part = s - y
    error = (x - x_part) + (y - (s - x_part))
    bits = s.view(torch.int64)
    # error != 0 is false for NaN: a non-finite sum is left alone (its error is NaN)
    nudge = (error != 0) & ((bits & 1) == 0) & torch.isfinite(s)
    away = (error > 0) == (s > 0)  # the exact sum is farther from zero than s: next magnitude up
    step = torch.where(away, 1, -1) * nudge
    return (bits + step).view(torch.float64)


# Rounding a float64 sum to float32 rounds twice, and can differ from one rounding, only where the
# sum lies exactly on a float32 midpoint (its 29 bits below float32's precision read 1000...0) or in
# float32's subnormal range (below 2**-126, where the float32 grid is coarser).
_LOW29, _MIDPOINT = (1 << 29) - 1, 1 << 28
_EXPONENT = 0x7FF << 52
_TINY = 2.0**-126


def fma_into(out: Tensor, a: float, b: Tensor, c: Tensor, wide: Tensor, bits: Tensor) -> Tensor:
    """``fma(a, b, c)`` for a float scalar ``a`` (a float32 value) and float32 tensors, into ``out``.

    The CPU fallback's fast form (``out`` may be ``b`` or ``c``; ``wide``, float64, and ``bits``,
    int64, are scratch shaped like ``out``). ``a*b`` is exact in float64 and the float64 sum is
    rounded once; rounding it to float32 then gives the fused result except on the values where
    that second rounding can matter (see ``_LOW29``). Whether there are any is found with four
    integer passes and two reductions (there hardly ever are); those elements are computed again
    by ``fma``, which rounds once everywhere.
    """
    if out.numel() == 0:  # an empty tensor (an FSDP2 rank's empty shard): the reductions below need an element
        return out
    s = torch.addcmul(c, b, torch.tensor([a], dtype=torch.float64), out=wide)  # c + b*a, one rounding
    raw = s.view(torch.int64)
    # midpoints: the low 29 bits xor 2**28 are 0; as float64 bit patterns these are small subnormals,
    # which a floating-point minimum orders as the integers (an integer minimum is far slower)
    low = torch.bitwise_and(raw, _LOW29, out=bits).bitwise_xor_(_MIDPOINT)
    suspect = float(low.view(torch.float64).amin()) == 0.0
    if not suspect:
        # float32's subnormal range: e = 2**exponent(s) is 0 for s == 0, in (0, 2**-126) there, and
        # inf for inf and NaN. Without zeros the smallest e tells; with zeros, e - e*e*2**126 > 0
        # exactly there (NaN where s is not finite: looked at too, to be safe)
        e = torch.bitwise_and(raw, _EXPONENT, out=bits).view(torch.float64)
        least = float(e.amin())
        suspect = least < _TINY
        if least == 0.0:
            suspect = not float(torch.addcmul(e, e, e, value=-(2.0**126), out=e).amax()) <= 0.0
    if suspect:
        flat = s.reshape(-1)
        odd = ((flat.view(torch.int64) & _LOW29) == _MIDPOINT) | ((flat.abs() < _TINY) & (flat != 0))
        redo = odd.nonzero().reshape(-1)
        exact = fma(float(a), b.reshape(-1)[redo], c.reshape(-1)[redo])  # read before out is written
        out.copy_(s).view(-1)[redo] = exact
        return out
    return out.copy_(s)


CHUNK = 1 << 17  # elements per thread: a piece and its buffers stay in the caches (L2, L3)


def chunks(*tensors: Tensor) -> Iterator[tuple[Tensor, ...]]:
    """The tensors, in the same pieces of ``CHUNK`` elements per torch thread (flat views, in
    memory order: the tensors must be dense and share one layout, see ``Optimizer._same_layout``).

    Adam's CPU fallback form runs its whole formula on one piece at a time, its temporaries in a
    few buffers of a piece's size: the tensors travel through memory once, not once per operation.
    """
    flat = [t.as_strided((t.numel(),), (1,)) for t in tensors]
    n, size = flat[0].numel(), CHUNK * torch.get_num_threads()
    if n <= size:
        yield tuple(flat)
        return
    for start in range(0, n, size):
        yield tuple(f[start : start + size] for f in flat)


def sqrt_rn_into(out: Tensor, x: Tensor, wide: Tensor | None) -> Tensor:
    """``sqrt_rn(x)`` written into ``out`` (``wide``: a float64 buffer shaped like ``x``, or ``None``
    for float64 ``x``; unused on CUDA, whose ``sqrt`` is IEEE)."""
    if x.device.type == "cuda":
        return torch.sqrt(x, out=out)
    if _np is not None:
        _np.sqrt(x.numpy(), out=out.numpy())
        return out
    if x.dtype == torch.float64:
        return torch.sqrt(x, out=out)
    assert wide is not None, "a float64 buffer is needed for a float32 root"
    return out.copy_(torch.sqrt(wide.copy_(x), out=wide))


def sqrt_rn(x: Tensor) -> Tensor:
    """Correctly rounded square root (IEEE ``sqrt``), as the instruction Paddle's kernels use.

    On CPU it is NumPy's (the hardware instruction). Without NumPy a float32 root goes through
    float64 (torch's float64 root is within an ulp, and rounding it to float32 is then correct) and
    a float64 root is torch's own (not always correctly rounded). CUDA's ``sqrt`` is already IEEE.
    """
    if x.device.type == "cuda":
        return torch.sqrt(x)
    if _np is not None and x.dtype in (torch.float32, torch.float64):
        out = torch.empty_like(x, requires_grad=False)
        _np.sqrt(x.detach().numpy(), out=out.numpy())
        return out
    if x.dtype == torch.float64:
        return torch.sqrt(x)
    return torch.sqrt(x.double()).to(x.dtype)
