"""One version, written once (pyproject.toml): the installed metadata's, or a checkout's pyproject
without an install; the changelog's newest entry. (The installed case: tests/test_native_wheel.py.)"""

import importlib.metadata
import re
from pathlib import Path

from paddle_compat import _version

ROOT = Path(__file__).resolve().parents[1]
DECLARED = re.search(r'^version = "(.+?)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)


def test_without_metadata_a_checkout_reads_its_pyproject(monkeypatch) -> None:
    def not_installed(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert _version.version() == DECLARED == "0.3.0"


def test_installed_the_metadata_says(monkeypatch) -> None:
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.8.7" if name == "paddle_compat" else None)
    assert _version.version() == "9.8.7"


def test_the_changelog_starts_with_this_version() -> None:
    (first,) = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)[:1]
    assert first == DECLARED
