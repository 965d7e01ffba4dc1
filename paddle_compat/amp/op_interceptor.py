"""Runs Paddle's cast rule on torch ops, at the dispatcher, only for the ops that need it.

Mechanics: torch has one autocast dispatch slot per device type; the one for Graphcore IPUs
(``AutocastIPU``) is unused by PyTorch itself. We register Python kernels there, once, for the
ATen ops a Paddle list governs, and switch the slot on for the current thread while an
``auto_cast`` is active. So:

* ops no list governs cost nothing (the slot falls through to the normal kernels);
* composite torch functions (``F.multi_head_attention_forward``, ``F.normalize``...) are seen
  op by op, as Paddle sees its own composites;
* casts are ordinary autograd ops, so gradients come back in each input's own dtype;
* a user's own ``torch.autocast`` keeps working untouched (its slots are not used).

At OD, and O2 with ``use_promote=False``, every op is subject to the rule, so a Python
fallback kernel takes the whole slot while such a context is active anywhere in the process.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from .cast_rule import CASTABLE, dest_dtype
from .op_table import CONV_ATEN, DEPTHWISE_CONV2D, PROMOTED_GRAY_ATEN, X_ONLY_ATEN

_KEY_NAME = "AutocastIPU"
_KEY = getattr(torch._C.DispatchKey, _KEY_NAME)


@dataclass(frozen=True)
class CastConfig:
    """What the active ``auto_cast`` decides with (ATen base names for the lists)."""

    level: str
    amp_dtype: torch.dtype
    use_promote: bool
    white: frozenset[str]
    black: frozenset[str]

    @property
    def every_op(self) -> bool:
        """Whether ops outside the lists need the rule too (OD; O2 without promotion)."""
        return self.level == "OD" or (self.level == "O2" and not self.use_promote)


class _ThreadState(threading.local):
    config: CastConfig | None = None  # class default: what a thread that never activated sees


_tls = _ThreadState()
_lock = threading.Lock()
_kernels_lib = torch.library.Library("aten", "IMPL")
_registered: set[str] = set()
_fallback_lib: torch.library.Library | None = None  # owns the slot's fallback kernel
_every_op_users = 0
# Observers of each decision (operator-stats collection); called as f(op_name, dtype).
observers: list[Callable[[str, torch.dtype], None]] = []


def current() -> CastConfig | None:
    return _tls.config


def activate(config: CastConfig | None) -> Any:
    """Make ``config`` (None: no auto-cast) current for this thread; returns a restore token.

    The config's listed ops must have been registered (``ensure_registered``) beforehand."""
    token = (current(), torch._C._dispatch_tls_is_dispatch_key_included(_KEY),
             torch._C._dispatch_tls_is_dispatch_key_excluded(_KEY))
    if config is not None and config.every_op:
        _acquire_fallback()
    _tls.config = config
    torch._C._dispatch_tls_set_dispatch_key_included(_KEY, config is not None)
    torch._C._dispatch_tls_set_dispatch_key_excluded(_KEY, config is None)
    return token, config


def restore(token: Any) -> None:
    (previous, included, excluded), config = token
    _tls.config = previous
    torch._C._dispatch_tls_set_dispatch_key_included(_KEY, included)
    torch._C._dispatch_tls_set_dispatch_key_excluded(_KEY, excluded)
    if config is not None and config.every_op:
        _release_fallback()


def ensure_registered(base_names: Iterable[str]) -> None:
    """Register the rule kernel for every functional overload of these ATen ops (once)."""
    missing = set(base_names) - _registered
    if not missing:
        return
    with _lock:
        for base in sorted(missing - _registered):
            packet = getattr(torch.ops.aten, base, None)
            for overload in packet.overloads() if packet is not None else ():
                op = getattr(packet, overload)
                if op._schema.is_mutable:  # in-place and out= variants: Paddle never casts them
                    continue
                name = base if overload == "default" else f"{base}.{overload}"
                _kernels_lib.impl(name, _kernel_for(op, base), _KEY_NAME)
            _registered.add(base)


def _kernel_for(op: torch._ops.OpOverload, base: str) -> Callable[..., Any]:
    if base in CONV_ATEN:
        return _conv_kernel_for(op, base)
    # A C-level partial: no extra Python frame between the dispatcher and _run.
    return functools.partial(_run, op._op, base, base in X_ONLY_ATEN)


def _conv_kernel_for(op: torch._ops.OpOverload, base: str) -> Callable[..., Any]:
    """Paddle's convolutions: the bias is added by a separate gray ``add`` after the conv (so
    at O1 an fp32 bias makes the layer's output fp32), and a 2-D convolution with
    groups == input channels != 1 (and filters divisible by them) is ``depthwise_conv2d``,
    a gray op. Paddle's conv1d runs as a 2-D convolution."""
    spatial = CONV_ATEN[base]
    call = op._op

    def kernel(*args: Any, **kwargs: Any) -> Any:
        args = list(args)
        bias = args[2] if len(args) > 2 else kwargs.get("bias")
        if len(args) > 2:
            args[2] = None
        elif "bias" in kwargs:
            kwargs = {**kwargs, "bias": None}
        name = base
        if spatial <= 2 and not base.startswith("conv_transpose") and _is_depthwise(args, kwargs):
            name = DEPTHWISE_CONV2D
        out = _run(call, name, False, *args, **kwargs)
        if bias is None:
            return out
        shape = [1] * out.dim()
        shape[out.dim() - spatial - 1] = -1  # the channel dim, batched or not
        return _run(_ADD, "add", False, out, bias.reshape(shape))

    return kernel


