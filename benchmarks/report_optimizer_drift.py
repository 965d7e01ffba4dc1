"""How far torch's own optimizers drift from Paddle 3.3.1, beside paddle_compat's, on the same runs.

Each configuration trains the same small model for 60 steps three times (real Paddle on CPU,
paddle_compat, and the closest torch.optim setup), every run closing its own loop (its gradients
come from its own parameters), and reports how far the final parameters are from Paddle's:
the largest distance in float32 ulps, how many of the 228 values differ, and the largest relative
difference. What the exact rounding costs per step is ``bench_optimizers.py``'s to measure (it
times torch apart from Paddle, whose import slows torch's CPU ops in the same process).

Run from the repository root:  python benchmarks/report_optimizer_drift.py
(needs the test dependencies: paddlepaddle==3.3.1).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import paddle  # noqa: E402
import torch  # noqa: E402

import paddle_compat.nn as pnn  # noqa: E402
import paddle_compat.optimizer as popt  # noqa: E402
from paddle_compat.parity._arrays import ulp_distance  # noqa: E402
from tests.parity.test_optimizer_parity import (  # noqa: E402
    OVERFLOW_STEPS,
    SHAPES,
    OursSide,
    PaddleSide,
    Side,
    initial_values,
)

paddle.set_device("cpu")
STEPS = 60
SCALER = {"init_loss_scaling": 2.0**10, "incr_every_n_steps": 7}


class TorchSide(Side):
    """torch.optim with torch's own clipping and torch.amp.GradScaler."""

    def __init__(self, make_opt: Callable[[list], Any], clip_norm: float | None, scaler: bool) -> None:
        self.tensors = {n: torch.nn.Parameter(torch.from_numpy(v.copy())) for n, v in initial_values().items()}
        self.opt = make_opt(list(self.tensors.values()))
        self.clip_norm = clip_norm
        self.scaler = (
            torch.amp.GradScaler(
                "cpu", init_scale=SCALER["init_loss_scaling"], growth_interval=SCALER["incr_every_n_steps"]
            )
            if scaler
            else None
        )

    def params(self) -> dict[str, torch.Tensor]:
        return self.tensors

    def values(self) -> dict[str, np.ndarray]:
        return {n: t.detach().numpy() for n, t in self.tensors.items()}

    def step(self, step: int, overflow: bool) -> None:
        scale = self.scaler.get_scale() if self.scaler is not None else None
        for n, g in self.grads(step, scale, overflow).items():
            self.tensors[n].grad = g
        if self.scaler is not None:
            self.scaler.scale(torch.tensor(1.0))
            self.scaler.unscale_(self.opt)
        if self.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(list(self.tensors.values()), self.clip_norm)
        if self.scaler is not None:
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            self.opt.step()
        self.opt.zero_grad()


CONFIGS: list[tuple[str, Callable, Callable, Callable, float | None, bool]] = [
    (
        "SGD",
        lambda ps: popt.SGD(0.1, parameters=ps),
        lambda ps: paddle.optimizer.SGD(0.1, parameters=ps),
        lambda ps: torch.optim.SGD(ps, lr=0.1),
        None,
        False,
    ),
    (
        "SGD + L2 + GlobalNorm + scaler",
        lambda ps: popt.SGD(0.1, parameters=ps, weight_decay=0.01, grad_clip=pnn.ClipGradByGlobalNorm(0.5)),
        lambda ps: paddle.optimizer.SGD(
            0.1, parameters=ps, weight_decay=0.01, grad_clip=paddle.nn.ClipGradByGlobalNorm(0.5)
        ),
        lambda ps: torch.optim.SGD(ps, lr=0.1, weight_decay=0.01),
        0.5,
        True,
    ),
    (
        "Momentum (Nesterov) + L2",
        lambda ps: popt.Momentum(0.05, 0.9, parameters=ps, use_nesterov=True, weight_decay=0.01),
        lambda ps: paddle.optimizer.Momentum(0.05, 0.9, parameters=ps, use_nesterov=True, weight_decay=0.01),
        lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
        None,
        False,
    ),
    (
        "Adam",
        lambda ps: popt.Adam(0.01, parameters=ps),
        lambda ps: paddle.optimizer.Adam(0.01, parameters=ps),
        lambda ps: torch.optim.Adam(ps, lr=0.01),
        None,
        False,
    ),
    (
        "Adam + L2 + GlobalNorm + scaler",
        lambda ps: popt.Adam(0.01, parameters=ps, weight_decay=0.01, grad_clip=pnn.ClipGradByGlobalNorm(0.5)),
        lambda ps: paddle.optimizer.Adam(
            0.01, parameters=ps, weight_decay=0.01, grad_clip=paddle.nn.ClipGradByGlobalNorm(0.5)
        ),
        lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.01),
        0.5,
        True,
    ),
    (
        "AdamW (0.01 decay)",
        lambda ps: popt.AdamW(0.01, parameters=ps),
        lambda ps: paddle.optimizer.AdamW(0.01, parameters=ps),
        lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.01),
        None,
        False,
    ),
    (
        "AdamW + GlobalNorm + scaler",
        lambda ps: popt.AdamW(0.01, parameters=ps, weight_decay=0.1, grad_clip=pnn.ClipGradByGlobalNorm(0.5)),
        lambda ps: paddle.optimizer.AdamW(
            0.01, parameters=ps, weight_decay=0.1, grad_clip=paddle.nn.ClipGradByGlobalNorm(0.5)
        ),
        lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
        0.5,
        True,
    ),
]


def _distance(mine: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> tuple[int, int, float]:
    ulps, differing, rel = 0, 0, 0.0
    for n in SHAPES:
        a, b = mine[n], ref[n]
        d = ulp_distance(a, b, "float32")
        ulps, differing = max(ulps, int(d.max())), differing + int((d != 0).sum())
        rel = max(rel, float((np.abs(a - b) / np.maximum(np.abs(b), 1e-30)).max()))
    return ulps, differing, rel


def drift_table() -> None:
    print(f"Distance from Paddle 3.3.1 (CPU) after {STEPS} steps; 228 parameters; overflow injected at "
          f"steps {OVERFLOW_STEPS} in the scaler runs")
    print(f"{'configuration':34s} | {'paddle_compat: ulps  differ':28s} | {'torch.optim: ulps  differ  max rel':36s}")
    for name, ours_make, paddle_make, torch_make, clip_norm, scaler in CONFIGS:
        runs = [
            OursSide(ours_make, SCALER if scaler else None, torch.float32),
            PaddleSide(paddle_make, SCALER if scaler else None, torch.float32),
            TorchSide(torch_make, clip_norm, scaler),
        ]
        for step in range(STEPS):
            for run in runs:
                run.step(step, scaler and step in OVERFLOW_STEPS)
        ours, ref, theirs = (run.values() for run in runs)
        u, d, _ = _distance(ours, ref)
        tu, td, tr = _distance(theirs, ref)
        print(f"{name:34s} | {u:>12d} {d:>7d}{'':8s} | {tu:>12d} {td:>7d} {tr:>10.2e}")


if __name__ == "__main__":
    drift_table()
