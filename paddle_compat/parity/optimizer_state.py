"""Optimizer accumulators, LR-scheduler and loss-scaler state between Paddle and torch.

Paddle's optimizer state dict (``.pdopt``) keys each accumulator by its parameter's Paddle name:
``{param_name}_{accumulator}_0`` with ``moment1``, ``moment2``, ``moment2_max``,
``beta1_pow_acc``, ``beta2_pow_acc`` (Adam, AdamW) or ``velocity`` (Momentum), plus
``"master_weights"`` (``{param_name: float32 array}``) and ``"LR_Scheduler"`` (the scheduler's
``state_dict()``). ``paddle_compat.optimizer`` keeps the same accumulators under the same names,
per parameter, in torch's ``{"state", "param_groups"}`` layout; ``torch.optim`` calls them
``exp_avg``, ``exp_avg_sq``, ``max_exp_avg_sq``, ``momentum_buffer``, and counts ``step`` where
Paddle keeps beta powers: ``beta_pow_acc`` starts at ``beta`` and is multiplied by ``beta`` (in
float32) after each update, so after ``t`` updates it holds ``beta**(t+1)`` rounded step by step.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from .. import _checks
from ..amp.grad_scaler import STATE_DICT_KEYS
from ..optimizer import Optimizer as PaddleStyleOptimizer
from . import pdio
from ._arrays import array_of
from .convert import NameMap, Plan, _torch_tensor, paddle_arrays

__all__ = [
    "canonical_state",
    "lr_scheduler_state_to_paddle",
    "lr_scheduler_state_to_torch",
    "optimizer_state_to_paddle",
    "optimizer_state_to_torch",
    "scaler_state_to_paddle",
]

ACCUMULATORS = ("moment1", "moment2", "moment2_max", "beta1_pow_acc", "beta2_pow_acc", "velocity")
SCALAR_ACCUMULATORS = frozenset({"beta1_pow_acc", "beta2_pow_acc"})  # shape [1], one per parameter
_TORCH_NAMES = {
    "exp_avg": "moment1",
    "exp_avg_sq": "moment2",
    "max_exp_avg_sq": "moment2_max",
    "momentum_buffer": "velocity",
}
_ACC_KEY = re.compile(r"^(" + "|".join(sorted(ACCUMULATORS, key=len, reverse=True)) + r")_(\d+)$")


# ------------------------------------------------------------------------------ beta powers <-> step

_POWERS: dict[float, list[np.float32]] = {}
_MAX_STEPS = 10_000_000


def beta_pow(beta: float, steps: int) -> np.float32:
    """Paddle's ``beta_pow_acc`` after ``steps`` updates: ``f32(beta)`` multiplied ``steps`` times by
    ``f32(beta)``, rounding to float32 each time."""
    powers = _powers(beta, steps)
    return powers[min(steps, len(powers) - 1)]


def _powers(beta: float, upto: int) -> list[np.float32]:
    b = np.float32(beta)
    powers = _POWERS.setdefault(float(b), [b])
    while len(powers) <= upto and powers[-1] != 0:  # once 0, it stays 0
        powers.append(np.float32(powers[-1] * b))
    return powers


def steps_from_beta_pow(beta: float, value: float) -> int | None:
    """The number of updates after which ``beta_pow_acc`` holds ``value`` (``None``: none, or it is
    ambiguous because the power underflowed to 0)."""
    target = np.float32(value)
    if target == 0 or not 0 < float(np.float32(beta)) < 1:
        return None
    t = 0
    while True:
        powers = _powers(beta, t + 1024)
        while t < len(powers):
            if powers[t] == target:
                return t
            if powers[t] < target or t >= _MAX_STEPS:
                return None
            t += 1
        if powers[-1] == 0:
            return None


# ------------------------------------------------------------------------------ one canonical view


# torch.optim's optimizers with a Paddle counterpart (besides every paddle_compat.optimizer one).
_TORCH_OPTIMIZERS = (torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD)


def _check_counterpart(optimizer: Any) -> None:
    if not isinstance(optimizer, (PaddleStyleOptimizer, *_TORCH_OPTIMIZERS)):
        raise TypeError(
            f"{type(optimizer).__name__}: only paddle_compat.optimizer optimizers and torch.optim Adam, AdamW "
            "and SGD have a Paddle counterpart"
        )


def _group_of(optimizer: torch.optim.Optimizer) -> dict[int, dict[str, Any]]:
    return {id(p): g for g in optimizer.param_groups for p in g["params"]}


def canonical_state(
    optimizer: torch.optim.Optimizer, *, initial: Callable[[torch.Tensor], bool] = lambda p: False
) -> dict[int, dict[str, np.ndarray]]:
    """Each parameter's optimizer state under Paddle's accumulator names.

    Returns ``{id(param): {accumulator: array}}``, in the order of the parameter groups, only for
    parameters with state. ``paddle_compat.optimizer``: as kept. ``torch.optim.Adam/AdamW``:
    ``exp_avg`` -> ``moment1``, ``exp_avg_sq`` -> ``moment2``, ``max_exp_avg_sq`` ->
    ``moment2_max``, ``step`` -> the beta powers Paddle would hold (float32 ``[1]``).
    ``torch.optim.SGD``: ``momentum_buffer`` -> ``velocity``. Other optimizers: their tensors under
    their own names.

    Args:
        optimizer: the optimizer.
        initial: which parameters without accumulators yet get the ones Paddle would have created
            (:func:`initial_state`).
    """
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}")
    renamed = isinstance(optimizer, _TORCH_OPTIMIZERS) and not isinstance(optimizer, PaddleStyleOptimizer)
    out: dict[int, dict[str, np.ndarray]] = {}
    for group in optimizer.param_groups:
        for p in group["params"]:
            accs: dict[str, np.ndarray] = {}
            for key, value in optimizer.state.get(p, {}).items():
                if not isinstance(value, torch.Tensor):
                    continue
                if not renamed:
                    accs[key] = array_of(value)[0]
                elif key == "step":
                    beta1, beta2 = group["betas"]
                    t = int(value.item())
                    accs["beta1_pow_acc"] = np.array([beta_pow(beta1, t)], np.float32)
                    accs["beta2_pow_acc"] = np.array([beta_pow(beta2, t)], np.float32)
                elif key in _TORCH_NAMES:
                    accs[_TORCH_NAMES[key]] = array_of(value)[0]
            if not any(k in accs for k in ACCUMULATORS) and initial(p):
                accs = {**initial_state(p, group, optimizer), **accs}
            if accs:
                out[id(p)] = accs
    return out


def initial_state(p: torch.Tensor, group: dict[str, Any], optimizer: Any) -> dict[str, np.ndarray]:
    """What Paddle creates for a parameter before its first update (its loader insists on every name).

    A ``paddle_compat.optimizer`` optimizer creates them itself, as Paddle does. For a
    ``torch.optim`` one, Paddle's counterpart's: moments float32 for float16/bfloat16 parameters
    (else the parameter's dtype), beta powers float32, a velocity of the parameter's dtype.
    """
    if isinstance(optimizer, PaddleStyleOptimizer):
        created: dict[str, Any] = {}
        optimizer._init_state(p, created, group)
        return {k: array_of(v)[0] for k, v in created.items()}
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        wide = np.float64 if p.dtype == torch.float64 else np.float32
        beta1, beta2 = group["betas"]
        state: dict[str, np.ndarray] = {
            "moment1": np.zeros(tuple(p.shape), wide),
            "moment2": np.zeros(tuple(p.shape), wide),
            "beta1_pow_acc": np.array([beta_pow(beta1, 0)], np.float32),
            "beta2_pow_acc": np.array([beta_pow(beta2, 0)], np.float32),
        }
        if group.get("amsgrad", False):
            state["moment2_max"] = np.zeros(tuple(p.shape), wide)
        return state
    if isinstance(optimizer, torch.optim.SGD) and optimizer.defaults.get("momentum", 0):
        return {"velocity": array_of(torch.zeros_like(p, device="cpu"))[0]}
    return {}


# ------------------------------------------------------------------------------ torch -> Paddle


def _names_table(parameter_names: Any) -> dict[str, str]:
    if isinstance(parameter_names, (str, os.PathLike, bytes)):
        return pdio.parameter_names(parameter_names)
    if isinstance(parameter_names, Mapping):
        if pdio.NAME_TABLE in parameter_names:
            return pdio.parameter_names(parameter_names)
        table = {}
        for k, v in parameter_names.items():
            name = v if isinstance(v, str) else getattr(v, "name", None)  # a Paddle state dict works too
            if not isinstance(name, str):
                raise TypeError(f"parameter_names[{k!r}] should be a Paddle parameter name, got {type(v).__name__}")
            table[k] = name
        return table
    raise TypeError(
        "parameter_names must be {structured name: Paddle parameter name}, a Paddle layer's state_dict(), "
        f"or the path of a .pdparams file, got {type(parameter_names).__name__}"
    )


def _param_names(module: torch.nn.Module) -> dict[int, str]:
    return {id(p): k for k, p in module.named_parameters(remove_duplicate=False)}


def optimizer_state_to_paddle(
    optimizer: torch.optim.Optimizer,
    module: torch.nn.Module,
    parameter_names: Any,
    *,
    name_map: NameMap | None = None,
) -> dict[str, Any]:
    """The optimizer's state as Paddle's optimizer state dict (``optimizer.set_state_dict`` takes it).

    Args:
        optimizer: a ``paddle_compat.optimizer`` optimizer, or ``torch.optim.Adam``/``AdamW``/``SGD``.
        module: the torch port holding the optimizer's parameters (its types decide the layouts).
        parameter_names: the Paddle model's structured name -> parameter name table: its
            ``layer.state_dict()``, a ``.pdparams`` path, or ``{"0.weight": "linear_0.w_0", ...}``.
        name_map: torch names -> Paddle names where the two differ.

    Returns:
        ``{"linear_0.w_0_moment1_0": array, ..., "master_weights": {...}, "LR_Scheduler": {...}}``.
        A parameter not yet updated gets Paddle's initial values (Paddle's loader insists on every
        accumulator). ``pdio.save`` writes it as a ``.pdopt`` file.

    Example::

        paddle_opt.set_state_dict(optimizer_state_to_paddle(opt, model, paddle_model.state_dict()))
    """
    _check_counterpart(optimizer)
    table = _names_table(parameter_names)
    plan = Plan.of(module, name_map)
    names = _param_names(module)
    for p in (p for g in optimizer.param_groups for p in g["params"]):
        if id(p) not in names:
            raise ValueError(f"the optimizer holds a parameter of shape {list(p.shape)} that is not in the module")
    per_acc: dict[str, dict[str, np.ndarray]] = {}
    masters: dict[str, np.ndarray] = {}
    for pid, state in canonical_state(optimizer, initial=lambda p: True).items():
        for acc, value in state.items():
            if acc == "master_weight":
                masters[names[pid]] = value
            elif acc in ACCUMULATORS:
                per_acc.setdefault(acc, {})[names[pid]] = value
    out: dict[str, Any] = {}
    for acc, arrays in per_acc.items():
        for key, value in plan.to_paddle(
            arrays, partial=True, scalar=acc in SCALAR_ACCUMULATORS, aliases=False
        ).items():
            out[f"{_lookup(table, key)}_{acc}_0"] = value
    if masters:
        out["master_weights"] = {
            _lookup(table, k): v for k, v in plan.to_paddle(masters, partial=True, aliases=False).items()
        }
    lr_state = optimizer.state_dict().get("LR_Scheduler") if isinstance(optimizer, PaddleStyleOptimizer) else None
    if lr_state is not None:
        out["LR_Scheduler"] = dict(lr_state)
    return out


def _lookup(table: dict[str, str], key: str) -> str:
    try:
        return table[key]
    except KeyError:
        raise ValueError(f"parameter_names has no Paddle name for {key!r}") from None


# ------------------------------------------------------------------------------ Paddle -> torch


def _split_key(key: str, by_name: dict[str, str]) -> tuple[str, str] | None:
    """``"linear_0.w_0_moment1_0"`` -> ``("linear_0.w_0", "moment1")`` for a known parameter name."""
    for name in sorted(by_name, key=len, reverse=True):
        if key.startswith(name + "_"):
            m = _ACC_KEY.match(key[len(name) + 1 :])
            if m:
                return name, m.group(1)
    return None


def optimizer_state_to_torch(
    state: Mapping[str, Any] | str | os.PathLike[str],
    optimizer: torch.optim.Optimizer,
    module: torch.nn.Module,
    parameter_names: Any,
    *,
    name_map: NameMap | None = None,
    steps: int | None = None,
) -> dict[str, Any]:
    """A Paddle optimizer state dict (or ``.pdopt`` file) as a state dict ``optimizer.load_state_dict``
    accepts.

    Args:
        state: Paddle's ``optimizer.state_dict()`` or the path of a ``.pdopt`` file (read without
            Paddle).
        optimizer: the torch-side optimizer over ``module``'s parameters: a ``paddle_compat.optimizer``
            one (accumulators kept as they are, ``LR_Scheduler`` passed to its Paddle-style
            scheduler) or ``torch.optim.Adam``/``AdamW``/``SGD`` (renamed; ``step`` recovered from
            the beta powers).
        module: the torch port.
        parameter_names: the Paddle model's structured name -> parameter name table (its
            ``layer.state_dict()``, a ``.pdparams`` path, or a dict).
        name_map: torch names -> Paddle names where the two differ.
        steps: the update count for ``torch.optim`` Adam when it cannot be read off the beta powers
            (they underflow to 0 after about 1000 steps with ``beta1=0.9``).

    Returns:
        ``optimizer.state_dict()`` with its ``"state"`` replaced; hyper-parameters stay the optimizer's.

    Raises:
        ValueError: an accumulator of an unknown parameter, a shape mismatch, or an unrecoverable
            ``step``; nothing is half-loaded since nothing is loaded here.

    Example::

        opt.load_state_dict(optimizer_state_to_torch("model.pdopt", opt, model, "model.pdparams"))
    """
    target = _target_format(optimizer)  # refuses an optimizer with no counterpart before any work
    raw = pdio.load(state) if isinstance(state, (str, os.PathLike)) else dict(state)
    lr_state = raw.pop("LR_Scheduler", None)
    masters_raw = raw.pop("master_weights", None) or {}
    arrays = paddle_arrays(raw)
    table = _names_table(parameter_names)
    by_name = {v: k for k, v in table.items()}
    per_acc: dict[str, dict[str, np.ndarray]] = {}
    unknown = []
    for key, value in arrays.items():
        split = _split_key(key, by_name)
        if split is None:
            unknown.append(key)
            continue
        per_acc.setdefault(split[1], {})[by_name[split[0]]] = value
    if unknown:
        raise ValueError(f"not an accumulator of a parameter in parameter_names: {', '.join(map(repr, unknown))}")
    masters = {}
    for name, value in paddle_arrays(masters_raw).items():
        if name not in by_name:
            raise ValueError(f"master weight of an unknown parameter {name!r}")
        masters[by_name[name]] = value

    plan = Plan.of(module, name_map)
    converted = {
        acc: plan.to_torch(a, partial=True, scalar=acc in SCALAR_ACCUMULATORS, what=f"Paddle {acc} accumulators")
        for acc, a in per_acc.items()
    }
    if masters:
        converted["master_weight"] = plan.to_torch(masters, partial=True, what="Paddle master weights")

    params = [p for g in optimizer.param_groups for p in g["params"]]
    index = {id(p): i for i, p in enumerate(params)}
    groups = _group_of(optimizer)
    named = dict(module.named_parameters(remove_duplicate=False))
    per_param: dict[int, dict[str, np.ndarray]] = {}
    for acc, by_key in converted.items():
        for key, value in by_key.items():
            p = named.get(key)
            if p is None or id(p) not in index:
                raise ValueError(f"Paddle holds {acc} for {key!r}, which the optimizer does not optimize")
            per_param.setdefault(id(p), {})[acc] = value

    new_state = {}
    for pid, accs in per_param.items():
        new_state[index[pid]] = target(accs, groups[pid], steps)
    sd = optimizer.state_dict()
    sd["state"] = new_state
    # Paddle's ``_learning_rate`` holds the scheduler when one drives the rate, else a float.
    if lr_state is not None and not isinstance(getattr(optimizer, "_learning_rate", 0.0), (int, float)):
        sd["LR_Scheduler"] = lr_state
    return sd


_Converter = Callable[[dict[str, np.ndarray], dict[str, Any], "int | None"], dict[str, torch.Tensor]]


def _target_format(optimizer: torch.optim.Optimizer) -> _Converter:
    _check_counterpart(optimizer)
    if isinstance(optimizer, PaddleStyleOptimizer):
        return _as_paddle_compat
    if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        return _as_torch_adam
    return _as_torch_sgd


def _as_paddle_compat(accs: dict[str, np.ndarray], group: dict[str, Any], steps: int | None) -> dict[str, torch.Tensor]:
    return {k: _torch_tensor(v) for k, v in accs.items()}


def _as_torch_adam(accs: dict[str, np.ndarray], group: dict[str, Any], steps: int | None) -> dict[str, torch.Tensor]:
    if "velocity" in accs or "master_weight" in accs:
        raise ValueError("torch.optim.Adam/AdamW keep neither velocity nor master weights")
    out = {name: _torch_tensor(accs[acc]) for name, acc in _TORCH_NAMES.items() if acc in accs}
    t = steps
    if t is None:
        beta1, beta2 = group["betas"]
        for beta, acc in ((beta1, "beta1_pow_acc"), (beta2, "beta2_pow_acc")):
            if acc in accs and t is None:
                t = steps_from_beta_pow(beta, float(np.asarray(accs[acc]).reshape(-1)[0]))
        if t is None:
            raise ValueError(
                "cannot tell the update count from Paddle's beta powers (not powers of the optimizer's betas, "
                "or underflowed to 0): pass steps="
            )
    out["step"] = torch.tensor(float(t), dtype=torch.float32)
    return out


def _as_torch_sgd(accs: dict[str, np.ndarray], group: dict[str, Any], steps: int | None) -> dict[str, torch.Tensor]:
    if set(accs) - {"velocity"}:
        raise ValueError(f"torch.optim.SGD keeps only a momentum buffer, not {sorted(set(accs) - {'velocity'})}")
    return {"momentum_buffer": _torch_tensor(accs["velocity"])} if "velocity" in accs else {}


# ------------------------------------------------------------------------------ LR scheduler, scaler


def lr_scheduler_state_to_paddle(scheduler: Any) -> dict[str, Any]:
    """A scheduler's state in Paddle's ``LRScheduler.state_dict()`` format.

    A Paddle-style scheduler (``paddle_compat.optimizer.lr``, or anything with ``set_state_dict``)
    already has it. For a ``torch.optim.lr_scheduler`` one, only what both keep carries over:
    ``last_epoch`` and the last rate (``last_lr``, of the first group).

    Args:
        scheduler: a Paddle-style or ``torch.optim.lr_scheduler`` scheduler.

    Example::

        paddle_scheduler.set_state_dict(lr_scheduler_state_to_paddle(scheduler))
    """
    _check_scheduler(scheduler)
    sd = scheduler.state_dict()
    if callable(getattr(scheduler, "set_state_dict", None)):
        return dict(sd)
    return {"last_epoch": int(sd["last_epoch"]), "last_lr": float(sd["_last_lr"][0])}


def lr_scheduler_state_to_torch(state: Mapping[str, Any], scheduler: Any) -> dict[str, Any]:
    """Paddle's ``LRScheduler.state_dict()`` as a state dict ``scheduler.load_state_dict`` accepts.

    For a Paddle-style scheduler it is the same dict. For a ``torch.optim.lr_scheduler`` one the
    scheduler's own state is kept and ``last_epoch``, ``_step_count`` and ``_last_lr`` (every group)
    are set from Paddle's ``last_epoch`` and ``last_lr``: the schedules' hyper-parameters must match.

    Args:
        state: Paddle's scheduler state (with ``last_epoch`` and ``last_lr``).
        scheduler: the torch-side scheduler that will load it.

    Example::

        scheduler.load_state_dict(lr_scheduler_state_to_torch(paddle_scheduler.state_dict(), scheduler))
    """
    _check_scheduler(scheduler)
    if not isinstance(state, Mapping):
        raise TypeError(f"state should be a dict (Paddle's scheduler state), but received {type(state).__name__}")
    for key in ("last_epoch", "last_lr"):
        if key not in state:
            raise ValueError(f"not a Paddle LR scheduler state: no {key!r}")
    epoch, rate = state["last_epoch"], state["last_lr"]
    _checks.real("state['last_epoch']", epoch)
    _checks.at_least("state['last_lr']", _checks.real("state['last_lr']", rate), 0)
    if callable(getattr(scheduler, "set_state_dict", None)):
        return dict(state)
    if epoch != int(epoch):
        raise ValueError(f"state['last_epoch'] should be a whole number for a torch scheduler, but received {epoch}")
    sd = scheduler.state_dict()
    sd["last_epoch"] = int(epoch)
    sd["_step_count"] = int(epoch) + 1
    sd["_last_lr"] = [float(rate)] * len(sd["_last_lr"])
    return sd


def _check_scheduler(scheduler: Any) -> None:
    paddle_style = callable(getattr(scheduler, "set_state_dict", None))
    if not (paddle_style or isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler)):
        raise TypeError(
            f"scheduler should be a Paddle-style or a torch LR scheduler, but received {type(scheduler).__name__}"
        )


def scaler_state_to_paddle(scaler_or_state: Any) -> dict[str, Any]:
    """A ``paddle_compat.amp.GradScaler`` state (or the scaler) in Paddle's format: its 8 keys, with
    ``scale`` a float32 numpy array of shape ``[1]`` (``{}`` for a disabled scaler). The other way
    needs nothing: ``GradScaler.load_state_dict`` takes Paddle's dict as it is.

    Args:
        scaler_or_state: the scaler, or its ``state_dict()``.

    Example::

        paddle_scaler.load_state_dict(scaler_state_to_paddle(scaler))
    """
    state = scaler_or_state.state_dict() if callable(getattr(scaler_or_state, "state_dict", None)) else scaler_or_state
    if not isinstance(state, Mapping):
        raise TypeError(f"expected a GradScaler or its state_dict(), got {type(scaler_or_state).__name__}")
    if not state:
        return {}
    missing = [k for k in STATE_DICT_KEYS if k not in state]
    if missing:
        raise ValueError(f"not a GradScaler state: missing {', '.join(map(repr, missing))}")
    out = {k: state[k] for k in STATE_DICT_KEYS}
    out["scale"] = np.asarray(array_of(state["scale"])[0], np.float32).reshape(1)
    return out
