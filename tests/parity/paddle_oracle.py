"""Real Paddle 3.3.1 as the test oracle, on CPU.

Paddle switches its GradScaler off unless the tracer's place is a GPU/XPU/custom place. Its
scaler logic is plain Python and its CPU kernels are real, so the oracle only has to make the
scaler's constructor believe it runs on a GPU place; every kernel then runs on CPU as usual.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from unittest import mock

import paddle  # noqa: F401  (a test dependency; paddle_compat itself never imports it)
import paddle.amp.grad_scaler as _paddle_grad_scaler

# ``paddle.amp.auto_cast`` the attribute is the function, which shadows the submodule of the
# same name for ``import paddle.amp.auto_cast as ...``; fetch the module itself.
_paddle_auto_cast = importlib.import_module("paddle.amp.auto_cast")


class _FakeGpuPlace:
    def is_gpu_place(self) -> bool:
        return True

    def is_xpu_place(self) -> bool:
        return False

    def is_custom_place(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "Place(gpu:0, faked by the test oracle)"


class _FakeTracer:
    _expected_place = _FakeGpuPlace()


@contextlib.contextmanager
def paddle_believes_gpu() -> Iterator[None]:
    """Within this block, Paddle scalers constructed are enabled on CPU."""
    with mock.patch.object(_paddle_grad_scaler, "_dygraph_tracer", lambda: _FakeTracer()):
        yield


def paddle_scaler(cls: str = "GradScaler", **kwargs):
    """A real, enabled ``paddle.amp.GradScaler`` or ``AmpScaler`` running on CPU."""
    with paddle_believes_gpu():
        return getattr(_paddle_grad_scaler, cls)(**kwargs)


def set_paddle_amp_dtype(dtype: str) -> None:
    """What entering ``paddle.amp.auto_cast(dtype=...)`` records (and never restores)."""
    _paddle_auto_cast.amp_global_state().amp_dtype = dtype



# ---------------------------------------------------------------------------------------------
# Helpers shared by the parity tests: mirrored parameters, copied gradients, bitwise equality.
# ---------------------------------------------------------------------------------------------

import numpy as np  # noqa: E402

_BITS_VIEW = {
    np.dtype(np.float32): np.uint32,
    np.dtype(np.float16): np.uint16,
    np.dtype(np.float64): np.uint64,
}


def to_numpy(t) -> np.ndarray:
    """A torch or Paddle tensor (or array) as a numpy array; bfloat16 comes back as its raw uint16 bits."""
    if isinstance(t, np.ndarray):
        return t
    if hasattr(t, "detach"):  # torch
        t = t.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            import torch

            return t.view(torch.int16).numpy().view(np.uint16)
        return t.numpy()
    if str(t.dtype) in ("paddle.bfloat16", "bfloat16"):
        # Paddle hands bfloat16 to numpy as its raw uint16 bits.
        return np.asarray(t.numpy()).view(np.uint16)
    return np.asarray(t.numpy())


def bits(a) -> np.ndarray:
    """The raw bit patterns of a float array (bitwise comparison, -0.0 != 0.0, NaN payloads kept)."""
    a = to_numpy(a)
    if a.dtype == np.uint16:  # bfloat16 bits already
        return a
    return np.ascontiguousarray(a).view(_BITS_VIEW[a.dtype])


def assert_bitwise_equal(ours, paddles, what: str = "") -> None:
    o, p = bits(ours), bits(paddles)
    assert o.shape == p.shape, f"{what}: shape ours {o.shape} vs Paddle {p.shape}"
    if not np.array_equal(o, p):
        bad = np.flatnonzero(o.ravel() != p.ravel())
        i = bad[0]
        raise AssertionError(
            f"{what}: {bad.size} of {o.size} elements differ bitwise; first at flat index {i}: "
            f"ours {to_numpy(ours).ravel()[i]!r} (bits {o.ravel()[i]:#x}) vs "
            f"Paddle {to_numpy(paddles).ravel()[i]!r} (bits {p.ravel()[i]:#x})"
        )


def paddle_params_like(torch_params) -> list:
    """Paddle parameters with the same shapes and exactly the same float32 values."""
    out = []
    for tp in torch_params:
        arr = to_numpy(tp).astype(np.float32, copy=True)
        pp = paddle.create_parameter(list(arr.shape), "float32")
        pp.set_value(arr)
        out.append(pp)
    return out


def copy_grads_to_paddle(torch_params, paddle_params) -> None:
    """Give each Paddle parameter exactly the gradient its torch twin holds (None stays None)."""
    for tp, pp in zip(torch_params, paddle_params, strict=True):
        if tp.grad is None:
            continue
        pp.grad = paddle.to_tensor(to_numpy(tp.grad).copy())


class _GpuKernelSemantics:
    """Stands in for ``_legacy_C_ops`` inside Paddle's grad_scaler module: ``check_finite_and_unscale``
    with the semantics of Paddle's GPU kernel, written with Paddle's own (non-flushing) ops:
    every tensor is unscaled as ``cast(cast(x, float32) * reciprocal(scale), x.dtype)``, and
    found_inf is set when any unscaled value is inf/NaN. (Paddle's CPU kernel instead checks the
    inputs and turns every tensor from the first bad one onward into ``x * 0``, and flushes
    subnormals.) Everything else goes to the real ops."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    @staticmethod
    def check_finite_and_unscale(xs, scale, outs, found_inf):
        inv = paddle.reciprocal(scale)
        bad = False
        for x, out in zip(xs, outs, strict=True):
            y = paddle.cast(paddle.cast(x, "float32") * inv, x.dtype)
            bad = bad or not bool(paddle.isfinite(y).all())
            paddle.assign(y, out)
        paddle.assign(paddle.to_tensor(np.array([bad])), found_inf)
        return outs, found_inf


@contextlib.contextmanager
def paddle_gpu_kernel_semantics() -> Iterator[None]:
    """Within this block Paddle scalers unscale with the GPU kernel's semantics (see above)."""
    with mock.patch.object(
        _paddle_grad_scaler, "_legacy_C_ops", _GpuKernelSemantics(_paddle_grad_scaler._legacy_C_ops)
    ):
        yield
