"""``paddle.distributed.fleet.utils``: what ported training scripts import from it, ``recompute``.

Paddle's other utilities there (file systems, hybrid-parallel helpers) have no counterpart here.
"""

from __future__ import annotations

from .recompute import recompute

__all__ = ["recompute"]
