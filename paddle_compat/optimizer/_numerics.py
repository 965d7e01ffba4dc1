"""Floating-point building blocks that make the update formulas round exactly as Paddle's kernels do.

torch's own CPU ``sqrt`` is not correctly rounded (it is within half an ulp plus a little: about one
float32 result in six differs from IEEE), whereas Paddle's kernels use the hardware instruction, which
is. And Paddle's AVX-512 Adam/AdamW kernels use fused multiply-adds where torch has none on CPU.
"""

from __future__ import annotations

import functools
import os

import torch
from torch import Tensor

__all__ = ["cpu_kernels_use_fma", "fma", "fma_into", "gpu_kernels", "sqrt_rn", "sqrt_rn_into"]


def gpu_kernels(t: Tensor) -> bool:
    """Whether updates of ``t`` follow Paddle's GPU kernels (CUDA tensors) rather than its CPU ones."""
    return t.device.type == "cuda"


def fma(a: Tensor | float, b: Tensor | float, c: Tensor) -> Tensor:
    """``a*b + c`` with one rounding to ``c``'s dtype (float32 or lower), as an FMA instruction.

    The product of two float32 numbers is exact in float64; the float64 sum is then rounded twice
    (to float64, then to float32), which differs from the single rounding of a true FMA only when
    the exact sum lies within 2**-53 (relative) of a float32 rounding boundary: a case that has not
    occurred in any parity run. Python-float scalars are used as given: callers pass values already
    rounded to the dtype.
    """
    acc = c.double()
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return torch.addcmul(acc, a.double(), b.double()).to(c.dtype)
    if isinstance(a, Tensor):
        a, b = b, a
    if isinstance(b, Tensor):
        return torch.add(acc, b.double(), alpha=float(a)).to(c.dtype)
    return (acc + float(a) * float(b)).to(c.dtype)


def fma_into(out: Tensor, a: float, b: Tensor, c: Tensor, wide: Tensor, wide2: Tensor) -> Tensor:
    """``fma(a, b, c)`` for a float scalar ``a`` and float32 tensors, written into ``out``.

    The CPU kernels' allocation-free form: ``wide`` and ``wide2`` are float64 buffers shaped like
    ``out``. It runs the very operation ``fma`` runs (``torch.add(c, b, alpha=a)`` on float64 copies,
    then one rounding to float32), so the bits are the same. ``out`` may be ``b`` or ``c``: both are
    read before ``out`` is written.
    """
    wide.copy_(c)
    other = wide if b is c else wide2.copy_(b)
    wide.add_(other, alpha=float(a))
    return out.copy_(wide)


def sqrt_rn_into(out: Tensor, x: Tensor, wide: Tensor) -> Tensor:
    """``sqrt_rn(x)`` on CPU, written into ``out`` through the float64 buffer ``wide`` (float32 ``x``)."""
    if x.dtype == torch.float64:
        return torch.sqrt(x, out=out)
    return out.copy_(torch.sqrt(wide.copy_(x), out=wide))


def sqrt_rn(x: Tensor) -> Tensor:
    """Correctly rounded square root (IEEE ``sqrt``), as the CPU instruction Paddle's kernels use.

    On CPU it goes through float64: the float64 result is within an ulp of the exact root and rounding
    it to float32 then gives the correctly rounded float32 root. CUDA's ``sqrt`` is already IEEE.
    """
    if x.device.type == "cuda" or x.dtype == torch.float64:
        return torch.sqrt(x)
    return torch.sqrt(x.double()).to(x.dtype)


def _cpu_flags() -> set[str] | None:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


@functools.lru_cache(maxsize=None)
def _detect_avx512f() -> bool:
    flags = _cpu_flags()
    if flags is not None:
        # Paddle's jit picks its Adam/AdamW code on the AVX-512F CPUID bit (with OS support), which is
        # what the kernel reports as the "avx512f" flag.
        return "avx512f" in flags
    # Elsewhere torch's dispatch level is the best available hint (it needs more than AVX-512F).
    return torch.backends.cpu.get_cpu_capability() == "AVX512"


def cpu_kernels_use_fma() -> bool:
    """Whether Paddle's CPU Adam/AdamW kernels would use their fused AVX-512 form on this host.

    The environment variable ``PADDLE_COMPAT_CPU_FMA`` (``1``/``0``) overrides the detection, e.g. to
    reproduce on one machine the results of a Paddle run on another.
    """
    forced = os.environ.get("PADDLE_COMPAT_CPU_FMA")
    if forced in ("0", "1"):
        return forced == "1"
    return _detect_avx512f()
