"""The training step that tests/test_compile.py and benchmarks/count_graph_breaks.py compile:
a small MLP, one of three optimizers, torch's GradScaler or ours, and Dynamo's graph breaks by kind."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import torch
from torch._dynamo.utils import counters

from paddle_compat.amp import GradScaler

OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1),
    "adam": lambda params: torch.optim.Adam(params, lr=0.01),
    "fused_adamw": lambda params: torch.optim.AdamW(params, lr=0.01, fused=True),
}


def make(optimizer: str, scaler_kind: str) -> tuple[torch.nn.Module, torch.optim.Optimizer, Any]:
    """The seeded model, the optimizer named, and a scaler (``"torch"`` or ours) starting at
    1024 that grows every 2 finite steps."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = OPTIMIZERS[optimizer](model.parameters())
    if scaler_kind == "torch":
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=2)
    else:
        scaler = GradScaler(init_loss_scaling=1024.0, incr_every_n_steps=2)
    return model, opt, scaler


def training_step(model: torch.nn.Module, opt: torch.optim.Optimizer, scaler: Any) -> Callable[[Any, Any], None]:
    """One scaler-driven step on ``(x, y)``, to be called as it is or compiled."""

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()

    return step


# Two texts for one kind: a call Dynamo was told not to trace. torch's own scaler lives in files
# Dynamo skips ("marked as skipped"); ours is marked as torch.compiler.disable marks a function.
_NOT_TRACED = "Skip inlining `torch.compiler.disable()`d function"
_SKIPPED = "Attempted to inline function marked as skipped"


def graph_breaks() -> collections.Counter[str]:
    """The graph breaks Dynamo counted since ``counters.clear()``, by kind (a reason's first line)."""
    breaks: collections.Counter[str] = collections.Counter()
    for reason, count in counters["graph_break"].items():
        kind = reason.splitlines()[0]
        breaks[_SKIPPED if kind == _NOT_TRACED else kind] += count
    return breaks
