"""Every Python example of the README and of the docs runs (or, for a launcher's script, compiles)."""

import pytest

from paddle_compat.amp.amp_state import amp_global_state

from .doc_examples import blocks, run

# porting.md and parity.md have tests of their own (test_porting_doc.py, test_parity_docs.py).
DOCS = ["README.md", "docs/grad_scaler.md", "docs/auto_cast.md", "docs/optimizers.md", "docs/distributed.md",
        "docs/integrations.md"]
BLOCKS = [b for doc in DOCS for b in blocks(doc)]  # raises for a block without a marker


def test_every_doc_has_examples():
    assert {b.doc for b in BLOCKS} == set(DOCS)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.id)
def test_example(block, tmp_path, monkeypatch):
    if block.side == "sketch":
        compile(block.code, block.id, "exec")
        return
    missing = block.missing_module()
    if missing is not None:
        pytest.skip(f"needs {missing}")
    monkeypatch.chdir(tmp_path)  # examples may write checkpoints
    amp_global_state().amp_dtype = "float32"  # as in a fresh process: no auto_cast entered yet
    run(block)
