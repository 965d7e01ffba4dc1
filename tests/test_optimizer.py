"""paddle_compat.optimizer without Paddle: API, bad input, skipped steps, master weights, torch tooling."""

from __future__ import annotations

import copy
import io
import math
from collections.abc import Callable

import numpy as np
import pytest
import torch

import paddle_compat.nn as pnn
import paddle_compat.optimizer as popt
from paddle_compat import _numerics, _paddle_cpu
from paddle_compat.amp import GradScaler
from paddle_compat.regularizer import L1Decay, L2Decay

from .optim_db import CLASSES as OPTIMIZERS
from .optim_db import info_of, new


def _params(dtype: torch.dtype = torch.float32, seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=gen).to(dtype)) for shape in [(5, 3), (3,)]]


def _set_grads(params: list[torch.Tensor], step: int, dtype: torch.dtype | None = None) -> None:
    gen = torch.Generator().manual_seed(100 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(dtype or p.dtype)


def _bits(t: torch.Tensor) -> np.ndarray:
    a = t.detach().cpu().contiguous()
    return a.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]).numpy()


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and np.array_equal(_bits(a), _bits(b))


# --- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_unknown_argument_is_a_type_error(cls: type) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'lr'"):
        cls(lr=0.1, parameters=_params())


@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_bad_learning_rate(cls: type) -> None:
    # Paddle's messages: the base's, or the optimizer's own check that runs first
    with pytest.raises(ValueError, match="non-negative|Invalid learning rate|must be true"):
        cls(learning_rate=-0.1, parameters=_params())
    with pytest.raises(ValueError, match="non-negative|finite|Invalid learning rate"):
        cls(learning_rate=float("nan"), parameters=_params())
    with pytest.raises(TypeError, match="learning rate should be float or LRScheduler"):
        cls(learning_rate=1, parameters=_params())  # an int, as Paddle refuses it
    with pytest.raises(ValueError, match="learning_rate is not set|learning_rate should not be none"):
        cls(learning_rate=None, parameters=_params())


@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_bad_parameters(cls: type) -> None:
    with pytest.raises(AttributeError, match="should not be None in dygraph mode"):
        cls(0.1)
    with pytest.raises(TypeError, match="should be an iterable of paddle Tensors"):
        cls(0.1, parameters=torch.nn.Parameter(torch.ones(2)))
    with pytest.raises(TypeError, match="should not get dict type"):
        cls(0.1, parameters={"params": _params()})
    params = _params()
    with pytest.raises(ValueError, match="more than one parameter group"):
        cls(0.1, parameters=[{"params": params}, {"params": params[:1]}])
    with pytest.raises(ValueError, match="learning_rate should be a finite, non-negative"):
        cls(0.1, parameters=[{"params": params, "learning_rate": -1.0}])


@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_bad_grad_clip(cls: type) -> None:
    for clip in (1.0, torch.nn.utils.clip_grad_norm_, "ClipGradByGlobalNorm"):
        with pytest.raises(TypeError, match="'grad_clip' should be an instance of GradientClipBase's derived class"):
            cls(0.1, parameters=_params(), grad_clip=clip)
    with pytest.raises(TypeError, match="GradientClipBase"):
        cls(0.1, parameters=[{"params": _params(), "grad_clip": 1.0}])


@pytest.mark.parametrize("cls", [popt.SGD, popt.Momentum, popt.Adam])
def test_bad_weight_decay(cls: type) -> None:
    with pytest.raises(TypeError, match="weight_decay should be a float, an L2Decay/L1Decay regularizer or None"):
        cls(0.1, parameters=_params(), weight_decay="l2")


@pytest.mark.parametrize("cls", [popt.Adam, popt.AdamW])
def test_bad_betas_and_epsilon(cls: type) -> None:
    for bad in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match=r"Invalid value of beta1, expect beta1 in \[0,1\)\."):
            cls(0.1, beta1=bad, parameters=_params())
        with pytest.raises(ValueError, match=r"Invalid value of beta2, expect beta2 in \[0,1\)\."):
            cls(0.1, beta2=bad, parameters=_params())
    with pytest.raises(ValueError, match="Invalid value of epsilon, expect epsilon >= 0."):
        cls(0.1, epsilon=-1e-8, parameters=_params())
    with pytest.raises(TypeError, match="beta1 should be a float"):
        cls(0.1, beta1="0.9", parameters=_params())
    with pytest.raises(ValueError, match="beta2"):
        cls(0.1, parameters=[{"params": _params(), "beta2": 1.0}])


