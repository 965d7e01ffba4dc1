"""The loss-scale policy: Paddle's update rule, the safety limits, and host == device."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from paddle_compat.amp.loss_scale import (
    DEVICE,
    FLOAT32_TINY,
    HOST,
    LossScalePolicy,
    LossScaleState,
    next_state,
    round_f32,
)


def paddle_update(scale, incr, decr, found_inf, p):
    """Paddle's ``AmpScaler._update`` transcribed with numpy float32, the reference model."""
    scale = np.float32(scale)
    if found_inf:
        incr, decr = 0, decr + 1
        if decr == p.decr_every_n_nan_or_inf:
            scale, decr = scale * np.float32(p.decr_ratio), 0
    else:
        incr, decr = incr + 1, 0
        if incr == p.incr_every_n_steps:
            scale, incr = scale * np.float32(p.incr_ratio), 0
    return float(scale), incr, decr


policies = st.builds(
    LossScalePolicy,
    incr_ratio=st.floats(1.0001, 8.0),
    decr_ratio=st.floats(0.01, 0.99),
    incr_every_n_steps=st.integers(1, 5),
    decr_every_n_nan_or_inf=st.integers(1, 4),
)
flags = st.lists(st.booleans(), min_size=1, max_size=60)
scales = st.sampled_from([1.0, 3.0, 1000.0, 2.0**15, 2.0**16, 12345.678, 2.0**100])


@settings(max_examples=300, deadline=None)
@given(policies, flags, scales)
def test_host_policy_is_paddles_rule_while_scale_stays_in_range(policy, found, init):
    ours = LossScaleState(round_f32(init), 0, 0)
    ref = (round_f32(init), 0, 0)
    for f in found:
        ref = paddle_update(*ref, f, policy)
        if not (FLOAT32_TINY <= ref[0] < float("inf")):
            return  # past here Paddle's run is broken; the safety tests cover it
        ours, _ = next_state(ours, f, policy)
        assert tuple(ours) == ref


@settings(max_examples=150, deadline=None)
@given(policies, flags, scales)
def test_device_backend_gives_the_host_backends_results_bitwise(policy, found, init):
    host = LossScaleState(round_f32(init), 0, 0)
    dev = LossScaleState(
        torch.tensor([init], dtype=torch.float32), torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    )
    for f in found:
        host, host_decreased = next_state(host, f, policy, HOST)
        dev, dev_decreased = next_state(dev, torch.tensor([float(f)]), policy, DEVICE)
        assert dev.scale.dtype == torch.float32
        assert (dev.scale.item(), dev.incr_count.item(), dev.decr_count.item()) == tuple(host)
        assert bool(dev_decreased) == host_decreased


def test_growth_that_would_overflow_keeps_the_scale():
    p = LossScalePolicy(incr_ratio=2.0, incr_every_n_steps=1)
    state, _ = next_state(LossScaleState(2.0**127, 0, 0), False, p)
    assert state == LossScaleState(2.0**127, 0, 0)  # Paddle's Python rule would reach inf


def test_decreases_stop_at_the_smallest_normal_float32():
    p = LossScalePolicy(decr_ratio=0.5)
    state = LossScaleState(2.0**-125, 0, 0)
    for _ in range(3):
        state, decreased = next_state(state, True, p)
        assert decreased
    assert state.scale == FLOAT32_TINY == 2.0**-126  # Paddle's would reach subnormals, then 0


def test_min_and_max_loss_scaling_bound_the_scale():
    p = LossScalePolicy(incr_every_n_steps=1, min_loss_scaling=4.0, max_loss_scaling=100.0)
    state = LossScaleState(64.0, 0, 0)
    state, _ = next_state(state, False, p)
    assert state.scale == 100.0
    for _ in range(10):
        state, _ = next_state(state, True, p)
    assert state.scale == 4.0


def test_non_dyadic_ratios_round_like_float32_tensors():
    p = LossScalePolicy(decr_ratio=0.3, incr_ratio=1.3, incr_every_n_steps=1)
    down, _ = next_state(LossScaleState(65536.0, 0, 0), True, p)
    up, _ = next_state(LossScaleState(65536.0, 0, 0), False, p)
    t = torch.tensor([65536.0])
    assert down.scale == (t * 0.3).item() == float(np.float32(65536.0) * np.float32(0.3))
    assert up.scale == (t * 1.3).item()


