"""decorate's choice of the layers that keep float32, against Paddle."""

from __future__ import annotations

import sys
from unittest import mock

import paddle
import pytest
from torch import nn

from paddle_compat import amp

from .paddle_oracle import _FakeTracer


def _net() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.LayerNorm(4), nn.GroupNorm(2, 4),
                         nn.InstanceNorm1d(4, affine=True), nn.Embedding(3, 4))


def _paddle_net() -> paddle.nn.Sequential:
    return paddle.nn.Sequential(paddle.nn.Linear(4, 4), paddle.nn.BatchNorm1D(4), paddle.nn.LayerNorm(4),
                                paddle.nn.GroupNorm(2, 4), paddle.nn.InstanceNorm1D(4), paddle.nn.Embedding(3, 4))


def _paddle_decorate(model, **kwargs):
    """Paddle casts on GPU only; the oracle makes its decorate believe it runs on one."""
    paddle_auto_cast = sys.modules["paddle.amp.auto_cast"]
    with mock.patch.object(paddle_auto_cast, "_dygraph_tracer", lambda: _FakeTracer()), \
            mock.patch.object(paddle_auto_cast, "_is_gpu_float16_supported", lambda: True), \
            mock.patch.object(paddle_auto_cast, "_is_gpu_bfloat16_supported", lambda: True):
        return paddle.amp.decorate(model, level="O2", **kwargs)


def _kinds(children, prefix):
    return [str(next(iter(c.parameters())).dtype).removeprefix(prefix) for c in children]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("excluded", [None, "Linear", "first"])
def test_o2_layer_choice_matches_paddle(dtype, excluded):
    theirs, ours = _paddle_net(), _net()
    their_excluded = our_excluded = None
    if excluded == "Linear":
        their_excluded, our_excluded = [paddle.nn.Linear], [nn.Linear]
    elif excluded == "first":
        their_excluded, our_excluded = theirs[0], ours[0]
    theirs = _paddle_decorate(theirs, dtype=dtype, excluded_layers=their_excluded)
    ours = amp.decorate(ours, level="O2", dtype=dtype, excluded_layers=our_excluded)
    assert _kinds(ours.children(), "torch.") == _kinds(theirs.children(), "paddle.")
