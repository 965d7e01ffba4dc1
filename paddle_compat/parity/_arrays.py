"""Arrays from either framework, their bits, ulp distances, digests and tolerances.

Everything here works on numpy arrays. A torch tensor is turned into one by torch, a Paddle tensor
by duck typing (its ``numpy()``), so this module never imports Paddle.
bfloat16 has no numpy dtype: its values travel as their raw ``uint16`` bits, with the dtype name
``"bfloat16"`` carried alongside (Paddle's own ``numpy()`` and ``paddle.save`` do the same).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
import torch

# torch.testing.assert_close's default (rtol, atol) per dtype; integers and bools compare exactly.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}

_FLOAT_BITS: dict[str, type[np.signedinteger[Any]]] = {
    "float16": np.int16, "bfloat16": np.int16, "float32": np.int32, "float64": np.int64,
}


def array_of(value: Any) -> tuple[np.ndarray, str]:
    """``value`` (torch tensor, Paddle tensor, numpy array or number) as ``(numpy array, dtype name)``.

    bfloat16 comes back as its ``uint16`` bits with the name ``"bfloat16"``.
    """
    if isinstance(value, np.ndarray):
        return value, value.dtype.name
    if isinstance(value, np.generic):
        return np.asarray(value), value.dtype.name
    if isinstance(value, torch.Tensor):  # a type check: Paddle's tensors have detach() too
        t = value.detach().cpu()
        if t.dtype == torch.bfloat16:
            return t.contiguous().view(torch.int16).numpy().view(np.uint16), "bfloat16"
        return t.numpy(), str(t.dtype).replace("torch.", "")
    if callable(getattr(value, "numpy", None)):  # Paddle (or anything else with numpy())
        name = str(getattr(value, "dtype", "")).replace("paddle.", "")
        arr = np.asarray(value.numpy())
        if name == "bfloat16":
            return arr.view(np.uint16), "bfloat16"
        return arr, arr.dtype.name
    if isinstance(value, (bool, int, float)):
        arr = np.asarray(value)
        return arr, arr.dtype.name
    raise TypeError(f"expected a tensor or a numpy array, got {type(value).__name__}")


def copy_of(value: Any) -> np.ndarray:
    """``array_of(value)``'s array as a copy of its own (never a view of a live tensor)."""
    return np.array(array_of(value)[0], copy=True)


def as_float(arr: np.ndarray, dtype: str) -> np.ndarray:
    """The values of ``arr`` as floating point (float64 for float64, float32 otherwise; bfloat16
    bits widened exactly)."""
    if dtype == "bfloat16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    if dtype == "float64":
        return arr
    return arr.astype(np.float32) if arr.dtype.kind == "f" else arr.astype(np.float64)


def is_float(dtype: str) -> bool:
    return dtype in _FLOAT_BITS


def bits(arr: np.ndarray, dtype: str) -> np.ndarray:
    """The raw bit patterns of a float array as signed integers (bitwise comparison: -0.0 and 0.0
    differ, NaN payloads count)."""
    return np.ascontiguousarray(arr).view(_FLOAT_BITS[dtype])


