"""Bad input to the clips, regularizers and optimizers, and bad optimizer checkpoints: each is
refused with ``TypeError``/``ValueError`` naming the argument (or the entry of the state dict),
before anything changes."""

from __future__ import annotations

import copy

import pytest
import torch

import paddle_compat.amp as amp
import paddle_compat.nn as pnn
import paddle_compat.optimizer as popt
from paddle_compat.optimizer import lr
from paddle_compat.regularizer import L1Decay, L2Decay

from .optim_db import CLASSES as OPTIMIZERS
from .optim_db import OPTIM_DB, info_of

NAN, INF = float("nan"), float("inf")


def _params(dtype: torch.dtype = torch.float32) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(shape, generator=gen).to(dtype)) for shape in [(4, 3), (3,)]]


# --- clips ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("clip_norm", [0.0, -1.0, NAN])
def test_clip_by_norm_needs_a_positive_norm(clip_norm: float) -> None:
    with pytest.raises(ValueError) as info:
        pnn.ClipGradByNorm(clip_norm)
    assert str(info.value) == f"clip_norm should be greater than 0. Received clip_norm is {clip_norm:f}."


def test_clip_by_norm_of_infinity_never_clips() -> None:
    g = torch.tensor([3.0, 4.0])
    ((_, out),) = pnn.ClipGradByNorm(INF)([(torch.nn.Parameter(torch.zeros(2)), g)])
    assert torch.equal(out, g)


@pytest.mark.parametrize(("max_", "min_"), [(-1.0, 1.0), (1.0, 2.0), (1.0, NAN), (NAN, -1.0)])
def test_clip_by_value_needs_min_at_most_max(max_: float, min_: float) -> None:
    with pytest.raises(ValueError) as info:
        pnn.ClipGradByValue(max=max_, min=min_)
    assert str(info.value) == (
        f"max should be greater than or equal to min. But received min = {min_:f}, max = {max_:f}"
    )
    pnn.ClipGradByValue(max=1.0, min=1.0)  # an empty range is Paddle's too


def test_clip_by_value_without_min_needs_a_positive_max() -> None:
    with pytest.raises(ValueError, match="^max should be greater than 0 when min is not given, but received nan$"):
        pnn.ClipGradByValue(NAN)


@pytest.mark.parametrize("clip_norm", [NAN, INF, -INF, 0.0, -1.0])
def test_clip_by_global_norm_needs_a_finite_positive_norm(clip_norm: float) -> None:
    with pytest.raises(ValueError) as info:
        pnn.ClipGradByGlobalNorm(clip_norm)
    assert str(info.value) == f"clip_norm should be a finite number greater than 0, but received {clip_norm}"


# --- weight decay ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cls", [L1Decay, L2Decay])
@pytest.mark.parametrize("coeff", [NAN, INF, -INF])
def test_regularizer_coeff_must_be_finite(cls: type, coeff: float) -> None:
    with pytest.raises(ValueError) as info:
        cls(coeff)
    assert str(info.value) == f"coeff should be a finite number, but received {coeff}"


@pytest.mark.parametrize("cls", [c for c in OPTIMIZERS if info_of(c).decay_arg == "weight_decay"])
@pytest.mark.parametrize("decay", [NAN, INF])
def test_float_weight_decay_must_be_finite(cls: type, decay: float) -> None:
    # the argument the user gave is named, not the L2Decay's coeff it becomes
    with pytest.raises(ValueError, match=f"^weight_decay should be a finite number, but received {decay}$"):
        cls(0.1, parameters=_params(), weight_decay=decay)
    with pytest.raises(ValueError, match="^weight_decay should be a finite number"):
        cls(0.1, parameters=[{"params": _params(), "weight_decay": decay}])


def test_adamw_tensor_weight_decay_must_be_finite() -> None:
    with pytest.raises(ValueError, match="^weight_decay should be a finite number, but received inf$"):
        popt.AdamW(0.1, parameters=_params(), weight_decay=torch.tensor(INF))


