"""The parts of ``paddle.nn`` the optimizers need: gradient clipping."""

from .clip import ClipGradBase, ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue, GradientClipBase

__all__ = ["ClipGradBase", "ClipGradByGlobalNorm", "ClipGradByNorm", "ClipGradByValue", "GradientClipBase"]