def test_bad_adamw_arguments() -> None:
    with pytest.raises(TypeError, match="apply_decay_param_fun should be a callable"):
        popt.AdamW(0.1, parameters=_params(), apply_decay_param_fun=["w"])
    with pytest.raises(TypeError, match="lr_ratio should be a callable"):
        popt.AdamW(0.1, parameters=_params(), lr_ratio=0.5)
    with pytest.raises(TypeError, match="weight_decay should be int, float or Tensor."):
        popt.AdamW(0.1, parameters=_params(), weight_decay=L2Decay(0.1))
    with pytest.raises(ValueError, match="apply_decay_param_fun needs parameter names"):
        popt.AdamW(0.1, parameters=_params(), apply_decay_param_fun=lambda n: True)


def test_bad_momentum_arguments() -> None:
    with pytest.raises(ValueError, match="momentum is not set"):
        popt.Momentum(0.1, momentum=None, parameters=_params())
    with pytest.raises(TypeError, match="momentum should be a float"):
        popt.Momentum(0.1, momentum="0.9", parameters=_params())


def test_set_lr_checks() -> None:
    opt = popt.SGD(0.1, parameters=_params())
    with pytest.raises(TypeError, match="must be float"):
        opt.set_lr("0.2")
    with pytest.raises(ValueError, match="non-negative"):
        opt.set_lr(-0.2)
    opt = popt.SGD(_Scheduler([0.1, 0.05]), parameters=_params())
    with pytest.raises(RuntimeError, match="can't be LRScheduler"):
        opt.set_lr(0.2)


def test_minimize_needs_a_tensor_loss() -> None:
    opt = popt.SGD(0.1, parameters=_params())
    with pytest.raises(TypeError, match="The loss should be an Tensor."):
        opt.minimize(1.0)


# --- the step -------------------------------------------------------------------------------------
class _Scheduler:
    """Paddle's LRScheduler protocol: call for the rate, step() to advance, (set_)state_dict."""

    def __init__(self, rates: list[float]) -> None:
        self.rates, self.i = rates, 0

    def __call__(self) -> float:
        return self.rates[min(self.i, len(self.rates) - 1)]

    def step(self) -> None:
        self.i += 1

    def state_dict(self) -> dict:
        return {"i": self.i}

    def set_state_dict(self, sd: dict) -> None:
        self.i = sd["i"]


def test_sgd_formula_and_lr_api() -> None:
    (p,) = _params()[:1]
    opt = popt.SGD(0.5, parameters=[p])
    assert opt.get_lr() == 0.5
    before = p.detach().clone()
    _set_grads([p], 0)
    opt.step()
    assert torch.equal(p.detach(), before - p.grad * 0.5)
    opt.set_lr(0.25)
    assert opt.get_lr() == 0.25 and opt.param_groups[0]["lr"] == 0.25


def test_paddle_style_scheduler_drives_the_rate() -> None:
    sched = _Scheduler([0.5, 0.25])
    (p,) = _params()[:1]
    opt = popt.SGD(sched, parameters=[p])
    _set_grads([p], 0)
    before = p.detach().clone()
    opt.step()
    assert torch.equal(p.detach(), before - p.grad * 0.5)
    sched.step()
    assert opt.get_lr() == 0.25
    before = p.detach().clone()
    opt.step()
    assert torch.equal(p.detach(), before - p.grad * 0.25)
    assert opt.state_dict()["LR_Scheduler"] == {"i": 1}


def test_group_learning_rate_is_a_ratio_rounded_in_float32() -> None:
    a, b = _params()
    opt = popt.SGD(0.1, parameters=[{"params": [a]}, {"params": [b], "learning_rate": 0.3}])
    _set_grads([a, b], 0)
    before = b.detach().clone()
    opt.step()
    lr = torch.tensor(0.1, dtype=torch.float32) * torch.tensor(0.3, dtype=torch.float32)
    assert torch.equal(b.detach(), before - b.grad * lr)


