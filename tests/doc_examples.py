"""The Python blocks of a Markdown document, with the marker that says how to run each.

Every ```python block must follow a marker line:

    <!-- run: torch -->                              run by the unit tests
    <!-- run: torch, needs paddle_compat.parity -->  the same, skipped while that module is absent
    <!-- run: paddle -->                             run by the parity tests (real Paddle)
    <!-- run: sketch -->                             compiled only (needs a launcher, e.g. torchrun)

so that no example in the docs goes untested.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The documents whose blocks run one by one: torch and sketch blocks in test_doc_examples.py, paddle
# blocks in parity/test_doc_examples_paddle.py. (docs/parity.md is one story run in one namespace,
# by test_parity_docs.py.)
DOCS = [
    "README.md",
    "docs/grad_scaler.md",
    "docs/auto_cast.md",
    "docs/optimizers.md",
    "docs/distributed.md",
    "docs/integrations.md",
    "docs/porting.md",
]
_MARKER = re.compile(r"<!-- run: (torch|paddle|sketch)(?:, needs ([\w.]+))? -->")


@dataclass(frozen=True)
class Block:
    doc: str
    line: int  # of the opening fence, 1-based
    side: str  # "torch", "paddle" or "sketch"
    needs: str | None  # a module the block imports that may not exist yet
    code: str

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    def missing_module(self) -> str | None:
        """The module the block needs, if it cannot be imported here."""
        if self.needs is None:
            return None
        try:
            return None if importlib.util.find_spec(self.needs) is not None else self.needs
        except ModuleNotFoundError:  # a parent package is absent
            return self.needs


def blocks(doc: str) -> list[Block]:
    """Every Python block of ``ROOT/doc``; ``ValueError`` for a block without a marker."""
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    found = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            marker = _MARKER.fullmatch(lines[i - 1].strip()) if i > 0 else None
            if marker is None:
                raise ValueError(f"{doc}:{i + 1}: a python block without a '<!-- run: ... -->' marker line")
            end = lines.index("```", i + 1)
            found.append(Block(doc, i + 1, marker.group(1), marker.group(2), "\n".join(lines[i + 1 : end]) + "\n"))
            i = end
        i += 1
    return found


def run(block: Block) -> None:
    """Execute the block as a script of its own (fresh globals)."""
    exec(compile(block.code, block.id, "exec"), {"__name__": "__doc_example__"})
