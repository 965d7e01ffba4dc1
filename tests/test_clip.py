"""paddle_compat.nn clips without Paddle: bad input, semantics, the reduction order's accuracy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import paddle_compat.nn as pnn
from paddle_compat.nn.clip import _eigen_sum, _split_plan, squared_l2_norm


def _pairs(*grads: torch.Tensor) -> list:
    return [(torch.nn.Parameter(torch.zeros_like(g)), g.clone()) for g in grads]


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="max should be greater than 0"):
        pnn.ClipGradByValue(-1.0)
    with pytest.raises(TypeError, match="max should be a float"):
        pnn.ClipGradByValue("1.0")
    with pytest.raises(TypeError, match="clip_norm should be a float"):
        pnn.ClipGradByNorm(None)
    with pytest.raises(TypeError, match="clip_norm should be a float"):
        pnn.ClipGradByGlobalNorm([1.0])
    with pytest.raises(TypeError, match="auto_skip_clip should be a bool"):
        pnn.ClipGradByGlobalNorm(1.0, auto_skip_clip=1)


def test_base_class_names() -> None:
    assert pnn.GradientClipBase is pnn.ClipGradBase
    for clip in (pnn.ClipGradByValue(1.0), pnn.ClipGradByNorm(1.0), pnn.ClipGradByGlobalNorm(1.0)):
        assert isinstance(clip, pnn.ClipGradBase)


def test_by_value_default_min_and_none_grads() -> None:
    p = torch.nn.Parameter(torch.zeros(3))
    out = pnn.ClipGradByValue(0.5)([(p, torch.tensor([-2.0, 0.1, 2.0])), (p, None)])
    assert len(out) == 1 and torch.equal(out[0][1], torch.tensor([-0.5, 0.1, 0.5]))


def test_need_clip_false_is_left_alone() -> None:
    pairs = _pairs(torch.full((4,), 10.0), torch.full((4,), 10.0))
    pairs[1][0].need_clip = False
    for clip in (pnn.ClipGradByValue(1.0), pnn.ClipGradByNorm(1.0), pnn.ClipGradByGlobalNorm(1.0)):
        out = clip([(p, g.clone()) for p, g in pairs])
        assert torch.equal(out[1][1], torch.full((4,), 10.0))
        assert out[0][1].abs().max() <= 1.0


def test_global_norm_always_multiplies_unless_auto_skip() -> None:
    g = torch.tensor([0.1, 0.2])
    out = pnn.ClipGradByGlobalNorm(10.0)(_pairs(g))
    assert torch.equal(out[0][1], g)  # times exactly 1.0
    pairs = _pairs(torch.tensor([3.0, 4.0]))
    out = pnn.ClipGradByGlobalNorm(1.0, auto_skip_clip=True)(pairs)
    assert torch.equal(out[0][1], torch.tensor([3.0, 4.0]) * torch.tensor(0.2))
    g = torch.tensor([0.1, 0.2])
    out = pnn.ClipGradByGlobalNorm(10.0, auto_skip_clip=True)(_pairs(g))
    assert torch.equal(out[0][1], g)


def test_global_norm_low_precision_groups() -> None:
    grads = [
        torch.full((3,), 2.0, dtype=torch.float16),
        torch.full((4,), 1.0, dtype=torch.bfloat16),
        torch.full((2,), 1.0),
    ]
    clip = pnn.ClipGradByGlobalNorm(1.0)
    assert clip.global_norm(grads).item() == pytest.approx(np.sqrt(12 + 4 + 2))
    assert clip.global_norm(grads).dtype == torch.float32
    assert clip.global_norm(grads + [torch.ones(1, dtype=torch.float64)]).dtype == torch.float64
    out = clip(_pairs(*grads))
    assert [g.dtype for _, g in out] == [torch.float16, torch.bfloat16, torch.float32]


def test_empty_and_all_excluded() -> None:
    assert pnn.ClipGradByGlobalNorm(1.0)([]) == []
    p = torch.nn.Parameter(torch.zeros(2))
    p.need_clip = False
    g = torch.full((2,), 5.0)
    assert pnn.ClipGradByGlobalNorm(1.0)([(p, g)])[0][1] is g


def test_split_plan_halves_on_packet_boundaries() -> None:
    assert _split_plan(0, 8192, 8) == (0, 8192)
    assert _split_plan(0, 8193, 8) == ((0, 4104), (4104, 4089))
    leaves = []

    def walk(node):
        if isinstance(node[0], int):
            leaves.append(node)
        else:
            walk(node[0])
            walk(node[1])

    walk(_split_plan(0, 100_003, 8))
    assert sum(n for _, n in leaves) == 100_003 and all(n <= 8192 for _, n in leaves)
    assert all(first % 8 == 0 for first, _ in leaves)


@pytest.mark.parametrize("n", [1, 9, 4096, 50_000])
def test_eigen_order_sum_is_within_float32_accuracy(n: int) -> None:
    x = torch.rand(n, generator=torch.Generator().manual_seed(n))
    exact = x.double().pow(2).sum().item()
    ours = squared_l2_norm(x).item()
    assert abs(ours - exact) <= 1e-6 * exact
    assert _eigen_sum(torch.ones(n)).item() == n


def test_global_norm_of_several_fp16_grads_stays_fp16_then_float32() -> None:
    grads = [torch.full((4,), 100.0, dtype=torch.float16), torch.full((4,), 100.0, dtype=torch.float16)]
    # each squared norm (40000) fits fp16, their fp16 sum (80000) overflows, as in Paddle
    assert torch.isinf(pnn.ClipGradByGlobalNorm(1.0).global_norm(grads))
