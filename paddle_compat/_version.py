"""The package's version, written once: ``version`` in ``pyproject.toml``.

Installed, it is read from the distribution's metadata; a source checkout put on ``sys.path``
without an install has no metadata, and reads ``pyproject.toml`` beside the package.
"""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

UNKNOWN = "0+unknown"  # neither installed nor a checkout


def version() -> str:
    try:
        return metadata.version("paddle_compat")
    except metadata.PackageNotFoundError:
        pass
    try:
        pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    except OSError:
        return UNKNOWN
    found = re.search(r'^\[project\][^\[]*?^version = "([^"]+)"', pyproject, re.M | re.S)
    return found.group(1) if found else UNKNOWN