@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_params_without_grad_or_frozen_are_skipped(cls: type) -> None:
    a, b = _params()
    b.requires_grad_(False)
    opt = cls(0.1, parameters=[a, b])
    b.grad = torch.ones_like(b)
    before_a, before_b = a.detach().clone(), b.detach().clone()
    opt.step()  # a has no grad, b is frozen
    assert torch.equal(a.detach(), before_a) and torch.equal(b.detach(), before_b)
    assert len(opt.state[a]) == 0


@pytest.mark.parametrize("layout", ["contiguous", "strided"])  # the compiled kernels; the torch forms
@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_the_update_is_not_recorded_and_grad_mode_comes_back(cls: type, layout: str) -> None:
    a, b = _params(torch.bfloat16)
    opt = new(cls, 0.1, [a, b], multi_precision=True, grad_clip=pnn.ClipGradByGlobalNorm(1.0))
    for step in range(2):
        _set_grads([a, b], step)
        if layout == "strided":
            a.grad = a.grad.t().contiguous().t()
        with torch.enable_grad():
            opt.step()
            assert torch.is_grad_enabled()
        for p in (a, b, *(s["master_weight"] for s in opt.state.values())):
            assert p.is_leaf and p.grad_fn is None
    with torch.no_grad():
        opt.step()
        assert not torch.is_grad_enabled()
    a.grad = a.grad.to_sparse()
    with pytest.raises(RuntimeError, match="do not support sparse gradients"):
        opt.step()
    assert torch.is_grad_enabled()


# --- torch.optim's step hooks and profiler range ---------------------------------------------------
def _count_hooks(opt: torch.optim.Optimizer, calls: list[str]) -> list:
    """Register the four kinds of torch.optim step hook on ``opt``; each appends its name to ``calls``."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    return [
        opt.register_step_pre_hook(lambda o, args, kwargs: calls.append("pre")),
        opt.register_step_post_hook(lambda o, args, kwargs: calls.append("post")),
        register_optimizer_step_pre_hook(lambda o, args, kwargs: calls.append("global pre") if o is opt else None),
        register_optimizer_step_post_hook(lambda o, args, kwargs: calls.append("global post") if o is opt else None),
    ]


def _with_own_step(cls: type) -> type:
    """A user's subclass with a step of its own that ends in ours: torch.optim wraps that one."""

    def step(self, closure=None):
        return cls.step(self, closure)

    return type(f"Own{cls.__name__}", (cls,), {"step": step})


@pytest.mark.parametrize("make", ["plain", "own step", "decorated"])
@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_step_hooks_run_once_per_step(cls: type, make: str) -> None:
    from paddle_compat import amp

    params = _params()
    opt = (_with_own_step(cls) if make == "own step" else cls)(0.1, parameters=params)
    if make == "decorated":  # decorate mixes a step of its own in after torch.optim has patched the class
        _, opt = amp.decorate(torch.nn.Linear(2, 2), opt, level="O2", master_weight=True)
    calls: list[str] = []
    handles = _count_hooks(opt, calls)
    try:
        _set_grads(params, 0)
        before = params[0].detach().clone()
        opt.step()
        assert calls == ["global pre", "pre", "post", "global post"]
        assert not torch.equal(params[0].detach(), before)
    finally:
        for h in handles:
            h.remove()
    opt.step()
    assert len(calls) == 4


@pytest.mark.parametrize("how", ["opt.minimize", "scaler.minimize", "scaler.step"])
@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_step_hooks_run_once_per_minimize_as_per_step(cls: type, how: str) -> None:
    from paddle_compat.amp import GradScaler

    params = _params()
    opt = cls(0.1, parameters=params)
    scaler = GradScaler(init_loss_scaling=2.0)
    calls: list[str] = []
    handles = _count_hooks(opt, calls)
    try:
        for found_inf in (False, True):
            _set_grads(params, 0)
            if found_inf:
                params[0].grad[0] = math.inf
            loss = scaler.scale(torch.tensor(1.0, requires_grad=True))
            if how == "opt.minimize":
                opt.minimize(loss)
            elif how == "scaler.minimize":
                scaler.minimize(opt, loss)
            else:
                scaler.step(opt)
                scaler.update()
            # a step the scaler skips is no step (the optimizer is not called), as with torch's scaler
            ran = how == "opt.minimize" or not found_inf
            assert calls == ["global pre", "pre", "post", "global post"] * (2 if found_inf and ran else 1)
    finally:
        for h in handles:
            h.remove()


