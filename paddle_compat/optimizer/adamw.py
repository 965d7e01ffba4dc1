"""``paddle.optimizer.AdamW``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _checks
from .._numerics import fma_scalar, round_to
from .adam import Adam
from .lr import LRScheduler
from .optimizer import paddle_option

__all__ = ["AdamW"]

_f32 = round_to(torch.float32)


class AdamW(Adam):
    """Adam with decoupled weight decay, applied to the parameter *before* the moments, as Paddle.

    ``weight_decay`` is the decay coefficient (float, int or a 0-D tensor), not a regularizer.
    ``apply_decay_param_fun(name)`` selects the parameters that decay: torch parameters have no
    names, so pass ``parameters=model.named_parameters()`` (or set ``param.name``) to use it.
    ``lr_ratio(param)`` scales the rate per parameter.

    - CPU (bit-exact to Paddle 3.3.1 for fp32): ``param - (lr*lr_ratio*coeff)*param`` (one fused
      multiply-add on AVX-512F hosts), then Adam's CPU update.
    - CUDA: ``param * (1 - lr'*coeff)`` with ``lr' = lr*lr_ratio`` (the factor one fused multiply-add,
      as nvcc contracts Paddle's kernel), then Adam's GPU update with ``lr'``.

    Paddle refuses ``lr_ratio`` on CPU (``NotImplementedError``); here it works on CPU with the GPU
    kernel's meaning (the ratio scales both the decay and the Adam step).
    """

    # Paddle's private attributes of the options (PaddleSpeech reads them)
    _weight_decay = paddle_option("weight_decay")  # the decay coefficient, a float

    def __init__(
        self,
        learning_rate: float | LRScheduler = 0.001,
        beta1: float | Tensor = 0.9,
        beta2: float | Tensor = 0.999,
        epsilon: float | Tensor = 1e-8,
        parameters: Iterable[Tensor] | Iterable[dict[str, Any]] | None = None,
        weight_decay: float | Tensor = 0.01,
        use_lowprecision_moment: bool = False,
        lr_ratio: Callable[[Tensor], float] | None = None,
        apply_decay_param_fun: Callable[[str], bool] | None = None,
        grad_clip: Any = None,
        lazy_mode: bool = False,
        multi_precision: bool = False,
        amsgrad: bool = False,
        name: str | None = None,
        *,
        fused: bool = False,
    ) -> None:
        if lr_ratio is not None and not callable(lr_ratio):
            raise TypeError(f"lr_ratio should be a callable taking a parameter, but received {type(lr_ratio).__name__}")
        if apply_decay_param_fun is not None and not callable(apply_decay_param_fun):
            raise TypeError(
                "apply_decay_param_fun should be a callable taking a parameter name, "
                f"but received {type(apply_decay_param_fun).__name__}"
            )
        self._lr_ratio = lr_ratio
        self._apply_decay_param_fun = apply_decay_param_fun
        super().__init__(
            learning_rate, beta1, beta2, epsilon, parameters, weight_decay, grad_clip, lazy_mode, multi_precision,
            amsgrad=amsgrad, name=name, fused=fused,
        )
        self._use_lowprecision_moment = bool(use_lowprecision_moment)
        if apply_decay_param_fun is not None:
            for group in self.param_groups:
                for p in group["params"]:
                    self._param_name(p, group)  # fail now, not at the first step

    def _check_weight_decay(self, weight_decay: Any) -> float:
        if isinstance(weight_decay, Tensor) and weight_decay.numel() == 1:
            weight_decay = weight_decay.item()
        if not _checks.is_real(weight_decay):
            raise TypeError("weight_decay should be int, float or Tensor.")
        # Paddle takes NaN and inf, and every decayed parameter becomes NaN
        return float(_checks.real("weight_decay", weight_decay))

    def _regularizer(self, group: dict[str, Any]) -> None:
        return None  # the decay is decoupled, inside the kernel

    @staticmethod
    def _param_name(p: Tensor, group: dict[str, Any]) -> str:
        names = group.get("param_names")
        if names is not None:
            return names[[q is p for q in group["params"]].index(True)]
        name = getattr(p, "name", None)
        if not isinstance(name, str):
            raise ValueError(
                "apply_decay_param_fun needs parameter names: pass parameters=model.named_parameters() "
                "or set a name on each parameter (param.name = ...)"
            )
        return name

    def _per_param_rates(self) -> bool:
        return self._lr_ratio is not None or self._apply_decay_param_fun is not None

    def _decay_terms(self, param: Tensor, group: dict[str, Any], lr: float, rnd: Any) -> tuple[float, float]:
        """The parameter's rate ``lr * lr_ratio`` and its decay coefficient (0: no decay)."""
        # Paddle passes lr_ratio and the coefficient as float32 attributes, whatever the dtype.
        ratio = _f32(float(self._lr_ratio(param))) if self._lr_ratio is not None else 1.0
        with_decay = self._apply_decay_param_fun is None or self._apply_decay_param_fun(self._param_name(param, group))
        return rnd(lr * ratio), _f32(group["weight_decay"]) if with_decay else 0.0

    def _decay_rate(self, param: Tensor, group: dict[str, Any], lr: float, rnd: Any) -> tuple[float | None, float]:
        lr_scaled, coeff = self._decay_terms(param, group, lr, rnd)
        # Only a zero coefficient skips the decay: a rate that rounds to 0 still runs it (-0 becomes +0).
        return (rnd(lr_scaled * coeff) if coeff else None), lr_scaled

    def _gpu_decay_factor(self, param: Tensor, group: dict[str, Any], lr: float, dtype: torch.dtype) -> float:
        # ``1 - lr*coeff``, which nvcc contracts into one FMA in Paddle's kernel
        lr_scaled, coeff = self._decay_terms(param, group, lr, round_to(dtype))
        return fma_scalar(-lr_scaled, coeff, 1.0, dtype) if coeff else 1.0
