"""The GPU update path: Paddle's GPU formulas over all the tensors of a group in a few launches.

Mechanics only: the optimizers describe their tensors with ``_native.Batch`` rows, as for the CPU
kernels, and this module turns a batch into device tables and launches the Triton kernels of
``_triton_kernels``: one launch per dtype combination (parameter, gradient, master weight, state),
plus the update of the powers an optimizer keeps on the device (a multi-tensor multiply for Adam's
and Lamb's beta powers, an add for ASGD's count, a small launch for NAdam's and RAdam's; Lamb's trust
ratio takes a second launch after its norms). Nothing is read back to the host, and a
GradScaler's ``found_inf`` flag is tested on the device, so a step makes no host sync; the tables
are device tensors kept with the batch, so an unchanged step replays the same launches (as a CUDA
graph does).

``kernels(device)`` is ``None`` when the path is unavailable: no Triton (torch's CUDA wheels for
Linux ship it), ``PADDLE_COMPAT_NATIVE=0``, or tensors off CUDA. On the CPU the kernels run only in
Triton's interpreter (``TRITON_INTERPRET=1``), which the tests use to compare them with the
per-tensor formulas; CUDA tensors with the interpreter on are refused (``RuntimeError``).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from array import array
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import Tensor

from .. import _devices, _native
from .._numerics import round_f32

__all__ = [
    "BLOCK", "CaptureError", "Compiling", "Launch", "disable", "kernels", "launches", "refuse_capture",
    "rates_changed", "refuse_new_rate", "rows_moved", "write_rates",
]

logger = logging.getLogger("paddle_compat")

BLOCK = 2048  # elements per program
_modules: dict[bool, ModuleType | None] = {}


def kernels(device: torch.device) -> ModuleType | None:
    """The Triton kernels for tensors on ``device`` (interpreted off CUDA), or ``None``."""
    if not _native.enabled():
        return None
    try:
        import triton  # noqa: F401
    except ImportError:
        return None
    interpret = _interpreting()
    if device.type != "cuda" and not interpret:
        return None
    if device.type == "cuda" and interpret:  # the interpreter would read device memory as the host's
        raise RuntimeError(
            "paddle_compat: TRITON_INTERPRET=1 runs Triton kernels on the host, which cannot read CUDA "
            "tensors: unset TRITON_INTERPRET to step parameters on a GPU (or PADDLE_COMPAT_NATIVE=0 for "
            "the per-tensor forms)"
        )
    if interpret not in _modules:
        _modules[interpret] = _load(interpret)
    return _modules[interpret]


def disable() -> None:
    """Turn the kernels off in this process after a failure to build or launch them (logged)."""
    logger.warning("paddle_compat: the multi-tensor GPU kernels failed; using per-tensor updates", exc_info=True)
    _modules[_interpreting()] = None


def _interpreting() -> bool:
    import triton

    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _load(interpret: bool) -> ModuleType | None:
    """A fresh copy of ``_triton_kernels`` (its ``triton.jit`` follows the interpreter setting at
    load time, so the interpreted and the compiled kernels live in separate modules)."""
    name = f"{__package__}._triton_kernels{'_interpreted' if interpret else ''}"
    try:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("_triton_kernels.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except Exception as exc:  # an incompatible Triton: the per-tensor path
        logger.debug("paddle_compat: Triton kernels unavailable, using per-tensor updates: %s", exc)
        return None


class Compiling:
    """Stands for the kernels' module in a step's first pass: each launch made through it compiles
    the kernel variant it needs (Triton's ``warmup``; nothing to do in the interpreter) and runs
    nothing, so that a step finds every compile failure before it writes anything."""

    def __init__(self, module: ModuleType | None) -> None:
        if module is None:
            raise RuntimeError("the GPU kernels are unavailable")
        self.module = module

    def __getattr__(self, name: str) -> _Warmup:
        return _Warmup(getattr(self.module, name))


class _Warmup:
    """A Triton kernel whose ``kernel[grid](...)`` compiles only."""

    def __init__(self, kernel: Any) -> None:
        self._kernel = kernel

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., Any]:
        return lambda *args, **kwargs: self._kernel.warmup(*args, grid=grid, **kwargs)


Kernels = ModuleType | Compiling  # what the launch functions below take


class Launch:
    """The device tables of one kernel launch: rows (pointers as byte offsets from ``base``), the
    gradients' offsets apart (``grads``: new gradient tensors, as after ``zero_grad(set_to_none=True)``
    or in a captured CUDA graph, rewrite only these, in place), per-tensor numbers (``per``: a new
    rate rewrites its rate and decay columns in place), blocks; the dtypes, whether every tensor is
    aligned for vector access, the rows' one-element powers (``pows[i]``: every row's i-th; a third
    one's offsets in the ``pow3`` table), which rows of the batch it launches (``members``) and the
    tensors they update (``values``), and what an optimizer keeps with it (``extra``)."""

    __slots__ = (
        "aligned", "base", "blocks", "captured", "dtypes", "extra", "grads", "grid", "held", "members", "per", "pow3",
        "pows", "rates_stale", "rows", "stale", "values",
    )

    def __init__(
        self, rows: list[int], per: list[float], pows: list[tuple[Tensor, ...]], aligned: bool, device: torch.device,
        members: list[int], pow3: list[int] | None = None, values: list[Tensor] | None = None,
    ) -> None:
        refuse_capture(device)
        count = len(rows) // _native.ROW
        self.base = torch.empty(16, dtype=torch.uint8, device=device)  # allocations are 16-byte aligned
        origin = self.base.data_ptr()
        relative = list(rows)
        for t in range(count):
            for slot in _native.POINTERS:  # (0 = absent, never read)
                i = t * _native.ROW + slot
                if relative[i]:
                    relative[i] -= origin
        self.members, self.stale, self.rates_stale, self.captured = members, False, False, False
        self.grads = _devices.upload(torch.tensor(relative[_native.S_G :: _native.ROW], dtype=torch.int64), device)
        # (tensor, block) for every block of every tensor, made with torch: a large model has
        # hundreds of thousands of blocks
        per_tensor = -(-torch.tensor(rows[_native.S_N :: _native.ROW], dtype=torch.int64) // BLOCK)
        tensor_of = torch.repeat_interleave(torch.arange(count), per_tensor)
        first = torch.repeat_interleave(torch.cumsum(per_tensor, 0) - per_tensor, per_tensor)
        blocks = torch.stack([tensor_of, torch.arange(len(tensor_of)) - first], 1).to(torch.int32).reshape(-1)
        self.grid = (len(tensor_of),)
        self.dtypes = _native.packed_dtypes(rows[_native.S_DT])
        self.aligned = aligned
        self.rows = _devices.upload(torch.tensor(relative, dtype=torch.int64), device)
        self.per = _devices.upload(torch.tensor(per, dtype=torch.float32), device)
        # the rate and decay columns the device holds (as bytes: a NaN decay equals itself there)
        self.held = [array("d", per[column :: _native.PER]).tobytes() for column in _RATE_COLUMNS]
        self.blocks = _devices.upload(blocks, device)
        self.pows = [list(column) for column in zip(*pows)]
        self.pow3 = None
        if pow3 is not None and any(pow3):
            self.pow3 = _devices.upload(torch.tensor([a - origin for a in pow3], dtype=torch.int64), device)
        self.extra: dict[str, Any] = {}
        self.values = values or []

    def refresh(self, batch: _native.Batch, capturing: bool) -> bool:
        """Rewrite the gradient offsets from the batch's rows, in place on the device, with no host
        sync; ``False`` when a gradient lost the alignment the launch was made for.

        A step being captured into a CUDA graph writes the gradients' offsets with fill kernels
        instead: the values travel in the kernels' arguments, which the graph keeps, so no host
        memory is read at replay, and it writes them all, so that a replay does not read what an
        eager step left. Once captured, the offsets are rewritten at every eager step: a replay
        writes them unseen. The rate columns are never written inside a capture: a replay reads
        them where an eager write (``write_rates``: the step before, or a scheduler's step between
        replays) left them, so a replayed step follows the scheduler; a rate that moved since then
        is refused there (``CaptureError``). (A copy from pinned memory in a capture records an
        event in torch's pinned-memory cache that later pinned allocations fail on: seen with torch
        2.11 on an H100.)
        """
        addresses = [batch.rows[i * _native.ROW + _native.S_G] for i in self.members]
        if self.aligned and any(a % 16 for a in addresses):
            return False
        origin = self.base.data_ptr()
        _write(self.grads, [a - origin for a in addresses], capturing)
        self.captured = self.captured or capturing
        self.stale = False
        return True

    def _rates(self, batch: _native.Batch) -> list[array[float]]:
        """The batch's rate and decay columns for this launch's rows (``_RATE_COLUMNS``)."""
        return [array("d", (batch.per[i * _native.PER + column] for i in self.members)) for column in _RATE_COLUMNS]

    def rates_moved(self, batch: _native.Batch) -> bool:
        """Whether the batch's rate or decay columns differ from what the device holds."""
        return any(values.tobytes() != held for values, held in zip(self._rates(batch), self.held))

    def write_rates(self, batch: _native.Batch) -> None:
        """Write the rate and decay columns that moved to the device, eagerly (no host sync)."""
        self.rates_stale = False
        columns = self.per.view(-1, _native.PER)
        for index, values in enumerate(self._rates(batch)):
            held = values.tobytes()  # as bytes: a NaN decay equals itself
            if held != self.held[index]:
                _write(columns[:, _RATE_COLUMNS[index]], values.tolist(), False)
                self.held[index] = held