# --- momentum, betas, epsilon ---------------------------------------------------------------------
@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_momentum_and_rescale_grad_must_be_finite(value: float) -> None:
    with pytest.raises(ValueError, match=f"^momentum should be a finite number, but received {value}$"):
        popt.Momentum(0.1, momentum=value, parameters=_params())
    with pytest.raises(ValueError, match="^momentum should be a finite number"):
        popt.Momentum(0.1, parameters=[{"params": _params(), "momentum": value}])
    with pytest.raises(ValueError, match=f"^rescale_grad should be a finite number, but received {value}$"):
        popt.Momentum(0.1, parameters=_params(), rescale_grad=value)


@pytest.mark.parametrize("cls", [popt.Adam, popt.AdamW])
@pytest.mark.parametrize("value", [NAN, INF])
def test_betas_and_epsilon_must_be_finite(cls: type, value: float) -> None:
    for beta in ("beta1", "beta2"):
        with pytest.raises(ValueError, match=rf"^Invalid value of {beta}, expect {beta} in \[0,1\)\.$"):
            cls(0.1, parameters=_params(), **{beta: value})
        with pytest.raises(ValueError, match=rf"^Invalid value of {beta}"):
            cls(0.1, parameters=[{"params": _params(), beta: value}])
    expected = "Invalid value of epsilon, expect epsilon >= 0." if value != value else (
        "Invalid value of epsilon, expect a finite epsilon, but received inf."
    )
    with pytest.raises(ValueError) as info:
        cls(0.1, parameters=_params(), epsilon=value)
    assert str(info.value) == expected
    with pytest.raises(ValueError, match="^Invalid value of epsilon"):
        cls(0.1, parameters=[{"params": _params(), "epsilon": value}])


TENSOR_OPTION_CLASSES = [info.cls for info in OPTIM_DB if info.tensor_options]


@pytest.mark.parametrize("cls", TENSOR_OPTION_CLASSES)
def test_tensor_betas_and_epsilon_are_checked_as_numbers(cls: type) -> None:
    with pytest.raises(ValueError, match=r"^beta1 given as a tensor should have one element, but it has shape \[2\]$"):
        cls(0.1, parameters=_params(), beta1=torch.tensor([0.9, 0.8]))
    message = "^epsilon given as a tensor should be floating point, but its dtype is torch.int64$"
    with pytest.raises(TypeError, match=message):
        cls(0.1, parameters=[{"params": _params(), "epsilon": torch.tensor([1])}])
    with pytest.raises(ValueError, match="beta2"):  # the value is checked as a float's is
        cls(0.1, parameters=_params(), beta2=torch.tensor([1.5]))


@pytest.mark.parametrize("cls", TENSOR_OPTION_CLASSES)
def test_tensor_betas_survive_a_weights_only_checkpoint(cls: type, tmp_path) -> None:
    """The beta powers of a parameter first stepped after loading still start where Paddle's do."""
    params = _params()
    opt = cls(0.1, parameters=params, beta1=torch.tensor([0.8]), beta2=torch.tensor([0.95]))
    torch.save(opt.state_dict(), tmp_path / "opt.pt")
    twin = cls(0.1, parameters=_params(), beta1=0.5, beta2=0.5)
    twin.set_state_dict(torch.load(tmp_path / "opt.pt", weights_only=True))
    for o in (opt, twin):
        for p in o.param_groups[0]["params"]:
            p.grad = torch.ones_like(p)
        o.step()
    for p, q in zip(opt.param_groups[0]["params"], twin.param_groups[0]["params"], strict=True):
        assert opt.state[p].keys() == twin.state[q].keys()
        for key in opt.state[p]:
            assert torch.equal(opt.state[p][key], twin.state[q][key]), key


# --- parameters and groups ------------------------------------------------------------------------
@pytest.mark.parametrize("cls", OPTIMIZERS)
def test_a_group_without_params_is_refused(cls: type) -> None:
    with pytest.raises(ValueError) as info:
        cls(0.1, parameters=[{"params": _params()}, {"learning_rate": 0.5}])
    assert str(info.value) == "parameter group 1 has no 'params': each group dict lists its parameters under 'params'"
    opt = cls(0.1, parameters=_params())
    with pytest.raises(ValueError, match="^parameter group 1 has no 'params'"):
        opt.add_param_group({"learning_rate": 0.5})
    assert len(opt.param_groups) == 1