def test_a_pre_hook_may_replace_the_step_arguments() -> None:
    params = _params()
    opt = popt.SGD(0.1, parameters=params)
    _set_grads(params, 0)
    opt.register_step_pre_hook(lambda o, args, kwargs: (args, {"closure": lambda: torch.tensor(7.0)}))
    assert opt.step().item() == 7.0


def _profiled(run: Callable[[], object]) -> set[str]:
    """The names of the events torch's profiler records while ``run()`` runs."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    return {e.name for e in prof.events()}


def test_the_profiler_sees_the_step_and_a_plain_step_opens_no_range(monkeypatch: pytest.MonkeyPatch) -> None:
    params = _params()
    opt = popt.Adam(0.1, parameters=params)
    _set_grads(params, 0)
    assert "Optimizer.step#Adam.step" in _profiled(opt.step)

    def no_range(name: str) -> None:
        raise AssertionError(f"a step with no profiler and no hook opened the range {name}")

    monkeypatch.setattr(torch.autograd.profiler, "record_function", no_range)
    opt.step()
    handle = opt.register_step_post_hook(lambda o, args, kwargs: None)
    with pytest.raises(AssertionError, match="opened the range Optimizer.step#Adam.step"):
        opt.step()  # with a hook, torch.optim's wrapper runs, range and all
    handle.remove()


@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_does_what_torch_optims_does(set_to_none: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    ours, theirs = _params(), _params()
    for params in (ours, theirs):
        _set_grads(params, 0)
        params[0].grad = params[0].grad.clone().requires_grad_()  # a grad that tracks its own graph
        params[1].grad = params[1].grad * torch.ones((), requires_grad=True)  # one with a grad_fn
    grads = [p.grad for p in ours]

    def no_range(name: str) -> None:
        raise AssertionError(f"zero_grad with no profiler opened the range {name}")

    monkeypatch.setattr(torch.autograd.profiler, "record_function", no_range)
    popt.SGD(0.1, parameters=ours).zero_grad(set_to_none)
    monkeypatch.undo()
    torch.optim.SGD(theirs, lr=0.1).zero_grad(set_to_none)
    for mine, torchs, before in zip(ours, theirs, grads):
        if set_to_none:
            assert mine.grad is None and torchs.grad is None
        else:
            assert mine.grad is before and torch.equal(mine.grad, torchs.grad)
            assert torch.count_nonzero(mine.grad) == 0
            assert (mine.grad.requires_grad, mine.grad.grad_fn) == (torchs.grad.requires_grad, torchs.grad.grad_fn)


@pytest.mark.parametrize("profiling", [False, True])
@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_clears_main_grad_as_clear_grad_does(set_to_none: bool, profiling: bool) -> None:
    """A float32 main_grad left by zero_grad would be added to by the next backward."""
    params = _params(torch.bfloat16)
    opt = popt.AdamW(0.1, parameters=params, multi_precision=True)
    _set_grads(params, 0)
    for p in params:
        p.main_grad = p.grad.float()
    mains = [p.main_grad for p in params]
    if profiling:
        _profiled(lambda: opt.zero_grad(set_to_none))
    else:
        opt.zero_grad(set_to_none)
    for p, main in zip(params, mains):
        if set_to_none:
            assert p.grad is None and p.main_grad is None
        else:
            assert p.main_grad is main and torch.count_nonzero(main) == 0 and torch.count_nonzero(p.grad) == 0


def test_the_profiler_sees_zero_grad() -> None:
    params = _params()
    opt = popt.Momentum(0.1, parameters=params)
    _set_grads(params, 0)
    assert "Optimizer.zero_grad#Momentum.zero_grad" in _profiled(opt.zero_grad)
    assert all(p.grad is None for p in params)


@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_torch_compile_runs_the_update_eagerly_with_the_same_bits(cls: type) -> None:
    """A compiled training step breaks its graph once at the update and nowhere inside it (Dynamo
    cannot trace the kernels' ctypes calls or the plans keyed on addresses), and steps as eager."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    def train_step(x: torch.Tensor, model: torch.nn.Module, opt: popt.Optimizer) -> torch.Tensor:
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.clear_grad()
        return loss

    torch._dynamo.reset()
    counters.clear()
    models = [torch.nn.Linear(4, 3) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    opts = [cls(0.1, parameters=list(m.parameters())) for m in models]
    compiled = torch.compile(train_step, backend="eager")
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0))
    for _ in range(3):
        compiled(x, models[0], opts[0])
        train_step(x, models[1], opts[1])
    assert all(_same(a, b) for a, b in zip(models[0].parameters(), models[1].parameters()))
    # two breaks: at backward(), and at step() (the call into _torch_step.run, none inside it)
    backward, step = sorted(counters["graph_break"], key=lambda reason: "backward" not in reason)
    assert "backward" in backward and "<function run at" in step
    assert sum(counters["graph_break"].values()) == 2
    explained = torch._dynamo.explain(train_step)(x, models[0], opts[0])
    reasons = [str(b.reason).splitlines()[0] for b in explained.break_reasons]
    assert reasons and all("backward" in r for r in reasons), reasons


