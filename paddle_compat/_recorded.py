"""Paddle 3.3.1's CPU optimizers as recorded on real hosts, one record per profile (``_paddle_cpu``).

Each case steps two parameters (4097 elements and 33x17, so vector tails are hit) four times with
gradients from NumPy's seeded generator, exactly as ``tests/golden/record_paddle_cpu.py`` drove real
Paddle; the record keeps a digest of every parameter after every step
(``paddle331_cpu_goldens.json``, shipped with the package so that the self-check can compare this
machine with Paddle on every profile). ``run`` replays a case on ``paddle_compat``; the profile in
force (``PADDLE_COMPAT_PADDLE_CPU``) decides which record it must match.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

import torch

__all__ = ["DTYPES", "SHAPES", "STEPS", "build", "digest", "inputs", "names", "record", "run"]

STEPS = 4
SHAPES = [(4097,), (33, 17)]
DTYPES = ("float32", "float64")
LR = 1e-2
_FILE = Path(__file__).with_name("paddle331_cpu_goldens.json")


# case -> (optimizer, its arguments); ("module", "Class", x) stands for ``module.Class(x)``. Our
# names are Paddle's, so one table builds either framework's optimizer (``build``).
_SPECS: dict[str, tuple[str, dict[str, Any]]] = {
    "SGD": ("SGD", {}),
    "SGD_l2": ("SGD", {"weight_decay": ("regularizer", "L2Decay", 1e-2)}),
    "Momentum": ("Momentum", {"momentum": 0.9}),
    "Momentum_nesterov_l2": ("Momentum", {"momentum": 0.9, "use_nesterov": True,
                                          "weight_decay": ("regularizer", "L2Decay", 1e-2)}),
    "Adam": ("Adam", {}),
    "Adam_l2_eps": ("Adam", {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6,
                             "weight_decay": ("regularizer", "L2Decay", 1e-2)}),
    "Adam_amsgrad": ("Adam", {"amsgrad": True}),
    "AdamW": ("AdamW", {"weight_decay": 0.01}),
    "AdamW_clip_global": ("AdamW", {"weight_decay": 0.01, "grad_clip": ("nn", "ClipGradByGlobalNorm", 0.5)}),
    "Momentum_clip_norm": ("Momentum", {"momentum": 0.9, "grad_clip": ("nn", "ClipGradByNorm", 0.5)}),
    "SGD_clip_value": ("SGD", {"grad_clip": ("nn", "ClipGradByValue", 0.3)}),
    "Lamb": ("Lamb", {"lamb_weight_decay": 0.01}),
    "RMSProp": ("RMSProp", {}),
    "RMSProp_centered": ("RMSProp", {"momentum": 0.9, "centered": True}),
    "Adagrad": ("Adagrad", {}),
    "Adamax": ("Adamax", {}),
    "Adadelta": ("Adadelta", {"learning_rate": 1.0}),
    "NAdam": ("NAdam", {}),
    "RAdam": ("RAdam", {}),
    "ASGD": ("ASGD", {"batch_num": 2}),
    "Rprop": ("Rprop", {}),
}


def build(framework: Any, name: str, params: list[Any]) -> Any:
    """Case ``name``'s optimizer from ``framework`` (``paddle_compat`` or ``paddle``) over ``params``."""
    cls, spec = _SPECS[name]
    kwargs = {"learning_rate": LR}
    for key, value in spec.items():
        kwargs[key] = getattr(getattr(framework, value[0]), value[1])(value[2]) if isinstance(value, tuple) else value
    return getattr(framework.optimizer, cls)(parameters=params, **kwargs)


def inputs(name: str, dtype: str) -> tuple[list[Any], list[list[Any]]]:
    """The initial parameters and each step's gradients of a case, as NumPy arrays (the recorder's)."""
    import numpy as np

    rng = np.random.default_rng([sum(map(ord, name)), len(name), len(dtype)])
    inits = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    grads = [[(rng.standard_normal(s) * 0.5).astype(dtype) for s in SHAPES] for _ in range(STEPS)]
    return inits, grads


def digest(array: Any) -> str:
    """A short digest of an array's bytes: equal digests, equal bits."""
    return hashlib.sha256(memoryview(array).cast("B")).hexdigest()[:16]


def digests(case: str) -> list[list[str]]:
    """``run(case)``'s parameters after each step, as their ``digest`` (what the record holds)."""
    return [[digest(a) for a in step] for step in run(case)]


def run(case: str) -> list[list[Any]]:
    """A case (``"Adam/float32"``) replayed on ``paddle_compat`` with the profile in force: the parameters
    after each step (NumPy)."""
    name, dtype = case.split("/")
    inits, grads = inputs(name, dtype)
    params = [torch.nn.Parameter(torch.from_numpy(v.copy())) for v in inits]
    import paddle_compat

    opt = build(paddle_compat, name, params)
    out = []
    for step in grads:
        for p, g in zip(params, step):
            p.grad = torch.from_numpy(g.copy())
        opt.step()
        opt.clear_grad()
        out.append([p.detach().numpy().copy() for p in params])
    return out


@cache
def record() -> dict[str, Any]:
    """The recorded digests: ``{"profiles": {name: {"source": ..., "cases": {case: [[step digests]...]}}}}``."""
    with open(_FILE, encoding="utf-8") as f:
        return json.load(f)


def names() -> list[str]:
    """Every case, ``"<optimizer case>/<dtype>"`` (Paddle's CPU build has no float64 ``clip_by_norm``)."""
    return [f"{n}/{d}" for n in _SPECS for d in DTYPES if f"{n}/{d}" != "Momentum_clip_norm/float64"]
