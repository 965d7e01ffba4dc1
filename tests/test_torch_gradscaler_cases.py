"""torch's device-generic GradScaler test cases, restated for ``paddle_compat.amp.GradScaler`` on CPU.

The cases are those of PyTorch's own suite (the ``test_grad_scaling_*`` family, pickling, the
overflow guard, params invalidated between unscale and step, and the scaling-case helpers),
rewritten here through the public tensor API only. "ADAPTED" says where Paddle's semantics,
which this project keeps, change the expected outcome, and how.
"""

from __future__ import annotations

import math
import pickle

import pytest
import torch

from paddle_compat.amp import GradScaler, auto_cast

# -- the "scaling case": a scaled run against an unscaled control -------------------------------
#
# Two identical 2-layer models (Linear(8, 8) twice) with their own optimizer (lr=1), four
# batches of (8, 8) inputs and targets, MSE loss. The scaled run starts at 128, grows x2 after
# every finite step and halves on an overflow; at SKIP_ITER it writes inf into the second
# layer's weight grad, so the scaled run must skip exactly where the control skips by hand.

SKIP_ITER = 2
INIT, GROWTH, BACKOFF = 128.0, 2.0, 0.5


def model_pair(seed, opt_ctor=torch.optim.SGD, lr=1.0, **opt_kwargs):
    gen = torch.Generator().manual_seed(seed)

    def build():
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
        return model

    control = build()
    scaled = build()
    scaled.load_state_dict(control.state_dict())
    return (
        control,
        opt_ctor(control.parameters(), lr=lr, **opt_kwargs),
        scaled,
        opt_ctor(scaled.parameters(), lr=lr, **opt_kwargs),
    )


def batches(seed):
    gen = torch.Generator().manual_seed(seed + 1000)
    return [(torch.randn(8, 8, generator=gen), torch.randn(8, 8, generator=gen)) for _ in range(4)]


def make_scaler(enabled):
    return GradScaler(
        enable=enabled, init_loss_scaling=INIT, incr_ratio=GROWTH, decr_ratio=BACKOFF, incr_every_n_steps=1
    )


def poison(model):
    with torch.no_grad():
        model[1].weight.grad.fill_(float("inf"))


def poison_at_skip_iter(scaler, model, i):
    """The scaled run's overflow: an inf in the grads at SKIP_ITER (when the scaler is on)."""
    if i == SKIP_ITER and scaler.is_enable():
        poison(model)


def scale_in_use(scaler):
    # ADAPTED: torch's get_scale() is 1.0 on a disabled scaler; Paddle's (and ours) is 0.0, so
    # code that divides or clips by it must ask is_enable() first.
    return scaler.get_scale() if scaler.is_enable() else 1.0


def check_scaling_case(train, unskipped, skipped, atol=1e-7, opt_ctor=torch.optim.SGD, seed=0, **opt_kwargs):
    for enabled in (True, False):
        control, opt_c, scaled, opt_s = model_pair(seed, opt_ctor, **opt_kwargs)
        data = batches(seed)
        scaler = make_scaler(enabled)
        train(data, control, opt_c, scaler, use_scaler=False)
        scaler = train(data, scaled, opt_s, scaler, use_scaler=True) or scaler
        if enabled:
            assert scaler.get_scale() == INIT * GROWTH**unskipped * BACKOFF**skipped
        else:
            assert scaler.get_scale() == 0.0  # ADAPTED: torch expects 1.0
        for c, s in zip(control.parameters(), scaled.parameters()):
            torch.testing.assert_close(s.grad, c.grad, atol=atol, rtol=1e-5)
            for key, value in opt_c.state[c].items():
                torch.testing.assert_close(opt_s.state[s][key], value, atol=atol, rtol=1e-5, msg=key)
            torch.testing.assert_close(s, c, atol=atol, rtol=1e-5)


def control_step(scaler, opt, i):
    """The unscaled control's step: skipped where the scaled run overflows."""
    if not scaler.is_enable() or i != SKIP_ITER:
        opt.step()


