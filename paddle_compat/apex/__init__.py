"""Porting aids for code written against NVIDIA apex: ``from paddle_compat.apex import amp``.

Loaded only on request: ``import paddle_compat`` does not import it.
"""

from . import amp

__all__ = ["amp"]
