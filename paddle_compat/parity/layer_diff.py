"""Which layer of a port computes differently: one step of a Paddle layer and its torch port, per layer.

:func:`diff_layers` runs one forward and backward of both models on the same input (Paddle's own
forward on the reference side), aligns their layer calls (:mod:`.align`), and compares every
aligned layer's output (forward) and the gradients it produces (backward: its input gradients and
its parameters' gradients).

In **single-step mode** (the default) each torch layer is replayed on the Paddle layer's own input,
and its backward on the Paddle layer's own output gradient, so that an error does not build up
through the model: the first layer reported is the one that computes differently. Its inputs are
matched by what they are: the activations (what a gradient flows into, nested in tuples too) are
Paddle's, while masks and ids may keep the port's own form (torch's ``[B, L]`` padding mask for
Paddle's additive ``[B, 1, 1, L]``). A layer that cannot be fed so is said to be not isolated, and
is never blamed for the backward. A layer whose
sublayers all agree but which itself does not is reported with that remark: the difference is in
its own forward code (functional calls between sublayers). Without single-step mode (``chained``)
the natural runs are compared, as PaDiff does by default.

Tolerance: a layer diverges when the norm-relative error ``||torch - paddle|| / ||paddle||``
exceeds both ``rtol`` and ``noise_factor`` times the port's own rounding error, measured by
replaying the torch layer in float64 (its noise floor). So kernel rounding never counts as a
divergence, and a real difference stands out by orders of magnitude. Inf and NaN must be in the
same places.

Paddle is imported by :func:`diff_layers` when it runs, never when this module is imported.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .. import _checks
from ._arrays import closeness, copy_of
from .align import Call, Pair, align, ignored_paths, kind_of, layer_types
from .compare import bound_for
from .convert import NameMap, Plan, _check_name_map, paddle_to_torch, string_list
from .hooks import first_tensor as _first_tensor
from .hooks import named_layers, wants_grad
from .paddle_side import _set_state

__all__ = ["LayerDiff", "LayerDivergence", "LayerResult", "diff_layers"]

_HERE = os.path.dirname(os.path.abspath(__file__))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
DEFAULT_RTOL = 1e-6
DEFAULT_NOISE_FACTOR = 16.0


# ------------------------------------------------------------------------------------ tensors


def _is_tensor(x: Any) -> bool:
    return _first_tensor(x) is not None and not isinstance(x, (tuple, list))


def _is_float_array(a: np.ndarray) -> bool:
    return a.dtype.kind == "f"


def _caller_site() -> str | None:
    """Where the layer being called was called from: the first frame outside torch and this kit."""
    frame = sys._getframe(2)
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not (name.startswith((_TORCH_DIR, _HERE)) or "<frozen" in name):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return None


# ------------------------------------------------------------------------------------ recording


class _Recorder:
    """Hooks on every layer of one model (torch or Paddle, duck-typed) recording its calls."""

    def __init__(self, model: Any, side: str) -> None:
        self.side = side
        self.calls: list[Call] = []
        self.active = True
        self._stack: list[tuple[Any, Call]] = []
        self._counts: dict[str, int] = {}
        self._handles: list[Any] = []
        layers, register = named_layers(model)
        for path, layer in layers:
            self._handles.append(layer.register_forward_pre_hook(self._pre(path), with_kwargs=True))
            self._handles.append(getattr(layer, register)(self._post(path)))

    def _keep(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.detach().clone()
        if _is_tensor(x):
            return copy_of(x)
        if isinstance(x, (tuple, list)):
            return _rebuilt(x, [self._keep(item) for item in x])
        return x

    def _pre(self, path: str) -> Callable[..., None]:
        def hook(layer: Any, args: Any, kwargs: Any) -> None:
            if not self.active:
                return
            n = self._counts.get(path, 0)
            self._counts[path] = n + 1
            call = Call(
                path,
                n,
                layer,
                kind_of(layer),
                -1,
                tuple(self._keep(a) for a in args),
                {k: self._keep(v) for k, v in (kwargs or {}).items()},
                site=_caller_site() if self.side == "torch" else None,
                flows=tuple(path for path, t in _slots(args, kwargs or {}) if wants_grad(t)),
            )
            self._stack.append((layer, call))

        return hook

    def _post(self, path: str) -> Callable[..., None]:
        def hook(layer: Any, inputs: Any, output: Any) -> None:
            if not self.active or not self._stack or self._stack[-1][0] is not layer:
                return
            _, call = self._stack.pop()
            call.order = len(self.calls)
            self.calls.append(call)
            t = _first_tensor(output)
            if t is None:
                return
            call.output = copy_of(t)
            if wants_grad(t):
                t.register_hook(self._grad(call))

        return hook

    def _grad(self, call: Call) -> Callable[[Any], None]:
        def hook(grad: Any) -> None:
            if self.active:
                call.grad = copy_of(grad)

        return hook

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


# ------------------------------------------------------------------------------------ results


@dataclasses.dataclass
class Check:
    """One comparison of one layer: ``what`` (``"output"``, ``"input grad 0"``, ``"grad weight"``),
    the :func:`~._arrays.closeness` metrics, the noise floor (the port's own float64 rounding
    error, relative), the tolerance applied, and the verdict."""

    what: str
    metrics: dict[str, float]
    noise: float | None
    tolerance: float
    ok: bool
    reason: str | None = None

    def describe(self) -> str:
        m = self.metrics
        text = (
            f"{self.what}: rel_l2 {m['rel_l2']:.3g}, cosine {m['cosine']:.9f}, max abs {m['max_abs']:.3g} "
            f"({m['scaled_ulps']:.3g} ulps of the tensor's scale)"
        )
        if m["nonfinite"]:
            text += f", {m['nonfinite']} inf/NaN elements differ"
        if self.noise is not None:
            text += f"; noise floor {self.noise:.2g}"
        if self.reason:
            text += f"; {self.reason}"
        return text


@dataclasses.dataclass
class LayerResult:
    """One aligned layer call: its forward checks (output) and backward checks (input and
    parameter gradients), in single-step or chained mode."""

    key: str  # the torch call's key
    paddle_key: str
    kind: str
    how: str  # how it was aligned: name, layer_map, type
    site: str | None
    forward: list[Check] = dataclasses.field(default_factory=list)
    backward: list[Check] = dataclasses.field(default_factory=list)
    remark: str | None = None
    isolated: bool = True  # single-step mode fed it Paddle's inputs (False: compared as chained)
    judged: bool = True  # False: it contains an ignored layer, its checks are left out

    @property
    def forward_ok(self) -> bool:
        return all(c.ok for c in self.forward)

    @property
    def backward_ok(self) -> bool:
        return all(c.ok for c in self.backward)


@dataclasses.dataclass
class LayerDivergence:
    """Where a layer diff first finds a difference: ``phase`` is ``"load"`` (parameters after
    loading), ``"forward"`` or ``"backward"``, ``layer`` the torch layer, ``check`` the failing
    :class:`Check`. (A trace comparison's first divergence, a step and a tensor, is
    :class:`.compare.Divergence`.)"""

    phase: str
    layer: str
    check: Check
    site: str | None = None
    remark: str | None = None

    def describe(self) -> str:
        text = f"first divergence ({self.phase}) at {self.layer}: {self.check.describe()}"
        if self.remark:
            text += f" [{self.remark}]"
        if self.site:
            text += f"\n  called at {self.site}"
        return text


@dataclasses.dataclass
class LayerDiff:
    """What :func:`diff_layers` found. ``first`` is the first divergence (load, then forward in
    call order, then backward in backward order), ``None`` when the port agrees everywhere.

    Example::

        result = diff_layers(paddle_model, port, x)
        print(result.tree())
    """

    single_step: bool
    layers: list[LayerResult]
    params: list[tuple[str, Check]]
    first_load: LayerDivergence | None
    first_forward: LayerDivergence | None
    first_backward: LayerDivergence | None
    notes: list[str]
    model: torch.nn.Module = dataclasses.field(repr=False)

    @property
    def first(self) -> LayerDivergence | None:
        return self.first_load or self.first_forward or self.first_backward

    @property
    def not_isolated(self) -> list[LayerResult]:
        """Layers single-step mode could not feed Paddle's inputs (each says why in its ``remark``)."""
        return [r for r in self.layers if not r.isolated]

    @property
    def ok(self) -> bool:
        return self.first is None and all(r.backward_ok for r in self.not_isolated)

    def summary(self) -> str:
        """The verdict, the first divergence of each phase, the layers not isolated, and the notes."""
        mode = "single-step" if self.single_step else "chained"
        lines = [f"{len(self.layers)} layers compared ({mode}): " + ("equal within noise" if self.ok else "DIVERGED")]
        for d in (self.first_load, self.first_forward, self.first_backward):
            if d is not None:
                lines.append(d.describe())
        if self.not_isolated:
            keys = ", ".join(r.key + ("" if r.backward_ok else " (its backward differs)") for r in self.not_isolated)
            lines.append(
                f"{len(self.not_isolated)} layers not isolated, compared as chained and never blamed for "
                f"the backward: {keys}; the first: {self.not_isolated[0].remark}"
            )
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def tree(self) -> str:
        """The torch model's tree, each compared layer with its verdict, and a marker at the
        first divergence."""
        by_path: dict[str, list[LayerResult]] = {}
        for r in self.layers:
            by_path.setdefault(r.key.split("#")[0], []).append(r)
        first = self.first
        lines = []
        for path, module in self.model.named_modules():
            depth = 0 if not path else path.count(".") + 1
            name = path.rpartition(".")[2] if path else "(model)"
            results = by_path.get(path if path else "(model)", [])
            if not results:
                status = "-"
            elif not any(r.judged for r in results):
                status = "not judged (contains ignored layers)"
            else:
                bad = [("fwd" if not r.forward_ok else "") + (" bwd" if not r.backward_ok else "") for r in results]
                status = "ok" if not any(b for b in bad) else "DIFFERS " + ",".join(b.strip() for b in bad if b)
            line = f"{'  ' * depth}{name} ({type(module).__name__}): {status}"
            if first is not None and first.layer.split("#")[0] in (path, "(model)" if not path else None):
                line += f"   <-- first divergence ({first.phase})"
            lines.append(line)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Everything, JSON-ready."""

        def check(c: Check) -> dict[str, Any]:
            return {
                "what": c.what,
                **{k: (v if math.isfinite(v) else str(v)) for k, v in c.metrics.items()},
                "noise": c.noise,
                "tolerance": c.tolerance,
                "ok": c.ok,
                "reason": c.reason,
            }

        def div(d: LayerDivergence | None) -> dict[str, Any] | None:
            return None if d is None else {"phase": d.phase, "layer": d.layer, "site": d.site, **check(d.check)}

        return {
            "ok": self.ok,
            "single_step": self.single_step,
            "first": div(self.first),
            "first_load": div(self.first_load),
            "first_forward": div(self.first_forward),
            "first_backward": div(self.first_backward),
            "notes": self.notes,
            "params": [{"name": k, **check(c)} for k, c in self.params],
            "layers": [
                {
                    "layer": r.key,
                    "paddle_layer": r.paddle_key,
                    "kind": r.kind,
                    "aligned_by": r.how,
                    "site": r.site,
                    "forward": [check(c) for c in r.forward],
                    "backward": [check(c) for c in r.backward],
                    "remark": r.remark,
                    "isolated": r.isolated,
                    "judged": r.judged,
                }
                for r in self.layers
            ],
        }


# ------------------------------------------------------------------------------------ the diff


class _Judge:
    def __init__(self, rtol: float | Mapping[str, float], noise_factor: float) -> None:
        self.rtol, self.noise_factor = rtol, noise_factor

    def tolerance(self, layer: str, phase: str) -> float:
        if not isinstance(self.rtol, Mapping):
            return float(self.rtol)
        found = bound_for(self.rtol, layer, phase)
        return DEFAULT_RTOL if found is None else float(found)

    def check(self, layer: str, phase: str, what: str, ref: np.ndarray, cand: np.ndarray, noise: float | None) -> Check:
        if ref.shape != cand.shape:
            m = {"rel_l2": math.inf, "cosine": 0.0, "max_abs": math.inf, "scaled_ulps": math.inf, "nonfinite": 0}
            tol = self.tolerance(layer, phase)
            return Check(
                what, m, noise, tol, False, f"shapes differ: Paddle {list(ref.shape)}, torch {list(cand.shape)}"
            )
        m = closeness(ref, cand)
        tol = self.tolerance(layer, phase)
        if noise is not None:
            tol = max(tol, self.noise_factor * noise)
        return Check(what, m, noise, tol, m["nonfinite"] == 0 and m["rel_l2"] <= tol)


def _torch_buffers(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: b.detach().clone() for k, b in module.named_buffers()}


def _paddle_buffers(layer: Any) -> dict[str, np.ndarray]:
    """The layer's non-trainable state, to put back after the step."""
    out = {k: copy_of(p) for k, p in layer.named_parameters() if p.stop_gradient}
    out.update((k, copy_of(b)) for k, b in layer.named_buffers())
    return out


