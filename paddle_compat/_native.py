"""The compiled CPU kernels (``_native.c``): built at first use, cached, loaded with ctypes.

The optimizers' CPU updates and Paddle's CPU sum of squares run here as small C loops instead of
chains of torch operations: one pass over the data, true ``fmaf``/``sqrtf`` where Paddle's kernels
use them (the torch forms emulate them in float64), several tensors per call. The C source spells
out the same formulas as the torch forms, operation for operation, so the bits are the same.

Mechanics only; the optimizers decide what to hand over. ``kernels()`` is ``None`` when the
kernels cannot be used, and callers then take their torch path:

- ``PADDLE_COMPAT_NATIVE=0`` in the environment (read once, at the first step of any optimizer:
  reading the environment costs more than a small step's whole bookkeeping);
- no C compiler (``$CC``, else ``cc``, ``gcc`` or ``clang`` on the ``PATH``), a failed build, or a
  failed self-test of the built library: one debug-level log line on the ``paddle_compat`` logger,
  and the torch path from then on in this process.

The shared library is cached in ``$PADDLE_COMPAT_CACHE_DIR``, else ``$XDG_CACHE_HOME/paddle_compat``
(``~/.cache/paddle_compat``), under a name hashed from the source, the compiler, the flags and the
CPU, so a changed source or another machine sharing the directory gets its own build. It is
compiled to a temporary file and renamed into place: processes starting together may each build
it, and each loads a complete file.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from array import array
from pathlib import Path
from typing import Any

import torch

from ._devices import addressable

__all__ = ["DTYPE", "NO_DTYPE", "PER", "ROW", "Batch", "Kernels", "enabled", "kernels"]

logger = logging.getLogger("paddle_compat")

# Row layout shared with _native.c (enum slot, enum per, enum dtype).
ROW = 10  # n, w, g, p, state1, state2, state3, pow1, pow2, dtypes
PER = 4  # lr, decay, l2, (unused)
DTYPE = {torch.float32: 0, torch.float64: 1, torch.bfloat16: 2, torch.float16: 3}
NO_DTYPE = 15

_SOURCE = Path(__file__).with_name("_native.c")
# IEEE semantics: no contraction into FMAs the source does not spell out, no fast-math; errno is
# not needed from sqrt (letting it vectorise), which changes no value.
_FLAGS = ["-O3", "-std=c99", "-ffp-contract=off", "-fno-fast-math", "-fno-math-errno", "-fPIC", "-shared"]
# Tried in turn: tuned for this CPU and threaded with OpenMP (the runtime torch has loaded, see
# for_all in _native.c), then without -march=native, then single-threaded.
_VARIANTS = [["-march=native", "-fopenmp"], ["-fopenmp"], []]

_lock = threading.Lock()
_loaded: Kernels | None = None
_failed = False


class Kernels:
    """The loaded library, with typed entry points (arguments: ``array`` objects and numbers)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        i64, ptr, dbl, cint = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double, ctypes.c_int
        self._sgd = _bind(lib.pc_sgd, [i64, ptr, ptr, cint])
        self._momentum = _bind(lib.pc_momentum, [i64, ptr, ptr, dbl, dbl, cint, cint])
        self._adam = _bind(lib.pc_adam, [i64, ptr, ptr, ptr, dbl, dbl, dbl, cint, cint, cint])
        self._sumsq = _bind(lib.pc_sumsq, [i64, ptr, ptr])
        self._selftest = _bind(lib.pc_selftest, [])

    def sgd(self, rows: array[int], per: array[float]) -> None:
        self._sgd(len(rows) // ROW, _addr(rows), _addr(per), torch.get_num_threads())

    def momentum(self, rows: array[int], per: array[float], mu: float, coeff: float, nesterov: bool) -> None:
        self._momentum(len(rows) // ROW, _addr(rows), _addr(per), mu, coeff, int(nesterov), torch.get_num_threads())

    def adam(self, rows: array[int], per: array[float], b1: float, b2: float, eps: float, fused: bool, amsgrad: bool) -> None:
        scratch = array("d", bytes(16 * (len(rows) // ROW)))
        self._adam(
            len(rows) // ROW, _addr(rows), _addr(per), _addr(scratch), b1, b2, eps, int(fused), int(amsgrad),
            torch.get_num_threads(),
        )

    def sumsq(self, rows: array[int]) -> array[float]:
        """Sums of squares of contiguous float32/float64 CPU tensors (rows of n, pointer, dtype)."""
        out = array("d", bytes(8 * (len(rows) // 3)))
        self._sumsq(len(rows) // 3, _addr(rows), _addr(out))
        return out


class Batch:
    """The rows of one kernel call: one per tensor, with its per-tensor numbers (see ``_native.c``).

    The rows hold bare pointers, so the batch holds the tensors too: the gradients until
    ``release_grads()`` (after the call), the rest as long as the batch lives (a batch kept for
    later steps then never points at freed memory).
    """

    __slots__ = ("grads", "launches", "per", "pows", "rows", "tensors")

    def __init__(self) -> None:
        self.rows = array("q")
        self.per = array("d")
        self.grads: list[torch.Tensor] = []
        self.tensors: list[torch.Tensor] = []
        self.pows: list[tuple[torch.Tensor, ...]] = []
        self.launches: list[Any] | None = None  # the GPU path's device tables, made at the first launch

    def __len__(self) -> int:
        return len(self.rows) // ROW

    def add(
        self,
        value: torch.Tensor,
        grad: torch.Tensor,
        param: torch.Tensor | None,
        states: tuple[torch.Tensor | None, ...] = (),
        pows: tuple[torch.Tensor, ...] = (),
        lr: float = 0.0,
        decay: float = math.nan,
        l2: float = math.nan,
    ) -> None:
        """``value`` is updated in place from ``grad``; ``param`` (a low-precision parameter with
        ``value`` its master weight) is then refreshed from it. ``states``: up to three state
        tensors of one dtype (a ``None`` is left out); ``pows``: Adam's two beta powers. ``decay`` and
        ``l2`` are NaN when absent. Every tensor must be contiguous, of ``value``'s size, on its
        device (for the CPU kernels: the CPU).
        """
        slots = [s for s in states if s is not None]
        if not all(addressable(t) for t in (value, grad, *slots, *pows, *([param] if param is not None else []))):
            raise TypeError("the compiled kernels read only plain dense tensors (see _devices.addressable)")
        state_ptrs = [s.data_ptr() for s in slots] + [0] * (3 - len(slots))
        pow_ptrs = [t.data_ptr() for t in pows] + [0] * (2 - len(pows))
        dtypes = (
            DTYPE[value.dtype]
            | DTYPE[grad.dtype] << 4
            | (DTYPE[param.dtype] if param is not None else NO_DTYPE) << 8
            | (DTYPE[slots[0].dtype] if slots else NO_DTYPE) << 12
        )
        self.rows.extend(
            (value.numel(), value.data_ptr(), grad.data_ptr(), param.data_ptr() if param is not None else 0,
             *state_ptrs, *pow_ptrs, dtypes)
        )
        self.per.extend((lr, decay, l2, 0.0))
        self.grads.append(grad)
        self.tensors += [value, *slots, *pows] + ([param] if param is not None else [])
        if pows:
            self.pows.append(pows)

    def release_grads(self) -> None:
        self.grads.clear()


_enabled: bool | None = None  # PADDLE_COMPAT_NATIVE, read at the first call of enabled()


def enabled() -> bool:
    """Whether compiled kernels may be used (``PADDLE_COMPAT_NATIVE`` was not ``0`` at the first call)."""
    global _enabled
    if _enabled is None:
        _enabled = os.environ.get("PADDLE_COMPAT_NATIVE") != "0"
    return _enabled


def kernels() -> Kernels | None:
    """The compiled kernels, built and loaded at the first call; ``None`` to use the torch path."""
    if not enabled():
        return None
    if _loaded is not None or _failed:
        return _loaded
    return _load()


def _load() -> Kernels | None:
    global _loaded, _failed
    with _lock:
        if _loaded is None and not _failed:
            try:
                kern = Kernels(ctypes.CDLL(str(_build())))
                if kern._selftest() != 0:
                    raise RuntimeError(f"the compiled kernels failed their self-test ({kern._selftest()})")
                _loaded = kern
            except Exception as exc:  # no compiler, a failed build, an unloadable library: the torch path
                _failed = True
                logger.debug("paddle_compat: compiled CPU kernels unavailable, using the torch path: %s", exc)
        return _loaded


def _build() -> Path:
    compiler = _compiler()
    source = _SOURCE.read_bytes()
    errors = []
    for flags in (_FLAGS + extra for extra in _VARIANTS):
        target = _cache_dir() / f"kernels-{_key(source, compiler, flags)}{_suffix()}"
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".build-", suffix=_suffix())
        os.close(fd)
        try:
            result = subprocess.run(
                [compiler, *flags, "-o", tmp, str(_SOURCE), "-lm"], capture_output=True, text=True, timeout=120
            )
            if result.returncode == 0:
                os.replace(tmp, target)  # atomic: a concurrent process sees no file or a whole one
                return target
            errors.append(result.stderr.strip()[-2000:])
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    raise RuntimeError(f"{compiler} failed: {errors[-1]}")


def _compiler() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name:
            found = shutil.which(name)
            if found:
                return found
    raise RuntimeError("no C compiler found (set CC)")


def _cache_dir() -> Path:
    explicit = os.environ.get("PADDLE_COMPAT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "paddle_compat"


def _key(source: bytes, compiler: str, flags: list[str]) -> str:
    """What the build depends on: the source, the compiler binary, the flags and this CPU."""
    info = os.stat(os.path.realpath(compiler))
    parts = [source, os.path.realpath(compiler).encode(), f"{info.st_size}:{info.st_mtime_ns}".encode()]
    parts += [" ".join(flags).encode(), platform.machine().encode(), _cpu_signature().encode()]
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:20]


def _cpu_signature() -> str:
    """The host CPU's model and feature flags (``-march=native`` builds for them)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            keys = ("flags", "model name", "Features", "CPU part")
            return "".join(line for line in f if line.startswith(keys))[:8192]
    except OSError:
        return platform.processor()


def _suffix() -> str:
    return ".dylib" if sys.platform == "darwin" else ".dll" if os.name == "nt" else ".so"


def _bind(fn: Any, argtypes: list[Any]) -> Any:  # a ctypes function of the loaded library
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


def _addr(a: array[Any]) -> int:
    return a.buffer_info()[0]
