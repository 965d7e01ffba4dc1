"""``paddle.optimizer.Momentum``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _checks, _devices, _native
from .._numerics import fma, round_to
from ..regularizer import L2Decay, WeightDecayRegularizer
from . import _multi_tensor
from ._engine import kernels_take
from .lr import LRScheduler
from .optimizer import Optimizer, _Item, paddle_option

__all__ = ["Momentum"]

_f32 = round_to(torch.float32)


class Momentum(Optimizer):
    """Heavy-ball momentum (optionally Nesterov), with Paddle's fused L2 decay.

    ``velocity = mu * velocity + grad``; ``param -= lr * velocity`` (Nesterov:
    ``param -= (grad + mu * velocity) * lr``). A float or ``L2Decay`` weight decay is fused into the
    kernel (``grad + coeff * param``) as Paddle does; ``L1Decay`` is added to the gradient beforehand.
    Paddle's group quirks are kept: a group's own float/``L2Decay`` decay is fused *and* the
    optimizer's ``L1Decay`` (if any) still applies to it; a group with ``weight_decay=None`` drops the
    optimizer's L2 decay but keeps its ``L1Decay``; group dicts given as a list are rewritten, as
    Paddle's are (``_rewrite_caller_groups``).

    CPU: every operation rounded separately and ``rescale_grad`` ignored, as Paddle's CPU kernel
    (bit-exact to Paddle 3.3.1 for fp32). CUDA: ``grad * rescale_grad`` and fused multiply-adds where
    nvcc contracts Paddle's kernel (not compared with Paddle on a GPU). Without ``multi_precision`` an fp16/bf16
    parameter's velocity and arithmetic stay in fp16/bf16, as in Paddle.
    """

    # Paddle's private attributes of the options (PaddleSpeech reads them)
    _momentum, _rescale_grad = paddle_option("momentum"), paddle_option("rescale_grad")
    _use_nesterov = paddle_option("use_nesterov")

    @property
    def _regularization_method(self) -> str:
        """Paddle's: ``"l2_decay"`` when the optimizer's decay is fused into the kernel (a float or
        ``L2Decay``), else ``""``."""
        return "l2_decay" if isinstance(self.defaults["weight_decay"], L2Decay) else ""

    @property
    def _regularization_coeff(self) -> float:
        """Paddle's: the fused L2 decay's coefficient (0.0 without)."""
        reg = self.defaults["weight_decay"]
        return reg.coeff if isinstance(reg, L2Decay) else 0.0

    def __init__(
        self,
        learning_rate: float | LRScheduler = 0.001,
        momentum: float = 0.9,
        parameters: Iterable[Tensor] | Iterable[dict[str, Any]] | None = None,
        use_nesterov: bool = False,
        weight_decay: float | WeightDecayRegularizer | None = None,
        grad_clip: Any = None,
        multi_precision: bool = False,
        rescale_grad: float = 1.0,
        use_multi_tensor: bool = False,
        name: str | None = None,
        *,
        fused: bool = False,
    ) -> None:
        defaults = {"momentum": momentum, "use_nesterov": use_nesterov, "rescale_grad": rescale_grad}
        self._check_group(defaults)
        self._use_multi_tensor = _checks.flag("use_multi_tensor", use_multi_tensor)
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, multi_precision, defaults, name, fused)
        if isinstance(parameters, list) and parameters and isinstance(parameters[0], dict):
            _rewrite_caller_groups(parameters, weight_decay)

    def _check_group(self, group: dict[str, Any]) -> None:
        if "momentum" in group:
            if group["momentum"] is None:
                raise ValueError("momentum is not set")
            _checks.real("momentum", group["momentum"])  # Paddle takes NaN and inf: the parameters become NaN
            _checks.at_least("momentum", group["momentum"], 0)  # Paddle takes it too: the update then oscillates
        if "rescale_grad" in group:
            _checks.real("rescale_grad", group["rescale_grad"])
        if "use_nesterov" in group:
            _checks.flag("use_nesterov", group["use_nesterov"])

    def _regularizer(self, group: dict[str, Any]) -> WeightDecayRegularizer | None:
        # A group's L2Decay is fused into the kernel. Paddle then (and for a group without decay)
        # still adds the optimizer's own regularizer when that one is not an L2Decay.
        reg = group["weight_decay"]
        if reg is None or isinstance(reg, L2Decay):
            reg = self.defaults["weight_decay"]
            return None if isinstance(reg, L2Decay) else reg
        return reg

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        dtype = torch.float32 if self._uses_master(p) else p.dtype
        state["velocity"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)

    def _compiled_row(
        self, item: _Item, group: dict[str, Any], lr: float, batch: _native.Batch, gpu: bool
    ) -> bool | None:
        p, g, state, master = item
        value, velocity = master if master is not None else p, state["velocity"]
        if not (velocity.dtype == value.dtype and kernels_take(value, g, lr, gpu, p, velocity)):
            return None
        regularized = self._regularize(p, g, group)  # an L1Decay here; L2Decay is the kernel's coeff
        batch.add(value, regularized, p if master is not None else None, (velocity,), lr=lr)
        return regularized is g

    def _fused_decay(self, group: dict[str, Any]) -> float:
        """The L2 coefficient fused into the kernel (0: none): the group's own float/L2Decay."""
        reg = group["weight_decay"]
        return _f32(reg.coeff) if isinstance(reg, L2Decay) else 0.0

    def _compiled_call(self, kern: _native.Kernels, batch: _native.Batch, group: dict[str, Any]) -> None:
        kern.momentum(batch.rows, batch.per, _f32(group["momentum"]), self._fused_decay(group), group["use_nesterov"])

    def _multi_tensor_call(self, kern: Any, launch: Any, group: dict[str, Any], found_inf: Tensor | None) -> None:
        _multi_tensor.momentum(
            kern, launch, found_inf, _f32(group["momentum"]), self._fused_decay(group), _f32(group["rescale_grad"]),
            group["use_nesterov"],
        )

    def _kernel(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float
    ) -> Tensor:
        velocity = state["velocity"]
        w = value.to(velocity.dtype)
        g = grad.to(w.dtype)
        # Paddle passes mu, the L2 coefficient and rescale_grad as float32 attributes.
        mu = _f32(group["momentum"])
        coeff = self._fused_decay(group)
        nesterov = group["use_nesterov"]
        if _devices.gpu_kernels(w):
            g = g * _f32(group["rescale_grad"])
            if coeff:
                g = fma(coeff, w, g)
            v = fma(velocity, mu, g)
            new = fma(-fma(v, mu, g), lr, w) if nesterov else fma(-lr, v, w)
            velocity.copy_(v)
            return new
        if not self._same_layout(w, g, velocity):
            if coeff:
                g = g + w * coeff
            v = velocity * mu + g
            velocity.copy_(v)
            return w - (g + v * mu) * lr if nesterov else w - v * lr
        # The same operations, operand order and roundings as the expressions in the docstring,
        # done in place or into reused buffers (``w`` is ``value`` itself: velocity has its dtype).
        tmp = self._buffer(w, w.dtype, "tmp")
        if coeff:
            g = torch.add(g, torch.mul(w, coeff, out=tmp), out=tmp)  # g + w*coeff
        velocity.mul_(mu).add_(g)  # velocity*mu + g
        step = self._buffer(w, w.dtype, "step")
        if nesterov:
            torch.add(g, torch.mul(velocity, mu, out=step), out=step).mul_(lr)  # (g + v*mu)*lr
        else:
            torch.mul(velocity, lr, out=step)  # v*lr
        return w.sub_(step)


def _rewrite_caller_groups(groups: list[dict[str, Any]], weight_decay: Any) -> None:
    """Paddle's quirk, kept: its Momentum rewrites the caller's group dicts (given as a list), moving
    each group's float/``L2Decay`` decay (or, without one, the optimizer's) into the keys of its
    fused kernel: ``regularization_method`` (``"l2_decay"`` or ``""``) and ``regularization_coeff``,
    and setting ``weight_decay`` to ``None`` (an ``L1Decay`` or ``None`` stays). A second optimizer
    built from the same dicts then takes no L2 decay for them (PaddleScience builds Momentum twice
    so). Done here after every check passed, so a refused construction leaves the dicts alone."""
    for group in groups:
        decay = group["weight_decay"] if "weight_decay" in group else weight_decay
        if isinstance(decay, int) and not isinstance(decay, bool) and "weight_decay" not in group:
            decay = float(decay)  # Paddle converts the optimizer's int decay, not a group's
        fused = isinstance(decay, (L2Decay, float))
        group["regularization_method"] = "l2_decay" if fused else ""
        group["regularization_coeff"] = (decay.coeff if isinstance(decay, L2Decay) else decay) if fused else 0.0
        group["weight_decay"] = None if fused else decay
