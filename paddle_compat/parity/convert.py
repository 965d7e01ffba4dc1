"""Layer state between Paddle's names and layouts and a torch module's, chosen by module type.

A :class:`Plan` walks a torch module and, for each submodule, lets the rule for its *type* say how
its own parameters and buffers appear in Paddle:

========================================  ============================================================
torch module                              Paddle layer's state
========================================  ============================================================
``Linear``                                ``weight`` transposed (Paddle: ``[in, out]``), ``bias``
``Bilinear``                              ``weight``; ``bias`` shaped ``[1, out]``
``BatchNorm*``, ``SyncBatchNorm``         ``running_mean``/``running_var`` -> ``_mean``/``_variance``;
                                          no ``num_batches_tracked``
``InstanceNorm*`` (affine)                ``weight`` -> ``scale``
``PReLU``                                 ``weight`` -> ``_weight``
``MultiheadAttention``                    ``in_proj_weight`` (or ``q/k/v_proj_weight``) split into
                                          ``q_proj``/``k_proj``/``v_proj`` ``weight`` (transposed) and
                                          ``in_proj_bias`` into their ``bias``; ``out_proj`` a Linear
``LSTM``, ``GRU``, ``RNN``                ``weight_ih_l{k}[_reverse]`` ... as they are (the same gate
                                          order: i, f, g, o and r, z, n), also under Paddle's cell
                                          names ``{k}.cell[_fw|_bw].weight_ih``; the LSTM projection
                                          ``weight_hr_l{k}`` is ``{k}.cell.weight_ho`` transposed
Conv, ConvTranspose, Embedding,           as they are
LayerNorm, GroupNorm, cells, the rest
========================================  ============================================================

Submodule paths are the same in both frameworks unless ``name_map`` says otherwise: it maps torch
names (a module path such as ``"encoder.fc"`` or a full key such as ``"head.w"``) to Paddle names;
the longest prefix (on dotted components) wins.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from . import pdio
from ._arrays import array_of

__all__ = ["NameMap", "Plan", "paddle_to_torch", "register_rule", "torch_to_paddle", "unregister_rule"]

NameMap = Mapping[str, str]
Layout = Callable[[list[np.ndarray]], list[np.ndarray]]


def _same(xs: list[np.ndarray]) -> list[np.ndarray]:
    return list(xs)


def _transpose(xs: list[np.ndarray]) -> list[np.ndarray]:
    return [x.T for x in xs]


@dataclasses.dataclass(frozen=True)
class Entry:
    """How some torch keys and some Paddle keys hold the same tensors.

    A rule returns entries with names relative to its module; the plan's entries hold full keys.
    ``to_paddle``/``to_torch`` are layout functions (transposes, splits, concatenations): they apply
    equally to a parameter and to anything shaped like it (moments, velocities, master weights).
    ``aliases`` are more Paddle keys holding ``paddle_keys[i]``'s value, as ``(key, i)``.
    ``torch_only``: the torch key has no Paddle counterpart (``num_batches_tracked``).
    """

    torch_keys: tuple[str, ...]
    paddle_keys: tuple[str, ...]
    to_paddle: Layout = _same
    to_torch: Layout = _same
    aliases: tuple[tuple[str, int], ...] = ()
    torch_only: bool = False


# ------------------------------------------------------------------------------------ the rules


def _rule_linear(m: nn.Linear, keys: set[str]) -> list[Entry]:
    out = [Entry(("weight",), ("weight",), _transpose, _transpose)]
    if "bias" in keys:
        out.append(Entry(("bias",), ("bias",)))
    return out


def _rule_bilinear(m: nn.Bilinear, keys: set[str]) -> list[Entry]:
    out = [Entry(("weight",), ("weight",))]
    if "bias" in keys:
        out.append(Entry(("bias",), ("bias",), lambda xs: [xs[0].reshape(1, -1)], lambda xs: [xs[0].reshape(-1)]))
    return out


def _rule_batch_norm(m: nn.modules.batchnorm._BatchNorm, keys: set[str]) -> list[Entry]:
    names = {"weight": "weight", "bias": "bias", "running_mean": "_mean", "running_var": "_variance"}
    out = [Entry((k,), (names[k],)) for k in names if k in keys]
    if "num_batches_tracked" in keys:
        out.append(Entry(("num_batches_tracked",), (), torch_only=True))
    return out


def _rule_instance_norm(m: nn.modules.instancenorm._InstanceNorm, keys: set[str]) -> list[Entry]:
    if "running_mean" in keys:
        raise ValueError(
            f"{type(m).__name__}(track_running_stats=True): Paddle's InstanceNorm keeps no running statistics"
        )
    names = {"weight": "scale", "bias": "bias"}
    return [Entry((k,), (names[k],)) for k in names if k in keys]


def _rule_prelu(m: nn.PReLU, keys: set[str]) -> list[Entry]:
    return [Entry(("weight",), ("_weight",))]


def _rule_multihead_attention(m: nn.MultiheadAttention, keys: set[str]) -> list[Entry]:
    if m.bias_k is not None:
        raise ValueError("MultiheadAttention(add_bias_kv=True): Paddle's MultiHeadAttention has no bias_k/bias_v")
    qkv = ("q_proj.weight", "k_proj.weight", "v_proj.weight")
    out = []
    if "in_proj_weight" in keys:
        e = m.embed_dim
        out.append(
            Entry(
                ("in_proj_weight",),
                qkv,
                lambda xs: [xs[0][:e].T, xs[0][e : 2 * e].T, xs[0][2 * e :].T],
                lambda xs: [np.concatenate([x.T for x in xs], axis=0)],
            )
        )
    else:
        out += [Entry((f"{p}_proj_weight",), (f"{p}_proj.weight",), _transpose, _transpose) for p in "qkv"]
    if "in_proj_bias" in keys:
        e = m.embed_dim
        out.append(
            Entry(
                ("in_proj_bias",),
                ("q_proj.bias", "k_proj.bias", "v_proj.bias"),
                lambda xs: [xs[0][:e], xs[0][e : 2 * e], xs[0][2 * e :]],
                lambda xs: [np.concatenate(xs, axis=0)],
            )
        )
    return out  # out_proj is a Linear child: its own rule transposes it


def _rule_rnn(m: nn.RNNBase, keys: set[str]) -> list[Entry]:
    out = []
    directions = 2 if m.bidirectional else 1
    for layer in range(m.num_layers):
        for d in range(directions):
            suffix = "_reverse" if d else ""
            cell = f"{layer}.cell" if directions == 1 else f"{layer}.cell_{'bw' if d else 'fw'}"
            for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                flat = f"{w}_l{layer}{suffix}"
                if flat in keys:
                    out.append(Entry((flat,), (flat,), aliases=((f"{cell}.{w}", 0),)))
            proj = f"weight_hr_l{layer}{suffix}"
            if proj in keys:  # Paddle lists the projection under its cell only, as [hidden, proj]
                out.append(Entry((proj,), (f"{cell}.weight_ho",), _transpose, _transpose))
    return out


# Checked in order: the first type that matches decides (MultiheadAttention before anything else).
_RULES: list[tuple[type, Callable[[Any, set[str]], list[Entry]]]] = [
    (nn.MultiheadAttention, _rule_multihead_attention),
    (nn.Linear, _rule_linear),
    (nn.Bilinear, _rule_bilinear),
    (nn.modules.batchnorm._BatchNorm, _rule_batch_norm),
    (nn.modules.instancenorm._InstanceNorm, _rule_instance_norm),
    (nn.PReLU, _rule_prelu),
    (nn.RNNBase, _rule_rnn),
]


# Users' rules (register_rule), checked before the built-in ones; the latest registration first.
_USER_RULES: dict[type, Callable[[Any, set[str]], list[Entry]]] = {}


def _rule_for(module: nn.Module) -> Callable[[Any, set[str]], list[Entry]] | None:
    for cls in reversed(list(_USER_RULES)):
        if isinstance(module, cls):
            return _USER_RULES[cls]
    for cls, rule in _RULES:
        if isinstance(module, cls):
            return rule
    return None


def string_list(value: Any, what: str, kind: str = "names") -> tuple[str, ...]:
    """``value`` as a tuple of strings (``TypeError`` naming ``what`` for one string, or anything else).

    Args:
        value: a list, tuple or other iterable of strings.
        what: the argument's name, for the message.
        kind: what the strings are, for the message (``"names"``, ``"glob patterns"``).
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{what} must be a list of {kind} (strings), got {type(value).__name__}")
    out = tuple(value)
    bad = [v for v in out if not isinstance(v, str)]
    if bad:
        raise TypeError(f"{what} must be a list of {kind} (strings), got {bad[0]!r} in it")
    return out


