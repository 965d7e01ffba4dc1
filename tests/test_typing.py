"""The package type-checks clean: mypy, with the settings of pyproject.toml's ``[tool.mypy]``.

mypy runs in a child process with its cache in pytest's cache folder (``.pytest_cache``), so only
the first run after a checkout pays for a full analysis (about 25 s on two cores; torch's stubs are
most of it); later runs re-check what changed, in seconds.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

_ERROR = re.compile(r"^(?P<path>[^:\s][^:]*):\d+(?::\d+)?: error: ")


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_mypy_finds_no_error(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    pytest_cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    cache = pytest_cache.mkdir("mypy") if pytest_cache is not None else tmp_path
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache),
         "--no-color-output", "--no-error-summary"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode in (0, 1), f"mypy did not run (status {proc.returncode}):\n{proc.stdout}{proc.stderr}"
    found = [(m["path"].replace("\\", "/"), line) for line in proc.stdout.splitlines() if (m := _ERROR.match(line))]
    assert bool(found) == (proc.returncode == 1), f"unexpected mypy output:\n{proc.stdout}{proc.stderr}"
    assert not found, f"mypy reports {len(found)} error(s):\n" + "\n".join(line for _, line in found)