class CaptureError(RuntimeError):
    """A step inside a CUDA graph capture needs what a capture cannot record (see ``Launch``)."""


def refuse_capture(device: torch.device) -> None:
    """Raise ``CaptureError`` while work on ``device`` is captured: a new plan or new tables copy
    from host memory (the rows, Adam's beta powers), which a replay would read again, and a copy
    from pinned memory inside a capture breaks torch's pinned-memory cache (see ``Launch.refresh``)."""
    if _devices.capturing(device):
        raise CaptureError(
            "paddle_compat: the GPU step's tables cannot be made inside a CUDA graph capture (they are "
            "copied from host memory, which a replay would read again). Take one eager step before "
            "capturing, and capture steps whose parameters, gradients' dtypes, sizes, states and options "
            "are those of the eager step (new gradient tensors are fine, and a rate a scheduler sets "
            "between replays)."
        )


def refuse_new_rate(device: torch.device) -> None:
    """Raise ``CaptureError`` for a rate set while work on ``device`` is captured: a replay reads
    the rate the device holds (``Launch.write_rates``), which only an eager write can set."""
    if _devices.capturing(device):
        raise CaptureError(
            "paddle_compat: a new learning rate inside a CUDA graph capture cannot be recorded (a replay "
            "reads the rate from the device, where it is written eagerly): step the scheduler, or set "
            "the rate, outside the captured region; each replay then runs at the rate last set."
        )