@pytest.mark.parametrize("opt_kwargs", [{}, {"foreach": True}, {"fused": True}], ids=["forloop", "foreach", "fused"])
@pytest.mark.parametrize("round_trip_by_pickle", [False, True])
def test_autocast_fp16_with_scaling_tracks_fp32_without(opt_kwargs, round_trip_by_pickle):
    # torch: test_grad_scaling_autocast (SGD only here: torch's own test expects Adam/AdamW at
    # lr=1 to miss its tolerance). ADAPTED: Paddle's auto_cast(dtype='float16') instead of
    # torch.autocast; the pickled variant re-creates the scaler after every update().
    def train(data, model, opt, scaler, use_scaler):
        for i, (x, y) in enumerate(data):
            opt.zero_grad()
            with auto_cast(enable=use_scaler, dtype="float16"):
                loss = torch.nn.functional.mse_loss(model(x), y)
            if use_scaler:
                scaler.scale(loss).backward()
                poison_at_skip_iter(scaler, model, i)
                scaler.step(opt)
                scaler.update()
                if round_trip_by_pickle:
                    scaler = pickle.loads(pickle.dumps(scaler))
            else:
                loss.backward()
                control_step(scaler, opt, i)
        return scaler

    check_scaling_case(train, unskipped=3, skipped=1, atol=1e-3, **opt_kwargs)


def test_clipping_the_scaled_grads_by_a_scaled_norm():
    # torch: test_grad_scaling_clipping. ADAPTED: the clip norm is multiplied by
    # scale_in_use(), not get_scale() (0.0 when disabled would zero every grad).
    max_norm = 0.2

    def train(data, model, opt, scaler, use_scaler):
        for i, (x, y) in enumerate(data):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            if use_scaler:
                scaler.scale(loss).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm * scale_in_use(scaler))
                poison_at_skip_iter(scaler, model, i)
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                control_step(scaler, opt, i)

    check_scaling_case(train, unskipped=3, skipped=1, atol=1e-5)


def test_clipping_after_an_explicit_unscale():
    # torch: test_grad_scaling_clipping_separate_unscale.
    max_norm = 0.2

    def train(data, model, opt, scaler, use_scaler):
        for i, (x, y) in enumerate(data):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            if use_scaler:
                scaler.scale(loss).backward()
                poison_at_skip_iter(scaler, model, i)
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, error_if_nonfinite=False)
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                control_step(scaler, opt, i)

    check_scaling_case(train, unskipped=3, skipped=1)


def test_gradient_penalty_through_a_scaled_double_backward():
    # torch: test_grad_scaling_penalty. ADAPTED: divide by scale_in_use() (see above); Paddle's
    # scale() returns a [1]-shaped float32 tensor, which autograd.grad takes as it takes a 0-d one.
    def train(data, model, opt, scaler, use_scaler):
        for i, (x, y) in enumerate(data):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            params = list(model.parameters())
            if use_scaler:
                grads = torch.autograd.grad(scaler.scale(loss), params, create_graph=True)
                grads = [g * (1.0 / scale_in_use(scaler)) for g in grads]
            else:
                grads = torch.autograd.grad(loss, params, create_graph=True)
            loss = loss + torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()
            if use_scaler:
                scaler.scale(loss).backward()
                poison_at_skip_iter(scaler, model, i)
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                control_step(scaler, opt, i)

    check_scaling_case(train, unskipped=3, skipped=1)


def test_gradient_accumulation_over_two_batches():
    # torch: test_grad_scaling_accumulation (no overflow: two steps, two growths).
    def train(data, model, opt, scaler, use_scaler):
        for i, (x, y) in enumerate(data):
            loss = torch.nn.functional.mse_loss(model(x), y) / 2
            (scaler.scale(loss) if use_scaler else loss).backward()
            if i % 2 == 1:
                if use_scaler:
                    scaler.step(opt)
                    scaler.update()
                else:
                    opt.step()
                opt.zero_grad()

    check_scaling_case(train, unskipped=2, skipped=0)


def run_two_models(data, models, opts, scaler, use_scaler, poisoned):
    """torch's test_grad_scaling_multiple loop: two models, two optimizers, two losses that
    both reach both models, an explicit unscale_ of the first optimizer only."""
    (m0, m1), (o0, o1) = models, opts
    for i, (x, y) in enumerate(data):
        o0.zero_grad()
        o1.zero_grad()
        out0, out1 = m0(x), m1(x)
        loss0 = torch.nn.functional.mse_loss(0.3 * out0 + 0.7 * out1, y)
        loss1 = torch.nn.functional.mse_loss(0.6 * out0 - 0.4 * out1, y)
        overflow_here = i == SKIP_ITER and scaler.is_enable()
        if use_scaler:
            scaler.scale(loss0).backward(retain_graph=True)
            scaler.scale(loss1).backward()
            if overflow_here:
                poison(models[poisoned])
            scaler.unscale_(o0)
            scaler.step(o0)
            scaler.step(o1)
            scaler.update()
        else:
            loss0.backward(retain_graph=True)
            loss1.backward()
            for k, opt in enumerate(opts):
                if not (overflow_here and k == poisoned):
                    opt.step()