def test_a_counter_past_a_lowered_period_fires_instead_of_counting_forever():
    p = LossScalePolicy(decr_every_n_nan_or_inf=2)
    state, decreased = next_state(LossScaleState(8.0, 0, 5), True, p)
    assert decreased and state == LossScaleState(4.0, 0, 0)


def test_policy_is_built_by_name():
    with pytest.raises(TypeError, match="positional"):
        LossScalePolicy(2.0, 0.5)  # type: ignore[misc]
    assert LossScalePolicy(decr_ratio=0.25, incr_ratio=4.0).incr_ratio == 4.0


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        ({"incr_ratio": 1.0}, ValueError, "incr_ratio must be a finite number > 1, got 1.0"),
        ({"incr_ratio": float("inf")}, ValueError, "incr_ratio must be a finite number > 1, got inf"),
        ({"incr_ratio": "2"}, TypeError, "incr_ratio should be a float or an int, but received str"),
        ({"decr_ratio": 1.0}, ValueError, "decr_ratio must be a finite number in (0, 1), got 1.0"),
        ({"decr_ratio": 0.0}, ValueError, "decr_ratio must be a finite number in (0, 1), got 0.0"),
        ({"decr_ratio": True}, TypeError, "decr_ratio should be a float or an int, but received bool"),
        ({"incr_every_n_steps": 0}, ValueError, "incr_every_n_steps must be an integer in [1, 2147483647], got 0"),
        ({"incr_every_n_steps": 2.0}, TypeError, "incr_every_n_steps should be an int, but received float"),
        ({"decr_every_n_nan_or_inf": -1}, ValueError,
         "decr_every_n_nan_or_inf must be an integer in [1, 2147483647], got -1"),
        ({"decr_every_n_nan_or_inf": 2**31}, ValueError,
         "decr_every_n_nan_or_inf must be an integer in [1, 2147483647], got 2147483648"),
        ({"min_loss_scaling": 0.0}, ValueError, "min_loss_scaling must be a finite number > 0, got 0.0"),
        ({"max_loss_scaling": 1e39}, ValueError,
         "max_loss_scaling must be a finite number > 0 in float32's normal range, got 1e+39"),
        ({"min_loss_scaling": 8.0, "max_loss_scaling": 4.0}, ValueError,
         "min_loss_scaling (8.0) must not exceed max_loss_scaling (4.0)"),
    ],
)
def test_policy_rejects_bad_hyper_parameters(kwargs, exc, message):
    with pytest.raises(exc) as info:
        LossScalePolicy(**kwargs)
    assert str(info.value) == message


def test_round_f32():
    assert round_f32(0.1) == float(np.float32(0.1))
    assert round_f32(3.5e38) == float("inf")
    assert round_f32(-1e300) == float("-inf")
    assert round_f32(float(np.finfo(np.float32).max)) == float(np.finfo(np.float32).max)


# -- the read-only check agrees with "unscale, then look" -------------------------------------

from paddle_compat.amp import unscale  # noqa: E402

special = st.sampled_from([0.0, 1.0, -3.5, 6e4, -6.5e4, 3e38, 1e-40, float("inf"), float("-inf"), float("nan")])
tensors = st.tuples(
    st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    st.lists(st.one_of(special, st.floats(-1e5, 1e5)), min_size=0, max_size=6),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(tensors, min_size=1, max_size=4), st.sampled_from([1.0, 0.25, 0.5, 2.0**-10, 3.0, 65536.0]))
def test_read_only_check_matches_unscale_then_isfinite(specs, scale):
    grads = [torch.tensor(values, dtype=torch.float32).to(dtype) for dtype, values in specs]
    inv = torch.reciprocal(torch.tensor([scale]))
    expected = any((~torch.isfinite((g.float() * inv).to(g.dtype))).any().item() for g in grads)
    found = torch.zeros(1)
    unscale.any_nonfinite(grads, inv, found)
    assert found.item() == float(expected)
    # and the in-place pass, asked to check its output, agrees too
    copies = [g.clone() for g in grads]
    found = torch.zeros(1)
    unscale.unscale_(copies, inv, found, check_output=scale < 1)
    assert found.item() == float(expected)
