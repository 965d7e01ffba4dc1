"""ScaleTracker, the one owner of the scale's state: whatever mix of host and device updates,
resets and pickling, it agrees with the plain host policy, and its tensors agree with its replica."""

import dataclasses
import pickle

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from paddle_compat.amp.loss_scale import HOST, LossScalePolicy, LossScaleState, next_state, round_f32
from paddle_compat.amp.scale_tracker import FoundInf, ScaleTracker

POLICIES = st.builds(
    LossScalePolicy,
    incr_ratio=st.sampled_from([2.0, 3.0, 1.5]),
    decr_ratio=st.sampled_from([0.5, 0.3, 0.25]),
    incr_every_n_steps=st.integers(1, 4),
    decr_every_n_nan_or_inf=st.integers(1, 3),
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("host"), st.booleans()),  # a step whose flag was read (one sync)
        st.tuples(st.just("device"), st.booleans()),  # a fused step: the device runs the policy
        st.tuples(st.just("none"), st.none()),  # update() with no step since the last one
        st.tuples(st.just("scale"), st.sampled_from([1.0, 8.0, 1000.0])),
        st.tuples(st.just("period"), st.integers(1, 3)),
        st.tuples(st.just("pickle"), st.none()),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(POLICIES, st.sampled_from([1.0, 64.0, 2.0**100]), OPS)
def test_tracker_agrees_with_the_host_policy(policy, init, ops):
    tracker = ScaleTracker(policy, init)
    ref, ref_policy, skipped = LossScaleState(round_f32(init), 0, 0), policy, 0
    for kind, arg in ops:
        if kind in ("host", "device"):
            flag = FoundInf.known(arg) if kind == "host" else FoundInf.in_flight(torch.tensor([float(arg)]))
            tracker.record_step(flag)
            tracker.update(flag)
            ref, _ = next_state(ref, arg, ref_policy, HOST)
            skipped += arg
        elif kind == "none":
            tracker.update(None)
            ref, _ = next_state(ref, False, ref_policy, HOST)
        elif kind == "scale":
            tracker.reset(scale=arg)
            ref = ref._replace(scale=round_f32(arg))
        elif kind == "period":
            ref_policy = dataclasses.replace(policy, incr_every_n_steps=arg, decr_every_n_nan_or_inf=arg)
            tracker.reset(policy=ref_policy)
        else:
            tracker = pickle.loads(pickle.dumps(tracker))
        assert tracker.state() == ref
        assert tracker.skipped_steps() == skipped
        assert tracker.tensor().item() == ref.scale  # the device copy follows the replica
        assert tracker.policy == ref_policy


def test_a_scale_tensor_handed_out_keeps_its_value():
    """Updates replace the device copy instead of writing it: a thread that scaled its loss with
    one tensor can still unscale with it after another thread moved the scale."""
    tracker = ScaleTracker(LossScalePolicy(incr_every_n_steps=1), 16.0)
    first, generation = tracker.tensor(), tracker.generation
    tracker.update(FoundInf.in_flight(torch.tensor([0.0])))  # device path
    tracker.update(FoundInf.known(False))  # host path
    assert first.item() == 16.0 and tracker.tensor().item() == 64.0
    assert tracker.generation != generation


def test_the_reciprocal_is_made_once_per_scale_tensor():
    tracker = ScaleTracker(LossScalePolicy(incr_every_n_steps=1, incr_ratio=3.0), 16.0)
    old = tracker.tensor()
    inv = tracker.reciprocal(old)
    assert tracker.reciprocal(old) is inv and inv.item() == round_f32(1 / 16.0)
    tracker.update(FoundInf.known(False))  # 48: a new tensor, so a new reciprocal
    new = tracker.tensor()
    assert tracker.reciprocal(new).item() == torch.reciprocal(torch.tensor([48.0])).item()
    assert tracker.reciprocal(old).item() == inv.item()  # an old tensor still gets its own


def test_claim_moves_the_copy_once_then_hands_out_copies():
    tracker = ScaleTracker(LossScalePolicy(), 4.0)
    home = tracker.claim(torch.device("cpu"))
    assert home is tracker.tensor() and home.dtype == torch.float32 and home.shape == (1,)
    assert tracker.claim(torch.device("meta")).device.type == "meta"  # another device: a copy
    assert tracker.tensor().device.type == "cpu"


def test_may_be_below_one_is_a_bound_without_reading_the_device():
    tracker = ScaleTracker(LossScalePolicy(decr_ratio=0.5), 2.0)
    assert not tracker.may_be_below_one()
    tracker.reset(scale=0.5)
    assert tracker.may_be_below_one()
    floor = ScaleTracker(LossScalePolicy(min_loss_scaling=1.0), 2.0)
    floor.reset(scale=1.0)
    assert not floor.may_be_below_one()
