"""What Paddle's CPU kernels get from Eigen and libm, reproduced to the bit: ``pow`` and the
sum of squares (``SquaredL2Norm``, Lamb's trust ratio).

Eigen's full sum on the CPU (``Tensor::sum()`` on its default device) is not a left-to-right
sum: runs of up to ``1024`` packets are summed in two interleaved packet accumulators, their
lanes folded in a fixed order, and longer runs are halved (at a packet boundary) and the halves
summed. The packet width is the SIMD width Paddle's build vectorizes with: 8 float32 lanes
(AVX), 4 float64 lanes.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["pow_like_libm", "sum_of_squares"]

_LEAF_PACKETS = 1024  # Eigen's ``kLeafSize`` for float and double
_LANES = {torch.float32: 8, torch.float64: 4}


def pow_like_libm(x: float, y: float, dtype: torch.dtype) -> float:
    """``std::pow`` of two values of ``dtype`` (float32: ``powf``), as a C++ kernel computes it."""
    np_dtype = np.float64 if dtype == torch.float64 else np.float32
    with np.errstate(all="ignore"):
        return float(np.power(np_dtype(x), np_dtype(y)))


def sum_of_squares(t: Tensor) -> float:
    """``sum(t*t)`` of a float32/float64 CPU tensor, summed in Eigen's order (see the module)."""
    x = np.ascontiguousarray(t.detach().reshape(-1).numpy())
    squares = x * x
    lanes = _LANES[t.dtype]
    return float(_reduce(squares, 0, squares.size, lanes))


def _reduce(x: np.ndarray, first: int, count: int, lanes: int) -> np.floating:
    """Eigen's ``InnerMostDimReducer`` for a sum (tree reduction, vectorized)."""
    zero = x.dtype.type(0)
    if count > lanes * _LEAF_PACKETS:
        half = first + -(-count // 2)
        split = lanes * -(-half // lanes)  # the split point, rounded up to a packet boundary
        left = min(split - first, count)
        total = zero + _reduce(x, first, left, lanes)
        if left < count:
            total = total + _reduce(x, split, count - left, lanes)
        return total
    unrolled = (count // (2 * lanes)) * 2 * lanes
    vectorized = (count // lanes) * lanes
    acc = np.zeros(lanes, x.dtype)
    acc2 = np.zeros(lanes, x.dtype)
    if unrolled:
        pairs = x[first : first + unrolled].reshape(-1, 2, lanes)
        for k in range(pairs.shape[0]):  # the packets one after another, as the CPU adds them
            acc += pairs[k, 0]
            acc2 += pairs[k, 1]
    if vectorized > unrolled:
        acc += x[first + unrolled : first + vectorized]
    acc = acc + acc2
    scalar = zero
    for v in x[first + vectorized : first + count]:
        scalar = scalar + v
    return scalar + _fold(acc)


def _fold(acc: np.ndarray) -> np.floating:
    """``predux``: the lanes of a packet summed as Eigen's SSE/AVX code does: halves added, then
    the lanes of the 4-lane (float32) or 2-lane (float64) half: ``(a0 + a2) + (a1 + a3)`` and ``a0 + a1``."""
    while acc.size > 4 or (acc.size > 2 and acc.dtype == np.float64):
        half = acc.size // 2
        acc = acc[:half] + acc[half:]
    if acc.size == 4:
        return (acc[0] + acc[2]) + (acc[1] + acc[3])
    return acc[0] + acc[1]
