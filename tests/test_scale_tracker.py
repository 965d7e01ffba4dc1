"""ScaleTracker, the one owner of the scale's state: whatever mix of host and device updates,
resets and pickling, it agrees with the plain host policy, and its tensors agree with its replica."""

import dataclasses
import pickle

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from paddle_compat import _devices
from paddle_compat.amp.loss_scale import HOST, LossScalePolicy, LossScaleState, next_state, round_f32
from paddle_compat.amp.scale_tracker import FoundInf, ScaleTracker

POLICIES = st.builds(
    LossScalePolicy,
    incr_ratio=st.sampled_from([2.0, 3.0, 1.5]),
    decr_ratio=st.sampled_from([0.5, 0.3, 0.25]),
    incr_every_n_steps=st.integers(1, 4),
    decr_every_n_nan_or_inf=st.integers(1, 3),
)
STEPS_AND_SETTERS = [
    st.tuples(st.just("host"), st.booleans()),  # a step whose flag was read (one sync)
    st.tuples(st.just("device"), st.booleans()),  # a fused step: the device runs the policy
    st.tuples(st.just("none"), st.none()),  # update() with no step since the last one
    st.tuples(st.just("scale"), st.sampled_from([1.0, 8.0, 1000.0])),
    st.tuples(st.just("period"), st.integers(1, 3)),
    st.tuples(st.just("skipped"), st.integers(0, 5)),
]
OPS = st.lists(st.one_of(*STEPS_AND_SETTERS, st.tuples(st.just("pickle"), st.none())), max_size=40)


def follow_the_host_policy(tracker, policy, ops, check):
    """Apply ``ops`` to ``tracker`` and to the plain host policy side by side; after each,
    ``check(tracker, expected state, policy, skipped)``."""
    ref, ref_policy, skipped = LossScaleState(tracker.state().scale, 0, 0), policy, 0
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
        elif kind == "skipped":
            tracker.reset(skipped=arg)
            skipped = arg
        else:
            tracker = pickle.loads(pickle.dumps(tracker))
        check(tracker, ref, ref_policy, skipped)


@settings(max_examples=150, deadline=None)
@given(POLICIES, st.sampled_from([1.0, 64.0, 2.0**100]), OPS)
def test_tracker_agrees_with_the_host_policy(policy, init, ops):
    def check(tracker, ref, ref_policy, skipped):
        assert tracker.state() == ref
        assert tracker.skipped_steps() == skipped
        assert tracker.tensor().item() == ref.scale  # the device copy follows the replica
        assert tracker.policy == ref_policy

    follow_the_host_policy(ScaleTracker(policy, init), policy, ops, check)


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


# -- a CUDA graph capture, stood in for on CPU tensors --------------------------------------------
@pytest.fixture
def capture(monkeypatch):
    """``capture[0] = True``: ``_devices.capturing`` says a CUDA graph is being captured, for CPU
    tensors (no GPU here): the tracker then takes its in-place path."""
    capturing = [False]
    monkeypatch.setattr(_devices, "capturing", lambda t: capturing[0])
    return capturing


def device_step(tracker, bad):
    flag = FoundInf.in_flight(torch.tensor([float(bad)]))
    tracker.record_step(flag)
    tracker.update(flag)


def bits(t):
    return t.view(torch.int32).tolist()


@pytest.mark.parametrize("decr_n", [1, 2], ids=["torch-update-kernel", "paddle-rule-on-tensors"])
def test_a_captured_policy_writes_in_place_along_the_eager_trajectory(capture, decr_n):
    """Once a capture saw a fused step, the scale and its counters are written in place (a replay
    must move the tensors the next replay reads), bit for bit as the eager path moves them, through
    overflows, decreases, growth and the ceiling."""
    policy = LossScalePolicy(incr_ratio=3.0, decr_ratio=0.3, incr_every_n_steps=3, decr_every_n_nan_or_inf=decr_n,
                             max_loss_scaling=5000.0)
    overflows = {2, 3, 9, 10, 34}
    eager, graphed = ScaleTracker(policy, 1000.0), ScaleTracker(policy, 1000.0)
    device_step(eager, False)
    device_step(graphed, False)  # the warm-up, eager: it makes the device counters
    capture[0] = True
    held, counters = graphed.tensor(), graphed._device_counters
    scales = set()
    for i in range(1, 45):
        device_step(eager, i in overflows)
        device_step(graphed, i in overflows)
        assert graphed.tensor() is held and all(a is b for a, b in zip(graphed._device_counters, counters))
        assert bits(graphed.tensor()) == bits(eager.tensor())
        scales.add(eager.tensor().item())
    assert len(scales) > 6 and 5000.0 in scales  # it fell and grew, up to the ceiling
    capture[0] = False
    assert graphed.state() == eager.state()  # read from the device: nothing was queued for the host
    assert graphed.skipped_steps() == eager.skipped_steps() == len(overflows)
    assert not graphed._pending_updates and not graphed._pending_steps