_RATE_COLUMNS = (_native.P_LR, _native.P_DECAY)  # the per-tensor numbers a new rate rewrites


def _write(table: Tensor, values: list[Any], capturing: bool) -> None:
    """Host values into a device table (or a strided view of one), in place, with no host sync:
    through pinned memory, or in a capture with fill kernels (one for equal values)."""
    if table.device.type != "cuda":
        table.copy_(torch.tensor(values, dtype=table.dtype))
    elif capturing:  # no host memory is read by a replay
        if len(set(values)) == 1:
            table.fill_(values[0])
        else:
            for slot, value in zip(table, values):
                slot.fill_(value)
    else:  # pinned by torch's caching host allocator, which keeps it until the copy is done
        table.copy_(torch.tensor(values, dtype=table.dtype).pin_memory(), non_blocking=True)


_DATA_POINTERS = (_native.S_W, _native.S_G, _native.S_P, _native.S_S1, _native.S_S2, _native.S_S3)


def _aligned(row: list[int]) -> bool:
    """Whether the tensor's data (not its beta powers) is 16-byte aligned and its size a multiple of 4."""
    return row[_native.S_N] % 4 == 0 and all(row[slot] % 16 == 0 for slot in _DATA_POINTERS)


def launches(batch: _native.Batch, device: torch.device) -> list[Launch]:
    """The batch's rows split by dtype combination and alignment, as device tables (kept on the
    batch; after ``rows_moved``, or in and after a capture, only the gradients' offsets are
    rewritten, after ``rates_changed`` only the rate columns)."""
    if batch.launches is not None:
        capturing = _devices.capturing(device)
        moved = [launch for launch in batch.launches if launch.rates_stale]
        if capturing:
            if any(launch.rates_moved(batch) for launch in moved):
                refuse_new_rate(device)  # before anything is written
        else:
            for launch in moved:
                launch.write_rates(batch)
        redo = [launch for launch in batch.launches if capturing or launch.stale or launch.captured]
        if all(launch.refresh(batch, capturing) for launch in redo):
            return batch.launches
        batch.launches = None  # a gradient lost its alignment: new tables
    groups: dict[tuple[int, bool], tuple[list[int], list[float], list[Any], list[int], list[int]]] = {}
    rows, per = batch.rows, batch.per
    for t in range(len(batch)):
        row = list(rows[t * _native.ROW : (t + 1) * _native.ROW])
        rows_, per_, pows_, members, pow3 = groups.setdefault((row[_native.S_DT], _aligned(row)), ([], [], [], [], []))
        rows_ += row
        per_ += per[t * _native.PER : (t + 1) * _native.PER]
        members.append(t)
        pow3.append(batch.pow3[t])
        if batch.pows:
            pows_.append(batch.pows[t])
    launches = [
        Launch(r, p, w, aligned, device, m, z, [batch.values[t] for t in m])
        for (_, aligned), (r, p, w, m, z) in groups.items()
    ]
    batch.launches = launches
    return launches


