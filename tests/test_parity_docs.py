"""Every Python block of docs/parity.md runs, in order, in one namespace and one folder."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import pytest
import torch

DOC = Path(__file__).resolve().parents[1] / "docs" / "parity.md"


def blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", DOC.read_text(), flags=re.S | re.M)


def test_doc_has_examples():
    assert len(blocks()) >= 6


def test_doc_examples_run(tmp_path, monkeypatch):
    if importlib.util.find_spec("paddle") is None:
        pytest.skip("the examples start from a checkpoint saved by Paddle")
    monkeypatch.chdir(tmp_path)
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    namespace: dict = {"__name__": "docs_parity"}
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            for i, code in enumerate(blocks()):
                exec(compile(code, f"{DOC.name}[block {i}]", "exec"), namespace)
    finally:
        torch.set_num_threads(saved)
    printed = out.getvalue()
    # what the comments in the examples say they print
    assert "tensor([0.6561])" in printed
    assert "['linear.bias', 'linear.weight']" in printed
    assert "8 steps compared, exact (bitwise): bitwise equal" in printed
    assert "24 tensors, 0 not bitwise equal at some step" in printed
    assert sorted(p.name for p in (tmp_path / "parity-report").iterdir()) == ["report.json", "report.md", "report.png"]
    assert namespace["result"].ok
    assert sum(s["found_inf"] for s in namespace["rec"].trace.steps) == 1
