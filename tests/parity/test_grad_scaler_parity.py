"""GradScaler / AmpScaler parity with real Paddle 3.3.1 (the oracle), on CPU.

The forward and backward passes run in torch only; the scaled gradients are then copied
bit for bit onto mirrored Paddle parameters, so both scalers see exactly the same inputs and
any difference comes from the scaler. After every step the two sides must agree bitwise on
the scale and the parameters, and exactly on incr_count / decr_count.
"""

from __future__ import annotations

import inspect
import logging
import math
import random
import warnings

import numpy as np
import paddle
import pytest
import torch

from paddle_compat import optimizer as pc_optim
from paddle_compat.amp import AmpScaler, GradScaler, auto_cast

from .paddle_oracle import (
    assert_bitwise_equal,
    bits,
    copy_grads_to_paddle,
    finish_step_both,
    paddle_gpu_kernel_semantics,
    paddle_params_like,
    paddle_scaler,
    set_paddle_amp_dtype,
    to_numpy,
)

# A power of two: lr*g is then exact, so torch's SGD (one fused multiply-add, one rounding) and
# Paddle's (lr*g rounded, then p - that rounded) agree bitwise. With lr=0.1 they differ in the
# last bit for some elements; test_sgd_update_is_bitwise_identical checks the premise.
LR = 0.125
OURS = {"GradScaler": GradScaler, "AmpScaler": AmpScaler}
STYLES = ("minimize", "step_update", "unscale_step_update")
N_TRAJECTORIES = 60

INF, NAN = float("inf"), float("nan")


# ------------------------------------------------------------------------------------ helpers


def make_model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def scaled_loss_for(model, x, scaler, inject=None):
    # The forward runs in float32 on purpose (grads are copied to Paddle anyway): auto_cast is
    # entered only for what the scaler reads from it, the recorded AMP dtype.
    with auto_cast():
        pass
    loss = model(x).pow(2).mean()
    if inject == "loss_inf":
        loss = loss * INF
    elif inject == "loss_nan":
        loss = loss * NAN
    return loss, scaler.scale(loss)


def assert_same_state(ours, pscaler, tparams, pparams, step: int) -> None:
    psd, osd = pscaler.state_dict(), ours.state_dict()
    ours_keys = sorted(set(osd) - {"skipped_steps"})  # our one extra key
    assert ours_keys == sorted(psd), f"step {step}: state_dict keys ours {ours_keys} vs Paddle {sorted(psd)}"
    if psd:
        assert_bitwise_equal(osd["scale"], psd["scale"], f"step {step}: scale")
        for key in ("incr_count", "decr_count", "use_dynamic_loss_scaling"):
            assert osd[key] == psd[key], f"step {step}: {key} ours {osd[key]!r} vs Paddle {psd[key]!r}"
        assert ours.get_scale() == float(psd["scale"][0]), (
            f"step {step}: get_scale() ours {ours.get_scale()!r} vs Paddle {float(psd['scale'][0])!r}"
        )
    for i, (tp, pp) in enumerate(zip(tparams, pparams, strict=True)):
        assert_bitwise_equal(tp, pp, f"step {step}: parameter {i}")


def draw_config(seed: int) -> dict:
    # Some trajectories take the scale below 1 (e.g. 1.0 with decr_ratio 0.1). The grads here stay
    # far from float32's limits, so Paddle's CPU check (inputs) and ours (unscaled outputs) still
    # agree on every verdict, and ours' below-one path is exercised too.
    rng = random.Random(seed)
    return dict(
        cls=rng.choice(["GradScaler", "AmpScaler"]),
        style=STYLES[seed % 3],
        kwargs=dict(
            init_loss_scaling=rng.choice([1.0, 2.0, 3.7, 12.5, 1000.0, 1024.0, 32768.0, 65536.0]),
            incr_ratio=rng.choice([1.3, 1.5, 1.7, 2.0, 3.0, 4.0]),
            decr_ratio=rng.choice([0.1, 0.25, 0.3, 0.5, 0.7, 0.9]),
            incr_every_n_steps=rng.randint(1, 5),
            decr_every_n_nan_or_inf=rng.randint(1, 3),
            use_dynamic_loss_scaling=rng.random() < 0.8,
        ),
        n_steps=rng.randint(10, 30),
        injections=[
            rng.choices(
                [None, "loss_inf", "loss_nan", "grad_inf", "grad_-inf", "grad_nan"],
                weights=[65, 8, 7, 10, 5, 5],
            )[0]
            for _ in range(30)
        ],
        data_seed=rng.randrange(2**31),
    )


# ------------------------------------------------------------------ randomized trajectories


@pytest.mark.parametrize("seed", range(N_TRAJECTORIES))
def test_random_trajectory(seed):
    run_trajectory(seed, fused=False)


@pytest.mark.parametrize("seed", range(N_TRAJECTORIES, N_TRAJECTORIES + 15))
def test_random_trajectory_fused_sgd(seed):
    """The same with torch's fused SGD (``fused=True``), whose step unscales and skips by itself."""
    run_trajectory(seed, fused=True)