@pytest.mark.parametrize("cls", OPTIMIZERS)
@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128, torch.int64, torch.bool])
def test_complex_and_integer_parameters_are_refused(cls: type, dtype: torch.dtype) -> None:
    bad = torch.nn.Parameter(torch.ones(2, dtype=dtype), requires_grad=dtype.is_complex)
    message = (
        f"parameter 1 ('z') of parameter group {{group}} is a {dtype} tensor: paddle_compat optimizers update "
        "floating-point (float16, bfloat16, float32, float64) parameters"
    )
    with pytest.raises(TypeError) as info:
        cls(0.1, parameters=[("w", _params()[0]), ("z", bad)])
    assert str(info.value) == message.format(group=0)
    opt = cls(0.1, parameters=[("w", _params()[0])])
    with pytest.raises(TypeError) as info:
        opt.add_param_group({"params": [("y", _params()[1]), ("z", bad)]})
    assert str(info.value) == message.format(group=1)
    assert len(opt.param_groups) == 1 and not opt.state


# --- per-parameter rates (Paddle's optimize_attr) --------------------------------------------------
RATED = [c for c in OPTIMIZERS if not info_of(c).rate_is_initial_step]  # Rprop reads no optimize_attr
_WHERE = "optimize_attr['learning_rate'] of parameter 1 ('b')"
BAD_RATES = [
    ({"learning_rate": NAN}, ValueError, f"{_WHERE} should be a finite number >= 0 (in the learning rate's dtype), "
                                         "but received nan"),
    ({"learning_rate": INF}, ValueError, None),
    ({"learning_rate": -1.0}, ValueError, None),
    ({"learning_rate": 1e39}, ValueError, None),  # inf in float32
    ({"learning_rate": True}, TypeError, f"{_WHERE} should be a float, but received bool"),
    ({"learning_rate": "x"}, TypeError, f"{_WHERE} should be a float, but received str"),
    ({"learning_rate": None}, TypeError, f"{_WHERE} should be a float, but received NoneType"),
    ({"learning_rate": torch.ones(2)}, TypeError, f"{_WHERE} should be a float, but received a tensor of shape [2]"),
    (["learning_rate", 0.5], TypeError, "optimize_attr of parameter 1 ('b') should be a dict such as "
                                        "{'learning_rate': 1.0}, but received list"),
]


def _rated(cls: type, attr: object) -> tuple:
    params = _params()
    params[1].optimize_attr = attr
    for p in params:
        p.grad = torch.full_like(p, 1024.0)
    return info_of(cls).inputs[0].make(list(zip(["w", "b"], params, strict=True))), params


@pytest.mark.parametrize("cls", RATED)
@pytest.mark.parametrize(("attr", "exc", "message"), BAD_RATES)
@pytest.mark.parametrize("how", ["step", "minimize", "scaler.step", "scaler.minimize"])
def test_a_bad_per_parameter_rate_is_refused_before_anything_changes(cls, attr, exc, message, how) -> None:
    from paddle_compat.amp import GradScaler

    opt, params = _rated(cls, attr)
    scaler = GradScaler(init_loss_scaling=1024.0)
    before = [(p.detach().clone(), p.grad.clone()) for p in params]
    loss = torch.zeros([])
    call = {"step": lambda: opt.step(), "minimize": lambda: opt.minimize(loss),
            "scaler.step": lambda: scaler.step(opt), "scaler.minimize": lambda: scaler.minimize(opt, loss)}[how]
    with pytest.raises(exc) as info:
        call()
    if message is not None:
        assert str(info.value) == message
    assert "optimize_attr" in str(info.value) and "parameter 1 ('b')" in str(info.value)
    for p, (value, grad) in zip(params, before, strict=True):
        assert torch.equal(p.detach(), value) and torch.equal(p.grad, grad)  # nothing stepped, nothing unscaled
    assert not opt.state
    assert scaler._step_state.optimizer_states == {} and scaler.get_scale() == 1024.0
    params[1].optimize_attr = {"learning_rate": 0.5}  # fixed, the same scaler steps
    scaler.step(opt)
    scaler.update()