def _restore_torch_buffers(module: torch.nn.Module, saved: Mapping[str, torch.Tensor]) -> None:
    with torch.no_grad():
        for k, b in module.named_buffers():
            if k in saved:
                b.copy_(saved[k])


# A call's tensor arguments are addressed by paths: ``(position,)`` or ``(keyword,)``, then the
# indices inside tuples and lists (an LSTM's ``(h0, c0)``).
Path = tuple[Any, ...]


def _rebuilt(like: tuple[Any, ...] | list[Any], items: list[Any]) -> Any:
    if isinstance(like, list):
        return items
    return type(like)(*items) if hasattr(like, "_fields") else type(like)(items)  # namedtuples too


def _slots(args: Sequence[Any], kwargs: Mapping[str, Any]) -> list[tuple[Path, Any]]:
    """Every tensor (torch, Paddle or a recorded numpy array) among a call's arguments, with its path."""
    out: list[tuple[Path, Any]] = []

    def walk(path: Path, x: Any) -> None:
        if isinstance(x, (tuple, list)):
            for i, item in enumerate(x):
                walk((*path, i), item)
        elif isinstance(x, np.ndarray) or _is_tensor(x):
            out.append((path, x))

    for i, a in enumerate(args):
        walk((i,), a)
    for k, v in kwargs.items():
        walk((k,), v)
    return out


