"""The torch release pyproject.toml promises to work with is one the suite runs on."""

import re
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def _release(version: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


def test_the_declared_floor_is_the_tested_release():
    declared = re.search(r'"torch>=([\d.]+),<3"', (ROOT / "pyproject.toml").read_text()).group(1)
    pinned = re.search(r"^torch==([\d.]+)$", (ROOT / "constraints.txt").read_text(), re.M).group(1)
    # the floor is what CI installs (constraints.txt), so no release below it is promised untested
    assert _release(declared) == _release(pinned)
    assert _release(torch.__version__) >= _release(declared)