def test_step_closure_and_minimize() -> None:
    a, b = _params()
    opt = popt.SGD(0.1, parameters=[a, b])
    _set_grads([a, b], 0)
    assert opt.step(lambda: torch.tensor(3.0)).item() == 3.0
    before_a, before_b = a.detach().clone(), b.detach().clone()
    ops, params_grads = opt.minimize(torch.tensor(1.0), no_grad_set={b})
    assert ops is None and [p for p, _ in params_grads] == [a]
    assert not torch.equal(a.detach(), before_a) and torch.equal(b.detach(), before_b)
    ops, params_grads = opt.minimize(torch.tensor(1.0), parameters=[b])
    assert [p for p, _ in params_grads] == [b] and not torch.equal(b.detach(), before_b)


def test_clear_grad_and_zero_grad() -> None:
    a, b = _params()
    opt = popt.Adam(0.1, parameters=[a, b])
    _set_grads([a, b], 0)
    grad = a.grad
    opt.clear_grad()  # Paddle's default: zero in place
    assert a.grad is grad and torch.count_nonzero(a.grad) == 0
    opt.clear_grad(set_to_zero=False)
    assert a.grad is None
    _set_grads([a, b], 0)
    opt.zero_grad()
    assert a.grad is None
    a.main_grad = torch.ones(a.shape)
    opt.clear_gradients()
    assert torch.count_nonzero(a.main_grad) == 0


def test_main_grad_is_used_when_present() -> None:
    (p,) = [torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))]
    p.main_grad = torch.full((4,), 0.1)
    opt = popt.SGD(0.5, parameters=[p], multi_precision=True)
    opt.step()
    master = opt.state[p]["master_weight"]
    assert torch.equal(master, torch.ones(4) - torch.full((4,), 0.1) * 0.5)
    assert torch.equal(p.detach(), master.to(torch.bfloat16))


@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_order_clip_then_regularization_then_update(cls: type) -> None:
    """Clip sees the raw gradients; weight decay is added after clipping (not clipped itself)."""
    (p,) = [torch.nn.Parameter(torch.full((3,), 4.0))]
    decay = 0.5 if cls is not popt.AdamW else None
    opt = new(cls, 0.1, [p], grad_clip=pnn.ClipGradByValue(0.01), weight_decay=decay)
    ref_p = torch.nn.Parameter(torch.full((3,), 4.0))
    ref = new(cls, 0.1, [ref_p], weight_decay=decay)
    p.grad = torch.full((3,), 10.0)
    ref_p.grad = torch.full((3,), 0.01)  # what the clip leaves
    opt.step()
    ref.step()
    assert torch.equal(p.detach(), ref_p.detach())


# --- skipped steps (GradScaler found inf/NaN) -----------------------------------------------------
def _state_snapshot(opt: torch.optim.Optimizer, params: list[torch.Tensor]) -> list:
    """The parameters and their state, but what a skipped step still changes (Adamax's beta power)."""
    but = info_of(type(opt)).changed_when_skipped
    snap = [p.detach().clone() for p in params]
    for p in params:
        snap += [v.clone() for k, v in opt.state[p].items() if isinstance(v, torch.Tensor) and k not in but]
    return snap


