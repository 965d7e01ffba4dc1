"""The CUDA update formulas (Paddle's GPU kernels as read from source, nvcc FMA contraction assumed).

No Paddle GPU build is available to compare with, so these tests pin the formulas: the kernels are
forced onto their GPU variant for CPU tensors and compared bitwise with a NumPy transcription of
Paddle's GPU kernels (each optimizer's ``gpu_reference`` in tests/optim_db.py). On a CUDA
machine, the last test runs the optimizers on the device.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import paddle_compat.nn as pnn
from paddle_compat import _devices
from paddle_compat.optimizer import _multi_tensor

from .optim_db import CLASSES, cases, ids

GPU_FORMULA = cases("gpu_formula")


@pytest.mark.parametrize(("info", "inp"), GPU_FORMULA, ids=ids(GPU_FORMULA))
def test_gpu_formulas(info, inp, monkeypatch: pytest.MonkeyPatch) -> None:
    name, make, reference = inp.desc, inp.make, info.gpu_reference
    monkeypatch.setattr(_devices, "gpu_kernels", lambda t: True)
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal(500).astype(np.float32)
    p = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = make([p])
    lr = opt.get_lr()
    expected, state = p0.copy(), {}
    for _ in range(30):
        g = (rng.standard_normal(500) * 0.1).astype(np.float32)
        p.grad = torch.from_numpy(g)
        opt.step()
        expected = reference(expected, g, state, lr)
        assert np.array_equal(p.detach().numpy().view(np.int32), expected.view(np.int32)), name


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("cls", CLASSES)
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
