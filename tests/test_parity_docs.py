"""docs/parity.md runs as written: its Python blocks, in order, as one script in a fresh interpreter.

A fresh process, because a user meets no fixture: the suite's conftest records float16 as the AMP
dtype for every test, which once hid a story whose scaler switched itself off (it never entered
``auto_cast``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "parity.md"

# Run after the story, in its namespace: facts the prose states that printing alone does not show.
EPILOGUE = """
import json as _json
print("EPILOGUE " + _json.dumps({"ok": result.ok, "skips": sum(bool(s["found_inf"]) for s in rec.trace.steps)}))
"""


def blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", DOC.read_text(), flags=re.DOTALL | re.MULTILINE)


def test_doc_has_examples():
    assert len(blocks()) >= 6


def test_doc_story_runs_in_a_fresh_process(tmp_path):
    if importlib.util.find_spec("paddle") is None:
        pytest.skip("the examples start from a checkpoint saved by Paddle")
    script = tmp_path / "story.py"
    script.write_text("\n\n".join(blocks()) + EPILOGUE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLE_COMPAT_")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    printed = proc.stdout
    # what the comments in the examples say they print
    assert "tensor([0.6561])" in printed
    assert "['linear.bias', 'linear.weight']" in printed
    assert "8 steps compared, exact (bitwise): bitwise equal" in printed
    assert "24 tensors, 0 not bitwise equal at some step" in printed
    assert sorted(p.name for p in (tmp_path / "parity-report").iterdir()) == ["report.json", "report.md", "report.png"]
    assert "['k.weight', 'q.weight', 'v.weight']" in printed  # a registered rule
    assert "5 layers compared (single-step): equal within noise" in printed  # diff_layers, clean
    assert "act act\n" in printed and "act (GELU): DIFFERS fwd bwd   <-- first divergence (forward)" in printed
    assert "False\nTrue\n0 act/act\n" in printed  # noise fails torch.testing, passes the baseline; the bug
    # a BERT port with torch's mask form: every layer isolated, the bug named at its layer
    assert "22 layers compared (single-step): equal within noise\n" in printed
    assert "fed Paddle's activations, the port's own 'key_padding_mask' (another form than Paddle's)" in printed
    assert "encoder.layers.1.norm2 encoder.layers.1.norm2\n" in printed
    assert "True\nrnn rnn None\n" in printed  # an LSTM port, and one that forgot batch_first
    facts = json.loads(printed.split("EPILOGUE ", 1)[1].splitlines()[0])
    assert facts == {"ok": True, "skips": 1}
    assert "scaler is now disabled" not in proc.stderr
