"""CUDA: the same trajectory as on CPU, and the host syncs each path promises. Skipped without a GPU."""

import warnings

import pytest
import torch

from paddle_compat.amp import GradScaler

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

BAD_STEPS = {2, 3, 9, 14, 15, 16}


def train(device, *, fused=False, explicit_unscale=False, steps=24, dtype=torch.float32):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(device, dtype)
    opt = (
        torch.optim.Adam(model.parameters(), lr=1e-3, fused=fused) if fused
        else torch.optim.SGD(model.parameters(), lr=0.01)
    )
    scaler = GradScaler(init_loss_scaling=1024.0, incr_every_n_steps=3, decr_every_n_nan_or_inf=2, decr_ratio=0.3)
    xs = [torch.randn(16, 32) for _ in range(steps)]
    trajectory = []
    for i, x in enumerate(xs):
        if i in BAD_STEPS:
            x = x.clone()
            x[0, 0] = float("inf")
        loss = model(x.to(device, dtype)).float().pow(2).mean()
        scaler.scale(loss).backward()
        if explicit_unscale:
            scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=False)
        trajectory.append(scaler.get_scale())
    return trajectory, scaler.state_dict(), scaler.get_skipped_steps()


def comparable(result):
    trajectory, state, skipped = result
    state = dict(state)
    return trajectory, state.pop("scale").item(), state, skipped


@pytest.mark.parametrize("fused, explicit_unscale", [(False, False), (False, True), (True, False), (True, True)])
def test_cuda_gives_the_cpu_trajectory(fused, explicit_unscale):
    cpu = train("cpu", fused=fused, explicit_unscale=explicit_unscale)
    cuda = train("cuda", fused=fused, explicit_unscale=explicit_unscale)
    assert comparable(cuda) == comparable(cpu)
    assert cuda[2] == len(BAD_STEPS)


def test_fp16_params_on_cuda_give_the_cpu_trajectory():
    assert comparable(train("cuda", dtype=torch.float16)) == comparable(train("cpu", dtype=torch.float16))


def _inputs(n, bad=()):
    """The batches, overflows injected, made before any sync is counted (writing a Python float
    into a CUDA tensor is a host-to-device copy that torch's sync check counts)."""
    xs = [torch.randn(16, 32, device="cuda") for _ in range(n)]
    for i in bad:
        xs[i][0, 0] = float("inf")
    torch.cuda.synchronize()
    return xs


def _steps(model, opt, scaler, xs):
    for x in xs:
        loss = model(x).pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=False)


def _model_and_scaler(fused):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).cuda()
    opt = (
        torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True) if fused
        else torch.optim.SGD(model.parameters(), lr=0.01)
    )
    scaler = GradScaler(init_loss_scaling=1024.0, incr_every_n_steps=2, decr_every_n_nan_or_inf=2)
    _steps(model, opt, scaler, _inputs(3))  # warm up: lazy state, allocator, first kernels
    torch.cuda.synchronize()
    return model, opt, scaler


@pytest.mark.parametrize("decr_n", [1, 2])
def test_fused_optimizer_steps_make_no_host_sync(decr_n):
    model, opt, scaler = _model_and_scaler(fused=True)
    scaler.set_decr_every_n_nan_or_inf(decr_n)
    xs = _inputs(12, bad={3, 4, 8})
    torch.cuda.set_sync_debug_mode("error")
    try:
        _steps(model, opt, scaler, xs)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert scaler.get_skipped_steps() == 3


def test_other_optimizers_make_exactly_one_host_sync_per_step():
    model, opt, scaler = _model_and_scaler(fused=False)
    xs = _inputs(10, bad={2, 3, 7})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            _steps(model, opt, scaler, xs)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message).lower()]
    assert len(syncs) == 10
