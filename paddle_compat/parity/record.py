"""Record a script's trace in a child process (how Paddle runs without entering this process)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from .trace import ENV_OUT, Trace, trace_paths

__all__ = ["RecordingError", "record_script"]


class RecordingError(RuntimeError):
    """The recorded script failed, or finished without saving its trace."""


def record_script(
    script: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    args: Sequence[str] = (),
    python: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> Trace:
    """Run ``python script *args`` in a child process and return the trace it saved.

    The script saves its trace with ``TraceRecorder.save()`` (no path): the child is told where by
    the ``PADDLE_COMPAT_PARITY_TRACE`` environment variable, set to ``out``.

    Args:
        script: the Python file to run (typically the Paddle side of a parity test).
        out: where the trace goes (``out.json`` + ``out.npz``).
        args: the script's arguments.
        python: the interpreter (default: this one).
        env: extra environment variables for the child.
        timeout: seconds before the child is stopped.

    Raises:
        RecordingError: the script failed (its stderr's tail is in the message) or saved nothing.

    Example::

        paddle_run = record_script("tests/paddle_side.py", "traces/paddle", args=["--steps", "40"])
    """
    script = Path(script)
    if not script.is_file():
        raise FileNotFoundError(f"no script at {script}")
    jpath, _ = trace_paths(out)
    target = jpath.with_suffix("")
    if jpath.exists():
        jpath.unlink()  # a stale trace must not pass for this run's
    child_env = {**os.environ, **(env or {}), ENV_OUT: str(target)}
    proc = subprocess.run(
        [python or sys.executable, str(script), *args],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise RecordingError(f"{script} exited with status {proc.returncode}:\n{tail}")
    if not jpath.exists():
        raise RecordingError(f"{script} finished without saving a trace (call TraceRecorder.save() with no path)")
    return Trace.load(target)
