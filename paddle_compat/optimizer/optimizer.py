"""The base class: Paddle's dygraph ``Optimizer`` semantics on a ``torch.optim.Optimizer``.

What every optimizer shares lives here: parameter groups, the learning rate Paddle's kernels see,
the order inside a step (clip -> regularization -> update), fp32 master weights, and the methods
Paddle code calls (``step``, ``minimize``, ``clear_grad``, ``get_lr``, ``set_lr``,
``set_lr_scheduler``, ``state_dict``, ``set_state_dict``), and the hooks through which the update
engine (``_engine``) runs a subclass's formula (all of them, typed: ``_engine.OptimizerForms``). A
subclass must define ``_init_state`` and ``_kernel`` (its formula in torch form, per tensor);
``_compiled_row`` with ``_compiled_call`` (the compiled CPU kernels) and ``_multi_tensor_call``
(the GPU kernels) are optional speed-ups giving the same bits.

Parameter groups keep torch's keys (``lr``, read by torch's LR schedulers) and Paddle's keys
(``learning_rate``: a ratio applied to the base rate; ``weight_decay``; ``grad_clip``; the
optimizer's own options).

The private attributes Paddle trainers read exist with Paddle's meanings: ``_learning_rate`` (the
float base rate, or the ``LRScheduler``), ``_parameter_list`` and ``_param_groups`` (the parameters,
or the group dicts), ``_grad_clip``, ``_name``, ``_multi_precision``, ``_dtype``,
``regularization`` and ``_create_master_weight``. Attributes of our own are named ``_compat_*``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _checks, _devices, _native
from .._dtensor import any_dtensor, distribute_like, is_dtensor, local
from .._numerics import round_to
from .._stacklevel import user_stacklevel
from ..amp import unscale
from ..amp.compile_boundary import never_traced
from ..amp.master_grad import clear_grads
from ..nn.clip import ClipGradBase, ClipGradByGlobalNorm, ParamsGrads
from ..regularizer import L1Decay, L2Decay, WeightDecayRegularizer
from . import _dcp, _multi_tensor, _torch_step
from ._engine import Engine, Item, attr_ratio, optional_form, place, same_layout
from ._sharded import local_shards
from .lr import LambdaDecay, LRScheduler

__all__ = ["Optimizer"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)
_GRAD_DTYPES = frozenset((torch.float16, torch.bfloat16, torch.float32, torch.float64))

# (param, grad, state, master weight or None): what ``_compiled_row`` receives
_Item = Item

def compute_dtype(value: Tensor) -> torch.dtype:
    """The dtype Paddle's kernels compute in (``MPType``): float32 for fp16/bf16, else the dtype itself."""
    return torch.float32 if value.dtype in _LOW_PRECISION else value.dtype


class TensorOption(float):
    """An option given as a one-element tensor (``beta1=paddle.to_tensor([0.9])``), held as its value.

    Paddle takes the Adam family's ``beta1``, ``beta2`` and ``epsilon`` as tensors and reads their
    value at each step, but Adam, AdamW and Lamb then start their beta powers at 0.9 and 0.999
    whatever the tensor holds: this type remembers where the value came from (``tensor_options``).
    """

    __slots__ = ()


def tensor_options(group: dict[str, Any], *keys: str) -> None:
    """Replace a one-element floating tensor among ``group``'s ``keys`` by its value, a ``TensorOption``
    (the value is then checked as a number would be). Paddle reads element 0 of a larger tensor;
    that is refused here (``ValueError``), and so is a non-floating one (``TypeError``)."""
    for key in keys:
        value = group.get(key)
        if not isinstance(value, Tensor):
            continue
        if not (value.is_floating_point() and not value.is_complex()):
            raise TypeError(f"{key} given as a tensor should be floating point, but its dtype is {value.dtype}")
        if value.numel() != 1:
            raise ValueError(f"{key} given as a tensor should have one element, but it has shape {list(value.shape)}")
        group[key] = TensorOption(value.item())


def check_range(group: dict[str, Any], key: str, low: float | None = 0.0, high: float | None = None) -> None:
    """``low <= group[key] <= high`` when ``group`` has ``key`` (``ValueError`` in Paddle's wording,
    ``"Invalid value of rho, expect rho >= 0."``); ``None`` leaves that side open."""
    if key not in group:
        return
    if low is not None and not group[key] >= low:
        raise ValueError(f"Invalid value of {key}, expect {key} >= {low:g}.")
    if high is not None and not group[key] <= high:
        raise ValueError(f"Invalid value of {key}, expect {key} <= {high:g}.")


def _is_lr_scheduler(obj: object) -> bool:
    """Paddle's ``LRScheduler`` protocol: calling it gives the rate, ``step()`` advances it.

    ``paddle_compat.optimizer.lr``'s schedulers follow it, and so does any object written for it.
    """
    return callable(obj) and callable(getattr(obj, "step", None)) and not isinstance(obj, (int, float))


# torch.optim's keyword names that Paddle spells differently, and what to write instead.
_TORCH_KEYWORDS = {
    "lr": "Paddle's name is 'learning_rate'",
    "params": "Paddle's name is 'parameters'",
    "betas": "Paddle's names are 'beta1' and 'beta2'",
    "eps": "Paddle's name is 'epsilon'",
    "nesterov": "Paddle's name is 'use_nesterov'",
    "momentum": "Paddle's {cls} has none: use paddle_compat.optimizer.Momentum(momentum=...)",
}


def _refusing_torch_keywords(init: Callable[..., None]) -> Callable[..., None]:
    """Wrap a constructor so that torch.optim's spelling of an argument names Paddle's (``TypeError``).

    The wrapper shows the constructor's own signature to ``inspect.signature`` and also to
    ``inspect.getfullargspec``, which does not follow ``__wrapped__``: Paddle programs read it
    (PaddleVideo's ``build_optimizer`` tests ``"multi_precision" in getfullargspec(...).args``).
    """
    signature = inspect.signature(init)
    own = set(signature.parameters)

    @functools.wraps(init)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        for key in kwargs:
            if key in _TORCH_KEYWORDS and key not in own:
                name = type(self).__name__
                raise _checks.unexpected_keyword(name, key, _TORCH_KEYWORDS[key].format(cls=name))
        init(self, *args, **kwargs)

    wrapper.__signature__ = signature  # type: ignore[attr-defined]
    return wrapper


