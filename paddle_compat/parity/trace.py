"""Training traces: what a run did at every step, recorded from torch or from Paddle, saved to files.

A :class:`Trace` holds, per step, the scalars ``loss``, ``scale``, ``found_inf`` (inf/NaN found,
so the update was skipped), ``incr_count``, ``decr_count``, ``lr`` and ``grad_norm``, and the
tensors ``param/<name>`` (parameters and buffers), ``grad/<name>``, ``opt/<name>/<accumulator>``
(Paddle's accumulator names) and, when layers are watched, ``act/<layer>`` (a layer's output) and
``actgrad/<layer>`` (the gradient flowing into it). It is saved as two files: ``NAME.json``
(metadata, scalars, the list of tensors) and ``NAME.npz`` (the tensors).

Each tensor is stored either in full, or, above ``full_max_elements`` elements, as a 64-bit digest
of its bytes plus a few sampled elements: enough to tell bitwise equality at every step and to show
where and by how many ulps it differs, in a golden trace of a few tens of KB.

:class:`TraceRecorder` records a run. It works on ``paddle_compat``/torch objects and, by duck
typing, on Paddle's own (``paddle.nn.Layer``, ``paddle.optimizer``, ``paddle.amp.GradScaler``)
inside a Paddle script: this module never imports Paddle. Given the torch port (``port=``), a
Paddle run is recorded under the port's names and layouts, so the two traces compare directly.
"""

from __future__ import annotations

import bisect
import fnmatch
import hashlib
import json
import math
import os
import platform
import shutil
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import _checks
from ..amp.master_grad import grad_of  # works on Paddle's parameters too: they have .grad
from ._arrays import array_of, as_float, copy_of, digest, sample_indices
from .convert import NameMap, Plan, string_list
from .hooks import LayerWatcher
from .optimizer_state import SCALAR_ACCUMULATORS, canonical_state

__all__ = ["ENV_OUT", "SCALARS", "Series", "Trace", "TraceRecorder", "load_trace"]

FORMAT = "paddle_compat.parity.trace"
VERSION = 2  # 2: one .npz member per recorded row, read on demand; 1: one stacked member per tensor
_READABLE = (1, 2)
SCALARS = (
    "loss", "scale", "found_inf", "incr_count", "decr_count", "lr", "pre_clip_norm", "grad_norm", "clip_factor"
)
# Where `python -m paddle_compat.parity record` asks the recorded script to save its trace.
ENV_OUT = "PADDLE_COMPAT_PARITY_TRACE"


def dtype_name(arr: np.ndarray) -> str:
    """The dtype of a recorded array: ``uint16`` is bfloat16's bits (Paddle's convention).

    Args:
        arr: a recorded array.
    """
    return "bfloat16" if arr.dtype == np.uint16 else arr.dtype.name


class _RowSink:
    """A trace's ``.npz`` file written row by row as the run is recorded (nothing kept in memory)."""

    def __init__(self, npath: Path) -> None:
        npath.parent.mkdir(parents=True, exist_ok=True)
        self.path = npath
        # stored, not deflated: training values barely compress, and deflate would cost more than the step
        self._zip = zipfile.ZipFile(npath, "w", zipfile.ZIP_STORED, allowZip64=True)

    def write(self, name: str, arr: np.ndarray) -> None:
        with self._zip.open(name + ".npy", "w", force_zip64=True) as f:
            np.lib.format.write_array(f, np.asarray(arr), allow_pickle=False)

    def close(self) -> None:
        self._zip.close()


class _Rows(Sequence[np.ndarray]):
    """A series' recorded rows, read from the trace's open ``.npz`` when asked for."""

    def __init__(self, npz: Any, names: list[str]) -> None:
        self._npz, self._names = npz, names

    def __len__(self) -> int:
        return len(self._names)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._npz[n] for n in self._names[i]]
        return self._npz[self._names[i]]


