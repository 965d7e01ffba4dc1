"""The torch release pyproject.toml promises to work with is the one docs/torch_versions.md says
the core was checked on, CI runs the suite at or above it and the core on it (.ci/floor)."""

import re
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _release(version: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


def test_the_declared_floor_is_the_oldest_release_checked():
    declared = re.search(r'"torch>=([\d.]+),<3"', (ROOT / "pyproject.toml").read_text()).group(1)
    pinned = re.search(r"^torch==([\d.]+)$", (ROOT / "constraints.txt").read_text(), re.M).group(1)
    table = (ROOT / "docs" / "torch_versions.md").read_text()
    checked = re.search(r"^\| part \|(.*)\|$", table, re.M).group(1)
    oldest = min(_release(v) for v in re.findall(r"(\d+\.\d+)\.\d+", checked))
    # no release below the one checked by hand is promised; CI's runs at or above it
    assert _release(declared) == oldest
    assert f"`torch>={declared},<3`" in (ROOT / "README.md").read_text()
    assert _release(pinned) >= _release(declared)
    assert _release(torch.__version__) >= _release(declared)


def test_ci_runs_the_core_on_the_declared_floor():
    declared = re.search(r'"torch>=([\d.]+),<3"', (ROOT / "pyproject.toml").read_text()).group(1)
    floor = re.search(r"^torch==([\d.]+)$", (ROOT / ".ci" / "constraints-floor.txt").read_text(), re.M).group(1)
    assert _release(floor) == _release(declared)
    assert "bash .ci/floor" in (ROOT / ".ci" / "run").read_text().splitlines()
    listed = re.findall(r"tests/[\w/.]+", (ROOT / ".ci" / "floor").read_text())
    assert listed and all((ROOT / path).exists() for path in listed)
