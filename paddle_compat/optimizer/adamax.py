"""``paddle.optimizer.Adamax``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _checks, _native
from .._numerics import round_f32, round_to
from ..nn.clip import ParamsGrads
from ..regularizer import WeightDecayRegularizer
from . import _multi_tensor
from ._eigen import float_attrs
from ._engine import cpu_row, gpu_row
from .lr import LRScheduler
from .optimizer import Optimizer, _Item, check_range, compute_dtype, paddle_option, tensor_options

__all__ = ["Adamax"]



class Adamax(Optimizer):
    """Adamax: ``moment = beta1*moment + (1-beta1)*grad``; ``inf_norm = max(|grad|, beta2*inf_norm
    + epsilon)``; ``param -= lr/(1-beta1_pow) * moment/inf_norm``.

    Paddle's CPU kernel (Eigen), every operation rounded in the parameter's dtype: bit-exact to
    Paddle 3.3.1 for float32 and float64. ``beta1_pow_acc`` (shape ``[1]``, the parameter's dtype,
    kept on the CPU here, on the GPU with the GPU kernels) starts at ``beta1`` and is multiplied by
    ``beta1`` after each step, also
    after a step a GradScaler skipped, as Paddle's ``_finish_update`` does. ``max`` keeps ``|grad|``
    when either side is NaN, as Eigen's. fp16/bf16 compute in float32 (Paddle has no CPU kernel for
    them); the same formulas run on CUDA (not compared with Paddle on a GPU). Differences from Paddle: ``None``
    arguments are a ``ValueError`` (Paddle asserts); non-finite hyper-parameters are refused.
    """

    # Paddle's private attributes of the options (PaddleSpeech reads them)
    _beta1, _beta2, _epsilon = paddle_option("beta1"), paddle_option("beta2"), paddle_option("epsilon")

    _host_state = ("beta1_pow_acc",)

    def __init__(
        self,
        learning_rate: float | LRScheduler = 0.001,
        beta1: float | Tensor = 0.9,
        beta2: float | Tensor = 0.999,
        epsilon: float | Tensor = 1e-8,
        parameters: Iterable[Tensor] | Iterable[dict[str, Any]] | None = None,
        weight_decay: float | WeightDecayRegularizer | None = None,
        grad_clip: Any = None,
        name: str | None = None,
        *,
        fused: bool = False,
    ) -> None:
        defaults = {"beta1": beta1, "beta2": beta2, "epsilon": epsilon}
        self._check_group(defaults)
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, False, defaults, name, fused)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_betas(group)

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        low = self._uses_master(p) or p.dtype in (torch.float16, torch.bfloat16)
        dtype = torch.float32 if low else p.dtype
        state["moment"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
        state["inf_norm"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
        pow_dtype = torch.float32 if self._uses_master(p) else p.dtype
        state["beta1_pow_acc"] = torch.full([1], group["beta1"], dtype=pow_dtype)

    def _compiled_row(
        self, item: _Item, group: dict[str, Any], lr: float, batch: _native.Batch, gpu: bool
    ) -> bool | None:
        state = item[2]
        if gpu:  # the beta power moves to the device: the kernel reads it, _finish_update advances it there
            return gpu_row(self, item, group, lr, batch, (state["moment"], state["inf_norm"]), ("beta1_pow_acc",))
        return cpu_row(self, item, group, lr, batch, (state["moment"], state["inf_norm"]), (state["beta1_pow_acc"],))

    def _compiled_call(self, kern: _native.Kernels, batch: _native.Batch, group: dict[str, Any]) -> None:
        kern.adamax(batch, *(round_f32(group[key]) for key in ("beta1", "beta2", "epsilon")))

    def _multi_tensor_call(self, kern: Any, launch: Any, group: dict[str, Any], found_inf: Tensor | None) -> None:
        _multi_tensor.adamax(kern, launch, found_inf, *(round_f32(group[key]) for key in ("beta1", "beta2", "epsilon")))

    def _kernel(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float
    ) -> Tensor:
        mt = compute_dtype(value)
        rnd = round_to(mt)
        b1, b2, eps = float_attrs(group, mt, "beta1", "beta2", "epsilon")
        w, g = value.to(mt), grad.to(mt)
        m, inf = state["moment"].to(mt), state["inf_norm"].to(mt)
        tmp, below = self._buffer(w, mt, "tmp"), self._buffer(w, torch.bool, "mask")
        m.mul_(b1).add_(torch.mul(g, rnd(1 - b1), out=tmp))  # beta1*m + (1-beta1)*g
        inf.mul_(b2).add_(eps)  # beta2*inf + eps
        a = torch.abs(g, out=tmp)
        torch.where(torch.lt(a, inf, out=below), inf, a, out=inf)  # std::max(|g|, beta2*inf + eps)
        lr_t = rnd(lr / rnd(1 - rnd(state["beta1_pow_acc"].item())))
        w = w.sub_(torch.div(m, inf, out=tmp).mul_(lr_t))  # param - lr_t*(m/inf)
        state["moment"].copy_(m)
        state["inf_norm"].copy_(inf)
        return w

    def _finish_update(self, work: list[tuple[dict[str, Any], ParamsGrads]]) -> None:
        # Paddle's _finish_update scales each beta1 power by beta1 (a ``scale`` op, in its dtype),
        # whether or not the scaler skipped the update. One multi-tensor multiply per dtype and
        # device: on a GPU the powers live there (see _compiled_row), one tiny kernel each otherwise.
        for group, pairs in work:
            powers: dict[tuple[torch.dtype, torch.device], list[Tensor]] = {}
            for p, _ in pairs:
                power = self._prepare_state(p, group)[0]["beta1_pow_acc"]
                powers.setdefault((power.dtype, power.device), []).append(power)
            for column in powers.values():
                torch._foreach_mul_(column, round_to(compute_dtype(column[0]))(group["beta1"]))


def check_betas(group: dict[str, Any]) -> None:
    """``beta1``/``beta2`` and ``epsilon`` set, finite floats (or one-element tensors, taken as their
    value); betas in [0, 1) and ``epsilon >= 0`` (Paddle's messages)."""
    tensor_options(group, "beta1", "beta2", "epsilon")
    for key in ("beta1", "beta2", "epsilon"):
        if key in group:
            _checks.required(key, group[key])
            _checks.real(key, group[key])
    for key in ("beta1", "beta2"):
        if key in group and not 0 <= group[key] < 1:
            raise ValueError(f"Invalid value of {key}, expect {key} in [0,1).")
    check_range(group, "epsilon")