class Series:
    """One tensor over the steps where it was recorded: digests always, values in full or sampled.

    ``data`` holds the rows in memory, or (a loaded or streamed trace) reads them from its file."""

    def __init__(
        self, dtype: str, shape: tuple[int, ...], index: np.ndarray | None, sink: tuple[_RowSink, int] | None = None
    ) -> None:
        self.dtype = dtype
        self.shape = tuple(shape)
        self.index = index  # flat indices of the sampled elements; None: stored in full
        self.steps: list[int] = []
        self.digests: list[int] = []
        self.data: Sequence[np.ndarray] = []  # full values, or the sampled ones
        self.last: np.ndarray | None = None  # the last row, while streaming (its rows are on disk)
        self._sink = sink  # (file, this series' number): rows go to the file, not to memory

    @property
    def full(self) -> bool:
        """Whether every element is kept (else a sample, at ``index``)."""
        return self.index is None

    def add(self, step: int, arr: np.ndarray) -> None:
        """Record ``arr`` (of the series' shape) at ``step``."""
        if tuple(arr.shape) != self.shape:
            raise ValueError(f"shape changed from {list(self.shape)} to {list(arr.shape)} at step {step}")
        flat = np.ascontiguousarray(arr).reshape(-1)
        row = flat.copy() if self.full else flat[self.index].copy()
        if self._sink is not None:
            sink, number = self._sink
            sink.write(f"{number}.{len(self.steps)}", row)
            self.last = row
        else:
            if not isinstance(self.data, list):  # a loaded trace, extended: its rows come into memory
                self.data = list(self.data)
            self.data.append(row)
        self.steps.append(step)
        self.digests.append(digest(arr, self.dtype))

    def position(self, step: int) -> int | None:
        """Where ``step`` is in this series (``None``: not recorded then)."""
        pos = bisect.bisect_left(self.steps, step)  # steps are recorded in increasing order
        return pos if pos < len(self.steps) and self.steps[pos] == step else None

    def elements(self, pos: int, index: np.ndarray) -> np.ndarray | None:
        """The values of the flat elements ``index`` at position ``pos``, when they were kept."""
        if self.full:
            return self.data[pos][index]
        if self.index is not None and np.array_equal(self.index, index):
            return self.data[pos]
        return None


def trace_paths(path: str | os.PathLike[str]) -> tuple[Path, Path]:
    """A trace's two files, ``PATH.json`` and ``PATH.npz`` (a ``.json``/``.npz`` suffix on ``path``
    is dropped first)."""
    p = Path(path)
    if p.suffix in (".json", ".npz"):
        p = p.with_suffix("")
    return p.with_name(p.name + ".json"), p.with_name(p.name + ".npz")


def json_float(x: Any) -> Any:
    """``x``, or a non-finite float as ``"nan"``, ``"inf"`` or ``"-inf"`` (JSON has none)."""
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def _decode_float(x: Any) -> Any:
    return float(x) if x in ("nan", "inf", "-inf") else x


