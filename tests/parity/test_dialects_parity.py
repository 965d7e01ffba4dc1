"""The porting dialects against Paddle 3.3.1: ``GradScaler(defaults="2.x")`` trains like Paddle's
scaler given Paddle 2.x's defaults, and apex's ``scale_loss`` (one loss) like Paddle's scaler given
apex's policy: the same scale, counters, skipped steps and parameters after every step."""

from __future__ import annotations

import warnings

import paddle
import pytest
import torch

from paddle_compat.amp import GradScaler
from paddle_compat.apex import amp as apex_amp
from paddle_compat.optimizer import SGD

from .paddle_oracle import assert_bitwise_equal, copy_grads_to_paddle, paddle_params_like, paddle_scaler

# Overflow pattern: two in a row (a decrease under 2.x's decr_every_n_nan_or_inf=2), singles, runs.
BAD = [False, True, True, False, True, False, False, True, True, True, False, False]


def _model(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    tparams = list(model.parameters())
    pparams = paddle_params_like(tparams)
    return model, tparams, pparams, paddle.optimizer.SGD(learning_rate=0.1, parameters=pparams)


def _x(i: int, bad: bool) -> torch.Tensor:
    x = torch.linspace(-1, 1, 8).reshape(2, 4) * (i + 1)
    return x * float("inf") if bad else x


def _paddle_step(pscaler, popt) -> None:
    """Paddle's step on the scaled grads copied from ours (the scales are equal: checked)."""
    pscaler.minimize(popt, pscaler.scale(paddle.to_tensor(1.0)))
    popt.clear_grad()


def _assert_same(ours, pscaler, pskipped, tparams, pparams, label) -> None:
    """``ours`` (a paddle_compat GradScaler) and Paddle's scaler agree; so do the parameters."""
    sd, psd = ours.state_dict(), pscaler.state_dict()
    scale, skipped, counts = ours.get_scale(), ours.get_skipped_steps(), (sd["incr_count"], sd["decr_count"])
    assert scale == float(psd["scale"][0]), f"{label}: scale {scale} vs Paddle {float(psd['scale'][0])}"
    assert counts == (psd["incr_count"], psd["decr_count"]), f"{label}: counters"
    assert skipped == pskipped, f"{label}: skipped steps"
    for i, (tp, pp) in enumerate(zip(tparams, pparams, strict=True)):
        assert_bitwise_equal(tp, pp, f"{label}: parameter {i}")


def test_paddle_2x_defaults_train_like_paddle_given_those_defaults():
    model, tparams, pparams, popt = _model(0)
    opt = SGD(learning_rate=0.1, parameters=tparams)  # Paddle's rounding
    ours = GradScaler(defaults="2.x", incr_every_n_steps=3)  # 3 so that growth shows in 12 steps
    pscaler = paddle_scaler(init_loss_scaling=32768.0, incr_every_n_steps=3, decr_every_n_nan_or_inf=2)
    pskipped = 0
    for i, bad in enumerate(BAD):
        scaled = ours.scale(model(_x(i, bad)).pow(2).mean())
        scaled.backward()
        copy_grads_to_paddle(tparams, pparams)  # still scaled
        ours.minimize(opt, scaled)
        opt.clear_grad()
        _paddle_step(pscaler, popt)
        pskipped += bool(pscaler._cache_found_inf)
        _assert_same(ours, pscaler, pskipped, tparams, pparams, f"step {i}")


@pytest.mark.parametrize("max_loss_scale", [2.0**24, 2.0**17])
def test_apex_scale_loss_trains_like_paddle_given_apexs_policy(max_loss_scale):
    model, tparams, pparams, popt = _model(1)
    opt = SGD(learning_rate=0.1, parameters=tparams)  # Paddle's rounding
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "nothing is cast": loss scaling only
        model, opt = apex_amp.initialize(model, opt, max_loss_scale=max_loss_scale)
    grad_scaler = apex_amp._amp_state.loss_scalers[0].grad_scaler
    grad_scaler.set_incr_every_n_steps(2)  # apex's window, shortened so that growth shows
    # apex's policy in Paddle's terms: start at min(2**16, max), x2 after the window, x0.5 per overflow
    pscaler = paddle_scaler(init_loss_scaling=min(2.0**16, max_loss_scale), incr_every_n_steps=2,
                            decr_every_n_nan_or_inf=1)
    pskipped = 0
    for i, bad in enumerate(BAD):
        with apex_amp.scale_loss(model(_x(i, bad)).pow(2).mean(), opt) as scaled:
            scaled.backward()
            scaled_grads = [p.grad.clone() for p in tparams]  # before scale_loss unscales them
        for p, g in zip(pparams, scaled_grads, strict=True):
            p.grad = paddle.to_tensor(g.numpy())
        opt.step()  # the user's own step: skipped on overflow
        opt.zero_grad()
        _paddle_step(pscaler, popt)
        pskipped += bool(pscaler._cache_found_inf)
        # apex caps growth at max_loss_scale, which Paddle has no notion of
        pscale = min(float(pscaler.state_dict()["scale"][0]), max_loss_scale)
        pscaler.load_state_dict({**pscaler.state_dict(), "scale": paddle.to_tensor([pscale]).numpy()})
        _assert_same(grad_scaler, pscaler, pskipped, tparams, pparams, f"step {i}")
