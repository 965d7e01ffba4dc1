"""``auto_cast`` and its companions: Paddle's per-op precision rules on torch tensors.

Differences from Paddle: the rules also apply on CPU (Paddle warns and does nothing there);
every argument is checked when ``auto_cast`` is called, before anything changes (Paddle records
the dtype before it checks the lists, and accepts a str as a list of one-letter names);
``enable=False`` never raises for a non-AMP dtype (Paddle raises ``KeyError``); the recorded
AMP dtype is per thread; the build-dependent "op has no low-precision kernel" demotion is not
modelled.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterable
from typing import Any

import torch

from .. import _checks, _paddle_cpu
from . import checkpoint_bridge, op_interceptor
from .amp_lists import LEVELS, black_list, check_disjoint, effective_lists, white_list
from .amp_state import amp_global_state
from .cast_rule import AMP_DTYPES
from .compile_boundary import never_traced
from .op_table import PROMOTED_GRAY_ATEN, aten_names, resolve

CustomList = Iterable[str] | None


class _AmpGuard(contextlib.ContextDecorator):
    """The context manager ``auto_cast`` returns (usable as a decorator too).

    Its arguments were checked and its lists resolved when it was made; entering records the
    dtype for the GradScaler and activates the config for this thread, exiting restores the
    previous one. One object may be entered by several threads, or re-entered."""

    def __init__(self, config: op_interceptor.CastConfig | None, dtype: str) -> None:
        self._config = config
        self._dtype = dtype

    @never_traced
    def __enter__(self) -> None:
        # As Paddle, record the dtype of the last auto_cast entered (in this thread; Paddle's is
        # per process), and never restore it.
        amp_global_state().amp_dtype = self._dtype
        _tokens.stack.append(op_interceptor.activate(self._config))

    @never_traced
    def __exit__(self, *exc_info: Any) -> None:
        op_interceptor.restore(_tokens.stack.pop())


class _TokenStack(threading.local):
    def __init__(self) -> None:
        self.stack: list[Any] = []


_tokens = _TokenStack()


# torch.autocast's names that newcomers write (paddle_compat._checks.keyword_hints)
_TORCH_KEYWORDS = {
    "enabled": "Paddle's name is 'enable' (paddle_compat.amp.autocast takes torch's names)",
    "device_type": "Paddle's auto_cast has none (paddle_compat.amp.autocast takes torch's names)",
}


@never_traced
@_checks.keyword_hints(_TORCH_KEYWORDS)
def amp_guard(
    enable: bool = True,
    custom_white_list: CustomList = None,
    custom_black_list: CustomList = None,
    level: str = "O1",
    dtype: str | torch.dtype = "float16",
    use_promote: bool = True,
) -> contextlib.AbstractContextManager[None]:
    """Paddle's older name of ``auto_cast``: same arguments, same behaviour.

    Example::

        >>> import torch
        >>> from paddle_compat import amp
        >>> with amp.amp_guard(dtype="bfloat16"):
        ...     (torch.ones(2, 2) @ torch.ones(2, 2)).dtype
        torch.bfloat16
    """
    _checks.flag("enable", enable, int_ok=True)
    _checks.flag("use_promote", use_promote, int_ok=True)
    white = _op_names("custom_white_list", custom_white_list)
    black = _op_names("custom_black_list", custom_black_list)
    if not isinstance(level, str):
        raise TypeError(f"level should be a str ('O0', 'OD', 'O1' or 'O2'), but got {type(level).__name__}.")
    level = level.upper()
    if level not in LEVELS:
        raise ValueError("level should be O0, OD, O1 or O2.")
    if not isinstance(dtype, (str, torch.dtype)):
        raise TypeError("dtype should be a str ('float16' or 'bfloat16') or a torch.dtype, "
                        f"but got {type(dtype).__name__}.")
    dtype = _dtype_name(dtype)
    if enable and dtype not in AMP_DTYPES:
        raise ValueError("If enable amp, dtype should be 'float16' or 'bfloat16'.")
    if level != "O0":  # Paddle checks this even when disabled
        check_disjoint(white, black)
    config = None
    if enable and level != "O0":
        config = _cached_config(white, black, level, dtype, bool(use_promote) or level != "O2")
    return _AmpGuard(config, dtype)


@_checks.keyword_hints(_TORCH_KEYWORDS)
def auto_cast(
    enable: bool = True,
    custom_white_list: CustomList = None,
    custom_black_list: CustomList = None,
    level: str = "O1",
    dtype: str | torch.dtype = "float16",
    use_promote: bool = True,
) -> contextlib.AbstractContextManager[None]:
    """Context in which each op computes in the precision Paddle's eager AMP would choose.

    Args:
        enable: whether to auto-cast at all (``False``: as level O0).
        custom_white_list: op names (a set, list or tuple of str) to compute in ``dtype``.
        custom_black_list: op names to compute in float32. A name in both lists raises.
        level: ``"O0"`` (off), ``"OD"`` (only the white list in ``dtype``, everything else in
            float32), ``"O1"`` (white list in ``dtype``, black list in float32, other ops in
            float32 if any input is) or ``"O2"`` (as O1, with only the extra black list; with
            ``use_promote=False`` every op but the black list in ``dtype``). Any case.
        dtype: ``"float16"`` or ``"bfloat16"`` (any case, or a ``torch.dtype``).
        use_promote: at O2, whether a float32 input promotes a gray op to float32.

    Custom lists take Paddle op names (``"matmul_v2"``, ``"elementwise_add"``...) or torch
    ATen op names (``"linear"``, ``"bmm"``...). Works on CPU and CUDA, per thread, nests,
    restores the previous state on exit, and can decorate a function. Bad arguments raise
    ``TypeError``/``ValueError`` here, before anything changes.

    Example::

        >>> import torch
        >>> from paddle_compat import amp
        >>> x = torch.randn(4, 4)
        >>> with amp.auto_cast():
        ...     y = x @ x                 # white: float16
        ...     z = torch.softmax(y, -1)  # black: float32
        >>> y.dtype, z.dtype
        (torch.float16, torch.float32)
    """
    return amp_guard(enable, custom_white_list, custom_black_list, level, dtype, use_promote)


def autocast(
    device_type: str | None,
    dtype: str | torch.dtype = "float16",
    enabled: bool = True,
    cache_enabled: bool = True,
) -> contextlib.AbstractContextManager[None]:
    """``auto_cast(enable=enabled, dtype=dtype)``.

    Args:
        device_type: accepted and ignored, as in Paddle (a str or None).
        dtype: ``"float16"`` or ``"bfloat16"``.
        enabled: whether to auto-cast.
        cache_enabled: accepted and ignored, as in Paddle.

    Example::

        >>> import torch
        >>> from paddle_compat import amp
        >>> with amp.autocast("cuda", dtype="bfloat16"):
        ...     (torch.ones(2, 2) @ torch.ones(2, 2)).dtype
        torch.bfloat16
    """
    if device_type is not None and not isinstance(device_type, str):
        raise TypeError(f"device_type should be a str or None, but got {type(device_type).__name__}.")
    _checks.flag("enabled", enabled, int_ok=True)
    _checks.flag("cache_enabled", cache_enabled, int_ok=True)
    return auto_cast(enable=enabled, dtype=dtype)


def is_autocast_enabled(device_type: Any = None) -> bool:
    """Whether an enabled ``auto_cast`` (level other than O0) is active in this thread.

    Args:
        device_type: ignored, as in Paddle.

    Example::

        >>> from paddle_compat import amp
        >>> with amp.auto_cast():
        ...     amp.is_autocast_enabled()
        True
    """
    return op_interceptor.current() is not None


def get_autocast_dtype(device_type: Any = None) -> str:
    """The active AMP dtype name in this thread, or ``"float16"`` when auto-cast is off (as in Paddle).

    Args:
        device_type: ignored, as in Paddle.

    Example::

        >>> from paddle_compat import amp
        >>> with amp.auto_cast(dtype="bfloat16"):
        ...     amp.get_autocast_dtype()
        'bfloat16'
    """
    config = op_interceptor.current()
    return "float16" if config is None else _dtype_name(config.amp_dtype)


get_autocast_cpu_dtype = get_autocast_dtype
get_autocast_gpu_dtype = get_autocast_dtype


def is_float16_supported(device: str | None = None) -> bool:
    """Paddle's answer: CUDA devices of compute capability 5.3 and up; never the CPU.

    Args:
        device: ``"cpu"``, ``"gpu"``, ``"gpu:N"`` (or ``"cuda..."``); None: the current device.

    Example::

        >>> from paddle_compat import amp
        >>> amp.is_float16_supported("cpu")
        False
    """
    index = _cuda_index(device)
    return index is not None and torch.cuda.get_device_capability(index) >= (5, 3)


def is_bfloat16_supported(device: str | None = None) -> bool:
    """Paddle 3.3.1's answer: CUDA devices of compute capability 8.0 and up, and CPUs with AVX-512
    F, BW, VL and DQ (so ``False`` on an AVX2 CPU, where torch computes bfloat16 all the same).

    Args:
        device: ``"cpu"``, ``"gpu"``, ``"gpu:N"`` (or ``"cuda..."``); None: the current device.

    Example::

        >>> from paddle_compat import amp
        >>> amp.is_bfloat16_supported("cpu") in (True, False)  # True with AVX-512, as Paddle's
        True
    """
    index = _cuda_index(device)
    if index is None:
        return _paddle_cpu.bfloat16_supported()
    return torch.cuda.get_device_capability(index) >= (8, 0)


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


def _op_names(name: str, value: Any) -> frozenset[str]:
    """A custom list as a frozenset of op names; None is empty."""
    if value is None:
        return frozenset()
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} should be a set, list or tuple of op names, but got a str "
                        f"(write [{value!r}] for one op).")
    if not isinstance(value, Iterable):
        raise TypeError(f"{name} should be a set, list or tuple of op names, but got {type(value).__name__}.")
    items = list(value)
    for item in items:  # before hashing them: a list inside would raise a TypeError naming nothing
        if not isinstance(item, str):
            raise TypeError(f"{name} should hold op names (str), but holds a {type(item).__name__}.")
    return frozenset(items)


def _dtype_name(dtype: str | torch.dtype) -> str:
    if isinstance(dtype, torch.dtype):
        return str(dtype).removeprefix("torch.")
    return dtype.lower()


@functools.lru_cache(maxsize=256)
def _cached_config(
    custom_white: frozenset[str],
    custom_black: frozenset[str],
    level: str,
    dtype: str,
    use_promote: bool,
) -> op_interceptor.CastConfig:
    """The config for one set of checked arguments; cached because a training loop enters
    auto_cast once per step with the same arguments (warnings for unmapped names come once)."""
    white_names, black_names = effective_lists(custom_white, custom_black, level, dtype)
    custom_white_aten = resolve(sorted(custom_white))
    custom_black_aten = resolve(sorted(custom_black))
    white = (_aten(white_names) - custom_black_aten) | custom_white_aten
    # Two names for one torch op (matmul / matmul_v2) may land in both lists: white wins.
    black = ((_aten(black_names) - custom_white_aten) | custom_black_aten) - white
    # Every op a default list can govern gets its kernel now, before other threads may be
    # dispatching through the key: later registrations are then only for custom-list ops.
    op_interceptor.ensure_registered(_default_governed())
    checkpoint_bridge.install()  # from now on torch's checkpoint recomputes under its forward's state
    return op_interceptor.prepare(level, AMP_DTYPES[dtype], use_promote, frozenset(white), frozenset(black))


@functools.cache
def _default_governed() -> frozenset[str]:
    """ATen names of every op a default list (any level, any dtype) or the promoted gray ops govern."""
    names = {n for lists in (white_list(), black_list()) for by_level in lists.values()
             for level_names in by_level.values() for n in level_names}
    return frozenset(_aten(names)) | PROMOTED_GRAY_ATEN


def _aten(names: Iterable[str]) -> set[str]:
    return {a for name in names for a in aten_names(name)}


__all__ = [
    "amp_guard", "auto_cast", "autocast", "black_list", "get_autocast_cpu_dtype",
    "get_autocast_dtype", "get_autocast_gpu_dtype", "is_autocast_enabled",
    "is_bfloat16_supported", "is_float16_supported", "white_list",
]
