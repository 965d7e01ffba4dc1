"""Helpers for the Paddle side of a parity test: call them inside the script that runs Paddle.

Paddle is imported when a helper is called, never when this module is imported.

On CPU Paddle 3.3.1 switches its ``GradScaler`` off and has no float16 kernels for matmul, add,
mean or conv (a forced O1 forward computes float32; O2 cannot run at all). What still checks a port
bit for bit there: run the port's forward and backward in torch, hand those gradients to Paddle's
own scaler and optimizer (:func:`scaler`, :func:`copy_grads`), and let each side close its own
loop (:func:`copy_params` gives the port Paddle's current parameters before each forward).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator, Mapping
from typing import Any
from unittest import mock

import numpy as np
import torch

from .. import _checks
from ..amp.master_grad import grad_of
from ._arrays import copy_of
from .convert import NameMap, Plan, paddle_to_torch, torch_to_paddle

__all__ = [
    "copy_buffers",
    "copy_grads",
    "copy_params",
    "copy_params_to_paddle",
    "enabled_scaler",
    "gpu_unscale_semantics",
    "nudge_params",
    "scaler",
    "set_amp_dtype",
]


class _GpuPlace:
    def is_gpu_place(self) -> bool:
        return True

    def is_xpu_place(self) -> bool:
        return False

    def is_custom_place(self) -> bool:
        return False


class _Tracer:
    _expected_place = _GpuPlace()


def set_amp_dtype(dtype: str = "float16") -> None:
    """Record ``dtype`` as entering ``paddle.amp.auto_cast(dtype=...)`` would (and never undoes).

    Paddle's ``GradScaler.scale`` turns dynamic scaling off unless the recorded dtype is float16;
    a CPU script that never enters ``auto_cast`` needs this to keep it on.

    Args:
        dtype: ``"float16"``, ``"bfloat16"`` or ``"float32"``.

    Example::

        paddle_side.set_amp_dtype("float16")
    """
    importlib.import_module("paddle.amp.auto_cast").amp_global_state().amp_dtype = dtype


def scaler(cls: str = "GradScaler", **kwargs: Any) -> Any:
    """A real, enabled ``paddle.amp.GradScaler`` (or ``AmpScaler``) on CPU.

    Paddle enables its scaler only when the tracer's place is a GPU, XPU or custom device; its
    logic is plain Python and its kernels run on CPU, so only the constructor is shown a GPU place.
    Also records float16 as the AMP dtype (see :func:`set_amp_dtype`).

    Args:
        cls: ``"GradScaler"`` or ``"AmpScaler"``.
        **kwargs: the scaler's arguments.

    Example::

        pscaler = paddle_side.scaler(init_loss_scaling=2.0**24, incr_every_n_steps=20)
    """
    made = enabled_scaler(cls, **kwargs)
    set_amp_dtype("float16")  # read by the scaler's scale(), not by its constructor
    return made


def enabled_scaler(cls: str, **kwargs: Any) -> Any:
    """:func:`scaler` without recording an AMP dtype (for callers that set their own).

    Args:
        cls: ``"GradScaler"`` or ``"AmpScaler"``.
        **kwargs: the scaler's arguments.

    Example::

        pscaler = paddle_side.enabled_scaler("AmpScaler", init_loss_scaling=1024.0)
    """
    if cls not in ("GradScaler", "AmpScaler"):
        raise ValueError(f"cls must be 'GradScaler' or 'AmpScaler', got {cls!r}")
    grad_scaler = importlib.import_module("paddle.amp.grad_scaler")
    with mock.patch.object(grad_scaler, "_dygraph_tracer", lambda: _Tracer()):
        return getattr(grad_scaler, cls)(**kwargs)


class _GpuKernelSemantics:
    """``check_finite_and_unscale`` as Paddle's GPU kernel computes it, in Paddle ops:
    ``out = cast(cast(x, float32) * reciprocal(scale), x.dtype)`` for every tensor, and found_inf
    set when an output is inf/NaN. (The CPU kernel looks at the inputs, turns every tensor from the
    first bad one on into zeros, and flushes subnormals.) Every other op is the real one."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    @staticmethod
    def check_finite_and_unscale(xs: Any, scale: Any, outs: Any, found_inf: Any) -> Any:
        paddle = importlib.import_module("paddle")
        inv = paddle.reciprocal(scale)
        bad = False
        for x, out in zip(xs, outs, strict=True):
            y = paddle.cast(paddle.cast(x, "float32") * inv, x.dtype)
            bad = bad or not bool(paddle.isfinite(y).all())
            paddle.assign(y, out)
        paddle.assign(paddle.to_tensor(np.array([bad])), found_inf)
        return outs, found_inf


@contextlib.contextmanager
def gpu_unscale_semantics() -> Iterator[None]:
    """Within this block Paddle's scalers unscale as its GPU kernel does (which is what
    ``paddle_compat`` does on every device), also on CPU.

    Without it, a CPU run differs on two counts that are Paddle's CPU kernel's, not the scaler's:
    a subnormal unscaled gradient becomes 0, and on a skipped step the gradients after the first bad
    tensor are zeroed (the parameters agree either way).

    Example::

        with paddle_side.gpu_unscale_semantics():
            pscaler.minimize(popt, pscaled)
    """
    grad_scaler = importlib.import_module("paddle.amp.grad_scaler")
    with mock.patch.object(grad_scaler, "_legacy_C_ops", _GpuKernelSemantics(grad_scaler._legacy_C_ops)):
        yield


