"""NVIDIA apex's ``amp`` loss-scaling API on ``paddle_compat.amp.GradScaler``: a porting aid.

Code written for apex ports by changing its import::

    from paddle_compat.apex import amp          # was: from apex import amp

    model, optimizer = amp.initialize(model, optimizer, loss_scale="dynamic")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.float16):   # apex O1 cast ops; here torch does
            loss = loss_fn(model(x), y)
        with amp.scale_loss(loss, optimizer) as scaled_loss:
            scaled_loss.backward()
        optimizer.step()          # skipped once when the grads held inf/NaN
        optimizer.zero_grad()

What is here: ``initialize`` (the loss-scaling part), ``scale_loss`` (one scale per
``loss_id``, skip on overflow through the user's own ``optimizer.step()``, accumulation with
``delay_unscale``), ``state_dict``/``load_state_dict`` in apex's format, ``master_params``, and
``_amp_state.loss_scalers[i]`` with the attributes apex scripts read (``loss_scale()``,
``_loss_scale``, ``_unskipped``, ``_scale_seq_len``). The scale policy is apex's, run by
``GradScaler`` (``loss_scaler.py`` lists where the numbers can differ from apex's).

What is not: apex casts (``opt_level`` O1 patches torch functions, O2/O3 cast the model, O2 keeps
fp32 master weights). Here ``initialize`` returns models and optimizers unchanged and warns;
run the forward pass under ``torch.autocast`` or ``paddle_compat.amp.auto_cast``, and use
``paddle_compat.amp.decorate(..., level="O2")`` for fp16 weights with fp32 master weights.
Also absent: apex's fused optimizers and ``FP16_Optimizer`` special cases,
``delay_overflow_check=True``, the ``half_function``/``register_*`` casting registry.
"""

from __future__ import annotations

import contextlib
import warnings
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import Tensor

from .. import _checks
from ..amp.scale_tracker import FoundInf
from . import grad_stash, step_guard
from .loss_scaler import LossScaler

__all__ = ["initialize", "load_state_dict", "master_params", "scale_loss", "state_dict"]

_OPT_LEVEL_LOSS_SCALE: dict[str, float | str] = {"O0": 1.0, "O1": "dynamic", "O2": "dynamic", "O3": 1.0}  # apex's
_CASTING_OPTIONS = ("cast_model_type", "patch_torch_functions", "keep_batchnorm_fp32", "master_weights",
                    "cast_model_outputs")


class _AmpState:
    """apex's ``_amp_state``: what ``initialize`` set up, and the optimizers ``scale_loss`` holds.

    Attributes:
        enabled: ``None`` before ``initialize``, then its ``enabled`` argument.
        loss_scalers: one ``LossScaler`` per loss (``num_losses``).
        opt_level: the ``opt_level`` given to ``initialize``.
    """

    def __init__(self) -> None:
        self.enabled: bool | None = None
        self.opt_level: str | None = None
        self.loss_scalers: list[LossScaler] = []
        # Optimizers whose grads still carry a loss scale (delay_unscale=True) -> the grads
        # set aside before their first scaled pass.
        self.set_aside: weakref.WeakKeyDictionary[torch.optim.Optimizer, list[grad_stash.Held]] = (
            weakref.WeakKeyDictionary()
        )
        self.touched: weakref.WeakSet[torch.optim.Optimizer] = weakref.WeakSet()  # for a re-initialize

    def reset(self) -> None:
        """Undo what ``scale_loss`` left on optimizers: guards removed, grads given back."""
        for optimizer in list(self.touched):
            step_guard.reset(optimizer)
        for held in self.set_aside.values():
            grad_stash.put_back(held)
        self.set_aside.clear()
        self.touched = weakref.WeakSet()


_amp_state = _AmpState()


