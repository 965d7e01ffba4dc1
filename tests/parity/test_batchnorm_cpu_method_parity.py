"""The CPU method (docs/parity.md section 3) on a model with BatchNorm in train mode, against real
Paddle 3.3.1: the port's forward and backward run in torch, Paddle's own optimizer takes the
gradients, and Paddle's layer gets the port's running statistics back after each forward
(``paddle_side.copy_buffers``): Paddle's forward never runs there, so without that its statistics
never move and the first divergence is ``param/bn1.running_mean`` at step 0."""

from __future__ import annotations

import numpy as np
import paddle
import pytest
import torch
from torch import nn

import paddle_compat.optimizer as popt
from paddle_compat.parity import TraceRecorder, compare, diff_layers, paddle_side

STEPS = 8


class PaddleResNet(paddle.nn.Layer):
    """A stem and one residual block, as in a ResNet: convolutions without bias before BatchNorm."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = paddle.nn.Conv2D(3, 8, 3, padding=1, bias_attr=False)
        self.bn1 = paddle.nn.BatchNorm2D(8)
        self.conv2 = paddle.nn.Conv2D(8, 8, 3, padding=1, bias_attr=False)
        self.bn2 = paddle.nn.BatchNorm2D(8)
        self.relu = paddle.nn.ReLU()
        self.pool = paddle.nn.AdaptiveAvgPool2D(1)
        self.fc = paddle.nn.Linear(8, 4)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.relu(x + self.bn2(self.conv2(x)))
        return self.fc(paddle.flatten(self.pool(x), 1))


class TorchResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.relu(x + self.bn2(self.conv2(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


def batches():
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(4, 3, 6, 6, generator=gen), torch.randint(0, 4, (4,), generator=gen)) for _ in range(STEPS)]


def port_run():
    torch.manual_seed(1)
    port = TorchResNet()
    opt = popt.Momentum(learning_rate=0.05, momentum=0.9, parameters=port.parameters())
    rec = TraceRecorder(port, opt)
    for x, y in batches():
        loss = nn.functional.cross_entropy(port(x), y)
        loss.backward()
        opt.step()
        rec.record(loss)
        opt.clear_grad()
    return rec.trace


def paddle_run(write_buffers_back: bool):
    """Section 3's method: the twin's forward and backward on Paddle's weights, Paddle's optimizer."""
    paddle.seed(0)
    layer = PaddleResNet()
    torch.manual_seed(1)
    twin = TorchResNet()
    paddle_side.copy_params_to_paddle(twin, layer)
    opt = paddle.optimizer.Momentum(learning_rate=0.05, momentum=0.9, parameters=layer.parameters())
    rec = TraceRecorder(layer, opt, port=twin)
    for x, y in batches():
        paddle_side.copy_params(layer, twin)
        twin.zero_grad()
        loss = nn.functional.cross_entropy(twin(x), y)
        loss.backward()
        if write_buffers_back:
            paddle_side.copy_buffers(twin, layer)
        paddle_side.copy_grads(twin, layer)
        opt.step()
        rec.record(loss)
        opt.clear_grad()
    return rec.trace


@pytest.fixture(scope="module")
def port():
    return port_run()


def test_buffers_written_back_make_every_step_bitwise(port):
    result = compare(paddle_run(write_buffers_back=True), port, exact=True)
    assert result.ok, result.summary()
    assert result.steps == STEPS
    names = {m.name for m in result.tensors}
    assert {"param/bn1.running_mean", "param/bn2.running_mean", "grad/conv1.weight", "opt/fc.weight/velocity"} <= names
    moved = [m for m in result.tensors if m.name == "param/bn1.running_mean"]
    assert len(moved) == STEPS and all(m.bitwise_equal for m in moved)


def test_without_them_paddles_statistics_never_move(port):
    reference = paddle_run(write_buffers_back=False)
    d = compare(reference, port, exact=True).first_divergence
    assert (d.step, d.name) == (0, "param/bn1.running_mean")
    series = reference.series["param/bn1.running_mean"]
    assert all(np.array_equal(series.data[series.position(k)], np.zeros(8, np.float32)) for k in range(STEPS))


# ---------------------------------------------------------------- diff_layers, BatchNorm in train mode


def _port_with(bug: str | None) -> TorchResNet:
    port = TorchResNet()
    if bug == "eps":  # Keras's default epsilon where Paddle's is 1e-5
        port.bn2.eps = 1e-3
    if bug == "momentum":  # Paddle's momentum 0.9 copied as it is: torch's means 1 - 0.9
        port.bn1.momentum = 0.9
    return port


def test_diff_layers_in_train_mode():
    """A clean port is equal (torch's running_var rule reported as the known difference); a
    BatchNorm epsilon is named at bn2 forward and backward, a momentum copied from Paddle's
    convention at bn1 by its running statistics."""
    x = np.random.default_rng(0).standard_normal((4, 3, 6, 6)).astype(np.float32)
    paddle.seed(0)
    clean = diff_layers(PaddleResNet(), _port_with(None), x)
    assert clean.ok, clean.summary()
    assert all(r.isolated for r in clean.layers)
    paddle.seed(0)
    eps = diff_layers(PaddleResNet(), _port_with("eps"), x)
    assert eps.first_forward.layer == eps.first_backward.layer == "bn2", eps.summary()
    paddle.seed(0)
    momentum = diff_layers(PaddleResNet(), _port_with("momentum"), x)
    assert momentum.first_forward.layer == "bn1" and momentum.first_backward is None, momentum.summary()
    assert momentum.first_forward.check.what == "running_mean after the step"