def run_trajectory(seed: int, fused: bool) -> None:
    cfg = draw_config(seed)
    cls, style, kwargs = cfg["cls"], cfg["style"], cfg["kwargs"]
    # Paddle's AmpScaler has minimize() only; its step()/update()/unscale_() are GradScaler's,
    # so ours-AmpScaler in those styles is held against a Paddle GradScaler with the same arguments.
    pcls = cls if style == "minimize" else "GradScaler"

    ours = OURS[cls](**kwargs)
    pscaler = paddle_scaler(pcls, **kwargs)
    model = make_model(seed)
    tparams = list(model.parameters())
    pparams = paddle_params_like(tparams)
    opt = torch.optim.SGD(tparams, lr=LR, fused=fused)
    popt = paddle.optimizer.SGD(learning_rate=LR, parameters=pparams)
    gen = torch.Generator().manual_seed(cfg["data_seed"])
    irng = random.Random(cfg["data_seed"])

    assert_same_state(ours, pscaler, tparams, pparams, step=-1)
    skipped = 0
    for step in range(cfg["n_steps"]):
        inject = cfg["injections"][step]
        x = torch.randn(5, 4, generator=gen)
        loss, scaled = scaled_loss_for(model, x, ours, inject)
        p_scaled = pscaler.scale(paddle.to_tensor(to_numpy(loss)))
        assert scaled.dtype == torch.float32 and tuple(scaled.shape) == (1,)
        assert_bitwise_equal(scaled, p_scaled, f"step {step}: scaled loss")

        scaled.backward()
        if inject is not None and inject.startswith("grad_"):
            p = tparams[irng.randrange(len(tparams))]
            p.grad.view(-1)[irng.randrange(p.numel())] = float(inject[len("grad_") :])
        copy_grads_to_paddle(tparams, pparams)

        if style == "minimize":
            ours.minimize(opt, scaled)
            pscaler.minimize(popt, p_scaled)
        else:
            if style == "unscale_step_update":
                ours.unscale_(opt)
                pscaler.unscale_(popt)
                if not bool(pscaler._found_inf):
                    for i, (tp, pp) in enumerate(zip(tparams, pparams, strict=True)):
                        assert_bitwise_equal(tp.grad, pp.grad, f"step {step}: unscaled grad {i}")
            ours.step(opt)
            pscaler.step(popt)
            ours.update()
            pscaler.update()
        skipped += bool(pscaler._cache_found_inf)
        if not pscaler._cache_found_inf:
            # Paddle's step()/minimize() leave the grads unscaled, in place.
            for i, (tp, pp) in enumerate(zip(tparams, pparams, strict=True)):
                assert_bitwise_equal(tp.grad, pp.grad, f"step {step}: grad {i} after the step")
        opt.zero_grad()
        popt.clear_grad()

        assert_same_state(ours, pscaler, tparams, pparams, step)
        assert ours.get_skipped_steps() == skipped, (
            f"step {step}: get_skipped_steps() ours {ours.get_skipped_steps()} vs {skipped} skipped by Paddle"
        )
    assert ours.is_enable() == pscaler.is_enable()
    assert ours.is_use_dynamic_loss_scaling() == pscaler.is_use_dynamic_loss_scaling()


def test_trajectories_cover_every_case():
    """The fixed seeds must exercise what the randomized test claims to cover."""
    cfgs = [draw_config(s) for s in range(N_TRAJECTORIES)]
    assert len(cfgs) >= 50
    assert {(c["cls"], c["style"]) for c in cfgs} == {(c, s) for c in OURS for s in STYLES}
    assert {c["kwargs"]["use_dynamic_loss_scaling"] for c in cfgs} == {True, False}
    injected = {i for c in cfgs for i in c["injections"][: c["n_steps"]]}
    assert injected == {None, "loss_inf", "loss_nan", "grad_inf", "grad_-inf", "grad_nan"}
    assert {c["kwargs"]["incr_ratio"] for c in cfgs} >= {1.3, 2.0, 4.0}
    assert {c["kwargs"]["decr_ratio"] for c in cfgs} >= {0.1, 0.3, 0.5}
    assert {c["kwargs"]["init_loss_scaling"] for c in cfgs} >= {3.7, 1000.0, 65536.0}


def test_sgd_update_is_bitwise_identical():
    """The premise of the trajectories: torch's and Paddle's SGD agree bitwise on the same fp32 grads."""
    rng = np.random.default_rng(7)
    for _ in range(20):
        p0 = rng.standard_normal((16, 16)).astype(np.float32)
        g = (rng.standard_normal((16, 16)) * 10.0 ** rng.integers(-6, 6, (16, 16))).astype(np.float32)
        tp = torch.nn.Parameter(torch.from_numpy(p0.copy()))
        (pp,) = paddle_params_like([tp])
        tp.grad = torch.from_numpy(g.copy())
        pp.grad = paddle.to_tensor(g.copy())
        torch.optim.SGD([tp], lr=LR).step()
        paddle.optimizer.SGD(learning_rate=LR, parameters=[pp]).step()
        assert_bitwise_equal(tp, pp, "SGD update")


# ---------------------------------------------------------------- scale(), the update rule


