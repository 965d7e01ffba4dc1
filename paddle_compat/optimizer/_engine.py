"""The update engine: which form of an optimizer's formula each parameter takes, and the calls.

Mechanics only; the formulas are the optimizers'. An optimizer describes its update once in torch
form (``_init_state`` and ``_kernel``, per tensor: required) and may add speed-ups: rows for the
compiled CPU kernels (``_compiled_row`` + ``_compiled_call``, ``paddle_compat._native``) and calls
of the GPU multi-tensor kernels (``_compiled_row`` + ``_multi_tensor_call``, ``_multi_tensor``).
The engine sorts a group's parameters into those forms, keeps the result as a plan while nothing it
depends on changes, runs the kernels, and hands the rest to ``_kernel`` one tensor at a time.
``OptimizerForms`` is the whole of what it calls on an optimizer.

Each optimizer owns one ``Engine`` (made in its ``__init__``), which holds its plans and the scratch
buffers of the torch forms; a copy or pickle of the optimizer gets a fresh, empty one.
"""

from __future__ import annotations

import math
import operator
from array import array
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from itertools import chain, repeat
from typing import Any, Protocol, TypeVar

import torch
from torch import Tensor

from .. import _devices, _native, _numerics
from ..nn.clip import ParamsGrads
from . import _multi_tensor

__all__ = [
    "Engine", "Item", "OptimizerForms", "attr_ratio", "cpu_kernels_take", "cpu_row", "defines", "gpu_row",
    "kernels_take", "optional_form", "place", "same_layout",
]

# (param, grad, state, master weight or None): one parameter's share of a step
Item = tuple[Tensor, Tensor, dict[str, Any], Tensor | None]


class OptimizerForms(Protocol):
    """What the engine calls on an optimizer: the whole contract between the two (the base class,
    ``optimizer.Optimizer``, has each member; its subclasses fill in the forms).

    - The state: ``_prepare_state`` gives a parameter's state, made by ``_init_state`` at its first
      update, and its master weight.
    - The torch form (required): ``_regularize``, then ``_kernel``; the reference of the others.
    - The compiled CPU form (optional): ``_compiled_row`` adds a tensor's row to a batch (its
      gradient as ``_grad_for_kernel`` hands it over), ``_compiled_call`` runs the kernel on it.
    - The GPU form (optional): ``_compiled_row`` with ``gpu``, then ``_multi_tensor_call`` per launch.
    - The rate: ``_group_lr`` (a group's), ``_param_lr`` (a parameter's), ``_row_rate`` (the
      numbers a kept row takes from a new rate).

    An optional form the base class keeps as its stub (``optional_form``) is not used. The torch
    forms take their scratch tensors from ``Engine.scratch`` (``Optimizer._buffer``).
    """

    @property
    def state(self) -> Mapping[Tensor, Any]: ...

    @property
    def param_groups(self) -> list[dict[str, Any]]: ...

    @property
    def _dtype(self) -> torch.dtype | None: ...  # the first parameter's (Paddle's LR tensor's)

    @property
    def _multi_precision(self) -> bool: ...

    # the state
    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None: ...

    def _prepare_state(self, p: Tensor, group: dict[str, Any]) -> tuple[dict[str, Any], Tensor | None]: ...

    # the torch form
    def _regularize(self, p: Tensor, g: Tensor, group: dict[str, Any]) -> Tensor: ...

    def _kernel(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float
    ) -> Tensor: ...

    # the compiled CPU and GPU forms
    def _compiled_row(
        self, item: Item, group: dict[str, Any], lr: float, batch: _native.Batch, gpu: bool
    ) -> bool | None: ...

    def _grad_for_kernel(self, p: Tensor, g: Tensor, group: dict[str, Any]) -> tuple[Tensor, float, bool]: ...

    def _compiled_call(self, kern: _native.Kernels, batch: _native.Batch, group: dict[str, Any]) -> None: ...

    def _multi_tensor_call(
        self, kern: _multi_tensor.Kernels, launch: _multi_tensor.Launch, group: dict[str, Any],
        found_inf: Tensor | None,
    ) -> None: ...

    # the rate
    def _group_lr(self, group: dict[str, Any]) -> float: ...

    def _param_lr(self, p: Tensor, group: dict[str, Any], group_lr: float) -> float: ...

    def _row_rate(
        self, p: Tensor, value: Tensor, group: dict[str, Any], lr: float, gpu: bool
    ) -> tuple[float, float | None]: ...


