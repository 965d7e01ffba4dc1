"""Re-record the golden Paddle trace of the demo (needs Paddle 3.3.1; about 10 s):

    python tests/golden/record_demo_golden.py

It runs ``examples/parity/demo_paddle.py`` (Paddle's GradScaler and AdamW, fed the port's float16
gradients: the CPU method) in a child process, with every tensor above one element kept as a
digest plus 8 sampled elements, so the two files stay near 70 KB. ``tests/test_parity_demo.py``
checks the port against it without Paddle.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from paddle_compat.parity import record_script  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "demo_paddle_cpu"


def main() -> int:
    trace = record_script(
        ROOT / "examples" / "parity" / "demo_paddle.py",
        GOLDEN,
        args=["--full-max-elements", "1", "--sample", "8"],
        env={"PYTHONPATH": str(ROOT)},
    )
    size = sum(p.stat().st_size for p in (GOLDEN.with_suffix(".json"), GOLDEN.with_suffix(".npz")))
    print(f"{len(trace)} steps, {len(trace.series)} tensors, {size / 1024:.0f} KB -> {GOLDEN}.json/.npz")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