@pytest.mark.parametrize(
    "poisoned, expected_scale",
    [
        # torch's case: the overflow is in the optimizer stepped last: both libraries back off.
        (1, INIT * GROWTH**3 * BACKOFF),
        # ADAPTED (not in torch): the overflow only in the optimizer stepped first. Paddle's
        # update() reads the flag of the LAST step only, so the scale still grows; torch sums
        # every optimizer's flag and would back off (512.0). Parameters agree either way.
        (0, INIT * GROWTH**4),
    ],
)
def test_two_models_two_optimizers_two_losses(poisoned, expected_scale):
    for enabled in (True, False):
        c0, oc0, s0, os0 = model_pair(0)
        c1, oc1, s1, os1 = model_pair(1)
        data = batches(0)
        scaler = make_scaler(enabled)
        run_two_models(data, (c0, c1), (oc0, oc1), scaler, use_scaler=False, poisoned=poisoned)
        run_two_models(data, (s0, s1), (os0, os1), scaler, use_scaler=True, poisoned=poisoned)
        assert scaler.get_scale() == (expected_scale if enabled else 0.0)
        for c, s in zip([*c0.parameters(), *c1.parameters()], [*s0.parameters(), *s1.parameters()]):
            torch.testing.assert_close(s, c, rtol=1e-5, atol=1e-7)


# -- unscale_ ---------------------------------------------------------------------------------


def storm_of_grads():
    """Grads that take different kernel paths: contiguous, transposed (dense, not contiguous),
    a column slice (not dense), float64, float16, bfloat16. Every value is 4.0."""
    g = torch.full((20, 20), 4.0)
    return [g.clone(), g.clone().t(), g.clone()[:, :5], g.double(), g.half(), g.bfloat16()]


def scaler_at_4():
    return GradScaler(init_loss_scaling=4.0, incr_every_n_steps=1000)


def test_unscale_divides_every_kind_of_grad_by_the_scale():
    # torch: test_grad_scaling_unscale ("perfect storm"), through the public unscale_.
    # ADAPTED: torch's public unscale_ refuses float16 grads ("Attempting to unscale FP16
    # gradients."); Paddle unscales float16 and bfloat16 grads (they stay in their dtype).
    grads = storm_of_grads()
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g
    opt = torch.optim.SGD(params, lr=1.0)
    scaler = scaler_at_4()
    scaler.unscale_(opt)
    for p in params:
        assert p.grad.dtype == p.dtype
        assert torch.equal(p.grad, torch.ones_like(p.grad))  # 4 * (1/4) is exact in every dtype
    assert scaler.step(opt) is None  # SGD.step() returns None: not a skip
    assert scaler.last_step_skipped() is False
    assert torch.equal(params[0], torch.full_like(params[0], -1.0))


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
@pytest.mark.parametrize("where", range(6))
def test_an_inf_or_nan_in_any_kind_of_grad_skips_the_step(where, bad):
    # torch: test_grad_scaling_unscale, the inject_inf loop; seen here through the step and the
    # scale instead of torch's private _unscale_grads_.
    grads = storm_of_grads()
    grads[where][2, 2] = bad
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g
    opt = torch.optim.SGD(params, lr=1.0)
    scaler = scaler_at_4()
    scaler.step(opt)
    scaler.update()
    assert scaler.last_step_skipped() is True
    assert scaler.get_skipped_steps() == 1
    assert scaler.get_scale() == 2.0
    assert all(torch.equal(p, torch.zeros_like(p)) for p in params)


