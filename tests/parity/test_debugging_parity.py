"""check_numerics and DebugMode against Paddle's CPU kernel."""

from __future__ import annotations

import math

import paddle
import pytest
import torch

from paddle_compat.amp.debugging import DebugMode, check_numerics

VALUES = [1.0, 0.0, math.inf, math.nan, -2.0]


def test_debug_modes_match_paddle():
    assert [(m.name, m.value) for m in DebugMode] == [(m.name, m.value) for m in paddle.amp.debugging.DebugMode]


@pytest.mark.parametrize("values", [VALUES, [1.0, 2.0], [0.0, -3.5, 7.25, 0.0]])
def test_check_numerics_matches_paddle(values, capsys):
    stats, result = check_numerics(torch.tensor(values), "foo", "x", DebugMode.CHECK_NAN_INF)
    ours = capsys.readouterr().out
    p_stats, p_values = paddle.amp.debugging.check_numerics(
        paddle.to_tensor(values), "foo", "x", paddle.amp.debugging.DebugMode.CHECK_NAN_INF)
    assert stats.dtype == torch.int64 and result.dtype == torch.float32
    assert stats.tolist() == p_stats.numpy().tolist()
    torch.testing.assert_close(result, torch.from_numpy(p_values.numpy()), equal_nan=True)
    if math.nan in values or any(math.isnan(v) or math.isinf(v) for v in values):
        assert ours.startswith("[PRECISION] [ERROR] in [device=cpu, op=foo, tensor=x, dtype=fp32], numel=5, "
                               "num_nan=1, num_inf=1, num_zero=1, max=inf, min=-2.000000e+00, mean=nan")
    else:
        assert ours == ""