def paddle_option(key: str) -> Any:
    """Paddle's private attribute of the option ``key`` (``Adam._beta1``: ``paddle_option("beta1")``),
    read-only: the optimizer's value, as given to the constructor (a tensor's value for a tensor).

    Paddle sets these attributes to each group's options in turn while it steps, so after a step
    with groups they hold the last group's; here they always hold the optimizer's own.
    """

    def get(self: Any) -> Any:
        return self.defaults[key]

    return property(get, doc=f"Paddle's ``_{key}``: the optimizer's ``{key}``.")


class Optimizer(torch.optim.Optimizer):
    """Base of every optimizer here (``SGD``, ``Momentum``, ``Adam``, ``AdamW``, ``Lamb``, ... ``Rprop``).

    Differences from Paddle: the state dict is torch's (``{"state", "param_groups"}``, plus
    ``"LR_Scheduler"`` when a Paddle-style scheduler drives the rate) rather than a dict keyed by
    Paddle variable names; a negative, NaN or infinite learning rate is refused (also one given by
    a scheduler, at the step that would use it); torch.optim's keyword names (``lr=``, ``betas=``,
    ...) raise a ``TypeError`` naming Paddle's.

    Every subclass also takes ``fused`` (keyword only, ours; ``False`` by default), torch's switch
    for the fused-optimizer contract with a GradScaler: with ``fused=True`` the scaler hands the
    scale and its inf/NaN flag to the step, which unscales and skips itself (on a GPU with no host
    sync), so the step is called on skipped steps too; see docs/optimizers.md for what frameworks
    then can no longer do. The parameters, the scale and the skipped steps are the same either way.
    """

    # Accumulators Paddle keeps on the host whatever the parameter's device (Adam's beta powers).
    _host_state: tuple[str, ...] = ()

    # torch's flag for fused optimizers, set per instance by ``fused=True``: a GradScaler (torch's
    # or paddle_compat's) then hands over the scale and its inf/NaN flag as ``grad_scale`` and
    # ``found_inf`` instead of unscaling and skipping itself, and the step unscales as Paddle does
    # and skips on the flag without reading it on the host (``_scaler_handover``). Off by default,
    # as in torch: frameworks clip after ``unscale_`` and see a skipped step only when the scaler
    # does not call ``step`` (Lightning, Fabric, Accelerate, Hugging Face's Trainer).
    _step_supports_amp_scaling = False
    _unscales_like_paddle = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _refusing_torch_keywords(cls.__dict__["__init__"])  # type: ignore[method-assign]

    def __init__(
        self,
        learning_rate: float | LRScheduler,
        parameters: Iterable[Tensor] | Iterable[dict[str, Any]] | None,
        weight_decay: Any,
        grad_clip: Any,
        multi_precision: bool,
        defaults: dict[str, Any],
        name: str | None = None,
        fused: bool = False,
    ) -> None:
        _checks.flag("fused", fused)
        if learning_rate is None:
            raise ValueError("learning_rate is not set")
        if _is_lr_scheduler(learning_rate):
            scheduler = learning_rate
            base_lr = _scheduled_lr(learning_rate)
        elif isinstance(learning_rate, float):
            scheduler = None
            base_lr = learning_rate
            _check_lr_value(base_lr)
        else:
            raise TypeError(f"learning rate should be float or LRScheduler, got {type(learning_rate)} here")
        if parameters is None:
            raise AttributeError("parameters argument given to the Optimizer should not be None in dygraph mode.")
        if isinstance(parameters, Tensor):
            raise TypeError(
                "`parameters` argument given to the optimizer should be an iterable of paddle Tensors, "
                f"but got argument type is `{type(parameters)}`."
            )
        if isinstance(parameters, torch.nn.Module):  # else: "'Linear' object is not iterable"
            raise TypeError(
                f"`parameters` should be an iterable of Tensors (or of parameter-group dicts), but got the "
                f"{type(parameters).__name__} module itself: pass model.parameters()"
            )
        if isinstance(parameters, dict):
            raise TypeError(
                "`parameters` argument should not get dict type, if parameter groups is needed, "
                "please set `parameters` as list of dict"
            )
        if grad_clip is not None and not isinstance(grad_clip, ClipGradBase):
            raise TypeError("'grad_clip' should be an instance of GradientClipBase's derived class")
        params = [_listed(g) for g in parameters]
        # The scheduler driving the rate (None: the groups' ``lr`` is the rate); see ``_learning_rate``.
        self._compat_lr_scheduler: Any = scheduler
        # Whether the parameters came as group dicts (Paddle's ``_param_groups`` is then a list of dicts).
        self._compat_grouped = bool(params) and isinstance(params[0], dict)
        self._dtype = _first_dtype(params)  # Paddle's: the first parameter's dtype; its LR tensor's follows
        self._name = name
        self._multi_precision = _checks.flag("multi_precision", multi_precision)
        self._compat_engine = Engine()  # plans and scratch buffers of the updates
        defaults = {
            "lr": base_lr,
            "learning_rate": 1.0,
            "weight_decay": self._check_weight_decay(weight_decay),
            "grad_clip": grad_clip,
            **defaults,
        }
        super().__init__(params, defaults)
        # the options each group holds and a step reads (torch adds its own keys to ``defaults``)
        self._compat_options = tuple(defaults)
        self._step_supports_amp_scaling = fused
        _drive_by(scheduler, self)

    # --- parameter groups ----------------------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """torch's ``add_param_group``, checking Paddle's group options first.

        A group without ``"params"`` is a ``ValueError`` naming the key (torch: ``KeyError``; Paddle
        asserts), as is a missing required argument.
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"a parameter group should be a dict, but received {type(param_group).__name__}")
        if "params" not in param_group:
            raise ValueError(
                f"parameter group {len(self.param_groups)} has no 'params': each group dict lists its "
                "parameters under 'params'"
            )
        group = dict(param_group)
        if "weight_decay" in group:
            group["weight_decay"] = self._check_weight_decay(group["weight_decay"])
        if "learning_rate" in group:
            ratio = group["learning_rate"]
            if not _checks.is_real(ratio):
                raise TypeError(f"the learning_rate of a parameter group should be a float, got {type(ratio)}")
            _check_lr_value(ratio)
            group["learning_rate"] = float(ratio)
        if group.get("grad_clip") is not None and not isinstance(group["grad_clip"], ClipGradBase):
            raise TypeError("'grad_clip' should be an instance of GradientClipBase's derived class")
        params = group.get("params")
        for index, p in enumerate([params] if isinstance(params, Tensor) else params or []):
            name, p = p if isinstance(p, tuple) and len(p) == 2 else (None, p)  # named_parameters()
            where = f"parameter {index}" + (f" ({name!r})" if isinstance(name, str) else "")
            where += f" of parameter group {len(self.param_groups)}"
            if isinstance(p, Tensor) and p.layout != torch.strided:
                raise TypeError(
                    f"{where} is a {p.layout} tensor: paddle_compat optimizers update dense (strided) parameters"
                )
            # Paddle's CPU kernels have none for them: complex ones would be updated silently or
            # fail mid-step (Adam, Lamb, Rprop), integer ones fail at the first step.
            if isinstance(p, Tensor) and not p.is_floating_point():
                raise TypeError(
                    f"{where} is a {p.dtype} tensor: paddle_compat optimizers update floating-point "
                    "(float16, bfloat16, float32, float64) parameters"
                )
        self._check_group(group)
        super().add_param_group(group)

    def _check_weight_decay(self, weight_decay: Any) -> Any:
        """float or int -> ``L2Decay``; a regularizer or ``None`` as is (AdamW overrides)."""
        if weight_decay is None or isinstance(weight_decay, WeightDecayRegularizer):
            return weight_decay
        if _checks.is_real(weight_decay):
            return L2Decay(float(_checks.real("weight_decay", weight_decay)))
        raise TypeError(
            f"weight_decay should be a float, an L2Decay/L1Decay regularizer or None, got {type(weight_decay)}"
        )

    def _check_group(self, group: dict[str, Any]) -> None:
        """Validate a subclass's own group options (defaults are filled in later by torch)."""

    # --- Paddle's attributes ---------------------------------------------------------------------
    @property
    def _learning_rate(self) -> Any:
        """Paddle's ``_learning_rate``: the ``LRScheduler`` driving the rate, else the base rate (float).

        The base rate is the first group's ``lr`` (torch's LR schedulers change it). Assigning a
        float sets every group's rate; assigning a scheduler is ``set_lr_scheduler``. (In Paddle,
        assigning a float after the first step has no effect on the updates.)
        """
        scheduler = self._compat_lr_scheduler
        return scheduler if scheduler is not None else float(self.param_groups[0]["lr"])

    @_learning_rate.setter
    def _learning_rate(self, value: Any) -> None:
        if _is_lr_scheduler(value):
            self.set_lr_scheduler(value)
            return
        if not _checks.is_real(value):
            raise TypeError(f"learning rate should be float or LRScheduler, got {type(value)} here")
        _check_lr_value(value)
        self._compat_lr_scheduler = None
        for group in self.param_groups:
            group["lr"] = float(value)
        self._compat_engine.rate_moved(self)

    @property
    def _param_groups(self) -> list[Any]:
        """Paddle's ``_param_groups``: the list of parameters, or of group dicts when given groups.

        Without groups it is the first group's own ``params`` list; with groups, torch's group dicts
        (Paddle's keys ``params``, ``learning_rate``, ``weight_decay``, ``grad_clip`` and the
        optimizer's options, plus torch's ``lr``).
        """
        if self._compat_grouped or len(self.param_groups) != 1:
            return self.param_groups
        return self.param_groups[0]["params"]

    @property
    def _parameter_list(self) -> list[Any]:
        """Paddle's ``_parameter_list``: the parameters (or group dicts) the optimizer was given.

        The same list as ``_param_groups`` (in Paddle too without groups; with groups, Paddle keeps the
        caller's dicts, here the groups themselves).
        """
        return self._param_groups

    @property
    def _grad_clip(self) -> Any:
        """Paddle's ``_grad_clip``: the optimizer's clip (or ``None``).

        Replacing it (as Paddle's distributed wrappers do, with any callable taking and returning the
        ``(param, grad)`` list) changes the clip of an optimizer built without groups; with groups,
        each group keeps the clip it was given, as in Paddle.
        """
        return self.defaults["grad_clip"]

    @_grad_clip.setter
    def _grad_clip(self, clip: Any) -> None:
        if clip is not None and not callable(clip):
            raise TypeError(f"_grad_clip should be a gradient clip or None, but received {type(clip).__name__}")
        self.defaults["grad_clip"] = clip
        if not self._compat_grouped and len(self.param_groups) == 1:
            self.param_groups[0]["grad_clip"] = clip

    def _create_master_weight(self, param: Tensor) -> Tensor:
        """Paddle's hook: the float32 master weight of ``param``, created now if it does not exist yet.

        Paddle code tests for this method to know that an optimizer keeps master weights
        (``multi_precision=True``); they are otherwise created at the first update.
        """
        state = self.state[param]
        if not state:
            group = next(g for g in self.param_groups if any(q is param for q in g["params"]))
            self._init_state(param, state, group)
        if "master_weight" not in state:
            state["master_weight"] = param.detach().to(torch.float32, copy=True)
        return state["master_weight"]

    @property
    def regularization(self) -> WeightDecayRegularizer | None:
        """Paddle's ``regularization``: the regularizer added to the gradients (``None`` for AdamW,
        and for Momentum's L2 decay, which its kernel applies)."""
        return self._regularizer(self.defaults)

    # --- learning rate -------------------------------------------------------------------------
    def get_lr(self) -> float:
        """The current base learning rate: the scheduler's value when one drives it, as Paddle."""
        lr = self._learning_rate
        return lr if isinstance(lr, float) else lr()

    def set_lr(self, value: float) -> None:
        """Set the base learning rate of every group (refused when a Paddle-style scheduler is set)."""
        if not _checks.is_real(value):
            raise TypeError(f"The type of 'value' in optimizer.set_lr must be float, but received {type(value)}.")
        if self._compat_lr_scheduler is not None:
            raise RuntimeError(
                "optimizer's learning rate can't be LRScheduler when invoke this API, "
                "because this will lead to conflict."
            )
        self._learning_rate = value

    def set_lr_scheduler(self, scheduler: Any) -> None:
        """Let a Paddle-style ``LRScheduler`` drive the rate from now on (it is read at each step)."""
        if not _is_lr_scheduler(scheduler):
            raise TypeError(
                "The type of 'scheduler' in optimizer.set_lr_scheduler must be LRScheduler, "
                f"but received {type(scheduler)}."
            )
        lr = _scheduled_lr(scheduler)
        self._compat_lr_scheduler = scheduler
        for group in self.param_groups:
            group["lr"] = lr
        _drive_by(scheduler, self)

    def _read_lr_scheduler(self, at_step: bool = True) -> None:
        """Put the scheduler's current rate into every group's ``lr``: at each step, as Paddle, and
        (``at_step=False``) when one of ours moves, as torch's schedulers do.

        Paddle reads ``float(scheduler())`` into its LR tensor in each step, before the updates;
        ``_group_lr`` rounds it to that tensor's dtype. A rate the step would refuse is left for the
        step to refuse.
        """
        scheduler = self._compat_lr_scheduler
        if scheduler is None or not (at_step or _is_valid_lr(float(scheduler()))):
            return
        lr = _scheduled_lr(scheduler)
        for group in self.param_groups:
            group["lr"] = lr
        if not at_step:
            self._compat_engine.rate_moved(self)  # a captured step's replays read it on the device

    def _group_lr(self, group: dict[str, Any]) -> float:
        """The value of Paddle's LR tensor for this group, exactly representable in its dtype.

        Paddle holds the base rate in a tensor of the first parameter's dtype (float32 for fp16/bf16)
        and multiplies a group's ``learning_rate`` ratio into it in that dtype.
        """
        rnd = round_to(torch.float64 if self._dtype == torch.float64 else torch.float32)
        lr = rnd(group["lr"])
        ratio = group["learning_rate"]
        return lr if ratio == 1.0 else rnd(lr * rnd(ratio))

    def _param_lr(self, p: Tensor, group: dict[str, Any], group_lr: float) -> float:
        """The rate Paddle's kernel gets for ``p`` (``_create_param_lr``): the group's, scaled by
        ``p.optimize_attr["learning_rate"]`` (what ``ParamAttr(learning_rate=...)`` sets) when the
        optimizer was given a plain list of parameters.

        Paddle overwrites that attribute with the group's ratio when it is given groups (so the
        group's ratio alone counts there); it multiplies the ratio into its LR tensor, in that
        tensor's dtype, unless the ratio is 1.
        """
        ratio = attr_ratio(p)
        if ratio == 1.0 or self._compat_grouped or group is not self.param_groups[0]:
            return group_lr
        rnd = round_to(torch.float64 if self._dtype == torch.float64 else torch.float32)
        return rnd(group_lr * rnd(ratio))

    def _check_param_rates(self) -> None:
        """Refuse, before a step changes anything, a per-parameter rate ``_param_lr`` could not use:
        ``p.optimize_attr`` not a dict (or ``None``), or its ``'learning_rate'`` not a number (a
        bool, ``None``, a string, a tensor of several elements: ``TypeError``) or not finite and
        >= 0 in the learning rate's dtype (NaN, inf, -1.0, 1e39 for float32: ``ValueError``). Paddle
        applies NaN, infinite, negative and huge rates, and ``True`` as 1, and fails on the others
        mid-step. Only the rates the step reads are checked: a plain list of parameters' (with
        groups the group's ratio counts)."""
        if self._compat_grouped or len(self.param_groups) != 1:
            return
        rnd = round_to(torch.float64 if self._dtype == torch.float64 else torch.float32)
        group = self.param_groups[0]
        for index, p in enumerate(group["params"]):
            attr = getattr(p, "optimize_attr", None)
            if attr is None:
                continue
            name = group["param_names"][index] if "param_names" in group else getattr(p, "name", None)
            where = f"parameter {index}" + (f" ({name!r})" if isinstance(name, str) else "")
            if not isinstance(attr, dict):
                raise TypeError(
                    f"optimize_attr of {where} should be a dict such as {{'learning_rate': 1.0}}, "
                    f"but received {type(attr).__name__}"
                )
            ratio = attr.get("learning_rate", 1.0)
            if isinstance(ratio, Tensor) and ratio.numel() == 1 and not ratio.dtype == torch.bool:
                ratio = ratio.item()
            if not _checks.is_real(ratio):
                raise TypeError(
                    f"optimize_attr['learning_rate'] of {where} should be a float, but received "
                    + (f"a tensor of shape {list(ratio.shape)}" if isinstance(ratio, Tensor) else type(ratio).__name__)
                )
            if not (_is_valid_lr(ratio) and math.isfinite(rnd(ratio))):
                raise ValueError(
                    f"optimize_attr['learning_rate'] of {where} should be a finite number >= 0 "
                    f"(in the learning rate's dtype), but received {ratio!r}"
                )

    # --- the step ------------------------------------------------------------------------------
    @_torch_step.bypassing
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Apply clip -> regularization -> update to every parameter that has a gradient.

        torch.optim's step hooks run, and the step shows as a profiler range, as for torch's
        optimizers; see ``_torch_step``. ``torch.compile`` does not trace the update: a compiled
        function that calls ``step`` breaks its graph there and updates eagerly (``_apply_optimize``).
        """
        return _torch_step.run(self, closure)

    def minimize(
        self,
        loss: Tensor,
        startup_program: Any = None,
        parameters: Iterable[Tensor] | None = None,
        no_grad_set: Iterable[Tensor] | None = None,
    ) -> tuple[None, ParamsGrads]:
        """Paddle's dygraph ``minimize``: the gradients already exist (no backward is run).

        ``parameters`` restricts the update to those tensors and ``no_grad_set`` excludes some.
        Returns ``(None, params_grads)`` with the gradients actually applied. torch.optim's step
        hooks run (with the arguments of a ``step()`` call), and the profiler range opens, as in ``step``.
        """
        work = _torch_step.run_selected(self, self._minimize_selection(loss, parameters, no_grad_set))
        return None, [pair for _, pairs in work for pair in pairs]

    def _skipped_minimize(self, *args: Any, **kwargs: Any) -> tuple[None, ParamsGrads]:
        """What ``minimize(*args, **kwargs)`` does on a step a GradScaler skips, which does not call
        it here: Paddle's scaler calls it and its kernels skip, so its clip still runs on the
        parameters it selects (``_clip_skipped``), its ``_finish_update`` runs, and its
        ``scaler.minimize`` still returns ``(None, params_grads)``. Nothing is updated and no step
        hook runs."""
        given = inspect.signature(Optimizer.minimize).bind(self, *args, **kwargs).arguments
        work = self._work(self._minimize_selection(given["loss"], given.get("parameters"), given.get("no_grad_set")))
        with torch.no_grad():
            _clip_skipped(work)
            self._finish_update(work)
        return None, [pair for _, pairs in work for pair in pairs]

    def _minimize_selection(
        self, loss: Any, parameters: Iterable[Tensor] | None, no_grad_set: Iterable[Tensor] | None
    ) -> set[int] | None:
        """The ids of the parameters ``minimize`` steps (``None``: all), its arguments checked."""
        if not isinstance(loss, Tensor):
            raise TypeError("The loss should be an Tensor.")
        selected = None
        if parameters is not None:
            selected = {id(p) for p in parameters}
        if no_grad_set is not None:
            excluded = {id(p) for p in no_grad_set}
            every = selected if selected is not None else {id(p) for g in self.param_groups for p in g["params"]}
            selected = every - excluded
        return selected

    def _apply_optimize(self, selected: set[int] | None) -> list[tuple[dict[str, Any], ParamsGrads]]:
        """One step over the selected parameters; returns each group stepped with its
        ``(param, grad)`` pairs (the gradients before clipping, unscaled: what Paddle's
        ``minimize`` returns).

        Never traced by ``torch.compile``: it runs only inside ``_torch_step.run``/``run_selected``,
        which are ``never_traced`` (the step calls compiled C kernels through ``ctypes`` and keeps
        host-side plans keyed on tensor addresses, which Dynamo can neither trace nor guard on).
        """
        # Autograd must not record the update. This is the switch torch.no_grad() sets, set
        # directly: its Python context manager costs as much as the rest of a small step's
        # bookkeeping.
        self._check_param_rates()
        grad_enabled = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        try:
            # torch.distributed.checkpoint's get/set_state_dict create an optimizer's state with a
            # step at rate 0 on zero gradients (the empty state and the rates: cheap to check first).
            # A scheduler's rate, weight decay or Adam's beta powers would still move something:
            # create the state, change nothing.
            if not self.state and all(group["lr"] == 0 for group in self.param_groups) and _dcp.creating_state():
                work = self._work(selected)
                for group, pairs in work:
                    for p, _ in pairs:
                        self._prepare_state(p, group)
                return work
            work = self._work(selected)  # checks the gradients first: a refused one changes nothing
            self._read_lr_scheduler()
            skip, device_flag = self._scaler_handover()
            if skip:
                _clip_skipped(work)
            else:
                for group, pairs in work:
                    self._step_group(group, pairs, device_flag)
            self._finish_update(work)
            return work
        finally:
            torch._C._set_grad_enabled(grad_enabled)

    def _work(self, selected: set[int] | None) -> list[tuple[dict[str, Any], ParamsGrads]]:
        """Each group with its ``(param, grad)`` pairs to step (only ``selected`` params if given)."""
        work = []
        for group in self.param_groups:
            pairs = []
            for p in group["params"]:  # one pass: this runs at every step, for every parameter
                if not p.requires_grad or (selected is not None and id(p) not in selected):
                    continue
                main = getattr(p, "main_grad", None)  # main_grad_of, inlined: a call costs a tenth of the pass
                g = main if main is not None else p.grad  # grad_of's choice, the main_grad kept for its check
                if g is None:
                    continue
                if g.is_sparse:
                    raise RuntimeError("paddle_compat optimizers do not support sparse gradients")
                # torch checks what is assigned to .grad (shape, dtype, device); a main_grad is ours to check
                if main is not None and (g.shape != p.shape or g.device != p.device or g.dtype not in _GRAD_DTYPES):
                    self._refuse_grad(group, p, g)
                pairs.append((p, g))
            if pairs:
                work.append((group, pairs))
        return work

    def _compat_check_grads(self) -> None:
        """Refuse (as ``step`` would) a gradient the step could not take: called by a GradScaler
        before it reads or unscales any of them."""
        self._work(None)

    def _refuse_grad(self, group: dict[str, Any], p: Tensor, g: Tensor) -> None:
        """Raise for a ``main_grad`` of another shape (``ValueError``), device or dtype (``TypeError``)
        than its parameter takes, naming both, before the step changes anything: the torch forms
        would broadcast a smaller one, and the kernels read the parameter's size at its address."""
        where = f"{type(self).__name__}: the main_grad of {place(self, group, p)}"
        if g.dtype not in _GRAD_DTYPES:
            raise TypeError(f"{where} has dtype {g.dtype}; a gradient is float16, bfloat16, float32 or float64")
        if g.device != p.device:
            raise TypeError(f"{where} is on {g.device}, but the parameter is on {p.device}")
        raise ValueError(f"{where} has shape {list(g.shape)}, but the parameter has shape {list(p.shape)}")

    @never_traced
    def _skipped_step(self) -> None:
        """What a GradScaler calls instead of ``step`` on a step it skips: Paddle's scaler still
        calls its optimizer's step there, whose clip changes the gradients (``_clip_skipped``) and
        whose ``_finish_update`` runs."""
        with torch.no_grad():
            work = self._work(None)
            _clip_skipped(work)
            self._finish_update(work)

    def _scaler_handover(self) -> tuple[bool, Tensor | None]:
        """Take what a GradScaler handed over (``grad_scale``, ``found_inf``), see the class flags.

        Unscales the gradients in place when ``grad_scale`` is set, as Paddle's kernel does:
        ``g = T(f32(g) * reciprocal(f32(scale)))``, on a skipped step too, and every gradient the
        scaler checked, not only those the step updates: Paddle's scaler unscales them all before a
        ``minimize(parameters=...)`` updates some. Returns whether to skip the update (a flag on the
        CPU: read, which costs nothing) and the flag to skip on where it lives on a GPU (never read
        there: the update kernels test it themselves).
        """
        scale = getattr(self, "grad_scale", None)
        grads = unscale.grads_to_unscale(self) if scale is not None else []
        if scale is not None and grads:
            inverse = torch.reciprocal(scale.detach().to(torch.float32).reshape(()))
            # a DTensor's own shard: each element is unscaled alone (no flag, so no collective)
            unscale.unscale_([local(g) for g in grads], inverse, None, check_output=False)
        found_inf = getattr(self, "found_inf", None)
        if found_inf is None:
            return False, None
        if not _devices.gpu_kernels(found_inf):
            return bool(found_inf.item()), None
        return False, found_inf

    def _step_group(self, group: dict[str, Any], pairs: ParamsGrads, found_inf: Tensor | None) -> None:
        """clip -> regularization -> update for one parameter group (``found_inf``: a device flag);
        the engine runs the regularization and the update."""
        clip = group["grad_clip"]
        if clip is not None:
            pairs = clip(pairs)  # ClipGradByGlobalNorm scales in place, on a skipped step too, as Paddle
        if any_dtensor(p for p, _ in pairs):  # FSDP2, tensor parallel: each rank updates its local shards
            with local_shards(self, group, pairs) as local_pairs:
                self._compat_engine.update(self, group, local_pairs, found_inf)
            return
        self._compat_engine.update(self, group, pairs, found_inf)

    # --- the update: the torch form (required), the kernels' forms (optional speed-ups) ---------
    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        """Create the accumulators of ``p`` (called once, at its first update)."""

    def _kernel(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float
    ) -> Tensor:
        """The updated value of ``value`` (the master weight, or the parameter itself): the formula in
        torch form, which every optimizer defines, and the reference of its other forms.

        ``grad`` is regularized already and read only; ``lr`` is the group's rate as Paddle's LR
        tensor holds it. Paddle's GPU formulas apply where ``_devices.gpu_kernels(value)``, its CPU
        ones elsewhere. A kernel may update ``value`` in place and return it.
        """
        raise NotImplementedError

    def _finish_update(self, work: list[tuple[dict[str, Any], ParamsGrads]]) -> None:
        """What Paddle's ``_finish_update`` does after the updates, on a step the scaler skipped too
        (``work``: the step's groups with their pairs). Nothing here; Adamax advances its beta power."""

    @optional_form
    def _compiled_row(
        self, item: _Item, group: dict[str, Any], lr: float, batch: _native.Batch, gpu: bool
    ) -> bool | None:
        """Optional: add ``item``'s row to ``batch`` (for the GPU kernels with ``gpu``): ``None`` if
        the kernels cannot take it, else whether the row may be kept for the next step. Needed by
        both kernel forms below."""
        return None

    def _row_rate(
        self, p: Tensor, value: Tensor, group: dict[str, Any], lr: float, gpu: bool
    ) -> tuple[float, float | None]:
        """The numbers a kernel row of ``value`` (``p``'s, or its master weight) takes from the rate
        ``lr`` (``_param_lr``'s): its rate and, where it follows the rate too, its decay term
        (``None``: the decay is not the rate's). A ``_compiled_row`` writes these; when only the rate
        moves (a scheduler), the engine rewrites them in the rows it keeps, computed once for all
        rows of one value dtype and rate ratio: they may depend on nothing else of the parameter."""
        return lr, None

    @optional_form
    def _compiled_call(self, kern: _native.Kernels, batch: _native.Batch, group: dict[str, Any]) -> None:
        """Optional: run the optimizer's compiled CPU kernel on ``batch``."""
        raise NotImplementedError

    @optional_form
    def _multi_tensor_call(
        self, kern: _multi_tensor.Kernels, launch: _multi_tensor.Launch, group: dict[str, Any],
        found_inf: Tensor | None,
    ) -> None:
        """Optional: run the optimizer's Triton kernel on ``launch`` through ``kern`` (the kernels'
        module, or a ``_multi_tensor.Compiling`` stand-in: the step's compile-only first pass, in
        which nothing else may run); ``found_inf`` is on the launch's device."""
        raise NotImplementedError

    def _regularizer(self, group: dict[str, Any]) -> WeightDecayRegularizer | None:
        """The regularizer added to the gradient before the kernel (Momentum fuses L2Decay instead).

        As in Paddle, a group whose ``weight_decay`` is ``None`` falls back to the optimizer's.
        """
        reg = group["weight_decay"]
        return reg if reg is not None else self.defaults["weight_decay"]

    def _regularize(self, p: Tensor, g: Tensor, group: dict[str, Any]) -> Tensor:
        reg = self._regularizer(group)
        if reg is None:
            return g
        target = p
        if p.dtype != g.dtype:  # an fp32 (master) gradient on a low-precision parameter
            master = self.state[p].get("master_weight")
            target = master if master is not None else p.to(g.dtype)
        return g + reg(target, g)

    def _grad_for_kernel(self, p: Tensor, g: Tensor, group: dict[str, Any]) -> tuple[Tensor, float, bool]:
        """The gradient to hand a compiled kernel, the L2 coefficient the kernel adds itself (NaN
        for none), and whether the gradient is a fresh tensor: an ``L2Decay`` on a float32/float64
        gradient is fused (``g + param*coeff``, the same two roundings as ``_regularize``); any
        other regularizer is applied here.
        """
        reg = self._regularizer(group)
        if reg is None:
            return g, math.nan, False
        if type(reg) is L2Decay and g.dtype in (torch.float32, torch.float64):
            return g, reg._coeff_in(g.dtype), False
        return self._regularize(p, g, group), math.nan, True

    def _uses_master(self, p: Tensor) -> bool:
        return self._multi_precision and p.dtype in _LOW_PRECISION

    def _prepare_state(self, p: Tensor, group: dict[str, Any]) -> tuple[dict[str, Any], Tensor | None]:
        """``p``'s state, created at its first update, and its master weight (``None`` without)."""
        state = self.state[p]
        if not state:
            if p.dtype in _LOW_PRECISION and not self._multi_precision:  # Paddle's warning
                warnings.warn(
                    "Accumulating with FP16/BF16 in optimizer can lead to poor accuracy or slow convergence."
                    f"Consider using multi_precision=True option of the {type(self).__name__} optimizer.",
                    stacklevel=user_stacklevel(),
                )
            self._init_state(p, state, group)
        if not self._uses_master(p):
            return state, None
        master = state.get("master_weight")
        if master is None:
            # Paddle creates it lazily too, at the first update: decorate() may switch
            # multi-precision on after construction.
            master = state["master_weight"] = p.detach().to(torch.float32, copy=True)
        return state, master

    # Helpers of the torch forms: whether in-place forms walk the elements as plain expressions do,
    # and the engine's reused scratch buffers.
    _same_layout = staticmethod(same_layout)

    def _buffer(self, like: Tensor, dtype: torch.dtype, slot: str) -> Tensor:
        """A scratch tensor shaped like ``like``, shared by every parameter and step (``Engine.scratch``)."""
        return self._compat_engine.scratch(like, dtype, slot)

    # --- gradients -----------------------------------------------------------------------------
    def clear_grad(self, set_to_zero: bool = True) -> None:
        """Zero the gradients in place (``set_to_zero=True``, Paddle's default) or drop them.

        A float32 ``main_grad`` (``decorate(..., master_grad=True)``) is cleared the same way.
        """
        _checks.flag("set_to_zero", set_to_zero)
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    clear_grads(p, set_to_none=not set_to_zero)

    clear_gradients = clear_grad

    @never_traced  # as torch.optim's
    def zero_grad(self, set_to_none: bool = True) -> None:
        """torch.optim's ``zero_grad``: drop the gradients, or with ``set_to_none=False`` detach and
        zero them in place; a ``main_grad`` too (torch's knows none: it would accumulate across
        steps). torch.optim opens its profiler range at every call, about 100 µs a step on cold
        caches; here the same range opens only while a profiler records."""
        with torch.autograd.profiler.record_function(self._zero_grad_profile_name) if (
            torch.autograd._profiler_enabled()
        ) else contextlib.nullcontext():
            for group in self.param_groups:
                for p in group["params"]:
                    clear_grads(p, set_to_none)

    # --- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """torch's optimizer state dict, plus ``"LR_Scheduler"`` when a Paddle-style scheduler is set.

        Clip and regularizer objects in the groups are stored as plain dicts, so that the checkpoint
        loads with ``torch.load(..., weights_only=True)`` (torch's default).
        """
        sd = super().state_dict()
        sd["param_groups"] = [{k: _encode(v) for k, v in g.items()} for g in sd["param_groups"]]
        scheduler = self._compat_lr_scheduler
        if scheduler is not None and callable(getattr(scheduler, "state_dict", None)):
            sd["LR_Scheduler"] = scheduler.state_dict()
        return sd

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's ``load_state_dict``, keeping each accumulator's saved dtype and Paddle's placement.

        torch would cast every floating state tensor to its parameter's dtype, which would round fp32
        master weights and moments of fp16/bf16 parameters to fp16/bf16. The whole dict is checked
        first and nothing changes when it is refused: group and parameter counts, learning rates
        (finite, >= 0; ``ValueError``), each state tensor's shape (the parameter's, ``[1]`` for
        Adam's beta powers; ``ValueError``) and dtype (the parameter's, or float32 for fp16/bf16
        parameters and master weights; ``TypeError``), and the ``"LR_Scheduler"`` entry, required
        when a scheduler other than ``LambdaDecay`` drives the rate, as in Paddle (``KeyError``),
        except when ``torch.distributed.checkpoint`` loads it (``set_state_dict``): it keeps only
        ``"state"`` and ``"param_groups"``, and the scheduler is checkpointed beside it. A whole
        tensor loaded for a DTensor parameter is sharded as the parameter.
        """
        decoded = self._check_state_dict(state_dict)
        scheduler = self._compat_lr_scheduler
        if scheduler is not None and "LR_Scheduler" in state_dict:
            setter = getattr(scheduler, "set_state_dict", None) or scheduler.load_state_dict
            setter(state_dict["LR_Scheduler"])
        super().load_state_dict({**state_dict, "param_groups": decoded})
        saved_ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for saved_id, p in zip(saved_ids, params):
            for key, value in state_dict["state"].get(saved_id, {}).items():
                if isinstance(value, Tensor):
                    device = torch.device("cpu") if key in self._host_state else p.device
                    value = value.detach().to(device=device, copy=True)
                    if key not in self._host_state and is_dtensor(p) and not is_dtensor(value):
                        value = distribute_like(value, p)  # a whole tensor: this rank keeps its shard
                    self.state[p][key] = value
        self._read_lr_scheduler()

    def _check_state_dict(self, state_dict: Any) -> list[dict[str, Any]]:
        """Raise, changing nothing, unless ``load_state_dict(state_dict)`` can load all of it;
        return its parameter groups with their clips and regularizers rebuilt (and checked)."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict should be a dict, but received {type(state_dict).__name__}")
        missing = [key for key in ("state", "param_groups") if key not in state_dict]
        if missing:
            raise KeyError(f"the optimizer state_dict lacks the keys {missing}")
        if not isinstance(state_dict["state"], dict):
            raise TypeError(f"state_dict['state'] should be a dict, but received {type(state_dict['state']).__name__}")
        saved_groups = state_dict["param_groups"]
        if not isinstance(saved_groups, list) or not all(isinstance(g, dict) and "params" in g for g in saved_groups):
            raise TypeError("state_dict['param_groups'] should be a list of dicts, each with its 'params'")
        if len(saved_groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        decoded = []
        for i, (saved, group) in enumerate(zip(saved_groups, self.param_groups)):
            decoded.append(self._check_saved_group(f"state_dict['param_groups'][{i}]", saved))
            if len(saved["params"]) != len(group["params"]):
                raise ValueError(
                    "loaded state dict contains a parameter group that doesn't match the size of optimizer's group"
                )
            for key in ("lr", "learning_rate"):
                value = saved.get(key, 0.0)
                if not _is_valid_lr(value):
                    raise ValueError(
                        f"state_dict['param_groups'][{i}][{key!r}] should be a finite learning rate >= 0, "
                        f"but it is {value!r}"
                    )
            for saved_id, p in zip(saved["params"], group["params"]):
                entry = state_dict["state"].get(saved_id, {})
                # A parameter stepped before: the step will read every accumulator it creates.
                needed = self._state_keys(p, {**group, **decoded[-1]}) if entry else []
                lacking = [key for key in needed if key not in entry]
                if lacking:
                    raise KeyError(f"state_dict['state'][{saved_id}] lacks the keys {lacking}")
                for key, value in entry.items():
                    where = f"state_dict['state'][{saved_id}][{key!r}]"
                    if isinstance(value, Tensor):
                        self._check_state_tensor(where, saved_id, key, value, p)
                    elif key in needed or key == "master_weight":
                        raise TypeError(f"{where} should be a tensor, but received {type(value).__name__}")
        scheduler = self._compat_lr_scheduler
        if scheduler is None:
            return decoded
        if "LR_Scheduler" not in state_dict:
            if not isinstance(scheduler, LambdaDecay) and not _dcp.loading_state():
                raise KeyError("LR_Scheduler state must be included in the state dict except LambdaDecay")
            return decoded
        check = getattr(scheduler, "_check_state_dict", None)  # ours check without loading
        if check is not None:
            check(state_dict["LR_Scheduler"])
        return decoded

    def _check_saved_group(self, where: str, saved: dict[str, Any]) -> dict[str, Any]:
        """A saved group's options, checked as the constructor checks them (``TypeError`` or
        ``ValueError`` naming the entry; ``ValueError`` when one is missing), its clip and
        regularizer rebuilt by their constructors."""
        group = {key: _decode(value, f"{where}[{key!r}]") for key, value in saved.items()}
        # torch takes the saved groups whole: an option missing there (another optimizer's state
        # dict: SGD's into Lamb) would be a KeyError at every step
        missing = [key for key in self._compat_options if key not in group]
        if missing:
            raise ValueError(
                f"{where} lacks the options {missing} of {type(self).__name__} "
                "(is it the state dict of another optimizer?)"
            )
        try:
            if "weight_decay" in group:
                group["weight_decay"] = self._check_weight_decay(group["weight_decay"])
            if group.get("grad_clip") is not None and not isinstance(group["grad_clip"], ClipGradBase):
                raise TypeError("'grad_clip' should be an instance of GradientClipBase's derived class")
            self._check_group(group)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{where}: {error}") from None
        return group

    def _state_keys(self, p: Tensor, group: dict[str, Any]) -> list[str]:
        """The accumulators the step creates for ``p`` (made on the meta device: no memory)."""
        probe: dict[str, Any] = {}
        self._init_state(torch.empty_like(p, device="meta"), probe, group)
        return list(probe)

    def _check_state_tensor(self, where: str, index: Any, key: str, value: Tensor, p: Tensor) -> None:
        if not value.is_floating_point():
            raise TypeError(f"{where} has dtype {value.dtype}; optimizer state should be floating point")
        if key in self._host_state:
            if value.shape != (1,):
                raise ValueError(f"{where} has shape {list(value.shape)}, but it should have shape [1]")
        elif value.shape != p.shape:
            raise ValueError(f"{where} has shape {list(value.shape)}, but parameter {index} has shape {list(p.shape)}")
        allowed = [torch.float32] if key == "master_weight" else list(dict.fromkeys([p.dtype, compute_dtype(p)]))
        if value.dtype not in allowed:
            raise TypeError(
                f"{where} has dtype {value.dtype}, but parameter {index} ({p.dtype}) takes "
                + " or ".join(str(d) for d in allowed)
            )

    # --- pickling and copies -------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """torch's keys plus our attributes, so a pickled or deep-copied optimizer resumes the same
        trajectory (torch's own ``__getstate__`` keeps only ``defaults``, ``state`` and
        ``param_groups``)."""
        state = super().__getstate__()
        for key, value in self.__dict__.items():
            torch_own = key.startswith(("_optimizer_", "_zero_grad", "_warned"))
            if key not in state and key not in _TRANSIENT and not torch_own:
                state[key] = value
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        _drive_by(self.__dict__.get("_compat_lr_scheduler"), self)  # the scheduler does not keep it

    def set_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Paddle's name for ``load_state_dict``."""
        self.load_state_dict(state_dict)


