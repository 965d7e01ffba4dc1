"""Real Paddle 3.3.1 as the test oracle, on CPU.

Paddle switches its GradScaler off unless the tracer's place is a GPU/XPU/custom place. Its
scaler logic is plain Python and its CPU kernels are real, so the oracle only has to make the
scaler's constructor believe it runs on a GPU place; every kernel then runs on CPU as usual.
"""

from __future__ import annotations

import numpy as np
import paddle  # noqa: F401  (a test dependency; paddle_compat itself never imports it)

from paddle_compat.parity import paddle_side
from paddle_compat.parity._arrays import array_of

# The parity kit's stand-ins for a GPU place and a tracer on it (for the auto_cast oracles too).
_FakeGpuPlace, _FakeTracer = paddle_side._GpuPlace, paddle_side._Tracer

def paddle_scaler(cls: str = "GradScaler", **kwargs):
    """A real, enabled ``paddle.amp.GradScaler`` or ``AmpScaler`` running on CPU (only its
    constructor is shown a GPU place). Records no AMP dtype: each test sets its own."""
    return paddle_side.enabled_scaler(cls, **kwargs)


def set_paddle_amp_dtype(dtype: str) -> None:
    """What entering ``paddle.amp.auto_cast(dtype=...)`` records (and never restores)."""
    paddle_side.set_amp_dtype(dtype)


# ---------------------------------------------------------------------------------------------
# Helpers shared by the parity tests: mirrored parameters, copied gradients, bitwise equality.
# ---------------------------------------------------------------------------------------------

_BITS_VIEW = {
    np.dtype(np.float32): np.uint32,
    np.dtype(np.float16): np.uint16,
    np.dtype(np.float64): np.uint64,
}


def to_numpy(t) -> np.ndarray:
    """A torch or Paddle tensor (or array) as a numpy array; bfloat16 comes back as its raw uint16 bits."""
    return array_of(t)[0]


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
    """Paddle parameters with the same shapes and exactly the same values: float64 ones stay float64,
    the others are float32."""
    out = []
    for tp in torch_params:
        arr = to_numpy(tp)
        arr = arr.astype(np.float64 if arr.dtype == np.float64 else np.float32, copy=True)
        pp = paddle.create_parameter(list(arr.shape), str(arr.dtype))
        pp.set_value(arr)
        out.append(pp)
    return out


def copy_grads_to_paddle(torch_params, paddle_params) -> None:
    """Give each Paddle parameter exactly the gradient its torch twin holds (None stays None)."""
    for tp, pp in zip(torch_params, paddle_params, strict=True):
        if tp.grad is None:
            continue
        pp.grad = paddle.to_tensor(to_numpy(tp.grad).copy())


def finish_step_both(style: str, ours, pscaler, opt, popt, scaled, p_scaled) -> None:
    """End an iteration the same way on both scalers. ``style``: ``"minimize"``,
    ``"step_update"`` or ``"unscale_step_update"`` (an explicit ``unscale_`` first)."""
    if style == "minimize":
        ours.minimize(opt, scaled)
        pscaler.minimize(popt, p_scaled)
        return
    if style == "unscale_step_update":
        ours.unscale_(opt)
        pscaler.unscale_(popt)
    ours.step(opt)
    pscaler.step(popt)
    ours.update()
    pscaler.update()


# Within this block Paddle scalers unscale with the GPU kernel's semantics, written with Paddle's
# own (non-flushing) ops; see the parity kit's ``paddle_side.gpu_unscale_semantics``.
paddle_gpu_kernel_semantics = paddle_side.gpu_unscale_semantics
