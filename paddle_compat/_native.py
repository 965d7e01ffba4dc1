"""The compiled CPU kernels (``_native.c``): built at install, checked, loaded with ctypes.

The optimizers' CPU updates, Paddle's CPU sum of squares and the GradScaler's read-only check of
the grads run here as small C loops instead of chains of torch operations: one pass over the data,
true ``fmaf``/``sqrtf`` where Paddle's kernels use them (the torch forms emulate them), several
tensors per call. The C source spells out the same formulas as the torch forms, operation for
operation, so the bits are the same (the check: the flag of ``amp/unscale.py``'s torch path). ``rsqrt``
gives the CPU's own ``rsqrtps``, which no torch operation reaches (``optimizer/_eigen.py``).

Mechanics only; the optimizers decide what to hand over. ``kernels()`` is ``None`` when the
kernels cannot be used, and callers then take their torch path; ``status()`` says which run, and
why. The libraries are built when the package is installed (``setup.py``; nothing is compiled at
run time), one per instruction-set level (``_native_build``), and at the first step:

- ``PADDLE_COMPAT_NATIVE=0`` in the environment switches them off (read once, at the first step of
  any optimizer: reading the environment costs more than a small step's whole bookkeeping);
- otherwise the highest level this CPU runs is loaded from the package's own directory, only if
  the file and the directory belong to this user or root and no one else can write them, and only
  if its self-test passes (IEEE flags kept, subnormals not flushed: a library whose loading
  switched the process to flush-to-zero is refused and the mode restored).

When they cannot be used (not built, refused) one warning says so, once per process, and the torch
forms run: a few times slower on large models, with the same bits except for the float32 updates of
``ROOTS_DIFFER``, whose square roots start from the CPU's ``rsqrtps`` in Paddle's Eigen kernels, an
instruction only these kernels reach (``optimizer/_eigen.py``): the torch forms take the correctly
rounded root there (within 3 ulps of Paddle's), and the parameters drift apart over the steps
(tens to thousands of ulps after 60 steps: ``benchmarks/report_fallback_drift.py``).
"""

from __future__ import annotations

import ctypes
import math
import os
import threading
import warnings
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from . import _native_build, _paddle_cpu
from ._devices import addressable
from ._stacklevel import user_stacklevel

__all__ = [
    "DTYPE", "DT_BF16", "DT_BITS", "DT_F16", "DT_F32", "DT_F64", "DT_G", "DT_NONE", "DT_P", "DT_S", "DT_W",
    "FALLBACK", "NO_DTYPE", "PER", "POINTERS", "P_DECAY", "P_L2", "P_LR", "P_SPARE", "ROOTS_DIFFER", "ROW",
    "S_DT", "S_G", "S_N", "S_P", "S_POW1", "S_POW2", "S_S1", "S_S2", "S_S3", "S_W", "Batch", "Kernels",
    "NativeStatus", "enabled", "kernels", "packed_dtypes", "status",
]

# The layout of the rows the optimizers hand to the kernels, declared here once. _native.c spells
# it with the same names (enum slot, enum per, enum dtype, enum dtype_field), the Triton kernels
# (optimizer/_triton_kernels.py) take these values as constexprs; tests/test_native.py checks
# that all three agree.
#
# A row: ROW int64 values per tensor.
S_N = 0  # element count
S_W = 1  # the value updated: the parameter, or its float32 master weight
S_G = 2  # the gradient
S_P = 3  # the low-precision parameter refreshed from the master weight (0: none)
S_S1, S_S2, S_S3 = 4, 5, 6  # up to three state tensors, of one dtype (0: absent)
S_POW1, S_POW2 = 7, 8  # one-element powers (Adam's beta powers; the third is Batch.pow3)
S_DT = 9  # the dtypes, packed: DT_BITS bits each, at the shifts DT_W, DT_G, DT_P, DT_S
ROW = 10
POINTERS = range(S_W, S_DT)  # the slots holding addresses
# The per-tensor numbers: PER float64 values per tensor.
P_LR = 0  # the rate
P_DECAY = 1  # the decoupled decay (NaN when absent)
P_L2 = 2  # the L2 coefficient (NaN when absent)
P_SPARE = 3
PER = 4
# The dtype codes, and where each operand's code sits in the packed slot S_DT.
DT_F32, DT_F64, DT_BF16, DT_F16 = 0, 1, 2, 3
DT_NONE = 15  # no such operand
NO_DTYPE = DT_NONE
DT_BITS = 4
DT_W, DT_G, DT_P, DT_S = 0, 4, 8, 12  # value, gradient, parameter, states
DTYPE = {torch.float32: DT_F32, torch.float64: DT_F64, torch.bfloat16: DT_BF16, torch.float16: DT_F16}
_ONLY_VALUE = DT_NONE << DT_G | DT_NONE << DT_P | DT_NONE << DT_S  # a row's dtypes past the value's: none


