"""The scaler's private attributes that real Paddle trainers read, against Paddle 3.3.1: types,
shapes and values after every step, and PaddleNLP's way of deciding the LR-scheduler step."""

from __future__ import annotations

import numpy as np
import paddle
import pytest
import torch

from paddle_compat.amp import AmpScaler, GradScaler

from .paddle_oracle import (
    assert_bitwise_equal,
    copy_grads_to_paddle,
    finish_step_both,
    paddle_params_like,
    paddle_scaler,
)

OURS = {"GradScaler": GradScaler, "AmpScaler": AmpScaler}
POLICY = ("_incr_ratio", "_decr_ratio", "_incr_every_n_steps", "_decr_every_n_nan_or_inf")
PLAIN = ("_enable", "_use_dynamic_loss_scaling", "_init_loss_scaling", "_incr_count", "_decr_count", *POLICY)


def assert_same_attributes(ours, pscaler, label: str) -> None:
    for name in PLAIN:
        o, p = getattr(ours, name), getattr(pscaler, name)
        assert o == p and type(o) is type(p), f"{label}: {name} ours {o!r} vs Paddle {p!r}"
    assert isinstance(ours._scale, torch.Tensor) and ours._scale.dtype == torch.float32
    assert_bitwise_equal(ours._scale, pscaler._scale, f"{label}: _scale")
    assert ours._found_inf.dtype == torch.bool
    assert tuple(ours._found_inf.shape) == tuple(pscaler._found_inf.shape) == (1,)
    assert bool(ours._found_inf) == bool(pscaler._found_inf), f"{label}: _found_inf"
    o, p = ours._cache_found_inf, pscaler._cache_found_inf
    assert o == p and type(o) is type(p), f"{label}: _cache_found_inf ours {o!r} vs Paddle {p!r}"


@pytest.mark.parametrize("cls", ["GradScaler", "AmpScaler"])
@pytest.mark.parametrize("api", ["minimize", "step"])
def test_private_attributes_follow_paddle_step_by_step(cls, api):
    kwargs = dict(init_loss_scaling=2.0**10, incr_every_n_steps=3, decr_every_n_nan_or_inf=2)
    ours, pscaler = OURS[cls](**kwargs), paddle_scaler(cls, **kwargs)
    assert_same_attributes(ours, pscaler, "constructed")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    tparams = list(model.parameters())
    pparams = paddle_params_like(tparams)
    opt = torch.optim.SGD(tparams, lr=0.1)
    popt = paddle.optimizer.SGD(learning_rate=0.1, parameters=pparams)
    paddle_minimize = cls == "AmpScaler" or api == "minimize"  # Paddle's AmpScaler has no step()
    for i, bad in enumerate([False, True, True, False, False, False, True, False]):
        x = torch.randn(2, 4) * (float("inf") if bad else 1.0)
        scaled = ours.scale(model(x).pow(2).mean())
        p_scaled = pscaler.scale(paddle.to_tensor(scaled.detach().numpy() / ours.get_scale()))
        scaled.backward()
        copy_grads_to_paddle(tparams, pparams)
        finish_step_both("minimize" if paddle_minimize else "step_update", ours, pscaler, opt, popt, scaled, p_scaled)
        opt.zero_grad()
        popt.clear_grad()
        assert_same_attributes(ours, pscaler, f"step {i}")


def test_paddlenlp_steps_its_scheduler_exactly_when_paddle_does():
    """PaddleNLP: ``if not scaler._cache_found_inf: lr_scheduler.step()`` after the optimizer step."""
    ours, pscaler = GradScaler(init_loss_scaling=8.0), paddle_scaler(init_loss_scaling=8.0)
    w = torch.nn.Parameter(torch.ones(3))
    pw = paddle_params_like([w])
    opt, popt = torch.optim.SGD([w], lr=0.1), paddle.optimizer.SGD(learning_rate=0.1, parameters=pw)
    steps = {"ours": 0, "paddle": 0}
    for bad in [True, False, True, True, False, False]:
        ours.scale((w * (float("nan") if bad else 1.0)).sum()).backward()
        copy_grads_to_paddle([w], pw)
        pscaler.scale(paddle.to_tensor(np.float32(1.0)))
        ours.step(opt), pscaler.step(popt)
        ours.update(), pscaler.update()
        steps["ours"] += not ours._cache_found_inf
        steps["paddle"] += not pscaler._cache_found_inf
        opt.zero_grad(), popt.clear_grad()
    assert steps == {"ours": 3, "paddle": 3}


def test_a_disabled_scaler_has_no_scale_tensor_as_in_paddle():
    ours, pscaler = GradScaler(enable=False), paddle_scaler(enable=False)
    assert ours._scale is None and pscaler._scale is None
    assert ours._enable is pscaler._enable is False
    assert ours._use_dynamic_loss_scaling is pscaler._use_dynamic_loss_scaling is False
