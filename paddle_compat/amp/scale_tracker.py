"""The loss scale's state and its one owner: host replica, device copy, flags in flight.

``ScaleTracker`` holds everything that must agree about the scale: the policy, the host replica
(scale, ``incr_count``, ``decr_count``), the device copy the gradients are unscaled with, the
``found_inf`` flags still on their way from the device, and the skipped-step count. Whoever moves
the scale asks the tracker; nobody else writes any of it.

Why a host replica: the skip decision of an ordinary step reads ``found_inf`` anyway, so the host
can run the policy itself on that flag and know the scale without reading the device. With a
fused optimizer the flag stays on the device: the device runs the policy, the flag travels to the
host through pinned memory, and the replica replays it when it arrives. Reads that need the
replica exact (``state()``, ``skipped_steps()``) wait for flags still in flight; nothing else does.

The device copy is replaced, never written in place, so a tensor handed out earlier keeps the
value it had (a thread that scaled its loss with it unscales with it too). All methods take one
lock: a tracker may be shared by threads.

Except once a CUDA graph has captured a step of the device policy (a fused step): a replay reads
the tensors the capture saw, so from then on the scale, its counters and a device count of skipped
steps are written in place, as an eager step would move them, and the device is the reference: the
replica is read back from it (one sync) when asked. Threads sharing such a tracker may then unscale
with a scale that another thread moved.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
from collections import deque
from typing import Any

import torch
from torch import Tensor

from .. import _devices
from .._devices import copy_to, copy_to_host_async
from .loss_scale import _INT32_MAX, DEVICE, HOST, LossScalePolicy, LossScaleState, next_state, round_f32

__all__ = ["FoundInf", "ScaleTracker"]

logger = logging.getLogger("paddle_compat.amp")


class FoundInf:
    """One step's ``found_inf``: known on the host, or a device tensor on its way there."""

    __slots__ = ("_value", "_host", "_event", "tensor")

    def __init__(self, value: bool | None = None, tensor: Tensor | None = None) -> None:
        self._value: bool | None = value
        self._host: Tensor | None = None  # pinned copy in flight
        self._event: torch.cuda.Event | None = None  # marks the copy's end
        self.tensor = tensor

    @classmethod
    def known(cls, value: bool) -> FoundInf:
        """A flag the host already knows."""
        return cls(value=value)

    @classmethod
    def in_flight(cls, tensor: Tensor) -> FoundInf:
        """Start copying a device flag to the host without waiting for it.

        Not while a CUDA graph is being captured: no pinned buffer may be taken nor an event
        recorded for the host there (the flag's value exists only at replays). The flag then stays
        on the device, and the host reads it (a sync, the last replay's value) once the capture is
        over, when asked.
        """
        flag = cls(tensor=tensor)
        if tensor.device.type != "cuda":  # the host is the device: reading it costs nothing
            flag._value = bool(tensor.item())
        elif not torch.cuda.is_current_stream_capturing():
            flag._host, flag._event = copy_to_host_async(tensor)
        return flag

    @property
    def on_device(self) -> bool:
        """Whether the flag was decided on the device (the policy then runs there too)."""
        return self.tensor is not None

    def ready(self) -> bool:
        """Whether ``value()`` would not wait for a copy (a flag captured in a CUDA graph: once the
        capture is over)."""
        if self._event is not None:
            return self._event.query()
        return self._value is not None or not torch.cuda.is_current_stream_capturing()

    def value(self) -> bool:
        """The flag; waits for the copy if it is still in flight (the only sync it ever makes).
        A flag captured in a CUDA graph is read from the device at each call: the last replay's."""
        if self._value is None:
            if self._event is None:  # captured: each replay sets it anew
                assert self.tensor is not None
                return bool(self.tensor.item())
            else:
                assert self._host is not None
                self._event.synchronize()
                self._value, self._host, self._event = bool(self._host.item()), None, None
        return self._value