def attr_ratio(p: Tensor) -> float:
    """``p.optimize_attr["learning_rate"]`` (Paddle's ``ParamAttr(learning_rate=...)``), else 1."""
    attr = getattr(p, "optimize_attr", None)
    if not attr:
        return 1.0
    return float(attr.get("learning_rate", 1.0))


def kernels_take(value: Tensor, grad: Tensor, lr: float, gpu: bool, *tensors: Tensor) -> bool:
    """Whether the compiled CPU kernels (the GPU kernels with ``gpu``) take ``value`` updated from
    ``grad`` at rate ``lr``, with ``tensors`` beside it: all dense, of ``value``'s size, on its
    device (the CPU for the compiled kernels), in dtypes the kernels compute with."""
    if not all(_devices.addressable(t) for t in (value, grad, *tensors)):
        return False  # the torch forms take it
    if not _dense_like(value, grad, *tensors):
        return False
    if gpu:
        return _gpu_dtypes(value, grad, lr)
    return value.is_cpu and _native_dtypes(value, grad)


def cpu_kernels_take(
    value: Tensor, grad: Tensor, param: Tensor, states: tuple[Tensor, ...], powers: tuple[Tensor, ...] = ()
) -> bool:
    """Whether the compiled CPU kernels take ``value`` updated from ``grad`` (``param`` beside it)
    with its parameter-shaped ``states`` (one dtype: float64 beside a float64 value, else float32,
    bfloat16 or float16) and its one-element ``powers`` on the CPU (in the compute dtype)."""
    compute = torch.float32 if value.dtype in (torch.float16, torch.bfloat16) else value.dtype
    if any(s.dtype != states[0].dtype for s in states):
        return False
    if states and (states[0].dtype == torch.float64) != (compute == torch.float64):
        return False
    for t in powers:
        if not (_devices.addressable(t) and t.is_cpu and t.numel() == 1 and t.dtype == compute):
            return False
    return kernels_take(value, grad, 0.0, False, param, *states)


def cpu_row(
    opt: OptimizerForms, item: Item, group: dict[str, Any], lr: float, batch: _native.Batch, states: tuple[Tensor, ...],
    powers: tuple[Tensor, ...] = (), *, decay: float = math.nan, checked: tuple[Tensor, ...] | None = None,
) -> bool | None:
    """A ``_compiled_row`` for the compiled CPU kernels: ``item``'s row with its ``states`` and
    ``powers`` (``checked``: the states ``cpu_kernels_take`` checks instead, with no powers), its
    gradient as ``_grad_for_kernel`` hands it over. ``None`` where the kernels cannot take it, else
    whether the row may be kept for the next step."""
    p, g, _, master = item
    value = master if master is not None else p
    taken = cpu_kernels_take(value, g, p, states, powers) if checked is None else cpu_kernels_take(value, g, p, checked)
    if not taken:
        return None
    g, l2, fresh = opt._grad_for_kernel(p, g, group)
    batch.add(value, g, p if master is not None else None, states, powers, lr=lr, decay=decay, l2=l2)
    return not fresh


def gpu_row(
    opt: OptimizerForms, item: Item, group: dict[str, Any], lr: float, batch: _native.Batch, states: tuple[Tensor, ...],
    powers: tuple[str, ...] = (), *, decay: float = math.nan, checked: tuple[Tensor, ...] | None = None,
    power_dtype: torch.dtype = torch.float32,
) -> bool | None:
    """A ``_compiled_row`` for the GPU kernels (``cpu_row``'s twin): ``item``'s row with its
    ``states`` (one dtype, float32, bfloat16 or float16: the kernels compute in float32; ``checked``:
    the states to check instead) and the one-element ``power_dtype`` state tensors named ``powers``,
    moved to the device for good (a step then reads nothing on the host). ``None`` where the
    kernels cannot take it, else whether the row may be kept for the next step."""
    p, g, state, master = item
    value = master if master is not None else p
    check = states if checked is None else checked
    if any(s.dtype != check[0].dtype or s.dtype == torch.float64 for s in check):
        return None
    pows = tuple(state[key] for key in powers)
    for t in pows:
        if not (_devices.addressable(t) and t.numel() == 1 and t.dtype == power_dtype):
            return None
    if not kernels_take(value, g, lr, True, p, *check):
        return None
    pows = tuple(_devices.copy_to(t, value.device) for t in pows)
    state.update(zip(powers, pows))
    g, l2, fresh = opt._grad_for_kernel(p, g, group)
    batch.add(value, g, p if master is not None else None, states, pows, lr=lr, decay=decay, l2=l2)
    return not fresh


