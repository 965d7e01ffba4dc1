"""Record a script's trace in a child process (how Paddle runs without entering this process)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

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
    echo: TextIO | None = None,
) -> Trace:
    """Run ``python script *args`` in a child process and return the trace it saved.

    The script saves its trace with ``TraceRecorder.save()`` (no path): the child is told where by
    the ``PADDLE_COMPAT_PARITY_TRACE`` environment variable, set to ``out``. Its output (stdout and
    stderr, in the order written) is kept in ``out.log``, and copied line by line to ``echo`` as it
    comes (``python -m paddle_compat.parity`` passes its stdout: a long run shows as it trains).

    Args:
        script: the Python file to run (typically the Paddle side of a parity test).
        out: where the trace goes (``out.json`` + ``out.npz``; the output in ``out.log``).
        args: the script's arguments.
        python: the interpreter (default: this one).
        env: extra environment variables for the child.
        timeout: seconds before the child is stopped.
        echo: a text stream that gets the child's output as it comes (default: none).

    Raises:
        RecordingError: the script failed or ran past ``timeout`` (its output's tail is in the
            message) or saved nothing.

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
    log_path = Path(f"{target}.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # unbuffered unless the caller says otherwise: a Python child writing to a pipe would
    # otherwise hold its prints back until it ends
    child_env = {"PYTHONUNBUFFERED": "1", **os.environ, **(env or {}), ENV_OUT: str(target)}
    tail: deque[str] = deque(maxlen=15)
    with open(log_path, "w", encoding="utf-8") as log, subprocess.Popen(
        [python or sys.executable, str(script), *args], env=child_env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, errors="replace",
    ) as proc:
        stopped = threading.Event()

        def stop() -> None:
            stopped.set()
            proc.kill()

        timer = threading.Timer(timeout, stop) if timeout is not None else None
        if timer is not None:
            timer.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                tail.append(line.rstrip("\n"))
                if echo is not None:
                    echo.write(line)
                    echo.flush()
            returncode = proc.wait()
        finally:
            if timer is not None:
                timer.cancel()
    said = "\n".join(tail)
    if stopped.is_set():
        raise RecordingError(f"{script} ran past the timeout ({timeout} s) and was stopped:\n{said}")
    if returncode != 0:
        raise RecordingError(f"{script} exited with status {returncode} (its output: {log_path}):\n{said}")
    if not jpath.exists():
        raise RecordingError(f"{script} finished without saving a trace (call TraceRecorder.save() with no path)")
    return Trace.load(target)