def test_grads_broken_after_unscale_are_stepped_on():
    # torch: test_params_invalidated_with_grads_invalidated_between_unscale_and_step. The
    # inf/NaN check happens in unscale_; grads spoiled afterwards reach the optimizer (same
    # in Paddle: step() reuses the flag of the unscale).
    for opt_ctor in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW):
        for opt_kwargs in ({"foreach": False}, {"foreach": True}, {"fused": True}):
            _, _, model, opt = model_pair(0, opt_ctor, **opt_kwargs)
            scaler = GradScaler(init_loss_scaling=128.0)
            for x, y in batches(0):
                opt.zero_grad()
                scaler.scale(torch.nn.functional.mse_loss(model(x), y)).backward()
                scaler.unscale_(opt)
                with torch.no_grad():
                    for j, p in enumerate(model.parameters()):
                        p.grad.fill_(math.inf if j % 2 else math.nan)
                scaler.step(opt)
                scaler.update()
            assert all(not torch.isfinite(p).all() for p in model.parameters()), (opt_ctor, opt_kwargs)


def test_sparse_grads_are_refused():
    # torch: test_grad_scaling_unscale_sparse. ADAPTED: Paddle's dygraph scaler has no sparse
    # path; this project raises instead of unscaling a sparse grad.
    i = torch.tensor([[0, 1, 1], [2, 0, 2]])
    grad = torch.sparse_coo_tensor(i, torch.tensor([16.0, 32.0, 64.0]), (2, 3), check_invariants=True)
    p = torch.nn.Parameter(torch.zeros(2, 3))
    p.grad = grad
    with pytest.raises(NotImplementedError, match="sparse"):
        GradScaler().unscale_(torch.optim.SGD([p], lr=1.0))


def test_scale_takes_one_tensor_not_nested_outputs():
    # torch: test_grad_scaling_scale scales nested lists/tuples. ADAPTED: Paddle's scale()
    # takes one Tensor and says so.
    t = torch.full((1,), 4.0)
    with pytest.raises(
        TypeError, match=r"^The type of 'var' in GradScaler.scale\(\) must be torch.Tensor, but received tuple.$"
    ):
        GradScaler(init_loss_scaling=2.0).scale((t, [t]))


# -- the scale's policy -----------------------------------------------------------------------


def step_with(scaler, overflow):
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([w], lr=0.0)
    scaler.scale((w * (math.inf if overflow else 1.0)).sum()).backward()
    scaler.step(opt)
    scaler.update()


def test_growth_every_interval_and_backoff_on_overflow():
    # torch: test_grad_scaling_update_scale (torch calls its private _amp_update_scale_ kernel;
    # here the same numbers through step/update): interval 2, growth 2, backoff 0.25, scale 4.
    scaler = GradScaler(init_loss_scaling=4.0, incr_ratio=2.0, decr_ratio=0.25, incr_every_n_steps=2)
    step_with(scaler, overflow=False)
    assert (scaler.get_scale(), scaler.state_dict()["incr_count"]) == (4.0, 1)
    step_with(scaler, overflow=False)
    assert (scaler.get_scale(), scaler.state_dict()["incr_count"]) == (8.0, 0)
    step_with(scaler, overflow=True)
    sd = scaler.state_dict()
    assert (scaler.get_scale(), sd["incr_count"], sd["decr_count"]) == (2.0, 0, 0)


def test_growth_that_would_overflow_float32_keeps_the_scale():
    # torch: test_grad_scale_will_not_overflow (init 1e38, growth 16 every step). Made exact:
    # a zero model gives zero grads, so the step is finite and only the growth is at stake.
    model = torch.nn.Linear(5, 1)
    torch.nn.init.zeros_(model.weight)
    torch.nn.init.zeros_(model.bias)
    opt = torch.optim.Adam(model.parameters())
    scaler = GradScaler(init_loss_scaling=1e38, incr_ratio=16.0, incr_every_n_steps=1)
    loss = (model(torch.ones(1, 5)) - 1e-30).pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.last_step_skipped() is False
    assert math.isfinite(scaler.get_scale())
    assert scaler.get_scale() == float(torch.tensor(1e38, dtype=torch.float32))


def test_update_before_any_step_counts_as_a_finite_step():
    # ADAPTED: torch raises AssertionError("No inf checks were recorded prior to update.");
    # Paddle's update() treats "no step yet" as finite.
    scaler = GradScaler(init_loss_scaling=8.0, incr_every_n_steps=1)
    scaler.update()
    assert scaler.get_scale() == 16.0


# -- checkpoints and copies ---------------------------------------------------------------------