class Trace:
    """A recorded run: ``meta`` (dict), ``steps`` (one dict of scalars per step), ``series`` (name ->
    :class:`Series`, in recording order).

    Example::

        trace = Trace.load("golden/demo")         # golden/demo.json + golden/demo.npz
        trace.steps[3]["scale"], trace.final("param/0.weight")
    """

    def __init__(
        self, meta: Mapping[str, Any] | None = None, *, stream_to: str | os.PathLike[str] | None = None
    ) -> None:
        """Args:
        meta: anything JSON-serialisable.
        stream_to: write the tensors to ``PATH.npz`` as they are added, keeping none in memory
            (:meth:`save` then finishes that file and writes ``PATH.json``)."""
        self.meta: dict[str, Any] = dict(meta or {})
        self.steps: list[dict[str, Any]] = []
        self.series: dict[str, Series] = {}
        self._stream = None if stream_to is None else trace_paths(stream_to)
        self._sink = None if self._stream is None else _RowSink(self._stream[1])
        self._npz: Any = None  # the open .npz of a loaded trace

    @property
    def streaming(self) -> bool:
        """Whether tensors are being written to a file that :meth:`save` has not finished yet."""
        return self._sink is not None

    def close(self) -> None:
        """Close the file a loaded trace reads its rows from (they cannot be read afterwards)."""
        if self._npz is not None:
            self._npz.close()
            self._npz = None

    def __len__(self) -> int:
        return len(self.steps)

    def __repr__(self) -> str:
        return f"Trace({len(self)} steps, {len(self.series)} tensors, layout={self.meta.get('layout')!r})"

    def add_step(
        self,
        scalars: Mapping[str, Any],
        tensors: Mapping[str, np.ndarray],
        *,
        full_max_elements: int | None = None,
        sample: int = 16,
    ) -> None:
        """Append one step.

        Args:
            scalars: the step's scalars by name (those of ``SCALARS``; a missing one is ``None``).
            tensors: ``{name: numpy array}`` (bfloat16 as ``uint16`` bits).
            full_max_elements: a tensor with more elements, seen for the first time, is kept
                as a digest plus ``sample`` elements (``None``: everything in full).
            sample: how many elements such a tensor keeps.

        Example::

            trace.add_step({"loss": 0.25, "scale": 1024.0}, {"param/w": w.numpy()})
        """
        step = len(self.steps)
        self.steps.append({k: scalars.get(k) for k in SCALARS})
        for name, arr in tensors.items():
            s = self.series.get(name)
            if s is None:
                arr = np.asarray(arr)
                sampled = full_max_elements is not None and arr.size > full_max_elements
                sink = (self._sink, len(self.series)) if self._sink is not None else None
                s = Series(dtype_name(arr), arr.shape, sample_indices(arr.size, sample) if sampled else None, sink)
                self.series[name] = s
            s.add(step, np.asarray(arr))

    def final(self, name: str) -> np.ndarray | None:
        """The last recorded full value of ``name`` (reshaped), or ``None`` when sampled or absent.

        Args:
            name: a tensor's name, e.g. ``"param/0.weight"``.

        Example::

            model[0].weight.data = torch.from_numpy(trace.final("param/0.weight"))
        """
        s = self.series.get(name)
        if s is None or not s.steps or not s.full:
            return None
        last = s.last if s.last is not None else s.data[-1]
        return np.asarray(last).reshape(s.shape)

    # --- files -----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write ``PATH.json`` and ``PATH.npz`` (a ``.json``/``.npz`` suffix on ``path`` is dropped);
        returns the JSON file's path. A streaming trace finishes its file (``path``: ``None`` or the
        stream's) and reads its rows from it from then on.

        Args:
            path: where, without suffix; missing folders are created.

        Example::

            trace.save("tests/golden/demo")
        """
        if self._sink is not None:
            assert self._stream is not None
            jpath, npath = self._stream
            if path is not None and trace_paths(path)[0].resolve() != jpath.resolve():
                raise ValueError(f"this trace streams to {npath}: save() it there (path=None)")
            for i, s in enumerate(self.series.values()):
                for key, value in _series_arrays(i, s).items():
                    self._sink.write(key, value)
                s._sink = None
            self._sink.close()
            self._sink = None
        else:
            if path is None:
                raise ValueError("save() needs a path")
            jpath, npath = trace_paths(path)
            jpath.parent.mkdir(parents=True, exist_ok=True)
            arrays: dict[str, Any] = {}  # typed Any for savez, whose stub reserves "allow_pickle"
            for i, s in enumerate(self.series.values()):
                arrays.update(_series_arrays(i, s))
                arrays.update((f"{i}.{k}", row) for k, row in enumerate(s.data))
            np.savez_compressed(npath, **arrays)
        listing = [
            {"name": name, "dtype": s.dtype, "shape": list(s.shape), "storage": "full" if s.full else "sampled"}
            for name, s in self.series.items()
        ]
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "meta": self.meta,
            "steps": [{k: json_float(v) for k, v in st.items()} for st in self.steps],
            "tensors": listing,
            "arrays_digest": _arrays_digest(self.series, rows=False),
        }
        jpath.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
        if self._stream is not None and self._npz is None:  # a finished stream: its rows, from the file
            self.close()
            loaded = Trace.load(jpath)
            self.series, self._npz = loaded.series, loaded._npz
            loaded._npz = None
        return jpath

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Trace:
        """Read a trace written by :meth:`save`.

        Args:
            path: the trace's path, with or without its ``.json``/``.npz`` suffix.

        Raises:
            FileNotFoundError: a file is missing.
            ValueError: a file is damaged or truncated, or the two files are not from one trace
                (naming the file); checked before the arrays are read.

        Example::

            trace = Trace.load("tests/golden/demo")
        """
        jpath, npath = trace_paths(path)
        if not jpath.is_file():
            raise FileNotFoundError(f"no trace at {jpath}")
        doc = _read_listing(jpath)
        if not npath.is_file():
            raise FileNotFoundError(f"no trace data at {npath} (a trace is NAME.json and NAME.npz)")
        trace = cls(doc["meta"])
        trace.steps = [{k: _decode_float(v) for k, v in st.items()} for st in doc["steps"]]
        trace.series, trace._npz = _read_series(npath, doc["tensors"], len(trace.steps), doc["version"])
        expected = doc.get("arrays_digest")
        if expected is not None and _arrays_digest(trace.series, rows=doc["version"] == 1) != expected:
            trace.close()
            raise ValueError(f"{jpath} and {npath} are not the two files of one trace (saved by different runs?)")
        return trace


_STORAGE = ("full", "sampled")
_DTYPES = frozenset({"bfloat16", "float16", "float32", "float64", "bool", "uint8", "uint16", "int8", "int16",
                     "int32", "int64", "complex64", "complex128"})


def _read_listing(jpath: Path) -> dict[str, Any]:
    """A trace's JSON file, its structure checked (``ValueError`` naming the file otherwise)."""
    try:
        doc = json.loads(jpath.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{jpath} is not a parity trace (not JSON: {e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{jpath} is not a paddle_compat parity trace")
    if doc.get("version") not in _READABLE:
        raise ValueError(f"{jpath}: trace format version {doc.get('version')}, this reader knows {_READABLE}")

    def bad(what: str) -> ValueError:
        return ValueError(f"{jpath} is damaged: {what}")

    if not isinstance(doc.get("meta"), dict):
        raise bad("'meta' is not an object")
    steps = doc.get("steps")
    if not isinstance(steps, list) or not all(isinstance(st, dict) for st in steps):
        raise bad("'steps' is not a list of objects")
    tensors = doc.get("tensors")
    if not isinstance(tensors, list):
        raise bad("'tensors' is not a list")
    for i, entry in enumerate(tensors):
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("name"), str)
            and entry.get("dtype") in _DTYPES
            and entry.get("storage") in _STORAGE
            and isinstance(entry.get("shape"), list)
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in entry["shape"])
        )
        if not ok:
            raise bad(f"tensor entry {i} is not {{name, dtype, shape, storage}}: {entry!r:.200}")
    digest_ = doc.get("arrays_digest")
    if digest_ is not None and not isinstance(digest_, str):
        raise bad("'arrays_digest' is not a string")
    return doc