def _native_dtypes(value: Tensor, grad: Tensor) -> bool:
    """Whether the compiled kernels take this pair of dtypes: float64 with float64, else a
    float32/bfloat16/float16 value with a float32/bfloat16/float16 gradient."""
    if value.dtype == torch.float64:
        return grad.dtype == torch.float64
    return value.dtype in _native.DTYPE and grad.dtype in (torch.float32, torch.bfloat16, torch.float16)


def _gpu_dtypes(value: Tensor, grad: Tensor, lr: float) -> bool:
    """Whether the GPU kernels take this pair and rate: they compute in float32 (a float32 value,
    the parameter or its master weight), on a float32/bfloat16/float16 gradient, with a float32 rate."""
    return (
        value.dtype == torch.float32
        and grad.dtype in (torch.float32, torch.bfloat16, torch.float16)
        and _numerics.round_f32(lr) == lr
    )


def _dense_like(value: Tensor, *tensors: Tensor) -> bool:
    """Whether the tensors suit the kernels: contiguous, on ``value``'s device, of its size."""
    device, n = value.device, value.numel()
    if not value.is_contiguous():
        return False
    for t in tensors:
        if not (t.is_contiguous() and t.numel() == n and t.device == device):
            return False
    return True


def same_layout(*tensors: Tensor) -> bool:
    """Whether the tensors share one memory layout (the usual case: autograd gives a gradient
    its parameter's strides, and the state is created like the parameter).

    Only then do in-place and ``out=`` forms walk the elements exactly as the out-of-place
    expressions do. The values never depend on it, but where fp16/bf16 arithmetic meets a NaN,
    its bit pattern does (see ``Engine.scratch``), so the torch forms keep the plain expressions
    otherwise.
    """
    first = tensors[0]
    dense = first.is_contiguous() or torch.empty_like(first, device="meta").stride() == first.stride()
    return dense and all(t.stride() == first.stride() for t in tensors[1:])


# The per-step checks of a kept plan (``_Plan.holds``) run at every step, for every parameter: each
# is one pass of a C-level ``map`` over a flat list, compared with ``==`` or ``is``, never a loop of
# Python statements per parameter.
_param = operator.itemgetter(0)
_grad = operator.itemgetter(1)
_dtype = operator.attrgetter("dtype")
_shape = operator.attrgetter("shape")
_is = operator.is_
_END = object()  # closes a plan's sequence of state values: one of another length differs at its end
# the state mappings a plan may compare whole (keys and values, in order) instead of looking up each
# parameter (torch hashes a tensor in Python): a subclass of the user's may find its values elsewhere
_PLAIN_STATES = (dict, defaultdict)


def _addresses(tensors: Sequence[Tensor]) -> list[int]:
    """The tensors' addresses (``_devices.address``)."""
    try:
        return list(map(Tensor.data_ptr, tensors))
    except RuntimeError:  # a tensor with no pointer to give: see _devices.address
        return list(map(_devices.address, tensors))


def _pointers(values: Sequence[Any]) -> list[int]:
    """The addresses of the state's values (``_devices.address``; 0 for a value not a tensor): the
    same tensor object given other memory (``.data = ...``) is another tensor to the kernels."""
    try:
        return list(map(Tensor.data_ptr, values))
    except (RuntimeError, TypeError):  # a tensor with no pointer to give, or a value not a tensor
        return [_devices.address(v) if isinstance(v, Tensor) else 0 for v in values]


def _ratios(params: Sequence[Tensor]) -> list[float] | None:
    """The parameters' ``attr_ratio``; ``None`` (all 1) when none has an ``optimize_attr``, the
    usual case, told by one pass that reads the attribute."""
    attrs = map(getattr, params, repeat("optimize_attr"), repeat(None))
    if all(map(_is, attrs, repeat(None))):
        return None
    return list(map(attr_ratio, params))


def _same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    """Whether two sequences hold the same objects (``is``: tensors have no usable ``==``)."""
    return len(a) == len(b) and all(map(_is, a, b))


def _state_dicts(state: Any, params: Sequence[Tensor]) -> list[Any] | None:
    """Each parameter's state in ``state`` (``None`` where one is missing from a mapping of the
    user's). Indexing, not ``get``: the view of the state on local shards finds a plain parameter's
    in the real state; an empty dict a ``defaultdict`` adds for a cleared parameter is what the
    step makes anyway."""
    try:
        return list(map(state.__getitem__, params))
    except (TypeError, KeyError):
        return None


