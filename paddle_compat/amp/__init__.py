"""``paddle.amp`` on PyTorch: loss scaling, auto-cast and their companions."""

from . import debugging
from .amp_lists import black_list, white_list
from .auto_cast import (
    amp_guard,
    auto_cast,
    autocast,
    get_autocast_cpu_dtype,
    get_autocast_dtype,
    get_autocast_gpu_dtype,
    is_autocast_enabled,
    is_bfloat16_supported,
    is_float16_supported,
)
from .decorate import amp_decorate, decorate
from .grad_scaler import AmpScaler, GradScaler

__all__ = [
    "AmpScaler",
    "GradScaler",
    "amp_decorate",
    "amp_guard",
    "auto_cast",
    "autocast",
    "black_list",
    "debugging",
    "decorate",
    "get_autocast_cpu_dtype",
    "get_autocast_dtype",
    "get_autocast_gpu_dtype",
    "is_autocast_enabled",
    "is_bfloat16_supported",
    "is_float16_supported",
    "white_list",
]
