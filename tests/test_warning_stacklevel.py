"""Warnings point at the user's line, also when our code runs under torch's wrappers."""

from __future__ import annotations

import warnings

import pytest
import torch

from paddle_compat import amp
from paddle_compat import optimizer as popt
from paddle_compat.amp import op_table


def test_through_torch_no_grad_the_warning_points_at_the_caller():
    resolve = torch.no_grad()(op_table.resolve)  # a frame of torch.utils._contextlib in between
    with pytest.warns(UserWarning, match="neither a known Paddle op name") as record:
        resolve(["no_such_op"])
    assert [w.filename for w in record] == [__file__]


@pytest.mark.parametrize("path", ["step", "minimize", "torch LR scheduler", "scaler.minimize"])
def test_the_optimizers_low_precision_warning_points_at_the_caller(path):
    model = torch.nn.Linear(2, 2).half()
    opt = popt.SGD(learning_rate=0.1, parameters=model.parameters(), multi_precision=False)
    loss = model(torch.ones(1, 2, dtype=torch.float16)).float().sum()
    loss.backward()
    if path == "torch LR scheduler":
        torch.optim.lr_scheduler.StepLR(opt, step_size=1)  # wraps opt.step once more
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        if path == "minimize":
            opt.minimize(loss)
        elif path == "scaler.minimize":
            amp.GradScaler().minimize(opt, loss)
        else:
            opt.step()
    ours = [w for w in record if "multi_precision=True" in str(w.message)]
    assert ours and {w.filename for w in ours} == {__file__}