def write_rates(batch: _native.Batch) -> None:
    """Write the batch's new rates to its launches' tables now, eagerly, outside a capture (see
    ``Engine.rate_moved``, which refuses one first)."""
    for launch in batch.launches or ():
        launch.write_rates(batch)


def rows_moved(batch: _native.Batch) -> None:
    """The batch's rows point at new gradients: the next ``launches`` rewrites their offsets."""
    for launch in batch.launches or ():
        launch.stale = True


def rates_changed(batch: _native.Batch) -> None:
    """The batch's rows hold a new rate: the next ``launches`` (or ``write_rates``) writes the
    rate columns, and nothing else."""
    for launch in batch.launches or ():
        launch.rates_stale = True


_OPTIONS = {"BLOCK": BLOCK, "num_warps": 8, "enable_fp_fusion": False}


def _common(found_inf: Tensor | None, launch: Launch) -> dict[str, Any]:
    # without a flag the kernels never read its pointer: any tensor will do
    found = found_inf if found_inf is not None else launch.per
    return {"base": launch.base, "blocks": launch.blocks, "rows": launch.rows, "grads": launch.grads,
            "per": launch.per, "found": found,
            "HAS_FOUND": found_inf is not None, "ALIGNED": launch.aligned, **_OPTIONS}


def sgd(mod: Kernels, launch: Launch, found_inf: Tensor | None) -> None:
    w, g, p, _ = launch.dtypes
    mod.sgd_kernel[launch.grid](W=w, G=g, P=p, **_common(found_inf, launch))


def momentum(
    mod: Kernels, launch: Launch, found_inf: Tensor | None, mu: float, coeff: float, rescale: float, nesterov: bool
) -> None:
    w, g, p, _ = launch.dtypes
    mod.momentum_kernel[launch.grid](
        mu=mu, coeff=coeff, rescale=rescale, W=w, G=g, P=p, HAS_COEFF=coeff != 0.0, NESTEROV=bool(nesterov),
        **_common(found_inf, launch),
    )


def adam(
    mod: Kernels, launch: Launch, found_inf: Tensor | None, b1: float, b2: float, eps: float, amsgrad: bool
) -> None:
    """Adam's kernel, then the beta powers times ``b1``/``b2`` (times 1 where ``found_inf`` is set);
    the kernel's scalars are float32 values."""
    w, g, p, s = launch.dtypes
    b1, b2 = round_f32(b1), round_f32(b2)
    mod.adam_kernel[launch.grid](
        b1=b1, b2=b2, c1=round_f32(1 - b1), c2=round_f32(1 - b2), eps=round_f32(eps), W=w, G=g, P=p, S=s,
        AMSGRAD=bool(amsgrad), **_common(found_inf, launch),
    )
    if not isinstance(mod, Compiling):
        advance(launch.pows, (b1, b2), found_inf)


