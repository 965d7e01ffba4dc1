"""``paddle.optimizer.Adam``; its update is shared with ``AdamW``."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor

from .. import _checks, _devices, _native, _numerics, _paddle_cpu
from .._numerics import fma, fma_into, round_to, sqrt_rn, sqrt_rn_into
from ..regularizer import WeightDecayRegularizer
from . import _multi_tensor
from ._engine import kernels_take
from .lr import LRScheduler
from .optimizer import Optimizer, TensorOption, _Item, compute_dtype, paddle_option, tensor_options

__all__ = ["Adam"]


def _fused_profile() -> bool:
    """Whether the float32 CPU update takes the fused form of Paddle's AVX-512F kernel (``_paddle_cpu``)."""
    return _paddle_cpu.profile() == "avx512f"


class Adam(Optimizer):
    """Adam with Paddle's bias correction and rounding.

    The beta-power accumulators live on the CPU, start at ``beta1``/``beta2`` and are multiplied
    after each update, as in Paddle. Moments are float32 for fp16/bf16 parameters.

    - CPU (bit-exact to Paddle 3.3.1): ``lr_t = lr*(sqrt(1-b2^t)/(1-b1^t))`` and
      ``eps_t = eps*sqrt(1-b2^t)`` in float32, then ``param - lr_t*m/(sqrt(v)+eps_t)`` as the host's
      Paddle computes it (``paddle_compat._paddle_cpu``): on AVX-512F hosts with the fused multiply-adds
      of Paddle's JIT kernel, elsewhere as its reference kernel (float32 moments, the parameter update
      in double, rounded once), which also serves float64 on every host.
    - CUDA: Paddle's GPU form ``m/(sqrt(v)/sqrt(1-b2^t) + eps) * -(lr/(1-b1^t))`` with fused
      multiply-adds where nvcc contracts (not compared with Paddle on a GPU).

    ``weight_decay`` is L2 regularization added to the gradient. ``lazy_mode`` only concerns sparse
    gradients, which torch parameters here do not have. ``use_multi_tensor`` is accepted but computed
    with the per-tensor kernel: Paddle's merged CPU kernel rounds differently (last bits).
    """

    # Paddle's private attributes of the options (PaddleSpeech reads them)
    _beta1, _beta2, _epsilon = paddle_option("beta1"), paddle_option("beta2"), paddle_option("epsilon")
    _lazy_mode = paddle_option("lazy_mode")

    _host_state = ("beta1_pow_acc", "beta2_pow_acc")

    def __init__(
        self,
        learning_rate: float | LRScheduler = 0.001,
        beta1: float | Tensor = 0.9,
        beta2: float | Tensor = 0.999,
        epsilon: float | Tensor = 1e-8,
        parameters: Iterable[Tensor] | Iterable[dict[str, Any]] | None = None,
        weight_decay: float | Tensor | WeightDecayRegularizer | None = None,  # a Tensor: AdamW's coefficient
        grad_clip: Any = None,
        lazy_mode: bool = False,
        multi_precision: bool = False,
        use_multi_tensor: bool = False,
        amsgrad: bool = False,
        name: str | None = None,
        *,
        fused: bool = False,
    ) -> None:
        defaults = {"beta1": beta1, "beta2": beta2, "epsilon": epsilon, "lazy_mode": lazy_mode}
        self._check_group(defaults)
        self._amsgrad = _checks.flag("amsgrad", amsgrad)
        self._use_multi_tensor = _checks.flag("use_multi_tensor", use_multi_tensor)
        self._use_lowprecision_moment = False
        _paddle_cpu.forced()  # a PADDLE_COMPAT_PADDLE_CPU that names no profile fails here, not at a step
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, multi_precision, defaults, name, fused)

    def _check_group(self, group: dict[str, Any]) -> None:
        tensor_options(group, "beta1", "beta2", "epsilon")
        for key in ("beta1", "beta2", "epsilon"):
            if key in group:
                if group[key] is None:
                    raise ValueError(f"{key} is not set")
                _checks.number(key, group[key])  # the texts below say which values
        if "lazy_mode" in group:
            _checks.flag("lazy_mode", group["lazy_mode"])
        for key in ("beta1", "beta2"):
            if key in group and not 0 <= group[key] < 1:
                raise ValueError(f"Invalid value of {key}, expect {key} in [0,1).")
        if "epsilon" in group and not 0 <= group["epsilon"]:
            raise ValueError("Invalid value of epsilon, expect epsilon >= 0.")
        if "epsilon" in group and math.isinf(group["epsilon"]):  # Paddle takes it: every update is then 0 or NaN
            raise ValueError(f"Invalid value of epsilon, expect a finite epsilon, but received {group['epsilon']}.")

    def _init_state(self, p: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        low = p.dtype in (torch.float16, torch.bfloat16)
        dtype = torch.float32 if low and not self._use_lowprecision_moment else p.dtype
        state["moment1"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
        state["moment2"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
        if self._amsgrad:
            state["moment2_max"] = torch.zeros_like(p, dtype=dtype, memory_format=torch.preserve_format)
        pow_dtype = torch.float32 if low else p.dtype
        state["beta1_pow_acc"] = torch.full([1], pow_start(group, "beta1"), dtype=pow_dtype)
        state["beta2_pow_acc"] = torch.full([1], pow_start(group, "beta2"), dtype=pow_dtype)

    def _decay_rate(self, param: Tensor, group: dict[str, Any], lr: float, rnd: Any) -> tuple[float | None, float]:
        """AdamW's decoupled decay: the rate applied to the parameter (``None``: no decay) and Adam's rate."""
        return None, lr

    def _compiled_row(
        self, item: _Item, group: dict[str, Any], lr: float, batch: _native.Batch, gpu: bool
    ) -> bool | None:
        p, g, state, master = item
        value = master if master is not None else p
        mt = compute_dtype(value)
        moments = (state["moment1"], state["moment2"], state.get("moment2_max"))
        present = [m for m in moments if m is not None]
        low_moments = mt == torch.float32 and moments[0].dtype in (torch.bfloat16, torch.float16)
        pows = (state["beta1_pow_acc"], state["beta2_pow_acc"])
        if not (
            all(m.dtype == moments[0].dtype for m in present)
            and (moments[0].dtype == mt or low_moments)
            and pows[0].dtype == pows[1].dtype == mt
            and pows[0].numel() == pows[1].numel() == 1
            and _devices.addressable(pows[0]) and _devices.addressable(pows[1])
            and kernels_take(value, g, lr, gpu, p, *present)
        ):
            return None
        if gpu:  # the beta powers on the device: a step reads nothing on the host
            pows = (_devices.copy_to(pows[0], value.device), _devices.copy_to(pows[1], value.device))
            state["beta1_pow_acc"], state["beta2_pow_acc"] = pows
        elif not (pows[0].is_cpu and pows[1].is_cpu):
            return None
        g, l2, fresh = self._grad_for_kernel(p, g, group)
        lr_t, decay = self._row_rate(p, value, group, lr, gpu)
        batch.add(value, g, p if master is not None else None, moments, pows, lr=lr_t, decay=decay, l2=l2)
        return not (fresh or self._per_param_rates())

    def _row_rate(
        self, p: Tensor, value: Tensor, group: dict[str, Any], lr: float, gpu: bool
    ) -> tuple[float, float]:
        mt = compute_dtype(value)
        decay, lr_t = self._decay_rate(p, group, lr, round_to(mt))
        if gpu:  # Paddle's GPU kernel scales by a factor: 1 for none, which leaves the bits
            return lr_t, self._gpu_decay_factor(p, group, lr, mt)
        return lr_t, math.nan if decay is None else decay

    def _gpu_decay_factor(self, param: Tensor, group: dict[str, Any], lr: float, dtype: torch.dtype) -> float:
        """The factor Paddle's GPU kernel scales the parameter by before the update (AdamW's
        decay; 1 for none, which leaves the bits)."""
        return 1.0

    def _per_param_rates(self) -> bool:
        """Whether ``_decay_rate`` depends on the parameter (AdamW's callbacks), not just its dtype."""
        return False

    def _compiled_call(self, kern: _native.Kernels, batch: _native.Batch, group: dict[str, Any]) -> None:
        kern.adam(
            batch.rows, batch.per, group["beta1"], group["beta2"], group["epsilon"], _fused_profile(), self._amsgrad,
        )

    def _multi_tensor_call(self, kern: Any, launch: Any, group: dict[str, Any], found_inf: Tensor | None) -> None:
        _multi_tensor.adam(
            kern, launch, found_inf, group["beta1"], group["beta2"], group["epsilon"], self._amsgrad
        )

    def _kernel(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any], lr: float
    ) -> Tensor:
        mt = compute_dtype(value)
        rnd = round_to(mt)
        b1, b2, eps = rnd(group["beta1"]), rnd(group["beta2"]), rnd(group["epsilon"])
        if _devices.gpu_kernels(value):
            w = self._gpu_update(param, value, grad, state, group, mt, b1, b2, eps, lr)
        else:
            b1p, b2p = state["beta1_pow_acc"].item(), state["beta2_pow_acc"].item()  # host tensors
            decay, lr = self._decay_rate(param, group, lr, rnd)
            # Paddle's AVX-512 kernel is float32 only; double and non-AVX-512 hosts use the reference one.
            fused = mt == torch.float32 and _fused_profile()
            moments = [state[k] for k in ("moment1", "moment2", "moment2_max") if k in state]
            if self._same_layout(value, grad, *moments):
                w = self._cpu_update(value, grad, state, mt, fused, b1, b2, eps, b1p, b2p, decay, lr, rnd)
            else:
                w = self._plain_update(value, grad, state, mt, fused, b1, b2, eps, b1p, b2p, decay, lr, rnd)
        state["beta1_pow_acc"].mul_(b1)
        state["beta2_pow_acc"].mul_(b2)
        return w

    def _gpu_update(
        self, param: Tensor, value: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any],
        mt: torch.dtype, b1: float, b2: float, eps: float, lr: float,
    ) -> Tensor:
        """Paddle's GPU formula, per tensor, with nvcc's contractions:
        ``w*(1 - lr*coeff)`` (AdamW), ``m = fma(b1, m, g*(1-b1))``, ``v = fma(b2, v, (g*(1-b2))*g)``,
        ``w = fma(m / (sqrt(v)/sqrt(1-b2^t) + eps), -(lr/(1-b1^t)), w)``. The beta powers are read
        where they are (on the device once the GPU kernels have run: no host sync)."""
        rnd = round_to(mt)
        keep = self._gpu_decay_factor(param, group, lr, mt)
        lr = self._decay_rate(param, group, lr, rnd)[1]
        b1p, b2p = state["beta1_pow_acc"], state["beta2_pow_acc"]
        w, g = value.to(mt), grad.to(mt)
        m, v = state["moment1"].to(mt), state["moment2"].to(mt)
        if keep != 1.0:
            w = w * keep
        m = fma(b1, m, g * rnd(1 - b1))
        v = fma(b2, v, (g * rnd(1 - b2)) * g)
        v_used = v
        if self._amsgrad:
            v_used = torch.maximum(v, state["moment2_max"].to(mt))
            state["moment2_max"].copy_(v_used)
        denom = sqrt_rn(v_used) / sqrt_rn(1 - b2p.to(w.device, mt)) + eps
        c1 = 1 - b1p.to(w.device, mt)
        # a tensor divided by a tensor: torch computes ``float / tensor`` as a reciprocal times the float
        w = fma(m / denom, -(torch.full_like(c1, lr) / c1), w)
        state["moment1"].copy_(m)
        state["moment2"].copy_(v)
        return w

    def _plain_update(
        self, value: Tensor, grad: Tensor, state: dict[str, Any], mt: torch.dtype, fused: bool,
        b1: float, b2: float, eps: float, b1p: float, b2p: float, decay: float | None, lr: float, rnd: Any,
    ) -> Tensor:
        """Paddle's CPU formulas as plain expressions, taken when the tensors' layouts differ (see
        ``_same_layout``). ``_cpu_update`` computes the same expressions in place."""
        w, g = value.to(mt), grad.to(mt)
        m, v = state["moment1"].to(mt), state["moment2"].to(mt)
        if decay is not None:
            w = fma(-decay, w, w) if fused else w - w * decay
        if fused:
            m = fma(b1, m, g * rnd(1 - b1))
            v = fma(b2, v, (g * g) * rnd(1 - b2))
        else:
            m = m * b1 + g * rnd(1 - b1)
            v = v * b2 + (g * rnd(1 - b2)) * g
        v_used = v
        if self._amsgrad:
            v_used = torch.maximum(v, state["moment2_max"].to(mt))
            state["moment2_max"].copy_(v_used)
        root = rnd(math.sqrt(rnd(1 - b2p)))
        lr_t = rnd(lr * rnd(root / rnd(1 - b1p)))
        eps_t = rnd(eps * root)
        if fused:
            w = fma(m / (sqrt_rn(v_used) + eps_t), -lr_t, w)
        else:  # the reference kernel's sqrt of a float is C's double sqrt: the update runs in double
            w = (w.double() + (m.double() / (sqrt_rn(v_used.double()) + eps_t)) * -lr_t).to(mt)
        state["moment1"].copy_(m)
        state["moment2"].copy_(v)
        return w

    def _cpu_update(
        self, value: Tensor, grad: Tensor, state: dict[str, Any], mt: torch.dtype, fused: bool,
        b1: float, b2: float, eps: float, b1p: float, b2p: float, decay: float | None, lr: float, rnd: Any,
    ) -> Tensor:
        """Paddle's CPU formulas, computed in place, a piece at a time (``_numerics.chunks``), the
        intermediates in reused buffers (``_buffer``); ``value`` is updated and returned.

        Each line runs the same torch operation, on the same operands in the same order, as the
        plain expression in its comment (those of ``_plain_update``): only where the results are
        stored differs, so every rounding (and every NaN) is the same. ``fma_into`` rounds as ``fma``.
        """
        root = rnd(math.sqrt(rnd(1 - b2p)))
        lr_t = rnd(lr * rnd(root / rnd(1 - b1p)))
        eps_t = rnd(eps * root)
        c1, c2 = rnd(1 - b1), rnd(1 - b2)
        vmax_state = state.get("moment2_max") if self._amsgrad else None
        tensors = [value, grad, state["moment1"], state["moment2"]] + ([vmax_state] if vmax_state is not None else [])
        for pieces in _numerics.chunks(*tensors):
            w, g, m, v = (self._working(t, mt, slot) for t, slot in zip(pieces, ("w", "g", "m", "v")))
            tmp = self._buffer(w, mt, "tmp")
            # float64 scratch for the correctly rounded sqrt (float32), and int64 for the FMAs
            wide = self._buffer(w, torch.float64, "wide") if mt != torch.float64 else None
            if fused:
                assert wide is not None  # fused: float32 (Paddle's AVX-512 kernel)
                scratch = (wide, self._buffer(w, torch.int64, "bits"))
                if decay is not None:
                    fma_into(w, -decay, w, w, *scratch)  # w = fma(-decay, w, w)
                fma_into(m, b1, m, torch.mul(g, c1, out=tmp), *scratch)  # m = fma(b1, m, g*(1-b1))
                torch.mul(g, g, out=tmp).mul_(c2)  # (g*g)*(1-b2)
                fma_into(v, b2, v, tmp, *scratch)  # v = fma(b2, v, (g*g)*(1-b2))
            else:
                if decay is not None:
                    w.sub_(torch.mul(w, decay, out=tmp))  # w - w*decay
                m.mul_(b1).add_(torch.mul(g, c1, out=tmp))  # m*b1 + g*(1-b1)
                v.mul_(b2).add_(torch.mul(g, c2, out=tmp).mul_(g))  # v*b2 + (g*(1-b2))*g
            v_used = v
            if vmax_state is not None:
                vmax = pieces[4]
                # maximum(v, vmax), written over vmax itself when it has the compute dtype
                v_used = torch.maximum(v, vmax.to(mt), out=vmax if vmax.dtype == mt else self._buffer(v, mt, "vmax"))
                vmax.copy_(v_used)
            if fused:
                step = sqrt_rn_into(tmp, v_used, wide).add_(eps_t)  # sqrt_rn(v) + eps_t
                torch.div(m, step, out=step)  # m / (sqrt_rn(v) + eps_t)
                fma_into(w, -lr_t, step, w, *scratch)  # fma(step, -lr_t, w)
            elif wide is None:  # float64
                step = sqrt_rn_into(tmp, v_used, None).add_(eps_t)  # sqrt_rn(v.double()) + eps_t
                w.add_(torch.div(m, step, out=step).mul_(-lr_t))  # w + (m / ...) * -lr_t
            else:  # float32, the update in double
                step = sqrt_rn_into(wide, wide.copy_(v_used), None).add_(eps_t)  # sqrt_rn(v.double()) + eps_t
                wide_m = self._buffer(w, torch.float64, "wide_m").copy_(m)
                torch.div(wide_m, step, out=step).mul_(-lr_t)  # (m.double() / ...) * -lr_t
                w.copy_(step.add_(wide_m.copy_(w)))  # (w.double() + ...).to(mt)
            for piece, result in zip((pieces[0], pieces[2], pieces[3]), (w, m, v)):
                piece.copy_(result)  # no-op when the piece itself was updated
        return value

    def _working(self, t: Tensor, dtype: torch.dtype, slot: str) -> Tensor:
        """``t`` itself when it already has the compute dtype (updated in place), else a copy in a buffer."""
        return t if t.dtype == dtype else self._buffer(t, dtype, slot).copy_(t)


# Where Adam's and Lamb's beta powers start when the beta came as a tensor (Paddle's defaults)
_POW_START = {"beta1": 0.9, "beta2": 0.999}


def pow_start(group: dict[str, Any], key: str) -> float:
    """The first value of ``key``'s beta power: the beta, or 0.9/0.999 when it was given as a tensor
    (Paddle's ``_add_moments_pows`` of Adam, AdamW and Lamb; the update itself uses the tensor's value)."""
    beta = group[key]
    return _POW_START[key] if isinstance(beta, TensorOption) else beta
