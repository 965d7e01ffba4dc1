"""What ``torch.compile`` may trace of ours, and how auto_cast's casts stay right in its graphs.

TorchDynamo does not trace torch's own GradScaler: a compiled function that calls ``scale``,
``step`` or ``update`` breaks its graph there and makes the call eagerly; the ``optimizer.step``
that ``GradScaler.step`` calls is then compiled on its own, like any function called from the
eager parts of a compiled function. Our scaler gets the same treatment, for a second reason:
its host state (a lock, per-thread step state, flags in flight) is exactly what Dynamo must not
trace. It would guard on the host replica and recompile as the scale moves, and it loses writes
to ``threading.local`` objects. auto_cast's entry points are kept out for the same reason (they
change per-thread state), and its dispatcher kernels so that Dynamo never compiles their frames.

Three decorators say which code Dynamo may see:

* ``never_traced``: neither the function nor anything it calls is traced; where a compiled
  function calls it, the graph breaks once and the call runs eagerly.
* ``calls_user_code``: the function itself is not traced, but the functions it calls are handled
  as usual (so the optimizer's step is compiled, as under torch's scaler). Such a function must
  call nothing of ours except through ``never_traced`` functions.
* ``keep_out_of_dynamo``: functions whose frames are never compiled (auto_cast's kernels, which
  run from eager parts of a compiled function with Dynamo's frame hook on).

None of them imports Dynamo (which takes a second or more) before a compiled function needs it:
``never_traced`` and ``keep_out_of_dynamo`` use the C entry points, ``calls_user_code`` torch's lazy
form of ``torch.compiler.disable``. Outside ``torch.compile`` a decorated call costs about 1-2 µs.

auto_cast's casts become part of a traced graph, which must be reused only under the
configuration it was traced with: ``op_interceptor`` writes each configuration to torch's
per-thread autocast state, which Dynamo's guards check. AOTAutograd's on-disk cache keys a graph by
the graph Dynamo captured, before our casts, and by the autocast dtypes only, which cannot tell
every two configurations apart across processes (nor one paddle_compat version from another); so
it is switched off while an ``auto_cast`` is active (``cache_off``/``cache_on``), in that thread
where torch keeps its config per thread. Inductor's own cache, keyed by the graph after our casts,
stays on.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import torch

__all__ = ["cache_off", "cache_on", "calls_user_code", "keep_out_of_dynamo", "never_traced"]

P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])

_eval_frame = getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None)  # None: a torch without Dynamo


def never_traced(fn: Callable[P, R]) -> Callable[P, R]:
    """Dynamo traces neither ``fn`` nor what it calls: a graph break, then an eager call.

    What ``torch.compiler.disable`` does: the wrapper is marked so that Dynamo breaks the graph at
    the call instead of inlining it, and it switches Dynamo's frame hook off while ``fn`` runs, so
    nothing inside is compiled. Done by hand because that decorator imports Dynamo."""
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
    # Called eagerly after the graph break, the wrapper's own frame starts with Dynamo's frame
    # hook still on: it is never to be compiled either (torch's wrapper lives in a file Dynamo skips).
    keep_out_of_dynamo(wrapper)
    return wrapper


def calls_user_code(fn: F) -> F:
    """Dynamo does not trace ``fn`` itself, but compiles what it calls as usual.

    ``torch.compiler.disable(recursive=False)`` in torch's lazy form, which imports Dynamo at the
    first call (such functions call an optimizer, whose construction imported it already)."""
    lazy = getattr(torch, "_disable_dynamo", None)
    if lazy is not None:
        return lazy(fn, recursive=False)
    return torch.compiler.disable(fn, recursive=False)  # imports Dynamo now


def keep_out_of_dynamo(*functions: Callable[..., Any]) -> None:
    """Never compile these functions' frames.

    Where torch.compile runs part of a function eagerly (after a graph break), ops there reach
    our kernels with Dynamo's frame hook on, and Dynamo would try to compile each kernel's
    frame. Marking their code objects "skip" (what ``torch._dynamo.skip`` does, through the
    same C entry point) leaves them plain Python."""
    if _eval_frame is None:
        return
    if not hasattr(_eval_frame, "_FrameExecStrategy"):  # an older torch (2.6 has only this entry point)
        for function in functions:
            _eval_frame.skip_code(function.__code__)
        return
    skip = _eval_frame._FrameExecStrategy(_eval_frame._FrameAction.SKIP, _eval_frame._FrameAction.DEFAULT)
    for function in functions:
        _eval_frame.set_code_exec_strategy(function.__code__, skip)


# The module that reads the settings; torch.compile's first compile loads it.
_READER = "torch._functorch._aot_autograd.autograd_cache"


class _CacheSwitch(threading.local):
    """One thread's count and saved settings: torch keeps its config per thread (since 2.12), so
    each thread's compiles see the cache off while that thread has an auto_cast active."""

    active = 0  # auto_cast activations (with a config)
    saved: tuple[Any, Any] | None = None  # the user's settings while ours are in place


_switch = _CacheSwitch()


def cache_off() -> None:
    """One more active auto_cast: AOTAutograd's cache is off while there is any (in this
    thread, where torch keeps its config per thread)."""
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
    _switch.active -= 1
    if _switch.active == 0 and _switch.saved is not None and _READER in sys.modules:
        import torch._functorch.config as functorch_config

        functorch_config.enable_autograd_cache, functorch_config.enable_remote_autograd_cache = _switch.saved
        _switch.saved = None