def ulp_distance(a: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    """Elementwise distance in units in the last place, as float64 (exact below 2**53).

    Both zeros are 0 apart; two NaNs are 0 apart; a NaN and a number are ``inf`` apart. For integer
    dtypes it is the absolute difference.
    """
    if not is_float(dtype):
        return np.abs(a.astype(np.float64) - b.astype(np.float64))
    ia, ib = bits(a, dtype).astype(np.int64), bits(b, dtype).astype(np.int64)
    # Map sign-magnitude bit patterns onto one monotonic integer line: -x lands at -(magnitude).
    mask = np.int64(np.iinfo(_FLOAT_BITS[dtype]).max)
    oa = np.where(ia < 0, -(ia & mask), ia)
    ob = np.where(ib < 0, -(ib & mask), ib)
    # Unsigned wrap-around keeps the difference exact even across the whole float64 range.
    ua, ub = oa.astype(np.uint64), ob.astype(np.uint64)
    dist = np.where(oa >= ob, ua - ub, ub - ua).astype(np.float64)
    fa, fb = np.isnan(as_float(a, dtype)), np.isnan(as_float(b, dtype))
    dist[fa & fb] = 0.0
    dist[fa ^ fb] = np.inf
    return dist


def tolerances(dtype: str, rtol: float | None, atol: float | None) -> tuple[float, float]:
    """``(rtol, atol)``: the given ones, or torch.testing's defaults for ``dtype`` (both or neither)."""
    if rtol is None and atol is None:
        return DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
    if rtol is None or atol is None:
        raise ValueError("rtol and atol must be given together (or neither, for the per-dtype defaults)")
    return float(rtol), float(atol)


def digest(arr: np.ndarray, dtype: str) -> int:
    """A 64-bit fingerprint of the dtype, shape and exact bytes of ``arr`` (equal bits, equal digest)."""
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{dtype}|{tuple(arr.shape)}|".encode())
    # the array's own buffer, not a bytes copy of it: the same bytes, half the time
    h.update(np.ascontiguousarray(arr).reshape(-1).view(np.uint8).data)
    return int.from_bytes(h.digest(), "little")


def sample_indices(numel: int, k: int) -> np.ndarray:
    """``k`` flat indices spread over ``numel`` elements (all of them when ``numel <= k``).

    A multiplicative hash rather than an even stride, so that a sample does not fall on one row or
    column of a matrix. Deterministic; the indices are stored with a trace anyway.
    """
    if numel <= k:
        return np.arange(numel, dtype=np.int64)
    idx = (np.arange(k, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(12345)) % np.uint64(numel)
    return np.unique(idx.astype(np.int64))


def closeness(reference: np.ndarray, candidate: np.ndarray) -> dict[str, float]:
    """How far ``candidate`` is from ``reference``, by measures that do not saturate near zero.

    - ``rel_l2``: ``||candidate - reference|| / ||reference||`` over the finite elements (0 when
      both are all zeros, ``inf`` when only the reference is);
    - ``cosine``: the cosine similarity of the two (1 for equal directions);
    - ``max_abs``: the largest absolute difference;
    - ``scaled_ulps``: ``max_abs`` in units of the last place of the reference's largest magnitude
      (float32's, or the reference's dtype's), so that an element near zero counts by the tensor's
      scale, not its own (0 vs 1e-9 is not a billion ulps);
    - ``nonfinite``: elements where one side is inf/NaN and the other is not, or they differ.

    Args:
        reference, candidate: arrays of one shape (bfloat16 given as float32 values).
    """
    a = np.asarray(reference, np.float64).reshape(-1)
    b = np.asarray(candidate, np.float64).reshape(-1)
    fa, fb = np.isfinite(a), np.isfinite(b)
    same_nonfinite = (a == b) | (np.isnan(a) & np.isnan(b))
    nonfinite = int(np.sum((~fa | ~fb) & ~same_nonfinite))
    both = fa & fb
    a, b = a[both], b[both]
    diff = b - a
    na, nd = float(np.linalg.norm(a)), float(np.linalg.norm(diff))
    rel = 0.0 if nd == 0 else (nd / na if na > 0 else math.inf)
    nb = float(np.linalg.norm(b))
    cosine = 1.0 if na == nb == 0 else (float(a @ b) / (na * nb) if na > 0 and nb > 0 else 0.0)
    max_abs = float(np.max(np.abs(diff))) if diff.size else 0.0
    ref_dtype = np.asarray(reference).dtype
    spacing_dtype = ref_dtype if ref_dtype.kind == "f" and ref_dtype.itemsize >= 4 else np.dtype(np.float32)
    scale = float(np.max(np.abs(a))) if a.size else 0.0
    tiny = float(np.finfo(spacing_dtype).smallest_subnormal)
    ulp = float(np.spacing(spacing_dtype.type(scale))) if scale > 0 else tiny
    return {"rel_l2": rel, "cosine": cosine, "max_abs": max_abs, "scaled_ulps": max_abs / ulp, "nonfinite": nonfinite}
