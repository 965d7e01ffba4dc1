"""The package type-checks clean: mypy, with the settings of pyproject.toml's ``[tool.mypy]``.

mypy runs in a child process with its cache in pytest's cache folder (``.pytest_cache``), so only
the first run after a checkout pays for a full analysis (about 25 s on two cores; torch's stubs are
most of it); later runs re-check what changed, in seconds.
"""

from __future__ import annotations

import importlib.util
import os
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


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy is not installed")
def test_mypy_in_a_user_project_finds_the_package_after_the_readmes_install(tmp_path: Path) -> None:
    """README.md's editable install, into a fresh environment, then mypy on a user's file: it reads
    our type hints (a setuptools import hook, the default editable mode, is invisible to mypy)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    installs = re.findall(r"pip install .*?-e '?\.[^&\n]*", readme)
    options = {tuple(re.findall(r"--config-settings [\w=]+", line)) for line in installs}
    assert len(installs) >= 3 and len(options) == 1, installs
    (settings,) = options
    env = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    python = env / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")
    # --ignore-installed: without it pip first uninstalls this environment's own paddle_compat
    # (the developer's editable install), --prefix notwithstanding
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--ignore-installed",
               "--prefix", str(env), *" ".join(settings).split(), "-e", str(ROOT)]
    proc = subprocess.run(install, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    user = tmp_path / "project"
    user.mkdir()
    (user / "train.py").write_text(
        "from paddle_compat.amp import GradScaler\nfrom paddle_compat.optimizer import SGD\n\n"
        "scale: str = GradScaler().get_scale()\n"
        'SGD(learning_rate="0.1")\n'  # a rate is a float or a scheduler, as Paddle types it
    )
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}  # a user's shell
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--python-executable", str(python), "--no-color-output", "--no-error-summary",
         "--cache-dir", str(tmp_path / "cache"), "train.py"],
        cwd=user, capture_output=True, text=True, timeout=600, env=clean,
    )
    assert proc.stdout.splitlines() == [
        'train.py:4: error: Incompatible types in assignment (expression has type "float", variable has type "str")  '
        "[assignment]",
        'train.py:5: error: Argument "learning_rate" to "SGD" has incompatible type "str"; expected '
        '"float | LRScheduler"  [arg-type]',
    ], proc.stdout + proc.stderr
