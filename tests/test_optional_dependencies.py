"""Frameworks stay optional: importing paddle_compat (and its integrations package) imports none."""

import subprocess
import sys

FRAMEWORKS = ("lightning", "pytorch_lightning", "accelerate", "transformers")


def test_importing_paddle_compat_imports_no_framework():
    code = (
        "import sys, paddle_compat, paddle_compat.amp, paddle_compat.integrations; "
        f"print([m for m in {FRAMEWORKS!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