class _Plan:
    """The kernels' share of a group's step (see ``Engine.update``), and what it was made for."""

    __slots__ = (
        "compiled", "contiguous", "dicts", "dtypes", "ends", "grads", "head", "kernels", "lr", "members",
        "multi_tensor", "param_ptrs", "params", "pointers", "rates", "ratios", "rest", "reusable", "seen",
        "shapes", "slots", "state", "values",
    )

    def __init__(
        self, head: tuple[Any, ...], state: Any, lr: float, kernels: dict[Any, Any], compiled: Any,
        multi_tensor: dict[Any, Any], rest: list[int], slots: list[Any], reusable: bool, rates: dict[Any, _Rates],
    ) -> None:
        self.head, self.state, self.lr, self.kernels, self.reusable = head, state, lr, kernels, reusable
        self.compiled, self.multi_tensor, self.rest = compiled, multi_tensor, rest
        self.slots = slots  # each pair's (batch, row) or None
        self.rates = rates
        # each batch with the pairs of its rows, in order (``_members``)
        self.members = _members(slots)
        for kind in rates.values():
            kind.spans = _spans(kind.rows)
        # what the rows were made for (``remember``): the parameters (objects, addresses), their
        # gradients' dtypes, layouts and shapes, rate ratios; the states (each parameter's dict,
        # their values: objects, addresses); the gradients' addresses the rows point at
        self.params: list[Tensor] = []
        self.param_ptrs: list[int] = []
        self.dtypes: list[torch.dtype] = []
        self.contiguous: list[bool] = []
        self.shapes: list[torch.Size] = []
        self.ratios: list[float] | None = None
        self.dicts: list[Any] | None = None
        self.values: tuple[Any, ...] = ()
        self.ends: tuple[Any, ...] = ()  # the values, then _END
        self.pointers: list[int] = []
        self.seen: tuple[tuple[Any, ...], tuple[Any, ...]] | None = None  # the state mapping's keys and values
        self.grads: list[int] = []

    def remember(self, opt: OptimizerForms, params: list[Tensor], grads: list[Tensor]) -> None:
        """Record what the rows were made for (``holds``), once the states are made."""
        self.params, self.param_ptrs = params, _addresses(params)
        self.dtypes, self.contiguous, self.shapes = _grad_layout(grads)
        self.ratios = _ratios(params)
        dicts = _state_dicts(opt.state, params)
        if dicts is not None and all(map(isinstance, dicts, repeat(dict))):
            self.dicts = dicts
            self.values = tuple(chain.from_iterable(map(dict.values, dicts)))
            self.ends = (*self.values, _END)
            self.pointers = _pointers(self.values)
            self._see(opt.state)
        self.grads = _addresses(grads)

    def holds(self, opt: OptimizerForms, head: tuple[Any, ...], params: list[Tensor], grads: list[Tensor]) -> bool:
        """Whether the rows are made for this step: the same group options (``head``), parameters,
        their addresses, rate ratios, gradients' dtypes, layouts and shapes, and states (``_states_hold``)."""
        return (
            head == self.head and _same(params, self.params) and _addresses(params) == self.param_ptrs
            and _ratios(params) == self.ratios and _grad_layout(grads) == (self.dtypes, self.contiguous, self.shapes)
            and self._states_hold(opt.state, params)
        )

    def _states_hold(self, state: Any, params: list[Tensor]) -> bool:
        """Whether the rows point at the tensors of the parameters' states: the same mapping, the
        same dict for each parameter, the same values in each (a tensor the user puts in place of
        another, a reset, ``state.clear()``, ``load_state_dict`` make a new plan), each at the same
        address (one given other memory, an offload, too)."""
        if state is not self.state or self.dicts is None:
            return False
        if not self._seen(state):
            dicts = _state_dicts(state, params)
            if dicts is None or not _same(dicts, self.dicts):
                return False
            self._see(state)
        if not all(map(_is, chain(chain.from_iterable(map(dict.values, self.dicts)), (_END,)), self.ends)):
            return False
        return _pointers(self.values) == self.pointers

    def _seen(self, state: Any) -> bool:
        """Whether ``state`` holds the keys and values it held when ``_see`` last looked: then each
        parameter's dict is the one found there (looking each up hashes a tensor in Python)."""
        seen = self.seen
        return (
            seen is not None and len(state) == len(seen[0]) and all(map(_is, state, seen[0]))
            and all(map(_is, state.values(), seen[1]))
        )

    def _see(self, state: Any) -> None:
        """Keep the keys and values of ``state``, just found to hold the plan's dicts, for ``_seen``:
        a plain dict not much larger than the group's share (each group's check reads all of it)."""
        if type(state) in _PLAIN_STATES and len(state) <= 4 * len(self.params) + 64:
            self.seen = (tuple(state), tuple(state.values()))
        else:
            self.seen = None

    def point_at(self, grads: list[Tensor]) -> None:
        """Point the rows at these gradients (same dtypes, layouts and shapes: ``holds`` says so)."""
        addresses = _addresses(grads)
        if addresses == self.grads:
            return
        if self.members is not None:  # a slice of each batch's rows
            for batch, members in self.members:
                column = addresses if members is None else map(addresses.__getitem__, members)
                batch.rows[_native.S_G :: _native.ROW] = array("q", column)
                _multi_tensor.rows_moved(batch)  # the GPU tables rewrite their gradient offsets
        else:
            for address, slot in zip(addresses, self.slots):
                if slot is not None:
                    batch, row = slot
                    batch.rows[row * _native.ROW + _native.S_G] = address
                    _multi_tensor.rows_moved(batch)
        self.grads = addresses

    def set_rate(self, opt: OptimizerForms, group: dict[str, Any], lr: float) -> bool:
        """Write the rows' numbers for the group's new rate ``lr`` (``Optimizer._row_rate``, once per
        kind of row); ``False`` where a GPU row cannot take it (not a float32 value: a new plan)."""
        for rates in self.rates.values():
            rate = opt._param_lr(rates.param, group, lr)
            rate, decay = opt._row_rate(rates.param, rates.value, group, rate, rates.gpu)
            if rates.gpu and _numerics.round_f32(rate) != rate:
                return False
            rates.write(rate, decay)
        self.lr = lr
        return True

    def release_grads(self) -> None:
        """Drop the batches' references to the gradients (a kept plan must not keep them alive)."""
        if self.compiled is not None:
            self.compiled.release_grads()
        for batch, _ in self.multi_tensor.values():
            batch.release_grads()