def test_per_parameter_rates_with_groups_are_not_read() -> None:
    """Paddle writes a group's ratio over ``optimize_attr``: there nothing is read, nothing refused."""
    params = _params()
    params[1].optimize_attr = {"learning_rate": NAN}
    opt = popt.SGD(0.1, parameters=[{"params": params}])
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    assert all(torch.isfinite(p).all() for p in params)


# --- checkpoints ----------------------------------------------------------------------------------
def _trained(cls: type, dtype: torch.dtype = torch.float32, **kwargs) -> tuple:
    params = _params(dtype)
    rate = 0.1 if info_of(cls).rate_is_initial_step else lr.StepDecay(0.1, 2)  # Rprop takes no scheduler
    opt = cls(rate, parameters=params, **kwargs)
    gen = torch.Generator().manual_seed(1)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(dtype)
    opt.step()
    return opt, params


def _snapshot(opt) -> tuple:
    state = {id(p): {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in s.items()}
             for p, s in opt.state.items()}
    # clips and regularizers by their fields (a copy of one is another object)
    groups = [{k: (type(v), vars(v)) if hasattr(v, "__dict__") else v for k, v in g.items() if k != "params"}
              for g in opt.param_groups]
    scheduler = opt._learning_rate
    return state, copy.deepcopy(groups), scheduler.state_dict() if hasattr(scheduler, "state_dict") else scheduler


def _assert_unchanged(opt, snapshot: tuple) -> None:
    state, groups, sched = snapshot
    now_state, now_groups, now_sched = _snapshot(opt)
    assert now_groups == groups and now_sched == sched
    assert state.keys() == now_state.keys()
    for key, saved in state.items():
        assert saved.keys() == now_state[key].keys()
        for name, value in saved.items():
            assert torch.equal(value, now_state[key][name]), name


def _load_refused(opt, saved: dict, exc: type, message: str) -> None:
    snapshot = _snapshot(opt)
    with pytest.raises(exc) as info:
        opt.set_state_dict(saved)
    assert str(info.value) == message
    _assert_unchanged(opt, snapshot)


@pytest.mark.parametrize("cls", OPTIMIZERS)
@pytest.mark.parametrize(("key", "value"), [("lr", NAN), ("lr", INF), ("lr", -0.1), ("learning_rate", NAN),
                                            ("learning_rate", INF), ("lr", "0.1")])
def test_a_bad_learning_rate_in_a_checkpoint_is_refused(cls: type, key: str, value: object) -> None:
    source, _ = _trained(cls)
    saved = source.state_dict()
    saved["param_groups"][0][key] = value
    saved["LR_Scheduler"] = {"last_epoch": 7, "last_lr": 0.01}  # loadable: must not be loaded either
    target, _ = _trained(cls)
    _load_refused(target, saved, ValueError,
                  f"state_dict['param_groups'][0][{key!r}] should be a finite learning rate >= 0, but it is {value!r}")


@pytest.mark.parametrize(("cls", "key"), [(popt.Momentum, "velocity"), (popt.Adam, "moment1"), (popt.AdamW, "moment2")])
def test_a_moment_of_the_wrong_shape_is_refused(cls: type, key: str) -> None:
    source, _ = _trained(cls)
    saved = source.state_dict()
    saved["state"][1][key] = torch.zeros(4)
    target, _ = _trained(cls)
    _load_refused(target, saved, ValueError,
                  f"state_dict['state'][1][{key!r}] has shape [4], but parameter 1 has shape [3]")
    saved = source.state_dict()
    saved["state"][0][key] = saved["state"][0][key].t()
    _load_refused(target, saved, ValueError,
                  f"state_dict['state'][0][{key!r}] has shape [3, 4], but parameter 0 has shape [4, 3]")