@pytest.mark.parametrize("shape", [(), (1,), (3,)], ids=["0d", "1", "3"])
@pytest.mark.parametrize("loss_dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("init", [1.0, 3.7, 1000.0, 65536.0, float(np.float32(65536.0 * 1.3))])
def test_scale_matches(loss_dtype, init, shape):
    """Result dtype, shape and bits as Paddle's. (Paddle: a 0-d loss of any float dtype gives
    float32 [1], float64 included, computed as float32(loss) * scale; a float64 loss with
    dimensions stays float64.)"""
    ours, pscaler = GradScaler(init_loss_scaling=init), paddle_scaler(init_loss_scaling=init)
    vals = [0.0, -0.0, 1.5, 3.3, -7.1, 1e-3, 0.1, 6e4, 1e30, 1e39]
    for v in vals:
        arr = np.full(shape, v, np.float64)
        t = torch.from_numpy(arr).to(getattr(torch, loss_dtype))
        p = paddle.to_tensor(arr).astype(loss_dtype)
        o, q = ours.scale(t), pscaler.scale(p)
        assert str(o.dtype) == "torch." + str(q.dtype).split(".")[1], (
            f"scale({v!r}): ours {o.dtype} vs Paddle {q.dtype}"
        )
        assert tuple(o.shape) == tuple(q.shape), f"scale({v!r}): ours {tuple(o.shape)} vs Paddle {tuple(q.shape)}"
        assert_bitwise_equal(o, q, f"scale({v!r} as {loss_dtype} {shape})")


@pytest.mark.parametrize("ratio", [1.3, 1.5, 1.7, 2.0, 3.0, 1.0000001, 7.77])
@pytest.mark.parametrize("init", [1.0, 3.7, 1000.0, 12345.678])
def test_increase_rounding(ratio, init):
    """scale * incr_ratio is rounded exactly as Paddle does it, step after step."""
    ours = GradScaler(init_loss_scaling=init, incr_ratio=ratio, incr_every_n_steps=1)
    pscaler = paddle_scaler(init_loss_scaling=init, incr_ratio=ratio, incr_every_n_steps=1)
    for i in range(12):
        ours.update()  # no step since the last update: Paddle counts it as a finite step
        pscaler.update()
        assert_bitwise_equal(ours.state_dict()["scale"], pscaler.state_dict()["scale"], f"increase {i}")


def _inf_step(ours, pscaler, opt, popt, tparams, pparams):
    for tp in tparams:
        tp.grad = torch.full_like(tp, INF)
    copy_grads_to_paddle(tparams, pparams)
    ours.step(opt)
    pscaler.step(popt)
    ours.update()
    pscaler.update()


@pytest.mark.parametrize("ratio", [0.1, 0.3, 0.5, 0.7, 0.9, 0.123456])
@pytest.mark.parametrize("init", [65536.0, 3.7, 1e30])
def test_decrease_rounding(ratio, init, capsys, caplog):
    """scale * decr_ratio rounded as Paddle does, and the same "Found inf or nan" message."""
    ours = GradScaler(init_loss_scaling=init, decr_ratio=ratio)
    pscaler = paddle_scaler(init_loss_scaling=init, decr_ratio=ratio)
    tparams = [torch.nn.Parameter(torch.ones(3))]
    pparams = paddle_params_like(tparams)
    opt, popt = torch.optim.SGD(tparams, lr=LR), paddle.optimizer.SGD(learning_rate=LR, parameters=pparams)
    capsys.readouterr()
    caplog.set_level(logging.INFO, logger="paddle_compat.amp")
    for i in range(8):  # every grad is inf: CPU and GPU semantics agree even below scale 1
        _inf_step(ours, pscaler, opt, popt, tparams, pparams)
        assert_bitwise_equal(ours.state_dict()["scale"], pscaler.state_dict()["scale"], f"decrease {i}")
        assert_bitwise_equal(tparams[0], pparams[0], f"decrease {i}: parameter (step must be skipped)")
    paddle_lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("Found inf or nan")]
    our_lines = [r.getMessage() for r in caplog.records if r.name == "paddle_compat.amp"]
    assert paddle_lines
    assert our_lines == paddle_lines


def test_update_without_step_counts_as_finite_step():
    """Paddle's update() reads a cached found_inf that starts out falsy: a bare update() is a good step."""
    ours, pscaler = GradScaler(incr_every_n_steps=3), paddle_scaler(incr_every_n_steps=3)
    for i in range(7):
        ours.update()
        pscaler.update()
        osd, psd = ours.state_dict(), pscaler.state_dict()
        assert (osd["incr_count"], osd["decr_count"]) == (psd["incr_count"], psd["decr_count"]), f"update {i}"
        assert_bitwise_equal(osd["scale"], psd["scale"], f"update {i}")


def test_repeated_update_reuses_last_step_verdict():
    """update() twice after one overflowing step decreases twice in Paddle (the verdict is cached)."""
    ours, pscaler = GradScaler(init_loss_scaling=1024.0), paddle_scaler(init_loss_scaling=1024.0)
    tparams = [torch.nn.Parameter(torch.ones(3))]
    pparams = paddle_params_like(tparams)
    opt, popt = torch.optim.SGD(tparams, lr=LR), paddle.optimizer.SGD(learning_rate=LR, parameters=pparams)
    _inf_step(ours, pscaler, opt, popt, tparams, pparams)
    ours.update()
    pscaler.update()
    osd, psd = ours.state_dict(), pscaler.state_dict()
    assert_bitwise_equal(osd["scale"], psd["scale"], "scale after the second update()")
    assert (osd["incr_count"], osd["decr_count"]) == (psd["incr_count"], psd["decr_count"])


# ---------------------------------------------------------- documented safety differences


def test_growth_overflow_keeps_old_scale():
    """Paddle lets the scale grow to inf; ours keeps the last finite scale (a documented difference)."""
    big = float(np.float32(2.0**127))
    ours = GradScaler(init_loss_scaling=big, incr_every_n_steps=1)
    pscaler = paddle_scaler(init_loss_scaling=big, incr_every_n_steps=1)
    ours.update()
    pscaler.update()
    assert np.isinf(pscaler.state_dict()["scale"][0])  # Paddle's behaviour, for the record
    assert ours.get_scale() == big
    assert_bitwise_equal(ours.state_dict()["scale"], np.array([big], np.float32), "scale after overflowing growth")
    assert ours.state_dict()["incr_count"] == pscaler.state_dict()["incr_count"] == 0


def test_decrease_floor():
    """Paddle decreases down to 0 (through subnormals); ours stops at 2**-126 (a documented difference)."""
    tiny = 2.0**-125
    ours = GradScaler(init_loss_scaling=tiny, decr_ratio=0.3)
    pscaler = paddle_scaler(init_loss_scaling=tiny, decr_ratio=0.3)
    tparams = [torch.nn.Parameter(torch.ones(3))]
    pparams = paddle_params_like(tparams)
    opt, popt = torch.optim.SGD(tparams, lr=LR), paddle.optimizer.SGD(learning_rate=LR, parameters=pparams)
    for _ in range(3):
        _inf_step(ours, pscaler, opt, popt, tparams, pparams)
    assert float(pscaler.state_dict()["scale"][0]) < 2.0**-126  # Paddle's behaviour, for the record
    assert ours.get_scale() == 2.0**-126
    assert ours.state_dict()["decr_count"] == pscaler.state_dict()["decr_count"]