def _grad_layout(grads: list[Tensor]) -> tuple[list[torch.dtype], list[bool], list[torch.Size]]:
    """The gradients' dtypes, contiguity and shapes. A kernel reads a row's ``numel`` elements at
    its gradient's address; a gradient's shape and device are its parameter's (torch checks what is
    assigned to ``.grad``, ``Optimizer._work`` a ``main_grad``), so a parameter moved to another
    device has another address; the shape is kept because a view of the same memory
    (``p.data = p.data[:n]``) has the same address. (A device is left out: reading it makes an
    object per tensor.)"""
    return list(map(_dtype, grads)), list(map(Tensor.is_contiguous, grads)), list(map(_shape, grads))


def _members(slots: list[tuple[_native.Batch, int] | None]) -> list[tuple[_native.Batch, list[int] | None]] | None:
    """Each batch of ``slots`` with the pairs of its rows in row order (``None``: every pair, in
    order); ``None`` where a batch's rows are not one per pair in the pairs' order (``_Plan.point_at``
    then writes each slot alone)."""
    found: dict[int, tuple[_native.Batch, list[int], list[int]]] = {}
    for i, slot in enumerate(slots):
        if slot is not None:
            batch, row = slot
            entry = found.setdefault(id(batch), (batch, [], []))
            entry[1].append(i)
            entry[2].append(row)
    members: list[tuple[_native.Batch, list[int] | None]] = []
    for batch, pairs, rows in found.values():
        if rows != list(range(len(batch))):
            return None
        members.append((batch, None if len(pairs) == len(slots) else pairs))
    return members


def _spans(rows: list[tuple[_native.Batch, int]]) -> list[tuple[_native.Batch, list[int] | None]]:
    """The rows of one kind (``_Rates``) per batch: ``None`` where they are all of its rows."""
    found: dict[int, tuple[_native.Batch, list[int]]] = {}
    for batch, row in rows:
        found.setdefault(id(batch), (batch, []))[1].append(row)
    return [(batch, None if sorted(own) == list(range(len(batch))) else own) for batch, own in found.values()]