class ScaleTracker:
    """Owner of the loss scale's state, on the host and on the device.

    Args:
        policy: the validated hyper-parameters.
        scale: the initial scale (a float32 value).
        device: where the device copy lives until gradients on another device claim it
            (``None``: CPU).
    """

    def __init__(self, policy: LossScalePolicy, scale: float, device: torch.device | None = None) -> None:
        self._lock = threading.RLock()
        self._policy = policy
        self._host = LossScaleState(round_f32(scale), 0, 0)
        self._skipped = 0
        self._init_transients(device)

    def _init_transients(self, device: torch.device | None) -> None:
        """The device-side state: rebuilt from the replica after unpickling."""
        self._device = torch.device(device) if device is not None else torch.device("cpu")
        self._homed = False  # whether gradients have fixed the device copy's device
        self._scale = torch.full((1,), self._host.scale, dtype=torch.float32, device=self._device)
        self.generation = 0  # bumped whenever the scale's value may change
        self._device_counters: tuple[Tensor, Tensor] | None = None  # while the device runs the policy
        self._device_skipped: Tensor | None = None  # int64 [1]: steps skipped in place (see module doc)
        self._skipped_read = 0  # its value at the last read
        self._in_place = False  # whether a CUDA graph captured the device policy (see module doc)
        self._clamp_due = False  # in place: the counters may exceed a period (``_forget_device_counters``)
        self._reciprocal: tuple[Tensor, Tensor] | None = None  # (a scale tensor, 1 / it)
        self._pending_updates: deque[FoundInf] = deque()  # updates the device ran, not yet replayed
        self._pending_steps: deque[FoundInf] = deque()  # steps whose skip is not yet known here

    # -- reads -------------------------------------------------------------------------------

    @property
    def policy(self) -> LossScalePolicy:
        """The hyper-parameters (replaced, never changed, by ``reset``)."""
        return self._policy

    def state(self) -> LossScaleState:
        """The replica, exact: waits for flags still in flight."""
        with self._lock:
            self._replay(block=True)
            return self._host

    def skipped_steps(self) -> int:
        """How many steps were skipped; waits for flags still in flight."""
        with self._lock:
            self._replay(block=True)
            return self._skipped

    def tensor(self, device: torch.device | None = None) -> Tensor:
        """The current scale as a float32 ``[1]`` tensor on ``device`` (default: its home).

        The first device that asks for it with gradients becomes its home (``claim``); other
        devices get copies.
        """
        with self._lock:
            if device is None or device == self._scale.device:
                return self._scale
            return copy_to(self._scale, device)

    def claim(self, device: torch.device) -> Tensor:
        """Move the device copy to ``device`` if nothing has fixed its home yet; return it there."""
        with self._lock:
            if not self._homed:
                if device != self._scale.device:
                    self._refuse_capture("the scale's tensor on its device", device)
                    self._device_counters = self._device_skipped = None
                    self._scale = torch.full((1,), self._host.scale, dtype=torch.float32, device=device)
                self._homed = True
            return self.tensor(device)

    def reciprocal(self, scale: Tensor) -> Tensor:
        """``1 / scale`` for a tensor ``tensor``/``claim`` returned, computed once per tensor:
        the scale moves rarely and every step unscales with its reciprocal."""
        with self._lock:
            if self._in_place or _devices.capturing(scale.device):  # replays move it unseen: each computes its own
                return torch.reciprocal(scale)
            if self._reciprocal is None or self._reciprocal[0] is not scale:
                self._reciprocal = (scale, torch.reciprocal(scale))
            return self._reciprocal[1]

    def may_be_below_one(self) -> bool:
        """Whether the device scale may be < 1, from a host lower bound (no sync)."""
        with self._lock:
            if self._in_place or _devices.capturing(self._scale.device):  # replays move it unseen; no event query there
                return self._policy.lowest < 1.0
            self._replay(block=False)
            # Each update not yet replayed may have decreased it.
            bound = self._host.scale * self._policy.decr_ratio ** len(self._pending_updates)
            return max(bound, self._policy.lowest) < 1.0

    def only_powers_of_two(self) -> bool:
        """Whether every scale to come is a power of two: the current one, both ratios and the
        bounds are (no sync: a replayed scale is a power of two exactly when the device's is)."""
        with self._lock:
            p = self._policy
            values = (self._host.scale, p.incr_ratio, p.decr_ratio, p.lowest,
                      p.highest if p.max_loss_scaling else 1.0)
            return all(math.frexp(v)[0] == 0.5 for v in values)

    # -- writes ------------------------------------------------------------------------------

    def record_step(self, flag: FoundInf) -> None:
        """Count the step as skipped if its flag says so (when the flag reaches the host)."""
        with self._lock:
            if not flag.on_device:
                self._skipped += flag.value()
                return
            assert flag.tensor is not None
            self._start_in_place_if_captured()
            if self._in_place:
                assert self._device_skipped is not None
                self._device_skipped.add_(copy_to(flag.tensor, self._device_skipped.device) != 0)
            else:
                self._pending_steps.append(flag)

    def update(self, flag: FoundInf | None) -> None:
        """One step of the policy; ``None`` (no step since the last update) counts as finite."""
        with self._lock:
            if flag is None or not flag.on_device:
                self._replay(block=True)  # a known flag came with a sync: nothing is left in flight
                old = self._host.scale
                self._host = self._advance(self._host, flag is not None and flag.value())
                if self._host.scale != old:
                    self._write_scale()
                self._forget_device_counters()  # the device did not see this update
                return
            assert flag.tensor is not None
            self._start_in_place_if_captured()
            self._device_update(flag.tensor)
            if not self._in_place:
                self._pending_updates.append(flag)

    def reset(
        self,
        *,
        scale: float | None = None,
        policy: LossScalePolicy | None = None,
        counts: tuple[int, int] | None = None,
        skipped: int | None = None,
    ) -> None:
        """Replace parts of the state (setters, checkpoints); the caller validated the values."""
        with self._lock:
            self._replay(block=True)  # updates already run on the device used the old state
            if policy is not None:
                self._policy = policy
            host = self._host
            if scale is not None:
                host = host._replace(scale=round_f32(scale))
            if counts is not None:
                host = host._replace(incr_count=counts[0], decr_count=counts[1])
            self._host = host
            if skipped is not None:
                self._skipped = skipped
            self._write_scale()
            self._forget_device_counters()

    # -- mechanics ---------------------------------------------------------------------------

    def _write_scale(self) -> None:
        if self._in_place:
            self._scale.fill_(self._host.scale)
        else:
            self._scale = torch.full((1,), self._host.scale, dtype=torch.float32, device=self._scale.device)
        self.generation += 1

    def _forget_device_counters(self) -> None:
        """The replica's counters changed without the device: rebuild the device's from it at the
        next device update, or, once written in place, now."""
        if not self._in_place:
            self._device_counters = None
            return
        assert self._device_counters is not None
        for counter, count in zip(self._device_counters, self._host[1:]):
            counter.fill_(min(count, _INT32_MAX))  # exact, read back as such; clamped at the next update
        self._clamp_due = True

    def _device_counts(self) -> tuple[int, int]:
        """The replica's counters as the device holds them. A count past a period lowered by a
        setter fires at the next step either way, so clamping it keeps every decision while letting
        torch's ``==`` test (``_device_update``) fire."""
        p = self._policy
        return (min(self._host.incr_count, p.incr_every_n_steps - 1),
                min(self._host.decr_count, p.decr_every_n_nan_or_inf - 1))

    def _refuse_capture(self, what: str, device: torch.device) -> None:
        """Refuse to make ``what`` on ``device`` during a CUDA graph capture: each replay would make
        it anew."""
        if _devices.capturing(device):
            raise RuntimeError(
                f"GradScaler: {what} would be made during a CUDA graph capture, and so made anew at each "
                "replay: run the same step eagerly before capturing it (torch's recipe warms up on a side stream)"
            )

    def _start_in_place_if_captured(self) -> None:
        """Write the device state in place from now on if a CUDA graph is capturing this step."""
        if self._in_place or not _devices.capturing(self._scale.device):
            return
        if self._device_counters is None or self._device_skipped is None:
            self._refuse_capture("the device's loss-scale counters", self._scale.device)
        self._in_place = True

    def _read_device(self) -> None:
        """Bring the replica to the device's state, written in place (one sync)."""
        assert self._device_counters is not None and self._device_skipped is not None
        with _devices.device_of(self._scale.device):
            parts = (self._scale, *self._device_counters, self._device_skipped)
            scale, incr, decr, skipped = torch.cat([t.double() for t in parts]).tolist()
        self._host = LossScaleState(scale, int(incr), int(decr))
        self._skipped += int(skipped) - self._skipped_read
        self._skipped_read = int(skipped)

    def _device_update(self, found_inf: Tensor) -> None:
        """Run the policy on the device, without reading anything back."""
        p = self._policy
        if self._device_counters is None:
            incr, decr = (torch.full((1,), n, dtype=torch.int32, device=self._scale.device)
                          for n in self._device_counts())
            self._device_counters = (incr, decr)
        if self._device_skipped is None:  # made before any capture, for one to count in
            self._device_skipped = torch.zeros((1,), dtype=torch.int64, device=self._scale.device)
            self._skipped_read = 0
        incr_count, decr_count = self._device_counters
        if self._clamp_due:
            incr_count.clamp_(max=p.incr_every_n_steps - 1)
            decr_count.clamp_(max=p.decr_every_n_nan_or_inf - 1)
            self._clamp_due = False
        found_inf = copy_to(found_inf, self._scale.device)
        self.generation += 1
        if p.decr_every_n_nan_or_inf == 1:
            # With one overflow per decrease Paddle's rule is torch's update kernel, given
            # float32-exact ratios: two launches instead of a dozen small ones. It works in
            # place, so it runs on a copy unless the tensor is written in place (see module doc).
            scale = self._scale if self._in_place else self._scale.clone()
            torch._amp_update_scale_(
                scale, incr_count, found_inf, round_f32(p.incr_ratio), round_f32(p.decr_ratio), p.incr_every_n_steps
            )
            self._scale = scale.clamp_(p.lowest, p.highest)
            return
        state, _ = next_state(LossScaleState(self._scale, incr_count, decr_count), found_inf, p, DEVICE)
        if self._in_place:
            for tensor, value in zip((self._scale, incr_count, decr_count), state):
                tensor.copy_(value)
        else:
            self._scale, self._device_counters = state.scale, (state.incr_count, state.decr_count)

    def _advance(self, state: LossScaleState, found_inf: bool) -> LossScaleState:
        new, decreased = next_state(state, found_inf, self._policy, HOST)
        if decreased:
            logger.info(f"Found inf or nan, current scale is: {state.scale}, "
                        f"decrease to: {state.scale}*{self._policy.decr_ratio}")
        return new

    def _replay(self, block: bool) -> None:
        """Bring the replica up to date with what the device did; ``block`` waits for it (and,
        once the device state is written in place, reads it)."""
        while self._pending_steps and (block or self._pending_steps[0].ready()):
            self._skipped += self._pending_steps.popleft().value()
        while self._pending_updates and (block or self._pending_updates[0].ready()):
            self._host = self._advance(self._host, self._pending_updates.popleft().value())
        if block and self._in_place:
            self._read_device()

    # -- pickling: the replica is the state; the device side is rebuilt on load --------------

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            self._replay(block=True)
            return {"policy": dataclasses.asdict(self._policy), "host": tuple(self._host),
                    "skipped": self._skipped, "device": str(self._scale.device)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._lock = threading.RLock()
        self._policy = LossScalePolicy(**state["policy"])
        self._host = LossScaleState(*state["host"])
        self._skipped = state["skipped"]
        device = torch.device(state["device"])
        if device.type == "cuda" and not torch.cuda.is_available():
            device = torch.device("cpu")
        self._init_transients(device)
