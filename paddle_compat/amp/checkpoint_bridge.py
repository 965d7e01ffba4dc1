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
there, so it replaces two of that module's internals, ``CheckpointFunction`` (by a subclass with the
same name) and ``_checkpoint_without_reentrant_generator``. ``torch.utils.checkpoint.checkpoint``
itself is left alone, which torch.compile recognises by identity.

Difference from Paddle: its recompute restores the level (O1 or O2 only: OD raises), dtype and
lists, but not ``use_promote`` (O2 with ``use_promote=False`` recomputes with promotion); here the
whole state is restored, so a recomputation always computes what its forward computed.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import torch.utils.checkpoint as torch_checkpoint

from . import op_interceptor

R = TypeVar("R")

# torch's composable ``checkpoint(module)`` imports the generator by name.
_COMPOSABLE = "torch.distributed._composable.checkpoint_activation"
_GENERATOR = "_checkpoint_without_reentrant_generator"
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
    by ``auto_cast`` at its first configuration, so it costs nothing to a run without one)."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        generator = getattr(torch_checkpoint, _GENERATOR)

        def replaying_generator(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            return generator(replaying(fn), *args, **kwargs)

        setattr(torch_checkpoint, _GENERATOR, replaying_generator)
        composable = sys.modules.get(_COMPOSABLE)
        if composable is not None and getattr(composable, _GENERATOR, None) is generator:
            setattr(composable, _GENERATOR, replaying_generator)
        replacement = _replaying_function(torch_checkpoint.CheckpointFunction)
        torch_checkpoint.CheckpointFunction = replacement  # type: ignore[misc]  # a class, replaced on purpose
        _installed = True


def _replaying_function(base: Any) -> Any:
    """torch's reentrant ``CheckpointFunction`` with its function bound by ``replaying``."""

    class CheckpointFunction(base):  # same name: same grad_fn name
        @staticmethod
        def forward(ctx: Any, run_function: Callable[..., Any], preserve_rng_state: bool, *args: Any) -> Any:
            return base.forward(ctx, replaying(run_function), preserve_rng_state, *args)

    CheckpointFunction.__module__ = base.__module__
    CheckpointFunction.__qualname__ = base.__qualname__
    return CheckpointFunction


__all__ = ["install", "replaying"]
