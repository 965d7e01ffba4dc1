"""``paddle.amp.debugging`` on torch: ``check_numerics`` and operator-stats collection.

Differences from Paddle: operator stats count torch ATen ops (``mm``, ``add``...), not Paddle
op names, bucketed by the dtype of each op's first tensor output, and only in the thread that
enabled the collection (Paddle counts process-wide); the tensor-checker (``TensorCheckerConfig``,
``enable_tensor_checker``), ``check_layer_numerics`` and ``compare_accuracy`` are not provided.
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from collections.abc import Iterator
from enum import Enum
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class DebugMode(Enum):
    """What a numerics check reports, and whether NaN/Inf aborts."""

    CHECK_NAN_INF_AND_ABORT = 0
    CHECK_NAN_INF = 1
    CHECK_ALL_FOR_OVERFLOW = 2
    CHECK_ALL = 3


_DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32", torch.float64: "fp64"}


def check_numerics(
    tensor: torch.Tensor,
    op_type: str,
    var_name: str,
    debug_mode: DebugMode = DebugMode.CHECK_NAN_INF_AND_ABORT,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Count NaN, Inf and zeros in ``tensor`` and summarize its values, as Paddle does.

    Args:
        tensor: the tensor to check (any float dtype, any device).
        op_type: the op name printed in the report.
        var_name: the tensor name printed in the report.
        debug_mode: ``CHECK_NAN_INF_AND_ABORT`` (default) raises on NaN/Inf; the other modes
            only print.

    Returns ``stats`` (int64 ``[num_nan, num_inf, num_zero]``) and ``values`` (float32
    ``[max, min, mean]``, max/min ignoring NaN). Prints a ``[PRECISION] [ERROR]`` line when
    NaN or Inf is found and, in ``CHECK_NAN_INF_AND_ABORT`` mode, then raises ``RuntimeError``.

    Example::

        >>> import torch
        >>> from paddle_compat.amp.debugging import check_numerics
        >>> stats, values = check_numerics(torch.tensor([1.0, 0.0, 3.0]), "my_op", "x")
        >>> stats.tolist(), values.tolist()
        ([0, 0, 1], [3.0, 0.0, 1.3333333730697632])
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor should be a torch.Tensor, but received {type(tensor).__name__}")
    if not isinstance(debug_mode, DebugMode):
        raise TypeError(f"debug_mode should be a DebugMode, but received {type(debug_mode).__name__}")
    data = tensor.detach().float()
    nan, inf = torch.isnan(data), torch.isinf(data)
    stats = torch.stack([nan.sum(), inf.sum(), (data == 0).sum()]).to(torch.int64)
    finite_or_inf = data[~nan]
    if finite_or_inf.numel():
        high, low = finite_or_inf.max(), finite_or_inf.min()
    else:
        high = low = torch.tensor(float("nan"), device=data.device)
    values = torch.stack([high, low, data.mean()]).to(torch.float32)
    num_nan, num_inf, num_zero = (int(v) for v in stats)
    if num_nan or num_inf:
        where = (f"[device={_device_name(tensor.device)}, op={op_type}, tensor={var_name}, "
                 f"dtype={_DTYPE_NAMES.get(tensor.dtype, str(tensor.dtype))}]")
        print(f"[PRECISION] [ERROR] in {where}, numel={data.numel()}, num_nan={num_nan}, "
              f"num_inf={num_inf}, num_zero={num_zero}, max={float(values[0]):e}, "
              f"min={float(values[1]):e}, mean={float(values[2]):e}")
        if debug_mode == DebugMode.CHECK_NAN_INF_AND_ABORT:
            raise RuntimeError(f"(PreconditionNotMet) There are NAN or INF (num_nan={num_nan}, "
                               f"num_inf={num_inf}, num_zero={num_zero}) in {where}.")
    return stats, values


def _device_name(device: torch.device) -> str:
    return "cpu" if device.type == "cpu" else f"gpu:{device.index or 0}"


_BUCKETS: dict[torch.dtype | None, int] = {torch.float16: 0, torch.bfloat16: 1, torch.float32: 2}  # else 3: other


class _OperatorStats(TorchDispatchMode):
    """Counts every ATen op run (forward and backward) by its output dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        first = next((t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)), None)
        bucket = _BUCKETS.get(getattr(first, "dtype", None), 3)
        self.counts[func._schema.name.split("::")[-1]][bucket] += 1
        return out


class _ThreadCollector(threading.local):
    collector: _OperatorStats | None = None  # dispatch modes are per thread, so is the collection


_state = _ThreadCollector()


def enable_operator_stats_collection() -> None:
    """Start counting op calls per dtype (FP16, BF16, FP32, Other) in this thread.

    A second call while collecting does nothing.

    Example::

        >>> import torch
        >>> from paddle_compat import amp
        >>> amp.debugging.enable_operator_stats_collection()
        >>> with amp.auto_cast():
        ...     _ = torch.ones(2, 2) @ torch.ones(2, 2)
        >>> amp.debugging.disable_operator_stats_collection()  # doctest: +ELLIPSIS
        <... op list ...>
        ...
          mm                                      |  1                |  0                |  0                |  0...
        ...
    """
    if _state.collector is None:
        _state.collector = _OperatorStats()
        _state.collector.__enter__()


def disable_operator_stats_collection() -> None:
    """Stop counting in this thread and print the table of op calls per dtype (nothing when
    not collecting).

    Example::

        >>> from paddle_compat import amp
        >>> amp.debugging.enable_operator_stats_collection()
        >>> amp.debugging.disable_operator_stats_collection()  # doctest: +ELLIPSIS
        <... op list ...>
        ...
        <... op count: 0 ...>
        <BLANKLINE>
    """
    collector, _state.collector = _state.collector, None
    if collector is None:
        return
    collector.__exit__(None, None, None)
    _print_operator_stats(collector.counts)


@contextlib.contextmanager
def collect_operator_stats() -> Iterator[None]:
    """Count op calls per dtype within the block (in this thread) and print the table on exit.

    Example::

        >>> import torch
        >>> from paddle_compat import amp
        >>> with amp.debugging.collect_operator_stats():  # doctest: +ELLIPSIS
        ...     with amp.auto_cast(level="OD"):
        ...         _ = torch.softmax(torch.ones(2, 2) @ torch.ones(2, 2), -1)
        <... op list ...>
        ...
          _softmax                                |  0                |  0                |  1                |  0...
        ...
    """
    enable_operator_stats_collection()
    try:
        yield
    finally:
        disable_operator_stats_collection()


def _print_operator_stats(counts: dict[str, list[int]]) -> None:
    print("<{:-^120}>".format(" op list "))
    print("<{:-^40}".format(" Op Name "), "|", "{:-^17}".format(" FP16 Calls "), "|",
          "{:-^17}".format(" BF16 Calls "), "|", "{:-^17}".format(" FP32 Calls"), "|",
          "{:-^17}>".format(" Other Calls "))
    for name in sorted(counts):
        fp16, bf16, fp32, other = counts[name]
        print(f"  {name:<40}|  {fp16:<17}|  {bf16:<17}|  {fp32:<17}|  {other:<17}")
    print("<{:-^120}>\n".format(f" op count: {len(counts)} "))