class _Rates:
    """Rows whose numbers follow the rate alike (``_Plan.set_rate``): one parameter and value of
    theirs stand for all (same rate ratio, value dtype, kernels)."""

    __slots__ = ("gpu", "param", "rows", "spans", "value")

    def __init__(self, param: Tensor, value: Tensor, gpu: bool) -> None:
        self.param, self.value, self.gpu = param, value, gpu
        self.rows: list[tuple[_native.Batch, int]] = []
        self.spans: list[tuple[_native.Batch, list[int] | None]] = []  # the rows per batch (``_spans``)

    def write(self, rate: float, decay: float | None) -> None:
        """Write ``rate`` (and ``decay`` unless ``None``) into the rows: one slice of a batch's
        numbers where the rows are all of its rows."""
        for batch, rows in self.spans:
            if rows is None:
                n = len(batch)
                batch.per[_native.P_LR :: _native.PER] = array("d", (rate,)) * n
                if decay is not None:
                    batch.per[_native.P_DECAY :: _native.PER] = array("d", (decay,)) * n
            else:
                for row in rows:
                    batch.per[row * _native.PER + _native.P_LR] = rate
                    if decay is not None:
                        batch.per[row * _native.PER + _native.P_DECAY] = decay
            if self.gpu:
                _multi_tensor.rates_changed(batch)  # the GPU tables rewrite their rate columns


_F = TypeVar("_F", bound=Callable[..., Any])


def optional_form(stub: _F) -> _F:
    """Mark the base class's stub of an optional hook: an optimizer that keeps it lacks that form."""
    stub._paddle_compat_stub = True  # type: ignore[attr-defined]
    return stub


def defines(cls: type, *hooks: str) -> bool:
    """Whether optimizer class ``cls`` defines each of the optional ``hooks`` (see ``optional_form``)."""
    return not any(getattr(getattr(cls, hook), "_paddle_compat_stub", False) for hook in hooks)


def place(opt: OptimizerForms, group: dict[str, Any], p: Tensor) -> str:
    """The parameter, for an error: its place in the optimizer and its name if it has one."""
    index = next(i for i, q in enumerate(group["params"]) if q is p)
    where = f"parameter {index} of parameter group {opt.param_groups.index(group)}"
    names = group.get("param_names")
    name = names[index] if names else getattr(p, "name", None)
    return f"{where}{f' ({name!r})' if isinstance(name, str) else ''}"


def _describe(opt: OptimizerForms, group: dict[str, Any], p: Tensor, g: Tensor) -> str:
    """The parameter, for an error: ``place``, and its kind."""
    kinds = {f"{type(t).__name__} ({t.layout}, {t.device})" for t in (p, g)}
    return f"{place(opt, group, p)}, a {' with a '.join(sorted(kinds))}"