def test_a_beta_power_of_the_wrong_shape_is_refused() -> None:
    source, _ = _trained(popt.Adam)
    saved = source.state_dict()
    saved["state"][0]["beta2_pow_acc"] = torch.full([2], 0.9)
    target, _ = _trained(popt.Adam)
    _load_refused(target, saved, ValueError,
                  "state_dict['state'][0]['beta2_pow_acc'] has shape [2], but it should have shape [1]")


@pytest.mark.parametrize(("dtype", "message"), [
    (torch.float16,
     "state_dict['state'][0]['moment1'] has dtype torch.float16, but parameter 0 (torch.float32) takes torch.float32"),
    (torch.float64,
     "state_dict['state'][0]['moment1'] has dtype torch.float64, but parameter 0 (torch.float32) takes torch.float32"),
    (torch.int32, "state_dict['state'][0]['moment1'] has dtype torch.int32; optimizer state should be floating point"),
])
def test_a_moment_of_the_wrong_dtype_is_refused(dtype: torch.dtype, message: str) -> None:
    source, _ = _trained(popt.Adam)
    saved = source.state_dict()
    saved["state"][0]["moment1"] = saved["state"][0]["moment1"].to(dtype)
    target, _ = _trained(popt.Adam)
    _load_refused(target, saved, TypeError, message)


@pytest.mark.filterwarnings("ignore:Accumulating with FP16/BF16")
def test_low_precision_parameters_take_float32_state_and_master_weights() -> None:
    source, _ = _trained(popt.Momentum, torch.float16, multi_precision=True)
    saved = source.state_dict()
    assert saved["state"][0]["velocity"].dtype == torch.float32
    target, _ = _trained(popt.Momentum, torch.float16)  # fp16 velocity, no master weight
    target.set_state_dict(saved)  # fp32 state for fp16 parameters: accepted
    assert target.state[target.param_groups[0]["params"][0]]["velocity"].dtype == torch.float32
    saved["state"][0]["master_weight"] = saved["state"][0]["master_weight"].half()
    _load_refused(target, saved, TypeError,
                  "state_dict['state'][0]['master_weight'] has dtype torch.float16, but parameter 0 "
                  "(torch.float16) takes torch.float32")


def test_mismatched_groups_are_refused_before_anything_changes() -> None:
    source, _ = _trained(popt.Adam)
    saved = source.state_dict()
    saved["param_groups"][0]["params"] = saved["param_groups"][0]["params"][:1]
    target, _ = _trained(popt.Adam)
    _load_refused(target, saved, ValueError,
                  "loaded state dict contains a parameter group that doesn't match the size of optimizer's group")
    _load_refused(target, {"state": {}}, KeyError, "\"the optimizer state_dict lacks the keys ['param_groups']\"")


# --- options and accumulators of a checkpoint, checked as the constructor checks them -------------
@pytest.mark.parametrize(("cls", "group_key", "value", "exc", "message"), [
    (popt.Adam, "beta1", 5.0, ValueError, "Invalid value of beta1, expect beta1 in [0,1)."),
    (popt.AdamW, "beta2", "0.9", TypeError, "beta2 should be a float or an int, but received str"),
    (popt.AdamW, "weight_decay", "x", TypeError, "weight_decay should be int, float or Tensor."),
    (popt.AdamW, "weight_decay", NAN, ValueError, "weight_decay should be a finite number, but received nan"),
    (popt.SGD, "weight_decay", "x", TypeError,
     "weight_decay should be a float, an L2Decay/L1Decay regularizer or None, got <class 'str'>"),
    (popt.Momentum, "momentum", INF, ValueError, "momentum should be a finite number, but received inf"),
    (popt.Momentum, "use_nesterov", "no", TypeError, "use_nesterov should be a bool, but received str"),
    (popt.Adam, "lazy_mode", None, TypeError, "lazy_mode should be a bool, but received NoneType"),
    (popt.SGD, "grad_clip", 1.0, TypeError, "'grad_clip' should be an instance of GradientClipBase's derived class"),
])
def test_a_bad_group_option_in_a_checkpoint_is_refused(cls, group_key, value, exc, message) -> None:
    source, _ = _trained(cls)
    saved = source.state_dict()
    saved["param_groups"][0][group_key] = value
    target, _ = _trained(cls)
    _load_refused(target, saved, exc, f"state_dict['param_groups'][0]: {message}")


