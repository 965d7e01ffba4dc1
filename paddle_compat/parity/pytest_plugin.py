"""pytest fixtures for parity tests.

Enable them with ``pytest_plugins = ["paddle_compat.parity.pytest_plugin"]`` in the top-level
``conftest.py`` (or ``pytest -p paddle_compat.parity.pytest_plugin``, or import the fixtures into
a test module).

- ``golden_trace(name)``: loads ``golden/<name>`` (``.json`` + ``.npz``) next to the test file.
- ``paddle_trace(script, *args)``: records a Paddle script in a child process (it saves its
  :class:`TraceRecorder` with ``save()``) and returns the trace; the test is skipped when Paddle
  is not installed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .record import record_script
from .trace import Trace


@pytest.fixture
def golden_trace(request: pytest.FixtureRequest) -> Callable[[str], Trace]:
    """A loader of the golden traces stored in a ``golden/`` folder beside the test file.

    Example::

        def test_port(golden_trace):
            assert_same_trajectory(golden_trace("demo"), run_port())
    """
    folder = Path(request.path).parent / "golden"

    def load(name: str) -> Trace:
        return Trace.load(folder / name)

    return load


@pytest.fixture
def paddle_trace(tmp_path: Path) -> Callable[..., Trace]:
    """Run a Paddle script that records a trace, in a child process (Paddle never enters the test
    process); skips the test when Paddle is not installed. The runner takes the script, its
    arguments, and ``record_script``'s keywords.

    Example::

        def test_port(paddle_trace):
            assert_same_trajectory(paddle_trace("paddle_side.py", "--steps", "20"), run_port())
    """
    if importlib.util.find_spec("paddle") is None:
        pytest.skip("Paddle is not installed: only the golden traces are checked")
    count = iter(range(1_000_000))

    def run(script: str | Path, *args: str, **kwargs: Any) -> Trace:
        return record_script(script, tmp_path / f"paddle_{next(count)}", args=args, **kwargs)

    return run