# ------------------------------------------------------------------------ use_dynamic=False


@pytest.mark.parametrize("style", STYLES)
def test_fixed_scale_still_skips_overflowing_steps(style):
    kwargs = dict(init_loss_scaling=1000.0, use_dynamic_loss_scaling=False)
    ours, pscaler = GradScaler(**kwargs), paddle_scaler(**kwargs)
    model = make_model(3)
    tparams = list(model.parameters())
    pparams = paddle_params_like(tparams)
    opt, popt = torch.optim.SGD(tparams, lr=LR), paddle.optimizer.SGD(learning_rate=LR, parameters=pparams)
    gen = torch.Generator().manual_seed(3)
    for step, inject in enumerate([None, "grad", None, "loss_nan", "grad", None]):
        loss, scaled = scaled_loss_for(model, torch.randn(5, 4, generator=gen), ours, inject)
        p_scaled = pscaler.scale(paddle.to_tensor(to_numpy(loss)))
        assert_bitwise_equal(scaled, p_scaled, f"step {step}: scaled loss")
        scaled.backward()
        if inject == "grad":
            tparams[1].grad[2] = INF
        copy_grads_to_paddle(tparams, pparams)
        finish_step_both(style, ours, pscaler, opt, popt, scaled, p_scaled)
        opt.zero_grad()
        popt.clear_grad()
        assert_same_state(ours, pscaler, tparams, pparams, step)
        assert ours.get_scale() == 1000.0
    assert ours.get_skipped_steps() == 3


def test_fixed_scale_step_twice_is_allowed():
    """With use_dynamic_loss_scaling=False, Paddle's step() resets the optimizer state itself:
    a second step() neither raises nor is refused: it unscales the grads again and steps again."""
    kwargs = dict(init_loss_scaling=4.0, use_dynamic_loss_scaling=False)
    ours, pscaler = GradScaler(**kwargs), paddle_scaler(**kwargs)
    tparams = [torch.nn.Parameter(torch.linspace(-1, 1, 6))]
    pparams = paddle_params_like(tparams)
    opt, popt = torch.optim.SGD(tparams, lr=LR), paddle.optimizer.SGD(learning_rate=LR, parameters=pparams)
    tparams[0].grad = torch.linspace(3, 9, 6)
    copy_grads_to_paddle(tparams, pparams)
    for _ in range(2):
        ours.step(opt)
        pscaler.step(popt)
    assert_bitwise_equal(tparams[0].grad, pparams[0].grad, "grad after two step() calls")
    assert_same_state(ours, pscaler, tparams, pparams, step=1)
    ours.unscale_(opt)  # no error either: the state was reset by step()
    pscaler.unscale_(popt)
    assert_bitwise_equal(tparams[0].grad, pparams[0].grad, "grad after unscale_() after step()")


# --------------------------------------------------------------------- several optimizers


def _two_models(kwargs):
    ours, pscaler = GradScaler(**kwargs), paddle_scaler(**kwargs)
    sides = []
    for seed in (11, 12):
        model = make_model(seed)
        tparams = list(model.parameters())
        pparams = paddle_params_like(tparams)
        sides.append(
            (
                model,
                tparams,
                pparams,
                torch.optim.SGD(tparams, lr=LR),
                paddle.optimizer.SGD(learning_rate=LR, parameters=pparams),
            )
        )
    return ours, pscaler, sides


@pytest.mark.parametrize("style", ["step", "unscale_all_then_step", "minimize", "minimize_after_unscale_all"])
@pytest.mark.parametrize("bad", [None, 0, 1])
def test_two_optimizers(style, bad):
    """One scaler, two models/optimizers, inf in at most one of them: Paddle keeps ONE found_inf,
    overwritten by each unscale; step() caches it; minimize() updates every time."""
    kwargs = dict(init_loss_scaling=1024.0, incr_every_n_steps=2, decr_every_n_nan_or_inf=1)
    ours, pscaler, sides = _two_models(kwargs)
    # Paddle may step an optimizer whose grads hold inf here (its verdict comes from the other
    # optimizer), so the grads themselves matter: the oracle uses the GPU kernel's semantics.
    with paddle_gpu_kernel_semantics():
        _run_two_optimizers(ours, pscaler, sides, style, bad)


def _run_two_optimizers(ours, pscaler, sides, style, bad):
    gen = torch.Generator().manual_seed(5)
    for step in range(5):
        scaled = []
        for k, (model, tparams, pparams, _, _) in enumerate(sides):
            loss, s = scaled_loss_for(model, torch.randn(5, 4, generator=gen), ours)
            scaled.append((s, pscaler.scale(paddle.to_tensor(to_numpy(loss)))))
            s.backward()
            if bad == k and step % 2 == 0:
                tparams[0].grad[1, 1] = INF
            copy_grads_to_paddle(tparams, pparams)
        opts = [(side[3], side[4]) for side in sides]
        if style in ("unscale_all_then_step", "minimize_after_unscale_all"):
            for opt, popt in opts:
                ours.unscale_(opt)
                pscaler.unscale_(popt)
        if style.startswith("minimize"):
            for (opt, popt), (s, ps) in zip(opts, scaled):
                ours.minimize(opt, s)
                pscaler.minimize(popt, ps)
        else:
            for opt, popt in opts:
                ours.step(opt)
                pscaler.step(popt)
            ours.update()
            pscaler.update()
        for _, tparams, pparams, opt, popt in sides:
            opt.zero_grad()
            popt.clear_grad()
            assert_same_state(ours, pscaler, tparams, pparams, step)


