"""paddle_compat.apex.amp: apex's ``initialize`` / ``scale_loss`` contract on our GradScaler."""

import io
import logging
import random
import warnings

import pytest
import torch

import paddle_compat.optimizer as pc_optim
from paddle_compat.apex import amp


@pytest.fixture(autouse=True)
def fresh_amp_state(monkeypatch):
    """Each test starts as a fresh process would: amp.initialize not called yet."""
    monkeypatch.setattr(amp, "_amp_state", amp._AmpState())


def init(*args, **kwargs):
    """amp.initialize without its 'nothing is cast' warning (tested on its own)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return amp.initialize(*args, **kwargs)


def make(seed=0, opt="sgd", in_features=4):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(in_features, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    if opt == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    elif opt == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    else:
        optimizer = pc_optim.AdamW(learning_rate=0.01, parameters=model.parameters())
    return model, optimizer


def clone_grads(model):
    return [p.grad.clone() for p in model.parameters()]


def reference_grads(model, *losses_of):
    """Grads of the given losses, accumulated without any scaling, on a copy of the model."""
    twin = type(model)(
        *[type(m)(m.in_features, m.out_features) if isinstance(m, torch.nn.Linear) else m for m in model]
    )
    twin.load_state_dict(model.state_dict())
    for loss_of in losses_of:
        loss_of(twin).backward()
    return clone_grads(twin)


def assert_bitwise(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and torch.equal(a, e), (a, e)


def snapshot(model, optimizer):
    params = [p.detach().clone() for p in model.parameters()]
    state = [{k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()} for s in optimizer.state.values()]
    return params, state


def assert_same_snapshot(a, b):
    assert_bitwise(a[0], b[0])
    assert len(a[1]) == len(b[1])
    for sa, sb in zip(a[1], b[1]):
        assert sa.keys() == sb.keys()
        for k in sa:
            assert torch.equal(sa[k], sb[k]) if torch.is_tensor(sa[k]) else sa[k] == sb[k]


X = torch.linspace(-1, 1, 20).reshape(5, 4)


def loss_fn(x=X, factor=1.0):
    return lambda model: (model(x) * factor).pow(2).mean()


def backward(loss_of, model, optimizer, **kwargs):
    with amp.scale_loss(loss_of(model), optimizer, **kwargs) as scaled:
        scaled.backward()
    return scaled


# -- one loss ----------------------------------------------------------------------------------


def test_scaled_loss_and_unscaled_grads_match_unscaled_training_bitwise():
    model, opt = make()
    model, opt = init(model, opt)
    expected = reference_grads(model, loss_fn())
    loss = loss_fn()(model)
    with amp.scale_loss(loss, opt) as scaled:
        assert scaled.dtype == torch.float32 and scaled.shape == loss.shape
        assert torch.equal(scaled, loss.float() * 65536.0)
        scaled.backward()
    assert_bitwise(clone_grads(model), expected)
    assert amp.state_dict() == {"loss_scaler0": {"loss_scale": 65536.0, "unskipped": 1}}
    assert "step" not in opt.__dict__  # nothing intercepted on a finite step
    before = snapshot(model, opt)
    opt.step()
    assert not torch.equal(before[0][0], next(model.parameters()))


@pytest.mark.parametrize("opt_kind", ["sgd", "adam", "paddle_adamw"])
def test_overflow_skips_the_users_own_step_once_then_restores_it(opt_kind, caplog):
    model, opt = make(opt=opt_kind)
    model, opt = init(model, opt)
    backward(loss_fn(), model, opt)
    opt.step()  # create the optimizer state, so a skipped step can be seen not to touch it
    opt.zero_grad()
    before = snapshot(model, opt)
    with caplog.at_level(logging.INFO, logger="paddle_compat.apex"):
        backward(loss_fn(factor=1e30), model, opt)  # finite loss, scaled grads overflow
        assert isinstance(opt.__dict__["step"], amp.step_guard.StepGuard)
        assert opt.step() is None
    assert_same_snapshot(snapshot(model, opt), before)
    assert "step" not in opt.__dict__  # the class's step is back
    assert "Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to 32768.0" in caplog.messages
    assert amp.state_dict()["loss_scaler0"] == {"loss_scale": 32768.0, "unskipped": 0}
    assert amp._amp_state.loss_scalers[0].grad_scaler.last_step_skipped() is True
    assert amp._amp_state.loss_scalers[0].grad_scaler.get_skipped_steps() == 1
    opt.zero_grad()
    backward(loss_fn(), model, opt)
    opt.step()  # runs again
    assert not torch.equal(before[0][0], next(model.parameters()))


def test_a_wrapper_installed_on_the_instance_before_is_restored_exactly():
    model, opt = make()
    model, opt = init(model, opt)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1)  # wraps opt.step on the instance
    wrapper = opt.__dict__["step"]
    backward(loss_fn(factor=1e30), model, opt)
    assert opt.__dict__["step"] is not wrapper
    opt.step()
    assert opt.__dict__["step"] is wrapper
    opt.zero_grad()
    backward(loss_fn(), model, opt)
    opt.step()
    assert opt._opt_called  # the scheduler's wrapper ran
    scheduler.step()


def test_two_overflows_before_one_step_skip_it_once():
    model, opt = make()
    model, opt = init(model, opt, num_losses=2)
    backward(loss_fn(factor=1e30), model, opt, loss_id=0)
    backward(loss_fn(factor=1e30), model, opt, loss_id=1)
    before = snapshot(model, opt)
    opt.step()
    assert_same_snapshot(snapshot(model, opt), before)
    opt.zero_grad()
    backward(loss_fn(), model, opt)
    opt.step()
    assert not torch.equal(before[0][0], next(model.parameters()))


def test_step_with_a_closure_on_a_skipped_step_raises():
    model, opt = make()
    model, opt = init(model, opt)
    backward(loss_fn(factor=1e30), model, opt)
    with pytest.raises(RuntimeError, match=r"^amp.scale_loss does not support optimizer.step\(closure\).$"):
        opt.step(lambda: 0.0)


# -- several optimizers ------------------------------------------------------------------------


def test_an_overflow_in_one_optimizers_grads_skips_every_optimizer_of_that_backward():
    m0, o0 = make(0)
    m1, o1 = make(1)
    models, opts = init([m0, m1], [o0, o1])
    assert models == [m0, m1] and opts == [o0, o1]
    loss = m0(X).pow(2).mean() + (m1(X) * 1e30).pow(2).mean()
    with amp.scale_loss(loss, [o0, o1]) as scaled:
        scaled.backward()
    assert torch.isfinite(m0[0].weight.grad).all() and not torch.isfinite(m1[0].weight.grad).all()
    before = snapshot(m0, o0), snapshot(m1, o1)
    o0.step()
    o1.step()
    assert_same_snapshot(snapshot(m0, o0), before[0])
    assert_same_snapshot(snapshot(m1, o1), before[1])
    assert "step" not in o0.__dict__ and "step" not in o1.__dict__
    assert amp.state_dict()["loss_scaler0"]["loss_scale"] == 32768.0  # one update for the backward pass


def test_the_same_optimizer_listed_twice_is_unscaled_once():
    model, opt = make()
    model, opt = init(model, opt)
    expected = reference_grads(model, loss_fn())
    with amp.scale_loss(loss_fn()(model), [opt, opt]) as scaled:
        scaled.backward()
    assert_bitwise(clone_grads(model), expected)


# -- several losses ----------------------------------------------------------------------------


def test_two_losses_keep_independent_scales_and_their_grads_add_up_bitwise():
    model, opt = make()
    model, opt = init(model, opt, num_losses=2)
    scalers = amp._amp_state.loss_scalers
    scalers[1]._loss_scale = 2.0**9
    # loss 1 overflows: only its scaler moves; the shared optimizer skips its step
    backward(loss_fn(), model, opt, loss_id=0)
    backward(loss_fn(factor=1e30), model, opt, loss_id=1)
    assert (scalers[0].loss_scale(), scalers[0]._unskipped) == (65536.0, 1)
    assert (scalers[1].loss_scale(), scalers[1]._unskipped) == (256.0, 0)
    opt.step()
    opt.zero_grad()
    # both finite: the grads are those of unscaled training, summed in the same order
    x2 = X.flip(0)
    expected = reference_grads(model, loss_fn(), loss_fn(x2))
    backward(loss_fn(), model, opt, loss_id=0)
    backward(loss_fn(x2), model, opt, loss_id=1)
    assert_bitwise(clone_grads(model), expected)
    assert (scalers[0]._unskipped, scalers[1]._unskipped) == (2, 1)


def test_grads_already_there_keep_their_tensor_and_get_the_new_ones_added():
    model, opt = make()
    model, opt = init(model, opt)
    backward(loss_fn(), model, opt)
    tensors = [p.grad for p in model.parameters()]
    expected = reference_grads(model, loss_fn(), loss_fn(X * 2))
    backward(loss_fn(X * 2), model, opt)
    assert all(p.grad is t for p, t in zip(model.parameters(), tensors))
    assert_bitwise(clone_grads(model), expected)


# -- accumulation with delay_unscale -----------------------------------------------------------


def test_delay_unscale_accumulates_scaled_grads_and_unscales_them_once():
    model, opt = make()
    model, opt = init(model, opt)
    xs = [X, X * 0.5, X.flip(0)]
    expected = reference_grads(model, *(loss_fn(x) for x in xs))
    first = reference_grads(model, loss_fn(xs[0]))
    zeros = [torch.zeros_like(p) for p in model.parameters()]  # as after clear_grad(): set aside, added back
    for p, z in zip(model.parameters(), zeros):
        p.grad = z
    backward(loss_fn(xs[0]), model, opt, delay_unscale=True)
    assert_bitwise(clone_grads(model), [g * 65536.0 for g in first])  # still scaled
    with pytest.raises(RuntimeError) as error:
        opt.step()
    assert str(error.value) == (
        "optimizer.step() was called while the gradients are still multiplied by the loss scale: the last "
        "amp.scale_loss(..., loss_id=0) for this optimizer used delay_unscale=True. Run the last backward "
        "pass before the step under amp.scale_loss(..., delay_unscale=False)."
    )
    backward(loss_fn(xs[1]), model, opt, delay_unscale=True)
    assert amp.state_dict()["loss_scaler0"]["unskipped"] == 0  # no update yet
    backward(loss_fn(xs[2]), model, opt)
    assert_bitwise(clone_grads(model), expected)
    assert all(p.grad is z for p, z in zip(model.parameters(), zeros))
    assert amp.state_dict()["loss_scaler0"] == {"loss_scale": 65536.0, "unskipped": 1}
    assert "step" not in opt.__dict__
    before = snapshot(model, opt)
    opt.step()
    assert not torch.equal(before[0][0], next(model.parameters()))


def test_delay_unscale_overflow_is_found_at_the_final_pass():
    model, opt = make()
    model, opt = init(model, opt)
    backward(loss_fn(factor=1e30), model, opt, delay_unscale=True)
    assert amp.state_dict()["loss_scaler0"]["loss_scale"] == 65536.0
    backward(loss_fn(), model, opt)
    assert amp.state_dict()["loss_scaler0"]["loss_scale"] == 32768.0
    before = snapshot(model, opt)
    opt.step()
    assert_same_snapshot(snapshot(model, opt), before)
    assert "step" not in opt.__dict__


def test_another_loss_id_while_grads_carry_a_scale_is_refused_before_anything_changes():
    model, opt = make()
    model, opt = init(model, opt, num_losses=2)
    backward(loss_fn(), model, opt, loss_id=0, delay_unscale=True)
    grads = clone_grads(model)
    with pytest.raises(RuntimeError) as error:
        amp.scale_loss(loss_fn()(model), opt, loss_id=1)
    assert str(error.value) == (
        "the gradients of this optimizer still carry the scale of loss_id=0 (delay_unscale=True); a backward "
        "pass under loss_id=1 would add gradients with another scale. Finish with "
        "amp.scale_loss(..., loss_id=0, delay_unscale=False) first."
    )
    assert_bitwise(clone_grads(model), grads)
    backward(loss_fn(), model, opt, loss_id=0)
    opt.step()


# -- failures inside the block, re-initialization ----------------------------------------------


def test_an_exception_inside_the_block_gives_the_previous_grads_back():
    model, opt = make()
    model, opt = init(model, opt)
    backward(loss_fn(), model, opt)
    grads = clone_grads(model)
    with pytest.raises(ZeroDivisionError):
        with amp.scale_loss(loss_fn(X * 3)(model), opt) as scaled:
            scaled.backward()
            raise ZeroDivisionError
    assert_bitwise(clone_grads(model), grads)
    assert "step" not in opt.__dict__
    assert amp.state_dict()["loss_scaler0"]["unskipped"] == 1


def test_initialize_again_restores_intercepted_steps():
    model, opt = make()
    model, opt = init(model, opt)
    backward(loss_fn(factor=1e30), model, opt)
    assert "step" in opt.__dict__
    init(model, opt)
    assert "step" not in opt.__dict__
    assert amp.state_dict() == {"loss_scaler0": {"loss_scale": 65536.0, "unskipped": 0}}


# -- the scale policy --------------------------------------------------------------------------


class ApexLossScalerRule:
    """apex's dynamic LossScaler update (apex/amp/scaler.py), written from its documented facts."""

    def __init__(self, window, min_scale=None, max_scale=2.0**24):
        self.scale, self.unskipped, self.window = min(max_scale, 2.0**16), 0, window
        self.min_scale, self.max_scale = min_scale, max_scale

    def update(self, overflow):
        if overflow:
            self.scale = self.scale / 2 if self.min_scale is None else max(self.min_scale, self.scale / 2)
            self.unskipped = 0
        else:
            self.unskipped += 1
        if self.unskipped == self.window:
            self.scale = min(self.max_scale, self.scale * 2)
            self.unskipped = 0


