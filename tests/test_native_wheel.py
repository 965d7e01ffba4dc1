"""What users install: the package built as a wheel from its sources, installed into a fresh
environment (no network, no dependencies fetched: torch comes from this environment), loads the
compiled kernels built into the wheel and gives the torch forms' bits (``.ci/check_wheel.py``,
cibuildwheel's check of each wheel too)."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

from paddle_compat import _native_build

ROOT = Path(__file__).resolve().parents[1]
COMPILER = shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc") or shutil.which("clang")

def pip_can_target_another_environment() -> bool:
    out = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True)
    parts = out.stdout.split()
    return out.returncode == 0 and len(parts) > 1 and tuple(int(x) for x in parts[1].split(".")[:2]) >= (22, 3)


@pytest.mark.skipif(COMPILER is None or os.name != "posix", reason="no C compiler")
@pytest.mark.skipif(not pip_can_target_another_environment(), reason="needs pip >= 22.3 (--python)")
def test_the_wheel_installs_and_runs_the_compiled_kernels(tmp_path: Path) -> None:
    pytest.importorskip("setuptools", minversion="70.1")  # builds the wheel without build isolation, offline
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "*.so", "*.dylib", ".*cache", "tests"))
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
                    "-w", str(dist), str(source)], check=True, timeout=300, capture_output=True)
    (wheel,) = dist.glob("paddle_compat-*.whl")
    assert "abi3" in wheel.name and "none-any" not in wheel.name  # a platform wheel, any Python 3.10+

    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, timeout=300, capture_output=True)
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # torch and numpy from this environment, after the fresh one's own packages (a plain path
    # entry: its .pth files, an editable install of this checkout among them, are not run)
    (Path(purelib) / "parent_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_COMPAT_", "PYTHON"))}
    installed = Path(purelib) / "paddle_compat"
    out = subprocess.run([str(python), "-I", str(ROOT / ".ci" / "check_wheel.py")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in {level.name for level in _native_build.LEVELS}
    assert _native_build.find_libraries(installed)  # the libraries came in the wheel


def test_ci_runs_the_readmes_test_command() -> None:
    """``.ci/run`` is the README's test command, as a user on a fresh machine types it."""
    readme = (ROOT / "README.md").read_text().splitlines()
    (command,) = [line for line in readme if "'.[test]'" in line and line.startswith("python3 -m venv")]
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()
