"""How far the optimizers' torch forms drift from the compiled CPU kernels, float32, after 60 steps.

    python benchmarks/report_fallback_drift.py

Every optimizer of the case table (``tests/optim_db.py``), at rate 0.01 on three float32 tensors
(1000, 37 and 4096 elements) with the same random gradients, run with the compiled kernels and
with their torch forms (what ``PADDLE_COMPAT_NATIVE=0``, or a library not built or refused, runs);
the largest distance of the final parameters, in float32 ulps. The torch forms give the kernels'
bits except where Paddle's Eigen float32 sqrt starts from the CPU's ``rsqrtps``, which no torch
operation reaches (docs/optimizers.md, "Eigen's float32 sqrt"): there they take the correctly
rounded root, within 3 ulps per root, and the trajectories part.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")

import torch  # noqa: E402

from paddle_compat import _native  # noqa: E402
from tests.optim_db import CLASSES, new  # noqa: E402


def _ordered(x: torch.Tensor) -> torch.Tensor:
    """float32 bits as integers in the floats' order (ulp distances are differences of these)."""
    i = x.view(torch.int32).to(torch.int64)
    return torch.where(i < 0, -(i & 0x7FFFFFFF), i)


def run(cls: type, native: bool) -> list[torch.Tensor]:
    _native._enabled = native  # what PADDLE_COMPAT_NATIVE does, read once per process
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in (1000, 37, 4096)]
    opt = new(cls, 0.01, params)
    for _ in range(60):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen) * 0.1
        opt.step()
    return [p.detach().clone() for p in params]


def main() -> None:
    if _native.kernels() is None:
        sys.exit(f"the compiled kernels are not used here: {_native.status()}")
    print("optimizer  largest distance, torch forms against compiled kernels (float32 ulps, 60 steps)")
    for cls in CLASSES:
        a, b = run(cls, True), run(cls, False)
        ulps = max(int((_ordered(x) - _ordered(y)).abs().max()) for x, y in zip(a, b))
        print(f"{cls.__name__:10s} {ulps}")


if __name__ == "__main__":
    main()
