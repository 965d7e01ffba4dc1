"""``paddle.optimizer.Lamb``."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _checks, _devices, _native
from .._dtensor import is_dtensor
from .._numerics import cuda_div, round_f32, round_to, sqrt_rn_into
from ..nn.clip import squared_l2_norm, squared_l2_norms
from . import _multi_tensor
from ._eigen import adam_moments_, float_attrs
from ._engine import cpu_row, gpu_row
from .adam import pow_start
from .adamax import check_betas
from .lr import LRScheduler
from .optimizer import Optimizer, _Item, compute_dtype, paddle_option

__all__ = ["Lamb"]

# Elements of the compiled kernel's groups (see _compiled_call): few thread starts for many small
# tensors, while a group's updates stay in the last-level cache between its passes.
_GROUP = 1 << 20



class Lamb(Optimizer):
    """LAMB: Adam's bias-corrected direction plus decoupled weight decay, scaled per parameter by
    the trust ratio ``||param|| / ||direction||``.

    ``direction = m_hat/(sqrt(v_hat) + epsilon) + lamb_weight_decay*param``; ``param -= lr *
    ratio * direction`` with ``ratio = ||param||/||direction||`` (1 when either norm is 0).
    ``exclude_from_weight_decay_fn(param)`` returning True drops the decay for that parameter. As
    in Paddle, a parameter without decay (excluded, or ``lamb_weight_decay=0``) takes no trust
    ratio (1) unless ``always_adapt=True``. The beta powers live on the CPU as in Paddle (on the GPU
    with the GPU kernels); moments
    (and beta powers) are float32 for fp16/bf16 parameters; with ``multi_precision`` the update
    runs on a float32 master weight.

    Paddle's CPU kernel, every operation rounded in the compute dtype and the two squared norms
    summed in Eigen's order (``nn.clip.squared_l2_norm``): bit-exact to Paddle 3.3.1 for float32 and
    float64. The same formulas run on CUDA (Paddle's CUDA norms sum in another order: not
    reproduced), a division by a scalar as torch's: times its reciprocal;
    fp16/bf16 compute in float32 (Paddle has no CPU kernel for them). Differences
    from Paddle: ``None`` arguments are a ``ValueError`` (Paddle asserts); non-finite
    hyper-parameters are refused.
    """

    # Paddle's private attributes of the options (PaddleSpeech reads them)
    _beta1, _beta2, _epsilon = paddle_option("beta1"), paddle_option("beta2"), paddle_option("epsilon")
    _lamb_weight_decay = paddle_option("lamb_weight_decay")
    _exclude_from_weight_decay_fn = paddle_option("exclude_from_weight_decay_fn")

    _host_state = ("beta1_pow_acc", "beta2_pow_acc")

    def __init__(
        self,
        learning_rate: float | LRScheduler = 0.001,
        lamb_weight_decay: float = 0.01,
        beta1: float | Tensor = 0.9,
        beta2: float | Tensor = 0.999,
        epsilon: float | Tensor = 1e-6,
        parameters: Iterable[Tensor] | Iterable[dict[str, Any]] | None = None,
        grad_clip: Any = None,
        exclude_from_weight_decay_fn: Callable[[Tensor], bool] | None = None,
        multi_precision: bool = False,
        always_adapt: bool = False,
        name: str | None = None,
        *,
        fused: bool = False,
    ) -> None:
        defaults = {
            "beta1": beta1,
            "beta2": beta2,
            "epsilon": epsilon,
            "lamb_weight_decay": lamb_weight_decay,
            "exclude_from_weight_decay_fn": exclude_from_weight_decay_fn,
        }
        self._check_group(defaults)
        self.always_adapt = _checks.flag("always_adapt", always_adapt)
        super().__init__(learning_rate, parameters, None, grad_clip, multi_precision, defaults, name, fused)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_betas(group)
        if "lamb_weight_decay" in group:
            _checks.required("lamb_weight_decay", group["lamb_weight_decay"])
            _checks.real("lamb_weight_decay", group["lamb_weight_decay"])
        fn = group.get("exclude_from_weight_decay_fn")
        if fn is not None and not callable(fn):
            raise TypeError(
                "exclude_from_weight_decay_fn should be a callable taking a parameter, "
                f"but received {type(fn).__name__}"
            )

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        if is_dtensor(p):  # before any update: each rank would take its shard's norms for the whole's
            raise TypeError(
                "Lamb cannot update sharded parameters (DTensor: FSDP2, tensor parallel): its trust ratio "
                "needs each parameter's whole norm"
            )
        dtype = compute_dtype(p)
        state["moment1"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
        state["moment2"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
        state["beta1_pow_acc"] = torch.full([1], pow_start(group, "beta1"), dtype=dtype)
        state["beta2_pow_acc"] = torch.full([1], pow_start(group, "beta2"), dtype=dtype)

    def _compiled_row(
        self, item: _Item, group: dict[str, Any], lr: float, batch: _native.Batch, gpu: bool
    ) -> bool | None:
        p, _, state, master = item
        value = master if master is not None else p
        # float32/float64 values (the parameter, or its master weight): the kernel sums their squares
        if value.dtype not in (torch.float32, torch.float64):
            return None
        fn = group["exclude_from_weight_decay_fn"]
        decay = 0.0 if fn is not None and fn(p) else float_attrs(group, value.dtype, "lamb_weight_decay")[0]
        states, powers = (state["moment1"], state["moment2"]), (state["beta1_pow_acc"], state["beta2_pow_acc"])
        if gpu:  # the beta powers move to the device: the launch reads and advances them there
            kept = gpu_row(self, item, group, lr, batch, states, self._host_state, decay=decay)
        else:
            kept = cpu_row(self, item, group, lr, batch, states, powers, decay=decay)
        # the callback is asked again at every step, as by the torch form
        return None if kept is None else kept and fn is None

    def _compiled_call(self, kern: _native.Kernels, batch: _native.Batch, group: dict[str, Any]) -> None:
        # The kernel takes the tensors in groups whose updates fit this buffer (float64 where a row
        # computes in it): the largest tensor's at least, else _GROUP elements, or all when fewer.
        sizes = batch.rows[_native.S_N :: _native.ROW]
        n = max(max(sizes), min(sum(sizes), _GROUP))
        wide = any(t.dtype == torch.float64 for t in batch.tensors)
        dtype = torch.float64 if wide else torch.float32
        directions = self._compat_engine.flat(n, dtype, torch.device("cpu"), "direction")
        b1, b2, eps = (round_f32(group[key]) for key in ("beta1", "beta2", "epsilon"))
        kern.lamb(batch, directions, b1, b2, eps, self.always_adapt)

    def _multi_tensor_call(self, kern: Any, launch: Any, group: dict[str, Any], found_inf: Tensor | None) -> None:
        b1, b2, eps = (round_f32(group[key]) for key in ("beta1", "beta2", "epsilon"))
        _multi_tensor.lamb(kern, launch, found_inf, b1, b2, eps, self.always_adapt, squared_l2_norms)

    def _kernel(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float
    ) -> Tensor:
        mt = compute_dtype(value)
        rnd = round_to(mt)
        b1, b2, eps = float_attrs(group, mt, "beta1", "beta2", "epsilon")
        fn = group["exclude_from_weight_decay_fn"]
        decay = 0.0 if fn is not None and fn(param) else float_attrs(group, mt, "lamb_weight_decay")[0]
        b1p, b2p = state["beta1_pow_acc"].item(), state["beta2_pow_acc"].item()
        w, g = value.to(mt), grad.to(mt)
        m1, m2 = state["moment1"].to(mt), state["moment2"].to(mt)
        tmp, direction = self._buffer(w, mt, "tmp"), self._buffer(w, mt, "direction")
        adam_moments_(m1, m2, g, b1, b2, rnd, tmp)
        # direction = (m1/(1-b1p)) / (sqrt(m2/(1-b2p)) + eps) + decay*param (numext::sqrt: exact)
        wide = self._buffer(w, torch.float64, "wide") if mt != torch.float64 else None
        divide = cuda_div if _devices.gpu_kernels(value) else torch.div  # as torch's kernels divide there
        sqrt_rn_into(direction, divide(m2, rnd(1 - b2p), out=tmp), wide).add_(eps)
        torch.div(divide(m1, rnd(1 - b1p), out=tmp), direction, out=direction)
        direction.add_(torch.mul(w, decay, out=tmp))
        p_norm = rnd(math.sqrt(squared_l2_norm(w).item()))  # numext::sqrt: exact
        d_norm = rnd(math.sqrt(squared_l2_norm(direction).item()))
        # Without decay (and always_adapt off) there is no adaptation: the trust ratio is 1.
        adapt = decay != 0 or self.always_adapt
        ratio = rnd(p_norm / d_norm) if adapt and p_norm > 0 and d_norm > 0 else 1.0
        w = w.sub_(direction.mul_(rnd(lr * ratio)))  # param - (lr*ratio)*direction
        state["moment1"].copy_(m1)
        state["moment2"].copy_(m2)
        state["beta1_pow_acc"].mul_(b1)
        state["beta2_pow_acc"].mul_(b2)
        return w