# What a copy does not take: what torch's LR schedulers install on the instance (they install it
# again). The engine's caches are left behind by the engine itself (``Engine.__reduce__``).
_TRANSIENT = frozenset({"step", "_opt_called"})

_TAG = "paddle_compat_object"


def _encode(value: Any) -> Any:
    """A clip or regularizer object, or a ``TensorOption``, as a plain dict (other values as they are)."""
    if isinstance(value, TensorOption):
        return {_TAG: "Tensor", "value": float(value)}
    if isinstance(value, (ClipGradBase, WeightDecayRegularizer)):
        return {_TAG: type(value).__name__, **vars(value)}
    return value


def _decode(value: Any, where: str) -> Any:
    """The inverse of ``_encode``: the object rebuilt by its constructor, which checks its fields
    (a ``clip_norm`` of NaN would turn every parameter NaN); errors name ``where``."""
    if not (isinstance(value, dict) and _TAG in value):
        return value
    known: dict[str, type[Any]] = {c.__name__: c for c in (*_subclasses(ClipGradBase), L1Decay, L2Decay)}
    fields = dict(value)
    name = fields.pop(_TAG)
    if name == "Tensor" and set(fields) == {"value"} and _checks.is_real(fields["value"]):
        return TensorOption(fields["value"])
    if name not in known:
        raise ValueError(f"{where}: unknown object in the optimizer state dict: {name!r}")
    try:  # the constructors take the fields ``_encode`` saved, by name (``_coeff``: ``coeff``)
        return known[name](**{key.lstrip("_"): field for key, field in fields.items()})
    except (TypeError, ValueError) as error:
        raise type(error)(f"{where}: {error}") from None


