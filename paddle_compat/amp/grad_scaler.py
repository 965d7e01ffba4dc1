"""``AmpScaler`` and ``GradScaler``: Paddle's dynamic loss scaling on torch tensors.

The scale policy lives in ``loss_scale``, the gradient passes in ``unscale``; this module holds
the Paddle-facing API, the per-optimizer state machine and the bookkeeping that keeps host
syncs to the one a skip decision needs.

Where the state lives. The host keeps a replica of the state (scale, ``incr_count``,
``decr_count``) that it advances with the same policy the device would run, fed with the
``found_inf`` flags the step reads anyway. So ``get_scale()``, ``state_dict()`` and the
decrease log never read the device, and the device scale is rewritten only when it changes.
With an optimizer that takes ``grad_scale``/``found_inf`` (torch's fused Adam, AdamW, SGD) the
flag never leaves the device: the device runs the policy, and the flag travels to the host
asynchronously, where the replica catches up without forcing a sync.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import warnings
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

import torch
from torch import Tensor

from . import unscale
from .amp_state import amp_global_state
from .loss_scale import DEVICE, HOST, LossScalePolicy, LossScaleState, check_scale, next_state, round_f32

__all__ = ["AmpScaler", "GradScaler", "OptimizerState"]

logger = logging.getLogger("paddle_compat.amp")

_STATE_DICT_KEYS = (
    "scale",
    "incr_ratio",
    "decr_ratio",
    "incr_every_n_steps",
    "decr_every_n_nan_or_inf",
    "incr_count",
    "decr_count",
    "use_dynamic_loss_scaling",
)


class OptimizerState(Enum):
    INIT = 0
    UNSCALED = 1
    STEPPED = 2


class _Flag:
    """A ``found_inf`` value: known on the host, or a device tensor on its way to the host."""

    __slots__ = ("_value", "_host", "_event", "tensor")

    def __init__(self, value: bool | None = None, tensor: Tensor | None = None) -> None:
        self._value, self._host, self._event, self.tensor = value, None, None, tensor

    @classmethod
    def from_device(cls, tensor: Tensor) -> _Flag:
        flag = cls(tensor=tensor)
        if tensor.device.type == "cuda":
            flag._host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
            flag._host.copy_(tensor, non_blocking=True)
            flag._event = torch.cuda.Event()
            flag._event.record()
        else:  # the host is the device: reading it costs nothing
            flag._value = bool(tensor.item())
        return flag

    @property
    def known(self) -> bool:
        return self.tensor is None

    def ready(self) -> bool:
        return self._event is None or self._event.query()

    def value(self) -> bool:
        if self._value is None:
            self._event.synchronize()
            self._value, self._host, self._event = bool(self._host.item()), None, None
        return self._value


def _check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def _check_optimizer(optimizer: Any) -> None:
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")


class AmpScaler:
    """Paddle's ``paddle.amp.AmpScaler`` (defaults ``2**15``, 1000 steps).

    Differences from Paddle: works on CPU too (Paddle disables its scaler off GPU); has
    ``step``/``update``/``unscale_`` like ``GradScaler`` (Paddle's ``AmpScaler`` only has
    ``minimize``); the safety limits of ``loss_scale``; optional keyword-only
    ``min_loss_scaling``/``max_loss_scaling``; bad arguments raise ``TypeError``/``ValueError``.
    """

    def __init__(
        self,
        enable: bool = True,
        init_loss_scaling: float = 2.0**15,
        incr_ratio: float = 2.0,
        decr_ratio: float = 0.5,
        incr_every_n_steps: int = 1000,
        decr_every_n_nan_or_inf: int = 1,
        use_dynamic_loss_scaling: bool = True,
        *,
        min_loss_scaling: float | None = None,
        max_loss_scaling: float | None = None,
    ) -> None:
        _check_bool("enable", enable)
        _check_bool("use_dynamic_loss_scaling", use_dynamic_loss_scaling)
        init_loss_scaling = check_scale("init_loss_scaling", init_loss_scaling)
        policy = LossScalePolicy(
            incr_ratio, decr_ratio, incr_every_n_steps, decr_every_n_nan_or_inf, min_loss_scaling, max_loss_scaling
        )
        if not policy.lowest <= round_f32(init_loss_scaling) <= policy.highest:
            raise ValueError(
                f"init_loss_scaling ({init_loss_scaling!r}) must lie within "
                f"[min_loss_scaling, max_loss_scaling] = [{policy.lowest!r}, {policy.highest!r}]"
            )
        self._policy = policy
        self._enable = enable
        # A disabled Paddle scaler reports neither dynamic scaling nor its initial scale.
        self._use_dynamic_loss_scaling = use_dynamic_loss_scaling and enable
        self._init_loss_scaling = init_loss_scaling if enable else 1.0
        self._host = LossScaleState(round_f32(init_loss_scaling), 0, 0)
        self._scale: Tensor | None = None  # device copy of self._host.scale, made on first use
        self._device_counters: tuple[Tensor, Tensor] | None = None  # while the device runs the policy
        self._pending_updates: deque[_Flag] = deque()  # updates the device ran, not yet replayed
        self._pending_steps: deque[_Flag] = deque()  # steps whose skip is not yet known here
        self._skipped_steps = 0
        # Paddle keeps one found_inf for the scaler, overwritten by every unscale, and caches
        # the flag of the last step for update(); both quirks decide multi-optimizer results.
        self._found_inf: Tensor | None = None
        self._cache_found_inf: _Flag | None = None
        self._optimizer_states: defaultdict[int, OptimizerState] = defaultdict(lambda: OptimizerState.INIT)

    # -- scaling ---------------------------------------------------------------------------

    def scale(self, var: Tensor) -> Tensor:
        """``var * scale``: float32 with shape ``[1]`` for a 0-d loss, as in Paddle.

        Paddle's dtype policy: a dynamic scaler turns itself off, with a warning, when the dtype
        recorded by the last ``auto_cast`` entered (``"float32"`` before any) is not float16.
        """
        if not isinstance(var, Tensor):
            raise TypeError(
                f"The type of 'var' in {type(self).__name__}.scale() must be torch.Tensor, "
                f"but received {type(var).__name__}."
            )
        amp_dtype = amp_global_state().amp_dtype
        if self._enable and amp_dtype != "float16" and self._use_dynamic_loss_scaling:
            self._enable = False
            self._use_dynamic_loss_scaling = False
            self._init_loss_scaling = 1.0
            warnings.warn(
                f"It is not recommended to use dynamic loss scaling for {amp_dtype}, so GradScaler is disable by default."
            )
        if not self._enable:
            return var
        # torch's promotion of ``var * scale`` is Paddle's: a 0-d loss of any float dtype
        # gives float32 [1]; a float64 loss with dimensions stays float64.
        return var * self._scale_on(var.device)

    def _scale_on(self, device: torch.device) -> Tensor:
        if self._scale is None:
            self._scale = torch.full((1,), self._host.scale, dtype=torch.float32, device=device)
        return self._scale if self._scale.device == device else self._scale.to(device, non_blocking=True)

    # -- unscale, step, update -------------------------------------------------------------

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscale the optimizer's grads in place and record whether any is inf/NaN."""
        _check_optimizer(optimizer)
        if not self._enable:
            return
        state = self._optimizer_states[id(optimizer)]
        if state is OptimizerState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state is OptimizerState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        self._unscale_grads(optimizer, fused=False)
        self._optimizer_states[id(optimizer)] = OptimizerState.UNSCALED

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscale (unless ``unscale_`` ran), then step the optimizer unless inf/NaN was found."""
        _check_optimizer(optimizer)
        if not self._enable:
            return optimizer.step()
        state = self._optimizer_states[id(optimizer)]
        if state is OptimizerState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        self._step_unless_inf(optimizer, state, optimizer.step)
        self._optimizer_states[id(optimizer)] = OptimizerState.STEPPED
        if not self._use_dynamic_loss_scaling:
            self._optimizer_states.clear()

    def update(self) -> None:
        """Move the scale by the flag of the last ``step``; no host sync."""
        if not self._enable or not self._use_dynamic_loss_scaling:
            return
        self._update()
        self._optimizer_states.clear()

    def minimize(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        """``step`` then ``update``: calls ``optimizer.minimize(*args, **kwargs)`` when it has one,
        else ``optimizer.step()``. Returns its result, or ``(None, None)`` as Paddle does when
        there is none (a skipped step, or a torch optimizer).
        """
        _check_optimizer(optimizer)
        minimize = getattr(optimizer, "minimize", None)
        call: Callable[[], Any] = (lambda: minimize(*args, **kwargs)) if callable(minimize) else optimizer.step
        if not self._enable:
            return call()
        # Like Paddle, minimize() neither refuses a STEPPED optimizer nor unscales it again.
        result = self._step_unless_inf(optimizer, self._optimizer_states[id(optimizer)], call)
        if self._use_dynamic_loss_scaling:
            self._update()
        self._optimizer_states.clear()
        return result if callable(minimize) and result is not None else (None, None)

    def _unscale_grads(self, optimizer: torch.optim.Optimizer, fused: bool) -> None:
        """Unscale the grads in place, or, for a fused optimizer whose own division by the scale
        is Paddle's multiply by the reciprocal, only check them; record ``found_inf``."""
        grads = unscale.grads_to_unscale(optimizer)
        device = grads[0].device if grads else self._scale.device if self._scale is not None else torch.device("cpu")
        scale = self._scale_on(device)
        found_inf, inv_scale = torch.zeros_like(scale), torch.reciprocal(scale)
        if grads and fused and self._optimizer_division_is_exact(grads):
            unscale.any_nonfinite(grads, inv_scale, found_inf)  # read only
            optimizer.grad_scale = scale.view(())  # torch's fused optimizers take 0-d tensors
        elif grads:
            unscale.unscale_(grads, inv_scale, found_inf, check_output=self._scale_may_be_below_one())
        self._found_inf = found_inf

    def _step_unless_inf(self, optimizer: torch.optim.Optimizer, state: OptimizerState, call: Callable[[], Any]) -> Any:
        self._replay(block=False)
        fused = getattr(optimizer, "_step_supports_amp_scaling", False)
        if fused:
            return self._fused_step(optimizer, state, call)
        if state is OptimizerState.INIT:
            self.unscale_(optimizer)
        found = bool(self._found_inf.item())  # the one host sync of a step
        self._cache_found_inf = _Flag(value=found)
        self._skipped_steps += found
        return None if found else call()

    def _fused_step(self, optimizer: torch.optim.Optimizer, state: OptimizerState, call: Callable[[], Any]) -> Any:
        """The optimizer skips on the device; no host sync."""
        if state is OptimizerState.INIT:
            self._unscale_grads(optimizer, fused=True)
        optimizer.found_inf = self._found_inf.view(())
        try:
            result = call()
        finally:
            for name in ("grad_scale", "found_inf"):
                if hasattr(optimizer, name):
                    delattr(optimizer, name)
        flag = _Flag.from_device(self._found_inf)
        self._cache_found_inf = flag
        self._pending_steps.append(flag)
        return result

    def _optimizer_division_is_exact(self, grads: list[Tensor]) -> bool:
        """Whether ``g / scale`` equals Paddle's ``T(f32(g) * (1 / scale))`` for every scale to come.

        True when every scale is a power of two (the current one, both ratios and the bounds
        are) and every grad is float32: Paddle rounds unscaled float16/bfloat16 grads back to
        their dtype, which a fused optimizer's division in float32 does not.
        """
        p = self._policy
        values = (self._host.scale, p.incr_ratio, p.decr_ratio, p.lowest, p.highest if p.max_loss_scaling else 1.0)
        return all(math.frexp(v)[0] == 0.5 for v in values) and all(g.dtype == torch.float32 for g in grads)

    def _update(self) -> None:
        flag = self._cache_found_inf  # None (no step yet) counts as finite, as in Paddle
        if flag is None or flag.known:
            self._replay(block=True)  # a known flag came with a sync: nothing is left in flight
            old_scale = self._host.scale
            self._host = self._advance(self._host, flag is not None and flag.value())
            if self._host.scale != old_scale:
                self._write_device_scale()
            self._device_counters = None  # the device did not see this update
            return
        self._device_update(flag.tensor)
        self._pending_updates.append(flag)

    def _device_update(self, found_inf: Tensor) -> None:
        """Run the policy on the device, in place, without reading anything back."""
        p = self._policy
        if self._device_counters is None:
            # A count past a period lowered by a setter fires at the next step either way, so
            # clamping it keeps every decision while letting torch's ``==`` test below fire.
            periods = (p.incr_every_n_steps, p.decr_every_n_nan_or_inf)
            self._device_counters = tuple(
                torch.full((1,), min(n, period - 1), dtype=torch.int32, device=self._scale.device)
                for n, period in zip(self._host[1:], periods)
            )
        incr_count, decr_count = self._device_counters
        if p.decr_every_n_nan_or_inf == 1:
            # With one overflow per decrease Paddle's rule is torch's in-place update kernel,
            # given float32-exact ratios: one launch instead of a dozen small ones.
            torch._amp_update_scale_(
                self._scale, incr_count, found_inf, round_f32(p.incr_ratio), round_f32(p.decr_ratio), p.incr_every_n_steps
            )
            self._scale.clamp_(p.lowest, p.highest)
            return
        state, _ = next_state(LossScaleState(self._scale, incr_count, decr_count), found_inf, p, DEVICE)
        self._scale, self._device_counters = state.scale, (state.incr_count, state.decr_count)

    def _advance(self, state: LossScaleState, found_inf: bool) -> LossScaleState:
        new, decreased = next_state(state, found_inf, self._policy, HOST)
        if decreased:
            logger.info(
                f"Found inf or nan, current scale is: {state.scale}, decrease to: {state.scale}*{self._policy.decr_ratio}"
            )
        return new

    def _replay(self, block: bool) -> None:
        """Bring the host replica up to date with what the device did; ``block`` waits for it."""
        while self._pending_steps and (block or self._pending_steps[0].ready()):
            self._skipped_steps += self._pending_steps.popleft().value()
        while self._pending_updates and (block or self._pending_updates[0].ready()):
            self._host = self._advance(self._host, self._pending_updates.popleft().value())

    def _write_device_scale(self) -> None:
        if self._scale is not None:
            self._scale = torch.full((1,), self._host.scale, dtype=torch.float32, device=self._scale.device)

    def _scale_may_be_below_one(self) -> bool:
        # A lower bound on the device scale: each update not yet replayed may have decreased it.
        bound = self._host.scale * self._policy.decr_ratio ** len(self._pending_updates)
        return max(bound, self._policy.lowest) < 1.0

    # -- queries and settings --------------------------------------------------------------

    def is_enable(self) -> bool:
        return self._enable

    def is_use_dynamic_loss_scaling(self) -> bool:
        return self._use_dynamic_loss_scaling

    def get_scale(self) -> float:
        """The current scale; 0.0 when disabled, as in newer Paddle (torch returns 1.0)."""
        if not self._enable:
            return 0.0
        self._replay(block=True)
        return self._host.scale

    def get_skipped_steps(self) -> int:
        """How many optimizer steps were skipped for inf/NaN so far."""
        self._replay(block=True)
        return self._skipped_steps

    def get_init_loss_scaling(self) -> float:
        return self._init_loss_scaling

    def set_init_loss_scaling(self, new_init_loss_scaling: float) -> None:
        """Set the initial scale and restart the current scale from it (counters kept)."""
        value = check_scale("new_init_loss_scaling", new_init_loss_scaling)
        self._replay(block=True)
        self._init_loss_scaling = value
        self._host = self._host._replace(scale=round_f32(value))
        self._write_device_scale()

    def get_incr_ratio(self) -> float:
        return self._policy.incr_ratio

    def set_incr_ratio(self, new_incr_ratio: float) -> None:
        self._set_policy(incr_ratio=new_incr_ratio)

    def get_decr_ratio(self) -> float:
        return self._policy.decr_ratio

    def set_decr_ratio(self, new_decr_ratio: float) -> None:
        self._set_policy(decr_ratio=new_decr_ratio)

    def get_incr_every_n_steps(self) -> int:
        return self._policy.incr_every_n_steps

    def set_incr_every_n_steps(self, new_incr_every_n_steps: int) -> None:
        self._set_policy(incr_every_n_steps=new_incr_every_n_steps)

    def get_decr_every_n_nan_or_inf(self) -> int:
        return self._policy.decr_every_n_nan_or_inf

    def set_decr_every_n_nan_or_inf(self, new_decr_every_n_nan_or_inf: int) -> None:
        self._set_policy(decr_every_n_nan_or_inf=new_decr_every_n_nan_or_inf)

    def _set_policy(self, **change: Any) -> None:
        policy = dataclasses.replace(self._policy, **change)  # validates before anything changes
        self._replay(block=True)  # updates already run on the device used the old policy
        self._policy = policy
        self._device_counters = None  # rebuilt from the replica, clamped to the new periods

    # -- checkpoints -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Paddle's 8 keys (``{}`` when disabled); ``scale`` is a 1-element float32 CPU tensor."""
        if not self._enable:
            return {}
        self._replay(block=True)
        p = self._policy
        return {
            "scale": torch.tensor([self._host.scale], dtype=torch.float32),
            "incr_ratio": p.incr_ratio,
            "decr_ratio": p.decr_ratio,
            "incr_every_n_steps": p.incr_every_n_steps,
            "decr_every_n_nan_or_inf": p.decr_every_n_nan_or_inf,
            "incr_count": self._host.incr_count,
            "decr_count": self._host.decr_count,
            "use_dynamic_loss_scaling": self._use_dynamic_loss_scaling,
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Resume from ``state_dict()``, ours or Paddle's (``scale`` as a numpy array).

        Everything is checked before anything changes.
        """
        if not self._enable:
            return
        if len(state_dict) == 0:
            raise RuntimeError(
                "The input state dict is empty, possibly because it was saved from a disabled instance of GradScaler."
            )
        missing = [k for k in _STATE_DICT_KEYS if k not in state_dict]
        if missing:
            raise KeyError(f"state_dict is missing {', '.join(map(repr, missing))}")
        d = state_dict
        scale = check_scale("state_dict['scale']", float(torch.as_tensor(d["scale"]).reshape(-1)[0]))
        policy = dataclasses.replace(
            self._policy,
            incr_ratio=d["incr_ratio"],
            decr_ratio=d["decr_ratio"],
            incr_every_n_steps=d["incr_every_n_steps"],
            decr_every_n_nan_or_inf=d["decr_every_n_nan_or_inf"],
        )
        counts = [_count(f"state_dict[{k!r}]", d[k]) for k in ("incr_count", "decr_count")]
        dynamic = _check_bool("state_dict['use_dynamic_loss_scaling']", _plain(d["use_dynamic_loss_scaling"]))
        self._replay(block=True)
        self._policy = policy
        self._init_loss_scaling = scale
        self._host = LossScaleState(round_f32(scale), *counts)
        self._use_dynamic_loss_scaling = dynamic
        self._write_device_scale()
        self._device_counters = None


def _plain(value: Any) -> Any:
    """A numpy scalar or 1-element tensor (as Paddle-saved dicts hold) as a Python number."""
    if isinstance(value, Tensor):
        return value.item() if value.numel() == 1 else value
    return value.item() if getattr(value, "size", None) == 1 and hasattr(value, "item") else value


def _count(name: str, value: Any) -> int:
    value = _plain(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return value


class GradScaler(AmpScaler):
    """Paddle's ``paddle.amp.GradScaler``: ``AmpScaler`` with Paddle 3.x's defaults
    (``2**16``, 2000 steps). Paddle writes every method twice; here they are inherited.
    """

    def __init__(
        self,
        enable: bool = True,
        init_loss_scaling: float = 2.0**16,
        incr_ratio: float = 2.0,
        decr_ratio: float = 0.5,
        incr_every_n_steps: int = 2000,
        decr_every_n_nan_or_inf: int = 1,
        use_dynamic_loss_scaling: bool = True,
        *,
        min_loss_scaling: float | None = None,
        max_loss_scaling: float | None = None,
    ) -> None:
        super().__init__(
            enable,
            init_loss_scaling,
            incr_ratio,
            decr_ratio,
            incr_every_n_steps,
            decr_every_n_nan_or_inf,
            use_dynamic_loss_scaling,
            min_loss_scaling=min_loss_scaling,
            max_loss_scaling=max_loss_scaling,
        )
