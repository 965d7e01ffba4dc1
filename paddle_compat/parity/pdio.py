"""Read and write the files ``paddle.save`` makes (``.pdparams``, ``.pdopt``) without Paddle.

``paddle.save`` (3.3.1, pickle protocol 2-4) writes plain pickles of:

- a layer's or optimizer's state dict whose values are all tensors: a dict of numpy arrays, plus
  the key ``"StructuredToParameterName@@"`` (structured name -> Paddle's parameter name); with
  protocol 2/3, arrays over 1 GiB are split into ``name@@.0``, ``name@@.1``... and listed under
  ``"UnpackBigParamInfor@@"``;
- anything else (an optimizer state dict holding ``master_weights``, nested dicts, lists): the
  object itself, each Paddle tensor reduced to ``tuple((name, numpy_array))``, each raw
  ``DenseTensor`` to ``eval("data", {"data": numpy_array})``.

bfloat16 tensors are stored as ``uint16`` arrays (their bits). The unpickler here only lets
through what those files need: numpy arrays, dtypes and scalars without Python objects inside,
``tuple``, ``OrderedDict``, ``_codecs.encode`` (protocol 2's bytes) and that one ``eval`` form,
replaced by a function that accepts nothing else. Any other global, or a persistent id, raises
``UnsafePickleError`` before it is imported or called. A damaged or truncated file raises
``CorruptFileError`` naming it; every length the pickle declares is checked against the file's size
before anything is unpickled, so a corrupt length cannot make the reader allocate.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import importlib
import io
import mmap
import os
import pickle
import pickletools
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

import numpy as np

__all__ = ["CorruptFileError", "UnsafePickleError", "load", "parameter_names", "save"]

NAME_TABLE = "StructuredToParameterName@@"
_BIG_PARAM_INFO = "UnpackBigParamInfor@@"  # Paddle's spelling


class UnsafePickleError(pickle.UnpicklingError):
    """The file asks for something a Paddle checkpoint never contains; nothing of it was run."""


class CorruptFileError(ValueError):
    """The file is not a whole pickle (truncated, or damaged); nothing of it was unpickled."""


@functools.cache  # called for every array and scalar unpickled
def _multiarray(name: str) -> Any:
    """A function of numpy's ``multiarray`` module (``numpy._core`` from numpy 2, ``numpy.core`` before)."""
    try:
        module = importlib.import_module("numpy._core.multiarray")
    except ImportError:  # pragma: no cover - numpy 1.x
        module = importlib.import_module("numpy.core.multiarray")
    return getattr(module, name)


def _refuse_objects(dtype: np.dtype, what: str) -> np.dtype:
    if dtype.hasobject:
        raise UnsafePickleError(f"{what} with Python objects inside (dtype {dtype}) is not allowed")
    return dtype


def _safe_dtype(*args: Any) -> np.dtype:
    return _refuse_objects(np.dtype(*args), "a numpy dtype")


def _safe_reconstruct(subtype: Any, shape: Any, dtype: Any) -> np.ndarray:
    if subtype is not np.ndarray:
        raise UnsafePickleError(f"only plain numpy arrays are allowed, not {subtype!r}")
    return _multiarray("_reconstruct")(subtype, shape, dtype)


def _safe_scalar(dtype: Any, *data: Any) -> Any:
    if not isinstance(dtype, np.dtype):
        raise UnsafePickleError("a numpy scalar needs a numpy dtype")
    _refuse_objects(dtype, "a numpy scalar")
    return _multiarray("scalar")(dtype, *data)


def _codecs_encode(text: Any, encoding: Any = "utf-8") -> bytes:
    # What protocol 2 writes for a bytes object: _codecs.encode(str, "latin1").
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise UnsafePickleError("_codecs.encode is only allowed as protocol 2's bytes form")
    return text.encode("latin1")


def _dense_tensor_eval(source: Any, namespace: Any = None) -> np.ndarray:
    # paddle.save reduces a raw DenseTensor to eval("data", {"data": array}): nothing else is run.
    if source == "data" and isinstance(namespace, dict) and set(namespace) == {"data"}:
        if isinstance(namespace["data"], np.ndarray):
            return namespace["data"]
    raise UnsafePickleError("eval is only allowed as paddle.save's DenseTensor form eval('data', {'data': array})")


