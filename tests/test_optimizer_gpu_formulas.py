"""The CUDA update formulas (Paddle's GPU kernels as read from source, nvcc FMA contraction assumed).

No Paddle GPU build is available to compare with, so these tests pin the formulas: the kernels are
forced onto their GPU variant for CPU tensors and compared bitwise with a NumPy transcription of
Paddle's GPU kernels (float32 arithmetic, fused multiply-adds done exactly in float64). On a CUDA
machine, the last test runs the optimizers on the device.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import paddle_compat.nn as pnn
import paddle_compat.optimizer as popt
from paddle_compat import _numerics
from paddle_compat.optimizer import _multi_tensor

f32 = np.float32


def fma(a, b, c):
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(f32)


def sgd(p, g, st, lr):
    return fma(-f32(lr), g, p)


def momentum(p, g, st, lr, mu=0.9, coeff=0.01, rescale=0.5, nesterov=True):
    g = g * f32(rescale)
    g = fma(f32(coeff), p, g)
    v = fma(st.get("v", np.zeros_like(p)), f32(mu), g)
    st["v"] = v
    return fma(-fma(v, f32(mu), g), f32(lr), p) if nesterov else fma(-f32(lr), v, p)


def adam(p, g, st, lr, b1=0.9, b2=0.999, eps=1e-8, coeff=None):
    b1, b2, eps, lr = f32(b1), f32(b2), f32(eps), f32(lr)
    b1p, b2p = st.get("b1p", b1), st.get("b2p", b2)
    if coeff is not None:
        p = p * (f32(1) - lr * f32(coeff))
    m = fma(b1, st.get("m", np.zeros_like(p)), (f32(1) - b1) * g)
    v = fma(b2, st.get("v", np.zeros_like(p)), ((f32(1) - b2) * g) * g)
    denom = np.sqrt(v) / np.sqrt(f32(1) - b2p) + eps
    p = fma(m / denom, -(lr / (f32(1) - b1p)), p)
    st.update(m=m, v=v, b1p=b1p * b1, b2p=b2p * b2)
    return p


CASES = [
    ("sgd", lambda ps: popt.SGD(0.1, parameters=ps), sgd),
    (
        "momentum",
        lambda ps: popt.Momentum(0.05, 0.9, parameters=ps, use_nesterov=True, weight_decay=0.01, rescale_grad=0.5),
        lambda p, g, st, lr: momentum(p, g, st, lr),
    ),
    ("adam", lambda ps: popt.Adam(0.01, parameters=ps), lambda p, g, st, lr: adam(p, g, st, lr)),
    ("adamw", lambda ps: popt.AdamW(0.01, parameters=ps, weight_decay=0.1),
     lambda p, g, st, lr: adam(p, g, st, lr, coeff=0.1)),
]


@pytest.mark.parametrize(("name", "make", "reference"), CASES, ids=[c[0] for c in CASES])
def test_gpu_formulas(name, make, reference, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_numerics, "gpu_kernels", lambda t: True)
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal(500).astype(f32)
    p = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = make([p])
    lr = opt.get_lr()
    expected, state = p0.copy(), {}
    for _ in range(30):
        g = (rng.standard_normal(500) * 0.1).astype(f32)
        p.grad = torch.from_numpy(g)
        opt.step()
        expected = reference(expected, g, state, lr)
        assert np.array_equal(p.detach().numpy().view(np.int32), expected.view(np.int32)), name


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("cls", [popt.SGD, popt.Momentum, popt.Adam, popt.AdamW])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_runs_on_cuda_with_master_weights(cls: type, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(64, 32, device="cuda").to(dtype)) for _ in range(2)]
    opt = cls(0.01, parameters=params, multi_precision=True, grad_clip=pnn.ClipGradByGlobalNorm(1.0))
    for _ in range(5):
        for p in params:
            p.grad = torch.randn_like(p)
        opt.step()
    for p in params:
        assert p.device.type == "cuda" and p.dtype == dtype and torch.isfinite(p).all()
        state = opt.state[p]
        if dtype != torch.float32:
            assert state["master_weight"].dtype == torch.float32
            assert torch.equal(p.detach(), state["master_weight"].to(dtype))
        if "beta1_pow_acc" in state:
            # on the device with the multi-tensor kernels (a step reads nothing on the host),
            # else on the host, as in Paddle
            multi_tensor = _multi_tensor.kernels(p.device) is not None
            assert state["beta1_pow_acc"].device.type == ("cuda" if multi_tensor else "cpu")