# Deflate expands at most about 1032 times: a member that claims more is damaged (or a zip bomb).
_MAX_INFLATE = 1100


def _check_npz_members(zf: zipfile.ZipFile) -> dict[str, tuple[int, ...]]:
    """Every member's declared size agrees with its array header, before numpy allocates the array;
    returns the members' shapes."""
    shapes = {}
    for info in zf.infolist():
        limit = info.compress_size * _MAX_INFLATE + 4096
        if info.file_size > limit:
            raise ValueError(f"{info.filename} claims {info.file_size} bytes")
        with zf.open(info) as f:
            fmt = np.lib.format
            version = fmt.read_magic(f)
            read_header = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(version)
            if read_header is None:
                raise ValueError(f"{info.filename}: .npy format version {version}, which no trace writes")
            shape, _, dtype = read_header(f)
            if dtype.hasobject:
                raise ValueError(f"{info.filename} holds Python objects")
            need = f.tell() + math.prod(shape) * dtype.itemsize
        if need != info.file_size:
            raise ValueError(f"{info.filename} has {info.file_size} bytes, its header needs {need}")
        shapes[info.filename.removesuffix(".npy")] = tuple(shape)
    return shapes


def _series_arrays(i: int, s: Series) -> dict[str, np.ndarray]:
    out = {f"{i}.steps": np.asarray(s.steps, np.int64), f"{i}.digests": np.asarray(s.digests, np.uint64)}
    if s.index is not None:
        out[f"{i}.index"] = s.index
    return out


def _read_series(
    npath: Path, listing: list[dict[str, Any]], n_steps: int, version: int
) -> tuple[dict[str, Series], Any]:
    """The tensors of a trace's ``.npz`` file, checked against its JSON listing, and the open file
    their rows are read from (version 2; version 1's stacked rows are read at once)."""
    series: dict[str, Series] = {}
    z = None
    try:
        with zipfile.ZipFile(npath) as zf:
            shapes = _check_npz_members(zf)
        z = np.load(npath, allow_pickle=False)
        for i, entry in enumerate(listing):
            shape = tuple(entry["shape"])
            index = z[f"{i}.index"] if entry["storage"] == "sampled" else None
            steps, digests = z[f"{i}.steps"], z[f"{i}.digests"]
            width = math.prod(shape) if index is None else len(index)
            n = len(steps)
            rows = [f"{i}.{k}" for k in range(n)]
            if version == 1:
                stacked_ok = shapes.get(f"{i}.data") is not None and math.prod(shapes[f"{i}.data"]) == n * width
                rows_ok = stacked_ok
            else:
                rows_ok = all(shapes.get(r) == (width,) for r in rows)
            problem = None
            if steps.ndim != 1 or digests.shape != (n,) or not rows_ok:
                problem = "its steps, digests and data disagree in length"
            elif n and (np.any(np.diff(steps) <= 0) or steps[0] < 0 or steps[-1] >= n_steps):
                problem = f"its steps are not increasing within the {n_steps} steps of the trace"
            elif index is not None and (index.ndim != 1 or np.any((index < 0) | (index >= math.prod(shape)))):
                problem = "its sampled indices are out of the tensor"
            if problem is not None:
                raise ValueError(f"tensor {entry['name']!r}: {problem}")
            s = Series(entry["dtype"], shape, index)
            s.steps = [int(x) for x in steps]
            s.digests = [int(x) for x in digests]
            s.data = list(z[f"{i}.data"].reshape(n, width)) if version == 1 else _Rows(z, rows)
            series[entry["name"]] = s
    except (zipfile.BadZipFile, EOFError, KeyError, OSError, ValueError) as e:
        if z is not None:
            z.close()
        raise ValueError(f"{npath} is not this trace's data (damaged, truncated, or from another trace): {e}") from None
    if version == 1:
        z.close()
        z = None
    return series, z