@pytest.mark.parametrize("cls", OPTIMIZERS)
@pytest.mark.parametrize("scaler_kind", ["paddle_compat", "torch"])
def test_skipped_step_touches_nothing(cls: type, scaler_kind: str) -> None:
    params = _params()
    opt = new(cls, 0.01, params, grad_clip=pnn.ClipGradByGlobalNorm(1.0), weight_decay=0.01,
              multi_precision=True)
    if scaler_kind == "paddle_compat":
        scaler = GradScaler(init_loss_scaling=1024.0)
    else:
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for step in range(4):
        _set_grads(params, step)
        overflow = step == 3
        if overflow:
            params[0].grad[0, 0] = float("inf")
            snap = _state_snapshot(opt, params)
        if scaler_kind == "paddle_compat":
            scaler.minimize(opt, torch.tensor(0.0))
        else:
            scaler.scale(torch.tensor(1.0))  # torch's scaler needs scale() called in the iteration
            scaler.step(opt)
            scaler.update()
        opt.clear_grad()
    after = _state_snapshot(opt, params)
    assert len(after) == len(snap) and all(_same(a, b) for a, b in zip(after, snap))
    if cls in (popt.Adam, popt.AdamW):
        assert opt.state[params[0]]["beta1_pow_acc"].item() == pytest.approx(0.9**4)


# --- multi-precision ------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", OPTIMIZERS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_master_weights_follow_the_float32_update(cls: type, dtype: torch.dtype) -> None:
    if info_of(cls).state_in_param_dtype:
        pytest.skip("its accumulators keep the parameter's dtype, as Paddle's (test_optimizer_family)")
    low = _params(dtype)
    ref = [torch.nn.Parameter(p.detach().float()) for p in low]
    opt = new(cls, 0.01, low, multi_precision=True, grad_clip=pnn.ClipGradByValue(1.0))
    ref_opt = new(cls, 0.01, ref, grad_clip=pnn.ClipGradByValue(1.0))
    for step in range(20):
        _set_grads(low, step)
        for r, p in zip(ref, low):
            r.grad = p.grad.float()
        opt.step()
        ref_opt.step()
    for p, r in zip(low, ref):
        master = opt.state[p]["master_weight"]
        assert master.dtype == torch.float32 and _same(master, r.detach())
        assert _same(p.detach(), master.to(dtype))
    for key in ("velocity", "moment1", "moment2"):
        if key in opt.state[low[0]]:
            assert opt.state[low[0]][key].dtype == torch.float32


def test_decorate_switches_master_weights_on_lazily() -> None:
    from paddle_compat.amp import decorate

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = popt.AdamW(0.01, parameters=model.parameters())
    assert opt._multi_precision is False
    model, opt = decorate(model, opt, level="O2", dtype="bfloat16")
    assert opt._multi_precision is True and model.weight.dtype == torch.bfloat16
    assert "master_weight" not in opt.state[model.weight]  # created at the first update, as in Paddle
    loss = model(torch.randn(4, 3, dtype=torch.bfloat16)).float().sum()
    loss.backward()
    opt.step()
    assert opt.state[model.weight]["master_weight"].dtype == torch.float32
    assert opt.state[model.weight]["moment1"].dtype == torch.float32


def test_without_multi_precision_low_precision_state() -> None:
    p = torch.nn.Parameter(torch.ones(4, dtype=torch.float16))
    opt = popt.Momentum(0.1, parameters=[p])
    p.grad = torch.full((4,), 0.3, dtype=torch.float16)
    with pytest.warns(UserWarning, match="Consider using multi_precision=True option of the Momentum optimizer"):
        opt.step()
    assert opt.state[p]["velocity"].dtype == torch.float16 and "master_weight" not in opt.state[p]
    q = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    opt = popt.Adam(0.1, parameters=[q])
    q.grad = torch.full((4,), 0.3, dtype=torch.bfloat16)
    with pytest.warns(UserWarning, match="Accumulating with FP16/BF16"):
        opt.step()
    assert opt.state[q]["moment1"].dtype == torch.float32  # Adam's moments are float32 regardless
    assert opt.state[q]["beta1_pow_acc"].device.type == "cpu"


# --- torch tooling --------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_torch_lr_scheduler(cls: type) -> None:
    params = _params()
    opt = cls(0.1, parameters=params)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    for step in range(3):
        _set_grads(params, step)
        opt.step()
        sched.step()
    assert opt.get_lr() == pytest.approx(0.0125)


