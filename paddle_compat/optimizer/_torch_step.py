"""``Optimizer.step`` and torch.optim's hook-and-profiler wrapper, taken only when something needs it.

torch.optim wraps the step of every optimizer class in a profiler range and its step hooks, at each
call, even with no profiler and no hook: that costs tens of µs a step (over a hundred on the caches
a forward and backward pass leave), as much as a small step's whole update. ``Optimizer.step`` is
marked ``hooked`` so that torch leaves it alone (``bypassing``), and ``run`` takes torch's own
wrapper itself when a profiler records or a hook is registered: the hooks then run and the range
opens exactly as for torch's optimizers. ``run_selected`` does the same for ``minimize``.

Neither is traced by ``torch.compile`` (``never_traced``): Dynamo can trace neither the checks for
a profiler (a torch call that returns a bool) nor the update (ctypes calls, plans keyed on
addresses), so a compiled function that calls ``step`` or ``minimize`` breaks its graph once, at
that call, and the whole step runs eagerly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import torch
import torch.optim.optimizer as _torch_optimizer

from ..amp.compile_boundary import never_traced

if TYPE_CHECKING:
    from .optimizer import Optimizer

__all__ = ["bypassing", "run", "run_selected"]

_F = TypeVar("_F", bound=Callable[..., Any])


def bypassing(step: _F) -> _F:
    """Mark ``step`` as one torch.optim must not wrap (it calls ``run``)."""
    step.hooked = True  # type: ignore[attr-defined]  # torch's mark of a wrapped step
    step._paddle_compat_bypass = True  # type: ignore[attr-defined]
    return step


@never_traced
def run(opt: Optimizer, closure: Callable[[], Any] | None) -> Any:
    """One step of ``opt``, through torch.optim's wrapper when ``_watched``."""
    if _watched(opt):
        # the hooks see the arguments given: none for step()
        return _step_with_hooks(opt) if closure is None else _step_with_hooks(opt, closure)
    return _step(opt, closure)


@never_traced
def run_selected(opt: Optimizer, selected: set[int] | None) -> list[tuple[dict[str, Any], Any]]:
    """A step of the ``selected`` parameters (``minimize``), through torch.optim's wrapper when a
    profiler records or a hook is registered, its hooks seeing the arguments of a ``step()`` call;
    returns ``_apply_optimize``'s groups."""

    def step(opt: Optimizer, closure: Callable[[], Any] | None = None) -> list[tuple[dict[str, Any], Any]]:
        return _closure_then_update(opt, closure, selected)[1]  # a pre-hook may hand in a closure

    return torch.optim.Optimizer.profile_hook_step(step)(opt) if _hooked_or_profiled(opt) else step(opt)


def _step(opt: Optimizer, closure: Callable[[], Any] | None = None) -> Any:
    """``Optimizer.step`` without torch.optim's hooks."""
    return _closure_then_update(opt, closure, None)[0]


def _closure_then_update(
    opt: Optimizer, closure: Callable[[], Any] | None, selected: set[int] | None
) -> tuple[Any, list[tuple[dict[str, Any], Any]]]:
    """A step: the closure's loss (``None`` without one), and the groups stepped (``_apply_optimize``)."""
    loss = None
    if closure is not None:
        with torch.enable_grad():
            loss = closure()
    return loss, opt._apply_optimize(selected)


# torch.optim's own wrapper, for the steps that need it.
_step_with_hooks = torch.optim.Optimizer.profile_hook_step(_step)


def _watched(opt: Optimizer) -> bool:
    """Whether ``opt.step()`` must go through torch.optim's wrapper: a profiler records, or a step
    hook is registered, and no wrapper of torch's has run them already (around a subclass's own
    ``step`` that ends in ours; a subclass mixed in later, as ``decorate`` does, is not wrapped)."""
    resolved = type(opt).step
    if getattr(resolved, "hooked", False) and not getattr(resolved, "_paddle_compat_bypass", False):
        return False
    return _hooked_or_profiled(opt)


def _hooked_or_profiled(opt: Optimizer) -> bool:
    """Whether a profiler records or a step hook (``opt``'s or a global one) is registered."""
    return bool(
        torch.autograd._profiler_enabled()
        or opt._optimizer_step_pre_hooks
        or opt._optimizer_step_post_hooks
        or _torch_optimizer._global_optimizer_pre_hooks
        or _torch_optimizer._global_optimizer_post_hooks
    )
