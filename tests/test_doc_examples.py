"""Every Python example of the README and of the docs runs (or, for a launcher's script, compiles);
the Paddle-side ones run in the parity suite (parity/test_doc_examples_paddle.py)."""

import pytest

from paddle_compat.amp.amp_state import amp_global_state

from .doc_examples import DOCS, blocks, run

ALL_BLOCKS = [b for doc in DOCS for b in blocks(doc)]  # raises for a block without a marker
BLOCKS = [b for b in ALL_BLOCKS if b.side != "paddle"]


def test_every_doc_has_examples():
    assert {b.doc for b in BLOCKS} == set(DOCS)


def test_porting_guide_has_examples_on_both_sides():
    porting = [b for b in ALL_BLOCKS if b.doc == "docs/porting.md"]
    assert {b.side for b in porting} == {"torch", "paddle"}
    assert sum(b.side == "torch" for b in porting) >= 8


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