def _split_layouts(n: int, transposed: bool) -> tuple[Layout, Layout]:
    """One tensor cut into ``n`` equal parts along dimension 0 (each transposed), and back."""

    def to_paddle(xs: list[np.ndarray]) -> list[np.ndarray]:
        return [p.T if transposed else p for p in np.split(xs[0], n, axis=0)]

    def to_torch(xs: list[np.ndarray]) -> list[np.ndarray]:
        return [np.concatenate([x.T if transposed else x for x in xs], axis=0)]

    return to_paddle, to_torch


def register_rule(
    module_type: type,
    *,
    rename: Mapping[str, str] | None = None,
    transpose: Any = (),
    split: Mapping[str, Any] | None = None,
    torch_only: Any = (),
) -> None:
    """Teach the conversion a custom layer: how its own parameters and buffers appear in Paddle.

    Every conversion (``paddle_to_torch``, ``torch_to_paddle``, optimizer state, traces recorded
    with ``port=``, ``diff_layers``) then uses it for every module of that type (or a subclass),
    before the built-in rules. Names are the module's own (``"weight"``, not ``"fc.weight"``);
    names not mentioned are the same on both sides.

    Args:
        module_type: the torch module class.
        rename: torch name -> Paddle name (``{"w": "weight"}``).
        transpose: torch names whose 2-D values Paddle keeps transposed (a Linear-like ``[out, in]``
            weight that Paddle keeps ``[in, out]``); for a split name, each part is transposed.
        split: torch name -> the Paddle names it is cut into, in equal parts along dimension 0
            (a fused ``qkv`` weight -> ``("q.weight", "k.weight", "v.weight")``).
        torch_only: torch names Paddle has no counterpart of (kept from the module when loading).

    Raises:
        TypeError: an argument of the wrong type; ``ValueError`` when a name is given twice.

    Example::

        register_rule(FusedDense, rename={"w": "weight"}, transpose=["w"], torch_only=["calls"])
    """
    if not (isinstance(module_type, type) and issubclass(module_type, nn.Module)):
        raise TypeError(f"module_type must be a torch.nn.Module subclass, got {module_type!r}")
    if rename is not None and (
        not isinstance(rename, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in rename.items())
    ):
        raise TypeError("rename must be a dict of torch names to Paddle names (strings)")
    renamed = dict(rename or {})
    flipped = set(string_list(transpose, "transpose"))
    parts = {}
    for k, v in (split or {}).items():
        parts[k] = string_list(v, f"split[{k!r}]")
        if not isinstance(k, str) or len(parts[k]) < 2:
            raise TypeError(f"split must map a torch name to two or more Paddle names, got {k!r}: {v!r}")
    only = set(string_list(torch_only, "torch_only"))
    twice = (set(renamed) & set(parts)) | (only & (set(renamed) | set(parts) | flipped))
    if twice:
        raise ValueError(f"register_rule: {sorted(twice)} given more than one role")

    def rule(module: Any, keys: set[str]) -> list[Entry]:
        named = set(renamed) | flipped | set(parts) | only
        unknown = named - keys
        if unknown:
            raise ValueError(
                f"the rule registered for {module_type.__name__} names {sorted(unknown)}, "
                f"which the module does not hold (it holds {sorted(keys)})"
            )
        out = []
        for k in sorted(keys):
            if k in only:
                out.append(Entry((k,), (), torch_only=True))
            elif k in parts:
                out.append(Entry((k,), parts[k], *_split_layouts(len(parts[k]), k in flipped)))
            elif k in flipped:
                out.append(Entry((k,), (renamed.get(k, k),), _transpose, _transpose))
            else:
                out.append(Entry((k,), (renamed.get(k, k),)))
        return out

    _USER_RULES.pop(module_type, None)
    _USER_RULES[module_type] = rule