@pytest.mark.parametrize("bounds", [{}, {"min_loss_scale": 2.0**13, "max_loss_scale": 2.0**17}])
def test_dynamic_scale_follows_apex_rule(bounds):
    param = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.SGD([param], lr=0.0)
    init(torch.nn.Identity(), opt, **bounds)
    scaler = amp._amp_state.loss_scalers[0]
    scaler._scale_seq_len = 3
    rule = ApexLossScalerRule(3, bounds.get("min_loss_scale"), bounds.get("max_loss_scale", 2.0**24))
    rng = random.Random(0)
    for _ in range(80):
        overflow = rng.random() < 0.3
        with amp.scale_loss((param * (1e38 if overflow else 1.0)).sum(), opt) as scaled:
            scaled.backward()
        rule.update(overflow)
        assert (scaler.loss_scale(), scaler._unskipped) == (rule.scale, rule.unskipped)
        opt.step()
        opt.zero_grad()


def test_apex_defaults_map_onto_gradscaler():
    init(torch.nn.Identity())
    grad_scaler = amp._amp_state.loss_scalers[0].grad_scaler
    assert grad_scaler.state_dict() | {"scale": None} == {
        "scale": None, "incr_ratio": 2.0, "decr_ratio": 0.5, "incr_every_n_steps": 2000,
        "decr_every_n_nan_or_inf": 1, "incr_count": 0, "decr_count": 0, "use_dynamic_loss_scaling": True,
        "skipped_steps": 0,
    }
    assert grad_scaler.get_scale() == 65536.0
    init(torch.nn.Identity(), max_loss_scale=2.0**10)
    assert amp._amp_state.loss_scalers[0].loss_scale() == 1024.0  # min(2**16, max_loss_scale), as apex