def initialize(
    models: Any,
    optimizers: Any = None,
    enabled: bool = True,
    opt_level: str = "O1",
    cast_model_type: Any = None,
    patch_torch_functions: Any = None,
    keep_batchnorm_fp32: Any = None,
    master_weights: Any = None,
    loss_scale: float | str | None = None,
    cast_model_outputs: Any = None,
    num_losses: int = 1,
    verbosity: int = 1,
    min_loss_scale: float | None = None,
    max_loss_scale: float | None = 2.0**24,
) -> Any:
    """Set up apex-style loss scaling: one loss scaler per loss, as ``apex.amp.initialize``.

    Only loss scaling is in scope: models and optimizers come back unchanged (the same objects,
    in the same structure: ``models`` alone when ``optimizers`` is ``None``, else
    ``(models, optimizers)``). Calling it again starts afresh: new scalers, and every
    ``optimizer.step`` that ``scale_loss`` intercepted is restored.

    Args:
        models: a ``torch.nn.Module`` or a list/tuple of them (returned as given).
        optimizers: ``None``, a ``torch.optim.Optimizer`` or a list/tuple of them (returned as given).
        enabled: ``False`` makes ``scale_loss`` yield the loss untouched and never skip.
        opt_level: ``"O0"``-``"O3"``; here it only picks the default ``loss_scale`` (O1/O2:
            ``"dynamic"``, O0/O3: ``1.0``). O1-O3 warn that nothing is cast.
        cast_model_type, patch_torch_functions, keep_batchnorm_fp32, master_weights,
            cast_model_outputs: apex's casting overrides: accepted, not applied (a warning says so).
        loss_scale: ``"dynamic"``, a fixed scale (a positive number, or a string holding one), or
            ``None`` for the ``opt_level``'s default.
        num_losses: how many ``loss_id`` values ``scale_loss`` accepts, each with its own scale.
        verbosity: accepted for apex's signature; messages go to the ``logging`` logger
            ``paddle_compat.apex`` (the skipped-step line, at INFO) instead of stdout.
        min_loss_scale, max_loss_scale: floor and ceiling of a dynamic scale (apex's defaults:
            none and ``2**24``).

    Example::

        model, optimizer = amp.initialize(model, optimizer, opt_level="O1", num_losses=2)

    Differences from apex: nothing is cast (see above); ``TypeError``/``ValueError`` for bad
    arguments, raised before anything changes; a fixed ``loss_scale`` still skips steps whose
    grads hold inf/NaN (apex applies them).
    """
    _check_models(models)
    _optimizer_list("optimizers", optimizers, allow_none=True)  # checked only: scale_loss takes any optimizer
    _checks.flag("enabled", enabled)
    if opt_level not in _OPT_LEVEL_LOSS_SCALE:
        raise ValueError(f"opt_level must be one of 'O0', 'O1', 'O2', 'O3' (the letter O), got {opt_level!r}")
    _checks.at_least("num_losses", _checks.integer("num_losses", num_losses), 1)
    _checks.integer("verbosity", verbosity)
    scale = _OPT_LEVEL_LOSS_SCALE[opt_level] if loss_scale is None else _parse_loss_scale(loss_scale)
    scalers = [LossScaler(scale, min_loss_scale, max_loss_scale) for _ in range(num_losses)] if enabled else []

    given = {name: value for name, value in zip(
        _CASTING_OPTIONS, (cast_model_type, patch_torch_functions, keep_batchnorm_fp32, master_weights,
                           cast_model_outputs)) if value is not None}
    if enabled and (opt_level != "O0" or given):
        overrides = f" (and ignores {', '.join(given)})" if given else ""
        warnings.warn(
            f"paddle_compat.apex.amp.initialize(opt_level={opt_level!r}) sets up loss scaling only{overrides}: "
            "models and optimizers are returned unchanged, nothing is cast and no master weights are made. "
            "Run the forward pass under torch.autocast(...) or paddle_compat.amp.auto_cast(), and use "
            "paddle_compat.amp.decorate(..., level='O2') for fp16 weights with fp32 master weights.",
            stacklevel=2,
        )

    _amp_state.reset()
    _amp_state.enabled = enabled
    _amp_state.opt_level = opt_level
    _amp_state.loss_scalers = scalers
    return models if optimizers is None else (models, optimizers)