def _replaced(args: list[Any], kwargs: dict[str, Any], values: Mapping[Path, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The arguments with the tensors at these paths replaced."""

    def put(x: Any, rest: Path, value: Any) -> Any:
        if not rest:
            return value
        items = list(x)
        items[rest[0]] = put(items[rest[0]], rest[1:], value)
        return _rebuilt(x, items)

    args, kwargs = list(args), dict(kwargs)
    for path, value in values.items():
        holder: Any = args if isinstance(path[0], int) else kwargs
        holder[path[0]] = put(holder[path[0]], path[1:], value)
    return args, kwargs


def _slot_name(path: Path) -> str:
    head = f"argument {path[0]}" if isinstance(path[0], int) else repr(path[0])
    return head + "".join(f"[{i}]" for i in path[1:])


@dataclasses.dataclass
class _Feed:
    """How a torch call is replayed on the Paddle call's inputs: ``args``/``kwargs`` with Paddle's
    activations in place of the port's; ``groups``: per Paddle input a gradient flows into, the
    torch paths fed it (several when torch passes one tensor where Paddle passes it once); ``kept``:
    the port's own arguments kept (masks and ids in the port's own form); ``summed``: Paddle passes
    one tensor several times where torch passes it once (``attn(x, x, x)`` against ``attn(x)``),
    so torch's input gradient is the sum of Paddle's."""

    args: list[Any]
    kwargs: dict[str, Any]
    groups: list[list[Path]]
    kept: list[str]
    summed: bool = False


def _fed_args(t: Call, p: Call) -> _Feed | str:
    """The torch call's arguments with the activations (the tensors a gradient flows into) replaced
    by the Paddle call's, or why they cannot be (counts or shapes).

    Masks, ids and other tensors no gradient flows into may take another form in the port (torch's
    ``key_padding_mask`` ``[B, L]`` for Paddle's additive ``[B, 1, 1, L]`` mask): they are Paddle's
    where Paddle passes the same shape at the same place among them, the port's own otherwise. They
    come from the model's inputs, not from the layers before, so keeping them isolates the layer all
    the same."""
    t_slots, p_slots = _slots(t.args, t.kwargs), dict(_slots(p.args, p.kwargs))
    t_flow = [(path, v) for path, v in t_slots if path in t.flows]
    p_flow = [p_slots[path] for path in p.flows if path in p_slots]
    groups: list[list[Path]] = [[path] for path, _ in t_flow]
    if len(p_flow) == 1 and len(t_flow) > 1 and all(torch.equal(v, t_flow[0][1]) for _, v in t_flow):
        groups = [[path for path, _ in t_flow]]  # one tensor passed several times (query, key, value)
    summed = len(groups) == 1 and len(p_flow) > 1 and all(np.array_equal(v, p_flow[0]) for v in p_flow)
    if summed:  # the other way round: Paddle passes it several times, torch once
        p_flow = p_flow[:1]
    if len(p_flow) != len(groups):
        return (
            f"it takes {len(groups)} input(s) a gradient flows into, Paddle's layer {len(p_flow)}: "
            "it cannot be fed Paddle's"
        )
    values: dict[Path, Any] = {}
    own = dict(t_slots)
    for group, fed in zip(groups, p_flow):
        mine = own[group[0]]
        if tuple(fed.shape) != tuple(mine.shape):
            return f"its input {_slot_name(group[0])} is {list(mine.shape)}, Paddle's {list(fed.shape)}"
        for path in group:
            values[path] = torch.from_numpy(np.array(fed, copy=True)).to(mine.dtype)
    p_rest = [v for path, v in _slots(p.args, p.kwargs) if path not in p.flows]
    kept = []
    for j, (path, mine) in enumerate((path, v) for path, v in t_slots if path not in t.flows):
        fed = p_rest[j] if j < len(p_rest) else None
        if fed is not None and tuple(fed.shape) == tuple(mine.shape):
            values[path] = torch.from_numpy(np.array(fed, copy=True)).to(mine.dtype)
        else:
            kept.append(_slot_name(path))
    args, kwargs = _replaced(list(t.args), dict(t.kwargs), values)
    return _Feed(args, kwargs, groups, kept, summed)


def _replay_torch(
    module: torch.nn.Module,
    args: list[Any],
    kwargs: dict[str, Any],
    groups: list[list[Path]],
    out_grad: np.ndarray | None,
    buffers: Mapping[str, torch.Tensor],
) -> tuple[np.ndarray | None, list[np.ndarray | None], dict[str, np.ndarray]]:
    """``module`` on these arguments, from these buffers; backward from ``out_grad``: ``(output,
    gradients of the inputs in ``groups`` (one leaf per group), parameter gradients)``. Leaves the
    module's buffers and gradients as they were."""
    saved_buffers = _torch_buffers(module)
    saved_grads = {k: p.grad for k, p in module.named_parameters()}
    own = dict(_slots(args, kwargs))
    leaves = [own[group[0]].detach().clone().requires_grad_(True) for group in groups]
    args, kwargs = _replaced(args, kwargs, {path: leaf for group, leaf in zip(groups, leaves) for path in group})
    try:
        _restore_torch_buffers(module, buffers)
        for p in module.parameters():
            p.grad = None
        with torch.enable_grad():
            y = _first_tensor(module(*args, **kwargs))
            if y is None:
                return None, [], {}
            if out_grad is not None and y.requires_grad:
                y.backward(torch.from_numpy(np.array(out_grad, copy=True)).to(y.dtype))
        grads_in = [copy_of(t.grad) if t.grad is not None else None for t in leaves]
        grads_p = {k: copy_of(p.grad) for k, p in module.named_parameters() if p.grad is not None}
        return copy_of(y), grads_in, grads_p
    finally:
        _restore_torch_buffers(module, saved_buffers)
        for k, p in module.named_parameters():
            p.grad = saved_grads[k]


def _replay_paddle(
    layer: Any, call: Call, out_grad: np.ndarray | None, buffers: Mapping[str, np.ndarray]
) -> tuple[list[np.ndarray | None], dict[str, np.ndarray]]:
    """The Paddle layer's own input gradients (of the inputs a gradient flowed into, in order) and
    parameter gradients for this call alone."""
    paddle = importlib.import_module("paddle")
    saved = _paddle_buffers(layer)
    slots = _slots(call.args, call.kwargs)
    fresh = {path: paddle.to_tensor(x, stop_gradient=path not in call.flows) for path, x in slots}
    args, kwargs = _replaced(list(call.args), dict(call.kwargs), fresh)
    leaves = [fresh[path] for path in call.flows if path in fresh]
    params = [(k, p) for k, p in layer.named_parameters() if not p.stop_gradient]
    saved_grads = {k: copy_of(p.grad) for k, p in params if p.grad is not None}
    try:
        _set_state(layer, buffers, same_shape_only=True)
        for _, p in params:
            p.clear_gradient(False)
        y = _first_tensor(layer(*args, **kwargs))
        if y is not None and out_grad is not None and not y.stop_gradient:
            y.backward(paddle.to_tensor(out_grad))
        grads_in = [copy_of(t.grad) if t.grad is not None else None for t in leaves]
        grads_p = {k: copy_of(p.grad) for k, p in params if p.grad is not None}
        return grads_in, grads_p
    finally:
        _set_state(layer, saved, same_shape_only=True)
        for k, p in params:
            p.clear_gradient(False)
            if k in saved_grads:
                p.grad = paddle.to_tensor(saved_grads[k])


def _noise(
    module: torch.nn.Module,
    feed: _Feed,
    out_grad: np.ndarray | None,
    buffers: Mapping[str, torch.Tensor],
    out32: np.ndarray,
    grads32: list[np.ndarray | None],
    pgrads32: Mapping[str, np.ndarray],
) -> tuple[float | None, list[float | None], dict[str, float]]:
    """The port's own rounding error, relative: the float32 replay against a float64 one."""

    def widen(x: Any) -> Any:
        return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    args, kwargs = _replaced(feed.args, feed.kwargs, {p: widen(v) for p, v in _slots(feed.args, feed.kwargs)})

    try:
        shadow = copy.deepcopy(module).double()
    except (TypeError, RuntimeError, copy.Error):  # a module that cannot be copied or widened: no noise floor
        return None, [None] * len(grads32), {}
    buffers64 = {k: widen(v) for k, v in buffers.items()}
    g64 = None if out_grad is None else out_grad.astype(np.float64)
    try:
        out64, gin64, gp64 = _replay_torch(shadow, args, kwargs, feed.groups, g64, buffers64)
    except (TypeError, RuntimeError, ValueError):  # a layer with float32 hard-wired inside
        return None, [None] * len(grads32), {}
    return (
        _rounding(out32, out64),
        [_rounding(a, b) for a, b in zip(grads32, gin64 + [None] * len(grads32))],
        {k: r for k, v in pgrads32.items() if (r := _rounding(v, gp64.get(k))) is not None},
    )


def _rounding(value: np.ndarray | None, wide: np.ndarray | None) -> float | None:
    """The norm-relative error of a float32 result against its float64 replay (``None``: not comparable)."""
    if value is None or wide is None or value.shape != wide.shape or not _is_float_array(wide):
        return None
    return closeness(wide, value)["rel_l2"]


def _state_checks(pair: Pair, judge: _Judge, before: Mapping[str, torch.Tensor]) -> list[Check]:
    """The layer's own non-trainable state after the step (BatchNorm's running statistics), against
    Paddle's; torch's running variance is corrected for the known difference before judging."""
    t, p = pair.torch, pair.paddle
    own_t = {k: copy_of(b) for k, b in t.layer.named_buffers(recurse=False) if b.is_floating_point()}
    if not own_t:
        return []
    own_p = {k: copy_of(v) for k, v in p.layer.named_parameters(include_sublayers=False) if v.stop_gradient}
    own_p.update((k, copy_of(b)) for k, b in p.layer.named_buffers(include_sublayers=False))
    try:
        ref = Plan.of(t.layer).to_torch(own_p, partial=True, what=f"Paddle {p.key} state")
    except (ValueError, TypeError):
        return []
    out = []
    for k, cand in own_t.items():
        if k not in ref:
            continue
        c = judge.check(t.key, "forward", f"{k} after the step", ref[k], cand, None)
        if not c.ok and k == "running_var" and isinstance(t.layer, torch.nn.modules.batchnorm._BatchNorm):
            c = _batch_norm_variance(t, p, judge, ref[k], cand, c, before.get("running_var"))
        out.append(c)
    return out


def _batch_norm_variance(
    t: Call, p: Call, judge: _Judge, ref: np.ndarray, cand: np.ndarray, c: Check, initial: torch.Tensor | None
) -> Check:
    """Torch updates ``running_var`` with the unbiased batch variance, Paddle with the biased one:
    Paddle's value carried over to torch's rule, ``n / (n - 1)`` times the batch's part."""
    bn = t.layer
    x = p.args[0] if p.args and isinstance(p.args[0], np.ndarray) else None
    if x is None or initial is None or bn.momentum is None:
        return c
    before = initial.double().numpy()
    n = x.size // x.shape[1]
    m = float(bn.momentum)
    batch_biased = (ref.astype(np.float64) - (1 - m) * before) / m
    expected = ((1 - m) * before + m * batch_biased * n / max(n - 1, 1)).astype(ref.dtype)
    fixed = judge.check(t.key, "forward", "running_var after the step (torch's unbiased rule)", expected, cand, None)
    if fixed.ok:
        fixed.reason = (
            "differs from Paddle's as torch's BatchNorm always does (unbiased batch variance, "
            f"n/(n-1) = {n}/{n - 1}): a known difference, not a porting error"
        )
    return fixed


def _chained_noise(
    model: torch.nn.Module, calls: list[Call], inputs: tuple[np.ndarray, ...], kw: Mapping[str, Any], g: np.ndarray
) -> dict[int, tuple[float | None, float | None]]:
    """Per torch call, the relative error that has built up in its output and output gradient:
    the natural run against the same run in float64."""
    try:
        shadow = copy.deepcopy(model).double()
    except (TypeError, RuntimeError, copy.Error):  # a model that cannot be copied or widened: no noise floor
        return {}
    rec = _Recorder(shadow, "torch")

    def wide(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            t = torch.from_numpy(x.astype(np.float64) if _is_float_array(x) else x.copy())
            return t.requires_grad_(_is_float_array(x))
        return x

    try:
        y = _first_tensor(shadow(*[wide(x) for x in inputs], **{k: wide(v) for k, v in kw.items()}))
        if y is not None:
            y.backward(torch.from_numpy(g.astype(np.float64)))
    except (TypeError, RuntimeError, ValueError):  # float32 hard-wired somewhere
        return {}
    finally:
        rec.active = False
        rec.remove()
    if [(c.path, c.index) for c in rec.calls] != [(c.path, c.index) for c in calls]:
        return {}
    return {id(c): (_rounding(c.output, w.output), _rounding(c.grad, w.grad)) for c, w in zip(calls, rec.calls)}


def _relative_name_map(name_map: NameMap | None, torch_path: str, paddle_path: str) -> dict[str, str]:
    """The model-level ``name_map`` as seen from one layer pair: its entries inside the torch layer,
    both sides' names made relative to the two layers (the model's own parameters, such as a
    position table, are renamed at the root)."""
    out = {}
    for k, v in (name_map or {}).items():
        if torch_path and not k.startswith(torch_path + "."):
            continue
        if paddle_path and not v.startswith(paddle_path + "."):
            continue
        out[k[len(torch_path) + 1 if torch_path else 0 :]] = v[len(paddle_path) + 1 if paddle_path else 0 :]
    return out


def _paddle_param_grads_as_torch(
    pair: Pair, grads: Mapping[str, np.ndarray], name_map: NameMap | None
) -> dict[str, np.ndarray]:
    names = _relative_name_map(name_map, pair.torch.path, pair.paddle.path)
    plan = Plan.of(pair.torch.layer, names)
    return plan.to_torch(dict(grads), partial=True, what=f"Paddle {pair.paddle.key} grads")


def _load_checks(
    paddle_model: Any, torch_model: torch.nn.Module, name_map: NameMap | None, judge: _Judge
) -> list[tuple[str, Check]] | None:
    """The port's parameters and buffers right after loading, against Paddle's (converted); ``None``
    when Paddle's names do not convert (a port with other names and no ``name_map``)."""
    try:
        reference = Plan.of(torch_model, name_map).to_torch(
            {k: copy_of(v) for k, v in paddle_model.state_dict().items()}, partial=True
        )
    except ValueError:
        return None
    own = {k: copy_of(v) for k, v in torch_model.state_dict().items()}
    out = []
    for k, ref in reference.items():
        cand = own.get(k)
        if cand is None or not _is_float_array(ref):
            continue
        c = judge.check(k, "load", k, ref, cand, None)
        c.tolerance, c.ok = 0.0, ref.shape == cand.shape and ref.tobytes() == cand.tobytes()
        if not c.ok:
            c.reason = _load_reason(ref, cand)
        out.append((k, c))
    return out


def _load_reason(ref: np.ndarray, cand: np.ndarray) -> str:
    if ref.ndim == 2 and ref.shape == cand.shape[::-1] or (ref.ndim == 2 and np.array_equal(ref.T, cand)):
        return "it holds Paddle's layout untransposed (Paddle's Linear weight is [in, out], torch's [out, in])"
    return "the loaded value is not Paddle's"


def diff_layers(
    paddle_model: Any,
    torch_model: torch.nn.Module,
    inputs: Any,
    *,
    kwargs: Mapping[str, Any] | None = None,
    load: str | Callable[[Any, torch.nn.Module], None] | None = "paddle",
    name_map: NameMap | None = None,
    layer_map: Mapping[str, str] | None = None,
    ignore: Sequence[str] = (),
    ignore_types: Sequence[Any] = (),
    depth: int | None = None,
    single_step: bool = True,
    rtol: float | Mapping[str, float] = DEFAULT_RTOL,
    noise_factor: float = DEFAULT_NOISE_FACTOR,
    grad_output: np.ndarray | None = None,
    seed: int = 0,
) -> LayerDiff:
    """One step of a Paddle model and its torch port, compared layer by layer, forward and backward.

    Args:
        paddle_model: the ``paddle.nn.Layer`` (the reference: Paddle's own forward and backward).
        torch_model: the port.
        inputs: a numpy array, or a tuple of them: the positional inputs of both models.
        kwargs: keyword inputs of both models (numpy arrays or plain values).
        load: how the port gets Paddle's weights: ``"paddle"`` converts Paddle's state with the
            kit's rules (:func:`.paddle_to_torch`), a callable ``load(paddle_model, torch_model)``
            is the port's own loader (checked too), ``None``: the weights are already loaded.
        name_map: torch names -> Paddle names where they differ (as for state conversion).
        layer_map: ``{paddle_sublayer: torch_submodule}`` where layer paths differ.
        ignore: glob patterns of layer paths not to compare (with what is inside them); the
            port's layers containing an ignored one are not judged either (unlike PaDiff), so a
            deliberately different layer does not fail the run.
        ignore_types: classes or class names not to compare (as ``ignore``).
        depth: compare layers at most this deep (the model is 0).
        single_step: feed each torch layer the Paddle layer's input and output gradient
            (default): its activations are Paddle's, its masks and ids Paddle's where they have
            the same shape, the port's own otherwise; a layer whose activations cannot be fed
            (other counts or shapes) is compared as chained, listed in ``not_isolated`` and never
            blamed for the backward. ``False``: compare the two natural runs (errors build up).
        rtol: the norm-relative tolerance, or ``{key: rtol}``: the most specific key applies, a
            layer's path, else the longest glob matching it, else its phase (``"forward"``,
            ``"backward"``), else ``"*"`` (else 1e-6), as for :func:`.compare`'s ``tolerance``.
        noise_factor: a layer diverges only beyond this many times its own float64 rounding error.
        grad_output: the gradient of the model's (first) output to back-propagate; by default a
            seeded standard normal one (the same on both sides).
        seed: the seed of that default gradient.

    Returns:
        A :class:`LayerDiff`: ``.ok``, ``.first`` (load, forward, backward), ``.tree()``,
        ``.summary()``, ``.layers`` (every aligned layer's checks), ``.notes``.

    Both models must be in the same mode (train or eval; ``ValueError`` otherwise) and should be
    free of randomness (dropout 0): the frameworks' random streams differ. Afterwards both models
    hold no gradients and their buffers (BatchNorm statistics) as before; the port keeps the
    weights ``load`` gave it.

    Example::

        result = diff_layers(paddle_model, port, x)
        assert result.ok, result.summary() + "\\n" + result.tree()
    """
    if not isinstance(torch_model, torch.nn.Module):
        raise TypeError(f"torch_model must be a torch.nn.Module, got {type(torch_model).__name__}")
    if not callable(getattr(paddle_model, "named_sublayers", None)):
        raise TypeError(f"paddle_model must be a paddle.nn.Layer, got {type(paddle_model).__name__}")
    modes = ["train" if getattr(m, "training", True) else "eval" for m in (paddle_model, torch_model)]
    if modes[0] != modes[1]:  # BatchNorm and dropout would differ, and every layer after them
        raise ValueError(
            f"paddle_model is in {modes[0]} mode, torch_model in {modes[1]} mode: put both in the same mode"
        )
    if not isinstance(inputs, (np.ndarray, tuple)):
        raise TypeError(f"inputs must be a numpy array or a tuple of numpy arrays, got {type(inputs).__name__}")
    inputs_t = inputs if isinstance(inputs, tuple) else (inputs,)
    for i, x in enumerate(inputs_t):
        if not isinstance(x, np.ndarray):
            raise TypeError(f"inputs[{i}] must be a numpy array, got {type(x).__name__}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise TypeError(f"kwargs must be a dict, got {type(kwargs).__name__}")
    if not (load is None or load == "paddle" or callable(load)):
        raise ValueError(f"load must be 'paddle', a callable or None, got {load!r}")
    _check_name_map(name_map)
    if layer_map is not None and (
        not isinstance(layer_map, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in layer_map.items())
    ):
        raise TypeError("layer_map must be a dict of Paddle layer paths to torch module paths (strings)")
    if layer_map:  # a typo would map nothing, silently
        p_paths = {path for path, _ in paddle_model.named_sublayers(include_self=True)}
        t_paths = {path for path, _ in torch_model.named_modules()}
        for p_path, t_path in layer_map.items():
            if p_path not in p_paths:
                raise ValueError(f"layer_map[{p_path!r}]: the Paddle model has no layer {p_path!r}")
            if t_path not in t_paths:
                raise ValueError(f"layer_map[{p_path!r}]: the torch model has no module {t_path!r}")
    ignore = string_list(ignore, "ignore", "glob patterns")
    ignore_types = layer_types(ignore_types, "ignore_types")
    if depth is not None:
        _checks.at_least("depth", _checks.integer("depth", depth), 0)
    _checks.flag("single_step", single_step)
    if isinstance(rtol, Mapping):
        for key in rtol:
            if not isinstance(key, str):
                raise TypeError(f"rtol keys should be layer paths, globs or phases (strings), but received {key!r}")
    bounds = {f"rtol[{k!r}]": v for k, v in rtol.items()} if isinstance(rtol, Mapping) else {"rtol": rtol}
    for name, value in {**bounds, "noise_factor": noise_factor}.items():
        _checks.at_least(name, _checks.real(name, value), 0)
    if grad_output is not None and not isinstance(grad_output, np.ndarray):
        raise TypeError(f"grad_output must be a numpy array, got {type(grad_output).__name__}")

    paddle = importlib.import_module("paddle")
    judge = _Judge(rtol, float(noise_factor))
    if load == "paddle":
        try:
            state = paddle_to_torch(paddle_model.state_dict(), torch_model, name_map=name_map)
        except ValueError as e:
            raise ValueError(f"load='paddle': {e} (give name_map=, or the port's own loader as load=)") from None
        with torch.no_grad():
            torch_model.load_state_dict(state)
    elif callable(load):
        load(paddle_model, torch_model)
    params = _load_checks(paddle_model, torch_model, name_map, judge)
    load_note = None
    if params is None:
        params = []
        load_note = "the port's weights were not checked after loading: Paddle's names do not convert (give name_map)"

    kw = dict(kwargs or {})
    p_buffers = {path: _paddle_buffers(layer) for path, layer in paddle_model.named_sublayers(include_self=True)}
    t_buffers = {path: _torch_buffers(m) for path, m in torch_model.named_modules()}
    # both natural runs, every layer call recorded
    p_rec = _Recorder(paddle_model, "paddle")
    t_rec = _Recorder(torch_model, "torch")
    try:

        def p_in(x: Any) -> Any:
            return paddle.to_tensor(x, stop_gradient=not _is_float_array(x)) if isinstance(x, np.ndarray) else x

        def t_in(x: Any) -> Any:
            if isinstance(x, np.ndarray):
                return torch.from_numpy(np.array(x, copy=True)).requires_grad_(_is_float_array(x))
            return x

        p_out = _first_tensor(paddle_model(*[p_in(x) for x in inputs_t], **{k: p_in(v) for k, v in kw.items()}))
        if p_out is None:
            raise ValueError("the Paddle model returned no tensor")
        g = grad_output
        if g is not None and tuple(g.shape) != tuple(p_out.shape):  # before Paddle's backward asserts
            raise ValueError(
                f"grad_output has shape {list(g.shape)}, but the models' (first) output has shape {list(p_out.shape)}"
            )
        if g is None:
            g = np.random.default_rng(seed).standard_normal(tuple(p_out.shape)).astype(copy_of(p_out).dtype)
        p_out.backward(paddle.to_tensor(g))
        t_out = _first_tensor(torch_model(*[t_in(x) for x in inputs_t], **{k: t_in(v) for k, v in kw.items()}))
        if t_out is None:
            raise ValueError("the torch model returned no tensor")
        if tuple(t_out.shape) != tuple(g.shape):
            raise ValueError(f"the models' outputs differ in shape: Paddle {list(g.shape)}, torch {list(t_out.shape)}")
        t_out.backward(torch.from_numpy(g).to(t_out.dtype))
        p_rec.active = t_rec.active = False
        pairs, notes = align(
            p_rec.calls,
            t_rec.calls,
            layer_map=layer_map,
            name_map=name_map,
            ignore=ignore,
            ignore_types=ignore_types,
            depth=depth,
        )
        chained_noise = {} if single_step else _chained_noise(torch_model, t_rec.calls, inputs_t, kw, g)
        ancestors = _ancestors(pairs, ignored_paths(t_rec.calls, ignore, ignore_types))
        results = [
            _unjudged(pair, single_step, ancestors[pair.torch.key])
            if pair.torch.key in ancestors
            else _diff_pair(
                pair,
                judge,
                single_step,
                p_buffers.get(pair.paddle.path, {}),
                t_buffers.get(pair.torch.path, {}),
                chained_noise.get(id(pair.torch)),
                name_map,
            )
            for pair in pairs
        ]
        if load_note:
            notes.insert(0, load_note)
    finally:
        p_rec.remove()
        t_rec.remove()
        # the step leaves no trace in either model: buffers (BatchNorm statistics) back, no gradients
        _restore_torch_buffers(torch_model, t_buffers.get("", {}))
        _set_state(paddle_model, p_buffers.get("", {}), same_shape_only=True)
        for p in torch_model.parameters():
            p.grad = None
        for _, p in paddle_model.named_parameters():
            p.clear_gradient(False)
    first_load = next(
        (
            LayerDivergence("load", k.rpartition(".")[0] or "(model)", c, remark="the port's weights are not Paddle's")
            for k, c in params
            if not c.ok
        ),
        None,
    )
    return LayerDiff(
        single_step,
        results,
        params,
        first_load,
        _first_forward(results, t_rec.calls),
        _first_backward(results),
        notes,
        torch_model,
    )


def _diff_pair(
    pair: Pair,
    judge: _Judge,
    single_step: bool,
    p_buffers: Mapping[str, np.ndarray],
    t_buffers: Mapping[str, torch.Tensor],
    chained_noise: tuple[float | None, float | None] | None,
    name_map: NameMap | None = None,
) -> LayerResult:
    p, t = pair.paddle, pair.torch
    res = LayerResult(t.key, p.key, t.kind, pair.how, t.site)
    if t.index == 0:
        res.forward += _state_checks(pair, judge, t_buffers)
    if p.output is None or t.output is None:
        res.remark = "returns no tensor on one side: not compared"
        return res
    feed = _fed_args(t, p) if single_step else None
    if not isinstance(feed, _Feed):
        if feed is not None:  # single-step mode, and this layer could not be isolated
            res.isolated = False
            res.remark = f"not isolated ({feed}): compared as chained, its backward never blamed"
        n_out, n_grad = chained_noise or (None, None)
        res.forward.append(judge.check(t.key, "forward", "output", p.output, t.output, n_out))
        if p.grad is not None and t.grad is not None:
            res.backward.append(judge.check(t.key, "backward", "output grad", p.grad, t.grad, n_grad))
        return res
    if feed.kept:
        res.remark = f"fed Paddle's activations, the port's own {', '.join(feed.kept)} (another form than Paddle's)"
    out, gin, gp = _replay_torch(t.layer, feed.args, feed.kwargs, feed.groups, p.grad, t_buffers)
    if out is None:
        res.remark = "returns no tensor when replayed: not compared"
        return res
    pgin, pgp = _replay_paddle(p.layer, p, p.grad, p_buffers)
    grads = [g for g in pgin if g is not None]
    if feed.summed and grads and len(grads) == len(pgin):
        pgin = [np.sum(grads, axis=0, dtype=np.float64).astype(grads[0].dtype)]
    n_out, n_in, n_p = _noise(t.layer, feed, p.grad, t_buffers, out, gin, gp)
    res.forward.append(judge.check(t.key, "forward", "output", p.output, out, n_out))
    if p.grad is None:
        return res
    for i, (a, b) in enumerate(zip(pgin, gin)):
        if a is not None and b is not None:
            res.backward.append(
                judge.check(t.key, "backward", f"input grad {i}", a, b, n_in[i] if i < len(n_in) else None)
            )
    try:
        ref_p = _paddle_param_grads_as_torch(pair, pgp, name_map)
    except (ValueError, TypeError) as e:
        ref_p = {}
        res.remark = (res.remark + "; " if res.remark else "") + f"parameter gradients not compared: {e}"
    for k, ref in ref_p.items():
        if k in gp:
            res.backward.append(judge.check(t.key, "backward", f"grad {k}", ref, gp[k], n_p.get(k)))
    missed = sorted(k for k in gp if k not in ref_p)
    if missed and ref_p:  # never silently: a gradient the port has and Paddle's names did not give
        res.remark = (res.remark + "; " if res.remark else "") + (
            f"gradients of {', '.join(missed)} not compared: no Paddle counterpart by name (give name_map)"
        )
    return res


def _ancestors(pairs: list[Pair], ignored: Sequence[str]) -> dict[str, list[str]]:
    """The torch keys of the pairs containing an ignored layer the port calls, each with those
    layers. Such a layer is not judged: its difference would be the ignored layer's (a deliberately
    different activation). PaDiff's ``ignore`` leaves such parents compared; here a run whose only
    difference is an ignored layer passes."""
    paths = sorted(set(ignored))
    out: dict[str, list[str]] = {}
    for pair in pairs:
        own = pair.torch.key.split("#")[0]
        inside = [p for p in paths if p != own and _inside(p, own)]
        if inside:
            out[pair.torch.key] = inside
    return out


def _unjudged(pair: Pair, single_step: bool, inside: list[str]) -> LayerResult:
    """The result of a layer containing ignored ones: no checks, never compared (not replayed);
    ``isolated`` as :func:`_diff_pair` would have found it."""
    p, t = pair.paddle, pair.torch
    res = LayerResult(
        t.key,
        p.key,
        t.kind,
        pair.how,
        t.site,
        judged=False,
        remark=f"not judged: it contains ignored layers ({', '.join(inside)})",
    )
    if single_step and p.output is not None and t.output is not None:
        res.isolated = isinstance(_fed_args(t, p), _Feed)
    return res


def _inside(child: str, parent: str) -> bool:
    return parent == "(model)" or child.startswith(parent + ".")


def _first_forward(results: list[LayerResult], calls: list[Call]) -> LayerDivergence | None:
    compared = {r.key for r in results}
    for r in results:  # torch call order: children complete before their parents
        if not r.forward_ok:
            check = next(c for c in r.forward if not c.ok)
            below = [x for x in results if x is not r and _inside(x.key, r.key)]
            remark = None
            if below and all(x.forward_ok for x in below):
                unseen = [c.key for c in calls if c.key not in compared and _inside(c.key, r.key)]
                remark = "its sublayers agree: the difference is in its own forward code" + (
                    f" or in sublayers not compared ({', '.join(unseen)})" if unseen else ""
                )
            return LayerDivergence("forward", r.key, check, r.site, remark)
    return None


def _first_backward(results: list[LayerResult]) -> LayerDivergence | None:
    # a layer single-step mode could not isolate is never blamed: its gradients carry the error of
    # every layer after it (the summary lists it apart)
    bad = [r for r in results if not r.backward_ok and r.isolated]
    # the deepest ones (no diverging layer inside them), the last to run forward runs first backward
    leaves = [r for r in bad if not any(x is not r and _inside(x.key, r.key) for x in bad)]
    if not leaves:
        return None
    r = leaves[-1]
    check = next(c for c in r.backward if not c.ok)
    return LayerDivergence("backward", r.key, check, r.site)
