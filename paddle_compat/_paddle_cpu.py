"""Which of Paddle's host-dependent CPU code paths this process reproduces: its *profile*.

Paddle 3.3.1's CPU kernels give the same bits on every x86-64 host it runs on but for one choice,
made at run time from the CPU: float32 Adam and AdamW.

- ``avx512f``: on a CPU with AVX-512F, Paddle's JIT kernel, float32 throughout with fused
  multiply-adds: ``m = fma(b1, m, g*(1-b1))``, ``v = fma(b2, v, (g*g)*(1-b2))``,
  ``w = fma(m/(sqrt(v)+eps_t), -lr_t, w)`` (AdamW: ``w = fma(-lr*coeff, w, w)`` first).
- ``avx2``: on every other x86-64 CPU (AVX2 with or without FMA, AVX), Paddle's plain C reference
  kernel, built without contraction: the moments in float32 with separate roundings,
  ``m*b1 + g*(1-b1)`` and ``v*b2 + (g*(1-b2))*g``, and the parameter update in double, because
  ``sqrt`` of a float there is C's double ``sqrt``: ``w = float(w + -lr_t*(m/(sqrt(v)+eps_t)))``,
  rounded once (AdamW: ``w - (lr*coeff)*w`` in float32 first).

float64 runs the reference kernel on every host, and the other optimizers, the clips and the
scaler have one code path; so this choice concerns float32 Adam/AdamW on the CPU alone (the GPU
kernels are another matter, ``optimizer/adam.py``).

The profile follows the CPU (the ``avx512f`` flag of ``/proc/cpuinfo``). ``PADDLE_COMPAT_PADDLE_CPU``
forces one, to reproduce a Paddle run made on another host; the older ``PADDLE_COMPAT_CPU_FMA=1|0``
means ``avx512f|avx2``. On a CPU that is not x86-64 (aarch64: Paddle's build there may contract
the reference kernel's products into FMAs, never recorded) the ``avx2`` profile runs, and the first
float32 Adam/AdamW step warns that the bits were never compared there.
"""

from __future__ import annotations

import functools
import os
import platform
import warnings

from ._stacklevel import user_stacklevel

__all__ = ["ENV", "PROFILES", "bfloat16_supported", "detected", "forced", "profile"]

ENV = "PADDLE_COMPAT_PADDLE_CPU"
_OLD_ENV = "PADDLE_COMPAT_CPU_FMA"

PROFILES = {
    "avx512f": "x86-64 with AVX-512F: Paddle's JIT Adam/AdamW kernel (float32 with fused multiply-adds)",
    "avx2": "x86-64 without AVX-512F: Paddle's reference Adam/AdamW kernel (the parameter update in double)",
}

_warned = False


def _cpu_flags() -> set[str] | None:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def _x86() -> bool:
    """Whether this is an x86-64 CPU (Paddle's host-dependent kernels were recorded on such CPUs only)."""
    return platform.machine().lower() in ("x86_64", "amd64")


@functools.cache
def detected() -> tuple[str, bool]:
    """The profile of this CPU, and whether Paddle's bits were ever recorded for such a CPU."""
    if not _x86():
        return "avx2", False
    flags = _cpu_flags()
    if flags is not None:
        # Paddle's JIT picks its Adam code on the AVX-512F CPUID bit, the kernel's "avx512f" flag.
        return ("avx512f" if "avx512f" in flags else "avx2"), True
    import torch  # no /proc: torch's dispatch level is the best hint left (it needs more than AVX-512F)

    return ("avx512f" if torch.backends.cpu.get_cpu_capability() == "AVX512" else "avx2"), True


def forced() -> str | None:
    """The profile the environment forces (``None``: none); ``ValueError`` for a value that names none."""
    value = os.environ.get(ENV)
    if value:
        if value not in PROFILES:
            raise ValueError(f"{ENV}={value!r} names no Paddle CPU profile: choose one of {', '.join(PROFILES)}")
        return value
    old = os.environ.get(_OLD_ENV)
    return None if old not in ("0", "1") else "avx512f" if old == "1" else "avx2"


def profile() -> str:
    """The profile in force: ``PADDLE_COMPAT_PADDLE_CPU``, else ``PADDLE_COMPAT_CPU_FMA``, else the CPU's.

    Read at every call (a dictionary look-up), so a test or a user can switch it between steps.
    """
    chosen = forced()
    if chosen is not None:
        return chosen
    name, recorded = detected()
    if not recorded:
        _warn_unrecorded(name)
    return name


@functools.cache
def bfloat16_supported() -> bool:
    """Paddle's ``is_bfloat16_supported`` on the CPU: whether it has AVX-512 F, BW, VL and DQ (oneDNN's
    ``avx512_core``, which Paddle asks for); False off x86-64, and where ``/proc/cpuinfo`` is missing."""
    flags = _cpu_flags() if _x86() else None
    return flags is not None and {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags


def _warn_unrecorded(name: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            f"Paddle's float32 Adam/AdamW bits were never recorded on a {platform.machine()} CPU: computing the "
            f"{name!r} profile's ({PROFILES[name]}); set {ENV} to one of {', '.join(PROFILES)} to choose",
            stacklevel=user_stacklevel(),
        )
