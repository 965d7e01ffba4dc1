"""What auto_cast does so that torch.compile gives the dtypes eager gives.

The casts our dispatcher kernels make while torch.compile traces a function become part of
its graph. Three things keep that right; all of them are set up on first use, none at import
(importing Dynamo takes seconds):

* Dynamo must not trace our own Python: ``eager_only`` (entry points) and
  ``keep_out_of_dynamo`` (kernels) make it run them as plain Python.
* A graph must be reused only under the configuration it was traced with: ``op_interceptor``
  writes each configuration to torch's per-thread autocast state, which Dynamo's guards check.
* AOTAutograd's on-disk cache keys a graph by the graph Dynamo captured, before our casts, and
  by the autocast dtypes only, which cannot tell every two configurations apart across
  processes (nor one paddle_compat version from another); so it is switched off while an
  ``auto_cast`` is active (``cache_off``/``cache_on``), in that thread where torch keeps its
  config per thread. Inductor's own cache, keyed by the graph after our casts, stays on.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import torch

P = ParamSpec("P")
R = TypeVar("R")

_eval_frame = getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None)  # None: a torch without Dynamo


def eager_only(fn: Callable[P, R]) -> Callable[P, R]:
    """Make Dynamo run ``fn`` as plain Python instead of tracing it.

    Like ``torch.compiler.disable``: the wrapper is marked so that Dynamo breaks the graph at
    the call instead of inlining it, and it switches Dynamo's frame hook off while ``fn`` runs,
    so nothing inside is compiled. Done by hand because that decorator imports Dynamo."""
    if _eval_frame is None:
        return fn
    set_eval_frame = _eval_frame.set_eval_frame

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        prior = set_eval_frame(None)
        try:
            return fn(*args, **kwargs)
        finally:
            set_eval_frame(prior)

    wrapper._torchdynamo_disable = True  # type: ignore[attr-defined]  # what Dynamo checks
    return wrapper


def keep_out_of_dynamo(*functions: Callable[..., Any]) -> None:
    """Never compile these functions' frames.

    Where torch.compile runs part of a function eagerly (after a graph break), ops there reach
    our kernels with Dynamo's frame hook on, and Dynamo would try to compile each kernel's
    frame. Marking their code objects "skip" (what ``torch._dynamo.skip`` does, through the
    same C entry point) leaves them plain Python."""
    if _eval_frame is None:
        return
    skip = _eval_frame._FrameExecStrategy(_eval_frame._FrameAction.SKIP, _eval_frame._FrameAction.DEFAULT)
    for function in functions:
        _eval_frame.set_code_exec_strategy(function.__code__, skip)


# torch keeps config values per thread since 2.12 (per process before); our count of active
# auto_casts and the user's settings they replaced are kept alike, so that each thread's compiles
# see the cache off while that thread has an auto_cast active.
_PER_THREAD_CONFIG = tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 12)
# The module that reads the settings; torch.compile's first compile loads it.
_READER = "torch._functorch._aot_autograd.autograd_cache"


class _CacheSwitch:
    active = 0  # auto_cast activations (with a config)
    saved: tuple[Any, Any] | None = None  # the user's settings while ours are in place


class _ThreadCacheSwitch(_CacheSwitch, threading.local):
    pass


_switch = _ThreadCacheSwitch() if _PER_THREAD_CONFIG else _CacheSwitch()
_lock = threading.Lock()


def cache_off() -> None:
    """One more active auto_cast: AOTAutograd's cache is off while there is any (in this
    thread, where torch keeps its config per thread)."""
    with _lock:
        _switch.active += 1
        if _switch.saved is None:
            import torch._functorch.config as functorch_config  # light; torch.compile imports it anyway

            _switch.saved = (functorch_config.enable_autograd_cache, functorch_config.enable_remote_autograd_cache)
            functorch_config.enable_autograd_cache = False
            functorch_config.enable_remote_autograd_cache = False


def cache_on() -> None:
    """One active auto_cast fewer: the user's cache settings come back after the last.

    Only once the module that reads them is loaded: before that nothing has read them, and
    leaving them off spares a training loop the cost of switching them at every step (tens of
    µs: torch's config reads and writes are slow). Dynamo being imported says nothing: building
    any torch.optim optimizer imports it."""
    with _lock:
        _switch.active -= 1
        if _switch.active == 0 and _switch.saved is not None and _READER in sys.modules:
            import torch._functorch.config as functorch_config

            functorch_config.enable_autograd_cache, functorch_config.enable_remote_autograd_cache = _switch.saved
            _switch.saved = None