_ADD = torch.ops.aten.add.Tensor._op


def _is_depthwise(args: list, kwargs: dict) -> bool:
    groups = args[6] if len(args) > 6 else kwargs.get("groups", 1)
    if groups == 1:  # the usual case, decided without looking at shapes
        return False
    x, weight = args[0], args[1]
    channels = x.shape[-weight.dim() + 1]  # (N,) C, *spatial
    return groups == channels and weight.shape[0] % channels == 0


def _run(call: Callable[..., Any], base: str, x_only: bool, *args: Any, **kwargs: Any) -> Any:
    """Apply the rule to one op's arguments, then run the op (``call``) below our slot."""
    config = _tls.config
    # Our slot is excluded while we cast and while the op runs: the ops the op is made of are
    # not governed again, and the casts skip the slot (at OD they would enter the fallback).
    # The slot is never excluded when we get here (else we would not be called), so setting
    # the flag and clearing it after is what a guard object would do, at less cost.
    _set_excluded(_KEY, True)
    try:
        # Backward ops run with the forward's thread state; Paddle never auto-casts them.
        if config is not None and _graph_task_id() == -1:
            dtypes = _float_dtypes(args[:1] if x_only else args)
            if kwargs and not x_only:
                dtypes |= _float_dtypes(kwargs.values())
            if dtypes:
                dst = dest_dtype(base in config.white, base in config.black, dtypes,
                                 config.level, config.amp_dtype, config.use_promote)
                for observe in observers:
                    observe(base, dst)
                if len(dtypes) > 1 or dst not in dtypes:
                    if x_only:
                        args = (_cast(args[0], dst), *args[1:])
                    else:
                        args = [_cast(a, dst) for a in args]
                        if kwargs:
                            kwargs = {k: _cast(v, dst) for k, v in kwargs.items()}
        return call(*args, **kwargs)
    finally:
        _set_excluded(_KEY, False)


_graph_task_id = torch._C._current_graph_task_id
_set_excluded = torch._C._dispatch_tls_set_dispatch_key_excluded
_Tensor = torch.Tensor
# Tensor.float() and friends are torch's own ``to(dtype)``; they are called directly because
# torch's argument parser matches them faster than ``to``, which has several overloads.
_TO = {torch.float32: _Tensor.float, torch.float16: _Tensor.half, torch.bfloat16: _Tensor.bfloat16}


def _float_dtypes(values: Iterable[Any]) -> set[torch.dtype]:
    """dtypes of the castable tensors among ``values`` (and in list values)."""
    found: set[torch.dtype] = set()
    for value in values:
        if isinstance(value, _Tensor):
            found.add(value.dtype)
        elif isinstance(value, (list, tuple)):
            found.update([t.dtype for t in value if isinstance(t, _Tensor)])
    found &= CASTABLE
    return found


def _cast(value: Any, dst: torch.dtype) -> Any:
    if isinstance(value, _Tensor):
        dtype = value.dtype
        return _TO[dst](value) if dtype != dst and dtype in CASTABLE else value
    if isinstance(value, (list, tuple)) and any(isinstance(v, _Tensor) for v in value):
        return type(value)(_cast(v, dst) for v in value)
    return value


# --- the every-op fallback (OD; O2 without promotion) -------------------------------------

_fallback_verdicts: dict[torch._ops.OpOverload, tuple[bool, str]] = {}
# Casts themselves are exempt, as in Paddle; copies keep the source dtype by definition.
_NEVER_CAST = frozenset({"_to_copy", "to", "copy", "_copy_from", "_copy_from_and_resize", "detach",
                         "lift_fresh", "_local_scalar_dense", "item", "alias"})


def _fallback_verdict(op: torch._ops.OpOverload) -> tuple[bool, str]:
    """Whether the every-op rule governs ``op``, and its base name (both cached per op)."""
    verdict = _fallback_verdicts.get(op)
    if verdict is None:
        schema = op._schema
        base = schema.name.split("::")[-1]
        # In-place ops and views stay uncast: a cast copy would break the aliasing torch code
        # relies on (Paddle casts its views too; see the docs).
        governed = not (schema.is_mutable or base in _NEVER_CAST
                        or any(r.alias_info is not None for r in schema.returns))
        verdict = _fallback_verdicts[op] = (governed, base)
    return verdict


def _fallback(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    config = _tls.config
    if config is not None and config.every_op:
        governed, base = _fallback_verdict(op)
        if governed:
            return _run(op._op, base, base in X_ONLY_ATEN, *args, **kwargs)
    _set_excluded(_KEY, True)
    try:
        return op._op(*args, **kwargs)
    finally:
        _set_excluded(_KEY, False)


def _set_fallback(kernel: Callable[..., Any]) -> None:
    """Own the slot's fallback: PyTorch registers none for it, and a key needs one to be on."""
    global _fallback_lib
    if _fallback_lib is not None:
        _fallback_lib._destroy()
    _fallback_lib = torch.library.Library("_", "IMPL")
    _fallback_lib.fallback(kernel, _KEY_NAME)


def _acquire_fallback() -> None:
    global _every_op_users
    with _lock:
        _every_op_users += 1
        if _every_op_users == 1:
            _set_fallback(_fallback)


def _release_fallback() -> None:
    global _every_op_users
    with _lock:
        _every_op_users -= 1
        if _every_op_users == 0:
            _set_fallback(torch.library.fallthrough_kernel)


_set_fallback(torch.library.fallthrough_kernel)
ensure_registered(PROMOTED_GRAY_ATEN)  # governed at every level
