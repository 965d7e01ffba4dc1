"""``AmpScaler`` and ``GradScaler``: Paddle's dynamic loss scaling on torch tensors.

The scale policy lives in ``loss_scale``, its state in ``scale_tracker``, the gradient passes in
``unscale``; this module holds the Paddle-facing API and the per-optimizer state machine.

Threads. Paddle keeps one ``found_inf``, one cached step flag and one optimizer-state table per
scaler. Here each thread has its own (``_StepState``), so threads sharing a scaler each skip on
their own gradients, and unscale with the scale their own ``scale()`` used. In one thread this is
exactly Paddle's behaviour, quirks included (several optimizers share one flag; the last
``step`` before ``update`` decides the update).

The examples take as given a ``model`` and its input ``x``, an ``optimizer`` of
``paddle_compat.optimizer`` over it, a ``loss`` computed under ``auto_cast()`` and a ``scaler``
(``tests/test_docstring_examples.py`` runs them so).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import threading
import warnings
from collections.abc import Mapping
from enum import Enum
from typing import Any

import torch
from torch import Tensor

from .. import _checks
from .._devices import copy_to
from .._stacklevel import user_stacklevel
from . import scaler_args, unscale
from .amp_state import amp_global_state
from .compile_boundary import calls_user_code, never_traced
from .loss_scale import LossScalePolicy, as_number, check_count, check_scale, round_f32
from .scale_tracker import FoundInf, ScaleTracker

__all__ = ["AmpScaler", "GradScaler", "OptimizerState"]

# Paddle's scaler state_dict() keys, in its order.
STATE_DICT_KEYS = (
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
    """Where one optimizer is in this thread's iteration, as Paddle tracks it: ``INIT``, then
    ``UNSCALED`` after ``unscale_``, ``STEPPED`` after ``step``; ``update`` starts over."""

    INIT = 0
    UNSCALED = 1
    STEPPED = 2


class _Run(Enum):
    """How ``step``/``minimize`` call the optimizer, as decided before it runs."""

    PASS = 0  # a disabled scaler: just call it
    SKIP = 1  # inf/NaN found: do not call it
    CALL = 2  # call it on the unscaled grads
    FUSED = 3  # call it with ``grad_scale``/``found_inf`` set: it unscales and skips on the device


class _StepState(threading.local):
    """What the current iteration of one thread has done (see the module doc)."""

    def __init__(self) -> None:
        self.optimizer_states: dict[int, OptimizerState] = {}
        self.found_inf: Tensor | None = None  # float32 [1], 0 or 1, from the last unscale
        self.cache_found_inf: FoundInf | None = None  # the flag of the last step
        # The scale this thread's scale() used, and the tracker's generation then.
        self.scaled_with: tuple[int, Tensor] | None = None


def _check_optimizer(optimizer: Any) -> None:
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")


def _check_step_inputs(optimizer: Any) -> None:
    """What our optimizers' step would refuse (per-parameter rates), refused before the scaler
    unscales a gradient or moves its state."""
    check = getattr(optimizer, "_check_param_rates", None)
    if callable(check):
        check()


def _check_within(name: str, value: float, policy: LossScalePolicy) -> None:
    if not policy.lowest <= round_f32(value) <= policy.highest:
        raise ValueError(
            f"{name} ({value!r}) must lie within [min_loss_scaling, max_loss_scaling] = "
            f"[{policy.lowest!r}, {policy.highest!r}]"
        )


class AmpScaler:
    """Paddle's ``paddle.amp.AmpScaler``: dynamic loss scaling (defaults ``2**15``, 1000 steps).

    Multiply the loss by the scale (``scale``), then let ``minimize`` (or ``step`` + ``update``)
    unscale the gradients, skip the step if any is inf/NaN, and move the scale.

    Args:
        enable: scale at all; a disabled scaler passes everything through.
        init_loss_scaling: the initial scale.
        incr_ratio: the factor (> 1) applied after ``incr_every_n_steps`` finite steps in a row.
        decr_ratio: the factor (in (0, 1)) applied after ``decr_every_n_nan_or_inf`` overflows
            in a row.
        incr_every_n_steps: finite steps in a row before the scale grows.
        decr_every_n_nan_or_inf: overflowing steps in a row before the scale shrinks.
        use_dynamic_loss_scaling: ``False`` keeps the scale fixed (inf/NaN steps still skip).
        min_loss_scaling, max_loss_scaling: optional bounds on the scale (ours; keyword only).
        process_group: a ``torch.distributed`` process group (ours; keyword only): each step's
            inf/NaN flag is the MAX over its ranks, so they all skip the same steps and hold the
            same scale. ``None``: no collective (enough when the grads are already identical
            on every rank, as under DDP). ``paddle_compat.distributed.fleet.distributed_scaler``
            sets it the way Paddle's fleet does.
        defaults: ``"2.x"`` gives Paddle 2.x's defaults to the arguments not given (ours;
            keyword only; see ``GradScaler``).

    Example::

        >>> scaler = AmpScaler(init_loss_scaling=1024)
        >>> with auto_cast():
        ...     loss = model(x).mean()
        >>> scaled = scaler.scale(loss)
        >>> scaled.backward()
        >>> _, params_grads = scaler.minimize(optimizer, scaled)

    Differences from Paddle: works on CPU too (Paddle disables its scaler off GPU); has
    ``step``/``update``/``unscale_`` like ``GradScaler``; the safety limits of ``loss_scale``;
    bad arguments raise ``TypeError``/``ValueError``; per-thread step state (module doc).
    """

    _torch_dialect = False  # Paddle's AmpScaler takes Paddle's names only
    _family = "AmpScaler"  # whose defaults
    # Set by paddle_compat.integrations.accelerate.use_grad_scaler: Accelerate's clips unscale first.
    _clips_unscale_first = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Arguments: see the class; all are checked before the scaler is built."""
        options, aliases = scaler_args.resolve(type(self).__name__, self._family, args, kwargs, self._torch_dialect)
        try:
            self._configure(**options)
        except (TypeError, ValueError) as error:
            raise scaler_args.renamed(error, aliases) from None

    def _configure(
        self,
        enable: bool,
        init_loss_scaling: float,
        incr_ratio: float,
        decr_ratio: float,
        incr_every_n_steps: int,
        decr_every_n_nan_or_inf: int,
        use_dynamic_loss_scaling: bool,
        min_loss_scaling: float | None = None,
        max_loss_scaling: float | None = None,
        process_group: Any = None,
    ) -> None:
        _checks.flag("enable", enable)
        _checks.flag("use_dynamic_loss_scaling", use_dynamic_loss_scaling)
        init_loss_scaling = check_scale("init_loss_scaling", init_loss_scaling)
        policy = LossScalePolicy(
            incr_ratio=incr_ratio,
            decr_ratio=decr_ratio,
            incr_every_n_steps=incr_every_n_steps,
            decr_every_n_nan_or_inf=decr_every_n_nan_or_inf,
            min_loss_scaling=min_loss_scaling,
            max_loss_scaling=max_loss_scaling,
        )
        _check_within("init_loss_scaling", init_loss_scaling, policy)
        self._enable = enable
        self._constructed_enabled = enable  # Paddle makes no scale tensor for a disabled scaler
        # A disabled Paddle scaler reports neither dynamic scaling nor its initial scale.
        self._use_dynamic_loss_scaling = use_dynamic_loss_scaling and enable
        self._init_loss_scaling = init_loss_scaling if enable else 1.0
        self._tracker = ScaleTracker(policy, init_loss_scaling)
        self._step_state = _StepState()
        self._process_group = None
        self.process_group = process_group

    # -- scaling ---------------------------------------------------------------------------

    @never_traced
    def scale(self, var: Tensor) -> Tensor:
        """``var * scale``: float32 with shape ``[1]`` for a 0-d loss, as in Paddle.

        Paddle's dtype policy: a dynamic scaler turns itself off for good, with a warning, when
        the dtype recorded by the last ``auto_cast`` entered in this thread (``"float32"`` before
        any; Paddle keeps one per process) is not float16: no more scaling, no skipped steps,
        ``state_dict()`` is ``{}``.

        Args:
            var: the loss (any float dtype and shape).

        Example::

            >>> scaled = scaler.scale(loss)
            >>> scaled.backward()
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
            stacklevel = user_stacklevel()
            warnings.warn(
                f"It is not recommended to use dynamic loss scaling for {amp_dtype}, "
                "so GradScaler is disable by default.",
                stacklevel=stacklevel,
            )
            if amp_dtype == "float32":  # Paddle's text hides how much this switches off
                warnings.warn(
                    "GradScaler.scale() ran while the AMP dtype was float32, e.g. before any "
                    "auto_cast(dtype='float16') was entered in this thread: as in Paddle, the scaler is now "
                    "disabled for good: no loss is scaled, no step is ever skipped and state_dict() is {}.",
                    stacklevel=stacklevel,
                )
        if not self._enable:
            return var
        # torch's promotion of ``var * scale`` is Paddle's: a 0-d loss of any float dtype
        # gives float32 [1]; a float64 loss with dimensions stays float64.
        # The generation is read first: if another thread moves the scale in between, the
        # mismatch makes unscale use this very tensor, never a newer scale under an old tensor.
        generation = self._tracker.generation
        scale = self._tracker.claim(var.device)
        self._step_state.scaled_with = (generation, scale)
        return var * scale

    # -- unscale, step, update -------------------------------------------------------------

    @never_traced
    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Unscale the optimizer's grads in place and record whether any is inf/NaN.

        Args:
            optimizer: the optimizer whose grads (``main_grad`` where ``decorate`` made one)
                are unscaled, e.g. before clipping them.

        Example::

            >>> scaler.scale(loss).backward()
            >>> scaler.unscale_(optimizer)
            >>> torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            tensor(...)
            >>> scaler.step(optimizer)
            >>> scaler.update()
        """
        _check_optimizer(optimizer)
        if not self._enable:
            return
        states = self._step_state.optimizer_states
        state = states.get(id(optimizer), OptimizerState.INIT)
        if state is OptimizerState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state is OptimizerState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        self._unscale(optimizer)
        states[id(optimizer)] = OptimizerState.UNSCALED

    @calls_user_code
    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        """Unscale (unless ``unscale_`` ran), then ``optimizer.step(*args, **kwargs)`` unless a
        grad is inf/NaN. Returns the step's result, ``None`` when skipped.

        Args:
            optimizer: the optimizer to step.
            *args, **kwargs: passed to ``optimizer.step`` (a closure is refused, as torch
                does: its gradients would come back scaled).

        Example::

            >>> scaler.scale(loss).backward()
            >>> scaler.step(optimizer)
            >>> scaler.update()
        """
        # torch.compile traces none of this frame but compiles optimizer.step as it does under
        # torch's scaler; our own work runs in never-traced calls (see compile_boundary).
        run = self._before_step(optimizer, args, kwargs)
        try:
            result = _skipped_step(optimizer) if run is _Run.SKIP else optimizer.step(*args, **kwargs)
        except BaseException:
            self._abandon_call(optimizer, run)
            raise
        self._after_step(optimizer, run)
        return result

    @never_traced
    def _before_step(self, optimizer: torch.optim.Optimizer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Run:
        _check_optimizer(optimizer)
        if not self._enable:
            return _Run.PASS
        if "closure" in kwargs or (args and callable(args[0])):
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        state = self._step_state.optimizer_states.get(id(optimizer), OptimizerState.INIT)
        if state is OptimizerState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        _check_step_inputs(optimizer)
        return self._decide_step(optimizer, state)

    @never_traced
    def _after_step(self, optimizer: torch.optim.Optimizer, run: _Run) -> None:
        if run is _Run.PASS:
            return
        self._end_call(optimizer, run)
        states = self._step_state.optimizer_states
        states[id(optimizer)] = OptimizerState.STEPPED
        if not self._use_dynamic_loss_scaling:
            states.clear()

    @never_traced
    def update(self, new_scale: float | Tensor | None = None) -> None:
        """Move the scale by the flag of the last ``step``; no host sync.

        Args:
            new_scale: set the scale to this instead (a float or 1-element tensor), and restart
                both counters, as newer Paddle does (torch keeps its growth count).

        Example::

            >>> scaler.step(optimizer)
            >>> scaler.update()
        """
        if not self._enable:
            return
        step = self._step_state
        if new_scale is not None:
            scale = check_scale("new_scale", _one_number("new_scale", new_scale))
            _check_within("new_scale", scale, self._tracker.policy)
            self._tracker.reset(scale=scale, counts=(0, 0))
        elif not self._use_dynamic_loss_scaling:
            return
        else:
            self._tracker.update(step.cache_found_inf)
        step.optimizer_states.clear()
        step.scaled_with = None

    @calls_user_code
    def minimize(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        """``step`` then ``update`` in one call, as Paddle's ``minimize``.

        Calls ``optimizer.minimize(*args, **kwargs)`` when the optimizer has one (those of
        ``paddle_compat.optimizer`` do), else ``optimizer.step()``. Returns its result, or
        ``(None, None)`` as Paddle does when there is none (a torch optimizer). On a skipped step
        the optimizer is not called (unless built with ``fused=True``), and ours still return
        Paddle's ``(None, params_grads)``. A step that ran counts for torch's LR schedulers as an
        ``optimizer.step()`` call.

        Args:
            optimizer: the optimizer to step.
            *args, **kwargs: passed to ``optimizer.minimize`` (usually the scaled loss).

        Example::

            >>> scaled = scaler.scale(loss)
            >>> scaled.backward()
            >>> _, params_grads = scaler.minimize(optimizer, scaled)
            >>> optimizer.clear_grad()
        """
        # Traced like step(): the optimizer's code is compiled as usual, ours never is.
        run = self._before_minimize(optimizer)
        minimize = getattr(optimizer, "minimize", None)
        try:
            if run is _Run.SKIP:
                result = _skipped_minimize(optimizer, args, kwargs)
            else:
                result = minimize(*args, **kwargs) if callable(minimize) else optimizer.step()
        except BaseException:
            self._abandon_call(optimizer, run)
            raise
        self._after_minimize(optimizer, run)
        return result if callable(minimize) and result is not None else (None, None)

    @never_traced
    def _before_minimize(self, optimizer: torch.optim.Optimizer) -> _Run:
        _check_optimizer(optimizer)
        if not self._enable:
            return _Run.PASS
        _check_step_inputs(optimizer)
        # Like Paddle, minimize() neither refuses a STEPPED optimizer nor unscales it again.
        return self._decide_step(optimizer, self._step_state.optimizer_states.get(id(optimizer), OptimizerState.INIT))

    @never_traced
    def _after_minimize(self, optimizer: torch.optim.Optimizer, run: _Run) -> None:
        if run is not _Run.SKIP:
            # minimize() bypasses the optimizer.step wrapper torch's LR schedulers watch.
            optimizer._opt_called = True  # type: ignore[attr-defined]  # torch's private flag
        if run is _Run.PASS:
            return
        self._end_call(optimizer, run)
        step = self._step_state
        if self._use_dynamic_loss_scaling:
            self._tracker.update(step.cache_found_inf)
            step.scaled_with = None
        step.optimizer_states.clear()

    def _unscale(self, optimizer: torch.optim.Optimizer) -> None:
        """Paddle's hook: unscale the grads in place and record ``_found_inf``.

        ``unscale_``, ``step`` and ``minimize`` call it (except on the fused path), so code that
        replaces it on an instance, as Paddle's fleet wrappers do, keeps working: a replacement
        that sets ``self._found_inf`` decides the skip.
        """
        self._unscale_grads(optimizer, fused=False)

    def _unscale_grads(self, optimizer: torch.optim.Optimizer, fused: bool) -> None:
        """Unscale the grads in place, or, for a fused optimizer that unscales as Paddle does,
        only check them; record ``found_inf`` for this thread."""
        grads = unscale.grads_to_unscale(optimizer)
        step = self._step_state
        tracker = self._tracker
        device = grads[0].device if grads else tracker.tensor().device
        scale, own = tracker.claim(device), True
        if step.scaled_with is not None and step.scaled_with[0] != tracker.generation:
            # Another thread moved the scale since this one scaled its loss: unscale with the
            # scale that was used (the tracker never writes a scale tensor in place).
            scale, own = copy_to(step.scaled_with[1], device), False
        found_inf, inv_scale = torch.zeros_like(scale), tracker.reciprocal(scale)
        if grads and fused and own and self._optimizer_unscales_exactly(optimizer, grads):
            unscale.any_nonfinite(grads, inv_scale, found_inf)  # read only
            # 0-d, as torch's fused optimizers take it
            optimizer.grad_scale = scale.view(())  # type: ignore[attr-defined]
        elif grads:
            below_one = tracker.may_be_below_one() if own else tracker.policy.lowest < 1.0
            unscale.unscale_(grads, inv_scale, found_inf, check_output=below_one)
        if self._process_group is not None:
            unscale.all_reduce_max(found_inf, self._process_group)
        step.found_inf = found_inf

    def _optimizer_unscales_exactly(self, optimizer: torch.optim.Optimizer, grads: list[Tensor]) -> bool:
        """Whether the optimizer's own unscaling gives Paddle's ``T(f32(g) * (1 / scale))``.

        Ours (``_unscales_like_paddle``) compute exactly that. torch's fused optimizers divide
        by the scale: the same bits when every scale is a power of two and every grad is
        float32 (Paddle rounds unscaled float16/bfloat16 grads back to their dtype).
        """
        if getattr(optimizer, "_unscales_like_paddle", False):
            return True
        return self._tracker.only_powers_of_two() and all(g.dtype == torch.float32 for g in grads)

    def _decide_step(self, optimizer: torch.optim.Optimizer, state: OptimizerState) -> _Run:
        """Before the optimizer runs: unscale (unless ``unscale_`` did) and decide how to call it.

        A fused optimizer (``_step_supports_amp_scaling``) is always called and skips on the
        device, with no host sync; otherwise the flag is read here, the one sync of a step.
        One whose ``step`` takes ``grad_scaler=`` (torch's older protocol) gets Paddle's treatment,
        not torch's (see ``_takes_grad_scaler``)."""
        step = self._step_state
        fused = getattr(optimizer, "_step_supports_amp_scaling", False) and not _takes_grad_scaler(optimizer)
        if _step_watched(optimizer):
            self._warn_accelerate(optimizer, state, fused)
        if fused:
            if state is OptimizerState.INIT:
                self._unscale_grads(optimizer, fused=True)
            assert step.found_inf is not None
            optimizer.found_inf = step.found_inf.view(())  # type: ignore[attr-defined]  # torch's fused-step input
            return _Run.FUSED
        if state is OptimizerState.INIT:
            # unscale_'s checks already passed for this state; call Paddle's hook, as its step does.
            self._unscale(optimizer)
            step.optimizer_states[id(optimizer)] = OptimizerState.UNSCALED
        assert step.found_inf is not None
        flag = FoundInf.known(bool(step.found_inf.item()))  # the one host sync of a step
        self._record_step(flag)
        return _Run.SKIP if flag.value() else _Run.CALL

    def _warn_accelerate(self, optimizer: torch.optim.Optimizer, state: OptimizerState, fused: bool) -> None:
        """Warn where Accelerate (and so Hugging Face's Trainer) steps this scaler in a way that
        goes wrong without a word: a fused optimizer (stepped on the fused path), whose skips it
        cannot see, or gradients not yet unscaled, which its clips, if called (unless
        ``use_grad_scaler`` set the scaler), clipped scaled."""
        name = type(optimizer).__name__
        if fused:
            message = (
                f"{name} is fused (it skips inf/NaN steps itself), so the scaler calls its step() on skipped steps "
                "too: Accelerate's optimizer_step_was_skipped, its AcceleratedScheduler and Hugging Face's Trainer "
                "see no skipped step and advance the LR schedule regardless. Build the optimizer without fused=True, "
                "or ask the scaler: last_step_skipped()."
            )
        elif state is OptimizerState.INIT and not self._clips_unscale_first:
            message = (
                f"Accelerate steps {name} on gradients nobody unscaled before: its clip_grad_norm_ and "
                "clip_grad_value_ (Hugging Face's Trainer calls them at max_grad_norm > 0) do not unscale a scaler "
                "they did not make, so if they ran, they clipped the gradients still scaled. Hand the scaler over with "
                "paddle_compat.integrations.accelerate.use_grad_scaler(accelerator, scaler), or call "
                "scaler.unscale_(optimizer) before clipping."
            )
        else:
            return
        warnings.warn(message, stacklevel=user_stacklevel())

    def _record_step(self, flag: FoundInf) -> None:
        """Record a step's flag: for ``update()`` and ``last_step_skipped()``, and the skip in
        the count. Also apex's ``scale_loss`` shim calls it, which decides its steps itself."""
        self._step_state.cache_found_inf = flag
        self._tracker.record_step(flag)

    def _end_call(self, optimizer: torch.optim.Optimizer, run: _Run) -> None:
        """After the optimizer ran: a fused one gives its inputs back, and its flag, which
        reaches the host without a sync, is recorded."""
        if run is not _Run.FUSED:
            return
        _drop_fused_inputs(optimizer)
        found_inf = self._step_state.found_inf
        assert found_inf is not None  # set by _decide_step
        self._record_step(FoundInf.in_flight(found_inf))

    @never_traced
    def _abandon_call(self, optimizer: torch.optim.Optimizer, run: _Run) -> None:
        """The optimizer raised: nothing is recorded, a fused one gives its inputs back."""
        if run is _Run.FUSED:
            _drop_fused_inputs(optimizer)

    # -- queries and settings --------------------------------------------------------------

    def is_enable(self) -> bool:
        """Whether the scaler scales (Paddle's name). ``scale()`` turns it off for good under a
        non-float16 AMP dtype (see ``scale``).

        Example::

            >>> GradScaler(enable=False).is_enable()
            False
        """
        return self._enable

    def is_use_dynamic_loss_scaling(self) -> bool:
        """Whether the scale moves (Paddle's name); ``False`` for a disabled scaler, as in Paddle.

        Example::

            >>> GradScaler(use_dynamic_loss_scaling=False).is_use_dynamic_loss_scaling()
            False
        """
        return self._use_dynamic_loss_scaling

    @never_traced
    def get_scale(self) -> float:
        """The current scale; 0.0 when disabled, as in newer Paddle (torch returns 1.0).

        Reads nothing from the device, except on the fused path when flags are still in
        flight (it then waits for them).

        Example::

            >>> GradScaler(init_loss_scaling=1024).get_scale()
            1024.0
        """
        if not self._enable:
            return 0.0
        return self._tracker.state().scale

    @never_traced
    def get_skipped_steps(self) -> int:
        """How many optimizer steps were skipped for inf/NaN so far (ours; kept by ``state_dict``).

        Example::

            >>> print(f"{scaler.get_skipped_steps()} of {step + 1} steps skipped")
            0 of 10 steps skipped
        """
        return self._tracker.skipped_steps()

    @never_traced
    def last_step_skipped(self) -> bool | None:
        """Whether this thread's last ``step``/``minimize`` was skipped; ``None`` before any.

        Always ``False`` on a disabled scaler. On the fused path it waits for the step's flag
        (a host sync) if it is still in flight.

        Example::

            >>> scaled = scaler.scale(loss)
            >>> scaled.backward()
            >>> _, params_grads = scaler.minimize(optimizer, scaled)
            >>> if not scaler.last_step_skipped():
            ...     lr_scheduler.step()
        """
        if not self._enable:
            return False
        flag = self._step_state.cache_found_inf
        return None if flag is None else flag.value()

    def get_init_loss_scaling(self) -> float:
        """The initial scale (the last one set by ``set_init_loss_scaling`` or a checkpoint);
        1.0 for a disabled scaler, as in Paddle.

        Example::

            >>> GradScaler(init_loss_scaling=1024).get_init_loss_scaling()
            1024.0
        """
        return self._init_loss_scaling

    @never_traced
    def set_init_loss_scaling(self, new_init_loss_scaling: float) -> None:
        """Set the initial scale and restart the current scale from it (counters kept).

        Args:
            new_init_loss_scaling: a positive float within the scaler's bounds.

        Example::

            >>> scaler.set_init_loss_scaling(2.0**10)
            >>> scaler.get_scale()
            1024.0
        """
        value = check_scale("new_init_loss_scaling", new_init_loss_scaling)
        _check_within("new_init_loss_scaling", value, self._tracker.policy)
        self._tracker.reset(scale=value)
        self._init_loss_scaling = value
        self._step_state.scaled_with = None  # Paddle unscales with the new scale

    def get_incr_ratio(self) -> float:
        """The factor the scale grows by after ``incr_every_n_steps`` finite steps in a row.

        Example::

            >>> GradScaler().get_incr_ratio()
            2.0
        """
        return self._tracker.policy.incr_ratio

    def set_incr_ratio(self, new_incr_ratio: float) -> None:
        """Set the growth factor; the counters are kept.

        Args:
            new_incr_ratio: a float > 1, finite in float32.

        Example::

            >>> scaler.set_incr_ratio(4.0)
        """
        self._set_policy(incr_ratio=new_incr_ratio)

    def get_decr_ratio(self) -> float:
        """The factor the scale shrinks by after ``decr_every_n_nan_or_inf`` overflows in a row.

        Example::

            >>> GradScaler().get_decr_ratio()
            0.5
        """
        return self._tracker.policy.decr_ratio

    def set_decr_ratio(self, new_decr_ratio: float) -> None:
        """Set the back-off factor; the counters are kept.

        Args:
            new_decr_ratio: a float in (0, 1) that stays below 1 in float32.

        Example::

            >>> scaler.set_decr_ratio(0.25)
        """
        self._set_policy(decr_ratio=new_decr_ratio)

    def get_incr_every_n_steps(self) -> int:
        """How many finite steps in a row make the scale grow.

        Example::

            >>> GradScaler().get_incr_every_n_steps()
            2000
        """
        return self._tracker.policy.incr_every_n_steps

    def set_incr_every_n_steps(self, new_incr_every_n_steps: int) -> None:
        """Set the growth period; a running count already past it fires at the next step.

        Args:
            new_incr_every_n_steps: a positive int.

        Example::

            >>> scaler.set_incr_every_n_steps(500)
        """
        self._set_policy(incr_every_n_steps=new_incr_every_n_steps)

    def get_decr_every_n_nan_or_inf(self) -> int:
        """How many overflowing steps in a row make the scale shrink.

        Example::

            >>> GradScaler().get_decr_every_n_nan_or_inf()
            1
        """
        return self._tracker.policy.decr_every_n_nan_or_inf

    def set_decr_every_n_nan_or_inf(self, new_decr_every_n_nan_or_inf: int) -> None:
        """Set the back-off period; a running count already past it fires at the next overflow.

        Args:
            new_decr_every_n_nan_or_inf: a positive int.

        Example::

            >>> scaler.set_decr_every_n_nan_or_inf(2)
        """
        self._set_policy(decr_every_n_nan_or_inf=new_decr_every_n_nan_or_inf)

    @never_traced
    def _set_policy(self, **change: Any) -> None:
        policy = dataclasses.replace(self._tracker.policy, **change)  # validates before anything changes
        self._tracker.reset(policy=policy)

    @property
    def process_group(self) -> Any:
        """The ``torch.distributed`` process group whose ranks agree on each step's skip, or ``None``."""
        return self._process_group

    @process_group.setter
    def process_group(self, group: Any) -> None:
        if group is not None:
            import torch.distributed as dist  # only distributed runs pay for the import

            if not (dist.is_available() and isinstance(group, dist.ProcessGroup)):
                raise TypeError(
                    f"process_group must be a torch.distributed ProcessGroup or None, got {type(group).__name__}"
                )
        self._process_group = group

    # -- Paddle's private attributes, as Paddle code reads them ------------------------------
    # Trainers read these (PaddleNLP steps its LR scheduler on ``not scaler._cache_found_inf``
    # and logs ``scaler._scale``). Each is a view of the state's one owner; setting one goes
    # through the same checks as the public setters.

    @property
    def _scale(self) -> Tensor | None:
        """The current scale, a float32 ``[1]`` tensor (``None`` if constructed disabled)."""
        return self._tracker.tensor() if self._constructed_enabled else None

    @_scale.setter
    def _scale(self, value: Any) -> None:
        scale = check_scale("_scale", _one_number("_scale", value))
        _check_within("_scale", scale, self._tracker.policy)
        self._tracker.reset(scale=scale)
        self._step_state.scaled_with = None

    @property
    def _found_inf(self) -> Tensor:
        """This thread's last unscale flag as Paddle holds it: a bool ``[1]`` tensor."""
        found = self._step_state.found_inf
        return torch.zeros(1, dtype=torch.bool) if found is None else found != 0

    @_found_inf.setter
    def _found_inf(self, value: Any) -> None:
        try:
            if isinstance(value, (str, bytes)):
                raise TypeError
            flag = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError):
            kind = type(value).__name__
            raise TypeError(f"_found_inf should be a bool or a bool tensor, but received {kind}") from None
        if flag.numel() != 1:
            raise ValueError(f"_found_inf must hold exactly one value, got {flag.numel()}")
        self._step_state.found_inf = (flag.reshape(1) != 0).to(torch.float32)

    @property
    def _cache_found_inf(self) -> bool | None:
        """Whether this thread's last step found inf/NaN (``None`` before any step), a bool as
        in Paddle after a step. On the fused path reading it waits for the flag (a sync)."""
        flag = self._step_state.cache_found_inf
        return None if flag is None else flag.value()

    @_cache_found_inf.setter
    def _cache_found_inf(self, value: Any) -> None:
        if isinstance(value, (str, bytes)):  # bool("no") is True
            raise TypeError(f"_cache_found_inf should be a bool or None, but received {type(value).__name__}")
        self._step_state.cache_found_inf = None if value is None else FoundInf.known(bool(value))

    def _policy_attribute(name: str) -> property:  # type: ignore[misc]  # a helper for the class body
        def get(self: AmpScaler) -> Any:
            return getattr(self._tracker.policy, name)

        def set_(self: AmpScaler, value: Any) -> None:
            self._set_policy(**{name: value})

        return property(get, set_, doc=f"Paddle's ``_{name}``: the policy's ``{name}``.")

    _incr_ratio = _policy_attribute("incr_ratio")
    _decr_ratio = _policy_attribute("decr_ratio")
    _incr_every_n_steps = _policy_attribute("incr_every_n_steps")
    _decr_every_n_nan_or_inf = _policy_attribute("decr_every_n_nan_or_inf")
    del _policy_attribute

    @property
    def _incr_count(self) -> int:
        """Finite steps in a row since the last change of the scale (waits for flags in flight)."""
        return self._tracker.state().incr_count

    @_incr_count.setter
    def _incr_count(self, value: Any) -> None:
        self._tracker.reset(counts=(check_count("_incr_count", value), self._decr_count))

    @property
    def _decr_count(self) -> int:
        """Overflowing steps in a row since the last change of the scale (waits for flags in flight)."""
        return self._tracker.state().decr_count

    @_decr_count.setter
    def _decr_count(self, value: Any) -> None:
        self._tracker.reset(counts=(self._incr_count, check_count("_decr_count", value)))

    # -- checkpoints -----------------------------------------------------------------------

    @never_traced
    def state_dict(self) -> dict[str, Any]:
        """Paddle's 8 keys (``{}`` when disabled), plus ``skipped_steps``.

        ``scale`` is a 1-element float32 CPU tensor, so ``torch.save`` +
        ``torch.load(weights_only=True)`` round-trips; Paddle's own ``load_state_dict`` takes
        the dict too.

        Example::

            >>> torch.save({"scaler": scaler.state_dict()}, path)
        """
        if not self._enable:
            return {}
        host = self._tracker.state()
        p = self._tracker.policy
        return {
            "scale": torch.tensor([host.scale], dtype=torch.float32),
            "incr_ratio": p.incr_ratio,
            "decr_ratio": p.decr_ratio,
            "incr_every_n_steps": p.incr_every_n_steps,
            "decr_every_n_nan_or_inf": p.decr_every_n_nan_or_inf,
            "incr_count": host.incr_count,
            "decr_count": host.decr_count,
            "use_dynamic_loss_scaling": self._use_dynamic_loss_scaling,
            "skipped_steps": self._tracker.skipped_steps(),
        }

    @never_traced
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Resume from ``state_dict()``, ours or Paddle's (``scale`` as a numpy array).

        Everything is checked before anything changes. A dict without ``skipped_steps``
        (Paddle's) keeps the current count.

        Args:
            state_dict: the dict to resume from.

        Example::

            >>> scaler.load_state_dict(torch.load(path)["scaler"])
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"state_dict should be a dict, but received {type(state_dict).__name__}")
        if not self._enable:
            return
        if len(state_dict) == 0:
            raise RuntimeError(
                "The input state dict is empty, possibly because it was saved from a disabled instance of GradScaler."
            )
        missing = [k for k in STATE_DICT_KEYS if k not in state_dict]
        if missing:
            raise KeyError(f"state_dict is missing {', '.join(map(repr, missing))}")
        d = state_dict
        scale = check_scale("state_dict['scale']", _one_number("state_dict['scale']", d["scale"]))
        policy = dataclasses.replace(
            self._tracker.policy,
            incr_ratio=d["incr_ratio"],
            decr_ratio=d["decr_ratio"],
            incr_every_n_steps=d["incr_every_n_steps"],
            decr_every_n_nan_or_inf=d["decr_every_n_nan_or_inf"],
        )
        _check_within("state_dict['scale']", scale, policy)
        counts = (
            check_count("state_dict['incr_count']", d["incr_count"]),
            check_count("state_dict['decr_count']", d["decr_count"]),
        )
        dynamic = _checks.flag("state_dict['use_dynamic_loss_scaling']", as_number(d["use_dynamic_loss_scaling"]))
        skipped = check_count("state_dict['skipped_steps']", d["skipped_steps"]) if "skipped_steps" in d else None
        self._tracker.reset(scale=scale, policy=policy, counts=counts, skipped=skipped)
        self._init_loss_scaling = scale
        self._use_dynamic_loss_scaling = dynamic
        self._step_state.scaled_with = None

    def set_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """``load_state_dict`` under the name Paddle's layers and optimizers use (Paddle's scaler
        has only ``load_state_dict``).

        Args:
            state_dict: as for ``load_state_dict``.

        Example::

            >>> scaler.set_state_dict(checkpoint["scaler"])
        """
        self.load_state_dict(state_dict)

    # -- pickling ----------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        if self._step_state.optimizer_states:
            raise RuntimeError(
                "A GradScaler can only be pickled or copied between iterations: before scale() or after update()."
            )
        state = self.__dict__.copy()
        del state["_step_state"]  # per-thread, per-iteration
        group = state["_process_group"]
        if group is not None:  # a process group does not pickle; the default one is named
            if group is not _world_group():
                raise RuntimeError(
                    "A GradScaler with a process_group other than the default group cannot be pickled or "
                    "copied; set scaler.process_group = None first and set it again on the copy."
                )
            state["_process_group"] = _WORLD
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self._process_group == _WORLD:
            self._process_group = _world_group()
        self._step_state = _StepState()


@never_traced
def _skipped_step(optimizer: torch.optim.Optimizer) -> None:
    """A skipped step: an optimizer of ours still does what Paddle's does there (its clip runs)."""
    hook = getattr(optimizer, "_skipped_step", None)
    if hook is not None:
        hook()


@never_traced
def _skipped_minimize(optimizer: torch.optim.Optimizer, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A skipped ``minimize``: an optimizer of ours still does what Paddle's does there (its clip
    runs on the parameters the arguments select) and returns Paddle's ``(None, params_grads)``."""
    hook = getattr(optimizer, "_skipped_minimize", None)
    return None if hook is None else hook(*args, **kwargs)


def _takes_grad_scaler(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the optimizer speaks torch's older protocol: ``_step_supports_amp_scaling`` with a
    ``step(..., grad_scaler=None)`` that expects torch's scaler to pass itself in and to be asked,
    through torch's private methods, for the scale and the flags. Ours has neither those methods
    nor a reason to hand itself over: such an optimizer is treated as Paddle treats every optimizer
    (the gradients unscaled first, the step skipped on inf/NaN, no ``grad_scaler`` passed), with a
    warning, instead of stepping on gradients that are still scaled."""
    # The class's step: a wrapper put on the instance (Accelerate's) takes (*args, **kwargs).
    if not _step_takes_grad_scaler(type(optimizer).step):
        return False
    warnings.warn(
        f"{type(optimizer).__name__}.step() takes grad_scaler= (torch's deprecated protocol for optimizers that "
        "unscale themselves): paddle_compat's GradScaler does not pass itself in; it unscales the gradients "
        "first and skips the step on inf/NaN, as Paddle's scaler does for every optimizer.",
        UserWarning,
        stacklevel=user_stacklevel(),
    )
    return True


@functools.lru_cache(maxsize=64)
def _step_takes_grad_scaler(step: Any) -> bool:
    try:
        return "grad_scaler" in inspect.signature(step).parameters
    except (TypeError, ValueError):  # a callable without a signature
        return False


def _step_watched(optimizer: torch.optim.Optimizer) -> bool:
    """Whether Accelerate replaced ``optimizer.step`` on the instance to learn whether it ran (its
    ``AcceleratedOptimizer.step`` does so around ``scaler.step``)."""
    replaced = vars(optimizer).get("step")
    return replaced is not None and str(getattr(replaced, "__module__", "")).startswith("accelerate.")


def _drop_fused_inputs(optimizer: torch.optim.Optimizer) -> None:
    for name in ("grad_scale", "found_inf"):
        if hasattr(optimizer, name):
            delattr(optimizer, name)


_WORLD = "paddle_compat: the default process group"


def _world_group() -> Any:
    import torch.distributed as dist

    return dist.group.WORLD if dist.is_available() and dist.is_initialized() else None


def _one_number(name: str, value: Any) -> Any:
    """The number in a 1-element tensor, array or list (Paddle saves ``scale`` as ``[1]``)."""
    try:
        flat = torch.as_tensor(value).reshape(-1)
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(f"{name} must be a number or a 1-element tensor/array, got {type(value).__name__}") from error
    if flat.numel() != 1:
        raise ValueError(f"{name} must hold exactly one number, got {flat.numel()}")
    return flat[0].item()


class GradScaler(AmpScaler):
    """Paddle's ``paddle.amp.GradScaler``: ``AmpScaler`` with Paddle 3.x's defaults (``2**16``,
    2000 steps), which also speaks torch's dialect as newer Paddle does.

    Both of these build the same scaler::

        >>> paddles = GradScaler(init_loss_scaling=1024, incr_ratio=3.0, incr_every_n_steps=500)
        >>> torchs = GradScaler("cuda", init_scale=1024, growth_factor=3.0, growth_interval=500)
        >>> [(s.get_scale(), s.get_incr_ratio(), s.get_incr_every_n_steps()) for s in (paddles, torchs)]
        [(1024.0, 3.0, 500), (1024.0, 3.0, 500)]

    Args: those of ``AmpScaler``, plus torch's names as aliases: ``enabled`` (``enable``),
    ``init_scale`` (``init_loss_scaling``), ``growth_factor`` (``incr_ratio``),
    ``backoff_factor`` (``decr_ratio``), ``growth_interval`` (``incr_every_n_steps``). Positional
    arguments follow Paddle's order when the first is a bool, torch's order (``init_scale,
    growth_factor, backoff_factor, growth_interval, enabled``) after a leading device string or
    when the first is a number. ``device`` is accepted and ignored (the scale goes where the
    gradients are). Naming one argument twice is a ``ValueError``. ``defaults="2.x"`` gives
    Paddle 2.x's defaults (``32768``, 1000 steps, 2 overflows per decrease) to what is not given.
    ``paddle_compat.amp.scaler_args`` has the exact rules.

    Defaults stay Paddle's under torch's names too; torch's differ in ``get_scale()`` of a
    disabled scaler (1.0 in torch, 0.0 here as in Paddle) and torch has no
    ``decr_every_n_nan_or_inf`` (it backs off at every overflow, which is Paddle 3's default).

    Example::

        >>> scaler = GradScaler()
        >>> with auto_cast():
        ...     loss = model(x).mean()
        >>> scaler.scale(loss).backward()
        >>> scaler.step(optimizer)
        >>> scaler.update()
        >>> optimizer.clear_grad()
    """

    _torch_dialect = True
    _family = "GradScaler"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Arguments: see the class (Paddle's names, or torch's)."""
        # Its own function, so that it carries its own ``__signature__`` (below).
        super().__init__(*args, **kwargs)

    # torch's names for Paddle's getters and setters (newer Paddle has them too)

    def is_enabled(self) -> bool:
        """torch's name for ``is_enable()``.

        Example::

            >>> GradScaler("cuda", enabled=False).is_enabled()
            False
        """
        return self.is_enable()

    def get_growth_factor(self) -> float:
        """torch's name for ``get_incr_ratio()``.

        Example::

            >>> GradScaler(growth_factor=3.0).get_growth_factor()
            3.0
        """
        return self.get_incr_ratio()

    def set_growth_factor(self, new_factor: float) -> None:
        """torch's name for ``set_incr_ratio()``.

        Args:
            new_factor: a float > 1, finite in float32.

        Example::

            >>> scaler.set_growth_factor(4.0)
        """
        self._set_policy_as("new_factor", incr_ratio=new_factor)

    def get_backoff_factor(self) -> float:
        """torch's name for ``get_decr_ratio()``.

        Example::

            >>> GradScaler(backoff_factor=0.25).get_backoff_factor()
            0.25
        """
        return self.get_decr_ratio()

    def set_backoff_factor(self, new_factor: float) -> None:
        """torch's name for ``set_decr_ratio()``.

        Args:
            new_factor: a float in (0, 1) that stays below 1 in float32.

        Example::

            >>> scaler.set_backoff_factor(0.25)
        """
        self._set_policy_as("new_factor", decr_ratio=new_factor)

    def get_growth_interval(self) -> int:
        """torch's name for ``get_incr_every_n_steps()``.

        Example::

            >>> GradScaler(growth_interval=500).get_growth_interval()
            500
        """
        return self.get_incr_every_n_steps()

    def set_growth_interval(self, new_interval: int) -> None:
        """torch's name for ``set_incr_every_n_steps()``.

        Args:
            new_interval: a positive int.

        Example::

            >>> scaler.set_growth_interval(500)
        """
        self._set_policy_as("new_interval", incr_every_n_steps=new_interval)

    # torch's private names that frameworks call (Accelerate, when resuming under FSDP2:
    # ``scaler._lazy_init_scale_growth_tracker(scaler._device)``)

    @property
    def _device(self) -> str:
        """Where the scale lives now, e.g. ``"cpu"`` or ``"cuda:0"`` (torch keeps the device
        string given to its constructor; ours follows the gradients)."""
        return str(self._tracker.tensor().device)

    def _lazy_init_scale_growth_tracker(self, dev: str | torch.device) -> None:
        """torch creates its scale tensors here, at the first ``scale()``. Ours exist from
        construction and settle on the gradients' device at the first step, so there is
        nothing to create: the device is checked and the scale stays where it is.

        Args:
            dev: a device (string or ``torch.device``), as torch takes it.
        """
        try:
            torch.device(dev)
        except TypeError:
            raise TypeError(f"dev must be a device string or torch.device, got {type(dev).__name__}") from None
        except RuntimeError:
            raise ValueError(f"dev must name a device, got {dev!r}") from None

    def _set_policy_as(self, alias: str, **change: Any) -> None:
        try:
            self._set_policy(**change)
        except (TypeError, ValueError) as error:
            raise scaler_args.renamed(error, {name: alias for name in change}) from None


# What help() and inspect show for the (*args, **kwargs) constructors.
AmpScaler.__init__.__signature__ = (  # type: ignore[attr-defined]
    scaler_args.signature("AmpScaler", torch_dialect=False))
GradScaler.__init__.__signature__ = (  # type: ignore[attr-defined]
    scaler_args.signature("GradScaler", torch_dialect=True))
