"""The scaler constructor's two dialects: Paddle's arguments, and torch's that newer Paddle accepts.

Paddle (3.x, and torch-style since Paddle PR #77981) reads a ``GradScaler(...)`` call like this:

* keywords: Paddle's names, or torch's aliases ``enabled``, ``init_scale``, ``growth_factor``,
  ``backoff_factor``, ``growth_interval``, freely mixed; an argument given under both names is a
  ``ValueError``; ``device=`` is accepted and ignored (the scale lives where the grads are);
* positionals: Paddle's order when the first one is a bool; a leading device string, or a first
  argument that is a number, means torch's order ``(init_scale, growth_factor, backoff_factor,
  growth_interval, enabled)``.

Where Paddle quietly drops a value we raise ``TypeError`` as Python would: a torch positional past
the fifth, and an argument given both by position and by keyword. ``AmpScaler`` takes Paddle's
dialect only, as in Paddle; a torch name there gets an error naming Paddle's.

``defaults="2.x"`` (ours) gives the defaults of Paddle 2.x's ``GradScaler`` (``32768``, 1000 steps,
2 overflows per decrease) to code ported from that era.
"""

from __future__ import annotations

import inspect
from typing import Any

from .. import _checks

__all__ = ["PADDLE_ORDER", "TORCH_ALIASES", "renamed", "resolve", "signature"]

# Paddle's positional order.
PADDLE_ORDER = (
    "enable",
    "init_loss_scaling",
    "incr_ratio",
    "decr_ratio",
    "incr_every_n_steps",
    "decr_every_n_nan_or_inf",
    "use_dynamic_loss_scaling",
)
# torch's name -> Paddle's, in the order Paddle checks them for conflicts.
TORCH_ALIASES = {
    "enabled": "enable",
    "init_scale": "init_loss_scaling",
    "growth_factor": "incr_ratio",
    "backoff_factor": "decr_ratio",
    "growth_interval": "incr_every_n_steps",
}
TORCH_ORDER = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")
KEYWORD_ONLY = ("min_loss_scaling", "max_loss_scaling", "process_group", "defaults")
# Names newcomers write for Paddle's, neither Paddle's nor torch's: what to write instead.
SLIPS = {
    **dict.fromkeys(("init_scale_loss", "init_loss_scale", "init_scaling", "loss_scale", "loss_scaling"),
                    "Paddle's name is 'init_loss_scaling'"),
    **dict.fromkeys(("dynamic", "dynamic_loss_scaling", "use_dynamic_loss_scale"),
                    "Paddle's name is 'use_dynamic_loss_scaling'"),
}

DEFAULTS = {
    # class name -> dialect of defaults -> Paddle's values for the arguments that differ
    "AmpScaler": {"3.x": {"init_loss_scaling": 2.0**15, "incr_every_n_steps": 1000, "decr_every_n_nan_or_inf": 1}},
    "GradScaler": {
        "3.x": {"init_loss_scaling": 2.0**16, "incr_every_n_steps": 2000, "decr_every_n_nan_or_inf": 1},
        "2.x": {"init_loss_scaling": 2.0**15, "incr_every_n_steps": 1000, "decr_every_n_nan_or_inf": 2},
    },
}
DEFAULTS["AmpScaler"]["2.x"] = DEFAULTS["AmpScaler"]["3.x"]  # AmpScaler's never changed
_COMMON = {"enable": True, "incr_ratio": 2.0, "decr_ratio": 0.5, "use_dynamic_loss_scaling": True}


def resolve(
    cls_name: str, family: str, args: tuple[Any, ...], kwargs: dict[str, Any], torch_dialect: bool
) -> tuple[dict[str, Any], dict[str, str]]:
    """Paddle-named keyword arguments (defaults filled in) from a constructor call.

    ``cls_name`` names the class in errors; ``family`` (``"AmpScaler"`` or ``"GradScaler"``)
    picks the defaults. Returns the arguments and, for each argument the caller gave by a torch
    name, that name (so errors can name what the caller wrote).
    """
    kwargs = dict(kwargs)
    positional: dict[str, Any] = {}
    args_list = list(args)
    device_given = kwargs.pop("device", None) is not None if torch_dialect else False
    leading_device = torch_dialect and bool(args_list) and isinstance(args_list[0], str)
    if leading_device:
        if device_given:
            raise TypeError(f"{cls_name}() got multiple values for argument 'device'")
        args_list.pop(0)
    order: tuple[str, ...]
    if torch_dialect and (leading_device or (args_list and not isinstance(args_list[0], bool))):
        order = TORCH_ORDER
        if len(args_list) > len(order):
            raise TypeError(
                f"{cls_name}() takes at most {len(order)} positional arguments in torch's order "
                f"({', '.join(order)}), got {len(args_list)}"
            )
    else:
        order = PADDLE_ORDER
        if len(args_list) > len(order):
            raise TypeError(f"{cls_name}() takes at most {len(order)} positional arguments, got {len(args_list)}")
    for name, value in zip(order, args_list):
        if name in kwargs:
            raise TypeError(f"{cls_name}() got multiple values for argument {name!r}")
        positional[name] = value

    merged = {**kwargs, **positional}
    aliases: dict[str, str] = {}
    for alias, name in TORCH_ALIASES.items():
        if alias not in merged:
            continue
        if not torch_dialect:
            raise TypeError(
                f"{cls_name}() got an unexpected keyword argument {alias!r}: Paddle's name is {name!r} "
                "(GradScaler also takes torch's names)"
            )
        if name in merged:
            if name in positional or alias in positional:
                raise TypeError(f"{cls_name}() got multiple values for argument {name!r}")
            raise ValueError(f"Cannot specify both {name!r} and its alias {alias!r}")
        merged[name] = merged.pop(alias)
        aliases[name] = alias
    unknown = [k for k in merged if k not in PADDLE_ORDER and k not in KEYWORD_ONLY]
    if unknown:
        raise _checks.unexpected_keyword(cls_name, unknown[0], SLIPS.get(unknown[0]))

    dialect = merged.pop("defaults", "3.x")
    if dialect not in DEFAULTS[family]:
        raise ValueError(f"defaults must be '3.x' or '2.x', got {dialect!r}")
    return {**_COMMON, **DEFAULTS[family][dialect], **merged}, aliases


def renamed(error: Exception, aliases: dict[str, str]) -> Exception:
    """``error`` with the Paddle name it starts with replaced by the torch name the caller used."""
    message = str(error)
    for name, alias in aliases.items():
        if message.startswith(name + " ") or message.startswith(name + ")"):
            return type(error)(alias + message[len(name):])
    return error


def signature(family: str, torch_dialect: bool) -> inspect.Signature:
    """The constructor's signature for ``help()`` and ``inspect``: Paddle's arguments with its
    defaults, then (torch dialect) torch's names, then our keyword-only options."""
    P = inspect.Parameter
    values = {**_COMMON, **DEFAULTS[family]["3.x"]}
    params = [P("self", P.POSITIONAL_OR_KEYWORD)]
    params += [P(name, P.POSITIONAL_OR_KEYWORD, default=values[name]) for name in PADDLE_ORDER]
    if torch_dialect:
        params += [P(alias, P.KEYWORD_ONLY, default=None) for alias in TORCH_ORDER]
        params.append(P("device", P.KEYWORD_ONLY, default=None))
    params += [P(name, P.KEYWORD_ONLY, default=None) for name in KEYWORD_ONLY[:-1]]
    params.append(P("defaults", P.KEYWORD_ONLY, default="3.x"))
    return inspect.Signature(params, return_annotation=None)
