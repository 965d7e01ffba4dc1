"""Two tiny BERTs written in both frameworks, as users port them (post-norm blocks, padding masks).

- ``PaddleLibBert``/``TorchLibBert``: each framework's own transformer encoder. Paddle's takes an
  additive mask ``[B, 1, 1, L]``; the port passes torch's form, ``src_key_padding_mask`` ``[B, L]``
  (True at padding), and torch's MultiheadAttention.
- ``PaddleHandBert``/``TorchHandBert``: a hand-written self-attention (q/k/v/o Linear layers), the
  Paddle one adding ``-1e4`` at padding, the port filling ``-inf`` from a boolean ``[B, L]`` mask.

``bug=`` injects one porting mistake in the port (see each class).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import paddle
import torch
from torch import nn

VOCAB, D, HEADS, FF, SEQ, PAD = 30, 16, 2, 32, 6, 0


def bert_input(seed: int = 0) -> np.ndarray:
    ids = np.random.default_rng(seed).integers(1, VOCAB, (3, SEQ))
    ids[0, 4:] = PAD  # padded sequences: the masks matter
    ids[1, 5:] = PAD
    return ids


class PaddleLibBert(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.emb = paddle.nn.Embedding(VOCAB, D)
        self.pos = paddle.nn.Embedding(SEQ, D)
        self.ln = paddle.nn.LayerNorm(D)
        layer = paddle.nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0, activation="gelu")
        self.encoder = paddle.nn.TransformerEncoder(layer, 2)
        self.head = paddle.nn.Linear(D, VOCAB)

    def forward(self, ids):
        mask = ((ids == PAD).astype("float32") * -1e4).unsqueeze([1, 2])  # additive, [B, 1, 1, L]
        x = self.ln(self.emb(ids) + self.pos(paddle.arange(ids.shape[1])))
        return self.head(self.encoder(x, mask))


class TorchLibBert(nn.Module):
    """``bug="eps"``: the second layer's ``norm2`` epsilon; ``"gelu"``: the first layer's activation
    tanh-approximated (a function inside the layer); ``"mask"``: the padding mask inverted;
    ``"ln_eps"``: the embeddings' LayerNorm epsilon."""

    def __init__(self, bug: str | None = None) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(SEQ, D)
        self.ln = nn.LayerNorm(D, eps=1e-6 if bug == "ln_eps" else 1e-5)
        layer = nn.TransformerEncoderLayer(D, HEADS, FF, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        if bug == "eps":
            self.encoder.layers[1].norm2.eps = 1e-6
        if bug == "gelu":
            self.encoder.layers[0].activation = functools.partial(nn.functional.gelu, approximate="tanh")
        self.head = nn.Linear(D, VOCAB)
        self.bug = bug

    def forward(self, ids):
        mask = ids == PAD
        if self.bug == "mask":
            mask = ~mask
        x = self.ln(self.emb(ids) + self.pos(torch.arange(ids.shape[1])))
        return self.head(self.encoder(x, src_key_padding_mask=mask))


class PaddleSelfAttention(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (paddle.nn.Linear(D, D) for _ in range(4))

    def forward(self, x, mask):
        return self.attend(x, x, x, mask)

    def attend(self, query, key, value, mask):
        b, n, _ = query.shape

        def heads(t):
            return t.reshape([b, n, HEADS, D // HEADS]).transpose([0, 2, 1, 3])

        scores = heads(self.q(query)) @ heads(self.k(key)).transpose([0, 1, 3, 2]) / math.sqrt(D // HEADS) + mask
        y = paddle.nn.functional.softmax(scores, axis=-1) @ heads(self.v(value))
        return self.o(y.transpose([0, 2, 1, 3]).reshape([b, n, D]))


class PaddleHandBlock(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.attn = PaddleSelfAttention()
        self.ln1 = paddle.nn.LayerNorm(D, epsilon=1e-12)
        self.fc1 = paddle.nn.Linear(D, FF)
        self.act = paddle.nn.GELU()
        self.fc2 = paddle.nn.Linear(FF, D)
        self.ln2 = paddle.nn.LayerNorm(D, epsilon=1e-12)

    def forward(self, x, mask):
        x = self.ln1(x + self.attn(x, mask))
        return self.ln2(x + self.fc2(self.act(self.fc1(x))))


class PaddleHandBert(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.emb = paddle.nn.Embedding(VOCAB, D)
        self.pos = paddle.nn.Embedding(SEQ, D)
        self.ln = paddle.nn.LayerNorm(D, epsilon=1e-12)
        self.blocks = paddle.nn.LayerList([PaddleHandBlock() for _ in range(2)])
        self.head = paddle.nn.Linear(D, VOCAB)

    def forward(self, ids):
        mask = ((ids == PAD).astype("float32") * -1e4).unsqueeze([1, 2])
        x = self.ln(self.emb(ids) + self.pos(paddle.arange(ids.shape[1])))
        for block in self.blocks:
            x = block(x, mask)
        return self.head(x)


class TorchSelfAttention(nn.Module):
    def __init__(self, scale_by_width: bool = False) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
        self.scale = math.sqrt(D if scale_by_width else D // HEADS)

    def forward(self, x, padding):
        b, n, _ = x.shape

        def heads(t):
            return t.view(b, n, HEADS, D // HEADS).transpose(1, 2)

        scores = heads(self.q(x)) @ heads(self.k(x)).transpose(-1, -2) / self.scale
        scores = scores.masked_fill(padding[:, None, None, :], float("-inf"))
        y = scores.softmax(-1) @ heads(self.v(x))
        return self.o(y.transpose(1, 2).reshape(b, n, D))


class TorchHandBlock(nn.Module):
    def __init__(self, bug: str | None = None) -> None:
        super().__init__()
        self.attn = TorchSelfAttention(scale_by_width=bug == "scale")
        self.ln1 = nn.LayerNorm(D, eps=1e-12)
        self.fc1 = nn.Linear(D, FF)
        self.act = nn.GELU(approximate="tanh" if bug == "gelu" else "none")
        self.fc2 = nn.Linear(FF, D)
        self.ln2 = nn.LayerNorm(D, eps=1e-5 if bug == "eps" else 1e-12)

    def forward(self, x, padding):
        x = self.ln1(x + self.attn(x, padding))
        return self.ln2(x + self.fc2(self.act(self.fc1(x))))


class TorchHandBert(nn.Module):
    """``bug="scale"``: block 0's attention scaled by the width instead of the head's; ``"gelu"``:
    block 1's GELU tanh-approximated; ``"eps"``: block 1's ``ln2`` with torch's default epsilon."""

    def __init__(self, bug: str | None = None) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(SEQ, D)
        self.ln = nn.LayerNorm(D, eps=1e-12)
        self.blocks = nn.ModuleList(
            [TorchHandBlock("scale" if bug == "scale" else None), TorchHandBlock(bug if bug != "scale" else None)]
        )
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):
        padding = ids == PAD  # torch's form: True at padding, [B, L]
        x = self.ln(self.emb(ids) + self.pos(torch.arange(ids.shape[1])))
        for block in self.blocks:
            x = block(x, padding)
        return self.head(x)