@settings(max_examples=100, deadline=None)
@given(POLICIES, st.sampled_from([1.0, 64.0, 2.0**100]), st.lists(st.one_of(*STEPS_AND_SETTERS), max_size=30))
def test_written_in_place_the_tracker_still_agrees_with_the_host_policy(policy, init, ops):
    """Host updates, setters and fused steps after a capture: the replica, read from the device,
    follows the host policy, and the scale keeps its tensor (the graph holds it)."""
    tracker = ScaleTracker(policy, init)
    capturing = [False]
    held = []

    def check(tracker, ref, ref_policy, skipped):
        assert tracker.state() == ref
        assert tracker.skipped_steps() == skipped
        held.append(tracker.tensor())
        assert held[-1] is held[0] and held[-1].item() == ref.scale
        capturing[0] = True  # after the warm-up step

    with pytest.MonkeyPatch.context() as m:
        m.setattr(_devices, "capturing", lambda t: capturing[0])
        follow_the_host_policy(tracker, policy, [("device", False), ("device", False), *ops], check)


def test_nothing_is_made_during_a_capture(monkeypatch):
    """A capture before any eager fused step would make the device counters (or the scale's
    tensor) inside the graph, reset at each replay: refused, naming the cure, with nothing changed."""
    tracker = ScaleTracker(LossScalePolicy(), 8.0)
    monkeypatch.setattr(_devices, "capturing", lambda device: True)
    with pytest.raises(RuntimeError, match="run the same step eagerly before capturing it"):
        tracker.record_step(FoundInf.in_flight(torch.tensor([1.0])))
    monkeypatch.setattr(_devices, "capturing", lambda device: device.type == "meta")  # captured: the new home
    with pytest.raises(RuntimeError, match="the scale's tensor on its device would be made during a CUDA graph"):
        tracker.claim(torch.device("meta"))
    monkeypatch.setattr(_devices, "capturing", lambda device: False)
    assert tracker.state() == (8.0, 0, 0) and tracker.skipped_steps() == 0 and tracker.tensor().device.type == "cpu"
    assert tracker.claim(torch.device("meta")) is tracker.tensor()  # still free to move, once


def test_a_captured_step_computes_its_own_reciprocal(capture):
    """The reciprocal cache keys on the tensor, and a replay changes the tensor's value, not the
    tensor: during and after a capture each step computes its own."""
    tracker = ScaleTracker(LossScalePolicy(incr_every_n_steps=1), 16.0)
    device_step(tracker, False)
    scale = tracker.tensor()
    assert tracker.reciprocal(scale) is tracker.reciprocal(scale)  # eager: cached
    capture[0] = True
    inside = tracker.reciprocal(scale)
    assert inside is not tracker.reciprocal(scale)
    device_step(tracker, False)  # 32 -> 64, in place
    capture[0] = False
    assert scale.item() == 64.0 and tracker.reciprocal(scale).item() == 1 / 64.0


def test_no_copy_event_is_queried_during_a_capture(capture):
    """Bounding the scale during a capture (the unscale before the capture's first update) asks no
    event whether a copy landed: a query is illegal while a CUDA graph is captured."""

    class Unqueryable:
        def query(self):
            raise AssertionError("an event queried during a capture")

    tracker = ScaleTracker(LossScalePolicy(), 8.0)
    flag = FoundInf.in_flight(torch.tensor([0.0]))
    flag._value, flag._event = None, Unqueryable()  # a copy from a GPU, still in flight
    tracker.record_step(flag)
    tracker.update(flag)
    capture[0] = True
    assert tracker.may_be_below_one()  # the floor is below 1, and the scale may have fallen to it
