"""Runs Paddle's cast rule on torch ops, at the dispatcher, only for the ops that need it.

Mechanics: torch has one autocast dispatch key per device type. Two of them are unused by
PyTorch itself on CPU and CUDA builds: Graphcore's ``AutocastIPU`` and Intel Gaudi's
``AutocastHPU``. We put Python kernels there and switch the keys on per thread:

* ``AutocastIPU``, the *list key*: a kernel for each ATen op a list governs (plus the gray ops
  torch would not reconcile by type promotion), a fallthrough for every other op. On in every
  thread with an active ``auto_cast``. Ops no list governs cost nothing.
* ``AutocastHPU``, the *every-op key*: dispatched before the list key; a kernel for every
  functional ATen op, a fallthrough for the rest. Dispatched only in threads whose
  ``auto_cast`` subjects every op to the rule (OD; O2 without promotion). Its kernel hands the
  ops a list governs on to the list key, and applies the rule to the others itself.

Kernels are registered on first use (nothing at import) and never removed, so one thread's
``auto_cast`` never changes what another thread's ops dispatch to. Per-op kernels rather than
a catch-all fallback on the every-op key, because PyTorch cannot call a Python fallback while a
``TorchDispatchMode`` is active (operator-stats collection, torch.compile's tracing).

Composite torch functions (``F.multi_head_attention_forward``, ``F.normalize``...) are seen op
by op, as Paddle sees its own composites; casts are ordinary autograd ops, so gradients come
back in each input's own dtype; a user's own ``torch.autocast`` uses other keys.

torch.compile: while torch traces a compiled function, our kernels run like any other, so the
casts become part of the graph. Each configuration is also written to torch's per-thread
autocast state of the two keys (on/off and a dtype each), which torch.compile's guards compare,
so a graph is reused only under the configuration it was traced with (see ``compile_boundary``).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any

import torch

from .._stacklevel import user_stacklevel
from .cast_rule import CASTABLE, dest_dtype
from .compile_boundary import cache_off, cache_on, keep_out_of_dynamo
from .op_table import CONV_ATEN, DEPTHWISE_CONV2D, X_ONLY_ATEN

_LIST_KEY_NAME, _EVERY_KEY_NAME = "AutocastIPU", "AutocastHPU"
_LIST_KEY = getattr(torch._C.DispatchKey, _LIST_KEY_NAME)
_EVERY_KEY = getattr(torch._C.DispatchKey, _EVERY_KEY_NAME)
_LIST_DEVICE, _EVERY_DEVICE = "ipu", "hpu"  # torch's autocast-state names of the two keys


@dataclass(frozen=True)
class CastConfig:
    """What the active ``auto_cast`` decides with (ATen base names for the lists).

    Build it with ``prepare``, which registers the kernels it needs."""

    level: str
    amp_dtype: torch.dtype
    use_promote: bool
    white: frozenset[str]
    black: frozenset[str]
    # Written to torch's autocast state of the every-op key so that torch.compile's guards
    # tell configurations apart (see ``prepare``).
    guard_dtype: torch.dtype = field(default=torch.float32, compare=False)

    @property
    def every_op(self) -> bool:
        """Whether ops outside the lists need the rule too (OD; O2 without promotion)."""
        return self.level == "OD" or (self.level == "O2" and not self.use_promote)


class _ThreadState(threading.local):
    # Class defaults: what a thread that never activated sees.
    config: CastConfig | None = None
    # The autograd graph task whose ops are forward ops: -1 (none) outside a recomputation, the
    # running backward's id while it recomputes a checkpointed forward (see ``reenter``).
    forward_task: int = -1


_tls = _ThreadState()
_lock = threading.Lock()
_libraries: list[torch.library.Library] = []  # kept alive: dropping one would deregister
_registered: set[str] = set()  # ATen base names with a list-key kernel
_every_op_ready = False
_guard_dtypes: dict[CastConfig, torch.dtype] = {}
# Observers of each decision (the auto_cast benchmark counts intercepted ops with one; operator-stats
# collection does not use them); called as f(op_name, dtype).
observers: list[Callable[[str, torch.dtype], None]] = []


def current() -> CastConfig | None:
    """The config active in this thread (None: no auto-cast).

    Example::

        >>> from paddle_compat import amp
        >>> from paddle_compat.amp import op_interceptor
        >>> with amp.auto_cast(level="O2"):
        ...     op_interceptor.current().level
        'O2'
    """
    return _tls.config


def prepare(level: str, amp_dtype: torch.dtype, use_promote: bool,
            white: frozenset[str], black: frozenset[str]) -> CastConfig:
    """The config for these arguments, with every kernel it needs registered.

    Args:
        level: ``"OD"``, ``"O1"`` or ``"O2"``.
        amp_dtype: ``torch.float16`` or ``torch.bfloat16``.
        use_promote: whether a float32 input promotes a gray op at O2.
        white: ATen base names computed in ``amp_dtype``.
        black: ATen base names computed in float32.

    Example::

        >>> import torch
        >>> from paddle_compat.amp import op_interceptor
        >>> config = op_interceptor.prepare("O1", torch.bfloat16, True, frozenset({"matmul", "mm"}), frozenset())
        >>> token = op_interceptor.activate(config)
        >>> (torch.ones(2, 2) @ torch.ones(2, 2)).dtype
        torch.bfloat16
        >>> op_interceptor.restore(token)
    """
    config = CastConfig(level, amp_dtype, use_promote, white, black)
    ensure_registered(white | black)
    if config.every_op:
        _ensure_every_op_kernels()
    with _lock:
        guard = _guard_dtypes.get(config)
        if guard is None:
            guard = _guard_dtypes[config] = _GUARD_DTYPES[len(_guard_dtypes) % len(_GUARD_DTYPES)]
            if len(_guard_dtypes) == len(_GUARD_DTYPES) + 1:
                warnings.warn(
                    f"paddle_compat.amp: more than {len(_GUARD_DTYPES)} distinct auto_cast "
                    "configurations in this process; torch.compile can no longer tell every two of "
                    "them apart and may reuse a graph traced under one for another.",
                    stacklevel=user_stacklevel())
    return replace(config, guard_dtype=guard)


def activate(config: CastConfig | None) -> Any:
    """Make ``config`` (None: no auto-cast) current for this thread; returns a restore token.

    Args:
        config: a config from ``prepare``, or None.

    Pair every call with ``restore`` (see ``prepare``'s example); ``auto_cast`` does that.
    """
    on = config is not None
    token = (_tls.config, _is_included(_LIST_KEY), _is_excluded(_LIST_KEY),
             _is_included(_EVERY_KEY), _is_excluded(_EVERY_KEY), on)
    _tls.config = config
    _set_included(_LIST_KEY, on)
    _set_excluded(_LIST_KEY, not on)
    _set_included(_EVERY_KEY, config is not None and config.every_op)
    # The every-op key is switched on (not excluded) whenever a config is active, so that
    # torch.compile's guards see its dtype; it dispatches only where it is also included.
    _set_excluded(_EVERY_KEY, not on)
    if config is not None:
        _publish(config)
        cache_off()
    return token


def restore(token: Any) -> None:
    """Undo the ``activate`` call that returned ``token`` (calls nest: undo the last first).

    Args:
        token: what ``activate`` returned.
    """
    previous, list_in, list_ex, every_in, every_ex, was_on = token
    _tls.config = previous
    _set_included(_LIST_KEY, list_in)
    _set_excluded(_LIST_KEY, list_ex)
    _set_included(_EVERY_KEY, every_in)
    _set_excluded(_EVERY_KEY, every_ex)
    if previous is not None:
        _publish(previous)
    if was_on:
        cache_on()


def reenter(config: CastConfig | None) -> Any:
    """Run a forward again inside backward under ``config`` (what was current at the forward).

    Args:
        config: the config ``current()`` gave when the forward first ran, or None.

    Makes ``config`` current and counts the ops of the running autograd graph task as forward
    ops, which the rule casts (an op run by backward is otherwise never cast). A backward nested
    inside gets a graph task of its own, whose ops stay uncast. Returns a token for ``leave``.

    Example::

        >>> import torch
        >>> from paddle_compat.amp import op_interceptor
        >>> config = op_interceptor.prepare("O1", torch.bfloat16, True, frozenset({"matmul"}), frozenset())
        >>> token = op_interceptor.reenter(config)
        >>> (torch.ones(2, 2) @ torch.ones(2, 2)).dtype
        torch.bfloat16
        >>> op_interceptor.leave(token)
    """
    token = (activate(config), _tls.forward_task)
    _tls.forward_task = _graph_task_id()
    return token


def leave(token: Any) -> None:
    """Undo the ``reenter`` call that returned ``token``.

    Args:
        token: what ``reenter`` returned.
    """
    inner, _tls.forward_task = token
    restore(inner)


def _publish(config: CastConfig) -> None:
    _set_autocast_dtype(_LIST_DEVICE, config.amp_dtype)
    _set_autocast_dtype(_EVERY_DEVICE, config.guard_dtype)


def ensure_registered(base_names: Iterable[str]) -> None:
    """Register the rule kernel on the list key for these ATen ops' functional overloads (once).

    Args:
        base_names: ATen base names (``"mm"``, ``"softmax"``...); names of no ATen op are
            remembered and skipped.

    Registering a kernel for an op while another thread runs that op is not something
    PyTorch's dispatcher promises to be safe, so ``auto_cast`` registers every op a default
    list can govern at its first use; only custom lists naming other ops register later.
    """
    missing = set(base_names) - _registered
    if not missing:
        return
    with _lock:
        _ensure_fallthroughs()
        for base in sorted(missing - _registered):
            packet = getattr(torch.ops.aten, base, None)
            for overload in packet.overloads() if isinstance(packet, torch._ops.OpOverloadPacket) else ():
                op = getattr(packet, overload)
                if _castable(op):
                    _libraries[0].impl(_overload_name(op), _kernel_for(op, base), _LIST_KEY_NAME)
            _registered.add(base)


def _ensure_fallthroughs() -> None:
    """Create our libraries and give both keys a fallthrough for unlisted ops (caller holds the lock).

    PyTorch registers no fallback for these keys, and a key needs one to be switched on."""
    if _libraries:
        return
    # The every-op key's kernel hands listed ops on to the list key below it, so it must be
    # dispatched first (a higher DispatchKey value is dispatched earlier).
    if int(_EVERY_KEY) <= int(_LIST_KEY):
        raise RuntimeError(f"paddle_compat.amp: this torch dispatches {_EVERY_KEY_NAME} after "
                           f"{_LIST_KEY_NAME}; auto_cast needs the opposite order.")
    for key in (_LIST_KEY, _EVERY_KEY):
        if torch._C._dispatch_has_backend_fallback(key):
            raise RuntimeError(f"paddle_compat.amp: auto_cast needs the dispatch key {key.name}, which another "
                               "library (a Graphcore or Gaudi backend?) has taken.")
    kernels, fallbacks = torch.library.Library("aten", "IMPL"), torch.library.Library("_", "IMPL")
    for key_name in (_LIST_KEY_NAME, _EVERY_KEY_NAME):
        fallbacks.fallback(torch.library.fallthrough_kernel, key_name)
    _libraries.extend((kernels, fallbacks))
    keep_out_of_dynamo(_run, _every_op, _float_dtypes, _cast, _is_depthwise, dest_dtype, _conv_kernel)


def _ensure_every_op_kernels() -> None:
    """Register the every-op kernel for every functional ATen op (once, at the first OD or
    O2-without-promotion config, before any thread can switch the every-op key on)."""
    global _every_op_ready
    if _every_op_ready:
        return
    with _lock:
        if _every_op_ready:
            return
        _ensure_fallthroughs()
        library = _libraries[0]
        for qualified in torch._C._dispatch_get_all_op_names():
            namespace, _, name = qualified.partition("::")
            if namespace != "aten":
                continue
            base, _, overload = name.partition(".")
            op = getattr(getattr(torch.ops.aten, base, None), overload or "default", None)
            if isinstance(op, torch._ops.OpOverload) and _castable(op) and _takes_tensors(op):
                kernel = functools.partial(_every_op, op._op, base, base in X_ONLY_ATEN)
                library.impl(name, kernel, _EVERY_KEY_NAME)
        _every_op_ready = True


# Casts themselves are exempt, as in Paddle; copies keep the source dtype by definition.
_NEVER_CAST = frozenset({"_to_copy", "to", "copy", "_copy_from", "_copy_from_and_resize", "detach",
                         "lift_fresh", "_local_scalar_dense", "item", "alias"})


def _castable(op: torch._ops.OpOverload) -> bool:
    """Whether the rule may cast this overload's inputs. In-place and out= overloads never:
    Paddle exempts in-place APIs. Views never: a cast copy would break the aliasing torch code
    relies on (Paddle casts its views; see the docs)."""
    schema = op._schema
    return not (schema.is_mutable or schema.name.split("::")[-1] in _NEVER_CAST
                or any(r.alias_info is not None for r in schema.returns))


def _takes_tensors(op: torch._ops.OpOverload) -> bool:
    return any("Tensor" in str(a.type) for a in op._schema.arguments)


def _overload_name(op: torch._ops.OpOverload) -> str:
    base = op._schema.name.split("::")[-1]
    return base if not op._schema.overload_name else f"{base}.{op._schema.overload_name}"


def _kernel_for(op: torch._ops.OpOverload, base: str) -> Callable[..., Any]:
    # C-level partials: no extra Python frame between the dispatcher and the kernel.
    if base in CONV_ATEN:
        return functools.partial(_conv_kernel, op._op, base, CONV_ATEN[base])
    return functools.partial(_run, op._op, base, base in X_ONLY_ATEN)


def _conv_kernel(call: Callable[..., Any], base: str, spatial: int, *args: Any, **kwargs: Any) -> Any:
    """Paddle's convolutions: the bias is added by a separate gray ``add`` after the conv (so
    at O1 an fp32 bias makes the layer's output fp32), and a 2-D convolution with
    groups == input channels != 1 (and filters divisible by them) is ``depthwise_conv2d``,
    a gray op. Paddle's conv1d runs as a 2-D convolution. ``spatial``: the number of spatial dims."""
    conv_args = list(args)
    bias = conv_args[2] if len(conv_args) > 2 else kwargs.get("bias")
    if len(conv_args) > 2:
        conv_args[2] = None
    elif "bias" in kwargs:
        kwargs = {**kwargs, "bias": None}
    name = base
    if spatial <= 2 and not base.startswith("conv_transpose") and _is_depthwise(conv_args, kwargs):
        name = DEPTHWISE_CONV2D
    out = _run(call, name, False, *conv_args, **kwargs)
    if bias is None:
        return out
    shape = [1] * out.dim()
    shape[out.dim() - spatial - 1] = -1  # the channel dim, batched or not
    return _run(_ADD, "add", False, out, bias.reshape(shape))


_ADD = torch.ops.aten.add.Tensor._op


def _is_depthwise(args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    groups = args[6] if len(args) > 6 else kwargs.get("groups", 1)
    if groups == 1:  # the usual case, decided without looking at shapes
        return False
    x, weight = args[0], args[1]
    channels = x.shape[-weight.dim() + 1]  # (N,) C, *spatial
    return groups == channels and weight.shape[0] % channels == 0


def _run(call: Callable[..., Any], base: str, x_only: bool, *args: Any, **kwargs: Any) -> Any:
    """Apply the rule to one op's arguments, then run the op (``call``) below the list key."""
    config = _tls.config
    call_args: Sequence[Any] = args
    # The list key is excluded while we cast and while the op runs: the ops the op is made of
    # are not governed again, and the casts skip the key. (At OD the every-op key's kernel,
    # which called us, has excluded that key already.) The key is never excluded when we get
    # here (else we would not be called), so setting the flag and clearing it after is what a
    # guard object would do, at less cost.
    _set_excluded(_LIST_KEY, True)
    try:
        # Ops run by backward see the forward's thread state. Paddle's backward kernels never
        # auto-cast; a forward recomputed inside backward (``reenter``) and the user's Python
        # that backward runs (hooks) are cast, as Paddle casts the ops its hooks call.
        if config is not None and ((task := _graph_task_id()) == -1 or task == _tls.forward_task
                                   or _called_by_user_hook()):
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
                        call_args = (_cast(args[0], dst), *args[1:])
                    else:
                        call_args = [_cast(a, dst) for a in args]
                        if kwargs:
                            kwargs = {k: _cast(v, dst) for k, v in kwargs.items()}
        return call(*call_args, **kwargs)
    finally:
        _set_excluded(_LIST_KEY, False)


def _called_by_user_hook() -> bool:
    """Whether the op running in a backward was called by Python code of the user's that the
    autograd engine called (a tensor or node hook, a custom Function's backward, a module's
    backward hook, a saved-tensor hook), rather than by a backward kernel.

    Decided from the Python stack between this op and the engine's entry (torch's
    ``_engine_run_backward``): a C++ kernel has no frame there; otherwise the frame the engine
    called decides, past torch's hook runners: code outside torch and this package is the
    user's; torch's own Python (checkpoint internals, compiled graphs, FSDP's hooks) and ours
    (master_grad's hook) count as kernels. With no engine frame on this thread's stack the
    answer is no (also on a torch without that entry: hooks are then not cast)."""
    if _ENGINE_ENTRY is None:
        return False
    chain = []
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code is not _ENGINE_ENTRY:
        chain.append(frame.f_code)
        frame = frame.f_back
    if frame is None:
        return False
    for code in reversed(chain):  # from the frame the engine called, inwards
        if code.co_filename not in _HOOK_RUNNERS:
            return not code.co_filename.startswith(_NOT_USERS)
    return False


def _every_op(call: Callable[..., Any], base: str, x_only: bool, *args: Any, **kwargs: Any) -> Any:
    """The every-op key's kernel: listed ops go on to the list key's kernel, others get the rule."""
    config = _tls.config
    _set_excluded(_EVERY_KEY, True)
    try:
        if base in _registered or config is None or not config.every_op:
            return call(*args, **kwargs)
        return _run(call, base, x_only, *args, **kwargs)
    finally:
        _set_excluded(_EVERY_KEY, False)


_graph_task_id = torch._C._current_graph_task_id
# A private name of torch's: looked up softly, so that a torch without it still imports us.
_ENGINE_ENTRY = getattr(getattr(torch.autograd.graph, "_engine_run_backward", None), "__code__", None)
# Code in these directories is never the user's.
_NOT_USERS = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.dirname(__file__)) + os.sep)
# torch's modules that call the user's backward code: Function.backward, module and multi-grad hooks.
_HOOK_RUNNERS = frozenset(module.__file__ for module in (torch.autograd.function, torch.utils.hooks,
                                                          torch.autograd.graph))
_set_excluded = torch._C._dispatch_tls_set_dispatch_key_excluded
_set_included = torch._C._dispatch_tls_set_dispatch_key_included
_is_excluded = torch._C._dispatch_tls_is_dispatch_key_excluded
_is_included = torch._C._dispatch_tls_is_dispatch_key_included
_set_autocast_dtype = torch.set_autocast_dtype
# Every torch dtype, in a fixed order: the codes ``prepare`` hands out to configurations.
_GUARD_DTYPES: tuple[torch.dtype, ...] = tuple(dict.fromkeys(
    value for name in sorted(dir(torch)) if isinstance(value := getattr(torch, name), torch.dtype)))
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
