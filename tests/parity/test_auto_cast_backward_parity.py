"""auto_cast's state during backward and in recompute, against Paddle made to believe it runs on a GPU.

On CPU Paddle's kernels never cast (its AMP code skips tensors off the GPU), so what is compared
here is the state its AMP code reads: active inside a hook whenever backward runs inside an
auto_cast, and the forward's inside a recomputation."""

from __future__ import annotations

import paddle
import pytest
import torch
from paddle.base.framework import _dygraph_tracer
from paddle.distributed.fleet.utils import recompute as paddle_recompute

from paddle_compat import amp
from paddle_compat.amp import op_interceptor
from paddle_compat.distributed.fleet.utils import recompute

from ..test_auto_cast_backward import square_function
from .test_auto_cast_parity import paddle_on_gpu


def _state(module):
    return module.is_autocast_enabled(), module.get_autocast_dtype()


@pytest.mark.parametrize("inside", [True, False])
def test_a_hook_sees_the_auto_cast_that_backward_runs_under(inside):
    def run(module, leaf, mm):
        seen = []

        def hook(g):
            seen.append(_state(module))
            return g

        leaf.register_hook(hook)
        with module.auto_cast(dtype="bfloat16"):
            loss = mm(leaf, leaf).sum()
            if inside:
                loss.backward()
        if not inside:
            loss.backward()
        return seen

    p_leaf = paddle.rand([2, 2])
    p_leaf.stop_gradient = False
    with paddle_on_gpu():
        theirs = run(paddle.amp, p_leaf, paddle.mm)
    ours = run(amp, torch.rand(2, 2, requires_grad=True), torch.mm)
    assert ours == theirs == [(inside, "bfloat16" if inside else "float16")]


def test_a_hook_that_changes_the_gradients_dtype_is_refused_by_both():
    p_leaf = paddle.rand([2, 2])
    p_leaf.stop_gradient = False
    p_leaf.register_hook(lambda g: g.astype("float16"))
    with pytest.raises(RuntimeError, match="before\\(float32\\) and after\\(float16\\) hook are not consistent"):
        paddle.mm(p_leaf, p_leaf).sum().backward()
    leaf = torch.rand(2, 2, requires_grad=True)
    leaf.register_hook(lambda g: torch.mm(g, g))  # float16 under auto_cast, as Paddle's mm on a GPU
    with amp.auto_cast(), pytest.raises(RuntimeError, match="has changed the type of value"):
        torch.mm(leaf, leaf).sum().backward()


@pytest.mark.parametrize("use_reentrant", [True, False])
@pytest.mark.parametrize("cast_args", [{"level": "O1", "dtype": "float16"}, {"level": "O2", "dtype": "bfloat16"},
                                       {"enable": False}])
def test_the_recomputation_runs_under_the_forwards_state(cast_args, use_reentrant):
    def run(module, recompute_fn, x, linear):
        seen = []

        def block(v):
            seen.append(_state(module))
            return linear(v)

        with module.auto_cast(**cast_args):
            out = recompute_fn(block, x, use_reentrant=use_reentrant)
        with module.auto_cast(dtype="bfloat16", level="O1"):  # backward under another state
            out.astype("float32").sum().backward() if module is paddle.amp else out.float().sum().backward()
        return seen

    p_x = paddle.rand([2, 4])
    p_x.stop_gradient = False
    with paddle_on_gpu():
        theirs = run(paddle.amp, paddle_recompute, p_x, paddle.nn.Linear(4, 4))
    ours = run(amp, recompute, torch.rand(2, 4, requires_grad=True), torch.nn.Linear(4, 4))
    assert len(theirs) == 2  # the forward, then the recomputation
    assert ours == theirs


def test_a_custom_backward_sees_the_auto_cast_that_backward_runs_under():
    seen = {"paddle": [], "torch": []}

    class PaddleDouble(paddle.autograd.PyLayer):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            seen["paddle"].append(_state(paddle.amp))
            return grad * 2

    p_x = paddle.rand([2, 2])
    p_x.stop_gradient = False
    with paddle_on_gpu(), paddle.amp.auto_cast(level="O2"):
        PaddleDouble.apply(p_x).sum().backward()
    square = square_function(lambda: seen["torch"].append(_state(amp)))
    with amp.auto_cast(level="O2"):
        square.apply(torch.rand(2, 2, requires_grad=True)).sum().backward()
    assert seen["torch"] == seen["paddle"] == [(True, "float16")]


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_paddles_recompute_fails_at_od_and_ours_recomputes(use_reentrant):
    p_x = paddle.rand([2, 4])
    p_x.stop_gradient = False
    tracer = _dygraph_tracer()
    try:
        with pytest.raises((ValueError, OSError)):  # reentrant: at the call; else in backward
            with paddle_on_gpu(), paddle.amp.auto_cast(level="OD"):
                out = paddle_recompute(paddle.nn.Linear(4, 4), p_x, use_reentrant=use_reentrant)
            out.sum().backward()
    finally:
        tracer._has_grad = True  # the failed backward leaves Paddle's grad mode off
    x = torch.rand(2, 4, requires_grad=True)
    with amp.auto_cast(level="OD"):
        out = recompute(torch.nn.Linear(4, 4), x, use_reentrant=use_reentrant)
    out.float().sum().backward()
    assert out.dtype == torch.float16 and x.grad is not None  # linear is white at OD


def test_paddles_recompute_drops_use_promote_and_ours_keeps_it():
    theirs, ours = [], []
    p_linear, linear = paddle.nn.Linear(2, 2), torch.nn.Linear(2, 2)

    def paddle_block(v):
        theirs.append(_dygraph_tracer()._use_promote)
        return p_linear(v)

    def torch_block(v):
        ours.append(op_interceptor.current().use_promote)
        return linear(v)

    p_x = paddle.rand([2, 2])
    p_x.stop_gradient = False
    with paddle_on_gpu():  # also for the backward, where Paddle's recompute enters its auto_cast
        with paddle.amp.auto_cast(level="O2", use_promote=False):
            out = paddle_recompute(paddle_block, p_x)
        out.sum().backward()
    with amp.auto_cast(level="O2", use_promote=False):
        out = recompute(torch_block, torch.rand(2, 2, requires_grad=True))
    out.float().sum().backward()
    assert theirs == [False, True]  # Paddle recomputes with promotion: a documented difference
    assert ours == [False, False]
