"""The repository lints clean: ``ruff check`` with the settings of pyproject.toml's ``[tool.ruff]``.

Only the check is run; ``ruff format`` is not adopted (the code is formatted by hand).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_check_finds_nothing() -> None:
    pytest.importorskip("ruff")
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", str(ROOT)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, f"ruff check failed:\n{proc.stdout}{proc.stderr}"
