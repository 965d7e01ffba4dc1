"""The demo (``python -m paddle_compat.demo``) as a parity subject: its torch port, recorded.

The demo trains ``Linear(32,128)-GELU-Linear(128,128)-GELU-Linear(128,1)`` with ``auto_cast`` and a
``GradScaler`` whose scale starts high (so the first steps overflow and back off), one batch
corrupted with a NaN (a skipped step), and AdamW. Its Paddle original is ``demo_paddle.py``.

Variants of the port (``--variant``):

- ``port``: the faithful port: ``paddle_compat.optimizer.AdamW`` + ``paddle_compat.amp.GradScaler``;
- ``torch_adamw``: a wrong port: ``torch.optim.AdamW`` in place of ``paddle_compat.optimizer.AdamW``
  (torch's update rounds differently from Paddle's kernel);
- ``divide``: a wrong port: a hand-written loss scaler that divides the gradients by the scale
  instead of multiplying them by its reciprocal, as Paddle does (the same, unless the scale is not
  a power of two: hence ``INIT_SCALE``).

    python examples/parity/demo_port.py --variant port --out traces/port
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from typing import Any

import torch

import paddle_compat.optimizer as popt
from paddle_compat import demo
from paddle_compat.amp import GradScaler
from paddle_compat.demo import loss_of, make_model
from paddle_compat.parity import Trace, TraceRecorder
from paddle_compat.parity.trace import ENV_OUT

# The demo's settings, except the initial scale: 3 * 2**22 rather than 2**24, so that every scale
# on the way is not a power of two and dividing by it is not the same as multiplying by 1/scale.
STEPS = 40
CORRUPT_STEP = STEPS // 2  # 1-based, as the demo counts; a shorter run is a prefix of the full one
SEED = 0
INIT_SCALE = 3.0 * 2**22
INCR_EVERY = 20
LR = 3e-3
WEIGHT_DECAY = 0.01  # torch.optim.AdamW's default, which the demo uses (and Paddle's AdamW default)
BATCH = 128
VARIANTS = ("port", "torch_adamw", "divide")


def batches(steps: int = STEPS, seed: int = SEED) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The demo's mini-batches, the one of step ``CORRUPT_STEP`` (1-based) corrupted with a NaN."""
    return demo.batches(steps, seed, CORRUPT_STEP, BATCH)


class DividingScaler:
    """A hand-written port of Paddle's dynamic loss scaling, right in every rule but one: it
    unscales with ``grad / scale`` where Paddle computes ``grad * (1 / scale)``."""

    def __init__(self, init_loss_scaling: float, incr_every_n_steps: int) -> None:
        self._scale = torch.tensor([init_loss_scaling], dtype=torch.float32)
        self._every = incr_every_n_steps
        self._incr = self._decr = 0
        self._skipped: bool | None = None

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self._scale

    def minimize(self, optimizer: Any, scaled: torch.Tensor) -> None:
        grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        for g in grads:
            g.div_(self._scale)  # the mistake: Paddle multiplies by the reciprocal
        self._skipped = not all(bool(torch.isfinite(g).all()) for g in grads)
        if not self._skipped:
            optimizer.step()
        # Paddle's update rule (ratios 2 and 0.5, decrease on every bad step)
        if self._skipped:
            self._incr, self._decr = 0, 0
            self._scale = self._scale * 0.5
        else:
            self._incr += 1
            if self._incr == self._every:
                self._scale, self._incr = self._scale * 2.0, 0

    def last_step_skipped(self) -> bool | None:
        return self._skipped

    def state_dict(self) -> dict[str, Any]:
        return {"scale": self._scale.clone(), "incr_count": self._incr, "decr_count": self._decr}


def train(variant: str = "port", steps: int = STEPS, seed: int = SEED, **recorder: Any) -> Trace:
    """Train the demo's port for ``steps`` steps and return its trace (``recorder``: options of
    :class:`TraceRecorder`)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    model = make_model(seed)
    if variant == "torch_adamw":
        opt: Any = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    else:
        opt = popt.AdamW(learning_rate=LR, parameters=model.parameters(), weight_decay=WEIGHT_DECAY)
    if variant == "divide":
        scaler: Any = DividingScaler(INIT_SCALE, INCR_EVERY)
    else:
        scaler = GradScaler(init_loss_scaling=INIT_SCALE, incr_every_n_steps=INCR_EVERY)
    meta = {"variant": variant, "steps": steps, "seed": seed, "init_loss_scaling": INIT_SCALE}
    rec = TraceRecorder(model, opt, scaler, meta=meta, **recorder)
    for x, y in batches(steps, seed):
        loss = loss_of(model, x, y)
        scaled = scaler.scale(loss)
        scaled.backward()
        scaler.minimize(opt, scaled)
        rec.record(loss)
        opt.zero_grad()
    rec.close()
    return rec.trace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=VARIANTS, default="port")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--out", help="trace path (default: where `python -m paddle_compat.parity record` asks)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = args.out or os.environ.get(ENV_OUT)
    if not out:
        parser.error("--out is required (outside `python -m paddle_compat.parity record`)")
    trace = train(args.variant, args.steps)
    print(f"{args.variant}: {len(trace)} steps -> {trace.save(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
