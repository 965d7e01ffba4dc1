"""Assertions for parity tests (pytest or plain ``assert``-style)."""

from __future__ import annotations

import os

from .compare import Comparison, Tolerance, compare
from .report import available_formats, write_report
from .trace import Trace

__all__ = ["assert_same_trajectory"]


def assert_same_trajectory(
    reference: Trace | str | os.PathLike[str],
    candidate: Trace | str | os.PathLike[str],
    *,
    exact: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    steps: int | None = None,
    tolerance: Tolerance | None = None,
    baseline: Trace | str | os.PathLike[str] | None = None,
    baseline_factor: float = 10.0,
    report_dir: str | os.PathLike[str] | None = None,
) -> Comparison:
    """Fail unless two runs agree at every step (bitwise by default).

    Args:
        reference: the Paddle run (a trace or its path), e.g. a golden trace.
        candidate: the port's run.
        exact: bitwise (default); ``False`` for torch.testing's per-dtype tolerances.
        rtol, atol: explicit tolerances (with ``exact=False``).
        steps: check only the first ``steps`` steps (e.g. a short run against a long golden trace).
        tolerance, baseline, baseline_factor: norm-relative bounds, and a second reference run
            whose distance is the noise, times how much (see :func:`.compare`).
        report_dir: on failure, also write the JSON/Markdown/PNG report there (the PNG only when
            matplotlib is installed).

    Raises:
        AssertionError: with the first divergence (step, tensor, element, both values, ulps).

    Example::

        assert_same_trajectory("tests/golden/demo", recorder.trace)
    """
    result = compare(
        reference,
        candidate,
        exact=exact,
        rtol=rtol,
        atol=atol,
        steps=steps,
        tolerance=tolerance,
        baseline=baseline,
        baseline_factor=baseline_factor,
    )
    if not result.ok:
        if report_dir is not None:
            write_report(result, report_dir, available_formats())
        raise AssertionError(result.summary())
    return result
