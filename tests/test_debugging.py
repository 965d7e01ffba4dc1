"""paddle_compat.amp.debugging: aborting checks and operator-stats collection."""

from __future__ import annotations

import math

import pytest
import torch

from paddle_compat import amp
from paddle_compat.amp.debugging import DebugMode, check_numerics

VALUES = [1.0, 0.0, math.inf, math.nan, -2.0]


def test_debug_mode_values():
    assert [m.value for m in DebugMode] == [0, 1, 2, 3]


def test_check_numerics_aborts_by_default():
    with pytest.raises(RuntimeError, match=r"There are NAN or INF \(num_nan=1, num_inf=1, num_zero=1\)"):
        check_numerics(torch.tensor(VALUES, dtype=torch.float16), "foo", "x")
    stats, _ = check_numerics(torch.tensor([1.0, 2.0], dtype=torch.bfloat16), "foo", "x")
    assert stats.tolist() == [0, 0, 0]


def test_operator_stats_collection(capsys):
    x = torch.randn(4, 4)
    with amp.debugging.collect_operator_stats():
        with amp.auto_cast():
            torch.softmax(x @ x, -1)
    out = capsys.readouterr().out
    assert " op list " in out and "op count: " in out
    rows = {line.split("|")[0].strip(): [c.strip() for c in line.split("|")[1:]] for line in out.splitlines()
            if line.startswith("  ")}
    assert rows["mm"][0] == "1"  # the matmul ran in fp16
    assert rows["_softmax"][2] == "1"  # the softmax in fp32 (counted as the ATen kernel)
    amp.debugging.enable_operator_stats_collection()
    amp.debugging.disable_operator_stats_collection()
    assert "op count: 0" in capsys.readouterr().out


@pytest.mark.parametrize("kwargs", [dict(level="OD"), dict(level="O2", use_promote=False)])
def test_operator_stats_with_every_op_levels(kwargs, capsys):
    """Every op is subject to the rule at these levels; collection must see them all (it
    used to crash on the first op)."""
    x = torch.randn(4, 4, requires_grad=True)
    with amp.debugging.collect_operator_stats():
        with amp.auto_cast(**kwargs):
            y = torch.softmax(x @ x, -1) + torch.relu(x.half())
        y.float().sum().backward()
    low = kwargs["level"] == "O2"
    assert y.dtype == (torch.float16 if low else torch.float32)
    rows = {line.split("|")[0].strip(): [c.strip() for c in line.split("|")[1:]]
            for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert rows["mm"][0] != "0"  # white: fp16
    assert rows["_softmax"][0 if low else 2] == "1"
    assert rows["relu"][0 if low else 2] == "1"


def test_check_numerics_names_a_bad_argument():
    with pytest.raises(TypeError, match="^tensor should be a torch.Tensor, but received list$"):
        check_numerics([1.0], "op", "x")
    with pytest.raises(TypeError, match="^debug_mode should be a DebugMode, but received int$"):
        check_numerics(torch.ones(2), "op", "x", 3)