@pytest.mark.parametrize("cls", OPTIMIZERS)
@pytest.mark.parametrize("source", OPTIMIZERS, ids=lambda c: f"from_{c.__name__}")
def test_another_optimizers_state_dict_lacking_options_is_refused(cls: type, source: type) -> None:
    """SGD's state dict into Lamb: its groups lack Lamb's options, which every step would read."""
    saved = _trained(source)[0].state_dict()
    opt = _trained(cls)[0]
    missing = [key for key in opt.defaults if key not in saved["param_groups"][0]]
    if not missing:
        return
    message = (
        f"state_dict['param_groups'][0] lacks the options {missing} of {cls.__name__} "
        "(is it the state dict of another optimizer?)"
    )
    _load_refused(opt, saved, ValueError, message)


@pytest.mark.parametrize(("clip", "field", "value", "exc", "message"), [
    (pnn.ClipGradByGlobalNorm(1.0), "clip_norm", NAN, ValueError,
     "clip_norm should be a finite number greater than 0, but received nan"),
    (pnn.ClipGradByNorm(1.0), "clip_norm", -1.0, ValueError,
     "clip_norm should be greater than 0. Received clip_norm is -1.000000."),
    (pnn.ClipGradByValue(1.0), "min", 2.0, ValueError,
     "max should be greater than or equal to min. But received min = 2.000000, max = 1.000000"),
    (pnn.ClipGradByGlobalNorm(1.0), "auto_skip_clip", "yes", TypeError,
     "auto_skip_clip should be a bool, but received str"),
    (L2Decay(0.1), "_coeff", INF, ValueError, "coeff should be a finite number, but received inf"),
    (L1Decay(0.1), "_coeff", "0.1", TypeError, "coeff should be a float or an int, but received str"),
])
def test_a_bad_clip_or_regularizer_in_a_checkpoint_is_refused(clip, field, value, exc, message) -> None:
    key = "grad_clip" if isinstance(clip, pnn.ClipGradBase) else "weight_decay"
    source, _ = _trained(popt.SGD, **{key: clip})
    saved = source.state_dict()
    saved["param_groups"][0][key][field] = value
    target, params = _trained(popt.SGD, **{key: clip})
    _load_refused(target, saved, exc, f"state_dict['param_groups'][0][{key!r}]: {message}")
    # a NaN clip_norm would have turned every parameter NaN a few steps later, silently
    target.set_state_dict(source.state_dict())
    for p in params:
        p.grad = torch.ones_like(p)
    target.step()
    assert all(torch.isfinite(p).all() for p in params)


@pytest.mark.parametrize(("cls", "key"),
                         [(popt.Adam, "moment2"), (popt.AdamW, "beta1_pow_acc"), (popt.Momentum, "velocity")])
def test_a_missing_or_non_tensor_accumulator_is_refused(cls: type, key: str) -> None:
    source, _ = _trained(cls)
    target, _ = _trained(cls)
    if cls is not popt.Momentum:  # an empty entry is torch's "no state yet": Momentum starts it afresh
        saved = source.state_dict()
        del saved["state"][1][key]
        _load_refused(target, saved, KeyError, f"\"state_dict['state'][1] lacks the keys ['{key}']\"")
    saved = source.state_dict()
    saved["state"][0][key] = 0.0
    _load_refused(target, saved, TypeError, f"state_dict['state'][0][{key!r}] should be a tensor, but received float")


