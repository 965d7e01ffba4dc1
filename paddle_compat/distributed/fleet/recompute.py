"""Paddle's ``fleet.recompute`` (activation recompute) on ``torch.utils.checkpoint``.

The function runs under the ``auto_cast`` state of its forward when it is recomputed (level,
dtype, lists, ``use_promote``: see ``amp.checkpoint_bridge``), and with ``preserve_rng_state`` under
the forward's torch RNG states (CPU, and the inputs' device) and, as in Paddle, Python's
``random`` and numpy's global states; so the gradients are bit-identical to a run without
recompute.

Differences from Paddle: its recompute does not restore ``use_promote`` and fails at level OD;
``offload_indices`` is accepted and ignored (inputs stay on their device); the model-parallel RNG
tracker and ``custom_state_manager`` do not exist here; ``recompute_sequential`` feeds each
segment's output to the next as one input (Paddle unpacks it along its first dimension and fails,
or drops that dimension when it is 1).
"""

from __future__ import annotations

import functools
import inspect
import logging
import random
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.utils.checkpoint as torch_checkpoint

from ... import _checks
from ...amp.checkpoint_bridge import replaying

__all__ = ["recompute", "recompute_sequential"]

logger = logging.getLogger("paddle_compat.distributed")


def recompute(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``function(*args, **kwargs)`` keeping none of its activations; backward recomputes them.

    Args:
        function: a module or function: the part of the forward to recompute.
        *args: its inputs.
        **kwargs: its keyword inputs, and ``preserve_rng_state`` (default True: the recomputation
            draws the same random numbers, so dropout masks repeat) and ``use_reentrant``
            (default True, as in Paddle: ``torch.utils.checkpoint``'s reentrant mode, where
            keyword inputs are bound to positions and keyword-only parameters refuse them;
            False: its non-reentrant mode).

    Returns:
        What ``function`` returns.

    Example::

        >>> import torch
        >>> from paddle_compat.amp import auto_cast
        >>> from paddle_compat.distributed.fleet.utils import recompute
        >>> block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 4))
        >>> x = torch.randn(2, 4, requires_grad=True)
        >>> with auto_cast():
        ...     y = recompute(block, x)
        >>> y.dtype
        torch.float16
        >>> y.float().sum().backward()   # recomputed in float16, the same dropout mask
        >>> x.grad.dtype
        torch.float32
    """
    preserve = kwargs.pop("preserve_rng_state", True)
    use_reentrant = kwargs.pop("use_reentrant", True)
    if not callable(function):
        raise TypeError(f"function should be a callable (a Layer or a function), but got {type(function).__name__}.")
    preserve = _checks.flag("preserve_rng_state", preserve, int_ok=True)
    use_reentrant = _checks.flag("use_reentrant", use_reentrant, int_ok=True)
    if torch.is_grad_enabled():
        _warn_if_unnecessary([*args, *kwargs.values()])
    if not use_reentrant:
        run = functools.partial(function, **kwargs) if kwargs else function
        return torch_checkpoint.checkpoint(
            _bound(run, preserve), *args, use_reentrant=False, preserve_rng_state=preserve)
    kwargs.pop("offload_indices", None)
    layout, flat = _flatten(_positional(function, args, kwargs))

    def run_flat(*flat_args: Any) -> Any:
        return function(*_rebuild(layout, flat_args))

    return torch_checkpoint.checkpoint(
        _bound(run_flat, preserve), *flat, use_reentrant=True, preserve_rng_state=preserve)


def recompute_sequential(ctx: Mapping[str, Any], functions: torch.nn.Sequential | Sequence[Callable[..., Any]],
                         *args: Any, **kwargs: Any) -> Any:
    """Run ``functions`` in turn in ``segments`` parts, recomputing all but the last in backward.

    Args:
        ctx: ``{"segments": n}`` (default 1: nothing is recomputed) and optionally
            ``"preserve_rng_state"`` (default True).
        functions: an ``nn.Sequential`` or a sequence of callables, each taking one input.
        *args: the input of the first function.
        **kwargs: passed to ``recompute`` for each recomputed segment.

    Returns:
        The output of the last function.

    Example::

        >>> import torch
        >>> from paddle_compat.distributed.fleet.recompute import recompute_sequential
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
        >>> recompute_sequential({"segments": 2}, model, torch.ones(3, 4)).shape
        torch.Size([3, 2])
    """
    if not isinstance(ctx, Mapping):
        raise TypeError(f"ctx should be a dict with the key 'segments', but got {type(ctx).__name__}.")
    segments = ctx.get("segments", 1)
    preserve = ctx.get("preserve_rng_state", True)
    if not isinstance(functions, Iterable):
        raise TypeError("functions should be an nn.Sequential or a list of callables, "
                        f"but got {type(functions).__name__}.")
    layers = list(functions.children()) if isinstance(functions, torch.nn.Sequential) else list(functions)
    for layer in layers:
        if not callable(layer):
            raise TypeError(f"functions should hold callables, but holds a {type(layer).__name__}.")
    segments = _checks.integer("ctx['segments']", segments)
    if not 1 <= segments <= max(len(layers), 1):
        raise ValueError(f"ctx['segments'] should be between 1 and the number of functions ({len(layers)}), "
                         f"but got {segments}.")
    preserve = _checks.flag("ctx['preserve_rng_state']", preserve, int_ok=True)

    def run_segment(begin: int, end: int) -> Callable[[Any], Any]:
        def run(value: Any) -> Any:
            for layer in layers[begin:end]:
                value = layer(value)
            return value

        return run

    size = len(layers) // segments
    end = 0
    for begin in range(0, size * (segments - 1), size):
        end = begin + size
        args = (recompute(run_segment(begin, end), *args, preserve_rng_state=preserve, **kwargs),)
    return run_segment(end, len(layers))(*args)


def _bound(run: Callable[..., Any], preserve: bool) -> Callable[..., Any]:
    """``run`` recomputed under its forward's auto_cast state (and host RNG states).

    Bound here although the bridge binds torch's checkpoint too: so that recompute keeps its
    promise on a torch whose internals the bridge could not wrap (binding twice changes nothing)."""
    return replaying(_replaying_host_rng(run) if preserve else run)


def _replaying_host_rng(run: Callable[..., Any]) -> Callable[..., Any]:
    """``run`` whose later calls (the recomputations) start from the Python and numpy random
    states of now, and leave the states they found; torch's checkpoint restores torch's RNGs."""
    forward = _host_rng_state()
    calls = 0

    def replay(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:  # the forward itself
            return run(*args, **kwargs)
        outer = _host_rng_state()
        _set_host_rng_state(forward)
        try:
            return run(*args, **kwargs)
        finally:
            _set_host_rng_state(outer)

    return replay


def _host_rng_state() -> tuple[Any, Any]:
    numpy = sys.modules.get("numpy")  # a forward that draws from numpy has imported it
    return random.getstate(), None if numpy is None else numpy.random.get_state()


def _set_host_rng_state(state: tuple[Any, Any]) -> None:
    python_state, numpy_state = state
    random.setstate(python_state)
    if numpy_state is not None:
        sys.modules["numpy"].random.set_state(numpy_state)


def _warn_if_unnecessary(inputs: Sequence[Any]) -> None:
    """Paddle's log line when no tensor input (nor one in a tuple input) needs a gradient."""
    needs = [t.requires_grad for v in inputs for t in (v if type(v) is tuple else (v,)) if isinstance(t, torch.Tensor)]
    if not any(needs):
        logger.warning("[Recompute]: None of the inputs to current recompute block need grad, "
                       "therefore there is NO need to recompute this block in backward !")