def _arrays_digest(series: Mapping[str, Series], *, rows: bool) -> str:
    """A fingerprint of every tensor's recorded steps and digests (and, for version 1, its rows), kept
    in the JSON file to tie it to its ``.npz``."""
    h = hashlib.blake2b(digest_size=16)
    for name, s in series.items():
        h.update(f"{name}|{s.dtype}|{s.shape}|{s.steps}|{s.digests}|".encode())
        if s.index is not None:
            h.update(np.ascontiguousarray(s.index).tobytes())
        for row in s.data if rows else ():
            h.update(np.ascontiguousarray(row).tobytes())
    return h.hexdigest()


def selected(meta: Mapping[str, Any], name: str) -> bool:
    """Whether a trace with this ``meta`` records tensor ``name`` (its include/exclude patterns)."""
    include, exclude = meta.get("include"), meta.get("exclude") or ()
    if include is not None and not any(fnmatch.fnmatchcase(name, p) for p in include):
        return False
    return not any(fnmatch.fnmatchcase(name, p) for p in exclude)


def load_trace(path: str | os.PathLike[str] | Trace) -> Trace:
    """``Trace.load(path)``, or the trace itself.

    Args:
        path: a trace, or the path of a saved one.

    Example::

        reference = load_trace("tests/golden/demo")
    """
    if isinstance(path, Trace):
        if path.streaming:
            raise ValueError("this trace is still streaming to its file: save() it first")
        return path
    return Trace.load(path)


# ---------------------------------------------------------------------------------- the recorder


def _is_torch(obj: Any) -> bool:
    return isinstance(obj, (torch.nn.Module, torch.optim.Optimizer))


class _TorchSide:
    framework = "torch"

    def __init__(self, model: torch.nn.Module, optimizer: Any) -> None:
        self.model, self.optimizer = model, optimizer
        self.layout = "torch"
        self._seen: set[int] = set()  # parameters that have had a gradient at a recorded step

    # Views of the live tensors, not copies: Trace.add_step copies what it keeps, before the run goes on.
    def state(self) -> dict[str, np.ndarray]:
        return {
            k: array_of(v)[0] for k, v in self.model.state_dict().items() if not k.endswith("num_batches_tracked")
        }

    def grads(self) -> dict[str, np.ndarray]:
        return {k: array_of(g)[0] for k, p in self.model.named_parameters() if (g := grad_of(p)) is not None}

    def optimizer_state(self) -> dict[str, dict[str, np.ndarray]]:
        """The state a Paddle optimizer would hold (see ``canonical_state``). Paddle creates a
        parameter's accumulators at the first ``minimize`` that sees its gradient, even a step the
        scaler skips, where torch (and paddle_compat) create them at the first update: until then a
        parameter that has had a gradient shows Paddle's initial values."""
        if self.optimizer is None:
            return {}
        names = {id(p): k for k, p in self.model.named_parameters()}
        params = (p for g in self.optimizer.param_groups for p in g["params"])
        self._seen.update(id(p) for p in params if grad_of(p) is not None)
        state = canonical_state(self.optimizer, initial=lambda p: id(p) in self._seen)
        return {names[pid]: accs for pid, accs in state.items() if pid in names}

    def layer_name(self, name: str) -> str:
        return name