def unregister_rule(module_type: type) -> None:
    """Forget the rule :func:`register_rule` gave ``module_type`` (no error when there is none).

    Args:
        module_type: the torch module class.

    Example::

        register_rule(FusedDense, rename={"w": "weight"}, transpose=["w"])
        try:
            state = torch_to_paddle(model)
        finally:
            unregister_rule(FusedDense)
    """
    _USER_RULES.pop(module_type, None)


# ------------------------------------------------------------------------------------ the plan


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _check_name_map(name_map: Any) -> dict[str, str]:
    if name_map is None:
        return {}
    if not isinstance(name_map, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in name_map.items()
    ):
        raise TypeError("name_map must be a dict of torch names to Paddle names (strings)")
    return dict(name_map)


def _rename(name: str, name_map: dict[str, str]) -> str:
    """``name`` with its longest ``name_map`` prefix (whole dotted components) replaced."""
    best = None
    for k in name_map:
        if (name == k or name.startswith(k + ".")) and (best is None or len(k) > len(best)):
            best = k
    return name if best is None else name_map[best] + name[len(best) :]


def _shape_probe(shape: tuple[int, ...]) -> np.ndarray:
    return np.broadcast_to(np.zeros((), np.int8), shape)


class Plan:
    """The correspondence between a torch module's state and a Paddle layer's.

    Build it with :meth:`of`; :meth:`to_torch` and :meth:`to_paddle` convert dicts of numpy arrays.
    Used for parameters and buffers, and (``partial=True``) for gradients and optimizer
    accumulators, which are shaped like their parameters; ``scalar=True`` is for per-parameter
    accumulators of shape ``[1]`` (Adam's beta powers): split parameters get copies, merged ones
    must agree.

    Example::

        plan = Plan.of(model)
        paddle_moments = plan.to_paddle({"0.weight": moment}, partial=True)
    """

    def __init__(self, entries: list[Entry], torch_shapes: dict[str, tuple[int, ...]], module_paths: dict[str, str]):
        self.entries = entries
        self.torch_shapes = torch_shapes
        self.module_paths = module_paths  # torch module path -> Paddle layer path
        self._paddle_shapes: dict[Entry, list[tuple[int, ...]]] = {}
        seen: dict[str, str] = {}
        for e in entries:
            for pk in e.paddle_keys + tuple(a for a, _ in e.aliases):
                if pk in seen:
                    raise ValueError(f"name_map sends both {seen[pk]!r} and {e.torch_keys[0]!r} to Paddle's {pk!r}")
                seen[pk] = e.torch_keys[0]

    @classmethod
    def of(cls, module: nn.Module, name_map: NameMap | None = None) -> Plan:
        """The plan for ``module`` (see the module docstring for the rules).

        Args:
            module: the torch port.
            name_map: torch names -> Paddle names where they differ (module paths or full keys).

        Example::

            plan = Plan.of(model, {"encoder": "enc"})
        """
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        names = _check_name_map(name_map)
        state = module.state_dict(keep_vars=True)
        shapes = {k: tuple(v.shape) for k, v in state.items()}
        order = {k: i for i, k in enumerate(state)}
        entries: list[Entry] = []
        covered: set[str] = set()
        paths: dict[str, str] = {}
        by_module: dict[str, set[str]] = {}  # module path -> its own keys (local names)
        for k in state:
            path, _, local_name = k.rpartition(".")
            by_module.setdefault(path, set()).add(local_name)
        for path, sub in module.named_modules(remove_duplicate=False):
            paddle_path = _rename(path, names)
            paths[path] = paddle_path
            local = by_module.get(path, set())
            if not local:
                continue
            rule = _rule_for(sub)
            local_entries = rule(sub, local) if rule is not None else []
            done = {n for e in local_entries for n in e.torch_keys}
            local_entries += [Entry((k,), (k,)) for k in sorted(local - done, key=lambda n: order[_join(path, n)])]
            for e in local_entries:
                tkeys = tuple(_join(path, n) for n in e.torch_keys)
                pkeys: tuple[str, ...]
                if len(tkeys) == 1 and len(e.paddle_keys) == 1 and tkeys[0] in names:
                    pkeys = (names[tkeys[0]],)  # an exact override of a full key
                else:
                    pkeys = tuple(_join(paddle_path, n) for n in e.paddle_keys)
                aliases = tuple((_join(paddle_path, a), i) for a, i in e.aliases)
                entries.append(dataclasses.replace(e, torch_keys=tkeys, paddle_keys=pkeys, aliases=aliases))
                covered.update(tkeys)
        for k in state:  # keys no submodule owns (added by a state-dict hook): as they are
            if k not in covered:
                entries.append(Entry((k,), (names.get(k, _rename(k, names)),)))
        entries.sort(key=lambda e: order[e.torch_keys[0]])
        return cls(entries, shapes, paths)

    # --- shapes ----------------------------------------------------------------------------------
    def paddle_shapes(self, entry: Entry) -> list[tuple[int, ...]]:
        """The shapes of ``entry``'s Paddle tensors, in ``paddle_keys`` order."""
        if entry not in self._paddle_shapes:
            probes = [_shape_probe(self.torch_shapes[k]) for k in entry.torch_keys]
            self._paddle_shapes[entry] = [tuple(x.shape) for x in entry.to_paddle(probes)]
        return self._paddle_shapes[entry]

    # --- conversions -----------------------------------------------------------------------------
    def to_torch(
        self,
        arrays: Mapping[str, np.ndarray],
        *,
        partial: bool = False,
        scalar: bool = False,
        what: str = "Paddle state",
    ) -> dict[str, np.ndarray]:
        """Paddle-keyed arrays -> torch-keyed arrays.

        Args:
            arrays: ``{Paddle key: numpy array}``.
            partial: ``False``: every Paddle key the module needs must be there and nothing else
                (Paddle's ``"StructuredToParameterName@@"`` table aside); ``True``: entries
                absent from ``arrays`` are skipped (gradients, accumulators); unknown keys still
                raise.
            scalar: per-parameter ``[1]`` accumulators (see the class doc).
            what: how errors name ``arrays``.

        Raises ``ValueError`` naming every missing, unexpected or misshapen tensor; nothing is
        returned half-converted.

        Example::

            state = Plan.of(model).to_torch(pdio.load("model.pdparams"))
        """
        consumed: set[str] = set()
        missing: list[str] = []
        problems: list[str] = []
        out: dict[str, np.ndarray] = {}
        for e in self.entries:
            if e.torch_only:
                continue
            got: list[np.ndarray | None] = []
            for i, pk in enumerate(e.paddle_keys):
                value = arrays.get(pk)
                consumed.add(pk)
                for alias, j in e.aliases:
                    if j != i or alias not in arrays:
                        continue
                    consumed.add(alias)
                    if value is None:
                        value = arrays[alias]
                    elif not _same_bits(value, arrays[alias]):
                        problems.append(f"{pk!r} and {alias!r} are the same Paddle parameter but hold different values")
                got.append(value)
            values = _complete(e.paddle_keys, got, partial, missing)
            if values is None:
                continue
            if scalar:
                out.update((k, _fresh(v)) for k, v in self._scalar_to_torch(e, values, problems).items())
                continue
            expected = self.paddle_shapes(e)
            torch_shapes = ", ".join(f"{k!r} {list(self.torch_shapes[k])}" for k in e.torch_keys)
            bad = [
                f"shape mismatch for {pk!r}: the Paddle tensor has shape {list(v.shape)}, the module needs "
                f"{list(s)} (Paddle's layout of torch's {torch_shapes})"
                for pk, v, s in zip(e.paddle_keys, values, expected, strict=True)
                if tuple(v.shape) != s
            ]
            if bad:
                problems += bad
                continue
            for tk, v in zip(e.torch_keys, e.to_torch(values), strict=True):
                out[tk] = _fresh(v)
        unexpected = [k for k in arrays if k not in consumed and k != pdio.NAME_TABLE]
        _raise_if(what, missing, unexpected, problems)
        return out

    def to_paddle(
        self, arrays: Mapping[str, np.ndarray], *, partial: bool = False, scalar: bool = False, aliases: bool = True
    ) -> dict[str, np.ndarray]:
        """Torch-keyed arrays -> Paddle-keyed arrays (the inverse of :meth:`to_torch`).

        Args:
            arrays: ``{torch key: numpy array}``.
            partial, scalar: as for :meth:`to_torch`.
            aliases: also write Paddle's second names of recurrent weights, as Paddle's own
                state dicts have them.

        Torch-only entries (``num_batches_tracked``) are dropped.

        Example::

            grads = Plan.of(model).to_paddle({k: p.grad.numpy() for k, p in model.named_parameters()}, partial=True)
        """
        known = {k for e in self.entries for k in e.torch_keys}
        unexpected = [k for k in arrays if k not in known]
        missing: list[str] = []
        problems: list[str] = []
        out: dict[str, np.ndarray] = {}
        extra: dict[str, np.ndarray] = {}
        for e in self.entries:
            if e.torch_only:
                continue
            values = _complete(e.torch_keys, [arrays.get(k) for k in e.torch_keys], partial, missing)
            if values is None:
                continue
            if scalar:
                converted = self._scalar_to_paddle(e, values)
            else:
                bad = [
                    f"shape mismatch for {k!r}: the tensor has shape {list(v.shape)}, "
                    f"the module's is {list(self.torch_shapes[k])}"
                    for k, v in zip(e.torch_keys, values, strict=True)
                    if tuple(v.shape) != self.torch_shapes[k]
                ]
                if bad:
                    problems += bad
                    continue
                converted = e.to_paddle(values)
            for pk, v in zip(e.paddle_keys, converted, strict=True):
                out[pk] = _fresh(v)
            if aliases:
                for alias, i in e.aliases:
                    extra[alias] = out[e.paddle_keys[i]]
        _raise_if("torch state", missing, unexpected, problems)
        out.update(extra)
        return out

    @staticmethod
    def _scalar_to_torch(e: Entry, values: list[np.ndarray], problems: list[str]) -> dict[str, np.ndarray]:
        if len(values) == len(e.torch_keys):
            return dict(zip(e.torch_keys, values, strict=True))
        if len(e.torch_keys) == 1:  # merged parameter (MultiheadAttention's in_proj): all must agree
            if not all(_same_bits(values[0], v) for v in values[1:]):
                problems.append(f"{e.torch_keys[0]!r}: {', '.join(map(repr, e.paddle_keys))} disagree")
                return {}
            return {e.torch_keys[0]: values[0]}
        raise AssertionError("no rule splits one Paddle tensor into several torch ones")

    @staticmethod
    def _scalar_to_paddle(e: Entry, values: list[np.ndarray]) -> list[np.ndarray]:
        if len(values) == len(e.paddle_keys):
            return values
        return [values[0].copy() for _ in e.paddle_keys]

    def paddle_key(self, torch_key: str) -> str | None:
        """The Paddle key of a torch key held 1:1 (``None`` when split, merged or torch-only).

        Args:
            torch_key: a key of the module's ``state_dict()``.

        Example::

            Plan.of(model).paddle_key("fc.bn.running_mean")   # "fc.bn._mean"
        """
        for e in self.entries:
            if e.torch_keys == (torch_key,) and len(e.paddle_keys) == 1:
                return e.paddle_keys[0]
        return None


