"""What the installed torch release supports (docs/torch_versions.md), for the tests that need more
than the floor (.ci/floor runs the core on it)."""

from __future__ import annotations

import re

import pytest
import torch

RELEASE = tuple(int(part) for part in re.match(r"(\d+)\.(\d+)", torch.__version__).groups())

# torch.compile support (graph breaks as torch's, recompute inside a compiled function): from 2.13
needs_compile_support = pytest.mark.skipif(
    RELEASE < (2, 13), reason="torch.compile support needs torch 2.13 or newer (docs/torch_versions.md)"
)