def scale_loss(
    loss: Tensor,
    optimizers: Any,
    loss_id: int = 0,
    model: Any = None,
    delay_unscale: bool = False,
    delay_overflow_check: bool = False,
) -> contextlib.AbstractContextManager[Tensor]:
    """Yield ``loss.float() * scale`` for ``backward()``; on exit unscale the grads and, if any
    is inf/NaN, make the next ``optimizer.step()`` of each optimizer a no-op (it then restores
    itself) and lower this loss's scale.

    Args:
        loss: the loss tensor.
        optimizers: the optimizer, or list of optimizers, whose parameters this backward pass
            gives grads to. All of them skip their next step on overflow.
        loss_id: which loss scaler (``0 <= loss_id < num_losses`` of ``initialize``).
        model: unused, as in apex.
        delay_unscale: leave the grads scaled (accumulation): no unscale, no overflow check, no
            scale update. ``optimizer.step()`` raises until a later ``scale_loss`` with the same
            ``loss_id`` and ``delay_unscale=False`` unscales everything accumulated.
        delay_overflow_check: only ``False`` is supported.

    Grads that were already in ``.grad`` before the first scaled pass (from an earlier loss,
    already unscaled) are set aside and added back after unscaling, so losses with different
    scales can share parameters.

    Example::

        with amp.scale_loss(loss0, optimizer, loss_id=0) as scaled:
            scaled.backward()
        with amp.scale_loss(loss1, optimizer, loss_id=1) as scaled:
            scaled.backward()
        optimizer.step()

    Differences from apex: a ``step()`` while the grads are still scaled raises instead of
    applying them; a pass under another ``loss_id`` while they are is refused; the overflow
    check always happens (apex skips it for a fixed scale); the scale update reads the grads'
    overflow flag with one host sync per ``scale_loss`` (as apex).
    """
    if _amp_state.enabled is None:
        raise RuntimeError(
            "amp.scale_loss() was called before amp.initialize(): call "
            "model, optimizer = amp.initialize(model, optimizer, ...) first."
        )
    if not isinstance(loss, Tensor):
        raise TypeError(f"loss must be a torch.Tensor, got {type(loss).__name__}")
    optimizer_list = _optimizer_list("optimizers", optimizers, allow_none=False)
    num_losses = len(_amp_state.loss_scalers) if _amp_state.enabled else None
    _checks.integer("loss_id", loss_id)
    if num_losses is not None and not 0 <= loss_id < num_losses:
        raise ValueError(
            f"loss_id must be in [0, num_losses) = [0, {num_losses}), got {loss_id}; "
            "declare more losses with amp.initialize(..., num_losses=N)"
        )
    _checks.flag("delay_unscale", delay_unscale)
    if delay_overflow_check is not False:
        raise ValueError("delay_overflow_check=True is not supported: the overflow check runs in every scale_loss")
    if not _amp_state.enabled:
        return contextlib.nullcontext(loss)
    _check_disjoint(optimizer_list)
    for optimizer in optimizer_list:
        held_by = step_guard.scaled_by(optimizer)
        if held_by is not None and held_by != loss_id:
            raise RuntimeError(
                f"the gradients of this optimizer still carry the scale of loss_id={held_by} "
                f"(delay_unscale=True); a backward pass under loss_id={loss_id} would add gradients "
                f"with another scale. Finish with amp.scale_loss(..., loss_id={held_by}, delay_unscale=False) first."
            )
    return _ScaledBackward(loss, optimizer_list, loss_id, delay_unscale)


class _ScaledBackward:
    """One ``with amp.scale_loss(...)`` block (see ``scale_loss``)."""

    def __init__(self, loss: Tensor, optimizers: list[torch.optim.Optimizer], loss_id: int, delay: bool) -> None:
        self._loss, self._optimizers, self._loss_id, self._delay = loss, optimizers, loss_id, delay
        self._scaler = _amp_state.loss_scalers[loss_id]
        self._held: dict[int, list[grad_stash.Held]] = {}
        self._was_scaled: set[int] = set()

    def __enter__(self) -> Tensor:
        for optimizer in self._optimizers:
            _amp_state.touched.add(optimizer)
            if optimizer in _amp_state.set_aside:  # grads still scaled from a delayed pass
                self._was_scaled.add(id(optimizer))
                self._held[id(optimizer)] = _amp_state.set_aside.pop(optimizer)
            else:
                self._held[id(optimizer)] = grad_stash.take(optimizer)
        return self._loss.float() * self._scaler.loss_scale()

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self._give_back_after_error()
        elif self._delay:
            for optimizer in self._optimizers:
                _amp_state.set_aside[optimizer] = self._held[id(optimizer)]
                step_guard.guard_of(optimizer).scaled_by = self._loss_id
        else:
            self._unscale_and_update()

    def _unscale_and_update(self) -> None:
        grad_scaler = self._scaler.grad_scaler
        flags = []
        for optimizer in self._optimizers:
            grad_scaler._unscale(optimizer)  # Paddle's hook: in place, sets _found_inf
            flags.append(grad_scaler._found_inf.reshape(-1))
        home = flags[0].device
        found = bool(torch.cat([f.to(home) for f in flags]).any().item())  # the one host sync
        for optimizer in self._optimizers:
            grad_stash.put_back(self._held[id(optimizer)])
        grad_scaler._record_step(FoundInf.known(found))  # last_step_skipped(), get_skipped_steps(), update()
        grad_scaler.update()  # a fixed scale stays: update() leaves it alone
        for optimizer in self._optimizers:
            if found:
                guard = step_guard.guard_of(optimizer)
                guard.scaled_by = None
                if guard.skip_message is None:
                    guard.skip_message = self._skip_message()
            else:
                step_guard.unscaled(optimizer)

    def _skip_message(self) -> str:
        scale = self._scaler.loss_scale()
        if self._scaler.dynamic:
            return f"Gradient overflow. Skipping step, loss scaler {self._loss_id} reducing loss scale to {scale}"
        return f"Gradient overflow. Skipping step, loss scaler {self._loss_id} keeps its fixed loss scale {scale}"

    def _give_back_after_error(self) -> None:
        """The backward pass failed: drop what it left and restore the grads as they were."""
        for optimizer in self._optimizers:
            held = self._held.get(id(optimizer))
            if held is None:
                continue
            if id(optimizer) in self._was_scaled:
                _amp_state.set_aside[optimizer] = held  # still mid-accumulation, as before the block
            else:
                grad_stash.put_back(held, keep_new=False)


