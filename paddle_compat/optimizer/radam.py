"""``paddle.optimizer.RAdam``."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _devices, _native
from .._numerics import cuda_div, round_f32, round_to
from . import _multi_tensor
from ._eigen import adam_moments_, float_attrs, sqrt_like_eigen
from ._engine import cpu_row, gpu_row
from .lr import LRScheduler
from .nadam import check_adam_family, check_learning_rate, init_powers_and_moments
from .optimizer import Optimizer, _Item, compute_dtype, paddle_option

__all__ = ["RAdam"]



class RAdam(Optimizer):
    """Rectified Adam: the adaptive step only once the variance estimate is tractable
    (``rho_t > 5``), plain bias-corrected momentum before.

    Paddle's CPU kernel (Eigen), every operation rounded in the compute dtype: bit-exact to Paddle
    3.3.1 for float64, and for float32 with the CPU's rsqrt (``_eigen.sqrt_like_eigen``). Paddle
    keeps ``beta1_pow``, ``beta2_pow`` and ``rho`` as tensors of the parameter's shape whose
    elements are all equal (its kernel reads ``rho``'s first); here they are ``[1]`` tensors on the
    CPU (the GPU kernels move them to the GPU; the parity kit converts both ways), which gives the
    same bits. Moments are float32 for
    fp16/bf16 parameters. The same formulas run on CUDA (not compared with Paddle on a GPU), a division
    by a scalar as torch's: times its reciprocal;
    fp16/bf16 compute in float32 (Paddle has no CPU kernel for them). Differences from Paddle: ``weight_decay`` is a
    regularizer or a float (Paddle also lists a Tensor); non-finite hyper-parameters are refused.
    """

    # Paddle's private attributes of the options (PaddleSpeech reads them)
    _beta1, _beta2, _epsilon = paddle_option("beta1"), paddle_option("beta2"), paddle_option("epsilon")

    _host_state = ("beta1_pow", "beta2_pow", "rho")

    def __init__(
        self,
        learning_rate: float | LRScheduler = 0.001,
        beta1: float | Tensor = 0.9,
        beta2: float | Tensor = 0.999,
        epsilon: float | Tensor = 1.0e-8,
        parameters: Iterable[Tensor] | Iterable[dict[str, Any]] | None = None,
        weight_decay: float | Any = None,
        grad_clip: Any = None,
        name: str | None = None,
        *,
        fused: bool = False,
    ) -> None:
        check_learning_rate(learning_rate)
        defaults = {"beta1": beta1, "beta2": beta2, "epsilon": epsilon}
        self._check_group(defaults)
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, False, defaults, name, fused)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_adam_family(group)

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        init_powers_and_moments(p, state, self._host_state)

    def _compiled_row(
        self, item: _Item, group: dict[str, Any], lr: float, batch: _native.Batch, gpu: bool
    ) -> bool | None:
        state = item[2]
        moments = (state["moment1"], state["moment2"])
        if gpu:  # the powers move to the device: the kernels read and advance them there
            return gpu_row(self, item, group, lr, batch, moments, self._host_state)
        return cpu_row(self, item, group, lr, batch, moments, tuple(state[key] for key in self._host_state))

    def _compiled_call(self, kern: _native.Kernels, batch: _native.Batch, group: dict[str, Any]) -> None:
        kern.radam(batch, *(round_f32(group[key]) for key in ("beta1", "beta2", "epsilon")))

    def _multi_tensor_call(self, kern: Any, launch: Any, group: dict[str, Any], found_inf: Tensor | None) -> None:
        _multi_tensor.radam(kern, launch, found_inf, *(round_f32(group[key]) for key in ("beta1", "beta2", "epsilon")))

    def _kernel(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float
    ) -> Tensor:
        mt = compute_dtype(value)
        rnd = round_to(mt)
        b1, b2, eps = float_attrs(group, mt, "beta1", "beta2", "epsilon")
        # the scalar prologue, as Paddle's kernel computes it on every (equal) element
        rho_inf = rnd(rnd(2 / rnd(1 - b2)) - 1)
        beta1_pow = rnd(state["beta1_pow"].item() * b1)
        beta2_pow = rnd(state["beta2_pow"].item() * b2)
        rho = rnd(rnd(rnd(state["rho"].item() * rnd(b2 - beta2_pow)) + beta2_pow) / rnd(1 - beta2_pow))
        rho_t = rnd(rho_inf - rnd(2 * rho))

        w, g = value.to(mt), grad.to(mt)
        m1, m2 = state["moment1"].to(mt), state["moment2"].to(mt)
        tmp, step = self._buffer(w, mt, "tmp"), self._buffer(w, mt, "step")
        adam_moments_(m1, m2, g, b1, b2, rnd, tmp)
        divide = cuda_div if _devices.gpu_kernels(value) else torch.div  # as torch's kernels divide there
        divide(m1, rnd(1 - beta1_pow), out=step).mul_(lr)  # lr*m1_hat
        if rho_t > 5:
            num = rnd(rnd(rnd(rho_t - 4) * rnd(rho_t - 2)) * rho_inf)
            den = rnd(rnd(rnd(rho_inf - 4) * rnd(rho_inf - 2)) * rho_t)
            r_t = rnd(math.sqrt(rnd(num / den)))
            # sqrt(1 - beta2_pow)/(sqrt(m2) + eps); Paddle takes the first root over a tensor of
            # equal elements, so its packets and its tail may differ in the last bits
            root = sqrt_like_eigen(tmp.fill_(rnd(1 - beta2_pow)), out=tmp)
            l_t = root.div_(sqrt_like_eigen(m2, out=self._buffer(w, mt, "den")).add_(eps))
            step.mul_(r_t).mul_(l_t)  # ((lr*m1_hat)*r_t)*l_t
        w = w.sub_(step)
        state["moment1"].copy_(m1)
        state["moment2"].copy_(m2)
        state["beta1_pow"].fill_(beta1_pow)
        state["beta2_pow"].fill_(beta2_pow)
        state["rho"].fill_(rho)
        return w
