"""The op lists and error messages against the installed Paddle."""

from __future__ import annotations

import sys

import paddle
import pytest
import torch

from paddle_compat import amp
from paddle_compat.amp.op_table import DEPTHWISE_CONV2D, NO_TORCH_COUNTERPART, PADDLE_TO_ATEN

paddle_amp_lists = sys.modules["paddle.amp.amp_lists"]


def _all_paddle_names() -> set[str]:
    names: set[str] = set()
    for table in (paddle.amp.white_list(), paddle.amp.black_list()):
        for by_level in table.values():
            for ops in by_level.values():
                names |= set(ops)
    for attr in dir(paddle_amp_lists):
        value = getattr(paddle_amp_lists, attr)
        if attr.isupper() and isinstance(value, (set, frozenset)):
            names |= set(value)
    return names


def test_default_lists_equal_paddles():
    assert amp.white_list() == paddle.amp.white_list()
    assert amp.black_list() == paddle.amp.black_list()


def test_every_paddle_name_is_mapped_or_marked():
    unknown = {n for n in _all_paddle_names() if n not in PADDLE_TO_ATEN and n not in NO_TORCH_COUNTERPART}
    assert not unknown, f"Paddle op names the table neither maps nor marks: {sorted(unknown)}"


def test_no_name_is_both_mapped_and_marked():
    assert not set(PADDLE_TO_ATEN) & set(NO_TORCH_COUNTERPART)


def test_every_mapped_aten_op_exists():
    for name, aten in PADDLE_TO_ATEN.items():
        for base in set(aten) - {DEPTHWISE_CONV2D}:
            assert getattr(torch.ops.aten, base).overloads(), (name, base)


@pytest.mark.parametrize("kwargs", [dict(level="O3"), dict(dtype="float32"), dict(level="o9", dtype="int8")])
def test_auto_cast_errors_match_paddle(kwargs):
    with pytest.raises(ValueError) as theirs:
        with paddle.amp.auto_cast(**kwargs):
            pass
    with pytest.raises(ValueError) as ours:
        with amp.auto_cast(**kwargs):
            pass
    assert str(ours.value) == str(theirs.value)


def test_overlap_error_matches_paddle():
    lists = dict(custom_white_list=["exp"], custom_black_list={"exp"})
    with pytest.raises(ValueError) as theirs:
        with paddle.amp.auto_cast(**lists):
            pass
    with pytest.raises(ValueError) as ours:
        with amp.auto_cast(**lists):
            pass
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("kwargs", [dict(level="O0"), dict(level="OD"), dict(dtype="float32", level="O2")])
def test_decorate_errors_match_paddle(kwargs):
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError) as theirs:
        paddle.amp.decorate(paddle.nn.Linear(2, 2), **kwargs)
    with pytest.raises(ValueError) as ours:
        amp.decorate(model, **kwargs)
    assert str(ours.value) == str(theirs.value)
    assert model.weight.dtype == torch.float32


def test_supported_queries_match_paddle_on_cpu():
    assert amp.is_float16_supported("cpu") == paddle.amp.is_float16_supported("cpu")
    assert amp.is_bfloat16_supported("cpu") == paddle.amp.is_bfloat16_supported("cpu")


@pytest.mark.parametrize("level", ["O0", "OD", "O1", "O2"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("custom", [
    (None, None),
    (["softmax", "exp"], None),
    (None, ["matmul_v2", "conv2d", "relu"]),
    ({"lookup_table_v2"}, ("fused_attention", "mean")),
])
def test_custom_list_merge_matches_paddle(level, dtype, custom):
    from paddle_compat.amp.amp_lists import effective_lists

    paddle_update_list = sys.modules["paddle.amp.auto_cast"]._update_list
    assert effective_lists(*custom, level, dtype) == paddle_update_list(*custom, level, dtype)