def state_dict(destination: dict[str, Any] | None = None) -> dict[str, Any]:
    """apex's checkpoint of the loss scalers: ``{"loss_scaler0": {"loss_scale", "unskipped"}, ...}``.

    Args:
        destination: a dict to fill (and return); a new one by default.

    Example::

        torch.save({"model": model.state_dict(), "amp": amp.state_dict()}, path)
    """
    destination = {} if destination is None else destination
    for i, scaler in enumerate(_amp_state.loss_scalers):
        destination[f"loss_scaler{i}"] = scaler.state_dict()
    return destination


def load_state_dict(state_dict: Mapping[str, Any]) -> None:
    """Resume the loss scalers from ``state_dict()`` (apex's format), entries in order.

    As apex: a different number of entries than loss scalers warns and loads those that pair up.
    Unlike apex, everything is checked first (``RuntimeError`` for keys that are not
    ``loss_scaler*``, ``KeyError``/``ValueError`` for bad entries) and nothing changes on error.

    Args:
        state_dict: the dict ``state_dict()`` returned (e.g. after ``torch.load``).

    Example::

        amp.load_state_dict(torch.load(path)["amp"])
    """
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
    unexpected = [key for key in state_dict if "loss_scaler" not in str(key)]
    if unexpected:
        raise RuntimeError(
            "Error(s) in loading state_dict. Unexpected key(s) in state_dict: "
            + ", ".join(f'"{key}"' for key in unexpected)
            + "."
        )
    scalers = _amp_state.loss_scalers
    pairs = list(zip(state_dict.items(), scalers))
    checked = [scaler.checked_state(entry, f"state_dict[{key!r}]") for (key, entry), scaler in pairs]
    if len(state_dict) != len(scalers):
        warnings.warn(
            f"state_dict contains {len(state_dict)} entries, while {len(scalers)} loss_scalers are used",
            stacklevel=2,
        )
    for (scale, unskipped), scaler in zip(checked, scalers):
        scaler._loss_scale = scale
        scaler._unskipped = unskipped


def master_params(optimizer: torch.optim.Optimizer) -> Iterator[Tensor]:
    """The parameters the optimizer updates, group by group.

    No master copies are made here, so these are the model's parameters (apex O1's answer).

    Args:
        optimizer: a ``torch.optim.Optimizer``.

    Example::

        torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
    """
    for group in optimizer.param_groups:
        yield from group["params"]


def _parse_loss_scale(value: Any) -> float | str:
    """``"dynamic"`` or a float, from apex's forms (``"dynamic"``, ``128.0``, ``"128.0"``)."""
    if value == "dynamic":
        return value
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"loss_scale must be 'dynamic' or a positive number, got {value!r}") from None
    if not _checks.is_real(value):
        raise TypeError(f"loss_scale must be 'dynamic' or a positive number, got {type(value).__name__}")
    return float(value)


def _check_models(models: Any) -> None:
    items = models if isinstance(models, (list, tuple)) else [models]
    for model in items:
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"models must be a torch.nn.Module or a list of them, got {type(model).__name__}")


def _check_disjoint(optimizers: list[torch.optim.Optimizer]) -> None:
    """Refuse optimizers that share a parameter: its grad would be unscaled once per optimizer."""
    owner: dict[int, int] = {}
    for i, optimizer in enumerate(optimizers):
        for group in optimizer.param_groups:
            for p in group["params"]:
                if owner.setdefault(id(p), i) != i:
                    raise ValueError(
                        f"optimizers {owner[id(p)]} and {i} share a parameter; give scale_loss "
                        "optimizers over distinct parameters"
                    )


def _optimizer_list(name: str, optimizers: Any, allow_none: bool) -> list[torch.optim.Optimizer]:
    """The distinct optimizers given (one, or a list/tuple), checked."""
    if optimizers is None and allow_none:
        return []
    items = optimizers if isinstance(optimizers, (list, tuple)) else [optimizers]
    unique: list[torch.optim.Optimizer] = []
    for optimizer in items:
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"{name} must be a torch.optim.Optimizer or a list of them, got {type(optimizer).__name__}"
            )
        if not any(optimizer is seen for seen in unique):
            unique.append(optimizer)
    if not unique and not allow_none:
        raise ValueError(f"{name} must name at least one optimizer")
    return unique
