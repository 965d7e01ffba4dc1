"""``auto_cast`` and its companions: Paddle's per-op precision rules on torch tensors.

Differences from Paddle: the rules also apply on CPU (Paddle warns and does nothing there);
``enable=False`` never raises for a non-AMP dtype (Paddle raises ``KeyError``); the build-
dependent "op has no low-precision kernel" demotion is not modelled.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import torch

from . import op_interceptor
from .amp_lists import LEVELS, black_list, effective_lists, white_list
from .amp_state import amp_global_state
from .op_table import aten_names, resolve

_AMP_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
CustomList = Iterable[str] | None


@contextlib.contextmanager
def amp_guard(
    enable: bool = True,
    custom_white_list: CustomList = None,
    custom_black_list: CustomList = None,
    level: str = "O1",
    dtype: str = "float16",
    use_promote: bool = True,
) -> Iterator[None]:
    """Compute each op in the precision Paddle's eager AMP would choose (see ``auto_cast``)."""
    level = level.upper()
    if level not in LEVELS:
        raise ValueError("level should be O0, OD, O1 or O2.")
    dtype = _dtype_name(dtype)
    if enable and dtype not in _AMP_DTYPES:
        raise ValueError("If enable amp, dtype should be 'float16' or 'bfloat16'.")
    # Paddle records the dtype of the last auto_cast entered, and never restores it.
    amp_global_state().amp_dtype = dtype
    config = _cast_config(enable, custom_white_list, custom_black_list, level, dtype, use_promote)
    token = op_interceptor.activate(config)
    try:
        yield
    finally:
        op_interceptor.restore(token)


def auto_cast(
    enable: bool = True,
    custom_white_list: CustomList = None,
    custom_black_list: CustomList = None,
    level: str = "O1",
    dtype: str = "float16",
    use_promote: bool = True,
) -> AbstractContextManager:
    """Context in which each op computes in the precision Paddle's eager AMP would choose.

    White ops run in ``dtype``, black ops in float32; at OD every other op runs in float32;
    at O1 (and O2 with ``use_promote``) an op with any float32 input runs in float32, else in
    ``dtype``; at O2 without promotion everything but the black list runs in ``dtype``.
    Custom lists take Paddle op names (``"matmul_v2"``, ``"elementwise_add"``...) or torch
    ATen op names (``"linear"``, ``"bmm"``...). Works on CPU and CUDA, nests, and restores the
    previous state on exit.
    """
    return amp_guard(enable, custom_white_list, custom_black_list, level, dtype, use_promote)


def autocast(
    device_type: str | None,
    dtype: str = "float16",
    enabled: bool = True,
    cache_enabled: bool = True,
) -> AbstractContextManager:
    """``auto_cast(enable=enabled, dtype=dtype)``; like Paddle, ``device_type`` and
    ``cache_enabled`` are accepted and ignored."""
    return auto_cast(enable=enabled, dtype=dtype)


def is_autocast_enabled(device_type: Any = None) -> bool:
    """Whether an enabled ``auto_cast`` (level other than O0) is active in this thread."""
    return op_interceptor.current() is not None


def get_autocast_dtype(device_type: Any = None) -> str:
    """The active AMP dtype name, or ``"float16"`` when auto-cast is off (as in Paddle)."""
    config = op_interceptor.current()
    return "float16" if config is None else str(config.amp_dtype).removeprefix("torch.")


get_autocast_cpu_dtype = get_autocast_dtype
get_autocast_gpu_dtype = get_autocast_dtype


def is_float16_supported(device: str | None = None) -> bool:
    """Paddle's answer: CUDA devices of compute capability 5.3 and up; never the CPU."""
    index = _cuda_index(device)
    return index is not None and torch.cuda.get_device_capability(index) >= (5, 3)


def is_bfloat16_supported(device: str | None = None) -> bool:
    """Paddle's answer: CUDA devices of compute capability 8.0 and up, and the CPU."""
    index = _cuda_index(device)
    return index is None or torch.cuda.get_device_capability(index) >= (8, 0)


def _cuda_index(device: str | None) -> int | None:
    """The CUDA device index meant by ``device`` (Paddle spelling), or None for the CPU."""
    if device is None:
        return torch.cuda.current_device() if torch.cuda.is_available() else None
    name = str(device).lower()
    if name == "cpu":
        return None
    kind, _, index = name.partition(":")
    if kind not in ("gpu", "cuda"):
        raise ValueError(f"device should be 'cpu', 'gpu' or 'gpu:x', but got {device!r}.")
    return int(index) if index else torch.cuda.current_device()


def _dtype_name(dtype: Any) -> str:
    if isinstance(dtype, torch.dtype):
        return str(dtype).removeprefix("torch.")
    return str(dtype).lower()


def _cast_config(
    enable: bool,
    custom_white_list: CustomList,
    custom_black_list: CustomList,
    level: str,
    dtype: str,
    use_promote: bool,
) -> op_interceptor.CastConfig | None:
    if not enable or level == "O0":
        return None
    return _cached_config(frozenset(custom_white_list or ()), frozenset(custom_black_list or ()),
                          level, dtype, bool(use_promote))


@functools.lru_cache(maxsize=256)
def _cached_config(
    custom_white: frozenset[str],
    custom_black: frozenset[str],
    level: str,
    dtype: str,
    use_promote: bool,
) -> op_interceptor.CastConfig:
    """The config for one set of arguments; cached because a training loop enters auto_cast
    once per step with the same arguments (warnings for unmapped names come once)."""
    white_names, black_names = effective_lists(custom_white, custom_black, level, dtype)
    custom_white_aten = resolve(sorted(custom_white))
    custom_black_aten = resolve(sorted(custom_black))
    white = (_aten(white_names) - custom_black_aten) | custom_white_aten
    # Two names for one torch op (matmul / matmul_v2) may land in both lists: white wins.
    black = ((_aten(black_names) - custom_white_aten) | custom_black_aten) - white
    config = op_interceptor.CastConfig(level, _AMP_DTYPES[dtype], use_promote, frozenset(white), frozenset(black))
    op_interceptor.ensure_registered(config.white | config.black)
    return config


def _aten(names: Iterable[str]) -> set[str]:
    return {a for name in names for a in aten_names(name)}


__all__ = [
    "amp_guard", "auto_cast", "autocast", "black_list", "get_autocast_cpu_dtype",
    "get_autocast_dtype", "get_autocast_gpu_dtype", "is_autocast_enabled",
    "is_bfloat16_supported", "is_float16_supported", "white_list",
]
