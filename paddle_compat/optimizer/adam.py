"""``paddle.optimizer.Adam``; its update is shared with ``AdamW``."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from ..regularizer import WeightDecayRegularizer
from . import _numerics
from ._numerics import fma, sqrt_rn
from .optimizer import Optimizer, compute_dtype, round_to

__all__ = ["Adam"]


class Adam(Optimizer):
    """Adam with Paddle's bias correction and rounding.

    The beta-power accumulators live on the CPU, start at ``beta1``/``beta2`` and are multiplied
    after each update, as in Paddle. Moments are float32 for fp16/bf16 parameters.

    - CPU (bit-exact to Paddle 3.3.1 for fp32): ``lr_t = lr*(sqrt(1-b2^t)/(1-b1^t))`` and
      ``eps_t = eps*sqrt(1-b2^t)`` in float32, then ``param - lr_t*m/(sqrt(v)+eps_t)``, with the
      fused multiply-adds of Paddle's AVX-512 kernel on AVX-512F hosts, and separate roundings
      elsewhere (Paddle's reference kernel, which also serves float64 everywhere: checked there).
    - CUDA: Paddle's GPU form ``m/(sqrt(v)/sqrt(1-b2^t) + eps) * -(lr/(1-b1^t))`` with fused
      multiply-adds where nvcc contracts (not verified on a GPU).

    ``weight_decay`` is L2 regularization added to the gradient. ``lazy_mode`` only concerns sparse
    gradients, which torch parameters here do not have. ``use_multi_tensor`` is accepted but computed
    with the per-tensor kernel: Paddle's merged CPU kernel rounds differently (last bits).
    """

    _host_state = ("beta1_pow_acc", "beta2_pow_acc")

    def __init__(
        self,
        learning_rate: float | Any = 0.001,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
        parameters: Iterable[Tensor] | Iterable[dict[str, Any]] | None = None,
        weight_decay: float | WeightDecayRegularizer | None = None,
        grad_clip: Any = None,
        lazy_mode: bool = False,
        multi_precision: bool = False,
        use_multi_tensor: bool = False,
        amsgrad: bool = False,
        name: str | None = None,
    ) -> None:
        defaults = {"beta1": beta1, "beta2": beta2, "epsilon": epsilon, "lazy_mode": lazy_mode}
        self._check_group(defaults)
        self._amsgrad = bool(amsgrad)
        self._use_multi_tensor = use_multi_tensor
        self._use_lowprecision_moment = False
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, multi_precision, defaults, name)

    def _check_group(self, group: dict[str, Any]) -> None:
        for key in ("beta1", "beta2", "epsilon"):
            if key in group:
                if group[key] is None:
                    raise ValueError(f"{key} is not set")
                if isinstance(group[key], bool) or not isinstance(group[key], (int, float)):
                    raise TypeError(f"{key} should be a float, but received {type(group[key]).__name__}")
        for key in ("beta1", "beta2"):
            if key in group and not 0 <= group[key] < 1:
                raise ValueError(f"Invalid value of {key}, expect {key} in [0,1).")
        if "epsilon" in group and not 0 <= group["epsilon"]:
            raise ValueError("Invalid value of epsilon, expect epsilon >= 0.")

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        low = p.dtype in (torch.float16, torch.bfloat16)
        dtype = torch.float32 if low and not self._use_lowprecision_moment else p.dtype
        state["moment1"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
        state["moment2"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
        if self._amsgrad:
            state["moment2_max"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
        pow_dtype = torch.float32 if low else p.dtype
        state["beta1_pow_acc"] = torch.full([1], group["beta1"], dtype=pow_dtype)
        state["beta2_pow_acc"] = torch.full([1], group["beta2"], dtype=pow_dtype)

    def _decay(self, param: Tensor, w: Tensor, group: dict[str, Any], lr: float, fused: bool) -> tuple[Tensor, float]:
        """AdamW's decoupled decay before the moments: the decayed value and the rate for Adam."""
        return w, lr

    def _kernel(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float
    ) -> Tensor:
        mt = compute_dtype(value)
        rnd = round_to(mt)
        w, g = value.to(mt), grad.to(mt)
        m, v = state["moment1"].to(mt), state["moment2"].to(mt)
        b1, b2, eps = rnd(group["beta1"]), rnd(group["beta2"]), rnd(group["epsilon"])
        b1p, b2p = state["beta1_pow_acc"].item(), state["beta2_pow_acc"].item()
        cuda = _numerics.gpu_kernels(w)
        # Paddle's AVX-512 kernel is float32 only; double and non-AVX-512 hosts use the reference one.
        fused = not cuda and mt == torch.float32 and _numerics.cpu_kernels_use_fma()
        w, lr = self._decay(param, w, group, lr, fused)

        if cuda or fused:
            m = fma(b1, m, g * rnd(1 - b1))
            v = fma(b2, v, (g * rnd(1 - b2)) * g) if cuda else fma(b2, v, (g * g) * rnd(1 - b2))
        else:
            m = m * b1 + g * rnd(1 - b1)
            v = v * b2 + (g * rnd(1 - b2)) * g
        v_used = v
        if self._amsgrad:
            v_used = torch.maximum(v, state["moment2_max"].to(mt))
            state["moment2_max"].copy_(v_used)

        if cuda:
            denom = sqrt_rn(v_used) / rnd(math.sqrt(rnd(1 - b2p))) + eps
            w = fma(m / denom, -rnd(lr / rnd(1 - b1p)), w)
        else:
            root = rnd(math.sqrt(rnd(1 - b2p)))
            lr_t = rnd(lr * rnd(root / rnd(1 - b1p)))
            eps_t = rnd(eps * root)
            step = m / (sqrt_rn(v_used) + eps_t)
            w = fma(step, -lr_t, w) if fused else w + step * -lr_t

        state["moment1"].copy_(m)
        state["moment2"].copy_(v)
        state["beta1_pow_acc"].mul_(b1)
        state["beta2_pow_acc"].mul_(b2)
        return w