@pytest.mark.parametrize("scale_tensor_made", [True, False])
def test_state_dict_carries_the_scale_and_policy_to_another_scaler(scale_tensor_made):
    # torch: test_grad_scaling_state_dict (torch keys: scale, growth_factor, backoff_factor,
    # growth_interval, _growth_tracker). ADAPTED: Paddle's 8 keys, read back through getters.
    src = GradScaler(init_loss_scaling=3.0, incr_ratio=4.0, decr_ratio=0.5, incr_every_n_steps=2)
    dst = GradScaler(init_loss_scaling=6.0, incr_ratio=7.0, decr_ratio=0.8, incr_every_n_steps=9)
    step_with(dst, overflow=False)  # a non-zero count for the load to overwrite
    assert dst.state_dict()["incr_count"] == 1
    if scale_tensor_made:
        dst.scale(torch.full((1,), 4.0))
    dst.load_state_dict(src.state_dict())
    settings = (dst.get_scale(), dst.get_incr_ratio(), dst.get_decr_ratio(), dst.get_incr_every_n_steps())
    assert settings == (3.0, 4.0, 0.5, 2)
    assert dst.state_dict()["incr_count"] == 0
    assert torch.equal(dst.scale(torch.full((1,), 4.0)), torch.full((1,), 12.0))


@pytest.mark.parametrize("scale_tensor_made", [True, False])
def test_pickle_round_trip_between_iterations(scale_tensor_made):
    # torch: test_pickle_gradscaler.
    a = GradScaler(init_loss_scaling=3.0, incr_ratio=4.0, decr_ratio=0.5, incr_every_n_steps=2)
    if scale_tensor_made:
        a.scale(torch.tensor([4.0]))
    b = pickle.loads(pickle.dumps(a))
    assert b.is_enable() == a.is_enable()
    assert (b.get_scale(), b.get_incr_ratio(), b.get_decr_ratio(), b.get_incr_every_n_steps()) == (3.0, 4.0, 0.5, 2)
    assert b.state_dict()["incr_count"] == 0
    assert torch.equal(b.scale(torch.tensor([4.0])), torch.tensor([12.0]))


def test_pickling_mid_iteration_is_refused():
    # torch raises AssertionError("A GradScaler instance may only be pickled at the beginning of
    # an iteration, or at the end after scaler.update()."); ours raises RuntimeError.
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler = GradScaler()
    scaler.scale(w.sum()).backward()
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="between iterations"):
        pickle.dumps(scaler)
    scaler.update()
    pickle.dumps(scaler)


# -- optimizers that unscale themselves ---------------------------------------------------------


@pytest.mark.parametrize("opt_ctor", [torch.optim.Adam, torch.optim.AdamW])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("separate_unscale", [False, True])
def test_a_fused_optimizer_matches_its_forloop_twin(opt_ctor, amsgrad, separate_unscale):
    # torch: test_grad_scaling_autocast_fused_optimizers (CUDA there; torch has fused
    # Adam/AdamW on CPU). Without autocast here, so only the unscale-inside-the-kernel differs;
    # lr 0.01, not torch's 1.0: the two kernels round the update differently in the last bit,
    # and lr=1 feeds that back into the next grads beyond the default float32 tolerance.
    control, opt_c, fused_model, _ = model_pair(0, opt_ctor, lr=0.01, amsgrad=amsgrad)
    opt_f = opt_ctor(fused_model.parameters(), lr=0.01, amsgrad=amsgrad, fused=True)
    scaler_c, scaler_f = GradScaler(init_loss_scaling=128.0), GradScaler(init_loss_scaling=128.0)
    for x, y in batches(0):
        for model, opt, scaler, unscale_first in (
            (control, opt_c, scaler_c, False),
            (fused_model, opt_f, scaler_f, separate_unscale),
        ):
            opt.zero_grad()
            scaler.scale(torch.nn.functional.mse_loss(model(x), y)).backward()
            if unscale_first:
                scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
        for pc, pf in zip(control.parameters(), fused_model.parameters()):
            torch.testing.assert_close(pf.grad, pc.grad)
            torch.testing.assert_close(pf, pc)
            for key, value in opt_c.state[pc].items():
                torch.testing.assert_close(opt_f.state[pf][key].reshape(value.shape), value, msg=key)
    assert scaler_f.get_scale() == scaler_c.get_scale()


