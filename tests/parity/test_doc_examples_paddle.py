"""Every Paddle-side example of the docs (docs/porting.md's) runs with real Paddle 3.3.1 (on CPU)."""

import pytest

from ..doc_examples import DOCS, blocks, run

PADDLE_BLOCKS = [b for doc in DOCS for b in blocks(doc) if b.side == "paddle"]


@pytest.mark.filterwarnings("ignore::UserWarning")  # Paddle's notes that AMP is off on CPU
@pytest.mark.parametrize("block", PADDLE_BLOCKS, ids=lambda b: b.id)
def test_paddle_example_runs(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run(block)
