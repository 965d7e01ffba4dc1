"""A baseline run that happens to match the reference bit for bit, against real Paddle 3.3.1.

A ResNet-style block (convolutions before BatchNorm, train mode) trained by Paddle's own forward,
AdamW: nudging the weights by an ulp leaves the first loss unchanged (BatchNorm cancels it), so the
baseline's distance there is 0. A clean port, an ulp away on that loss, must still pass (the
kernels' floor), and a real bug must still be found at its layer."""

from __future__ import annotations

import functools

import numpy as np
import paddle
import torch

import paddle_compat.optimizer as popt
from paddle_compat.parity import TraceRecorder, compare, paddle_side, paddle_to_torch

from .test_batchnorm_cpu_method_parity import PaddleResNet, TorchResNet

STEPS = 4


def _data():
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((4, 3, 8, 8)).astype(np.float32), rng.integers(0, 3, (4,))) for _ in range(STEPS)]


def _train(net, opt, rec, tensor, cross_entropy):
    for x, y in _data():
        loss = cross_entropy(net(tensor(x)), tensor(y))
        loss.backward()
        opt.step()
        rec.record(loss)
        opt.clear_grad()
    return rec.trace


@functools.cache
def _paddle(nudge_seed: int | None):
    paddle.seed(0)
    layer = PaddleResNet()
    start = {k: v.numpy().copy() for k, v in layer.state_dict().items()}
    if nudge_seed is not None:
        paddle_side.nudge_params(layer, seed=nudge_seed)
    opt = paddle.optimizer.AdamW(0.01, parameters=layer.parameters())
    rec = TraceRecorder(layer, opt, port=TorchResNet(), layers=True)
    return _train(layer, opt, rec, paddle.to_tensor, paddle.nn.functional.cross_entropy), start


def _port(eps: float = 1e-5):
    port = TorchResNet()
    port.load_state_dict(paddle_to_torch(_paddle(None)[1], port))
    port.bn2.eps = eps
    opt = popt.AdamW(0.01, parameters=port.parameters())
    return _train(port, opt, TraceRecorder(port, opt, layers=True), torch.from_numpy, torch.nn.functional.cross_entropy)


def test_a_baseline_equal_at_the_loss_still_passes_a_clean_port():
    reference, baseline = _paddle(None)[0], _paddle(1)[0]
    port = _port()
    assert baseline.steps[0]["loss"] == reference.steps[0]["loss"] != port.steps[0]["loss"]  # the case at hand
    result = compare(reference, port, baseline=baseline)
    assert result.ok, result.summary()  # was: first divergence at (0, loss), a bound of 0
    bug = compare(reference, _port(eps=1e-3), baseline=baseline).first_divergence
    assert (bug.step, bug.name) == (0, "act/bn2"), bug.describe()