def _subclasses(cls: type[Any]) -> list[type[Any]]:
    """``cls``'s subclasses, theirs too (fleet's hybrid clip among the clips, once imported)."""
    found: list[type[Any]] = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def _is_valid_lr(value: Any) -> bool:
    """A learning rate (or group ratio) is a finite number >= 0."""
    return _checks.is_real(value) and value >= 0.0 and not math.isinf(value)


def _clip_skipped(work: list[tuple[dict[str, Any], ParamsGrads]]) -> None:
    """What Paddle's step does to the gradients on a step its scaler skips: the clip still runs,
    and ``ClipGradByGlobalNorm`` scales them in place by ``max_norm / max(norm, max_norm)``: by 0
    (NaN where a gradient is inf or NaN) after an overflow, by NaN when one is NaN. The other clips
    and weight decay make new tensors and leave ``param.grad`` alone, so they need not run."""
    for group, pairs in work:
        if isinstance(group["grad_clip"], ClipGradByGlobalNorm):
            group["grad_clip"](pairs)


def _check_lr_value(value: float) -> None:
    if not _is_valid_lr(value):
        raise ValueError(f"learning_rate should be a finite, non-negative float, but received {value}")


def _listed(item: Any) -> Any:
    """A parameter group with its ``params`` turned into a list (a generator would be consumed)."""
    if isinstance(item, dict) and "params" in item and not isinstance(item["params"], (Tensor, set)):
        return {**item, "params": list(item["params"])}
    return item