def test_minimize_after_step():
    """Paddle does not refuse minimize() after step(): the optimizer steps a second time with the
    already unscaled grads (no second unscale), then the scale is updated."""
    kwargs = dict(init_loss_scaling=8.0, incr_every_n_steps=1)
    ours, pscaler = GradScaler(**kwargs), paddle_scaler(**kwargs)
    model = make_model(21)
    tparams = list(model.parameters())
    pparams = paddle_params_like(tparams)
    opt, popt = torch.optim.SGD(tparams, lr=LR), paddle.optimizer.SGD(learning_rate=LR, parameters=pparams)
    gen = torch.Generator().manual_seed(21)
    for step, inject in enumerate([None, "grad", None]):
        loss, s = scaled_loss_for(model, torch.randn(5, 4, generator=gen), ours)
        ps = pscaler.scale(paddle.to_tensor(to_numpy(loss)))
        s.backward()
        if inject:
            tparams[2].grad[0, 0] = NAN
        copy_grads_to_paddle(tparams, pparams)
        ours.step(opt)
        pscaler.step(popt)
        ours.minimize(opt, s)
        pscaler.minimize(popt, ps)
        opt.zero_grad()
        popt.clear_grad()
        assert_same_state(ours, pscaler, tparams, pparams, step)


@pytest.mark.parametrize("fused", [False, True], ids=["scaler-unscales", "fused"])
def test_minimize_of_some_parameters_unscales_every_gradient(fused):
    """``scaler.minimize(opt, loss, parameters=[...])``: Paddle's scaler unscales the gradients of
    all the optimizer's parameters, then updates the selected ones; a fused optimizer (ours with
    ``fused=True``, which unscales itself) leaves no gradient scaled either. (The oracle unscales
    as Paddle's GPU kernel, as we do everywhere: its CPU kernel zeroes some gradients of a skipped
    step.)"""
    kwargs = dict(init_loss_scaling=1000.0, incr_every_n_steps=2)
    ours, pscaler = GradScaler(**kwargs), paddle_scaler(**kwargs)
    model = make_model(31)
    tparams = list(model.parameters())
    pparams = paddle_params_like(tparams)
    opt = pc_optim.SGD(LR, parameters=tparams, fused=fused)
    popt = paddle.optimizer.SGD(learning_rate=LR, parameters=pparams)
    gen = torch.Generator().manual_seed(31)
    for step, inject in enumerate([None, "grad", None]):
        loss, s = scaled_loss_for(model, torch.randn(5, 4, generator=gen), ours)
        ps = pscaler.scale(paddle.to_tensor(to_numpy(loss)))
        s.backward()
        if inject:
            tparams[3].grad[0] = INF  # a gradient not selected decides the skip
        copy_grads_to_paddle(tparams, pparams)
        ours.minimize(opt, s, parameters=tparams[:2])
        with paddle_gpu_kernel_semantics():
            pscaler.minimize(popt, ps, parameters=pparams[:2])
        for i, (tp, pp) in enumerate(zip(tparams, pparams)):
            assert_bitwise_equal(tp.grad, pp.grad, f"step {step}: gradient {i}")
        opt.clear_grad()
        popt.clear_grad()
        assert_same_state(ours, pscaler, tparams, pparams, step)


# ------------------------------------------------------------------- state-machine errors


def _paddle_error(fn) -> str:
    with pytest.raises(RuntimeError) as info:
        fn()
    return str(info.value)


def _one_param_pair(init=4.0):
    tparams = [torch.nn.Parameter(torch.ones(3))]
    pparams = paddle_params_like(tparams)
    tparams[0].grad = torch.full((3,), 2.0)
    copy_grads_to_paddle(tparams, pparams)
    return (
        GradScaler(init_loss_scaling=init),
        paddle_scaler(init_loss_scaling=init),
        torch.optim.SGD(tparams, lr=LR),
        paddle.optimizer.SGD(learning_rate=LR, parameters=pparams),
    )


@pytest.mark.parametrize(
    "calls",
    [
        ("unscale_", "unscale_"),
        ("step", "unscale_"),
        ("step", "step"),
        ("unscale_", "step", "unscale_"),
        ("unscale_", "step", "step"),
    ],
    ids="-".join,
)
def test_state_machine_errors_word_for_word(calls):
    ours, pscaler, opt, popt = _one_param_pair()
    for name in calls[:-1]:
        getattr(ours, name)(opt)
        getattr(pscaler, name)(popt)
    expected = _paddle_error(lambda: getattr(pscaler, calls[-1])(popt))
    with pytest.raises(RuntimeError) as info:
        getattr(ours, calls[-1])(opt)
    assert str(info.value) == expected


def test_update_resets_the_state_machine():
    ours, pscaler, opt, popt = _one_param_pair()
    for sc, o in ((ours, opt), (pscaler, popt)):
        sc.unscale_(o)
        sc.step(o)
        sc.update()
        sc.unscale_(o)  # allowed again after update()
        sc.step(o)
    assert_bitwise_equal(opt.param_groups[0]["params"][0], popt._parameter_list[0], "parameter")


def test_minimize_resets_the_state_machine():
    ours, pscaler, opt, popt = _one_param_pair()
    for sc, o, loss in ((ours, opt, torch.ones(1)), (pscaler, popt, paddle.ones([1]))):
        sc.unscale_(o)
        sc.minimize(o, loss)
        sc.unscale_(o)  # allowed again after minimize()
        sc.step(o)
    assert_bitwise_equal(opt.param_groups[0]["params"][0], popt._parameter_list[0], "parameter")


# ----------------------------------------------------------------- dtype policy, disabled


