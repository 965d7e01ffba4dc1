"""Optimizer parity with real Paddle 3.3.1 on CPU: the same small model trained side by side.

Both sides compute the gradients with the same torch function of *their own* current parameters
(so the loop is closed on each side), and the parameters are compared bitwise after every step.
Paddle receives the gradients through ``(p * G).sum().backward()``, which yields exactly ``G``.
With a GradScaler, each side uses its own scaler (paddle_compat's and a real Paddle one) and
overflow is injected into the gradients at fixed steps.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import paddle
import pytest
import torch

from paddle_compat.amp import GradScaler
from paddle_compat.optimizer import _eigen
from paddle_compat.parity._arrays import ulp_distance

from ..optim_db import PARITY_SCALER, cases
from .paddle_oracle import bits, paddle_scaler

SHAPES = {"w1": (8, 16), "b1": (16,), "w2": (16, 4), "b2": (4,)}
STEPS = 60
OVERFLOW_STEPS = (3, 17, 18, 40)
_UNIQUE = itertools.count()  # Paddle refuses to reuse a parameter name


def model_loss(params: dict[str, torch.Tensor], step: int) -> torch.Tensor:
    """A two-layer MLP's loss on the step's mini-batch (deterministic data)."""
    gen = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(32, 8, generator=gen)
    target = torch.randn(32, 4, generator=gen)
    hidden = torch.tanh(x @ params["w1"] + params["b1"])
    return ((hidden @ params["w2"] + params["b2"] - target) ** 2).mean() * 4.0


def initial_values(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: (rng.standard_normal(s) * 0.5).astype(np.float32) for n, s in SHAPES.items()}


def max_ulps(a: np.ndarray, b: np.ndarray) -> int:
    """The largest distance in float32 ulps (across zero too)."""
    return int(ulp_distance(a, b, "float32").max())


# --- the two sides --------------------------------------------------------------------------------
class Side:
    """One training loop: parameters of ``dtype``, gradients from ``model_loss`` in float32."""

    dtype = torch.float32

    def params(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def grads(self, step: int, scale: float | None, overflow: bool) -> dict[str, torch.Tensor]:
        params = {n: t.detach().float().requires_grad_(True) for n, t in self.params().items()}
        loss = model_loss(params, step)
        if scale is not None:
            loss = loss * torch.tensor(scale, dtype=torch.float32)
        loss.backward()
        grads = {n: p.grad.to(self.dtype) for n, p in params.items()}
        if overflow:
            grads["w2"][1, 2] = float("inf")
        return grads


class OursSide(Side):
    def __init__(self, make_opt: Callable[[list], Any], scaler_kwargs: dict | None, dtype: torch.dtype) -> None:
        self.dtype = dtype
        init = initial_values()
        self.tensors = {n: torch.nn.Parameter(torch.from_numpy(v.copy()).to(dtype)) for n, v in init.items()}
        self.opt = make_opt(list(self.tensors.items()))
        self.scaler = GradScaler(**scaler_kwargs) if scaler_kwargs is not None else None

    def params(self) -> dict[str, torch.Tensor]:
        return self.tensors

    def step(self, step: int, overflow: bool) -> None:
        scale = self.scaler.get_scale() if self.scaler is not None else None
        for n, g in self.grads(step, scale, overflow).items():
            self.tensors[n].grad = g
        if self.scaler is not None:
            self.scaler.minimize(self.opt, torch.zeros([]))
        else:
            self.opt.step()
        self.opt.clear_grad()

    def values(self) -> dict[str, np.ndarray]:
        return {n: t.detach().float().numpy() for n, t in self.tensors.items()}


class PaddleSide(Side):
    def __init__(self, make_opt: Callable[[list], Any], scaler_kwargs: dict | None, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self.pdtype = str(dtype).replace("torch.", "")
        init = initial_values()
        self.tensors = {}
        for n, v in init.items():
            p = paddle.create_parameter(
                list(v.shape), self.pdtype, name=f"{n}_{next(_UNIQUE)}",
                default_initializer=paddle.nn.initializer.Constant(0.0),
            )
            p.set_value(paddle.to_tensor(v).astype(self.pdtype))
            self.tensors[n] = p
        self.opt = make_opt(list(self.tensors.values()))
        self.scaler = paddle_scaler("GradScaler", **scaler_kwargs) if scaler_kwargs is not None else None

    def values(self) -> dict[str, np.ndarray]:
        return {n: p.astype("float32").numpy() for n, p in self.tensors.items()}

    def params(self) -> dict[str, torch.Tensor]:
        return {n: torch.from_numpy(v) for n, v in self.values().items()}

    def step(self, step: int, overflow: bool) -> None:
        scale = float(self.scaler._scale.numpy().reshape(-1)[0]) if self.scaler is not None else None
        grads = self.grads(step, scale, overflow)
        # d/dp sum(p * G) is exactly G (through a cast when the parameter is not float32)
        injected = sum(
            (p.astype("float32") * paddle.to_tensor(grads[n].float().numpy())).sum() for n, p in self.tensors.items()
        )
        injected.backward()
        if self.scaler is not None:
            self.scaler.minimize(self.opt, injected)
        else:
            self.opt.step()
        self.opt.clear_grad()


@dataclasses.dataclass
class Config:
    name: str
    ours: Callable[[list], Any]
    paddle: Callable[[list], Any]
    scaler: dict | None = None
    steps: int = STEPS
    dtype: torch.dtype = torch.float32
    set_lr_at: dict[int, float] = dataclasses.field(default_factory=dict)  # step -> opt.set_lr(value)


def run_parity(cfg: Config) -> None:
    ours = OursSide(cfg.ours, cfg.scaler, cfg.dtype)
    ref = PaddleSide(cfg.paddle, cfg.scaler, cfg.dtype)
    mine = ours.values()
    for step in range(cfg.steps):
        overflow = cfg.scaler is not None and step in OVERFLOW_STEPS
        if step in cfg.set_lr_at:
            ours.opt.set_lr(cfg.set_lr_at[step])
            ref.opt.set_lr(cfg.set_lr_at[step])
        ours.step(step, overflow)
        ref.step(step, overflow)
        for side in (ours, ref):  # a scheduler driving the rate steps after every step, as in a training loop
            if not isinstance(side.opt._learning_rate, float):
                side.opt._learning_rate.step()
        before, (mine, theirs) = mine, (ours.values(), ref.values())
        if overflow:  # the scaler skipped the step: nothing moved
            assert all(np.array_equal(bits(before[n]), bits(mine[n])) for n in SHAPES)
        for n in SHAPES:
            a, b = mine[n], theirs[n]
            assert np.array_equal(bits(a), bits(b)), (
                f"{cfg.name}: {n} differs from Paddle after step {step} by up to {max_ulps(a, b)} ulps"
            )
    if cfg.scaler is not None:
        assert ours.scaler.get_scale() == float(ref.scaler._scale.numpy().reshape(-1)[0])


# Every configuration of the table marked for this suite, built with each API.
CONFIGS = [
    Config(
        inp.desc, inp.make, functools.partial(inp.build, paddle),
        scaler=PARITY_SCALER if inp.options.get("scaler") else None,
        dtype=inp.options.get("dtype", torch.float32), set_lr_at=inp.options.get("set_lr_at", {}),
    )
    for _, inp in cases("parity")
]


# Paddle's float32 Eigen sqrt is the CPU's approximate rsqrt refined (see optimizer/_eigen.py): bitwise
# only with this CPU's instruction, which the compiled kernels give.
EIGEN_SQRT = {inp.desc for info, inp in cases("parity") if info.eigen_sqrt}


def needs_hardware_rsqrt(cfg: Config, eigen_sqrt: bool | None = None) -> None:
    """Skip ``cfg`` when it needs Eigen's float32 sqrt and this process has no hardware rsqrt."""
    uses = cfg.name in EIGEN_SQRT if eigen_sqrt is None else eigen_sqrt
    if uses and cfg.dtype == torch.float32 and _eigen._hardware_rsqrt() is None:
        pytest.skip("Eigen's float32 sqrt needs the CPU's rsqrt from the compiled kernels, not available here")


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_bitwise_parity_with_paddle(cfg: Config) -> None:
    needs_hardware_rsqrt(cfg)
    run_parity(cfg)
