"""Per-layer forward/backward taps, on a torch module or (duck-typed) a Paddle layer.

Every layer (the model itself included, named ``(model)``) gets a forward hook that keeps a copy of
its output (the first tensor when it returns several) and puts a gradient hook on that output, which
keeps the gradient flowing back into the layer. Hooks fire children-first, so the first layer whose
output differs between two runs, in firing order, is the first that computes differently.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from ._arrays import copy_of

__all__ = ["LayerWatcher", "first_tensor", "named_layers", "wants_grad"]

MODEL = "(model)"


def first_tensor(output: Any) -> Any:
    """The first tensor (torch or Paddle) in a layer's output, searching tuples and lists; else ``None``."""
    if isinstance(output, (tuple, list)):
        for item in output:
            found = first_tensor(item)
            if found is not None:
                return found
        return None
    if hasattr(output, "shape") and (hasattr(output, "detach") or callable(getattr(output, "numpy", None))):
        return output
    return None


def wants_grad(t: Any) -> bool:
    """Whether a gradient will flow into ``t`` (torch or Paddle)."""
    if hasattr(t, "stop_gradient"):  # Paddle
        return not t.stop_gradient
    return bool(getattr(t, "requires_grad", False))


def named_layers(model: Any) -> tuple[list[tuple[str, Any]], str]:
    """Every layer of a torch module or a Paddle layer, the model itself first (path ``""``), and
    the name of its framework's forward-hook method."""
    if callable(getattr(model, "named_modules", None)):  # torch
        return list(model.named_modules()), "register_forward_hook"
    if callable(getattr(model, "named_sublayers", None)):  # Paddle
        return list(model.named_sublayers(include_self=True)), "register_forward_post_hook"
    raise TypeError(f"cannot watch the layers of {type(model).__name__}")


class LayerWatcher:
    """Taps every layer of ``model``; :meth:`drain` hands over what one step produced.

    Args:
        model: a ``torch.nn.Module`` or a ``paddle.nn.Layer``.
        rename: maps a layer's own path to the name to record (a Paddle layer's path to the torch
            port's, for instance).
    """

    def __init__(self, model: Any, rename: Callable[[str], str] | None = None) -> None:
        rename = rename or (lambda name: name)
        layers, register = named_layers(model)
        self.active = True  # False: the hooks copy nothing (steps a recorder does not keep)
        self._outputs: list[tuple[str, np.ndarray]] = []
        self._grads: list[tuple[str, np.ndarray]] = []
        self._calls: Counter[str] = Counter()
        self._handles = []
        for path, layer in layers:
            name = rename(path) if path else MODEL
            self._handles.append(getattr(layer, register)(self._hook(name)))

    def _hook(self, name: str) -> Callable[..., None]:
        def hook(layer: Any, inputs: Any, output: Any) -> None:
            t = first_tensor(output) if self.active else None
            if t is None:
                return
            n = self._calls[name]
            self._calls[name] += 1
            key = name if n == 0 else f"{name}#{n}"  # a layer called twice in a step
            self._outputs.append((key, copy_of(t)))
            if wants_grad(t):
                t.register_hook(self._grad_hook(key))

        return hook

    def _grad_hook(self, key: str) -> Callable[[Any], None]:
        def hook(grad: Any) -> None:
            self._grads.append((key, copy_of(grad)))

        return hook

    def drain(self) -> tuple[list[tuple[str, np.ndarray]], list[tuple[str, np.ndarray]]]:
        """``(outputs in forward order, gradients in backward order)`` since the last call."""
        out, grads = self._outputs, self._grads
        self._outputs, self._grads, self._calls = [], [], Counter()
        return out, grads

    def remove(self) -> None:
        """Remove every hook."""
        for h in self._handles:
            h.remove()
        self._handles = []
