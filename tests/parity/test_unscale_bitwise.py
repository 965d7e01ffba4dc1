"""Unscaled gradients, bit for bit, against Paddle.

fp32: against Paddle's real ``check_finite_and_unscale`` CPU kernel, reached through a Paddle
scaler's ``unscale_``. fp16/bf16: Paddle's CPU kernel takes float/double only, so the reference
is the same formula written with Paddle's own ops: cast to float32, multiply by
``paddle.reciprocal(scale)``, cast back.

Paddle's CPU ``check_finite_and_unscale`` runs with subnormals flushed (subnormal inputs read
as zero, subnormal results written as zero; its plain cast/multiply ops do not flush), which its
GPU kernel does not do. Ours keeps subnormals (the GPU semantics), so for fp32: in the normal
range ours must equal Paddle's kernel bitwise; with subnormals around, ours must equal the IEEE
formula bitwise, and Paddle's kernel must equal that same formula with the flushing applied.
"""

from __future__ import annotations

import numpy as np
import paddle
import pytest
import torch

from paddle_compat.amp import GradScaler

from .paddle_oracle import assert_bitwise_equal, bits, paddle_scaler, to_numpy

SCALES = [1.0, 2.0, 3.0, 3.7, 1000.0, 65536.0, float(np.float32(65536.0 * 1.3)), float(2**20 + 1)]
SHAPES = [(64, 33), (129,), (7, 5, 3)]

_F32_MIN_NORMAL = np.float32(2.0**-126)


# ------------------------------------------------------------------------------ value makers


def random_f32(rng, shape, min_biased_exponent=0) -> np.ndarray:
    """Random finite float32 bit patterns: every sign, exponent >= the given one, any mantissa,
    with the usual suspects (±0, the smallest subnormal/normal, the largest finite) mixed in."""
    n = int(np.prod(shape))
    sign = rng.integers(0, 2, n, dtype=np.uint32) << 31
    exponent = rng.integers(min_biased_exponent, 255, n, dtype=np.uint32) << 23
    mantissa = rng.integers(0, 2**23, n, dtype=np.uint32)
    out = (sign | exponent | mantissa).view(np.float32)
    specials = np.array([0.0, -0.0, 3.4028235e38, -3.4028235e38, 1.0, -1.5], np.float32)
    if min_biased_exponent == 0:
        subnormals = np.array([1e-45, -1e-45, 2.0**-127, 1.1754942e-38, 2.0**-126], np.float32)
        specials = np.concatenate([specials, subnormals])
    idx = rng.choice(n, size=min(n, specials.size), replace=False)
    out[idx] = specials[: idx.size]
    return out.reshape(shape)


def min_exponent_for_normal_results(scale: float) -> int:
    """The smallest biased exponent whose values, divided by ``scale``, stay comfortably normal."""
    return 1 + int(np.ceil(np.log2(scale))) + 2


def daz(a: np.ndarray) -> np.ndarray:
    """Subnormal inputs read as (signed) zero."""
    a = a.copy()
    sub = (a != 0) & (np.abs(a) < _F32_MIN_NORMAL)
    a[sub] = np.copysign(np.float32(0), a[sub])
    return a


def paddle_cpu_kernel_model(g: np.ndarray, scale: float) -> np.ndarray:
    """What Paddle's CPU kernel computes: subnormal inputs read as zero, and a result whose exact
    value is below the smallest normal written as (signed) zero, even where it would round up to
    the smallest normal (x86's flush-to-zero detects tininess before rounding)."""
    inv = np.reciprocal(np.array([scale], np.float32))[0]
    exact = daz(g).astype(np.float64) * np.float64(inv)  # a float32 x float32 product is exact in float64
    with np.errstate(all="ignore"):
        rounded = exact.astype(np.float32)
    return np.where(np.abs(exact) < 2.0**-126, np.copysign(np.float32(0), exact).astype(np.float32), rounded)


def ieee_unscale_f32(g: np.ndarray, scale: float) -> np.ndarray:
    """grad * reciprocal(float32 scale), each rounded once to float32, subnormals kept."""
    inv = np.reciprocal(np.array([scale], np.float32))
    with np.errstate(all="ignore"):
        return (g.astype(np.float32) * inv[0]).astype(np.float32)


# ----------------------------------------------------------------------------- the two sides


def ours_unscale(grads, scale: float):
    """Our unscale_ on torch parameters carrying the given grads; returns the grads after it."""
    params = [torch.nn.Parameter(torch.zeros(g.shape, dtype=g.dtype)) for g in grads]
    originals = []
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
        originals.append((p.grad, p.grad.data_ptr()))
    scaler = GradScaler(init_loss_scaling=scale)
    scaler.unscale_(torch.optim.SGD(params, lr=0.1))
    for p, (g_obj, ptr) in zip(params, originals, strict=True):
        assert p.grad is g_obj and p.grad.data_ptr() == ptr, "unscale_ must work in place, like Paddle's"
        assert p.grad.dtype == g_obj.dtype
    return [p.grad for p in params]


