"""How ``torch.compile`` sees the scaler: as it sees ``torch.amp.GradScaler``, never traced.

TorchDynamo does not trace torch's own GradScaler: a compiled function that calls ``scale``,
``step`` or ``update`` breaks its graph there and makes the call eagerly; the ``optimizer.step``
that ``GradScaler.step`` calls is then compiled on its own, like any function called from the
eager parts of a compiled function. Our scaler gets the same treatment, for a second reason:
its host state (a lock, per-thread step state, flags in flight) is exactly what Dynamo must not
trace. It would guard on the host replica and recompile as the scale moves, and it loses writes
to ``threading.local`` objects.

Two decorators say which code Dynamo may see:

* ``never_traced``: neither the function nor anything it calls is traced; where a compiled
  function calls it, the graph breaks once and the call runs eagerly.
* ``calls_user_code``: the function itself is not traced, but the functions it calls are handled
  as usual (so the optimizer's step is compiled, as under torch's scaler). Such a function must
  call nothing of ours except through ``never_traced`` functions.

Both use torch's lazy form of ``torch.compiler.disable``, which imports Dynamo at the first call
rather than at import (building any ``torch.optim`` optimizer imports it anyway). Outside
``torch.compile`` each decorated call costs about 2 µs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch

__all__ = ["calls_user_code", "never_traced"]

F = TypeVar("F", bound=Callable[..., Any])


def _disable(fn: F, recursive: bool) -> F:
    lazy = getattr(torch, "_disable_dynamo", None)
    if lazy is not None:
        return lazy(fn, recursive=recursive)
    return torch.compiler.disable(fn, recursive=recursive)  # imports Dynamo now


def never_traced(fn: F) -> F:
    """Dynamo traces neither ``fn`` nor what it calls: a graph break, then an eager call."""
    return _disable(fn, recursive=True)


def calls_user_code(fn: F) -> F:
    """Dynamo does not trace ``fn`` itself, but compiles what it calls as usual."""
    return _disable(fn, recursive=False)
