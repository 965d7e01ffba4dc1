"""Paddle's ``HybridParallelClipGrad``: a global-norm clip over every model-parallel shard.

Under tensor, pipeline or sharding parallelism no rank holds every gradient. Paddle's hybrid
clip sums the squares of this rank's gradients in two parts, those of distributed parameters
(split over the model-parallel ranks: ``param.is_distributed``) and the rest (replicated over
them), all-reduces the first over the sharding, model-parallel and pipeline groups and the
second over the sharding and pipeline groups only, so that a replicated parameter counts once,
and scales every gradient by ``clip_norm / (max(norm, clip_norm) + 1e-6)``.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from ... import _checks
from ..._dtensor import is_dtensor, local
from ..._numerics import sqrt_rn
from ...nn.clip import ClipGradByGlobalNorm, ParamsGrads, _sum, scale_, squared_l2_norm
from .fleet import fleet_state
from .topology import HybridCommunicateGroup

__all__ = ["HybridParallelClipGrad"]

# The groups given to a clip (see ``HybridParallelClipGrad._hcg``).
_GROUPS: weakref.WeakKeyDictionary[HybridParallelClipGrad, HybridCommunicateGroup] = weakref.WeakKeyDictionary()

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class HybridParallelClipGrad(ClipGradByGlobalNorm):
    """The global-norm clip ``fleet.distributed_optimizer`` installs under hybrid parallelism.

    Args:
        clip: the optimizer's ``ClipGradByGlobalNorm`` (its ``clip_norm`` and ``group_name``
            are taken; ``auto_skip_clip`` is not, as in Paddle).
        hcg: the ``HybridCommunicateGroup`` whose groups the norm is reduced over (default:
            fleet's, at each step).
        split_norm_comm: Paddle's strategy flag: reduce over the model-parallel, then the pipeline
            group, instead of once over the check group (another summation order).

    A parameter is distributed when ``param.is_distributed`` is true (Paddle's mark, set by
    model-parallel layers) or when it is a DTensor sharded over the model-parallel group
    (torch's tensor parallelism); a DTensor's local shard stands for it, as this rank's part.
    With ``sharding_degree`` > 1 each rank must hold only its shards (``group_sharded_parallel``
    over ``hcg.get_sharding_parallel_group()``), as Paddle's sharding optimizer passes each rank
    its own parameters. Parameters with ``is_firstly_shared = False`` are left out of the norm
    (Paddle's shared pipeline weights, counted on their first stage).

    Example::

        optimizer = fleet.distributed_optimizer(optimizer)   # installs it when mp/pp/sharding > 1
        isinstance(optimizer._grad_clip, HybridParallelClipGrad)

    Differences from Paddle: float64 gradients count (Paddle leaves them out of the norm); the
    fields ``clip_norm``, ``group_name`` and ``auto_skip_clip`` may be given instead of ``clip``
    (how an optimizer checkpoint rebuilds it).
    """

    def __init__(
        self,
        clip: ClipGradByGlobalNorm | None = None,
        hcg: HybridCommunicateGroup | None = None,
        split_norm_comm: bool = False,
        *,
        clip_norm: float | None = None,
        group_name: str = "default_group",
        auto_skip_clip: bool = False,
    ) -> None:
        if clip is not None and not isinstance(clip, ClipGradByGlobalNorm):
            raise TypeError(f"clip should be a ClipGradByGlobalNorm, but received {type(clip).__name__}")
        if (clip is None) == (clip_norm is None):
            raise TypeError("HybridParallelClipGrad takes a clip, or (as a checkpoint rebuilds it) its clip_norm")
        if hcg is not None and not isinstance(hcg, HybridCommunicateGroup):
            raise TypeError(f"hcg should be a HybridCommunicateGroup, but received {type(hcg).__name__}")
        if clip is not None:
            clip_norm, group_name = clip.clip_norm, clip.group_name
        assert clip_norm is not None
        # auto_skip_clip is kept for the checkpoint's sake only: Paddle's hybrid clip always multiplies
        super().__init__(clip_norm, group_name, auto_skip_clip)
        self.split_norm_comm = _checks.flag("split_norm_comm", split_norm_comm)
        if hcg is not None:
            _GROUPS[self] = hcg

    @property
    def _hcg(self) -> HybridCommunicateGroup:
        """The groups given, else fleet's (not an attribute: a checkpoint of the optimizer stores the
        clip's plain fields, and a clip loaded from it reduces over the groups of the run loading it)."""
        hcg = _GROUPS.get(self)
        return hcg if hcg is not None else fleet_state()[1]

    def __str__(self) -> str:
        return f"HybridParallelClipGrad, global_norm={self.clip_norm:f}"

    def _is_distributed(self, param: Tensor) -> bool:
        if getattr(param, "is_distributed", False) is True:  # Paddle's flag; torch's Tensor.is_distributed is a method
            return True
        if not is_dtensor(param):
            return False
        mp_ranks = dist.get_process_group_ranks(self._hcg.get_model_parallel_group())
        mesh = param.device_mesh  # type: ignore[attr-defined]
        return any(
            placement.is_shard() and dist.get_process_group_ranks(mesh.get_group(i)) == mp_ranks
            for i, placement in enumerate(param.placements)  # type: ignore[attr-defined]
        )

    def _clip(self, params_grads: Sequence[tuple[Tensor, Tensor | None]]) -> ParamsGrads:
        present = [(p, g) for p, g in params_grads if g is not None]
        clipped = [(p, local(g)) for p, g in present if getattr(p, "need_clip", True)]
        if not clipped:
            return present
        device = clipped[0][1].device
        squares: dict[bool, dict[torch.dtype, list[Tensor]]] = {True: {}, False: {}}
        for p, g in clipped:
            if getattr(p, "is_firstly_shared", True):
                squares[self._is_distributed(p)].setdefault(g.dtype, []).append(squared_l2_norm(g))
        # per part: each dtype's squares summed in that dtype, then in float32 (fp16 + bf16 + fp32)
        totals = []
        for part in (True, False):
            total = torch.zeros((), dtype=torch.float32, device=device)
            for dtype in _DTYPES:
                if dtype in squares[part]:
                    total = total + _sum(torch.stack(squares[part][dtype])).to(torch.float32)
            totals.append(total.reshape(1))
        dist_total, not_dist_total = totals
        self._reduce(dist_total, not_dist_total)
        norm = sqrt_rn(dist_total + not_dist_total).reshape(())
        max_norm = torch.full((), self.clip_norm, dtype=torch.float32, device=device)
        factor = max_norm / (torch.maximum(norm, max_norm) + torch.full((), 1e-6, dtype=torch.float32, device=device))
        scale_([g for _, g in clipped], factor)
        return present

    def _reduce(self, dist_total: Tensor, not_dist_total: Tensor) -> None:
        """Paddle's all-reduces of the two partial sums, in its order."""
        hcg = self._hcg
        sharding = hcg.get_sharding_parallel_world_size() > 1
        data = hcg.get_data_parallel_world_size() > 1
        model = hcg.get_model_parallel_world_size() > 1
        pipe = hcg.get_pipe_parallel_world_size() > 1
        if sharding:
            dist.all_reduce(dist_total, group=hcg.get_sharding_parallel_group())
            dist.all_reduce(not_dist_total, group=hcg.get_sharding_parallel_group())
        if model:
            if not (data and sharding) and not self.split_norm_comm:
                dist.all_reduce(dist_total, group=hcg.get_check_parallel_group(sharding))
            else:
                dist.all_reduce(dist_total, group=hcg.get_model_parallel_group())
                if pipe:
                    dist.all_reduce(dist_total, group=hcg.get_pipe_parallel_group())
        if pipe:
            dist.all_reduce(not_dist_total, group=hcg.get_pipe_parallel_group())