class _PaddleSide:
    """A Paddle layer and optimizer, read by duck typing; converted to the port's names and
    layouts when a port is given."""

    framework = "paddle"

    def __init__(self, layer: Any, optimizer: Any, port: torch.nn.Module | None, name_map: NameMap | None) -> None:
        self.layer, self.optimizer = layer, optimizer
        self.plan = Plan.of(port, name_map) if port is not None else None
        self.layout = "torch" if port is not None else "paddle"
        self._layer_names = {v: k for k, v in self.plan.module_paths.items()} if self.plan else {}

    def _to_port(self, arrays: dict[str, np.ndarray], *, partial: bool, scalar: bool = False) -> dict[str, np.ndarray]:
        return arrays if self.plan is None else self.plan.to_torch(arrays, partial=partial, scalar=scalar)

    def state(self) -> dict[str, np.ndarray]:
        return self._to_port({k: copy_of(v) for k, v in self.layer.state_dict().items()}, partial=False)

    def grads(self) -> dict[str, np.ndarray]:
        grads = {k: copy_of(g) for k, p in self.layer.named_parameters() if (g := grad_of(p)) is not None}
        return self._to_port(grads, partial=True)

    def optimizer_state(self) -> dict[str, dict[str, np.ndarray]]:
        if self.optimizer is None:
            return {}
        structured = {p.name: k for k, p in self.layer.named_parameters()}
        per_acc: dict[str, dict[str, np.ndarray]] = {}
        for acc, by_param in getattr(self.optimizer, "_accumulators", {}).items():
            for pname, var in by_param.items():
                if pname in structured:
                    per_acc.setdefault(acc, {})[structured[pname]] = copy_of(var)
        for pname, var in (getattr(self.optimizer, "_master_weights", None) or {}).items():
            if pname in structured:
                per_acc.setdefault("master_weight", {})[structured[pname]] = copy_of(var)
        out: dict[str, dict[str, np.ndarray]] = {}
        for acc, arrays in per_acc.items():
            for name, arr in self._to_port(arrays, partial=True, scalar=acc in SCALAR_ACCUMULATORS).items():
                out.setdefault(name, {})[acc] = arr
        return out

    def layer_name(self, name: str) -> str:
        return self._layer_names.get(name, name)


def _learning_rate(optimizer: Any) -> float | None:
    if optimizer is None:
        return None
    if callable(getattr(optimizer, "get_lr", None)):
        return float(optimizer.get_lr())
    return float(optimizer.param_groups[0]["lr"])


class _ScalerReader:
    """The scale, counters and this step's verdict of a paddle_compat or Paddle scaler, by duck
    typing. Of ``torch.amp.GradScaler`` only the scale is known (no counters, no per-step verdict:
    ``found_inf`` is ``None``)."""

    def __init__(self, scaler: Any) -> None:
        self.scaler = scaler
        self._skipped = self._skipped_steps()

    def _skipped_steps(self) -> int | None:
        get = getattr(self.scaler, "get_skipped_steps", None)
        return int(get()) if callable(get) else None

    def state(self) -> dict[str, Any]:
        """The scale and counters now (nothing when there is no scaler, or it is off)."""
        state = self.scaler.state_dict() if self.scaler is not None else {}
        out: dict[str, Any] = {}
        if state:
            out["scale"] = float(np.asarray(array_of(state["scale"])[0], np.float32).reshape(-1)[0])
            for key in ("incr_count", "decr_count"):
                if key in state:
                    out[key] = int(np.asarray(state[key]).reshape(-1)[0])
        return out

    def read(self) -> dict[str, Any]:
        """The state after a step, and whether the step was skipped (once per step: it counts)."""
        if self.scaler is None:
            return {}
        return {**self.state(), "found_inf": self._found_inf()}

    def _found_inf(self) -> bool | None:
        last = getattr(self.scaler, "last_step_skipped", None)
        if callable(last):  # paddle_compat
            return bool(last())
        skipped = self._skipped_steps()
        if skipped is not None:
            found, self._skipped = skipped > (self._skipped or 0), skipped
            return found
        if not hasattr(self.scaler, "_cache_found_inf"):
            return None  # not told (torch.amp.GradScaler)
        cached = self.scaler._cache_found_inf  # Paddle's own scaler: None before its first step
        return False if cached is None else bool(np.asarray(array_of(cached)[0]).any())


def _environment() -> dict[str, Any]:
    from .. import _paddle_cpu

    env = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "paddle_cpu": _paddle_cpu.profile(),  # the Paddle CPU profile the port's Adam/AdamW bits follow
    }
    from .. import __version__

    env["paddle_compat"] = __version__
    paddle = sys.modules.get("paddle")  # only if the recorded script imported it itself
    if paddle is not None:
        env["paddle"] = getattr(paddle, "__version__", "?")
    return env