@pytest.mark.parametrize("opt_level, loss_scale, expected", [
    ("O0", None, 1.0), ("O3", None, 1.0), ("O1", 128.0, 128.0), ("O2", "128.0", 128.0),
])
def test_a_fixed_scale_never_moves_but_still_skips_inf_steps(opt_level, loss_scale, expected):
    model, opt = make()
    model, opt = init(model, opt, opt_level=opt_level, loss_scale=loss_scale)
    scaler = amp._amp_state.loss_scalers[0]
    assert not scaler.dynamic and scaler.loss_scale() == expected
    backward(loss_fn(factor=1e30 if expected > 1 else 1e38), model, opt)
    before = snapshot(model, opt)
    opt.step()
    assert_same_snapshot(snapshot(model, opt), before)
    assert scaler.loss_scale() == expected


@pytest.mark.parametrize("opt_level", ["O1", "O2"])
def test_o1_and_o2_default_to_dynamic(opt_level):
    init(torch.nn.Identity(), opt_level=opt_level)
    assert amp._amp_state.loss_scalers[0].dynamic


# -- enabled=False, initialize's arguments and results -----------------------------------------


def test_disabled_amp_yields_the_loss_itself_and_never_skips():
    model, opt = make()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning when disabled
        model, opt = amp.initialize(model, opt, enabled=False)
    loss = loss_fn(factor=1e30)(model)
    with amp.scale_loss(loss, opt, loss_id=5) as scaled:
        assert scaled is loss
        scaled.backward()
    assert "step" not in opt.__dict__
    assert amp.state_dict() == {}


