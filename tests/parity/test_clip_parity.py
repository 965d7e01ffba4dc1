"""Gradient clipping parity with real Paddle 3.3.1 on CPU, bitwise, called directly on (param, grad) lists."""

from __future__ import annotations

import itertools

import numpy as np
import paddle
import pytest
import torch

import paddle_compat.nn as pnn
from paddle_compat.nn.clip import squared_l2_norm

_UNIQUE = itertools.count()

SIZES = [1, 7, 8, 17, 100, 1000, 8192, 8193, 8200, 20000, 70001]


def _grads(
    seed: int, sizes: list[int], dtype: str = "float32", scale_exp: tuple[int, int] = (-3, 2)
) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal(n) * 10.0 ** rng.uniform(*scale_exp)).astype(dtype)
        for n in sizes
    ]


def _paddle_pairs(grads: list[np.ndarray], need_clip: list[bool] | None = None) -> list:
    pairs = []
    for i, g in enumerate(grads):
        p = paddle.create_parameter(
            list(g.shape), str(g.dtype), name=f"clip_param_{next(_UNIQUE)}",
            default_initializer=paddle.nn.initializer.Constant(0.0),
        )
        if need_clip is not None:
            p.need_clip = need_clip[i]
        pairs.append((p, paddle.to_tensor(g)))
    return pairs


def _our_pairs(grads: list[np.ndarray], need_clip: list[bool] | None = None) -> list:
    pairs = []
    for i, g in enumerate(grads):
        p = torch.nn.Parameter(torch.zeros(g.shape, dtype=torch.from_numpy(g).dtype))
        if need_clip is not None:
            p.need_clip = need_clip[i]
        pairs.append((p, torch.from_numpy(g.copy())))
    return pairs


def _assert_same(ours: list, theirs: list) -> None:
    assert len(ours) == len(theirs)
    for (_, a), (_, b) in zip(ours, theirs):
        a, b = a.numpy(), b.numpy()
        view = np.int32 if a.dtype == np.float32 else np.int64
        assert a.dtype == b.dtype
        assert np.array_equal(a.view(view), b.view(view)), f"max abs diff {np.abs(a - b).max()}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_squared_l2_norm_bitwise(dtype: str) -> None:
    from paddle import _C_ops

    for seed, n in enumerate(SIZES):
        for trial in range(3):
            (g,) = _grads(100 * seed + trial, [n], dtype)
            theirs = _C_ops.squared_l2_norm(paddle.to_tensor(g)).numpy().reshape(())
            ours = squared_l2_norm(torch.from_numpy(g)).numpy()
            assert ours.tobytes() == theirs.tobytes(), (n, trial, ours, theirs)


@pytest.mark.parametrize("clip_norm", [0.5, 5.0, 1e6])
def test_global_norm_bitwise(clip_norm: float) -> None:
    # 20 tensors: the per-tensor squares are summed with a packet-vectorised reduction too
    grads = _grads(1, SIZES + [3, 5, 9, 33, 64, 129, 300, 4097, 10, 2])
    ours = pnn.ClipGradByGlobalNorm(clip_norm)(_our_pairs(grads))
    theirs = paddle.nn.ClipGradByGlobalNorm(clip_norm)(_paddle_pairs(grads))
    _assert_same(ours, theirs)


def test_global_norm_mixed_float64_and_need_clip() -> None:
    grads = _grads(2, [100, 20000], "float32") + _grads(3, [50, 9000], "float64")
    need = [True, False, True, True]
    ours = pnn.ClipGradByGlobalNorm(0.1)(_our_pairs(grads, need))
    theirs = paddle.nn.ClipGradByGlobalNorm(0.1)(_paddle_pairs(grads, need))
    _assert_same(ours, theirs)
    assert np.array_equal(ours[1][1].numpy(), grads[1])  # need_clip=False passes through


def test_global_norm_is_in_place_and_others_are_not() -> None:
    grads = _grads(4, [50, 60])
    pairs = _our_pairs(grads)
    out = pnn.ClipGradByGlobalNorm(0.01)(pairs)
    assert all(o[1] is p[1] for o, p in zip(out, pairs))  # Paddle multiplies in place
    for clip in (pnn.ClipGradByNorm(0.01), pnn.ClipGradByValue(0.01)):
        pairs = _our_pairs(grads)
        out = clip(pairs)
        assert all(o[1] is not p[1] for o, p in zip(out, pairs))
        assert all(np.array_equal(p[1].numpy(), g) for p, g in zip(pairs, grads))


@pytest.mark.parametrize("clip_norm", [0.05, 1.0, 1e5])
def test_by_norm_bitwise(clip_norm: float) -> None:
    # Paddle's CPU clip_by_norm kernel is float32 only.
    grads = _grads(5, SIZES) + [np.zeros(10, "float32")]
    ours = pnn.ClipGradByNorm(clip_norm)(_our_pairs(grads))
    theirs = paddle.nn.ClipGradByNorm(clip_norm)(_paddle_pairs(grads))
    _assert_same(ours, theirs)


@pytest.mark.parametrize(("max_", "min_"), [(0.3, None), (0.5, -0.01), (2.0, 1.0)])
def test_by_value_bitwise(max_: float, min_: float | None) -> None:
    grads = _grads(6, [10, 1000, 9000])
    grads[0][:3] = [np.inf, -np.inf, np.nan]
    ours = pnn.ClipGradByValue(max_, min_)(_our_pairs(grads))
    theirs = paddle.nn.ClipGradByValue(max_, min_)(_paddle_pairs(grads))
    _assert_same(ours, theirs)


def test_global_norm_with_overflowing_sum() -> None:
    # The float32 sum of squares overflows to inf: every gradient becomes 0 (or NaN), as in Paddle.
    grads = _grads(7, [100, 100], scale_exp=(19, 20))
    ours = pnn.ClipGradByGlobalNorm(1.0)(_our_pairs(grads))
    theirs = paddle.nn.ClipGradByGlobalNorm(1.0)(_paddle_pairs(grads))
    _assert_same(ours, theirs)


def test_str_matches_paddle() -> None:
    for ours, theirs in [
        (pnn.ClipGradByGlobalNorm(1.5), paddle.nn.ClipGradByGlobalNorm(1.5)),
        (pnn.ClipGradByNorm(0.25), paddle.nn.ClipGradByNorm(0.25)),
        (pnn.ClipGradByValue(2.0), paddle.nn.ClipGradByValue(2.0)),
    ]:
        assert str(ours) == str(theirs)
