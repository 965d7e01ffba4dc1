"""``paddle.optimizer.NAdam``."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _checks, _devices, _native
from .._numerics import cuda_div, round_f32, round_to
from . import _multi_tensor
from ._eigen import adam_moments_, float_attrs, pow_like_libm, sqrt_like_eigen
from ._engine import cpu_row, gpu_row
from .lr import LRScheduler
from .optimizer import Optimizer, _Item, compute_dtype, paddle_option, tensor_options

__all__ = ["NAdam"]


_DECAY_BASE = 0.96  # Paddle's constant in the momentum schedule


class NAdam(Optimizer):
    """NAdam with Paddle's momentum schedule: ``mu_t = beta1*(1 - 0.5*0.96**(t*momentum_decay))``.

    Paddle's CPU kernel (Eigen), every operation rounded in the compute dtype, ``pow`` as libm's:
    bit-exact to Paddle 3.3.1 for float64, and for float32 with the CPU's rsqrt
    (``_eigen.sqrt_like_eigen``). Paddle keeps ``momentum_decay_pow``, ``beta2_pow`` and
    ``mu_product`` as tensors of the parameter's shape whose elements are all equal; here they are
    ``[1]`` tensors on the CPU (the GPU kernels move them to the GPU; the parity kit converts both
    ways), which gives the same bits.
    Moments are float32 for fp16/bf16 parameters. The same formulas run on CUDA (not verified on a
    GPU), a division by a scalar as torch's: times its reciprocal;
    fp16/bf16 compute in float32 (Paddle has no CPU kernel for them). Differences from Paddle:
    ``weight_decay`` is a regularizer or a float (Paddle also lists a Tensor); non-finite
    hyper-parameters are refused.
    """

    # Paddle's private attributes of the options (PaddleSpeech reads them)
    _beta1, _beta2, _epsilon = paddle_option("beta1"), paddle_option("beta2"), paddle_option("epsilon")
    _momentum_decay = paddle_option("momentum_decay")

    _host_state = ("momentum_decay_pow", "beta2_pow", "mu_product")

    def __init__(
        self,
        learning_rate: float | LRScheduler = 0.002,
        beta1: float | Tensor = 0.9,
        beta2: float | Tensor = 0.999,
        epsilon: float | Tensor = 1.0e-8,
        momentum_decay: float = 0.004,
        parameters: Iterable[Tensor] | Iterable[dict[str, Any]] | None = None,
        weight_decay: float | Any = None,
        grad_clip: Any = None,
        name: str | None = None,
        *,
        fused: bool = False,
    ) -> None:
        check_learning_rate(learning_rate)
        defaults = {"beta1": beta1, "beta2": beta2, "epsilon": epsilon, "momentum_decay": momentum_decay}
        self._check_group(defaults)
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, False, defaults, name, fused)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_adam_family(group)
        if "momentum_decay" in group:
            value = group["momentum_decay"]
            _checks.required("momentum_decay", value)
            _checks.real("momentum_decay", value)
            if not 0.0 <= value:
                raise ValueError(f"Invalid momentum_decay value: {value}, expect momentum_decay >= 0.")

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        init_powers_and_moments(p, state, self._host_state)

    def _compiled_row(
        self, item: _Item, group: dict[str, Any], lr: float, batch: _native.Batch, gpu: bool
    ) -> bool | None:
        state = item[2]
        powers = (state["momentum_decay_pow"], state["beta2_pow"], state["mu_product"])
        moments = (state["moment1"], state["moment2"])
        if gpu:
            # The GPU kernel looks the schedule's power up in the sequence it follows from 1 (a
            # power from elsewhere, as read here on the host, takes the per-tensor form).
            decay_pow = powers[0]
            on_host = _devices.addressable(decay_pow) and decay_pow.is_cpu and decay_pow.numel() == 1
            if on_host and decay_pow.item() not in _decay_sequence()[1]:
                return None
            return gpu_row(self, item, group, lr, batch, moments, self._host_state)
        return cpu_row(self, item, group, lr, batch, moments, powers)

    def _multi_tensor_call(self, kern: Any, launch: Any, group: dict[str, Any], found_inf: Tensor | None) -> None:
        b1, b2, eps, md = (round_f32(group[key]) for key in ("beta1", "beta2", "epsilon", "momentum_decay"))
        _multi_tensor.nadam(kern, launch, found_inf, b1, b2, eps, round_f32(_DECAY_BASE), lambda: _decay_powers(md))

    def _compiled_call(self, kern: _native.Kernels, batch: _native.Batch, group: dict[str, Any]) -> None:
        b1, b2, eps, decay = (round_f32(group[key]) for key in ("beta1", "beta2", "epsilon", "momentum_decay"))
        kern.nadam(batch, b1, b2, eps, decay, _DECAY_BASE)

    def _kernel(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float
    ) -> Tensor:
        mt = compute_dtype(value)
        rnd = round_to(mt)
        b1, b2, eps = float_attrs(group, mt, "beta1", "beta2", "epsilon")
        powers = tuple(state[key] for key in self._host_state)
        decay_pow, beta2_pow, mu_product, mu_t, mu_next, mu_product_next = _prologue(powers, group, mt)

        w, g = value.to(mt), grad.to(mt)
        m1, m2 = state["moment1"].to(mt), state["moment2"].to(mt)
        tmp, m1_hat, den = (self._buffer(w, mt, slot) for slot in ("tmp", "m1_hat", "den"))
        adam_moments_(m1, m2, g, b1, b2, rnd, tmp)
        divide = cuda_div if _devices.gpu_kernels(value) else torch.div  # as torch's kernels divide there
        # m1_hat = mu_next*m1/(1 - mu_product_next) + (1 - mu_t)*g/(1 - mu_product)
        divide(torch.mul(m1, mu_next, out=m1_hat), rnd(1 - mu_product_next), out=m1_hat)
        m1_hat.add_(divide(torch.mul(g, rnd(1 - mu_t), out=tmp), rnd(1 - mu_product), out=tmp))
        # sqrt(m2/(1 - beta2_pow)) + eps
        sqrt_like_eigen(divide(m2, rnd(1 - beta2_pow), out=den), out=den).add_(eps)
        w = w.sub_(m1_hat.mul_(lr).div_(den))  # param - lr*m1_hat/denom
        state["moment1"].copy_(m1)
        state["moment2"].copy_(m2)
        state["momentum_decay_pow"].fill_(decay_pow)
        state["beta2_pow"].fill_(beta2_pow)
        state["mu_product"].fill_(mu_product)
        return w


@functools.cache
def _decay_sequence() -> tuple[list[float], frozenset[float]]:
    """The float32 values ``momentum_decay_pow`` takes from 1: each step times 0.96 (rounded), down to
    the subnormal it then keeps (2466 values, descending), and as a set with 1 (where it starts)."""
    base, values = round_f32(_DECAY_BASE), [round_f32(_DECAY_BASE)]
    while round_f32(values[-1] * base) != values[-1]:
        values.append(round_f32(values[-1] * base))
    return values, frozenset([1.0, *values])


@functools.lru_cache(maxsize=8)
def _decay_powers(md: float) -> tuple[list[float], list[float], float]:
    """For the GPU kernel: ``_decay_sequence``'s values, each to the power ``md`` (libm's ``powf``,
    as the torch form), and 0.96's."""
    values = _decay_sequence()[0]
    base = round_f32(_DECAY_BASE)
    return values, [pow_like_libm(v, md, torch.float32) for v in values], pow_like_libm(base, md, torch.float32)