@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_state_dict_round_trip_keeps_float32_state(cls: type) -> None:
    params = _params(torch.bfloat16)
    opt = new(cls, 0.01, params, multi_precision=True, weight_decay=0.01)
    for step in range(3):
        _set_grads(params, step)
        opt.step()
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    params2 = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt2 = new(cls, 0.01, params2, multi_precision=True, weight_decay=0.01)
    buffer.seek(0)
    opt2.set_state_dict(torch.load(buffer, weights_only=False))
    for p, q in zip(params, params2):
        for key, value in opt.state[p].items():
            assert _same(value, opt2.state[q][key]), key
    for step in range(3, 6):
        _set_grads(params, step)
        _set_grads(params2, step)
        opt.step()
        opt2.step()
    assert all(_same(p.detach(), q.detach()) for p, q in zip(params, params2))


def test_deepcopy_and_repr() -> None:
    opt = popt.AdamW(0.1, parameters=_params(), grad_clip=pnn.ClipGradByGlobalNorm(1.0))
    assert "AdamW" in repr(opt)
    copy.deepcopy(opt)


# --- weight decay ---------------------------------------------------------------------------------
def test_l2_and_l1_decay_terms() -> None:
    p = torch.tensor([-2.0, 0.0, 3.0])
    g = torch.zeros(3)
    assert torch.equal(L2Decay(0.5)(p, g), p * 0.5)
    assert torch.equal(L1Decay(0.5)(p, g), torch.tensor([-0.5, 0.0, 0.5]))
    assert str(L2Decay(0.5)) == "L2Decay, coeff=0.500000"
    pb = p.to(torch.bfloat16)
    # The coefficient is rounded to the gradient's dtype first, as Paddle's scale kernel does.
    assert torch.equal(L2Decay(0.01)(pb, g.to(torch.bfloat16)), pb * torch.tensor(0.01, dtype=torch.bfloat16))
    with pytest.raises(TypeError):
        L2Decay("0.1")


def test_adamw_apply_decay_param_fun_uses_named_parameters() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    seen = []
    opt = popt.AdamW(0.1, parameters=model.named_parameters(), weight_decay=0.5,
                     apply_decay_param_fun=lambda name: seen.append(name) or name == "weight")
    bias, weight = model.bias.detach().clone(), model.weight.detach().clone()
    model.weight.grad = torch.zeros_like(model.weight)
    model.bias.grad = torch.zeros_like(model.bias)
    opt.step()
    assert sorted(set(seen)) == ["bias", "weight"]
    assert torch.equal(model.bias.detach(), bias)  # zero grad and no decay: unchanged
    decay = torch.tensor(0.1, dtype=torch.float32) * torch.tensor(0.5, dtype=torch.float32)
    if _paddle_cpu.profile() == "avx512f":
        expected = _numerics.fma(-decay, weight, weight)
    else:
        expected = weight - weight * decay
    assert torch.equal(model.weight.detach(), expected)  # decayed only


def test_adamw_lr_ratio_works_on_cpu() -> None:
    """Paddle raises NotImplementedError for lr_ratio on CPU; here it scales decay and step."""
    a = [torch.nn.Parameter(torch.ones(3))]
    b = [torch.nn.Parameter(torch.ones(3))]
    opt_a = popt.AdamW(0.2, parameters=a, lr_ratio=lambda p: 0.5)
    opt_b = popt.AdamW(0.1, parameters=b)
    a[0].grad = b[0].grad = torch.full((3,), 0.7)
    opt_a.step()
    opt_b.step()
    assert torch.equal(a[0].detach(), b[0].detach())


# --- the CPU kernel variant -----------------------------------------------------------------------
def _numpy_adam_reference(p, grads, lr, b1, b2, eps, coeff=None):
    """Paddle's reference (non-AVX-512) Adam/AdamW kernel in numpy: float32 moments with separate
    roundings, the parameter update in float64 (C's ``sqrt`` of a float), rounded once."""
    f = np.float32
    p = p.astype(f).copy()
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    b1p, b2p = f(b1), f(b2)
    for g in grads:
        lr_t = f(lr) * (np.sqrt(f(1) - b2p) / (f(1) - b1p))
        eps_t = f(eps) * np.sqrt(f(1) - b2p)
        if coeff is not None:
            p = p - (f(lr) * f(1.0) * f(coeff)) * p
        m = f(b1) * m + (f(1) - f(b1)) * g
        v = f(b2) * v + (f(1) - f(b2)) * g * g
        p = (p.astype(np.float64) + np.float64(-lr_t) * (m / (np.sqrt(v.astype(np.float64)) + eps_t))).astype(f)
        b1p, b2p = b1p * f(b1), b2p * f(b2)
    return p