class _SelfUnscalingSGD(torch.optim.Optimizer):
    """A stand-in for an optimizer that unscales like Paddle and skips on the device
    (the two class attributes of notes/CONTRACTS.md). It records what the scaler handed it."""

    _step_supports_amp_scaling = True
    _unscales_like_paddle = True

    def __init__(self, params):
        super().__init__(params, {})
        self.seen = []

    def step(self, closure=None):
        grad_scale = getattr(self, "grad_scale", None)
        found_inf = getattr(self, "found_inf", None)
        self.seen.append(
            (None if grad_scale is None else grad_scale.clone(), None if found_inf is None else found_inf.clone())
        )


@pytest.mark.parametrize("overflow", [False, True])
@pytest.mark.parametrize("unscale_first", [False, True])
def test_an_optimizer_that_unscales_itself_gets_the_scale_and_the_flag(overflow, unscale_first):
    # torch: test_grad_scaler_pass_itself. ADAPTED: torch's deprecated grad_scaler= keyword is
    # not offered; the contract is the grad_scale/found_inf attributes, present during step()
    # only, grad_scale None once unscale_ has already unscaled.
    w = torch.nn.Parameter(torch.ones(4))
    opt = _SelfUnscalingSGD([w])
    scaler = GradScaler(init_loss_scaling=2.0)
    scaler.scale((w * (math.inf if overflow else 1.0)).sum()).backward()
    if unscale_first:
        scaler.unscale_(opt)
    scaler.step(opt)
    assert not hasattr(opt, "grad_scale") or opt.grad_scale is None
    assert not hasattr(opt, "found_inf") or opt.found_inf is None
    (grad_scale, found_inf), = opt.seen
    if unscale_first:
        assert grad_scale is None
    else:
        assert grad_scale.dtype == torch.float32 and grad_scale.reshape(-1).tolist() == [2.0]
    assert found_inf.dtype == torch.float32 and found_inf.reshape(-1).tolist() == [1.0 if overflow else 0.0]
    scaler.update()
    assert scaler.last_step_skipped() is overflow
    assert scaler.get_scale() == (1.0 if overflow else 2.0)


# -- step(): arguments and result ---------------------------------------------------------------


class _LoudSGD(torch.optim.SGD):
    def step(self, closure=None, *, tag=None):
        super().step()
        return ("stepped", closure, tag)


def loud_setup(overflow=False, enable=True):
    w = torch.nn.Parameter(torch.ones(2))
    opt = _LoudSGD([w], lr=0.1)
    scaler = GradScaler(enable=enable, init_loss_scaling=8.0)
    scaler.scale((w * (math.inf if overflow else 1.0)).sum()).backward()
    return scaler, opt


def test_step_returns_the_optimizers_result_and_forwards_arguments():
    # torch's step(optimizer, *args, **kwargs) contract (its docstring); Paddle's step returns
    # None and takes no arguments, so this is the torch dialect's superset.
    scaler, opt = loud_setup()
    assert scaler.step(opt, None, tag="t") == ("stepped", None, "t")  # Accelerate passes closure=None positionally


def test_a_skipped_step_returns_none():
    scaler, opt = loud_setup(overflow=True)
    assert scaler.step(opt) is None


@pytest.mark.parametrize("how", ["keyword", "positional"])
def test_a_closure_is_refused_while_enabled(how):
    # torch refuses closure= with this text (and lets a positional one through unnoticed);
    # ours refuses both spellings.
    scaler, opt = loud_setup()
    args, kwargs = ((lambda: None,), {}) if how == "positional" else ((), {"closure": lambda: None})
    with pytest.raises(RuntimeError, match=r"^Closure use is not currently supported if GradScaler is enabled\.$"):
        scaler.step(opt, *args, **kwargs)


def test_a_disabled_scaler_is_transparent():
    # torch: the enabled=False branch of _run_scaling_case, and its docs. ADAPTED: get_scale()
    # is 0.0 (torch 1.0).
    scaler, opt = loud_setup(enable=False)
    loss = torch.ones(())
    assert scaler.scale(loss) is loss
    assert scaler.step(opt, tag="x") == ("stepped", None, "x")
    scaler.update()
    assert (scaler.is_enable(), scaler.get_scale(), scaler.state_dict()) == (False, 0.0, {})
    scaler.load_state_dict({})  # a no-op, as in both libraries
