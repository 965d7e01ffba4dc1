"""Which Paddle layer call is which torch module call: layer alignment for per-layer diffs.

A call is matched by name first: the Paddle layer's path, through the user's ``layer_map``
(``{paddle_sublayer: torch_submodule}``, longest dotted prefix wins) or else through ``name_map``
read backwards (torch names -> Paddle names, as for state conversion), must be the torch module's
path, and the call must be the same n-th call in the step. Between two name matches, calls left
over are matched by type, in call order (the longest common subsequence of their types): that is
how renamed layers align. A call matched on neither side is a note, never a divergence, with the
known reason when there is one (torch's ``MultiheadAttention`` computes its q/k/v/out projections
without calling submodules, where Paddle's calls four ``Linear`` layers).
"""

from __future__ import annotations

import bisect
import dataclasses
import fnmatch
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .convert import _rename

__all__ = ["Call", "Pair", "align", "kind_of"]

# Type names that differ between the frameworks for the same layer (lower case).
_KIND_ALIASES = {
    "nondynamicallyquantizablelinear": "linear",
    "simplernn": "rnn",
    "syncbatchnorm": "batchnorm",
    "batchnorm1d": "batchnorm",
    "batchnorm2d": "batchnorm",
    "batchnorm3d": "batchnorm",
    "layerlist": "modulelist",
    "layerdict": "moduledict",
}

# Why Paddle's attention records four layer calls that torch's does not (also said by compare's notes).
MHA_INLINE = (
    "torch's MultiheadAttention computes the q/k/v/out projections inside one call, "
    "where Paddle's calls four Linear sublayers: they are compared as part of it"
)
# Torch modules whose Paddle counterparts call sublayers that they compute inline.
_INLINE_SUBLAYERS = {"multiheadattention": MHA_INLINE}


def kind_of(layer: Any) -> str:
    """A layer's type as both frameworks can agree on it (``"linear"``, ``"conv2d"``, ``"batchnorm"``);
    for a user's own class, its structure: the sorted kinds of its children (``"{gelu,linear,linear}"``),
    since the two sides' class names differ as often as not.

    Args:
        layer: a torch module or a Paddle layer.
    """
    cls = type(layer)
    if cls.__module__.split(".")[0] in ("torch", "paddle"):
        name = cls.__name__.lower()
        return _KIND_ALIASES.get(name, name)
    children = getattr(layer, "named_children", None)
    kinds = sorted(kind_of(c) for _, c in children()) if callable(children) else []
    return "{" + ",".join(kinds) + "}"


@dataclasses.dataclass
class Call:
    """One call of one layer during the step, on one side.

    ``args``/``kwargs`` are what the layer was called with (tensors as detached copies, inside
    tuples and lists too); ``flows`` the paths (``(position or keyword, index, ...)``) of the
    arguments a gradient flowed into (activations, not masks or ids); ``output`` its (first)
    output and ``grad`` the gradient that flowed back into it, as numpy arrays; ``site`` where it
    was called (``file:line``, torch side).
    """

    path: str
    index: int  # the n-th call of this layer in the step
    layer: Any
    kind: str
    order: int  # completion order (children before their parent)
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    output: np.ndarray | None = None
    grad: np.ndarray | None = None
    site: str | None = None
    flows: tuple[tuple[Any, ...], ...] = ()

    @property
    def key(self) -> str:
        """The layer's path, with ``#n`` for its n-th call after the first; ``(model)`` for the root."""
        name = self.path or "(model)"
        return name if self.index == 0 else f"{name}#{self.index}"

    @property
    def depth(self) -> int:
        return 0 if not self.path else self.path.count(".") + 1


@dataclasses.dataclass
class Pair:
    """A Paddle call and the torch call that computes the same thing; ``how``: ``"name"``,
    ``"layer_map"`` or ``"type"`` (aligned by structure)."""

    paddle: Call
    torch: Call
    how: str


def _matches(call: Call, names: Sequence[str], types: Sequence[Any]) -> bool:
    if any(fnmatch.fnmatchcase(call.path, pat) for pat in names):
        return True
    for t in types:
        if isinstance(t, str):
            if type(call.layer).__name__ == t:
                return True
        elif isinstance(call.layer, t):
            return True
    return False


def ignored_paths(calls: Iterable[Call], names: Sequence[str], types: Sequence[Any]) -> list[str]:
    """The paths of the calls ``names`` (globs) or ``types`` ignore, in call order."""
    return [c.path for c in calls if _matches(c, names, types)]


def _kept(calls: Iterable[Call], names: Sequence[str], types: Sequence[Any], depth: int | None) -> list[Call]:
    """The calls to compare: none ignored (nor inside an ignored layer), none deeper than ``depth``."""
    out = []
    calls = list(calls)
    ignored = ignored_paths(calls, names, types)
    for c in calls:
        inside = any(c.path == p or (p == "" or c.path.startswith(p + ".")) for p in ignored)
        if inside or (depth is not None and c.depth > depth):
            continue
        out.append(c)
    return out