def paddle_unscale_f32(grads_np, scale: float):
    """Paddle's real CPU check_finite_and_unscale, through its scaler's unscale_."""
    pparams = [paddle.create_parameter(list(g.shape), "float32") for g in grads_np]
    for pp, g in zip(pparams, grads_np, strict=True):
        pp.grad = paddle.to_tensor(g.copy())
    scaler = paddle_scaler(init_loss_scaling=scale)
    scaler.unscale_(paddle.optimizer.SGD(learning_rate=0.1, parameters=pparams))
    return [to_numpy(pp.grad) for pp in pparams], bool(scaler._found_inf)


def paddle_formula(g_np_f32: np.ndarray, dtype: str, scale: float):
    """The unscale formula in Paddle ops: cast to float32, times paddle.reciprocal(scale), cast back."""
    g = paddle.to_tensor(g_np_f32).astype(dtype)
    s = paddle.to_tensor(np.array([scale], np.float32))
    return paddle.cast(paddle.cast(g, "float32") * paddle.reciprocal(s), dtype)


# -------------------------------------------------------------------------------------- fp32


@pytest.mark.parametrize("scale", SCALES)
def test_fp32_normal_range_matches_paddle_kernel(scale):
    rng = np.random.default_rng(int(scale * 1000) % 2**32)
    grads = [random_f32(rng, s, min_exponent_for_normal_results(scale)) for s in SHAPES]
    pgrads, found = paddle_unscale_f32(grads, scale)
    assert not found
    ograds = ours_unscale([torch.from_numpy(g.copy()) for g in grads], scale)
    for i, (o, p) in enumerate(zip(ograds, pgrads, strict=True)):
        assert_bitwise_equal(o, p, f"fp32 grad {i}, scale {scale}")


@pytest.mark.parametrize("scale", SCALES)
def test_fp32_with_subnormals(scale):
    rng = np.random.default_rng(12345 + int(scale))
    grads = [random_f32(rng, s) for s in SHAPES]
    # Force a good share of inputs and results into the subnormal range.
    for g in grads:
        flat = g.reshape(-1)
        flat[::5] = (flat[::5].view(np.uint32) & np.uint32(0x807FFFFF)).view(np.float32)  # subnormal
        flat[1::5] = (flat[1::5].view(np.uint32) & np.uint32(0x80FFFFFF) | np.uint32(0x00800000)).view(
            np.float32
        )  # the smallest normal binade: subnormal once divided by scale > 1
    pgrads, found = paddle_unscale_f32(grads, scale)
    assert not found
    ograds = ours_unscale([torch.from_numpy(g.copy()) for g in grads], scale)
    for i, (g, o, p) in enumerate(zip(grads, ograds, pgrads, strict=True)):
        assert_bitwise_equal(o, ieee_unscale_f32(g, scale), f"ours vs the IEEE formula, grad {i}")
        assert_bitwise_equal(paddle_cpu_kernel_model(g, scale), p, f"flushed formula vs Paddle, grad {i}")
        normal = (np.abs(g) >= _F32_MIN_NORMAL) | (g == 0)
        normal &= (np.abs(p) >= _F32_MIN_NORMAL) | (g == 0)
        assert_bitwise_equal(to_numpy(o)[normal], p[normal], f"ours vs Paddle where nothing is subnormal, grad {i}")