@pytest.mark.parametrize(("make", "message"), [
    (lambda ps: popt.SGD(0.1, parameters=ps, multi_precision="False"),
     "multi_precision should be a bool, but received str"),
    (lambda ps: popt.Momentum(0.1, parameters=ps, use_nesterov="no"),
     "use_nesterov should be a bool, but received str"),
    (lambda ps: popt.Momentum(0.1, parameters=[{"params": ps, "use_nesterov": None}]),
     "use_nesterov should be a bool, but received NoneType"),
    (lambda ps: popt.Adam(0.1, parameters=ps, amsgrad="no"), "amsgrad should be a bool, but received str"),
    (lambda ps: popt.AdamW(0.1, parameters=ps, lazy_mode=1), "lazy_mode should be a bool, but received int"),
    (lambda ps: popt.Adam(0.1, parameters=ps, use_multi_tensor="yes"),
     "use_multi_tensor should be a bool, but received str"),
])
def test_no_string_for_a_bool(make, message: str) -> None:
    with pytest.raises(TypeError) as info:
        make(_params())
    assert str(info.value) == message


def test_clear_grad_and_group_name_refuse_the_wrong_type() -> None:
    opt, params = _trained(popt.SGD)
    with pytest.raises(TypeError, match="^set_to_zero should be a bool, but received str$"):
        opt.clear_grad("no")
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in params)
    with pytest.raises(TypeError, match="^group_name should be a str, but received int$"):
        pnn.ClipGradByGlobalNorm(1.0, group_name=1)


# -- what a newcomer writes first ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: amp.GradScaler(init_scale_loss=1024), "GradScaler() got an unexpected keyword argument "
         "'init_scale_loss'; Paddle's name is 'init_loss_scaling'"),
        (lambda: amp.AmpScaler(use_dynamic_loss_scale=False), "AmpScaler() got an unexpected keyword argument "
         "'use_dynamic_loss_scale'; Paddle's name is 'use_dynamic_loss_scaling'"),
        (lambda: amp.auto_cast(enabled=False), "auto_cast() got an unexpected keyword argument 'enabled'; "
         "Paddle's name is 'enable' (paddle_compat.amp.autocast takes torch's names)"),
        (lambda: amp.amp_guard(enabled=False), "amp_guard() got an unexpected keyword argument 'enabled'; "
         "Paddle's name is 'enable' (paddle_compat.amp.autocast takes torch's names)"),
        (lambda: amp.auto_cast(device_type="cpu"), "auto_cast() got an unexpected keyword argument "
         "'device_type'; Paddle's auto_cast has none (paddle_compat.amp.autocast takes torch's names)"),
        (lambda: amp.auto_cast(enable_=False), "auto_cast() got an unexpected keyword argument 'enable_'"),
        (lambda: popt.AdamW(parameters=torch.nn.Linear(2, 2)), "`parameters` should be an iterable of Tensors "
         "(or of parameter-group dicts), but got the Linear module itself: pass model.parameters()"),
        *[
            (lambda cls=cls: cls(torch.nn.Linear(2, 2).parameters(), lr=popt.lr.StepDecay(0.1, 2)),
             "a Paddle learning-rate scheduler (StepDecay) is not a number: a torch.optim optimizer takes a "
             "float as lr= (and torch's schedulers); pass this one as learning_rate= to a "
             "paddle_compat.optimizer optimizer, or call it for its current rate")
            for cls in (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW)
        ],
    ],
)
def test_a_newcomers_slip_says_what_to_write(call, message):
    with pytest.raises(TypeError) as info:
        call()
    assert str(info.value) == message


@pytest.mark.parametrize("given", [{"momentum": -1}, {"momentum": -1e-3}])
def test_a_negative_momentum_is_refused(given):
    params = list(torch.nn.Linear(2, 2).parameters())
    with pytest.raises(ValueError) as info:
        popt.Momentum(0.1, parameters=params, **given)
    assert str(info.value) == f"momentum should be >= 0, but received {given['momentum']}"
    with pytest.raises(ValueError) as info:  # a group's own
        popt.Momentum(0.1, parameters=[{"params": params, **given}])
    assert str(info.value) == f"momentum should be >= 0, but received {given['momentum']}"
    popt.Momentum(0.1, parameters=params, momentum=0)  # no momentum: plain SGD, allowed