def packed_dtypes(packed: int) -> tuple[int, int, int, int]:
    """The dtype codes of a row's slot ``S_DT``: value, gradient, parameter, states."""
    mask = (1 << DT_BITS) - 1
    return packed >> DT_W & mask, packed >> DT_G & mask, packed >> DT_P & mask, packed >> DT_S & mask

# The optimizers whose float32 CPU updates differ from Paddle's without the kernels (see above).
ROOTS_DIFFER = ("RMSProp", "Adagrad", "Adadelta", "NAdam", "RAdam")
FALLBACK = (
    "the same bits, slower, except for float32 " + ", ".join(ROOTS_DIFFER[:-1]) + f" and {ROOTS_DIFFER[-1]}: "
    "their square roots then differ from Paddle's by up to 3 ulps, and their parameters drift apart "
    "over the steps (tens to thousands of ulps after 60 steps; docs/optimizers.md, \"Eigen's float32 sqrt\")"
)

# where the libraries are: the package's own directory (resolved: a strict editable install links
# this file, and the libraries built in place, from a tree of links)
_DIRECTORY = Path(__file__).resolve().parent


class Kernels:
    """The loaded library, with typed entry points (arguments: ``array`` objects and numbers)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        i64, ptr, dbl, cint = ctypes.c_int64, ctypes.c_void_p, ctypes.c_double, ctypes.c_int
        self._sgd = _bind(lib.pc_sgd, [i64, ptr, ptr, cint])
        self._momentum = _bind(lib.pc_momentum, [i64, ptr, ptr, dbl, dbl, cint, cint])
        self._adam = _bind(lib.pc_adam, [i64, ptr, ptr, ptr, dbl, dbl, dbl, cint, cint, cint])
        self._adagrad = _bind(lib.pc_adagrad, [i64, ptr, ptr, dbl, cint])
        self._rmsprop = _bind(lib.pc_rmsprop, [i64, ptr, ptr, dbl, dbl, dbl, cint, cint])
        self._adamax = _bind(lib.pc_adamax, [i64, ptr, ptr, dbl, dbl, dbl, cint])
        self._adadelta = _bind(lib.pc_adadelta, [i64, ptr, ptr, dbl, dbl, cint])
        self._radam = _bind(lib.pc_radam, [i64, ptr, ptr, ptr, dbl, dbl, dbl, cint])
        self._asgd = _bind(lib.pc_asgd, [i64, ptr, ptr, i64, cint])
        self._rprop = _bind(lib.pc_rprop, [i64, ptr, ptr, dbl, dbl, dbl, dbl, cint])
        self._lamb = _bind(lib.pc_lamb, [i64, ptr, ptr, ptr, i64, dbl, dbl, dbl, cint, cint])
        self._nadam = _bind(lib.pc_nadam, [i64, ptr, ptr, ptr, dbl, dbl, dbl, dbl, dbl, cint])
        self._sumsq = _bind(lib.pc_sumsq, [i64, ptr, ptr])
        self._nonfinite = _bind(lib.pc_nonfinite, [i64, ptr, dbl, cint, ptr])
        self._rsqrt = _bind(lib.pc_rsqrt, [i64, ptr, ptr])
        # the CPU's rsqrtps, where it has one (Eigen's float32 sqrt starts from it: optimizer/_eigen.py)
        self.rsqrt = self._rsqrt_of if self._rsqrt(0, None, None) == 0 else None

    def sgd(self, rows: array[int], per: array[float]) -> None:
        self._sgd(len(rows) // ROW, _addr(rows), _addr(per), torch.get_num_threads())

    def momentum(self, rows: array[int], per: array[float], mu: float, coeff: float, nesterov: bool) -> None:
        self._momentum(len(rows) // ROW, _addr(rows), _addr(per), mu, coeff, int(nesterov), torch.get_num_threads())

    def adam(
        self, rows: array[int], per: array[float], b1: float, b2: float, eps: float, fused: bool, amsgrad: bool
    ) -> None:
        scratch = array("d", bytes(16 * (len(rows) // ROW)))
        self._adam(
            len(rows) // ROW, _addr(rows), _addr(per), _addr(scratch), b1, b2, eps, int(fused), int(amsgrad),
            torch.get_num_threads(),
        )

    # The rest of paddle.optimizer: the hyper-parameters are the group's, as Paddle's float32
    # attributes (rounded to float32); the powers of Adamax, RAdam and NAdam (ASGD's update count)
    # are in the batch's rows.
    def adagrad(self, batch: Batch, eps: float) -> None:
        _check(self._adagrad(len(batch), _addr(batch.rows), _addr(batch.per), eps, torch.get_num_threads()))

    def rmsprop(self, batch: Batch, rho: float, eps: float, mu: float, centered: bool) -> None:
        _check(self._rmsprop(
            len(batch), _addr(batch.rows), _addr(batch.per), rho, eps, mu, int(centered), torch.get_num_threads()
        ))

    def adamax(self, batch: Batch, b1: float, b2: float, eps: float) -> None:
        _check(self._adamax(len(batch), _addr(batch.rows), _addr(batch.per), b1, b2, eps, torch.get_num_threads()))

    def adadelta(self, batch: Batch, rho: float, eps: float) -> None:
        _check(self._adadelta(len(batch), _addr(batch.rows), _addr(batch.per), rho, eps, torch.get_num_threads()))

    def radam(self, batch: Batch, b1: float, b2: float, eps: float) -> None:
        _check(self._radam(
            len(batch), _addr(batch.rows), _addr(batch.per), _addr(batch.pow3), b1, b2, eps, torch.get_num_threads()
        ))

    def nadam(self, batch: Batch, b1: float, b2: float, eps: float, momentum_decay: float, base: float) -> None:
        _check(self._nadam(
            len(batch), _addr(batch.rows), _addr(batch.per), _addr(batch.pow3), b1, b2, eps, momentum_decay, base,
            torch.get_num_threads(),
        ))

    def asgd(self, batch: Batch, batch_num: int) -> None:
        _check(self._asgd(len(batch), _addr(batch.rows), _addr(batch.per), batch_num, torch.get_num_threads()))

    def rprop(self, batch: Batch, lo: float, hi: float, eta_minus: float, eta_plus: float) -> None:
        self._rprop(
            len(batch), _addr(batch.rows), _addr(batch.per), lo, hi, eta_minus, eta_plus, torch.get_num_threads()
        )

    def lamb(
        self, batch: Batch, directions: torch.Tensor, b1: float, b2: float, eps: float, always_adapt: bool
    ) -> None:
        """``directions``: a contiguous CPU scratch tensor, with room for the largest row's update."""
        _check(self._lamb(
            len(batch), _addr(batch.rows), _addr(batch.per), directions.data_ptr(),
            directions.numel() * directions.element_size(), b1, b2, eps, int(always_adapt), torch.get_num_threads(),
        ))

    def _rsqrt_of(self, x: torch.Tensor) -> torch.Tensor:
        """The CPU's approximate ``1/sqrt`` of each element of a contiguous float32 CPU tensor."""
        out = torch.empty_like(x)
        self._rsqrt(x.numel(), x.data_ptr(), out.data_ptr())
        return out

    def nonfinite(self, tensors: list[torch.Tensor], inv: float) -> bool:
        """Whether ``T(c(x) * inv)`` is inf or NaN for an element ``x`` of the tensors (``c``: float32,
        float64 for float64 tensors; ``T``: back to ``x``'s dtype), read only: plain
        (``addressable``), contiguous CPU tensors, all of one of the kernels' dtypes; ``inv`` a
        float32 value."""
        count = len(tensors)
        rows = array("q", bytes(8 * ROW * count))  # built column by column: this runs every step
        rows[S_N::ROW] = array("q", map(torch.Tensor.numel, tensors))
        rows[S_W::ROW] = array("q", map(torch.Tensor.data_ptr, tensors))
        rows[S_DT::ROW] = array("q", [DTYPE[tensors[0].dtype] << DT_W | _ONLY_VALUE]) * count
        bad = ctypes.c_int(0)
        _check(self._nonfinite(count, _addr(rows), inv, torch.get_num_threads(), ctypes.byref(bad)))
        return bool(bad.value)

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

    __slots__ = ("grads", "launches", "per", "pow3", "pows", "rows", "tensors", "values")

    def __init__(self) -> None:
        self.rows = array("q")
        self.per = array("d")
        self.pow3 = array("q")  # per row, a third power's address (RAdam's, NAdam's), else 0
        self.grads: list[torch.Tensor] = []
        self.tensors: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []  # per row, the tensor it updates
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
        tensors of one dtype (a ``None`` is left out); ``pows``: up to three one-element powers
        (Adam's two beta powers; a third goes to ``pow3``). ``decay`` and ``l2`` are NaN when
        absent. Every tensor must be contiguous, of ``value``'s size, on its device (for the CPU
        kernels: the CPU).
        """
        slots = [s for s in states if s is not None]
        if len(slots) > 3 or len(pows) > 3:
            raise ValueError("a row holds up to three states and three powers")
        if not all(addressable(t) for t in (value, grad, *slots, *pows, *([param] if param is not None else []))):
            raise TypeError("the compiled kernels read only plain dense tensors (see _devices.addressable)")
        row = [0] * ROW
        row[S_N], row[S_W], row[S_G] = value.numel(), value.data_ptr(), grad.data_ptr()
        if param is not None:
            row[S_P] = param.data_ptr()
        for slot, tensor in zip((S_S1, S_S2, S_S3), slots):
            row[slot] = tensor.data_ptr()
        for slot, tensor in zip((S_POW1, S_POW2), pows):
            row[slot] = tensor.data_ptr()
        row[S_DT] = (
            DTYPE[value.dtype] << DT_W
            | DTYPE[grad.dtype] << DT_G
            | (DTYPE[param.dtype] if param is not None else DT_NONE) << DT_P
            | (DTYPE[slots[0].dtype] if slots else DT_NONE) << DT_S
        )
        self.rows.extend(row)
        self.pow3.append(pows[2].data_ptr() if len(pows) > 2 else 0)
        numbers = [0.0] * PER
        numbers[P_LR], numbers[P_DECAY], numbers[P_L2] = lr, decay, l2
        self.per.extend(numbers)
        self.grads.append(grad)
        self.tensors += [value, *slots, *pows] + ([param] if param is not None else [])
        self.values.append(value)
        if pows:
            self.pows.append(pows)

    def release_grads(self) -> None:
        self.grads.clear()


@dataclass(frozen=True)
class NativeStatus:
    """Which CPU kernels the optimizers run, and why (``paddle_compat.native_status()``)."""

    compiled: bool  # the compiled kernels run (else the torch forms)
    reason: str
    level: str | None = None  # the instruction-set level loaded
    library: str | None = None  # its file

    @property
    def paddle_cpu(self) -> str:
        """The Paddle CPU profile float32 Adam/AdamW follow (``_paddle_cpu``: the host's, or forced)."""
        return _paddle_cpu.profile()

    def __str__(self) -> str:
        if self.compiled:
            return f"compiled CPU kernels, {self.level} ({self.library}); Paddle CPU profile {self.paddle_cpu}"
        return f"torch forms: {self.reason}; Paddle CPU profile {self.paddle_cpu}"


_enabled: bool | None = None  # PADDLE_COMPAT_NATIVE, read at the first call of enabled()
_lock = threading.Lock()
_loaded: Kernels | None = None
_status: NativeStatus | None = None  # decided at the first kernels() with the kernels enabled


def enabled() -> bool:
    """Whether compiled kernels may be used (``PADDLE_COMPAT_NATIVE`` was not ``0`` at the first call)."""
    global _enabled
    if _enabled is None:
        _enabled = os.environ.get("PADDLE_COMPAT_NATIVE") != "0"
    return _enabled


def kernels() -> Kernels | None:
    """The compiled kernels, loaded at the first call; ``None`` to use the torch path."""
    if not enabled():
        return None
    if _status is None:
        _load()
    return _loaded


def status() -> NativeStatus:
    """Which CPU kernels run and why; loads them if no step has yet."""
    if not enabled():
        return NativeStatus(False, "switched off by PADDLE_COMPAT_NATIVE=0")
    kernels()
    assert _status is not None
    return _status


def _load() -> None:
    global _loaded, _status
    with _lock:
        if _status is not None:
            return
        try:
            _loaded, _status = _open_best(_native_build.find_libraries(_DIRECTORY))
        except _Unusable as exc:
            _status = NativeStatus(False, str(exc))
    if not _status.compiled:
        warnings.warn(
            f"paddle_compat: the compiled CPU optimizer kernels are not used: {_status.reason}. The optimizers "
            f"run their torch forms ({FALLBACK}). paddle_compat.native_status() tells which kernels run; "
            "PADDLE_COMPAT_NATIVE=0 chooses the torch forms without this warning.",
            RuntimeWarning,
            stacklevel=user_stacklevel(),
        )


class _Unusable(Exception):
    """Why the compiled kernels cannot be used."""


def _open_best(found: dict[_native_build.Level, Path]) -> tuple[Kernels, NativeStatus]:
    """The highest built level this CPU runs (the baseline library tells which it runs)."""
    baseline = _native_build.LEVELS[0]
    if baseline not in found:
        raise _Unusable(
            "they were not built when paddle_compat was installed (no C compiler then?); reinstalling it "
            "where a C compiler is found builds them"
        )
    lib = _open(found[baseline])
    cpu = lib.pc_cpu_level()
    level = max((lv for lv in found if lv.psabi <= cpu), key=lambda lv: lv.psabi, default=baseline)
    if level != baseline:
        lib = _open(found[level])
    try:
        kern = Kernels(lib)
    except AttributeError as exc:
        raise _Unusable(f"{found[level].name} lacks the kernels: {exc}") from None
    return kern, NativeStatus(True, "the highest level built that this CPU runs", level.name,
                                      str(found[level]))


def _open(path: Path) -> ctypes.CDLL:
    """Load the library at ``path`` after checking where it lies, and check it once loaded."""
    problem = _native_build.refusal(path)
    if problem is not None:
        raise _Unusable(f"{path.name} refused: {problem}")
    saved = _FloatEnvironment()
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise _Unusable(f"{path.name} does not load: {exc}") from None
    problem = _native_build.check_loaded(lib) or _native_build.stamp_refusal(lib, path.parent)
    if problem is not None:
        saved.restore()  # its startup code may have switched this thread to flush-to-zero
        raise _Unusable(f"{path.name} refused: {problem}")
    return lib


class _FloatEnvironment:
    """This thread's floating-point environment (C's ``fenv_t``), saved to be restored."""

    def __init__(self) -> None:
        self._env = ctypes.create_string_buffer(1024)  # larger than any platform's fenv_t
        get, self._set = libm_function("fegetenv"), libm_function("fesetenv")
        if get is None or get(self._env) != 0:
            self._set = None

    def restore(self) -> None:
        if self._set is not None:
            self._set(self._env)


def libm_function(name: str) -> Any:
    """The C math library's function ``name`` (``None`` where it cannot be found), found without
    starting a process: among the libraries the interpreter has loaded, else glibc's libm by name.
    (``ctypes.util.find_library`` would start ldconfig or a C compiler: never at a step.)"""
    for library in (None, "libm.so.6"):
        try:
            return getattr(ctypes.CDLL(library), name)
        except (OSError, AttributeError):
            continue
    return None


def _bind(fn: Any, argtypes: list[Any]) -> Any:  # a ctypes function of the loaded library
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


def _check(code: int) -> None:
    if code != 0:
        raise MemoryError("the compiled optimizer kernel could not allocate its per-tensor scalars")


def _addr(a: array[Any]) -> int:
    return a.buffer_info()[0]
