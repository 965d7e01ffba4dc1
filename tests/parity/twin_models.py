"""Real models written in both frameworks, as a user porting them would write them.

- a 2-block pre-norm transformer: Embedding, a position table, LayerNorm, MultiHeadAttention,
  Linear, GELU, a head;
- a CNN: Conv2D, BatchNorm2D, GELU, pooling, LayerNorm, a square projection and a head.

The torch ports use torch's own modules and the same layer names. ``bug=`` injects one porting
mistake: ``"gelu"`` (tanh-approximated GELU where Paddle's is exact), ``"eps"`` (torch's default
LayerNorm epsilon 1e-5 where the Paddle model says 1e-6). :func:`hand_loader` is a user's weight
loader, which can forget one transpose.
"""

from __future__ import annotations

import numpy as np
import paddle
import torch
from torch import nn

D, HEADS, FF, VOCAB, SEQ = 16, 2, 32, 50, 6
EPS = 1e-6


class PaddleBlock(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.ln1 = paddle.nn.LayerNorm(D, epsilon=EPS)
        self.attn = paddle.nn.MultiHeadAttention(D, HEADS)
        self.ln2 = paddle.nn.LayerNorm(D, epsilon=EPS)
        self.fc1 = paddle.nn.Linear(D, FF)
        self.act = paddle.nn.GELU()
        self.fc2 = paddle.nn.Linear(FF, D)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h)
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class PaddleTransformer(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.emb = paddle.nn.Embedding(VOCAB, D)
        self.pos = self.create_parameter([SEQ, D], default_initializer=paddle.nn.initializer.Normal(0.0, 0.5))
        self.blocks = paddle.nn.LayerList([PaddleBlock() for _ in range(2)])
        self.norm = paddle.nn.LayerNorm(D, epsilon=EPS)
        self.head = paddle.nn.Linear(D, VOCAB)

    def forward(self, ids):
        x = self.emb(ids) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


class TorchBlock(nn.Module):
    def __init__(self, gelu: str = "none", ln2_eps: float = EPS) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(D, eps=EPS)
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.ln2 = nn.LayerNorm(D, eps=ln2_eps)
        self.fc1 = nn.Linear(D, FF)
        self.act = nn.GELU(approximate=gelu)
        self.fc2 = nn.Linear(FF, D)

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class TorchTransformer(nn.Module):
    """``bug="gelu"``: block 1's GELU; ``bug="eps"``: block 0's ``ln2``."""

    def __init__(self, bug: str | None = None) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.pos = nn.Parameter(torch.zeros(SEQ, D))
        self.blocks = nn.ModuleList(
            [
                TorchBlock(ln2_eps=1e-5 if bug == "eps" else EPS),
                TorchBlock(gelu="tanh" if bug == "gelu" else "none"),
            ]
        )
        self.norm = nn.LayerNorm(D, eps=EPS)
        self.head = nn.Linear(D, VOCAB)

    def forward(self, ids):
        x = self.emb(ids) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


C1, C2, CLASSES = 8, 16, 10


class PaddleCNN(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = paddle.nn.Conv2D(3, C1, 3, padding=1)
        self.bn1 = paddle.nn.BatchNorm2D(C1)
        self.act1 = paddle.nn.GELU()
        self.conv2 = paddle.nn.Conv2D(C1, C2, 3, padding=1)
        self.bn2 = paddle.nn.BatchNorm2D(C2)
        self.act2 = paddle.nn.GELU()
        self.pool = paddle.nn.AdaptiveAvgPool2D(1)
        self.norm = paddle.nn.LayerNorm(C2, epsilon=EPS)
        self.proj = paddle.nn.Linear(C2, C2)
        self.fc = paddle.nn.Linear(C2, CLASSES)

    def forward(self, x):
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.act2(self.bn2(self.conv2(x)))
        return self.fc(self.proj(self.norm(paddle.flatten(self.pool(x), 1))))


class TorchCNN(nn.Module):
    """``bug="gelu"``: ``act2``; ``bug="eps"``: ``norm``."""

    def __init__(self, bug: str | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, C1, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(C1)  # momentum 0.1 is Paddle's 0.9
        self.act1 = nn.GELU()
        self.conv2 = nn.Conv2d(C1, C2, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(C2)
        self.act2 = nn.GELU(approximate="tanh" if bug == "gelu" else "none")
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.norm = nn.LayerNorm(C2, eps=1e-5 if bug == "eps" else EPS)
        self.proj = nn.Linear(C2, C2)
        self.fc = nn.Linear(C2, CLASSES)

    def forward(self, x):
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.act2(self.bn2(self.conv2(x)))
        return self.fc(self.proj(self.norm(torch.flatten(self.pool(x), 1))))


def hand_loader(forget: str | None = None):
    """A user's own loader of a Paddle state dict into the port: Linear weights transposed, BatchNorm
    statistics renamed, attention projections packed; ``forget``: one weight copied untransposed."""

    def load(paddle_model, torch_model) -> None:
        src = {k: v.numpy() for k, v in paddle_model.state_dict().items()}
        linear = {f"{n}.weight" for n, m in torch_model.named_modules() if isinstance(m, nn.Linear)}
        state = {}
        for k, v in src.items():
            k = k.replace("._mean", ".running_mean").replace("._variance", ".running_var")
            if any(f".{p}_proj." in k for p in "qkv"):
                continue
            state[k] = torch.from_numpy(v.T.copy() if k in linear and k != forget else v.copy())
        for n, m in torch_model.named_modules():
            if isinstance(m, nn.MultiheadAttention):
                w = [src[f"{n}.{p}_proj.weight"].T for p in "qkv"]
                b = [src[f"{n}.{p}_proj.bias"] for p in "qkv"]
                state[f"{n}.in_proj_weight"] = torch.from_numpy(np.concatenate(w, 0))
                state[f"{n}.in_proj_bias"] = torch.from_numpy(np.concatenate(b, 0))
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                state[f"{n}.num_batches_tracked"] = m.num_batches_tracked.clone()
        torch_model.load_state_dict(state)

    return load


def transformer_input(batch: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, (batch, SEQ))


def cnn_input(batch: int = 4, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, 3, 8, 8)).astype(np.float32)
