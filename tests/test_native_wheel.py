"""What users install: the package built as a wheel from its sources, installed into a fresh
environment (no network, no dependencies fetched: torch comes from this environment), loads the
compiled kernels built into the wheel and gives the torch forms' bits (``.ci/check_wheel.py``,
cibuildwheel's check of each wheel too); and without a C compiler, every install command the README
gives installs the package without its kernels."""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from paddle_compat import _native, _native_build

ROOT = Path(__file__).resolve().parents[1]
COMPILER = shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc") or shutil.which("clang")


def pip_can_target_another_environment() -> bool:
    out = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True)
    parts = out.stdout.split()
    return out.returncode == 0 and len(parts) > 1 and tuple(int(x) for x in parts[1].split(".")[:2]) >= (22, 3)


def copy_of_the_sources(tmp_path: Path) -> Path:
    """The checkout's tracked sources (a build writes next to them), without built libraries."""
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "*.so", "*.dylib", ".*cache", "tests"))
    return source


def fresh_environment(tmp_path: Path) -> tuple[Path, Path]:
    """A new virtual environment that sees this one's packages (torch, numpy, pip, setuptools) after
    its own, as plain path entries (their .pth files, an editable install of this checkout among
    them, are not run). Its python and its site-packages."""
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "parent_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python, Path(purelib)


# One step of an optimizer, in the fresh environment: where the package came from, and its warnings.
FIRST_STEP = """
import warnings
import torch
import paddle_compat
from paddle_compat import optimizer
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    opt = optimizer.SGD(0.5, parameters=[p])
    opt.step()
    opt.step()
print(paddle_compat.__file__)
print(paddle_compat.__version__)
print(p.tolist())
for w in caught:
    print(w.category.__name__, w.message)
"""

NOT_BUILT_LINE = ("paddle_compat: the compiled CPU kernels were left out ({}); the optimizers will use their "
                  "torch forms (the same results, slower)")


@pytest.mark.skipif(os.name != "posix", reason="POSIX paths")
@pytest.mark.parametrize("command", ["editable strict", "editable", "install", "wheel"])
def test_every_install_command_works_without_a_c_compiler(tmp_path: Path, command: str) -> None:
    """The README's install commands (strict and default editable), ``pip install .`` and ``pip wheel``
    with no compiler on PATH: one line at install says the kernels were left out, a wheel is
    ``py3-none-any``, and the package runs its torch forms with one warning at the first step."""
    pytest.importorskip("setuptools", minversion="70.1")  # builds without build isolation, offline
    source = copy_of_the_sources(tmp_path)
    python, purelib = fresh_environment(tmp_path)
    empty = tmp_path / "no-compiler"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PADDLE_COMPAT_", "PYTHON", "CC", "LDSHARED"))}
    env["PATH"] = str(empty)  # no cc, gcc or clang to be found
    pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
    args = {"editable strict": ["install", "-e", str(source), "--config-settings", "editable_mode=strict"],
            "editable": ["install", "-e", str(source)],
            "install": ["install", str(source)],
            "wheel": ["wheel", "-w", str(tmp_path / "dist"), str(source)]}[command]
    out = subprocess.run([*pip, *args, "-v", "--no-deps", "--no-build-isolation", "--no-index"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    said = [line.strip() for line in (out.stdout + out.stderr).splitlines()
            if line.strip().startswith("paddle_compat: ")]
    compiler = sysconfig.get_config_var("CC").split()[0]  # the one setuptools runs, not found
    assert said == [NOT_BUILT_LINE.format(f"no C compiler: {compiler} not found")], said
    if command == "wheel":
        (wheel,) = (tmp_path / "dist").iterdir()
        assert wheel.name.endswith("-py3-none-any.whl"), wheel.name  # Python files only: any platform
        return

    ran = subprocess.run([str(python), "-I", "-c", FIRST_STEP], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    where, version, values, *warned = ran.stdout.splitlines()
    assert Path(where).resolve().is_relative_to((source if "editable" in command else purelib).resolve())
    assert version == re.search(r'^version = "(.+?)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert values == "[0.0, 0.0, 0.0]"
    assert warned == [
        "RuntimeWarning paddle_compat: the compiled CPU optimizer kernels are not used: they were not built when "
        "paddle_compat was installed (no C compiler then?); reinstalling it where a C compiler is found builds them. "
        f"The optimizers run their torch forms ({_native.FALLBACK}). paddle_compat.native_status() tells which "
        "kernels run; PADDLE_COMPAT_NATIVE=0 chooses the torch forms without this warning."]


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