_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy._core.multiarray", "_reconstruct"): _safe_reconstruct,
    ("numpy.core.multiarray", "_reconstruct"): _safe_reconstruct,
    ("numpy._core.multiarray", "scalar"): _safe_scalar,
    ("numpy.core.multiarray", "scalar"): _safe_scalar,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): _safe_dtype,
    ("builtins", "tuple"): tuple,
    ("__builtin__", "tuple"): tuple,  # protocol 2 writes Python 2's module names
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("_codecs", "encode"): _codecs_encode,
    ("builtins", "eval"): _dense_tensor_eval,
    ("__builtin__", "eval"): _dense_tensor_eval,
}


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise UnsafePickleError(
                f"refusing to load {module}.{name}: a file written by paddle.save never needs it"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("refusing a persistent id: paddle.save never writes one")


@contextlib.contextmanager
def _contents(source: str | os.PathLike[str] | bytes | BinaryIO) -> Iterator[tuple[Any, str]]:
    """The bytes to unpickle (a file mapped, not read: a checkpoint is not held twice in memory) and
    how messages name their origin."""
    if isinstance(source, bytes):
        yield source, "the given bytes"
    elif isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            try:
                mapped: mmap.mmap | None = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # an empty file, or one that cannot be mapped (a pipe)
                mapped = None
            if mapped is None:
                yield f.read(), os.fspath(source)
            else:
                with mapped:
                    yield mapped, os.fspath(source)
    elif callable(getattr(source, "read", None)):
        data = source.read()
        if not isinstance(data, bytes):
            raise TypeError(f"source must be opened in binary mode, its read() gave {type(data).__name__}")
        yield data, str(getattr(source, "name", "the file object"))
    else:
        raise TypeError(f"source must be a path, bytes or a binary file object, got {type(source).__name__}")


def _stream(data: Any) -> Any:
    """A file-like reader over ``data`` (bytes or a memory map) from its start; reading never copies
    more than it returns, so a corrupt length cannot make it allocate."""
    if isinstance(data, mmap.mmap):
        data.seek(0)
        return data
    return io.BytesIO(data)


def _check_lengths(data: Any, origin: str) -> None:
    """Refuse a pickle whose declared lengths run past its end, before the unpickler allocates them
    (it reserves a frame's declared length up front)."""
    try:
        for op, arg, pos in pickletools.genops(_stream(data)):
            if op.name == "FRAME" and (pos or 0) + 9 + int(arg or 0) > len(data):
                raise ValueError(f"a frame of {arg} bytes at byte {pos}, but the file has {len(data)} bytes")
            if op.name == "STOP":
                return
        raise ValueError("it ends before the pickle's STOP")
    except ValueError as e:  # pickletools says what is wrong where (truncated argument, unknown opcode)
        raise CorruptFileError(f"{origin} is not a whole paddle.save file (truncated or corrupt): {e}") from None


def _read(source: str | os.PathLike[str] | bytes | BinaryIO) -> tuple[Any, str]:
    """The unpickled object and how messages name its origin."""
    with _contents(source) as (data, origin):
        _check_lengths(data, origin)
        try:
            obj = _RestrictedUnpickler(_stream(data), encoding="latin1").load()
            _check_no_objects(obj)
        except UnsafePickleError as e:
            raise UnsafePickleError(f"{origin}: {e}") from None
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as e:
            raise CorruptFileError(f"{origin} is not a paddle.save file (corrupt): {type(e).__name__}: {e}") from None
    return obj, origin


def _check_no_objects(obj: Any) -> None:
    """Refuse arrays of Python objects anywhere (a dtype's pickled state could still ask for one)."""
    if isinstance(obj, (np.ndarray, np.generic)):
        _refuse_objects(obj.dtype, "an array")
    elif isinstance(obj, Mapping):
        for value in obj.values():
            _check_no_objects(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            _check_no_objects(value)


def _tensors_as_arrays(obj: Any) -> Any:
    """paddle.load's view: a saved tensor ``(name, array)`` becomes the array."""
    if isinstance(obj, tuple) and len(obj) == 2 and isinstance(obj[0], str) and isinstance(obj[1], np.ndarray):
        return obj[1]
    if isinstance(obj, dict):  # also OrderedDict: the only mappings a checkpoint can hold
        return type(obj)((k, _tensors_as_arrays(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_tensors_as_arrays(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_tensors_as_arrays(v) for v in obj)
    return obj


def _join_big_params(obj: dict[str, Any], origin: str) -> dict[str, Any]:
    info = obj.pop(_BIG_PARAM_INFO)
    try:
        for key, entry in info.items():
            parts = [obj.pop(part) for part in entry["slices"]]
            obj[key] = np.concatenate(parts).reshape(entry["OriginShape"])
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        raise CorruptFileError(f"{origin}: its {_BIG_PARAM_INFO!r} table does not match its slices: {e!r}") from None
    return obj


def load(source: str | os.PathLike[str] | bytes | BinaryIO) -> Any:
    """What ``paddle.load(path, return_numpy=True)`` returns, read without Paddle and without
    running pickled code.

    Args:
        source: a path, the file's bytes, or a binary file object.

    Returns:
        The saved object with every tensor as a numpy array (bfloat16 as ``uint16`` bits, as Paddle
        does). The ``"StructuredToParameterName@@"`` table is removed, as ``paddle.load`` removes
        it; :func:`parameter_names` reads it.

    Raises:
        UnsafePickleError: the file holds anything beyond what ``paddle.save`` writes.
        CorruptFileError: the file is truncated or damaged (a ``ValueError`` naming the file).

    Example::

        state = pdio.load("model.pdparams")      # {"0.weight": array(...), ...}

    Differs from Paddle: safetensors files (``paddle.save(..., safetensors=True)``) and static-graph
    programs are not read.
    """
    obj, origin = _read(source)
    if isinstance(obj, dict):
        obj.pop(NAME_TABLE, None)
        if _BIG_PARAM_INFO in obj:
            obj = _join_big_params(obj, origin)
    return _tensors_as_arrays(obj)


def parameter_names(source: str | os.PathLike[str] | bytes | BinaryIO | Mapping[str, Any]) -> dict[str, str]:
    """The structured name -> Paddle parameter name table of a ``.pdparams`` file.

    ``{"0.weight": "linear_0.w_0", ...}``: the names a ``.pdopt`` file's accumulators are keyed by
    (``linear_0.w_0_moment1_0``).

    Args:
        source: a file as for :func:`load`, or a dict read from one with its table still in it.

    Example::

        names = pdio.parameter_names("model.pdparams")   # {"0.weight": "linear_0.w_0", ...}
    """
    obj = source if isinstance(source, Mapping) else _read(source)[0]
    table = obj.get(NAME_TABLE) if isinstance(obj, Mapping) else None
    if not isinstance(table, Mapping):
        raise ValueError(f"no {NAME_TABLE!r} table: not a layer state dict saved by paddle.save")
    return dict(table)


def save(
    obj: Mapping[str, Any], path: str | os.PathLike[str], parameter_names: Mapping[str, str] | None = None
) -> None:
    """Write a state dict of numpy arrays as ``paddle.save`` would, so that ``paddle.load`` reads it.

    Args:
        obj: ``{name: numpy array}`` (nested dicts, numbers and strings allowed, as in an optimizer
            state dict's ``"master_weights"`` and ``"LR_Scheduler"``); bfloat16 as ``uint16`` bits.
        path: the file to write.
        parameter_names: the ``"StructuredToParameterName@@"`` table to store (optional).

    Example::

        pdio.save(torch_to_paddle(model), "model.pdparams")   # then paddle.load + set_state_dict
    """
    if not isinstance(obj, Mapping):
        raise TypeError(f"obj must be a dict, got {type(obj).__name__}")
    _check_saveable(obj, "obj")
    out = dict(obj)
    if parameter_names is not None:
        out[NAME_TABLE] = dict(parameter_names)
    with open(path, "wb") as f:
        pickle.dump(out, f, protocol=4)


def _check_saveable(obj: Any, where: str) -> None:
    if isinstance(obj, np.ndarray):
        _refuse_objects(obj.dtype, f"{where}: an array")
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"{where}: keys must be strings, got {k!r}")
            _check_saveable(v, f"{where}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _check_saveable(v, f"{where}[{i}]")
    elif not isinstance(obj, (bool, int, float, str, type(None), np.generic)):
        raise TypeError(f"{where}: {type(obj).__name__} is not a numpy array, number or string")