def _increasing(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest chain of pairs increasing in both indices (pairs sorted by the first)."""
    tails: list[int] = []
    tail_at: list[int] = []
    prev = [-1] * len(pairs)
    for i, (_, t) in enumerate(pairs):
        k = bisect.bisect_left(tails, t)
        if k == len(tails):
            tails.append(t)
            tail_at.append(i)
        else:
            tails[k], tail_at[k] = t, i
        prev[i] = tail_at[k - 1] if k else -1
    chain = []
    i = tail_at[-1] if tail_at else -1
    while i >= 0:
        chain.append(pairs[i])
        i = prev[i]
    return chain[::-1]


def _common_kinds(ps: list[Call], ts: list[Call]) -> list[tuple[int, int]]:
    """The longest common subsequence of the two call lists by type (indices into ``ps``/``ts``)."""
    n, m = len(ps), len(ts)
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            best[i][j] = best[i + 1][j + 1] + 1 if ps[i].kind == ts[j].kind else max(best[i + 1][j], best[i][j + 1])
    out, i, j = [], 0, 0
    while i < n and j < m:
        if ps[i].kind == ts[j].kind:
            out.append((i, j))
            i, j = i + 1, j + 1
        elif best[i + 1][j] >= best[i][j + 1]:
            i += 1
        else:
            j += 1
    return out


def align(
    paddle_calls: Sequence[Call],
    torch_calls: Sequence[Call],
    *,
    layer_map: Mapping[str, str] | None = None,
    name_map: Mapping[str, str] | None = None,
    ignore: Sequence[str] = (),
    ignore_types: Sequence[Any] = (),
    depth: int | None = None,
) -> tuple[list[Pair], list[str]]:
    """Pair the calls of the two sides; returns ``(pairs in torch call order, notes)``.

    Args:
        paddle_calls, torch_calls: each side's calls in completion order.
        layer_map: ``{paddle_sublayer: torch_submodule}`` where paths differ (prefixes apply to
            what is below them).
        name_map: the state conversion's torch -> Paddle names, used backwards when ``layer_map``
            says nothing.
        ignore: glob patterns of layer paths (either side) not to compare, with what is inside.
        ignore_types: classes (or class names) not to compare, with what is inside.
        depth: compare only layers at most this deep (the model is 0, its children 1, ...).
    """
    lmap, back = dict(layer_map or {}), {v: k for k, v in (name_map or {}).items()}

    def mapped(ppath: str) -> bool:
        return ppath in lmap or any(ppath.startswith(k + ".") for k in lmap)

    def torch_path(ppath: str) -> str:
        return _rename(ppath, lmap if mapped(ppath) else back)

    ps = _kept(paddle_calls, ignore, ignore_types, depth)
    ts = _kept(torch_calls, ignore, ignore_types, depth)
    t_at = {(c.path, c.index): j for j, c in enumerate(ts)}
    named: list[tuple[int, int]] = []
    for i, c in enumerate(ps):
        j = t_at.get((torch_path(c.path), c.index))
        if j is not None:
            named.append((i, j))
    chain = _increasing(named)
    named_p = {i for i, _ in named}
    named_t = {j for _, j in named}
    matched: list[tuple[int, int, str]] = [
        (i, j, "layer_map" if mapped(ps[i].path) else "name") for i, j in chain
    ]
    # between consecutive name matches, align what is left by type
    bounds = [(-1, -1), *chain, (len(ps), len(ts))]
    for (i0, j0), (i1, j1) in itertools.pairwise(bounds):
        gap_p = [i for i in range(i0 + 1, i1) if i not in named_p]
        gap_t = [j for j in range(j0 + 1, j1) if j not in named_t]
        for a, b in _common_kinds([ps[i] for i in gap_p], [ts[j] for j in gap_t]):
            matched.append((gap_p[a], gap_t[b], "type"))
    matched.sort(key=lambda m: m[1])
    pairs = [Pair(ps[i], ts[j], how) for i, j, how in matched]
    notes = _one_sided_notes(ps, ts, pairs, named_p)
    return pairs, notes


def _one_sided_notes(ps: list[Call], ts: list[Call], pairs: list[Pair], named_p: set[int]) -> list[str]:
    """One note per reason, naming every call it covers (``named_p``: the Paddle calls with a torch
    namesake)."""
    paired_p = {id(p.paddle) for p in pairs}
    paired_t = {id(p.torch) for p in pairs}
    owner: dict[str, Pair] = {p.paddle.path: p for p in pairs}
    grouped: dict[str, list[str]] = {}
    for i, c in enumerate(ps):
        if id(c) in paired_p:
            continue
        reason = "no torch call matched them by name or type: not compared"
        if i in named_p:
            reason = "their torch namesakes run in another order: not compared"
        parent = c.path
        while parent:
            parent = parent.rpartition(".")[0]
            p = owner.get(parent)
            if p is not None:
                known = _INLINE_SUBLAYERS.get(p.torch.kind)
                reason = known or f"no torch call matched them: compared as part of {p.paddle.key}"
                break
        grouped.setdefault(f"Paddle's {{}}: {reason}", []).append(f"{c.key} ({type(c.layer).__name__})")
    for c in ts:
        if id(c) not in paired_t:
            grouped.setdefault("torch's {}: no Paddle call matched them: not compared", []).append(
                f"{c.key} ({type(c.layer).__name__})"
            )
    return [template.format(", ".join(keys)) for template, keys in grouped.items()]


def layer_types(values: Iterable[Any], what: str) -> tuple[Any, ...]:
    """``values`` checked as classes or class names (``TypeError`` naming ``what`` otherwise)."""
    if isinstance(values, (str, type)):  # one name or class where a list was meant: not its letters
        raise TypeError(f"{what} must be a list of classes or class names, got {values!r}")
    out = tuple(values)
    for v in out:
        if not isinstance(v, (str, type)):
            raise TypeError(f"{what} must hold classes or class names, got {v!r}")
    return out