def _capture(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, [(w.category, str(w.message)) for w in caught]


@pytest.mark.parametrize("cls", ["GradScaler", "AmpScaler"])
@pytest.mark.parametrize("recorded", ["bfloat16", "float32"])
def test_dtype_policy_disables_dynamic_scaling(recorded, cls):
    """scale() with a recorded AMP dtype other than float16 (bfloat16, or float32: what is recorded
    before any auto_cast) disables the whole scaler with a warning, as Paddle does."""
    with auto_cast(enable=recorded != "float32", dtype=recorded):  # enable=True refuses float32
        pass
    set_paddle_amp_dtype(recorded)
    ours, pscaler = OURS[cls](init_loss_scaling=1024.0), paddle_scaler(cls, init_loss_scaling=1024.0)
    loss = torch.tensor(2.5)
    ploss = paddle.to_tensor(2.5)
    out, ow = _capture(lambda: ours.scale(loss))
    pout, pw = _capture(lambda: pscaler.scale(ploss))
    assert pout is ploss  # Paddle hands the loss back untouched
    assert out is loss
    # Paddle's warning word for word; before any auto_cast (float32) ours adds a louder one.
    assert pw and ow[: len(pw)] == pw and len(ow) == len(pw) + (recorded == "float32")
    assert ours.is_enable() is pscaler.is_enable() is False
    assert ours.is_use_dynamic_loss_scaling() is pscaler.is_use_dynamic_loss_scaling() is False
    assert ours.get_init_loss_scaling() == pscaler.get_init_loss_scaling() == 1.0
    assert ours.state_dict() == pscaler.state_dict() == {}
    # A second scale() warns no more.
    assert _capture(lambda: ours.scale(loss))[1] == _capture(lambda: pscaler.scale(ploss))[1] == []
    # Disabled: load_state_dict() ignores anything, even an empty dict.
    ours.load_state_dict({})
    pscaler.load_state_dict({})


def test_disabled_scaler_steps_even_with_inf():
    """Once disabled, step()/minimize() are plain optimizer steps: inf grads are applied."""
    with auto_cast(dtype="bfloat16"):
        pass
    set_paddle_amp_dtype("bfloat16")
    ours, pscaler, opt, popt = _one_param_pair()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours.scale(torch.tensor(1.0))
        pscaler.scale(paddle.to_tensor(1.0))
    opt.param_groups[0]["params"][0].grad[0] = INF
    copy_grads_to_paddle(opt.param_groups[0]["params"], popt._parameter_list)
    for sc, o, loss in ((ours, opt, torch.ones(1)), (pscaler, popt, paddle.ones([1]))):
        sc.unscale_(o)  # does nothing
        sc.step(o)
        sc.update()
        sc.step(o)  # no state machine either
        sc.minimize(o, loss)  # a plain optimizer step too
    assert_bitwise_equal(opt.param_groups[0]["params"][0], popt._parameter_list[0], "parameter")
    assert_bitwise_equal(opt.param_groups[0]["params"][0].grad, popt._parameter_list[0].grad, "grad (never unscaled)")
    assert ours.get_skipped_steps() == 0


def test_fixed_scale_is_not_disabled_by_dtype_policy():
    """The policy only turns off *dynamic* scaling: a fixed scale keeps scaling under bfloat16."""
    with auto_cast(dtype="bfloat16"):
        pass
    set_paddle_amp_dtype("bfloat16")
    kwargs = dict(init_loss_scaling=128.0, use_dynamic_loss_scaling=False)
    ours, pscaler = GradScaler(**kwargs), paddle_scaler(**kwargs)
    out, ow = _capture(lambda: ours.scale(torch.tensor(2.5)))
    pout, pw = _capture(lambda: pscaler.scale(paddle.to_tensor(2.5)))
    assert ow == pw == []
    assert_bitwise_equal(out, pout, "scaled loss")
    assert ours.is_enable() is pscaler.is_enable() is True
    assert sorted(ours.state_dict()) == sorted([*pscaler.state_dict(), "skipped_steps"])


def test_constructed_disabled():
    ours, pscaler = GradScaler(enable=False), paddle_scaler(enable=False)
    loss = torch.tensor(3.0)
    assert ours.scale(loss) is loss
    assert ours.is_enable() is pscaler.is_enable() is False
    assert ours.is_use_dynamic_loss_scaling() is pscaler.is_use_dynamic_loss_scaling() is False
    assert ours.get_init_loss_scaling() == pscaler.get_init_loss_scaling() == 1.0
    assert ours.state_dict() == pscaler.state_dict() == {}


# -------------------------------------------------------------- constructor, getters, setters


@pytest.mark.parametrize("cls", ["GradScaler", "AmpScaler"])
def test_defaults_and_getters(cls):
    ours, pscaler = OURS[cls](), paddle_scaler(cls)
    for name in ("init_loss_scaling", "incr_ratio", "decr_ratio", "incr_every_n_steps", "decr_every_n_nan_or_inf"):
        o, p = getattr(ours, "get_" + name)(), getattr(pscaler, "get_" + name)()
        assert o == p and type(o) is type(p), f"get_{name}() ours {o!r} vs Paddle {p!r}"
    assert ours.is_enable() is pscaler.is_enable() is True
    assert ours.is_use_dynamic_loss_scaling() is pscaler.is_use_dynamic_loss_scaling() is True
    assert ours.get_scale() == float(pscaler.state_dict()["scale"][0])
    assert ours.get_skipped_steps() == 0
    osd, psd = ours.state_dict(), pscaler.state_dict()
    for key in psd:
        if key != "scale":
            assert osd[key] == psd[key] and type(osd[key]) is type(psd[key]), key


@pytest.mark.parametrize("cls", ["GradScaler", "AmpScaler"])
def test_signature_is_paddles_then_keyword_only_extras(cls):
    """What help() and inspect show for the (*args, **kwargs) constructor: Paddle's parameters,
    in its order, with its defaults; then keyword-only ones (torch's names on GradScaler, ours)."""
    ours = list(inspect.signature(OURS[cls]).parameters.values())
    theirs = list(inspect.signature(getattr(paddle.amp, cls)).parameters.values())
    assert [(p.name, p.kind, p.default) for p in ours[: len(theirs)]] == [(p.name, p.kind, p.default) for p in theirs]
    extras = ours[len(theirs) :]
    assert all(p.kind is p.KEYWORD_ONLY for p in extras)
    torch_names = {"init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled", "device"}
    extra_names = {p.name for p in extras}
    assert torch_names <= extra_names if cls == "GradScaler" else not torch_names & extra_names


def test_setters():
    ours, pscaler = GradScaler(init_loss_scaling=1024.0), paddle_scaler(init_loss_scaling=1024.0)
    for sc in (ours, pscaler):
        sc.update()  # incr_count 1
        sc.set_init_loss_scaling(3.7)
        sc.set_incr_ratio(1.3)
        sc.set_decr_ratio(0.3)
        sc.set_incr_every_n_steps(2)
        sc.set_decr_every_n_nan_or_inf(3)
    osd, psd = ours.state_dict(), pscaler.state_dict()
    assert_bitwise_equal(osd["scale"], psd["scale"], "scale after set_init_loss_scaling")
    for key in psd:
        if key != "scale":
            assert osd[key] == psd[key], f"{key}: ours {osd[key]!r} vs Paddle {psd[key]!r}"
    assert ours.get_init_loss_scaling() == pscaler.get_init_loss_scaling()
    for _ in range(3):
        ours.update()
        pscaler.update()
        assert_bitwise_equal(ours.state_dict()["scale"], pscaler.state_dict()["scale"], "scale")


@pytest.mark.parametrize(
    "call",
    [
        lambda m, cls: getattr(m, cls)(incr_ratio=1.0),
        lambda m, cls: getattr(m, cls)(decr_ratio=1.0),
        lambda m, cls: getattr(m, cls)(incr_ratio=0.5),
        lambda m, cls: getattr(m, cls)().set_incr_ratio(0.9),
        lambda m, cls: getattr(m, cls)().set_decr_ratio(1.5),
    ],
    ids=["incr_ratio", "decr_ratio", "incr_ratio_below_one", "set_incr_ratio", "set_decr_ratio"],
)
@pytest.mark.parametrize("cls", ["GradScaler", "AmpScaler"])
def test_invalid_ratios_refused_where_paddle_refuses(call, cls):
    """Paddle refuses these with ``assert`` (AssertionError "The incr_ratio must be > 1.0." ...);
    ours refuses them too, with the ValueError its docstring documents, naming the argument."""
    import paddle_compat.amp as ours_module

    from . import paddle_oracle

    class _PaddleSide:
        def __getattr__(self, name):
            return lambda **kw: paddle_oracle.paddle_scaler(name, **kw)

    with pytest.raises(AssertionError) as pinfo:
        call(_PaddleSide(), cls)
    with pytest.raises(ValueError) as oinfo:
        call(ours_module, cls)
    name = "incr_ratio" if "incr_ratio" in str(pinfo.value) else "decr_ratio"
    assert name in str(oinfo.value), f"ours: {oinfo.value!s}; Paddle: {pinfo.value!s}"


def test_scale_values_are_float32_bitwise():
    """get_scale() is the exact float32 scale as a Python float."""
    ours = GradScaler(init_loss_scaling=0.1)
    assert ours.get_scale() == float(np.float32(0.1))
    assert bits(ours.state_dict()["scale"]).tolist() == [np.float32(0.1).view(np.uint32)]


# ---------------------------------------------------------- the gradients a skipped step leaves

_SKIP_CLIPS = {
    "no_clip": None,
    "value": ("ClipGradByValue", 2.0),
    "norm": ("ClipGradByNorm", 1.0),
    "global_norm": ("ClipGradByGlobalNorm", 1.0),
    "global_norm_auto_skip": ("ClipGradByGlobalNorm", 1.0, "default_group", True),
}
_SKIP_OPTIMIZERS = {  # each regularizer, and the optimizers that apply it differently
    "sgd": ("SGD", None),
    "sgd_l1": ("SGD", ("L1Decay", 0.1)),
    "sgd_l2": ("SGD", ("L2Decay", 0.1)),
    "momentum_l2": ("Momentum", ("L2Decay", 0.1)),  # fused into Paddle's momentum kernel
    "adamw": ("AdamW", 0.01),
}


def _skip_make(module, spec):
    return spec if spec is None or isinstance(spec, float) else getattr(module, spec[0])(*spec[1:])


@pytest.mark.parametrize("bad", [INF, NAN], ids=["inf", "nan"])
@pytest.mark.parametrize("path", ["fused", "device_flag", "not_fused"])
@pytest.mark.parametrize("opt_name", list(_SKIP_OPTIMIZERS))
@pytest.mark.parametrize("clip_name", list(_SKIP_CLIPS))
def test_gradients_after_a_skipped_step(clip_name, opt_name, path, bad, monkeypatch):
    """Paddle's scaler calls its optimizer's step on a skipped step too: the clip runs and
    ClipGradByGlobalNorm scales the gradients in place (0 and NaN after an overflow, all NaN after
    a NaN); everything else leaves them as the unscale made them. ``fused``: our optimizer takes the
    scaler's flag on the host; ``device_flag``: as a flag on a GPU (Paddle's GPU formulas, the flag
    never read); ``not_fused``: the scaler skips the call itself. Paddle unscales with its GPU
    kernel's semantics (its CPU kernel zeroes the tensors from the first bad one on, see
    docs/grad_scaler.md)."""
    from paddle_compat import _devices
    from paddle_compat import nn as pnn
    from paddle_compat import optimizer as popt
    from paddle_compat import regularizer as preg

    scale = 1024.0
    grads = [np.array(g, np.float32) for g in ([[4, 5], [6, 7]], [[1, bad], [2, 3]], [[1, 2], [3, 4]])]
    ours_params = [torch.nn.Parameter(torch.ones(2, 2)) for _ in grads]
    paddle_params = paddle_params_like(ours_params)
    for tp, pp, g in zip(ours_params, paddle_params, grads):
        tp.grad = torch.from_numpy(g * np.float32(scale))
        pp.grad = paddle.to_tensor(g * np.float32(scale))
    cls_name, reg = _SKIP_OPTIMIZERS[opt_name]
    clip = _SKIP_CLIPS[clip_name]
    cls = getattr(popt, cls_name)
    if path == "device_flag":
        monkeypatch.setattr(_devices, "gpu_kernels", lambda t: True)
    extra = {"momentum": 0.9} if cls_name == "Momentum" else {}
    opt = cls(
        learning_rate=0.1,
        parameters=ours_params,
        grad_clip=_skip_make(pnn, clip),
        weight_decay=_skip_make(preg, reg),
        fused=path != "not_fused",
        **extra,
    )
    popt_ = getattr(paddle.optimizer, cls_name)(
        learning_rate=0.1,
        parameters=paddle_params,
        grad_clip=_skip_make(paddle.nn, clip),
        weight_decay=_skip_make(paddle.regularizer, reg),
        **extra,
    )
    ours, pscaler = GradScaler(init_loss_scaling=scale), paddle_scaler(init_loss_scaling=scale)
    ours.step(opt)
    ours.update()
    with paddle_gpu_kernel_semantics():
        pscaler.step(popt_)
        pscaler.update()
    assert ours.last_step_skipped() is True and ours.get_scale() == scale / 2
    for i, (tp, pp) in enumerate(zip(ours_params, paddle_params)):
        assert_bitwise_equal(tp.grad, pp.grad, f"grad {i}")
        assert_bitwise_equal(tp, pp, f"param {i}")


@pytest.mark.parametrize("fused", [False, True], ids=["default", "fused"])
def test_minimize_returns_paddles_params_grads_on_finite_and_skipped_steps(fused):
    """Paddle's scaler calls its optimizer's minimize on a skipped step too and returns its
    (ops, params_grads); ours, whose default optimizer is not called there, returns the same."""
    import paddle_compat.optimizer as our_optimizers

    tparams = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))]
    pparams = paddle_params_like(tparams)
    ours = GradScaler(init_loss_scaling=4.0)
    pscaler = paddle_scaler(init_loss_scaling=4.0)
    opt = our_optimizers.SGD(learning_rate=LR, parameters=tparams, fused=fused)
    popt = paddle.optimizer.SGD(learning_rate=LR, parameters=pparams)
    for grad in (2.0, math.inf):
        tparams[0].grad, tparams[1].grad = torch.full((3,), grad), torch.full((2,), 3.0)
        copy_grads_to_paddle(tparams, pparams)
        loss = torch.ones(1)
        _, ours_pairs = ours.minimize(opt, ours.scale(loss))
        _, paddle_pairs = pscaler.minimize(popt, pscaler.scale(paddle.to_tensor(to_numpy(loss))))
        assert [p for p, _ in ours_pairs] == tparams and len(paddle_pairs) == 2
        assert all(g is p.grad for p, g in ours_pairs)  # Paddle's too are the parameters' gradients
        if math.isfinite(grad):  # their values after a skip are another matter (Paddle multiplies them by 0)
            for (_, g), (_, pg) in zip(ours_pairs, paddle_pairs, strict=True):
                assert_bitwise_equal(g, pg, f"grad={grad}: a returned gradient")
        assert_bitwise_equal(tparams[0], pparams[0], f"grad={grad}: the parameter")
        opt.clear_grad()
        popt.clear_grad()