@pytest.mark.parametrize("scale", [1.0, 3.0, 65536.0])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("where", [0, 1, 2])
def test_fp32_found_inf_agrees(scale, bad, where):
    """Same verdict as Paddle for inf/NaN in any one tensor; the finite tensors before it unscaled alike."""
    rng = np.random.default_rng(99)
    grads = [random_f32(rng, s, min_exponent_for_normal_results(scale)) for s in SHAPES]
    grads[where].reshape(-1)[rng.integers(grads[where].size)] = bad
    pgrads, found = paddle_unscale_f32(grads, scale)
    assert found
    params = [torch.nn.Parameter(torch.ones(g.shape)) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = torch.from_numpy(g.copy())
    scaler = GradScaler(init_loss_scaling=scale)
    opt = torch.optim.SGD(params, lr=0.1)
    scaler.unscale_(opt)
    for i in range(where):  # Paddle's CPU kernel leaves these alone (GPU semantics: unscaled too)
        assert_bitwise_equal(params[i].grad, pgrads[i], f"finite grad {i} before the bad one")
    scaler.step(opt)
    scaler.update()
    assert scaler.get_skipped_steps() == 1
    for p in params:
        assert bool((p.detach() == 1).all()), "the step must be skipped"


# ------------------------------------------------------------------------------- fp16 / bf16


def random_fp16(rng, shape) -> np.ndarray:
    raw = rng.integers(0, 2**16, int(np.prod(shape)), dtype=np.uint16)
    raw = raw[(raw & 0x7C00) != 0x7C00]  # finite only
    return raw.view(np.float16).reshape(-1)


def random_bf16_as_f32(rng, shape, min_biased_exponent=0) -> np.ndarray:
    sign = rng.integers(0, 2, int(np.prod(shape)), dtype=np.uint32) << 15
    exponent = rng.integers(min_biased_exponent, 255, int(np.prod(shape)), dtype=np.uint32) << 7
    mantissa = rng.integers(0, 2**7, int(np.prod(shape)), dtype=np.uint32)
    return ((sign | exponent | mantissa) << 16).view(np.float32)


@pytest.mark.parametrize("scale", SCALES)
def test_fp16_matches_paddle_formula(scale):
    rng = np.random.default_rng(7 + int(scale))
    g16 = np.concatenate([random_fp16(rng, (4096,)), np.array([0, -0.0, 6e-8, -6e-8, 65504, 1], np.float16)])
    ref = paddle_formula(g16.astype(np.float32), "float16", scale)
    (o,) = ours_unscale([torch.from_numpy(g16.copy())], scale)
    assert o.dtype == torch.float16
    assert_bitwise_equal(o, ref, f"fp16 unscale, scale {scale}")


@pytest.mark.parametrize("scale", SCALES)
def test_bf16_normal_range_matches_paddle_formula(scale):
    rng = np.random.default_rng(11 + int(scale))
    g = random_bf16_as_f32(rng, (4096,), min_exponent_for_normal_results(scale))
    ref = paddle_formula(g, "bfloat16", scale)
    (o,) = ours_unscale([torch.from_numpy(g.copy()).to(torch.bfloat16)], scale)
    assert o.dtype == torch.bfloat16
    assert_bitwise_equal(o, ref, f"bf16 unscale, scale {scale}")


@pytest.mark.parametrize("scale", [3.0, 65536.0, float(np.float32(65536.0 * 1.3))])
def test_bf16_with_subnormals(scale):
    rng = np.random.default_rng(13 + int(scale))
    g = random_bf16_as_f32(rng, (4096,))
    g[::4] = (g[::4].view(np.uint32) & np.uint32(0x807F0000)).view(np.float32)  # bf16 subnormals
    ref = paddle_formula(g, "bfloat16", scale)  # Paddle's cast/multiply ops keep subnormals
    (o,) = ours_unscale([torch.from_numpy(g.copy()).to(torch.bfloat16)], scale)
    assert_bitwise_equal(o, ref, f"bf16 unscale with subnormals, scale {scale}")


@pytest.mark.parametrize("scale", [3.0, 1000.0])
def test_mixed_dtypes_in_one_optimizer(scale):
    """fp16, bf16 and fp32 grads in one optimizer: each unscaled in its own dtype, in place."""
    rng = np.random.default_rng(5)
    g16 = random_fp16(rng, (300,))
    gbf = random_bf16_as_f32(rng, (300,), min_exponent_for_normal_results(scale))
    g32 = random_f32(rng, (300,), min_exponent_for_normal_results(scale))
    o16, obf, o32 = ours_unscale(
        [torch.from_numpy(g16.copy()), torch.from_numpy(gbf.copy()).to(torch.bfloat16), torch.from_numpy(g32.copy())],
        scale,
    )
    assert_bitwise_equal(o16, paddle_formula(g16.astype(np.float32), "float16", scale), "fp16 grad")
    assert_bitwise_equal(obf, paddle_formula(gbf, "bfloat16", scale), "bf16 grad")
    assert_bitwise_equal(o32, paddle_unscale_f32([g32], scale)[0][0], "fp32 grad")


def test_fp16_overflow_on_unscale_sets_found_inf():
    """A finite fp16 grad can only overflow on unscale when scale < 1: the GPU semantics count it."""
    params = [torch.nn.Parameter(torch.zeros(3, dtype=torch.float16))]
    params[0].grad = torch.tensor([60000.0, 1.0, -2.0], dtype=torch.float16)
    scaler = GradScaler(init_loss_scaling=0.5)
    opt = torch.optim.SGD(params, lr=0.1)
    scaler.unscale_(opt)
    assert bits(params[0].grad).tolist() == bits(np.array([np.inf, 2.0, -4.0], np.float16)).tolist()
    scaler.step(opt)
    assert scaler.get_skipped_steps() == 1


@pytest.mark.parametrize("scale", [1.0, 3.0, 1000.0, 65536.0])
def test_gpu_semantics_oracle_matches_the_real_kernel_on_normal_values(scale):
    """The oracle's GPU-kernel stand-in (used where Paddle steps with non-finite grads) agrees
    with Paddle's real kernel wherever the two kernels' documented semantics coincide."""
    from .paddle_oracle import paddle_gpu_kernel_semantics

    rng = np.random.default_rng(3)
    grads = [random_f32(rng, s, min_exponent_for_normal_results(scale)) for s in SHAPES]
    real, found_real = paddle_unscale_f32(grads, scale)
    with paddle_gpu_kernel_semantics():
        emulated, found_emulated = paddle_unscale_f32(grads, scale)
    assert found_real is found_emulated is False
    for i, (r, e) in enumerate(zip(real, emulated, strict=True)):
        assert_bitwise_equal(e, r, f"grad {i}")
    grads[1].reshape(-1)[3] = np.nan
    with paddle_gpu_kernel_semantics():
        emulated, found_emulated = paddle_unscale_f32(grads, scale)
    assert found_emulated is True
    assert_bitwise_equal(emulated[2], ieee_unscale_f32(grads[2], scale), "a finite grad after the bad one")