def _positional(function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """Paddle's reentrant binding: positional and keyword inputs as positional ones."""
    signature = inspect.signature(function.forward if isinstance(function, torch.nn.Module) else function)
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    values: list[Any] = []
    for value, parameter in zip(bound.arguments.values(), signature.parameters.values()):
        if parameter.kind == parameter.VAR_POSITIONAL:
            values.extend(value)
        elif parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            values.append(value)
        elif parameter.kind == parameter.VAR_KEYWORD:
            values.extend(value.values())
        else:
            raise ValueError("Currently, keyword-only arguments are not supported when you want to send "
                             "kwargs(dict parameter) to function with use_reentrant=True.")
    return values


def _flatten(values: list[Any]) -> tuple[list[int | None], list[Any]]:
    """Tuples of tensors spread into separate inputs, so that their tensors get gradients (torch's
    reentrant checkpoint passes a tuple through as one opaque input); Paddle's checks on them."""
    layout: list[int | None] = []
    flat: list[Any] = []
    for value in values:
        if type(value) is tuple and any(isinstance(t, torch.Tensor) for t in value):
            if not all(isinstance(t, torch.Tensor) for t in value):
                raise ValueError("Recompute receive a tuple containing tensor and non-tensor at same time.")
            if len({t.requires_grad for t in value}) > 1:
                raise ValueError("Recompute receive a tuple containing tensor holds different stop gradient.")
            layout.append(len(value))
            flat.extend(value)
        else:
            layout.append(None)
            flat.append(value)
    return layout, flat


def _rebuild(layout: list[int | None], flat: Sequence[Any]) -> list[Any]:
    values, position = [], 0
    for size in layout:
        if size is None:
            values.append(flat[position])
            position += 1
        else:
            values.append(tuple(flat[position:position + size]))
            position += size
    return values
