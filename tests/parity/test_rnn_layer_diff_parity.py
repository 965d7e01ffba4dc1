"""diff_layers on Paddle's recurrent layers (LSTM, GRU, SimpleRNN) against their torch ports.

Each Paddle model is a 2-layer recurrent layer and a Linear head, ported as a user would: torch's
own LSTM/GRU/RNN with ``batch_first=True`` (Paddle's default layout is batch-major), loaded with
the kit's conversion or with a user's loader that gets something wrong. The clean port is equal
within noise; a reordered gate layout, a forgotten ``batch_first`` and swapped directions are each
located at ``rnn``, forward and backward (and at loading when the weights themselves are wrong).
"""

from __future__ import annotations

import numpy as np
import paddle
import pytest
import torch
from torch import nn

from paddle_compat.parity import diff_layers, paddle_to_torch

FAMILIES = {  # Paddle class, torch class, gates stacked in the weights
    "lstm": (paddle.nn.LSTM, nn.LSTM, 4),
    "gru": (paddle.nn.GRU, nn.GRU, 3),
    "simple_rnn": (paddle.nn.SimpleRNN, nn.RNN, 1),
}
HIDDEN = 6


class PaddleTagger(paddle.nn.Layer):
    def __init__(self, family: str, bidirectional: bool = False) -> None:
        super().__init__()
        direction = "bidirect" if bidirectional else "forward"
        self.rnn = FAMILIES[family][0](4, HIDDEN, num_layers=2, direction=direction)
        self.fc = paddle.nn.Linear(HIDDEN * (2 if bidirectional else 1), 3)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y)


class TorchTagger(nn.Module):
    def __init__(self, family: str, bidirectional: bool = False, batch_first: bool = True) -> None:
        super().__init__()
        self.rnn = FAMILIES[family][1](4, HIDDEN, num_layers=2, batch_first=batch_first, bidirectional=bidirectional)
        self.fc = nn.Linear(HIDDEN * (2 if bidirectional else 1), 3)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.fc(y)


def user_loader(family: str, bug: str | None):
    """The kit's conversion, then the user's mistake: ``"gates"`` reverses the gate blocks (as a
    loader written for another framework's order does), ``"direction"`` swaps the forward and
    reverse weights of a bidirectional layer."""

    def load(paddle_model, torch_model) -> None:
        state = paddle_to_torch(paddle_model.state_dict(), torch_model)
        for k in [k for k in state if k.startswith("rnn.")]:
            if bug == "gates":
                state[k] = torch.cat(state[k].chunk(FAMILIES[family][2], 0)[::-1], 0)
            elif bug == "direction" and not k.endswith("_reverse"):
                state[k], state[k + "_reverse"] = state[k + "_reverse"], state[k]
        torch_model.load_state_dict(state)

    return load


def _x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 5, 4)).astype(np.float32)  # [batch, time, features]


def _diff(family: str, bug: str | None = None, **kw):
    paddle.seed(0)
    bidirectional = bug == "direction"
    pm = PaddleTagger(family, bidirectional)
    tm = TorchTagger(family, bidirectional, batch_first=bug != "batch_first")
    return pm, tm, diff_layers(pm, tm, _x(), load=user_loader(family, bug), **kw)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_clean_port_is_equal_and_the_model_is_left_as_it_was(family):
    paddle.seed(0)
    pm = PaddleTagger(family, bidirectional=True)
    before = {k: v.numpy().copy() for k, v in pm.state_dict().items()}
    result = diff_layers(pm, TorchTagger(family, bidirectional=True), _x())
    assert result.ok, result.summary() + "\n" + result.tree()
    assert [r.key for r in result.layers] == ["rnn", "fc", "(model)"]
    rnn = result.layers[0]
    assert any(c.what == "grad weight_ih_l1_reverse" for c in rnn.backward)  # parameter gradients compared
    assert all(np.array_equal(v.numpy(), before[k]) for k, v in pm.state_dict().items())
    assert all(p.grad is None for p in pm.parameters())


BUGS = ("gates", "batch_first", "direction")
CASES = [(f, b) for f in sorted(FAMILIES) for b in BUGS if (f, b) != ("simple_rnn", "gates")]  # one gate: no order


@pytest.mark.parametrize(("family", "bug"), CASES)
def test_injected_bug_is_located_at_the_rnn(family, bug):
    _, _, result = _diff(family, bug)
    assert not result.ok
    assert result.first_forward.layer == "rnn", result.summary()
    assert result.first_backward.layer == "rnn", result.summary()
    check = result.first_forward.check
    assert check.metrics["rel_l2"] > 1e3 * check.noise
    if bug == "batch_first":  # the weights are right: only the layout of the input differs
        assert result.first_load is None
    else:
        assert result.first.phase == "load" and result.first_load.layer == "rnn"
    marked = [line for line in result.tree().splitlines() if "<-- first divergence" in line]
    assert len(marked) == 1 and marked[0].strip().startswith("rnn (")


def test_chained_mode_too():
    _, _, clean = _diff("lstm", single_step=False)
    assert clean.ok, clean.summary()
    _, _, buggy = _diff("gru", "batch_first", single_step=False)
    assert buggy.first_forward.layer == "rnn"


class PaddleSeq2Seq(paddle.nn.Layer):
    """An encoder's final states start the decoder: Paddle passes them as ``initial_states=(h, c)``."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = paddle.nn.LSTM(4, HIDDEN)
        self.dec = paddle.nn.LSTM(4, HIDDEN)
        self.fc = paddle.nn.Linear(HIDDEN, 3)

    def forward(self, x, y):
        _, (h, c) = self.enc(x)
        out, _ = self.dec(y, initial_states=(h, c))
        return self.fc(out)


class TorchSeq2Seq(nn.Module):
    """The port passes them as torch does, a positional tuple."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.LSTM(4, HIDDEN, batch_first=True)
        self.dec = nn.LSTM(4, HIDDEN, batch_first=True)
        self.fc = nn.Linear(HIDDEN, 3)

    def forward(self, x, y):
        _, (h, c) = self.enc(x)
        out, _ = self.dec(y, (h, c))
        return self.fc(out)


def test_states_passed_in_a_tuple_are_fed_too():
    """The decoder is fed Paddle's input and Paddle's states (inside the tuple), whatever the
    keyword: its gates reordered are named there, forward and backward, and the encoder is not."""

    def swap_decoder_gates(paddle_model, torch_model):
        state = paddle_to_torch(paddle_model.state_dict(), torch_model)
        for k in [k for k in state if k.startswith("dec.")]:
            state[k] = torch.cat(state[k].chunk(4, 0)[::-1], 0)
        torch_model.load_state_dict(state)

    x, y = _x(), np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    paddle.seed(0)
    clean = diff_layers(PaddleSeq2Seq(), TorchSeq2Seq(), (x, y))
    assert clean.ok, clean.summary()
    dec = next(r for r in clean.layers if r.key == "dec")
    assert dec.isolated and [c.what for c in dec.backward][:3] == ["input grad 0", "input grad 1", "input grad 2"]
    paddle.seed(0)
    buggy = diff_layers(PaddleSeq2Seq(), TorchSeq2Seq(), (x, y), load=swap_decoder_gates)
    assert buggy.first_forward.layer == buggy.first_backward.layer == "dec", buggy.summary()
    assert next(r for r in buggy.layers if r.key == "enc").backward_ok