def _prologue(powers: tuple[Tensor, ...], group: dict[str, Any], mt: torch.dtype) -> tuple[float, ...]:
    """The scalar prologue, as Paddle's kernel computes it on every (equal) element, from the three
    powers (``NAdam._host_state``): the next powers (decay, beta2, mu product), mu_t, mu_next and
    the next mu product."""
    rnd = round_to(mt)
    b1, b2, md = float_attrs(group, mt, "beta1", "beta2", "momentum_decay")
    decay_pow = rnd(powers[0].item() * rnd(_DECAY_BASE))
    beta2_pow = rnd(powers[1].item() * b2)
    half = rnd(0.5 * pow_like_libm(decay_pow, md, mt))
    mu_t = rnd(b1 * rnd(1 - half))
    mu_next = rnd(b1 * rnd(1 - rnd(half * pow_like_libm(rnd(_DECAY_BASE), md, mt))))
    mu_product = rnd(powers[2].item() * mu_t)
    return decay_pow, beta2_pow, mu_product, mu_t, mu_next, rnd(mu_product * mu_next)


def init_powers_and_moments(p: Tensor, state: dict[str, Any], powers: tuple[str, ...]) -> None:
    """NAdam's and RAdam's state: ``powers`` at 1 (``[1]``, see the classes) and two moments, in
    float32 for fp16/bf16 parameters."""
    dtype = compute_dtype(p)
    for key in powers:
        state[key] = torch.ones([1], dtype=dtype)
    for key in ("moment1", "moment2"):
        state[key] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)


def check_learning_rate(learning_rate: Any) -> None:
    """NAdam's and RAdam's own check of a float rate (Paddle's message)."""
    if isinstance(learning_rate, (float, int)) and not isinstance(learning_rate, bool) and not 0.0 <= learning_rate:
        raise ValueError(f"Invalid learning rate: {learning_rate}, expect learning_rate >= 0.")


def check_adam_family(group: dict[str, Any]) -> None:
    """``epsilon`` >= 0 and betas in [0, 1), with NAdam's and RAdam's messages (each may be a
    one-element tensor, taken as its value)."""
    tensor_options(group, "beta1", "beta2", "epsilon")
    for key in ("beta1", "beta2", "epsilon"):
        if key in group:
            _checks.required(key, group[key])
            _checks.real(key, group[key])
    if "epsilon" in group and not 0.0 <= group["epsilon"]:
        raise ValueError(f"Invalid epsilon value: {group['epsilon']}, expect epsilon >= 0.")
    for key in ("beta1", "beta2"):
        if key in group and not 0.0 <= group[key] < 1.0:
            raise ValueError(f"Invalid {key}: {group[key]}, expect 0. <= {key} < 1.0.")