def test_initialize_warns_that_nothing_is_cast_and_returns_its_arguments():
    model, opt = make()
    with pytest.warns(UserWarning) as record:
        result = amp.initialize(model, opt, opt_level="O2", keep_batchnorm_fp32=True)
    assert result[0] is model and result[1] is opt
    assert len(record) == 1 and record[0].filename == __file__
    assert str(record[0].message).startswith(
        "paddle_compat.apex.amp.initialize(opt_level='O2') sets up loss scaling only (and ignores "
        "keep_batchnorm_fp32): models and optimizers are returned unchanged, nothing is cast"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert amp.initialize(model, opt_level="O0") is model
    models = [model]
    assert init(models, (opt,)) == (models, (opt,))


@pytest.mark.parametrize("kwargs, error, message", [
    ({"models": 3}, TypeError, "models must be a torch.nn.Module or a list of them, got int"),
    ({"optimizers": "sgd"}, TypeError, "optimizers must be a torch.optim.Optimizer or a list of them, got str"),
    ({"opt_level": "01"}, ValueError, "opt_level must be one of 'O0', 'O1', 'O2', 'O3' (the letter O), got '01'"),
    ({"num_losses": 0}, ValueError, "num_losses should be >= 1, but received 0"),
    ({"enabled": 1}, TypeError, "enabled should be a bool, but received int"),
    ({"loss_scale": "big"}, ValueError, "loss_scale must be 'dynamic' or a positive number, got 'big'"),
    ({"loss_scale": -1.0}, ValueError, "loss_scale must be a finite number > 0, got -1.0"),
    ({"min_loss_scale": 2.0**20, "max_loss_scale": 2.0**10}, ValueError,
     "min_loss_scale (1048576.0) must not exceed max_loss_scale (1024.0)"),
])
def test_initialize_refuses_bad_arguments_before_anything_changes(kwargs, error, message):
    model, opt = make()
    init(model, opt)
    backward(loss_fn(factor=1e30), model, opt)
    args = {"models": model, "optimizers": opt} | kwargs
    with pytest.raises(error) as caught:
        init(**args)
    assert str(caught.value) == message
    assert "step" in opt.__dict__ and amp.state_dict()["loss_scaler0"]["loss_scale"] == 32768.0


def test_scale_loss_before_initialize_raises():
    model, opt = make()
    with pytest.raises(RuntimeError) as error:
        amp.scale_loss(loss_fn()(model), opt)
    assert str(error.value) == (
        "amp.scale_loss() was called before amp.initialize(): call "
        "model, optimizer = amp.initialize(model, optimizer, ...) first."
    )


@pytest.mark.parametrize("kwargs, error, message", [
    ({"loss_id": 2}, ValueError,
     "loss_id must be in [0, num_losses) = [0, 2), got 2; declare more losses with amp.initialize(..., num_losses=N)"),
    ({"loss_id": -1}, ValueError,
     "loss_id must be in [0, num_losses) = [0, 2), got -1; declare more losses with amp.initialize(..., num_losses=N)"),
    ({"loss_id": "0"}, TypeError, "loss_id should be an int, but received str"),
    ({"loss_id": True}, TypeError, "loss_id should be an int, but received bool"),
    ({"optimizers": None}, TypeError, "optimizers must be a torch.optim.Optimizer or a list of them, got NoneType"),
    ({"optimizers": []}, ValueError, "optimizers must name at least one optimizer"),
    ({"loss": 1.0}, TypeError, "loss must be a torch.Tensor, got float"),
    ({"delay_unscale": 1}, TypeError, "delay_unscale should be a bool, but received int"),
    ({"optimizers": "shared"}, ValueError,
     "optimizers 0 and 1 share a parameter; give scale_loss optimizers over distinct parameters"),
    ({"delay_overflow_check": True}, ValueError,
     "delay_overflow_check=True is not supported: the overflow check runs in every scale_loss"),
])
def test_scale_loss_refuses_bad_arguments(kwargs, error, message):
    model, opt = make()
    model, opt = init(model, opt, num_losses=2)
    args = {"loss": loss_fn()(model), "optimizers": opt} | kwargs
    if args["optimizers"] == "shared":
        args["optimizers"] = [opt, torch.optim.SGD(model[2].parameters(), lr=0.1)]
    with pytest.raises(error) as caught:
        amp.scale_loss(**args)
    assert str(caught.value) == message


# -- checkpoints and apex's private attributes -------------------------------------------------


def test_state_dict_round_trips_through_torch_save_in_apex_format():
    model, opt = make()
    model, opt = init(model, opt, num_losses=2)
    backward(loss_fn(factor=1e30), model, opt, loss_id=1)
    opt.step()
    opt.zero_grad()
    backward(loss_fn(), model, opt, loss_id=1)
    saved = amp.state_dict()
    assert saved == {
        "loss_scaler0": {"loss_scale": 65536.0, "unskipped": 0},
        "loss_scaler1": {"loss_scale": 32768.0, "unskipped": 1},
    }
    buffer = io.BytesIO()
    torch.save({"amp": saved}, buffer)
    buffer.seek(0)
    init(model, opt, num_losses=2)
    amp.load_state_dict(torch.load(buffer, weights_only=True)["amp"])
    assert amp.state_dict() == saved


def test_load_state_dict_checks_everything_first():
    init(torch.nn.Identity(), num_losses=2)
    good = {"loss_scale": 1024.0, "unskipped": 3}
    with pytest.raises(RuntimeError) as error:
        amp.load_state_dict({"loss_scaler0": good, "model": {}})
    assert str(error.value) == 'Error(s) in loading state_dict. Unexpected key(s) in state_dict: "model".'
    with pytest.raises(ValueError) as error:
        amp.load_state_dict({"loss_scaler0": good, "loss_scaler1": {"loss_scale": 0.0, "unskipped": 0}})
    assert str(error.value) == "state_dict['loss_scaler1']['loss_scale'] must be a finite number > 0, got 0.0"
    with pytest.raises(ValueError) as error:
        amp.load_state_dict({"loss_scaler0": {"loss_scale": 2.0**30, "unskipped": 0}})
    assert str(error.value) == (
        "state_dict['loss_scaler0']['loss_scale'] (1073741824.0) must lie within [min_loss_scale, "
        "max_loss_scale] = [1.1754943508222875e-38, 16777216.0]"
    )
    with pytest.raises(KeyError):
        amp.load_state_dict({"loss_scaler0": {"loss_scale": 2.0}})
    assert amp.state_dict()["loss_scaler0"] == {"loss_scale": 65536.0, "unskipped": 0}
    with pytest.warns(UserWarning, match=r"^state_dict contains 1 entries, while 2 loss_scalers are used$"):
        amp.load_state_dict({"loss_scaler0": good})
    assert amp.state_dict()["loss_scaler0"] == good


def test_apex_private_attributes_scripts_write():
    model, opt = make()
    model, opt = init(model, opt)
    scaler = amp._amp_state.loss_scalers[0]
    scaler._loss_scale = 2.0**20
    scaler._unskipped = 5
    assert (scaler.loss_scale(), scaler._unskipped, scaler._scale_seq_len) == (2.0**20, 5, 2000)
    loss = loss_fn()(model)
    with amp.scale_loss(loss, opt) as scaled:
        assert torch.equal(scaled, loss * 2.0**20)
        scaled.backward()
    assert scaler._unskipped == 6
    assert repr(scaler) == "LossScaler(dynamic, loss_scale=1048576.0, unskipped=6)"


def test_master_params_are_the_optimizers_parameters():
    model, opt = make()
    model, opt = init(model, opt)
    assert [id(p) for p in amp.master_params(opt)] == [id(p) for p in model.parameters()]


# -- CUDA: the same skips and scales as on CPU (skipped without a GPU) ---------------------------


def apex_run(device, fused):
    """Two losses, micro-batches with delay_unscale and injected overflows; the record of scales and skips."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)).to(device)
    opt = (
        torch.optim.Adam(model.parameters(), lr=1e-3, fused=fused) if fused
        else torch.optim.Adam(model.parameters(), lr=1e-3)
    )
    init(model, opt, num_losses=2)
    amp._amp_state.loss_scalers[0]._scale_seq_len = 2
    record = []
    for step in range(8):
        before = model[0].weight.detach().clone()
        for micro in range(2):
            x = torch.randn(4, 8).to(device)
            factor = 1e30 if (step, micro) in {(1, 1), (4, 0)} else 1.0
            with torch.autocast(device_type=device, dtype=torch.float16):
                out = model(x)
            with amp.scale_loss((out.float() * factor).pow(2).mean(), opt, loss_id=0, delay_unscale=micro == 0) as s:
                s.backward()
        loss1 = (model(torch.randn(4, 8).to(device)) * (1e30 if step == 6 else 1.0)).pow(2).mean()
        with amp.scale_loss(loss1, opt, loss_id=1) as s:
            s.backward()
        opt.step()
        opt.zero_grad()
        record.append((amp.state_dict(), not torch.equal(before, model[0].weight)))
    return record, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("fused", [False, True])
def test_cuda_skips_and_scales_as_on_cpu(fused):
    cpu_record, cpu_params = apex_run("cpu", fused=False)
    cuda_record, cuda_params = apex_run("cuda", fused=fused)
    assert cuda_record == cpu_record
    assert [stepped for _, stepped in cpu_record] == [True, False, True, True, False, True, False, True]
    for a, b in zip(cuda_params, cpu_params):
        torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-2)  # other kernels, same skips


def test_apex_run_record_on_cpu():
    """The CPU half of the CUDA comparison, so the scenario itself is checked on every machine."""
    record, _ = apex_run("cpu", fused=False)
    assert [stepped for _, stepped in record] == [True, False, True, True, False, True, False, True]
    assert record[-1][0] == {"loss_scaler0": {"loss_scale": 65536.0, "unskipped": 1},
                             "loss_scaler1": {"loss_scale": 32768.0, "unskipped": 1}}
