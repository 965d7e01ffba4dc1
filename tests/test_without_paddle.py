"""tests/ without Paddle installed: every module collects, and the Paddle-oracle tests are
reported skipped rather than failing (what a user who skips the ``test`` extra's Paddle meets).

Paddle is made unimportable in a child process (and its children) by a ``sitecustomize`` whose
import finder does not see it, as if it were not installed: ``import paddle`` raises
``ModuleNotFoundError`` and ``importlib.util.find_spec("paddle")`` is ``None``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_NO_PADDLE = '''
import importlib.machinery
import sys


class _NoPaddle(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] == "paddle":
            return None
        return super().find_spec(name, path, target)


sys.meta_path[:] = [_NoPaddle if f is importlib.machinery.PathFinder else f for f in sys.meta_path]
'''


def _pytest_without_paddle(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "sitecustomize.py").write_text(_NO_PADDLE)
    path = os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_the_blocker_hides_paddle(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(_NO_PADDLE)
    code = "import importlib.util; print(importlib.util.find_spec('paddle')); import paddle"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "None" and "ModuleNotFoundError: No module named 'paddle'" in done.stderr


def test_every_module_collects_and_the_oracle_tests_skip(tmp_path):
    # Every module is collected (imported); of the tests, those that look for Paddle themselves
    # run (the rest of the suite needs no Paddle and runs in the ordinary run).
    ran = _pytest_without_paddle(tmp_path, "-rs", "tests", "-k", "test_parity_docs or test_parity_demo")
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert re.search(r"SKIPPED \[\d+\] tests/parity/conftest.py:\d+: needs paddlepaddle, the test oracle", ran.stdout)
    assert "the examples start from a checkpoint saved by Paddle" in ran.stdout  # test_parity_docs' own skip
    assert " failed" not in ran.stdout and " error" not in ran.stdout
