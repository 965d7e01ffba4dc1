"""Recomputed forwards run under the ``auto_cast`` state of their first run.

Activation checkpointing runs a forward a second time, inside backward. ``auto_cast`` keeps its
state per thread and casts no op that backward runs, so without help the recomputation would see
whatever state the backward was called under (usually none) and compute in other dtypes: torch's
non-reentrant checkpoint then refuses the recomputed tensors (``CheckpointError``), the reentrant
one silently computes other gradients.

``replaying(fn)`` captures the state current now and runs ``fn`` under it, with its ops cast as
forward ops even inside backward (``op_interceptor.reenter``). ``fleet.utils.recompute`` wraps its
function with it. For ``torch.utils.checkpoint`` (``checkpoint`` in both modes,
``checkpoint_sequential``, and ``torch.distributed._composable.checkpoint``), ``install`` wraps the
function they recompute, from the first ``auto_cast`` on (nothing at import): torch offers no hook
there, so it wraps two of that module's internals, ``CheckpointFunction`` (in a subclass with the
same name) and ``_checkpoint_without_reentrant_generator`` (a patch of them made before is kept,
inside; one made later replaces ours). ``torch.utils.checkpoint.checkpoint`` itself is left alone,
which torch.compile recognises by identity. A torch without those internals gets one warning.

Difference from Paddle: its recompute restores the level (O1 or O2 only: OD raises), dtype and
lists, but not ``use_promote`` (O2 with ``use_promote=False`` recomputes with promotion); here the
whole state is restored, so a recomputation always computes what its forward computed.
"""

from __future__ import annotations

import functools
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.utils.checkpoint as torch_checkpoint

from .._stacklevel import user_stacklevel
from . import op_interceptor

R = TypeVar("R")

# torch's composable ``checkpoint(module)`` imports the generator by name.
_COMPOSABLE = "torch.distributed._composable.checkpoint_activation"
_GENERATOR = "_checkpoint_without_reentrant_generator"
_FUNCTION = "CheckpointFunction"  # the reentrant mode's autograd Function
_lock = threading.Lock()
_installed = False


def replaying(fn: Callable[..., R]) -> Callable[..., R]:
    """``fn`` bound to the ``auto_cast`` state current now: wherever it is called later (in a
    backward, in another thread), it runs under that state, and its ops are cast as in a forward.

    Example::

        >>> import torch
        >>> from paddle_compat import amp
        >>> from paddle_compat.amp.checkpoint_bridge import replaying
        >>> with amp.auto_cast(dtype="bfloat16"):
        ...     block = replaying(lambda x: x @ x)
        >>> block(torch.ones(2, 2)).dtype
        torch.bfloat16
    """
    if not callable(fn):
        raise TypeError(f"fn should be a callable, but received {type(fn).__name__}")
    config = op_interceptor.current()

    @functools.wraps(fn, updated=())  # a module's __dict__ is not copied onto the function
    def run(*args: Any, **kwargs: Any) -> R:
        token = op_interceptor.reenter(config)
        try:
            return fn(*args, **kwargs)
        finally:
            op_interceptor.leave(token)

    return run


def install() -> None:
    """Make ``torch.utils.checkpoint`` recompute under the state of the forward (once; called
    by ``auto_cast`` at its first configuration, so it costs nothing to a run without one).

    What is there is wrapped, not replaced: a patch of these names made before (the user's own)
    keeps running inside ours. On a torch whose internals differ (a name missing, or no longer a
    function or an autograd Function), those are left alone with one warning; ``auto_cast`` runs
    as before, and ``fleet.utils.recompute`` still recomputes under the forward's state."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        missing = []
        generator = getattr(torch_checkpoint, _GENERATOR, None)
        if callable(generator):
            replacement = _replaying_generator(generator)
            setattr(torch_checkpoint, _GENERATOR, replacement)
            composable = sys.modules.get(_COMPOSABLE)
            theirs = getattr(composable, _GENERATOR, None)
            if callable(theirs):  # bound by name at its import: torch's, or a patch of it
                setattr(composable, _GENERATOR, replacement if theirs is generator else _replaying_generator(theirs))
        else:
            missing.append(_GENERATOR)
        function = getattr(torch_checkpoint, _FUNCTION, None)
        if isinstance(function, type) and issubclass(function, torch.autograd.Function):
            setattr(torch_checkpoint, _FUNCTION, _replaying_function(function))
        else:
            missing.append(_FUNCTION)
        _installed = True
    if missing:
        warnings.warn(
            f"paddle_compat.amp: this torch ({torch.__version__}) has no {' or '.join(missing)} in "
            "torch.utils.checkpoint as paddle_compat knows it, so its checkpoint recomputes such functions "
            "without the forward's auto_cast state (in other dtypes: a CheckpointError, or other gradients). "
            "paddle_compat.distributed.fleet.utils.recompute is not affected; elsewhere wrap the checkpointed "
            "function with paddle_compat.amp.checkpoint_bridge.replaying.",
            stacklevel=user_stacklevel())


def _replaying_generator(generator: Callable[..., Any]) -> Callable[..., Any]:
    """torch's non-reentrant checkpoint generator with its function bound by ``replaying``."""

    @functools.wraps(generator)
    def replaying_generator(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return generator(replaying(fn), *args, **kwargs)

    return replaying_generator


def _replaying_function(base: Any) -> Any:
    """torch's reentrant ``CheckpointFunction`` with its function (its first input) bound by
    ``replaying``; what follows it is passed on as it comes."""

    class CheckpointFunction(base):  # same name: same grad_fn name
        @staticmethod
        def forward(ctx: Any, run_function: Callable[..., Any], *args: Any) -> Any:
            return base.forward(ctx, replaying(run_function), *args)

    CheckpointFunction.__module__ = base.__module__
    CheckpointFunction.__qualname__ = base.__qualname__
    return CheckpointFunction


__all__ = ["install", "replaying"]