class TraceRecorder:
    """Records a training run step by step; call :meth:`record` once per step, after the optimizer
    step and before the gradients are cleared, then :meth:`save`.

    Args:
        model: the ``torch.nn.Module``, or a ``paddle.nn.Layer`` (duck-typed).
        optimizer: its optimizer (``paddle_compat.optimizer``, ``torch.optim``, or Paddle's), or ``None``.
        scaler: its loss scaler (``paddle_compat.amp.GradScaler``, or Paddle's), or ``None``.
        port: for a Paddle model, the torch port: the trace is then recorded under the port's names
            and layouts (Linear weights transposed, ...) so that it compares with the port's trace.
        name_map: torch names -> Paddle names where they differ (see :mod:`.convert`).
        grads, optimizer_state: record gradients / optimizer accumulators (default: yes).
        layers: watch every layer's output and output gradient (forward/backward hooks), to name the
            first diverging layer; costs a copy of every activation.
        full_max_elements: tensors with more elements are kept as a digest plus ``sample`` elements
            (``None``: everything in full).
        meta: anything JSON-serialisable to keep with the trace (the run's configuration).
        path: stream the tensors to ``PATH.npz`` as they are recorded, keeping none in memory (memory
            stays flat however long the run); :meth:`save` (no path) then finishes the files.
        every: record the tensors every ``every`` steps (the scalars at every step).
        include, exclude: glob patterns over tensor names (``"param/*"``, ``"act/blocks.0.*"``): keep
            only the tensors matching ``include`` (default: all), and none matching ``exclude``.

    Scalars per step: ``loss`` (as given to :meth:`record`), and from the scaler ``scale``,
    ``incr_count``, ``decr_count`` (after the step) and ``found_inf`` (this step was skipped); ``lr``
    (``optimizer.get_lr()``, else the first group's ``lr``); ``grad_norm`` (the global L2 norm of
    the gradients present, in float64: after ``minimize`` they are unscaled, as in Paddle).

    Example::

        rec = TraceRecorder(model, opt, scaler)
        for x, y in data:
            ...; scaler.minimize(opt, scaled)
            rec.record(loss)
            opt.clear_grad()
        rec.save("traces/port")

    As a context manager (PaDiff's ``PaDiffGuard``), streamed to disk, the tensors every 10 steps::

        with TraceRecorder(model, opt, scaler, path="traces/port", every=10, exclude=["*.bias"]) as rec:
            for x, y in data:
                ...
                rec.record(loss)
        # traces/port.json + traces/port.npz are finished here, even if the loop raised
    """

    def __init__(
        self,
        model: Any,
        optimizer: Any = None,
        scaler: Any = None,
        *,
        port: torch.nn.Module | None = None,
        name_map: NameMap | None = None,
        grads: bool = True,
        optimizer_state: bool = True,
        layers: bool = False,
        full_max_elements: int | None = None,
        sample: int = 16,
        meta: Mapping[str, Any] | None = None,
        path: str | os.PathLike[str] | None = None,
        every: int = 1,
        include: Sequence[str] | None = None,
        exclude: Sequence[str] = (),
    ) -> None:
        _checks.at_least("every", _checks.integer("every", every), 1)
        if include is not None:
            include = string_list(include, "include", "glob patterns")
        exclude = string_list(exclude, "exclude", "glob patterns")
        if path is not None and not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path should be a path, but received {type(path).__name__}")
        if full_max_elements is not None:
            _checks.at_least("full_max_elements", _checks.integer("full_max_elements", full_max_elements), 0)
        _checks.at_least("sample", _checks.integer("sample", sample), 1)
        if _is_torch(model):
            if port is not None:
                raise ValueError("port= is for recording a Paddle model; this model is already a torch module")
            self._side: Any = _TorchSide(model, optimizer)
        elif callable(getattr(model, "named_parameters", None)) and callable(getattr(model, "state_dict", None)):
            self._side = _PaddleSide(model, optimizer, port, name_map)
        else:
            raise TypeError(f"model must be a torch.nn.Module or a paddle.nn.Layer, got {type(model).__name__}")
        self._optimizer = optimizer
        self._scaler = _ScalerReader(scaler)
        self._grads, self._opt_state = grads, optimizer_state
        self._watcher = LayerWatcher(model, self._side.layer_name) if layers else None
        self._full_max_elements, self._sample = full_max_elements, sample
        self._every = every
        self._count = 0
        self._pre: dict[str, Any] = {}
        trainable = [p for _, p in model.named_parameters() if not getattr(p, "stop_gradient", False)]
        torch_model = model if isinstance(model, torch.nn.Module) else port
        self.trace = Trace(
            {
                "framework": self._side.framework,
                "layout": self._side.layout,
                "parameter_tensors": len(trainable),  # in the framework's own layout (Paddle: q/k/v apart)
                "unbiased_running_var": _unbiased_running_var(torch_model),
                "full_max_elements": full_max_elements,
                "sample": sample,
                "environment": _environment(),
                "run": dict(meta or {}),
                "every": every,
                "include": None if include is None else list(include),
                "exclude": list(exclude),
            },
            stream_to=path,
        )
        self._streamed = path is not None

    def before_step(self) -> None:
        """Optional, after ``backward`` and before the optimizer step: also record the global norm
        of the gradients before clipping (``pre_clip_norm``, unscaled by the scaler's current scale)
        and the factor a global-norm clip will apply (``clip_factor``, ``clip_norm / max(norm,
        clip_norm)``; 1 when it does not engage), which name the cause when a clip breaks bitwise
        agreement.

        Example::

            scaled.backward()
            recorder.before_step()
            scaler.minimize(opt, scaled)
            recorder.record(loss)
        """
        grads = self._side.grads()
        scale = self._scaler.state().get("scale")
        norm = _global_norm(grads) / (scale or 1.0) if grads else None
        self._pre = {"pre_clip_norm": norm}
        clip = getattr(self._optimizer, "_grad_clip", None)
        clip_norm = getattr(clip, "clip_norm", None)
        if norm is not None and "GlobalNorm" in type(clip).__name__ and isinstance(clip_norm, (int, float)):
            self._pre["clip_factor"] = clip_norm / max(norm, clip_norm) if math.isfinite(norm) else None

    def record(self, loss: Any = None) -> None:
        """Record the step just taken.

        Args:
            loss: the unscaled loss (any tensor or float), or ``None``.

        Example::

            scaler.minimize(opt, scaled)
            recorder.record(loss)
        """
        if self._streamed and not self.trace.streaming:
            raise ValueError("record() after save(): this recorder's streamed trace is finished (start a new one)")
        tensors: dict[str, np.ndarray] = {}
        keep = self._count % self._every == 0  # tensors every `every` steps; scalars always
        self._count += 1
        if self._watcher is not None:
            outputs, grads_in = self._watcher.drain()
            tensors.update((f"act/{k}", v) for k, v in outputs)
            tensors.update((f"actgrad/{k}", v) for k, v in grads_in)
            self._watcher.active = self._count % self._every == 0  # the next step's layers, if it is kept
        scalars: dict[str, Any] = dict(self._pre)
        self._pre = {}
        if loss is not None:
            scalars["loss"] = float(np.asarray(array_of(loss)[0], np.float64).reshape(-1)[0])
        grads = self._side.grads() if self._grads else {}
        if self._grads:
            tensors.update((f"grad/{k}", v) for k, v in grads.items())
            scalars["grad_norm"] = _global_norm(grads) if grads else None
        scalars.update(self._scaler.read())
        scalars["lr"] = _learning_rate(self._optimizer)
        if keep:
            tensors.update((f"param/{k}", v) for k, v in self._side.state().items())
            if self._opt_state:
                for name, accs in self._side.optimizer_state().items():
                    tensors.update((f"opt/{name}/{acc}", v) for acc, v in accs.items())
            tensors = {k: v for k, v in tensors.items() if selected(self.trace.meta, k)}
        else:
            tensors = {}
        self.trace.add_step(scalars, tensors, full_max_elements=self._full_max_elements, sample=self._sample)

    def save(self, path: str | os.PathLike[str] | None = None) -> Path:
        """Write the trace (``PATH.json`` + ``PATH.npz``); returns the JSON file's path.

        Args:
            path: where; ``None``: where ``python -m paddle_compat.parity record`` asked (the
                ``PADDLE_COMPAT_PARITY_TRACE`` variable). A streamed trace (``path=`` given to the
                recorder) is finished where it streams, and copied there when ``record`` asked.

        Example::

            recorder.save("traces/port")
        """
        if self.trace.streaming:
            jpath = self.trace.save(path)
            wanted = os.environ.get(ENV_OUT) if path is None else None
            if wanted and trace_paths(wanted)[0].resolve() != jpath.resolve():
                # recorded by `python -m paddle_compat.parity record`: a copy where the command looks
                for src, dst in zip(trace_paths(jpath), trace_paths(wanted), strict=True):
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, dst)
            return jpath
        if path is None:
            path = os.environ.get(ENV_OUT)
            if not path:
                raise ValueError(f"save() needs a path (or the {ENV_OUT} environment variable)")
        return self.trace.save(path)

    def close(self) -> None:
        """Remove the layer hooks (if any); the trace stays.

        Example::

            recorder.close()
        """
        if self._watcher is not None:
            self._watcher.remove()
            self._watcher = None

    def __enter__(self) -> TraceRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        """Leaving a ``with`` block removes the layer hooks and finishes a streamed trace's files
        (also when the loop raised: the steps recorded so far stay readable)."""
        self.close()
        if self.trace.streaming:
            self.save()


def _unbiased_running_var(model: torch.nn.Module | None) -> list[str]:
    """The ``running_var`` keys that torch updates with the unbiased batch variance (Paddle: biased)."""
    if model is None:
        return []
    return [
        f"{path}.running_var" if path else "running_var"
        for path, m in model.named_modules()
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats
    ]


def _global_norm(grads: Mapping[str, np.ndarray]) -> float:
    total = 0.0
    for g in grads.values():
        v = as_float(g, dtype_name(g)).astype(np.float64)
        total += float(np.sum(v * v))
    return math.sqrt(total)
