"""The check of an installed wheel (cibuildwheel's test-command, and tests/test_native_wheel.py):
the compiled kernels load from the installed package and give the torch forms' bits.

    python .ci/check_wheel.py        # prints the level loaded; exits non-zero on a failure
"""

import hashlib
import sys
from pathlib import Path

import torch

import paddle_compat
import paddle_compat.optimizer as popt
from paddle_compat import _native


def run() -> str:
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in (5000, 33)]
    opts = [popt.SGD(0.1, parameters=params, weight_decay=0.01), popt.Momentum(0.1, parameters=params),
            popt.Adam(0.01, parameters=params, amsgrad=True), popt.AdamW(0.01, parameters=params)]
    for _ in range(3):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        for opt in opts:
            opt.step()
    return hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in params)).hexdigest()


status = paddle_compat.native_status()
if not status.compiled:
    sys.exit(f"the wheel's compiled kernels are not used: {status}")
if Path(str(status.library)).parent != Path(paddle_compat.__file__).parent:
    sys.exit(f"the kernels came from elsewhere than the installed package: {status}")
compiled = run()
_native._enabled = False  # what PADDLE_COMPAT_NATIVE=0 does: the torch forms
if run() != compiled:
    sys.exit("the compiled kernels and the torch forms differ")
print(status.level)