def _complete(
    keys: tuple[str, ...], got: list[np.ndarray | None], partial: bool, missing: list[str]
) -> list[np.ndarray] | None:
    """An entry's values when all of them are there; else ``None``, adding the absent keys to
    ``missing`` (unless ``partial`` and the entry is wholly absent, which is allowed then)."""
    if any(g is None for g in got):
        if not (partial and all(g is None for g in got)):
            missing += [k for k, g in zip(keys, got, strict=True) if g is None]
        return None
    return [np.asarray(g) for g in got]


def _fresh(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy that shares no memory with the input: a result must never alias a live
    tensor's storage (Paddle's ``set_value`` keeps a numpy array's buffer without copying it)."""
    return np.array(a, copy=True, order="C")


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _raise_if(what: str, missing: list[str], unexpected: list[str], problems: list[str]) -> None:
    lines = []
    if missing:
        lines.append(f"missing from the {what}: {', '.join(map(repr, missing))}")
    if unexpected:
        lines.append(f"unexpected in the {what} (not in the module): {', '.join(map(repr, unexpected))}")
    lines += problems
    if lines:
        raise ValueError("; ".join(lines))


# ------------------------------------------------------------------------------------ public API


def paddle_arrays(state: Any) -> dict[str, np.ndarray]:
    """A Paddle state dict (tensors or arrays) or a ``.pdparams`` path as ``{key: numpy array}``.

    Args:
        state: the dict, or the path (read with ``pdio.load``).

    Example::

        arrays = paddle_arrays("model.pdparams")
    """
    if isinstance(state, (str, os.PathLike)):
        state = pdio.load(state)
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a dict or a path to a .pdparams file, got {type(state).__name__}")
    out = {}
    for k, v in state.items():
        if k == pdio.NAME_TABLE:
            continue
        try:
            out[k] = array_of(v)[0]
        except TypeError:
            raise TypeError(f"state[{k!r}] is {type(v).__name__}, not a tensor or an array") from None
    return out


def _torch_tensor(arr: np.ndarray) -> torch.Tensor:
    if arr.dtype == np.uint16:  # bfloat16 bits, as Paddle stores them
        return torch.from_numpy(arr.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(arr, copy=True))


def paddle_to_torch(
    state: Mapping[str, Any] | str | os.PathLike[str],
    module: nn.Module,
    *,
    name_map: NameMap | None = None,
    strict: bool = True,
) -> dict[str, torch.Tensor]:
    """A Paddle layer's state as a state dict ``module.load_state_dict`` accepts.

    Args:
        state: ``layer.state_dict()`` of a Paddle layer (Paddle tensors or numpy arrays), or the path
            of a ``.pdparams`` file written by ``paddle.save`` (read without Paddle, see ``pdio``).
        module: the torch port; its types decide the layouts (see :mod:`.convert`).
        name_map: torch names -> Paddle names where the two differ (module paths or full keys).
        strict: every tensor on both sides must match; with ``False``, tensors absent from ``state``
            are left out of the result (load it with ``strict=False``).

    Returns:
        ``{torch key: CPU tensor}``. ``num_batches_tracked`` (which Paddle lacks) is the module's own.
        bfloat16 arrives as ``uint16`` bits from Paddle and leaves as ``torch.bfloat16``.

    Raises:
        ValueError: a missing, unexpected or misshapen tensor (naming it and both shapes), before
            anything is returned.

    Example::

        model.load_state_dict(paddle_to_torch("model.pdparams", model))
    """
    plan = Plan.of(module, name_map)
    arrays = plan.to_torch(paddle_arrays(state), partial=not strict, what="Paddle state dict")
    own = module.state_dict()
    out = {}
    for e in plan.entries:
        for k in e.torch_keys:
            if e.torch_only:
                out[k] = own[k].detach().clone()
            elif k in arrays:
                out[k] = _torch_tensor(arrays[k])
    return out


def torch_to_paddle(
    module: nn.Module, *, name_map: NameMap | None = None, aliases: bool = True
) -> dict[str, np.ndarray]:
    """A torch module's state under Paddle's names and layouts, for ``paddle.nn.Layer.set_state_dict``.

    Args:
        module: the torch port.
        name_map: torch names -> Paddle names where the two differ.
        aliases: also write the second names Paddle's recurrent layers list (``0.cell.weight_ih``).

    Returns:
        ``{Paddle key: numpy array}`` (bfloat16 as ``uint16`` bits, as Paddle's ``numpy()``);
        ``pdio.save`` writes it as a ``.pdparams`` file.

    Example::

        paddle_layer.set_state_dict(torch_to_paddle(model))
    """
    plan = Plan.of(module, name_map)
    arrays = {k: array_of(v)[0] for k, v in module.state_dict().items()}
    return plan.to_paddle(arrays, aliases=aliases)