def advance(powers: list[list[Tensor]], factors: tuple[float, ...], found_inf: Tensor | None) -> None:
    """Multiply each list of one-element powers by its factor, on the device (by 1 where ``found_inf`` is set)."""
    if found_inf is None:
        for column, factor in zip(powers, factors):
            torch._foreach_mul_(column, factor)
        return
    skip = found_inf.reshape(()) != 0
    for column, factor in zip(powers, factors):
        torch._foreach_mul_(column, torch.where(skip, 1.0, factor))  # a float32 0-d tensor on the flag's device


def rmsprop(
    mod: Kernels, launch: Launch, found_inf: Tensor | None, rho: float, eps: float, mu: float, centered: bool
) -> None:
    """RMSProp's kernel; the hyper-parameters are float32 values."""
    w, g, p, s = launch.dtypes
    mod.rmsprop_kernel[launch.grid](
        rho=rho, keep=round_f32(1 - rho), eps=eps, mu=mu, W=w, G=g, P=p, S=s, CENTERED=bool(centered),
        **_common(found_inf, launch),
    )


def adagrad(mod: Kernels, launch: Launch, found_inf: Tensor | None, eps: float) -> None:
    w, g, p, s = launch.dtypes
    mod.adagrad_kernel[launch.grid](eps=eps, W=w, G=g, P=p, S=s, **_common(found_inf, launch))


def adadelta(mod: Kernels, launch: Launch, found_inf: Tensor | None, rho: float, eps: float) -> None:
    w, g, p, s = launch.dtypes
    mod.adadelta_kernel[launch.grid](
        rho=rho, keep=round_f32(1 - rho), eps=eps, W=w, G=g, P=p, S=s, **_common(found_inf, launch)
    )


def adamax(mod: Kernels, launch: Launch, found_inf: Tensor | None, b1: float, b2: float, eps: float) -> None:
    """Adamax's kernel (its beta power is advanced by the optimizer's ``_finish_update``, skipped step or not)."""
    w, g, p, s = launch.dtypes
    mod.adamax_kernel[launch.grid](
        b1=b1, c1=round_f32(1 - b1), b2=b2, eps=eps, W=w, G=g, P=p, S=s, **_common(found_inf, launch)
    )


def asgd(mod: Kernels, launch: Launch, found_inf: Tensor | None, batch_num: int) -> None:
    """ASGD's kernel, then the update counts plus one (plus 0 where ``found_inf`` is set)."""
    w, g, p, s = launch.dtypes
    mod.asgd_kernel[launch.grid](NB=batch_num, W=w, G=g, P=p, S=s, **_common(found_inf, launch))
    if isinstance(mod, Compiling):
        return
    (counts,) = launch.pows
    if found_inf is None:
        torch._foreach_add_(counts, 1)
    else:
        torch._foreach_add_(counts, (found_inf.reshape(()) == 0).to(torch.int64))


def rprop(mod: Kernels, launch: Launch, found_inf: Tensor | None, bounds: tuple[float, ...]) -> None:
    """Rprop's kernel; ``bounds``: the range and the etas, float32 values."""
    w, g, p, _ = launch.dtypes
    lo, hi, eta_minus, eta_plus = bounds
    mod.rprop_kernel[launch.grid](
        lo=lo, hi=hi, eta_minus=eta_minus, eta_plus=eta_plus, W=w, G=g, P=p, **_common(found_inf, launch)
    )