def _drive_by(scheduler: Any, optimizer: Optimizer) -> None:
    """Tell one of our schedulers that it drives ``optimizer`` (torch's protocol: ``optimizer``,
    ``get_last_lr``, the groups' ``lr`` set at its ``step``); other schedulers are only read."""
    if isinstance(scheduler, LRScheduler):
        scheduler._drive(optimizer)


def _scheduled_lr(scheduler: Any) -> float:
    """The scheduler's current rate as Paddle reads it (``float(scheduler())``), checked."""
    lr = float(scheduler())
    if not _is_valid_lr(lr):
        raise ValueError(
            f"the learning rate given by {type(scheduler).__name__} should be finite and non-negative, "
            f"but it is {lr}"
        )
    return lr


def _first_dtype(params: list[Any]) -> torch.dtype | None:
    """Paddle's ``Optimizer._dtype``: the dtype of the first parameter (``None`` without any).

    Paddle's LR tensor takes it, with fp16/bf16 promoted to float32 (``_group_lr``).
    """
    first = params[0] if params else None
    if isinstance(first, dict):
        group_params = first.get("params")
        first = group_params if isinstance(group_params, Tensor) else next(iter(group_params or []), None)
    if isinstance(first, tuple):
        first = first[1]
    return first.dtype if isinstance(first, Tensor) else None
