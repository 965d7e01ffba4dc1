"""Every torch-side example of docs/porting.md runs, as a script of its own, from a fresh state."""

import pytest

from paddle_compat.amp.amp_state import amp_global_state

from .doc_examples import blocks, run

DOCS = ["docs/porting.md"]
TORCH_BLOCKS = [b for doc in DOCS for b in blocks(doc) if b.side == "torch"]


def test_every_python_block_is_marked_and_some_run_here():
    # blocks() raises for an unmarked block; the guide must have examples on both sides
    all_blocks = [b for doc in DOCS for b in blocks(doc)]
    assert {b.side for b in all_blocks} == {"torch", "paddle"}
    assert len(TORCH_BLOCKS) >= 8


@pytest.mark.parametrize("block", TORCH_BLOCKS, ids=lambda b: b.id)
def test_torch_example_runs(block, tmp_path, monkeypatch):
    missing = block.missing_module()
    if missing is not None:
        pytest.skip(f"needs {missing}, not in this tree yet")
    monkeypatch.chdir(tmp_path)  # examples write checkpoints in the working directory
    amp_global_state().amp_dtype = "float32"  # as in a fresh process: no auto_cast entered yet
    run(block)