def copy_grads(port: torch.nn.Module, layer: Any, *, name_map: NameMap | None = None) -> None:
    """Give each Paddle parameter exactly the gradient its twin in ``port`` holds (converted to
    Paddle's layout); parameters without a gradient keep none.

    Args:
        port: the torch port, after its backward pass.
        layer: the Paddle layer.
        name_map: torch names -> Paddle names where they differ.

    Example::

        port_loss.backward()
        paddle_side.copy_grads(port, layer)
        pscaler.minimize(popt, pscaled)
    """
    paddle = importlib.import_module("paddle")
    grads = {k: copy_of(g) for k, p in port.named_parameters() if (g := grad_of(p)) is not None}
    converted = Plan.of(port, name_map).to_paddle(grads, partial=True)
    for name, p in layer.named_parameters():
        if name in converted:
            p.grad = paddle.to_tensor(converted[name])
        else:
            p.clear_gradient(False)


def copy_buffers(port: torch.nn.Module, layer: Any, *, name_map: NameMap | None = None) -> None:
    """Give the Paddle layer the port's buffers (BatchNorm's running statistics, any state a forward
    in train mode moves), converted to Paddle's names; Paddle's trainable parameters are untouched.

    In the CPU method Paddle's forward never runs, so without this its running statistics stay
    where they started while the port's move: the first divergence of any model with BatchNorm in
    train mode is then ``param/bn.running_mean`` at step 0. Call it after the port's forward,
    before recording. Paddle's ``_variance`` then holds torch's running variance (updated with the
    unbiased batch variance): what the port itself holds, so the traces agree.

    Args:
        port: the torch port, after its forward.
        layer: the Paddle layer.
        name_map: torch names -> Paddle names where they differ.

    Example::

        loss = loss_fn(twin(x), y)                  # the port's forward, in train mode
        paddle_side.copy_buffers(twin, layer)       # its running statistics, into Paddle's layer
    """
    buffers = {k: copy_of(b) for k, b in port.named_buffers()}
    _set_state(layer, Plan.of(port, name_map).to_paddle(buffers, partial=True))


def _set_state(layer: Any, values: Mapping[str, Any], *, same_shape_only: bool = False) -> None:
    """Set the layer's non-trainable tensors (buffers, parameters that take no gradient) to
    ``values`` (Paddle names -> arrays); names it does not hold are left out. With
    ``same_shape_only``, so is a value whose shape is not its tensor's: Paddle's RNNs hold a
    ``_dropout_state`` buffer declared with shape ``[]`` but never filled (its array has 0
    elements), and ``set_value`` refuses the empty copy."""
    held = dict(layer.named_buffers())
    held.update((k, p) for k, p in layer.named_parameters() if p.stop_gradient)
    for name, value in values.items():
        if name in held and (not same_shape_only or list(held[name].shape) == list(value.shape)):
            held[name].set_value(value)


def copy_params(layer: Any, port: torch.nn.Module, *, name_map: NameMap | None = None) -> None:
    """Load the Paddle layer's current parameters and buffers into the torch port, bit for bit.

    Args:
        layer: the Paddle layer.
        port: the torch port.
        name_map: torch names -> Paddle names where they differ.

    Example::

        paddle_side.copy_params(layer, port)   # before each forward of the port
    """
    with torch.no_grad():
        port.load_state_dict(paddle_to_torch(layer.state_dict(), port, name_map=name_map))


def copy_params_to_paddle(port: torch.nn.Module, layer: Any, *, name_map: NameMap | None = None) -> None:
    """Load the torch port's parameters and buffers into the Paddle layer, bit for bit.

    Args:
        port: the torch port.
        layer: the Paddle layer.
        name_map: torch names -> Paddle names where they differ.

    Example::

        paddle_side.copy_params_to_paddle(port, layer)   # both start from the same weights
    """
    layer.set_state_dict(torch_to_paddle(port, name_map=name_map))


def nudge_params(layer: Any, *, ulps: int = 1, seed: int = 0) -> None:
    """Move every floating-point parameter of ``layer`` by ``ulps`` units in the last place, up or
    down at random: the start of a *baseline* run, whose distance from the reference run at each
    step is the noise a correct port may show (``compare(..., baseline=...)``).

    Args:
        layer: a Paddle layer (or anything with ``named_parameters()`` of tensors with ``numpy()``
            and ``set_value``).
        ulps: how many units in the last place.
        seed: the seed of the directions.

    Example::

        paddle_side.nudge_params(model)      # then run and record the same training again
    """
    _checks.at_least("ulps", _checks.integer("ulps", ulps), 1)
    rng = np.random.default_rng(seed)
    for _, p in layer.named_parameters():
        a = copy_of(p)
        if a.dtype.kind != "f" or a.dtype.itemsize < 4:
            continue
        up = rng.random(a.shape) < 0.5
        for _ in range(ulps):
            a = np.where(up, np.nextafter(a, np.inf), np.nextafter(a, -np.inf)).astype(a.dtype)
        p.set_value(a)
