"""diff_layers on BERT ports that take the mask in torch's form, against real Paddle 3.3.1.

Paddle's BERTs take an additive mask ``[B, 1, 1, L]``; their ports, torch's boolean padding mask
``[B, L]``. Single-step mode feeds each torch layer Paddle's activations (the inputs a gradient
flows into) and keeps the port's own mask: every layer is isolated, a clean port is equal, and each
injected bug is named at its layer, forward and backward. A layer that cannot be fed Paddle's
inputs (a sequence-first port) is said so, per layer, and never blamed for the backward.
"""

from __future__ import annotations

import paddle
import pytest
import torch

from paddle_compat.parity import diff_layers

from .bert_models import (
    FF,
    HEADS,
    PAD,
    D,
    PaddleHandBert,
    PaddleHandBlock,
    PaddleLibBert,
    PaddleSelfAttention,
    TorchHandBert,
    TorchLibBert,
    bert_input,
)

MODELS = {"library": (PaddleLibBert, TorchLibBert), "hand": (PaddleHandBert, TorchHandBert)}


def _run(model: str, bug: str | None = None, port=None, **kw):
    paddle.seed(0)
    make_paddle, make_torch = MODELS[model]
    return diff_layers(make_paddle(), port or make_torch(bug), bert_input(), **kw)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_clean_port_is_equal_and_every_layer_isolated(model):
    result = _run(model)
    assert result.ok, result.summary() + "\n" + result.tree()
    assert not result.not_isolated
    attn = next(r for r in result.layers if r.key.endswith("0.self_attn" if model == "library" else "0.attn"))
    kept = "'key_padding_mask'" if model == "library" else "argument 1"  # torch's [B, L] boolean mask
    assert attn.remark == f"fed Paddle's activations, the port's own {kept} (another form than Paddle's)"
    assert attn.forward and attn.backward  # replayed on Paddle's input, not compared as chained


EXPECTED: dict = {  # (model, bug): the layer named, forward and backward
    ("library", "eps"): "encoder.layers.1.norm2",
    ("library", "gelu"): "encoder.layers.0",  # a function inside the layer: its own forward code
    # fed the port's (inverted) mask, both attentions compute differently: the first forward, the
    # last (first to run backward) backward
    ("library", "mask"): ("encoder.layers.0.self_attn", "encoder.layers.1.self_attn"),
    ("library", "ln_eps"): "ln",
    ("hand", "scale"): "blocks.0.attn",
    ("hand", "gelu"): "blocks.1.act",
    ("hand", "eps"): "blocks.1.ln2",
}


@pytest.mark.parametrize(("model", "bug"), sorted(EXPECTED))
def test_injected_bug_is_named_at_its_layer_forward_and_backward(model, bug):
    result = _run(model, bug)
    forward = backward = EXPECTED[(model, bug)]
    if isinstance(forward, tuple):
        forward, backward = forward
    assert result.first_forward.layer == forward, result.summary()
    assert result.first_backward.layer == backward, result.summary()
    assert not result.not_isolated


class SequenceFirstPort(TorchLibBert):
    """A port whose encoder runs sequence-first ([L, B, D], torch's default layout): its layers
    cannot be fed Paddle's batch-first activations."""

    def __init__(self, bug: str | None = None) -> None:
        super().__init__(bug)
        layer = torch.nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0, activation="gelu")
        self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, ids):
        x = self.ln(self.emb(ids) + self.pos(torch.arange(ids.shape[1])))
        y = self.encoder(x.transpose(0, 1), src_key_padding_mask=ids == PAD)
        return self.head(y.transpose(0, 1))


def test_a_layer_not_isolated_is_said_so_and_never_blamed():
    """The embeddings' LayerNorm epsilon is wrong; the encoder's layers, not isolated, show the
    error built up in their gradients: the backward verdict still names the LayerNorm."""
    result = _run("library", port=SequenceFirstPort("ln_eps"))
    assert result.first_forward.layer == "ln"
    assert result.first_backward.layer == "ln", result.summary()
    encoder = next(r for r in result.layers if r.key == "encoder")
    assert not encoder.isolated and not encoder.backward_ok
    assert encoder.remark.startswith("not isolated (its input argument 0 is [6, 3, 16], Paddle's [3, 6, 16])")
    assert {"encoder", "encoder.layers.0.self_attn"} <= {r.key for r in result.not_isolated}
    assert "not isolated, compared as chained and never blamed for the backward: " in result.summary()
    assert all(r.isolated for r in result.layers if r.key in ("ln", "head", "emb", "pos"))


class PaddleQKVAttention(PaddleSelfAttention):
    """Called as ``attn(x, x, x, mask)``, where the port's attention takes ``attn(x, padding)``."""

    def forward(self, query, key, value, mask):
        return self.attend(query, key, value, mask)


class PaddleQKVBlock(PaddleHandBlock):
    def __init__(self) -> None:
        super().__init__()
        self.attn = PaddleQKVAttention()

    def forward(self, x, mask):
        x = self.ln1(x + self.attn(x, x, x, mask))
        return self.ln2(x + self.fc2(self.act(self.fc1(x))))


class PaddleQKVBert(PaddleHandBert):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = paddle.nn.LayerList([PaddleQKVBlock() for _ in range(2)])


@pytest.mark.parametrize("bug", [None, "scale"])
def test_one_input_passed_three_times_on_paddles_side(bug):
    """Paddle's attention gets x as query, key and value; the port's gets it once: it is fed once,
    and its input gradient is compared with the sum of Paddle's three."""
    paddle.seed(0)
    result = diff_layers(PaddleQKVBert(), TorchHandBert(bug), bert_input())
    attn = next(r for r in result.layers if r.key == "blocks.0.attn")
    assert attn.isolated and attn.backward[0].what == "input grad 0"
    if bug is None:
        assert result.ok, result.summary()
    else:
        assert result.first_forward.layer == result.first_backward.layer == "blocks.0.attn", result.summary()
