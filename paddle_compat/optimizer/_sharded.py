"""Paddle's optimizers on DTensor parameters (FSDP2's shards, tensor-parallel layers).

Each rank updates its local shards with the same formulas and kernels as plain tensors: every
formula is per element, so a shard ends bit for bit as that slice of one process's tensor
updated from the same gradient. The state stays the parameter's: the accumulators are created
like the DTensor parameter (moments, velocity, master weight: DTensors with its placement, which
``torch.distributed.checkpoint`` saves and reshards), scalar accumulators (Adam's beta powers)
are plain tensors, equal on every rank.

The step sees local tensors only: ``local_shards`` hands it the local ``(param, grad)`` pairs and,
while it runs, shows ``optimizer.state`` as a view keyed by the local parameters whose entries
are the local tensors of the real state (same storage, so in-place updates land in the
DTensors; an entry the step assigns is written back, wrapped as the DTensor it replaces).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from torch import Tensor

from .._dtensor import is_dtensor, local, wrap_like
from ..nn.clip import ParamsGrads

__all__ = ["local_shards"]

class _LocalState(dict):  # type: ignore[type-arg]
    """One parameter's state as local tensors; assignments also go to the real state."""

    def __init__(self, owner: dict[str, Any]) -> None:
        super().__init__((key, local(value)) for key, value in owner.items())
        self.owner = owner
        self.ids = [id(value) for value in owner.values()]

    def stale(self, owner: dict[str, Any]) -> bool:
        return owner is not self.owner or [id(value) for value in owner.values()] != self.ids

    def __setitem__(self, key: str, value: Any) -> None:
        old = self.owner.get(key)
        if (
            isinstance(old, Tensor) and is_dtensor(old) and isinstance(value, Tensor) and not is_dtensor(value)
            and value.shape == local(old).shape
        ):
            self.owner[key] = wrap_like(value, old)
        else:
            self.owner[key] = value
        self.ids = [id(v) for v in self.owner.values()]
        super().__setitem__(key, value)


class _LocalStates(dict):  # type: ignore[type-arg]
    """``optimizer.state`` as the step on local shards sees it: local parameter -> ``_LocalState``;
    a plain parameter keeps its own state dict."""

    def __init__(self, source: Any) -> None:
        super().__init__()
        self.source = source  # the optimizer's real state
        self.params: dict[int, Tensor] = {}  # id(local parameter) -> the parameter

    def __missing__(self, key: Tensor) -> Any:
        return self.source[key]

    def entry(self, param: Tensor, local_param: Tensor) -> str:
        """``"ok"``, ``"missing"`` or ``"stale"``: how the view holds a DTensor ``param``'s state."""
        entry = dict.get(self, local_param)
        if entry is None:
            return "missing"
        if self.params.get(id(local_param)) is not param or entry.stale(self.source[param]):
            return "stale"
        return "ok"

    def add(self, param: Tensor, local_param: Tensor) -> None:
        self[local_param] = _LocalState(self.source[param])
        self.params[id(local_param)] = param


@contextlib.contextmanager
def local_shards(opt: Any, group: dict[str, Any], pairs: ParamsGrads) -> Iterator[ParamsGrads]:
    """Run the block on the local tensors of ``pairs`` (DTensor or plain), with ``opt.state``
    showing their state as local tensors. The state is created first, on the DTensors."""
    for p, _ in pairs:
        if is_dtensor(p):
            opt._prepare_state(p, group)
    local_pairs = [(local(p), local(g)) for p, g in pairs]
    sharded = [(p, lp) for (p, _), (lp, _) in zip(pairs, local_pairs) if is_dtensor(p)]
    # One view per optimizer (its engine keeps it), the same while the state is: the engine's plans
    # are kept as long as the view they were made with is the one shown.
    engine = opt._compat_engine
    view = engine.shard_view
    status = [view.entry(p, lp) for p, lp in sharded] if view is not None and view.source is opt.state else None
    if view is None or status is None or "stale" in status:  # a new view: the plans made with the old one are dropped
        view = engine.shard_view = _LocalStates(opt.state)
        status = ["missing"] * len(sharded)
    for (p, lp), how in zip(sharded, status):
        if how == "missing":  # another group's step may have made the view: it stays
            view.add(p, lp)
    real = opt.state
    opt.state = view
    try:
        yield local_pairs
    finally:
        opt.state = real