@pytest.mark.parametrize("cls", [popt.Adam, popt.AdamW])
def test_reference_kernel_of_the_avx2_profile(cls: type, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PADDLE_COMPAT_PADDLE_CPU", "avx2")
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal(1000).astype(np.float32)
    grads = [(rng.standard_normal(1000) * 0.1).astype(np.float32) for _ in range(30)]
    p = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = cls(0.01, 0.9, 0.99, 1e-6, parameters=[p], **({"weight_decay": 0.1} if cls is popt.AdamW else {}))
    for g in grads:
        p.grad = torch.from_numpy(g)
        opt.step()
    expected = _numpy_adam_reference(p0, grads, 0.01, 0.9, 0.99, 1e-6, 0.1 if cls is popt.AdamW else None)
    assert np.array_equal(p.detach().numpy().view(np.int32), expected.view(np.int32))
    # ... and the fused variant differs from it on the same run, so the switch matters.
    monkeypatch.setenv("PADDLE_COMPAT_PADDLE_CPU", "avx512f")
    q = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = cls(0.01, 0.9, 0.99, 1e-6, parameters=[q], **({"weight_decay": 0.1} if cls is popt.AdamW else {}))
    for g in grads:
        q.grad = torch.from_numpy(g)
        opt.step()
    assert not torch.equal(p.detach(), q.detach())


def test_sqrt_rn_is_correctly_rounded() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(200_000, generator=gen) * 10.0 ** torch.randint(-20, 20, (200_000,), generator=gen).float()
    assert np.array_equal(_numerics.sqrt_rn(x).numpy(), np.sqrt(x.numpy()))


def test_fp16_o2_loop_with_scaler_and_overflow() -> None:
    """decorate(O2) + GradScaler + master weights: an overflowing step leaves every state untouched."""
    from paddle_compat.amp import decorate

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = popt.AdamW(0.01, parameters=model.parameters(), grad_clip=pnn.ClipGradByGlobalNorm(1.0))
    model, opt = decorate(model, opt, level="O2", dtype="float16")
    scaler = GradScaler(init_loss_scaling=256.0)
    params = list(model.parameters())
    for step in range(8):
        x = torch.randn(16, 4, dtype=torch.float16)
        loss = model(x).float().pow(2).mean()
        scaled = scaler.scale(loss)
        scaled.backward()
        if step == 5:
            params[0].grad[0, 0] = float("inf")
            snap = _state_snapshot(opt, params)
        scaler.minimize(opt, scaled)
        if step == 5:
            assert all(_same(a, b) for a, b in zip(_state_snapshot(opt, params), snap))
        opt.clear_grad()
    for p in params:
        master = opt.state[p]["master_weight"]
        assert p.dtype == torch.float16 and master.dtype == torch.float32
        assert _same(p.detach(), master.half())


def test_checkpoint_loads_with_weights_only() -> None:
    params = _params()
    groups = [{"params": params[:1], "weight_decay": L1Decay(0.01)}, {"params": params[1:]}]
    opt = popt.Momentum(0.1, parameters=groups, weight_decay=0.02, grad_clip=pnn.ClipGradByGlobalNorm(0.5))
    _set_grads(params, 0)
    opt.step()
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    sd = torch.load(buffer, weights_only=True)  # torch's default: no arbitrary objects
    opt2 = popt.Momentum(0.5, parameters=[{"params": params[:1]}, {"params": params[1:]}])
    opt2.set_state_dict(sd)
    group0, group1 = opt2.param_groups
    assert isinstance(group0["weight_decay"], L1Decay) and group0["weight_decay"].coeff == 0.01
    assert isinstance(group1["weight_decay"], L2Decay) and group1["weight_decay"].coeff == 0.02
    assert isinstance(group1["grad_clip"], pnn.ClipGradByGlobalNorm) and group1["grad_clip"].clip_norm == 0.5
    assert opt2.get_lr() == 0.1
