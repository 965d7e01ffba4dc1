"""Training trajectories of real models against real Paddle 3.3.1 with Paddle's own forward on the
reference side (CPU, float32, AdamW with an exponential decay): a baseline run (Paddle again, its
weights an ulp away) tells noise from bugs, a clean port is equal, and each injected bug is reported
at its step and layer (layers=True) or at the rate (a scheduler one step early)."""

from __future__ import annotations

import functools

import numpy as np
import paddle
import pytest
import torch

import paddle_compat.optimizer as popt
from paddle_compat.parity import TraceRecorder, compare, paddle_side, paddle_to_torch

from .twin_models import (
    SEQ,
    VOCAB,
    PaddleCNN,
    PaddleTransformer,
    TorchCNN,
    TorchTransformer,
    cnn_input,
    hand_loader,
    transformer_input,
)

STEPS = 6
SQUARE = {"transformer": "blocks.1.attn.out_proj.weight", "cnn": "proj.weight"}


def batches(model: str):
    rng = np.random.default_rng(5)
    if model == "transformer":
        return [(transformer_input(seed=s), rng.integers(0, VOCAB, (3, SEQ))) for s in range(STEPS)]
    return [(cnn_input(seed=s), rng.integers(0, 10, (4,))) for s in range(STEPS)]


def _models(model: str, bug: str | None = None):
    if model == "transformer":
        return PaddleTransformer, functools.partial(TorchTransformer, bug)
    return PaddleCNN, functools.partial(TorchCNN, bug)


def train(net, opt, sched, rec, model: str, tensor, cross_entropy) -> None:
    """The training loop, the same in both frameworks (their own tensor and loss functions)."""
    for x, y in batches(model):
        out = net(tensor(x))
        loss = cross_entropy(out.reshape([-1, out.shape[-1]]), tensor(y.reshape(-1)))
        loss.backward()
        opt.step()
        sched.step()
        rec.record(loss)
        opt.clear_grad()
    rec.close()


@functools.cache
def paddle_run(model: str, nudged: bool = False):
    """Paddle's own training, recorded in the port's layout; also its initial weights."""
    make_paddle, make_port = _models(model)
    paddle.seed(0)
    layer = make_paddle()
    init = {k: v.numpy().copy() for k, v in layer.state_dict().items()}
    if nudged:
        paddle_side.nudge_params(layer)
    sched = paddle.optimizer.lr.ExponentialDecay(0.01, gamma=0.9)
    opt = paddle.optimizer.AdamW(sched, parameters=layer.parameters(), weight_decay=0.01)
    rec = TraceRecorder(layer, opt, None, port=make_port(), layers=True)
    train(layer, opt, sched, rec, model, paddle.to_tensor, paddle.nn.functional.cross_entropy)
    return rec.trace, init


class _Saved:
    """A stand-in for the Paddle model at its start, for the port's own loader."""

    def __init__(self, state):
        self.state = state

    def state_dict(self):
        return {k: paddle.to_tensor(v) for k, v in self.state.items()}


def port_run(model: str, bug: str | None = None):
    _, init = paddle_run(model)
    port = _models(model, bug if bug in ("gelu", "eps") else None)[1]()
    if bug == "transpose":
        hand_loader(SQUARE[model])(_Saved(init), port)
    else:
        port.load_state_dict(paddle_to_torch(init, port))
    sched = popt.lr.ExponentialDecay(0.01, gamma=0.9)
    opt = popt.AdamW(sched, parameters=port.parameters(), weight_decay=0.01)
    rec = TraceRecorder(port, opt, None, layers=True)
    if bug == "scheduler":
        sched.step()  # the port's loop steps its scheduler one step early
    train(port, opt, sched, rec, model, torch.from_numpy, torch.nn.functional.cross_entropy)
    return rec.trace


@pytest.mark.parametrize("model", ["transformer", "cnn"])
def test_clean_port_is_equal_within_the_baseline(model):
    reference, _ = paddle_run(model)
    baseline, _ = paddle_run(model, nudged=True)
    port = port_run(model)
    assert not compare(reference, port).ok  # torch.testing's float32 tolerances call kernel noise a bug
    result = compare(reference, port, baseline=baseline)
    assert result.ok, result.summary()
    if model == "transformer":
        assert any("act/blocks.0.attn.q_proj" in n and "compared as part of it" in n for n in result.notes)
    else:
        assert any(n.startswith("param/bn1.running_var, param/bn2.running_var not compared") for n in result.notes)


EXPECTED = {
    ("transformer", "gelu"): "act/blocks.1.act",
    ("transformer", "eps"): "act/blocks.0.ln2",
    ("transformer", "transpose"): "act/blocks.1.attn",
    ("transformer", "scheduler"): "lr",
    ("cnn", "gelu"): "act/act2",
    ("cnn", "eps"): "act/norm",
    ("cnn", "transpose"): "act/proj",
    ("cnn", "scheduler"): "lr",
}


@pytest.mark.parametrize(("model", "bug"), sorted(EXPECTED))
def test_injected_bug_is_reported_at_its_step_and_layer(model, bug):
    reference, _ = paddle_run(model)
    baseline, _ = paddle_run(model, nudged=True)
    d = compare(reference, port_run(model, bug), baseline=baseline).first_divergence
    assert (d.step, d.name) == (0, EXPECTED[(model, bug)]), d.describe()
    if bug == "scheduler":
        assert "its schedule runs one step ahead of Paddle's" in d.causes[0]
    else:
        assert d.metrics.rel_l2 > 4 * d.metrics.bound
