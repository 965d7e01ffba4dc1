"""decorate: O2 casting, master weights, master_grad, save_dtype, bad input."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from paddle_compat import amp

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.LayerNorm(4), nn.GroupNorm(2, 4),
                         nn.InstanceNorm1d(4, affine=True), nn.Embedding(3, 4))


def _dtypes(model: nn.Module) -> dict[str, torch.dtype]:
    return {n: t.dtype for n, t in model.state_dict().items() if t.is_floating_point()}


def test_o1_returns_everything_untouched():
    model, opt = _net(), None
    assert amp.decorate(model) is model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert amp.decorate(model, opt, level="O1") == (model, opt)
    assert set(_dtypes(model).values()) == {F32}
    assert type(opt) is torch.optim.SGD


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_o2_casts_all_but_norm_layers(dtype):
    low = {"float16": F16, "bfloat16": BF16}[dtype]
    model = amp.decorate(_net(), level="O2", dtype=dtype)
    kinds = _dtypes(model)
    assert kinds["0.weight"] == kinds["0.bias"] == kinds["5.weight"] == low
    assert kinds["3.weight"] == low  # GroupNorm is cast, as in Paddle
    assert kinds["1.weight"] == kinds["1.running_mean"] == F32  # BatchNorm always keeps fp32
    keep = F32 if dtype == "float16" else low  # LayerNorm/InstanceNorm: fp32 for float16 only
    assert kinds["2.weight"] == kinds["4.weight"] == keep
    assert model[1].num_batches_tracked.dtype == torch.int64


def test_excluded_layers_by_instance_and_type():
    model = _net()
    inner = nn.Sequential(nn.Linear(4, 4))
    model.append(inner)
    amp.decorate(model, level="O2", excluded_layers=[inner, nn.Embedding])
    kinds = _dtypes(model)
    assert kinds["6.0.weight"] == F32 and kinds["5.weight"] == F32 and kinds["0.weight"] == F16
    model2 = amp.decorate(_net(), level="O2", excluded_layers=nn.Linear)
    assert _dtypes(model2)["0.weight"] == F32
    with pytest.raises(TypeError, match="excluded_layers must be either"):
        amp.decorate(_net(), level="O2", excluded_layers="Linear")


def test_returns_in_the_shapes_given():
    models = [nn.Linear(2, 2), nn.Linear(2, 2)]
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    out_models, out_opts = amp.decorate(models, opts, level="O2")
    assert out_models is models and out_opts is opts
    model, opt = amp.decorate(models[0], opts[0], level="O2")
    assert model is models[0] and opt is opts[0]
    assert amp.decorate(models, level="O2") == models


def _sub_ulp_updates(master_weight):
    model = nn.Linear(8, 8, bias=False)
    nn.init.constant_(model.weight, 0.3)  # fp16 ulp here is 2**-12: 1e-5 is far below half of it
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    model, opt = amp.decorate(model, opt, level="O2", master_weight=master_weight)
    start = model.weight.detach().float().clone()
    for _ in range(64):  # 64 updates of 1e-5: each below half an fp16 ulp of values near 1
        model.weight.grad = torch.full_like(model.weight, 1e-5)
        opt.step()
        opt.zero_grad()
    return start, model.weight.detach().float()


def test_master_weights_accumulate_updates_below_an_ulp():
    start, end = _sub_ulp_updates(None)
    assert torch.all(end < start)  # the master moved by 6.4e-4, more than an ulp
    start, end = _sub_ulp_updates(False)
    assert torch.equal(start, end)  # without masters every fp16 update rounds away


def test_lr_scheduler_created_before_decorate_still_steps_the_masters(recwarn):
    model = nn.Linear(8, 8, bias=False)
    nn.init.constant_(model.weight, 0.3)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=100)
    model, opt = amp.decorate(model, opt, level="O2")
    for _ in range(64):
        model.weight.grad = torch.full_like(model.weight, 1e-5)
        opt.step()
        scheduler.step()
    assert torch.all(model.weight < 0.3)
    assert not [w for w in recwarn if "lr_scheduler" in str(w.message)]


@pytest.mark.parametrize("master_weight, master_grad", [(None, False), (False, True)])
def test_step_with_a_closure_steps_with_the_closures_grads(master_weight, master_grad):
    """The grads the closure makes reach what the optimizer steps (masters, or the params via
    ``main_grad``): without them SGD would skip every parameter."""
    model = nn.Linear(4, 1, bias=False)
    nn.init.constant_(model.weight, 1.0)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    model, opt = amp.decorate(model, opt, level="O2", dtype="bfloat16", master_weight=master_weight,
                              master_grad=master_grad)

    def closure():
        opt.zero_grad()
        loss = model(torch.ones(1, 4, dtype=BF16)).float().sum()  # d loss / d w = 1
        loss.backward()
        return loss

    assert opt.step(closure).item() == 4.0
    assert torch.equal(model.weight, torch.full((1, 4), 0.5, dtype=BF16))
    if master_weight is None:
        assert torch.equal(opt.param_groups[0]["params"][0], torch.full((1, 4), 0.5))


def test_master_weights_are_rounded_back_and_type_is_kept():
    model = nn.Linear(4, 4)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model, opt = amp.decorate(model, opt, level="O2", dtype="bfloat16")
    assert isinstance(opt, torch.optim.Adam)
    model(torch.randn(2, 4, dtype=BF16)).float().sum().backward()
    opt.step()
    masters = opt.param_groups[0]["params"]
    assert all(m.dtype == F32 for m in masters)
    assert torch.equal(model.weight, masters[0].to(BF16))
    assert opt.state[masters[0]]["exp_avg"].dtype == F32


def test_master_weight_state_dict_round_trip():
    def make():
        torch.manual_seed(0)
        model = nn.Linear(4, 4)
        return amp.decorate(model, torch.optim.Adam(model.parameters(), lr=1e-2), level="O2")

    def train(model, opt, steps):
        for _ in range(steps):
            model(torch.ones(2, 4, dtype=F16)).float().square().sum().backward()
            opt.step()
            opt.zero_grad()

    model_a, opt_a = make()
    train(model_a, opt_a, 3)
    saved_model, saved_opt = copy.deepcopy(model_a.state_dict()), copy.deepcopy(opt_a.state_dict())
    assert "master_weights" in saved_opt
    train(model_a, opt_a, 2)

    model_b, opt_b = make()
    model_b.load_state_dict(saved_model)
    opt_b.load_state_dict(saved_opt)
    train(model_b, opt_b, 2)
    assert torch.equal(model_a.weight, model_b.weight)
    assert torch.equal(opt_a.param_groups[0]["params"][0], opt_b.param_groups[0]["params"][0])


def test_model_and_optimizer_survive_pickling_together():
    import io

    model = nn.Linear(4, 4)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model, opt = amp.decorate(model, opt, level="O2")
    model(torch.ones(2, 4, dtype=F16)).float().sum().backward()
    opt.step()
    buffer = io.BytesIO()
    torch.save((model, opt), buffer)
    buffer.seek(0)
    model2, opt2 = torch.load(buffer, weights_only=False)
    for m, o in ((model, opt), (model2, opt2)):
        m.zero_grad()
        m(torch.ones(2, 4, dtype=F16)).float().sum().backward()
        o.step()
    assert type(opt2).__mro__[1:] == type(opt).__mro__[1:]
    assert torch.equal(model.weight, model2.weight)
    assert opt2.param_groups[0]["params"][0] is opt2._master_pairs[0][1]
    assert opt2._master_pairs[0][0] is model2.weight


def test_main_grad_optimizer_survives_pickling_and_deepcopy():
    import pickle

    model = nn.Linear(4, 4)
    model, opt = amp.decorate(model, torch.optim.SGD(model.parameters(), lr=0.1), level="O2",
                              master_weight=False, master_grad=True)
    for twin in (pickle.loads(pickle.dumps(opt)), copy.deepcopy(opt)):
        assert type(twin) is type(opt)  # the same mixed class (MainGradMixin, SGD)
        assert twin.state_dict() == opt.state_dict()


def test_zero_grad_clears_the_models_grads():
    model = nn.Linear(2, 2)
    model, opt = amp.decorate(model, torch.optim.SGD(model.parameters(), lr=0.1), level="O2")
    model(torch.ones(1, 2, dtype=F16)).sum().backward()
    opt.step()
    opt.zero_grad()
    assert model.weight.grad is None


def test_paddle_style_optimizer_gets_multi_precision():
    class PaddleStyle:
        _multi_precision = False

    opt = PaddleStyle()
    _, same = amp.decorate(nn.Linear(2, 2), opt, level="O2")
    assert same is opt and opt._multi_precision is True
    amp.decorate(nn.Linear(2, 2), opt, level="O2", master_weight=False)
    assert opt._multi_precision is False


def test_master_grad_gives_fp32_grads():
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.decorate(model, opt, level="O2", master_grad=True)
    for _ in range(2):
        model(torch.ones(2, 4, dtype=F16)).float().sum().backward()
    assert model.weight.grad is None
    assert model.weight.main_grad.dtype == F32
    assert torch.equal(model.weight.main_grad, torch.full((4, 4), 4.0))
    assert {g.dtype for g in opt._paddle_compat_grads()} == {F32}
    before = model.weight.detach().float().clone()
    opt.step()
    assert torch.allclose(model.weight.float(), before - 0.4, atol=1e-3)
    opt.zero_grad()
    assert model.weight.main_grad is None


def test_save_dtype_casts_state_dict_only():
    model = amp.decorate(_net(), level="O2", save_dtype="float64")
    state = model.state_dict()
    assert state["0.weight"].dtype == torch.float64 and state["1.running_mean"].dtype == torch.float64
    assert state["1.num_batches_tracked"].dtype == torch.int64
    assert model[0].weight.dtype == F16 and model[1].running_mean.dtype == F32
    assert model[0].state_dict()["weight"].dtype == torch.float64


def test_bad_arguments():
    with pytest.raises(TypeError, match="models must be either a single model or a list of models"):
        amp.decorate("model", level="O2")
    with pytest.raises(TypeError, match="models should be torch.nn.Module, but receive <class 'int'>"):
        amp.decorate([nn.Linear(2, 2), 3], level="O2")
    with pytest.raises(TypeError, match="optimizers should be torch.optim.Optimizer, but receive <class 'str'>"):
        amp.decorate(nn.Linear(2, 2), ["sgd"], level="O2")
    model = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="optimizers must be either a single optimizer"):
        amp.decorate(model, "sgd", level="O2")
    with pytest.raises(
        ValueError, match="save_dtype can only be float16 float32 or float64, but your input save_dtype is int8"
    ):
        amp.decorate(model, level="O2", save_dtype="int8")
    assert model.weight.dtype == F32  # nothing changed before the error
    with pytest.raises(ValueError, match="level should be O1 or O2"):
        amp.decorate(model, level="OD")
    with pytest.raises(ValueError, match="dtype only support float16 or bfloat16"):
        amp.decorate(model, level="O2", dtype="float32")


def test_o2_training_with_grad_scaler_converges():
    torch.manual_seed(0)
    x = torch.randn(64, 8)
    y = x @ torch.randn(8, 1)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model, opt = amp.decorate(model, opt, level="O2")
    scaler = amp.GradScaler(init_loss_scaling=1024.0)
    losses = []
    for _ in range(150):
        with amp.auto_cast(level="O2"):
            loss = nn.functional.mse_loss(model(x), y)
        scaled = scaler.scale(loss)
        scaled.backward()
        scaler.minimize(opt, scaled)
        opt.zero_grad()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.05 * losses[0]
    assert model[0].weight.dtype == F16


def test_grad_scaler_unscales_the_low_precision_grads_without_master_grad():
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.decorate(model, opt, level="O2")
    model(torch.ones(2, 4, dtype=F16)).float().sum().backward()
    grads = opt._paddle_compat_grads()
    assert [g.dtype for g in grads] == [F16, F16]
    assert grads[0] is model.weight.grad


def test_bf16_o2_training_turns_dynamic_scaling_off():
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.decorate(model, opt, level="O2", dtype="bfloat16")
    scaler = amp.GradScaler()
    with amp.auto_cast(level="O2", dtype="bfloat16"):
        loss = model(torch.ones(2, 4)).float().mean()
    with pytest.warns(UserWarning, match="dynamic loss scaling for bfloat16"):
        scaled = scaler.scale(loss)
    scaled.backward()
    before = model.weight.detach().clone()
    scaler.minimize(opt, scaled)
    assert not torch.equal(model.weight, before) and model.weight.dtype == BF16


@pytest.mark.parametrize("master_grad", [False, True])
def test_o2_training_with_paddle_style_optimizer_and_grad_scaler(master_grad):
    from paddle_compat.optimizer import Adam

    torch.manual_seed(0)
    x = torch.randn(64, 8)
    y = x @ torch.randn(8, 1)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = Adam(learning_rate=0.01, parameters=model.parameters())
    model, opt = amp.decorate(model, opt, level="O2", master_grad=master_grad)
    assert opt._multi_precision is True
    scaler = amp.GradScaler(init_loss_scaling=1024.0)
    losses = []
    for _ in range(150):
        with amp.auto_cast(level="O2"):
            loss = nn.functional.mse_loss(model(x), y)
        scaled = scaler.scale(loss)
        scaled.backward()
        scaler.minimize(opt, scaled)
        opt.zero_grad()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.05 * losses[0]


def test_master_grad_twice_adds_one_hook():
    model = nn.Linear(4, 4)
    amp.decorate(model, level="O2", master_grad=True)
    amp.decorate(model, level="O2", master_grad=True)
    model(torch.ones(2, 4, dtype=F16)).float().sum().backward()
    assert model.weight.grad is None
    assert torch.equal(model.weight.main_grad, torch.full((4, 4), 2.0))


@pytest.mark.parametrize("use_scaler", [False, True])
def test_master_grad_without_master_weights_trains_a_torch_optimizer(use_scaler):
    """As Paddle's kernels step low-precision params with the float32 grads directly, a torch
    optimizer steps with main_grad (rounded to the param's dtype: torch needs that dtype)."""
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model, opt = amp.decorate(model, opt, level="O2", master_weight=False, master_grad=True)
    assert isinstance(opt, torch.optim.SGD) and model.weight.dtype == F16
    scaler = amp.GradScaler(init_loss_scaling=64.0) if use_scaler else None
    before = model.weight.detach().clone()
    for _ in range(2):  # two micro-batches accumulate in float32
        loss = model(torch.ones(2, 4, dtype=F16)).float().sum()
        (scaler.scale(loss) if scaler else loss).backward()
    assert model.weight.main_grad.dtype == F32
    if scaler:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    torch.testing.assert_close(model.weight.float(), before.float() - 0.1 * 4.0, atol=1e-3, rtol=0)
    main_grad = model.weight.main_grad
    opt.zero_grad(set_to_none=False)  # torch's choice: zeroed in place, main_grad as .grad
    assert model.weight.main_grad is main_grad and torch.count_nonzero(main_grad) == 0
    assert torch.count_nonzero(model.weight.grad) == 0
    opt.zero_grad()
    assert model.weight.main_grad is None and model.weight.grad is None


def test_wrapped_models_are_refused_like_paddle(tmp_path):
    import torch.distributed as dist

    message = (r"^For distributed AMP training, you should first use paddle_compat\.amp\.decorate\(\) to decorate "
               r"origin model, and then wrap it in torch\.nn\.DataParallel or DistributedDataParallel")
    inner = nn.Linear(2, 2)
    with pytest.raises(TypeError, match=message):
        amp.decorate(nn.DataParallel(inner), level="O2")
    with pytest.raises(TypeError, match=message):
        amp.decorate([nn.Linear(2, 2), nn.DataParallel(inner)], level="O2")
    assert inner.weight.dtype == F32
    if not dist.is_available():
        return
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        with pytest.raises(TypeError, match=message):
            amp.decorate(nn.parallel.DistributedDataParallel(inner), level="O2")
    finally:
        dist.destroy_process_group()
    assert inner.weight.dtype == F32


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(level=None), ValueError, r"^level should be O1 or O2, O1 represent AMP train mode"),
    (dict(level="O2", dtype=torch.float16), ValueError, r"^dtype only support float16 or bfloat16\.$"),
    (dict(level="O2", master_weight="yes"), TypeError, r"^master_weight should be a bool, but received str$"),
    (dict(level="O2", master_grad=None), TypeError, r"^master_grad should be a bool, but received NoneType$"),
    (dict(level="O1", master_grad="no"), TypeError, r"^master_grad should be a bool, but received str$"),
    (dict(level="O2", save_dtype=["float16"]), ValueError,
     r"^save_dtype can only be float16 float32 or float64, but your input save_dtype is \['float16'\]\.$"),
])
def test_every_argument_is_checked_before_anything_changes(kwargs, error, message):
    model = nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(error, match=message):
        amp.decorate(model, opt, **kwargs)
    assert model.weight.dtype == F32 and type(opt) is torch.optim.SGD
