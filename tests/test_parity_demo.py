"""The demo's port against its golden Paddle trace, without Paddle; and two wrong ports, pinpointed.

The golden trace (tests/golden/demo_paddle_cpu.*, recorded by tests/golden/record_demo_golden.py)
is Paddle 3.3.1's GradScaler and AdamW fed the port's gradients (the CPU method of docs/parity.md).
The same check against a live Paddle run: tests/parity/test_parity_kit.py.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from paddle_compat.parity import Trace, assert_same_trajectory, compare
from paddle_compat.parity.pytest_plugin import golden_trace  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[1]


def _demo_port():
    spec = importlib.util.spec_from_file_location("demo_port", ROOT / "examples" / "parity" / "demo_port.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("demo_port", module)
    spec.loader.exec_module(module)
    return module


demo_port = _demo_port()


@pytest.fixture(scope="module")
def golden() -> Trace:
    return Trace.load(ROOT / "tests" / "golden" / "demo_paddle_cpu")


@pytest.fixture(autouse=True)
def _as_recorded(golden, monkeypatch):
    """Run the port as Paddle ran on the recording host: its Adam kernel's FMA choice, one thread."""
    env = golden.meta["environment"]
    # traces recorded before the profiles named them hold the AVX-512 choice as "cpu_fma"
    profile = env.get("paddle_cpu") or ("avx512f" if env["cpu_fma"] else "avx2")
    monkeypatch.setenv("PADDLE_COMPAT_PADDLE_CPU", profile)
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


def _skip_if_forward_differs(golden: Trace, result) -> None:
    """The golden trace pins the forward/backward of the recording host's torch kernels; elsewhere
    the gradients may differ before the scaler or the optimizer is involved (not the port's fault)."""
    env = golden.meta["environment"]
    same_host = (
        env["torch"] == torch.__version__ and env["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    )
    d = result.first_divergence
    if d is not None and not same_host and d.name.split("/")[0] in ("loss", "grad", "grad_norm"):
        pytest.skip(
            f"recorded with torch {env['torch']} on {env['torch_cpu_capability']}: "
            f"the forward differs here ({d.describe()})"
        )


def test_golden_trace_is_small(golden):
    size = sum((ROOT / "tests" / "golden" / f"demo_paddle_cpu.{ext}").stat().st_size for ext in ("json", "npz"))
    assert size < 100_000
    assert len(golden) == demo_port.STEPS and golden.meta["framework"] == "paddle" and golden.meta["layout"] == "torch"
    # it holds the demo's story: overflowing first steps, the corrupted batch, growth at the end
    found = [s["found_inf"] for s in golden.steps]
    assert found[:2] == [True, True] and found[demo_port.CORRUPT_STEP - 1] is True
    assert golden.steps[-1]["scale"] == 2 * golden.steps[-2]["scale"]


def test_port_is_bitwise_paddle(golden):
    port = demo_port.train("port", full_max_elements=1, sample=8)
    result = compare(golden, port, exact=True)
    _skip_if_forward_differs(golden, result)
    assert result.ok, result.summary()
    assert sum(s["found_inf"] for s in port.steps) == 8


def test_golden_trace_fixture(golden_trace):  # noqa: F811
    assert (
        golden_trace("demo_paddle_cpu").steps[3]["loss"]
        == Trace.load(ROOT / "tests" / "golden" / "demo_paddle_cpu").steps[3]["loss"]
    )


def test_torch_adamw_in_place_of_paddles_is_pinpointed(golden):
    """torch.optim.AdamW rounds differently: the first update (step 4, after four overflows) already
    leaves the first layer's weight some ulps off."""
    wrong = demo_port.train("torch_adamw", steps=6)
    result = compare(golden, wrong, exact=True)
    _skip_if_forward_differs(golden, result)
    d = result.first_divergence
    assert (d.step, d.name) == (4, "param/0.weight")
    assert d.ulps >= 1 and d.metrics.max_ulps >= d.ulps and d.index is not None
    assert golden.steps[3]["found_inf"] and not golden.steps[4]["found_inf"]
    with pytest.raises(AssertionError, match=r"first divergence at step 4, param/0\.weight\[\d+, \d+\]: bits differ"):
        assert_same_trajectory(golden, wrong)


def test_dividing_by_the_scale_is_pinpointed(golden, tmp_path):
    """g / scale is not g * (1 / scale) when the scale is 3 * 2**k: the unscaled gradients already
    differ by an ulp at step 2 (a skipped step: the parameters part at step 4)."""
    wrong = demo_port.train("divide", steps=5)
    result = compare(golden, wrong, exact=True)
    _skip_if_forward_differs(golden, result)
    d = result.first_divergence
    assert (d.step, d.name, d.ulps) == (2, "grad/0.weight", 1.0)
    params = [m for m in result.tensors if m.name.startswith("param/") and not m.bitwise_equal]
    assert min(m.step for m in params) == 4
    with pytest.raises(AssertionError):
        assert_same_trajectory(golden, wrong, report_dir=tmp_path / "report")
    assert (tmp_path / "report" / "report.md").exists()
    # with torch.testing's float32 tolerances these first steps pass: only the exact mode sees them
    assert compare(golden, wrong, steps=5).ok