def nadam(
    mod: Kernels, launch: Launch, found_inf: Tensor | None, b1: float, b2: float, eps: float, decay_base: float,
    powers: Callable[[], tuple[list[float], list[float], float]],
) -> None:
    """NAdam's kernel, then one program per tensor advancing its three powers (not on a skipped
    step). ``powers()``: the values the momentum schedule's power takes (descending from
    ``decay_base``, each step times it), their powers to the group's ``momentum_decay`` (the C
    library's), and ``decay_base``'s; uploaded once per launch."""
    w, g, p, s = launch.dtypes
    if "nadam" not in launch.extra:
        values, pows, base_pow = powers()
        table = _devices.upload(torch.tensor(values + pows, dtype=torch.float32), launch.per.device)
        launch.extra["nadam"] = (table, len(values), base_pow)
    table, size, base_pow = launch.extra["nadam"]
    common = _common(found_inf, launch)
    numbers = {"table": table, "b1": b1, "b2": b2, "c096": decay_base, "p096": base_pow, "TABLE": size}
    mod.nadam_kernel[launch.grid](
        pow3=launch.pow3, c1=round_f32(1 - b1), c2=round_f32(1 - b2), eps=eps, W=w, G=g, P=p, S=s, **numbers, **common,
    )
    mod.nadam_powers_kernel[(len(launch.members),)](
        base=launch.base, rows=launch.rows, pow3=launch.pow3, found=common["found"], HAS_FOUND=common["HAS_FOUND"],
        **numbers, num_warps=1, enable_fp_fusion=False,
    )


def lamb(
    mod: Kernels, launch: Launch, found_inf: Tensor | None, b1: float, b2: float, eps: float, always_adapt: bool,
    squared_norms: Callable[[list[Tensor]], list[Tensor]],
) -> None:
    """Lamb: the moments and directions (into a buffer kept with the launch, each at a 16-byte
    aligned offset), the squared norms of the values and the directions by ``squared_norms`` (the torch
    form's, so that they have its bits), the update; then the beta powers times ``b1``/``b2``."""
    w, g, p, s = launch.dtypes
    common = _common(found_inf, launch)
    device = launch.per.device
    if "lamb" not in launch.extra:
        starts, total = [], 0
        for value in launch.values:
            starts.append(total)
            total += -(-value.numel() // 4) * 4
        offsets = _devices.upload(torch.tensor(starts, dtype=torch.int64), device)
        buffer = torch.empty(max(total, 1), dtype=torch.float32, device=device)
        views = [buffer[start : start + value.numel()] for start, value in zip(starts, launch.values)]
        launch.extra["lamb"] = (offsets, buffer, views)
    offsets, buffer, views = launch.extra["lamb"]
    compiling = isinstance(mod, Compiling)  # (any float32 tensor stands for the buffers then)
    directions = launch.per if compiling else buffer
    mod.lamb_direction_kernel[launch.grid](
        directions=directions, offsets=offsets, b1=b1, c1=round_f32(1 - b1), b2=b2, c2=round_f32(1 - b2), eps=eps,
        W=w, G=g, S=s, **common,
    )
    squares = launch.per if compiling else torch.stack(squared_norms(launch.values + views))
    mod.lamb_update_kernel[launch.grid](
        directions=directions, offsets=offsets, p_squares=squares, d_squares=squares[len(views) :], W=w, P=p,
        ALWAYS_ADAPT=bool(always_adapt), **common,
    )
    if not compiling:
        advance(launch.pows, (b1, b2), found_inf)


def radam(mod: Kernels, launch: Launch, found_inf: Tensor | None, b1: float, b2: float, eps: float) -> None:
    """RAdam's kernel, then one program per tensor advancing its three powers (not on a skipped step)."""
    w, g, p, s = launch.dtypes
    common = _common(found_inf, launch)
    rho_inf = round_f32(round_f32(2 / round_f32(1 - b2)) - 1)
    mod.radam_kernel[launch.grid](
        pow3=launch.pow3, b1=b1, c1=round_f32(1 - b1), b2=b2, c2=round_f32(1 - b2), eps=eps, rho_inf=rho_inf,
        W=w, G=g, P=p, S=s, **common,
    )
    mod.radam_powers_kernel[(len(launch.members),)](
        base=launch.base, rows=launch.rows, pow3=launch.pow3, found=common["found"], b1=b1, b2=b2,
        HAS_FOUND=common["HAS_FOUND"], num_warps=1, enable_fp_fusion=False,
    )
