"""auto_cast's state and queries against Paddle, with Paddle made to believe it runs on a GPU.

Paddle switches auto_cast off on CPU; the oracle hands its ``amp_guard`` a tracer whose place
claims to be a GPU, so its state machine (levels, lists, dtypes, nesting) runs for real.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from unittest import mock

import paddle
import pytest
from paddle.base.framework import _dygraph_tracer

from paddle_compat import amp
from paddle_compat.amp.amp_lists import effective_lists

from .paddle_oracle import _FakeGpuPlace

_paddle_auto_cast = sys.modules["paddle.amp.auto_cast"]


class _GpuClaimingTracer:
    """The real tracer, except for the place it reports."""

    _expected_place = _FakeGpuPlace()

    def __init__(self, real) -> None:
        object.__setattr__(self, "_real", real)

    def __getattr__(self, name):
        return getattr(self._real, name)

    def __setattr__(self, name, value) -> None:
        setattr(self._real, name, value)


@contextlib.contextmanager
def paddle_on_gpu() -> Iterator[object]:
    tracer = _GpuClaimingTracer(_dygraph_tracer())
    with mock.patch.object(_paddle_auto_cast, "_dygraph_tracer", lambda: tracer), \
            mock.patch.object(_paddle_auto_cast, "_is_gpu_float16_supported", lambda: True), \
            mock.patch.object(_paddle_auto_cast, "_is_gpu_bfloat16_supported", lambda: True):
        yield tracer


NESTINGS = [
    [dict(level="O2", dtype="bfloat16"), dict(enable=False), dict(level="OD")],
    [dict(), dict(level="O0"), dict(dtype="bfloat16", level="o1")],
    [dict(enable=False, dtype="bfloat16"), dict(level="O2", use_promote=False)],
]


def _trace(module, nesting, depth=0, seen=None):
    seen = [] if seen is None else seen
    seen.append((module.is_autocast_enabled(), module.get_autocast_dtype()))
    if depth < len(nesting):
        with module.auto_cast(**nesting[depth]):
            _trace(module, nesting, depth + 1, seen)
        seen.append((module.is_autocast_enabled(), module.get_autocast_dtype()))
    return seen


@pytest.mark.parametrize("nesting", NESTINGS)
def test_queries_through_nesting_match_paddle(nesting):
    with paddle_on_gpu():
        theirs = _trace(paddle.amp, nesting)
    assert _trace(amp, nesting) == theirs


@pytest.mark.parametrize("kwargs", [
    dict(level="O1", dtype="float16", custom_white_list=["exp"], custom_black_list=["matmul_v2"]),
    dict(level="O2", dtype="bfloat16", custom_black_list={"softmax"}),
    dict(level="OD", dtype="float16", custom_white_list=("elementwise_add",)),
])
def test_installed_lists_match_paddle(kwargs):
    with paddle_on_gpu() as tracer:
        with paddle.amp.auto_cast(**kwargs):
            installed = tracer._get_amp_op_list()
    ours = effective_lists(kwargs.get("custom_white_list"), kwargs.get("custom_black_list"),
                           kwargs["level"], kwargs["dtype"])
    assert (set(installed[0]), set(installed[1])) == ours


def test_signatures_match_paddle():
    paddle_amp = paddle.amp
    for name in ["auto_cast", "amp_guard", "autocast", "decorate", "amp_decorate", "is_autocast_enabled",
                 "get_autocast_dtype", "get_autocast_cpu_dtype", "get_autocast_gpu_dtype",
                 "is_float16_supported", "is_bfloat16_supported", "white_list", "black_list"]:
        ours = inspect.signature(getattr(amp, name)).parameters
        theirs = inspect.signature(getattr(paddle_amp, name)).parameters
        assert [(p.name, p.default, p.kind) for p in ours.values()] == \
               [(p.name, p.default, p.kind) for p in theirs.values()], name