class Engine:
    """One optimizer's plans (per parameter group), scratch buffers (per slot, dtype, device) and
    view of its state on local shards."""

    def __init__(self) -> None:
        self._plans: dict[int, _Plan | None] = {}
        self._scratch: dict[tuple[Any, ...], Tensor] = {}
        self._views: dict[tuple[Any, ...], Tensor] = {}
        self.shard_view: Any = None  # the state as DTensor groups' steps see it (``_sharded.local_shards``)

    def __reduce__(self) -> tuple[type[Engine], tuple[()]]:
        # caches: a copy starts empty (plans hold addresses of the original's tensors)
        return (Engine, ())

    def update(self, opt: OptimizerForms, group: dict[str, Any], pairs: ParamsGrads, found_inf: Tensor | None) -> None:
        """Update the parameters of ``pairs`` (clipped already) with ``opt``'s formulas: the kernels'
        rows, then the rest per tensor (regularization, ``_kernel``). ``found_inf``: a GradScaler's
        flag on a GPU, tested by the GPU kernels on the device (read here only for the rest)."""
        # What the step hands to the kernels is kept as a plan while nothing it depends on changes:
        # the group's options, the parameters (the objects and their addresses), the gradients'
        # dtypes, layouts and shapes, the rate ratios, master weights, the kernels' availability,
        # and the states (the whole, replaced by load_state_dict; each tensor in it, object and
        # address): ``_Plan.holds``. The rate is not among them: a scheduler moves it at every
        # step, and a new rate only rewrites the rows' numbers (``_Plan.set_rate``). A steady step
        # then only checks that, points the rows at the gradients (new tensors after
        # zero_grad(set_to_none=True)) and calls the kernels: every line here runs at each step, on
        # caches a forward and backward pass have just emptied.
        head = (
            [v for k, v in group.items() if k != "params" and k != "lr"],
            opt._dtype,
            opt._multi_precision,
            found_inf is not None,
            _native.enabled(),
        )
        params, grads = list(map(_param, pairs)), list(map(_grad, pairs))
        lr = opt._group_lr(group)
        plans = self._plans
        plan = plans.get(id(group))
        if (
            plan is None or not plan.holds(opt, head, params, grads)
            or (plan.lr != lr and not plan.set_rate(opt, group, lr))
        ):
            plan = self._plan(opt, head, group, pairs, found_inf)
            plan.remember(opt, params, grads)
            plans[id(group)] = plan if plan.reusable else None
        else:
            plan.point_at(grads)
        rest = plan.rest
        if plan.compiled is not None:
            opt._compiled_call(plan.kernels[None], plan.compiled, group)
        if plan.multi_tensor and not self._run_multi_tensor(opt, plan, group, found_inf):
            plans.pop(id(group), None)  # the GPU kernels failed to build: per tensor from now on
            rest = rest + [i for _, indices in plan.multi_tensor.values() for i in indices]
        plan.release_grads()
        if rest and found_inf is not None and bool(found_inf.item()):  # a host sync, only on this path
            return
        for i in sorted(rest):
            p, g = pairs[i]
            state, master = opt._prepare_state(p, group)
            try:
                g = opt._regularize(p, g, group)
                rate = opt._param_lr(p, group, lr)
                new = opt._kernel(p, master if master is not None else p.detach(), g, state, group, rate)
            except Exception as error:
                if _devices.addressable(p) and _devices.addressable(g):
                    raise
                raise TypeError(f"{type(opt).__name__} cannot update {_describe(opt, group, p, g)}: {error}") from error
            # When the kernel updated its input in place, new *is* the master weight, or a view of
            # p's own data: copy_ then returns at once.
            if master is not None:
                master.copy_(new)
            p.copy_(new)  # rounds to p's dtype, to nearest even as Paddle's casts

    def rate_moved(self, opt: OptimizerForms) -> None:
        """The groups' rates moved between steps (a scheduler of ours stepped, or ``set_lr``): write
        them to the GPU tables now. A replay of a captured step runs none of this Python and reads
        its rate from the device, so it follows the scheduler; an eager step finds them written.
        (The compiled CPU rows are rewritten by the step itself.)"""
        for group in opt.param_groups:
            plan = self._plans.get(id(group))
            if plan is None or not plan.multi_tensor:
                continue
            lr = opt._group_lr(group)
            if lr == plan.lr:
                continue
            for device in plan.multi_tensor:
                _multi_tensor.refuse_new_rate(device)  # before anything changes
            if not plan.set_rate(opt, group, lr):
                self._plans.pop(id(group))  # the next step makes a new plan
                continue
            for batch, _ in plan.multi_tensor.values():
                _multi_tensor.write_rates(batch)

    def _plan(
        self, opt: OptimizerForms, head: tuple[Any, ...], group: dict[str, Any], pairs: ParamsGrads,
        found_inf: Tensor | None,
    ) -> _Plan:
        """The plan of this step (made for the group options of ``head``; ``_Plan.remember`` records
        the rest of what it is made for, once it is made): create the missing state, and sort the
        parameters into the rows of the compiled CPU kernel (``_native``), the rows of the GPU
        multi-tensor kernels per device (``_multi_tensor``), and the rest, for the per-tensor
        ``_kernel``. Which formulas apply (Paddle's GPU or CPU kernels) follows
        ``_devices.gpu_kernels`` of the parameter; a form the optimizer does not define is not used.
        """
        lr = opt._group_lr(group)
        has_compiled = defines(type(opt), "_compiled_row", "_compiled_call")
        has_gpu = defines(type(opt), "_compiled_row", "_multi_tensor_call")
        # the CPU kernels are loaded at the first CPU tensor (a GPU-only run never looks for them)
        kernels: dict[torch.device | None, Any] = {}
        compiled, reusable = _native.Batch(), True
        multi_tensor: dict[torch.device, tuple[_native.Batch, list[int]]] = {}
        rest: list[int] = []
        slots: list[tuple[Any, int | None] | None] = []
        rates: dict[tuple[float, torch.dtype, bool], _Rates] = {}
        for i, (p, g) in enumerate(pairs):
            state, master = opt._prepare_state(p, group)
            item = (p, g, state, master)
            batch: _native.Batch | None
            indices: list[int] | None
            if _devices.gpu_kernels(p):
                device = p.device
                if device not in kernels:
                    kernels[device] = _multi_tensor.kernels(device) if has_gpu else None
                    if kernels[device] is not None:
                        _multi_tensor.refuse_capture(device)
                batch, indices = multi_tensor.setdefault(device, (_native.Batch(), []))
                if kernels[device] is None:
                    batch = None
            else:
                if None not in kernels:
                    kernels[None] = _native.kernels() if has_compiled else None
                # a GradScaler's flag on a GPU is for GPU tensors: CPU ones with it go per tensor
                batch, indices = (compiled, None) if kernels[None] is not None and found_inf is None else (None, None)
            row = len(batch) if batch is not None else None
            rate = opt._param_lr(p, group, lr)
            added = opt._compiled_row(item, group, rate, batch, batch is not compiled) if batch is not None else None
            if added is None:
                rest.append(i)
                slots.append(None)
            else:
                assert batch is not None and row is not None
                reusable = reusable and added
                slots.append((batch, row))
                # the row's numbers follow the rate as those of rows alike (Optimizer._row_rate)
                value, gpu = master if master is not None else p, batch is not compiled
                kind = (attr_ratio(p), value.dtype, gpu)
                if kind not in rates:
                    rates[kind] = _Rates(p, value, gpu)
                rates[kind].rows.append((batch, row))
                if indices is not None:
                    indices.append(i)
        multi_tensor = {device: entry for device, entry in multi_tensor.items() if len(entry[0])}
        return _Plan(
            head, opt.state, lr, kernels, compiled if len(compiled) else None, multi_tensor, rest, slots, reusable,
            rates,
        )

    @staticmethod
    def _run_multi_tensor(opt: OptimizerForms, plan: _Plan, group: dict[str, Any], found_inf: Tensor | None) -> bool:
        """Launch the GPU kernels of ``plan``, all or nothing: the device tables of every launch are
        made and every kernel variant the step needs is compiled before the first launch; a failure
        there returns ``False`` (the caller falls back) with nothing written. Each launch reads the
        flag on its own device. (A launch failing once everything is compiled is raised.)"""
        flags: dict[torch.device, Tensor] = {}
        try:
            work = []
            for device, (batch, _) in plan.multi_tensor.items():
                flag = _devices.on_device(found_inf, device, flags) if found_inf is not None else None
                work += [(device, launch, flag) for launch in _multi_tensor.launches(batch, device) if launch.grid[0]]
            for device, launch, flag in work:
                with _devices.device_of(device):
                    opt._multi_tensor_call(_multi_tensor.Compiling(plan.kernels[device]), launch, group, flag)
        except _multi_tensor.CaptureError:
            raise
        except Exception:
            _multi_tensor.disable()  # logs the error
            return False
        for device, launch, flag in work:
            with _devices.device_of(device):
                opt._multi_tensor_call(plan.kernels[device], launch, group, flag)
        return True

    def flat(self, n: int, dtype: torch.dtype, device: torch.device, slot: str) -> Tensor:
        """The first ``n`` elements of the flat buffer of ``slot`` (see ``scratch``), grown as needed."""
        buf = self._scratch.get((slot, dtype, device))
        if buf is None or buf.numel() < n:
            buf = self._scratch[(slot, dtype, device)] = torch.empty(n, dtype=dtype, device=device)
            self._views.clear()  # views of the replaced buffer would keep it alive
        return buf[:n]

    def scratch(self, like: Tensor, dtype: torch.dtype, slot: str) -> Tensor:
        """A scratch tensor shaped like ``like``, reused by every parameter and step.

        The torch forms on CPU write their intermediates into these (``out=`` and in-place ops)
        because on CPU a fresh multi-megabyte temporary costs more than the arithmetic done in it
        (its pages are faulted in one by one). Each slot is one flat buffer sized to the largest
        parameter. The values computed are the same either way: only where they are stored changes.
        The view has the memory layout a temporary would get (``like``'s own, when dense): torch's
        kernels take their vectorized or element-wise path by layout, and in fp16/bf16 the two
        write different NaN bit patterns.
        """
        # The views are kept too (for small parameters, making them costs more than using them).
        views = self._views
        key = (slot, dtype, like.device, like.shape, like.stride())
        view = views.get(key)
        if view is not None:
            return view
        flat = self.flat(like.numel(), dtype, like.device, slot)
        if like.is_contiguous():
            view = flat.view(like.shape)
        else:
            view = flat.as_strided(like.shape, torch.empty_like(like, device="meta").stride())
        views[key] = view
        return view