@pytest.mark.parametrize("bad_in", [0, 2], ids=["bad_selected", "bad_not_selected"])
def test_a_skipped_minimize_clips_only_the_parameters_it_was_given(bad_in):
    """Paddle's scaler calls ``minimize(loss, parameters=...)`` on a skipped step too: its clip
    sees the selected parameters' gradients only, and leaves the others as the unscale made them."""
    from paddle_compat import nn as pnn
    from paddle_compat import optimizer as popt

    grads = [np.array([3.0, 4.0], np.float32) for _ in range(3)]
    grads[bad_in][1] = np.inf
    ours_params = [torch.nn.Parameter(torch.ones(2)) for _ in grads]
    paddle_params = paddle_params_like(ours_params)
    for tp, pp, g in zip(ours_params, paddle_params, grads):
        tp.grad = torch.from_numpy(g * np.float32(8.0))
        pp.grad = paddle.to_tensor(g * np.float32(8.0))
    opt = popt.SGD(learning_rate=0.1, parameters=ours_params, grad_clip=pnn.ClipGradByGlobalNorm(1.0))
    paddle_opt = paddle.optimizer.SGD(learning_rate=0.1, parameters=paddle_params,
                                      grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0))
    ours, pscaler = GradScaler(init_loss_scaling=8.0), paddle_scaler(init_loss_scaling=8.0)
    ours.minimize(opt, torch.ones(1), parameters=ours_params[:2])
    with paddle_gpu_kernel_semantics():
        pscaler.minimize(paddle_opt, paddle.ones([1]), parameters=paddle_params[:2])
    assert ours.last_step_skipped() is True
    for i, (tp, pp) in enumerate(zip(ours_params, paddle_params)):
        assert_bitwise_equal(tp.grad, pp.grad, f"grad {i}")
        assert_bitwise_equal(tp, pp, f"param {i}")
