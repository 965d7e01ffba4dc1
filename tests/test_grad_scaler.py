"""GradScaler / AmpScaler behaviour on CPU: errors, state machine, safety, logging, checkpoints."""

import collections
import io
import logging
import math
import warnings

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from paddle_compat import _devices
from paddle_compat.amp import AmpScaler, GradScaler, auto_cast
from paddle_compat.amp.amp_state import amp_global_state


def make_model(seed=0, fused=None, opt="sgd"):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    if opt == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01, fused=fused)
    return model, optimizer


def backward(scaler, model, x):
    loss = model(x).pow(2).mean()
    scaled = scaler.scale(loss)
    scaled.backward()
    return scaled


def snapshot(model, optimizer):
    params = [p.detach().clone() for p in model.parameters()]
    state = [
        {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()} for s in optimizer.state.values()
    ]
    return params, state


def same(a, b):
    pa, sa = a
    pb, sb = b
    return all(torch.equal(x, y) for x, y in zip(pa, pb)) and len(sa) == len(sb) and all(
        s1.keys() == s2.keys()
        and all(torch.equal(s1[k], s2[k]) if torch.is_tensor(s1[k]) else s1[k] == s2[k] for k in s1)
        for s1, s2 in zip(sa, sb)
    )


# -- construction and bad input ---------------------------------------------------------------


def test_defaults_follow_paddle_3():
    g, a = GradScaler(), AmpScaler()
    assert (g.get_init_loss_scaling(), g.get_incr_ratio(), g.get_decr_ratio()) == (2.0**16, 2.0, 0.5)
    assert (g.get_incr_every_n_steps(), g.get_decr_every_n_nan_or_inf()) == (2000, 1)
    assert (a.get_init_loss_scaling(), a.get_incr_every_n_steps(), a.get_decr_every_n_nan_or_inf()) == (
        2.0**15, 1000, 1
    )
    assert g.is_enable() and g.is_use_dynamic_loss_scaling()
    assert g.get_scale() == 65536.0


@pytest.mark.parametrize(
    "kwargs, exc, message",
    [
        ({"init_loss_scaling": 0.0}, ValueError, "init_loss_scaling must be a finite number > 0, got 0.0"),
        ({"init_loss_scaling": -2.0}, ValueError, "init_loss_scaling must be a finite number > 0, got -2.0"),
        ({"init_loss_scaling": float("nan")}, ValueError, "init_loss_scaling must be a finite number > 0, got nan"),
        ({"init_loss_scaling": float("inf")}, ValueError, "init_loss_scaling must be a finite number > 0, got inf"),
        ({"init_loss_scaling": 1e-50}, ValueError,
         "init_loss_scaling must be a finite number > 0 in float32's normal range, got 1e-50"),
        ({"init_loss_scaling": None}, TypeError,
         "init_loss_scaling should be a float or an int, but received NoneType"),
        ({"incr_ratio": 0.5}, ValueError, "incr_ratio must be a finite number > 1, got 0.5"),
        ({"decr_ratio": 1.5}, ValueError, "decr_ratio must be a finite number in (0, 1), got 1.5"),
        ({"decr_ratio": -0.5}, ValueError, "decr_ratio must be a finite number in (0, 1), got -0.5"),
        ({"incr_every_n_steps": 0}, ValueError, "incr_every_n_steps must be an integer in [1, 2147483647], got 0"),
        ({"incr_every_n_steps": 1.5}, TypeError, "incr_every_n_steps should be an int, but received float"),
        ({"decr_every_n_nan_or_inf": 0}, ValueError,
         "decr_every_n_nan_or_inf must be an integer in [1, 2147483647], got 0"),
        ({"decr_every_n_nan_or_inf": True}, TypeError, "decr_every_n_nan_or_inf should be an int, but received bool"),
        ({"enable": 1}, TypeError, "enable should be a bool, but received int"),
        ({"use_dynamic_loss_scaling": "yes"}, TypeError, "use_dynamic_loss_scaling should be a bool, but received str"),
        ({"min_loss_scaling": 2.0**20}, ValueError,
         "init_loss_scaling (65536.0) must lie within "
         "[min_loss_scaling, max_loss_scaling] = [1048576.0, 3.4028234663852886e+38]"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs, exc, message):
    with pytest.raises(exc) as info:
        GradScaler(**kwargs)
    assert str(info.value) == message


def test_paddles_signature_only_allows_the_limits_by_keyword():
    with pytest.raises(TypeError):
        GradScaler(True, 1024.0, 2.0, 0.5, 100, 1, True, 1.0)


@pytest.mark.parametrize(
    "setter, value, exc, message",
    [
        ("set_init_loss_scaling", 0, ValueError, "new_init_loss_scaling must be a finite number > 0, got 0.0"),
        ("set_incr_ratio", 1.0, ValueError, "incr_ratio must be a finite number > 1, got 1.0"),
        ("set_decr_ratio", 2, ValueError, "decr_ratio must be a finite number in (0, 1), got 2.0"),
        ("set_incr_every_n_steps", "10", TypeError, "incr_every_n_steps should be an int, but received str"),
        ("set_decr_every_n_nan_or_inf", 0, ValueError,
         "decr_every_n_nan_or_inf must be an integer in [1, 2147483647], got 0"),
    ],
)
def test_setters_reject_bad_values_and_change_nothing(setter, value, exc, message):
    scaler = GradScaler(init_loss_scaling=1024.0)
    before = scaler.state_dict()
    with pytest.raises(exc) as info:
        getattr(scaler, setter)(value)
    assert str(info.value) == message
    after = scaler.state_dict()
    assert torch.equal(after.pop("scale"), before.pop("scale")) and after == before


def test_setters_take_effect():
    scaler = GradScaler()
    scaler.set_init_loss_scaling(8.0)
    scaler.set_incr_ratio(3.0)
    scaler.set_decr_ratio(0.25)
    scaler.set_incr_every_n_steps(7)
    scaler.set_decr_every_n_nan_or_inf(2)
    assert (scaler.get_init_loss_scaling(), scaler.get_scale()) == (8.0, 8.0)
    assert (scaler.get_incr_ratio(), scaler.get_decr_ratio()) == (3.0, 0.25)
    assert (scaler.get_incr_every_n_steps(), scaler.get_decr_every_n_nan_or_inf()) == (7, 2)


def test_scale_of_a_non_tensor_is_a_type_error():
    with pytest.raises(
        TypeError, match=r"^The type of 'var' in GradScaler.scale\(\) must be torch.Tensor, but received float.$"
    ):
        GradScaler().scale(1.0)


@pytest.mark.parametrize("method", ["step", "minimize", "unscale_"])
def test_a_non_optimizer_is_a_type_error(method):
    with pytest.raises(TypeError, match=r"^optimizer must be a torch.optim.Optimizer, got Linear$"):
        getattr(GradScaler(), method)(torch.nn.Linear(2, 2))


# -- the state machine ----------------------------------------------------------------------


def test_state_machine_errors_word_for_word():
    model, opt = make_model()
    scaler = GradScaler()
    backward(scaler, model, torch.randn(3, 6))
    scaler.unscale_(opt)
    with pytest.raises(
        RuntimeError, match=r"^unscale_\(\) has already been called on this optimizer since the last update\(\).$"
    ):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match=r"^unscale_\(\) is being called after step\(\).$"):
        scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match=r"^step\(\) has already been called since the last update\(\).$"):
        scaler.step(opt)
    scaler.update()
    scaler.unscale_(opt)  # READY again after update()


def test_scale_multiplies_into_a_float32_shape_1_tensor():
    scaler = GradScaler(init_loss_scaling=1024.0)
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        out = scaler.scale(torch.tensor(1.5, dtype=dtype))
        assert out.dtype == torch.float32 and out.shape == (1,) and out.item() == 1536.0
    # Paddle's promotion, which is torch's: a 0-d float64 loss gives float32, a [1] one float64.
    assert scaler.scale(torch.tensor(1.5, dtype=torch.float64)).dtype == torch.float32
    assert scaler.scale(torch.tensor([1.5], dtype=torch.float64)).dtype == torch.float64
    assert scaler.scale(torch.full((3,), 1.5, dtype=torch.float16)).dtype == torch.float32


def test_skipped_step_leaves_params_and_optimizer_state_bit_identical():
    model, opt = make_model(opt="adam")
    scaler = GradScaler(init_loss_scaling=1024.0)
    backward(scaler, model, torch.randn(4, 6))
    scaler.minimize(opt)
    opt.zero_grad()
    before = snapshot(model, opt)
    backward(scaler, model, torch.randn(4, 6))
    next(model.parameters()).grad[0, 0] = float("nan")
    scaler.minimize(opt)
    assert same(before, snapshot(model, opt))
    assert scaler.get_scale() == 512.0 and scaler.get_skipped_steps() == 1


def test_minimize_calls_the_optimizers_own_minimize():
    class PaddleStyle(torch.optim.SGD):
        def minimize(self, loss, startup_program=None):
            self.seen = (loss, startup_program)
            self.step()
            return ["ops"], ["params_grads"]

    model = torch.nn.Linear(3, 1)
    opt = PaddleStyle(model.parameters(), lr=0.1)
    scaler = GradScaler()
    scaled = scaler.scale(model(torch.ones(2, 3)).sum())
    scaled.backward()
    assert scaler.minimize(opt, scaled, startup_program="p") == (["ops"], ["params_grads"])
    assert opt.seen[0] is scaled and opt.seen[1] == "p"


def test_minimize_returns_none_pair_for_a_torch_optimizer_and_for_a_skip():
    model, opt = make_model()
    scaler = GradScaler()
    scaled = backward(scaler, model, torch.randn(3, 6))
    assert scaler.minimize(opt, scaled) == (None, None)


def test_static_scaling_keeps_the_scale_and_still_skips():
    model, opt = make_model()
    scaler = GradScaler(init_loss_scaling=128.0, use_dynamic_loss_scaling=False, incr_every_n_steps=1)
    for i in range(4):
        backward(scaler, model, torch.randn(3, 6))
        if i == 1:
            next(model.parameters()).grad[0, 0] = float("inf")
        before = snapshot(model, opt)
        scaler.step(opt)
        scaler.update()
        assert same(before, snapshot(model, opt)) == (i == 1)
        opt.zero_grad()
    assert scaler.get_scale() == 128.0 and scaler.get_skipped_steps() == 1
    assert scaler.state_dict()["incr_count"] == 0


# -- Paddle's dtype policy and disabled scalers ----------------------------------------------


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_dynamic_scaling_turns_itself_off_unless_the_last_auto_cast_was_float16(dtype):
    amp_global_state().amp_dtype = dtype
    scaler = GradScaler()
    loss = torch.tensor(2.0)
    with pytest.warns(
        UserWarning,
        match=f"^It is not recommended to use dynamic loss scaling for {dtype}, so GradScaler is disable by default.",
    ) as record:
        assert scaler.scale(loss) is loss
    # Before any float16 auto_cast a second warning says, louder, what has happened.
    louder = "before any auto_cast(dtype='float16') was entered in this thread"
    assert [louder in str(w.message) for w in record] == [False, True][: 1 + (dtype == "float32")]
    assert {w.filename for w in record} == {__file__}  # they point at the caller's line
    assert not scaler.is_enable() and not scaler.is_use_dynamic_loss_scaling()
    assert scaler.get_init_loss_scaling() == 1.0 and scaler.state_dict() == {} and scaler.get_scale() == 0.0


def test_auto_cast_records_its_dtype_and_never_restores_it():
    amp_global_state().amp_dtype = "float32"
    with auto_cast(dtype="bfloat16"):
        pass
    assert amp_global_state().amp_dtype == "bfloat16"
    with auto_cast():
        pass
    assert amp_global_state().amp_dtype == "float16"


def test_a_static_scaler_keeps_scaling_under_bfloat16():
    amp_global_state().amp_dtype = "bfloat16"
    scaler = GradScaler(init_loss_scaling=4.0, use_dynamic_loss_scaling=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert scaler.scale(torch.tensor(2.0)).item() == 8.0


def test_a_disabled_scaler_passes_everything_through():
    model, opt = make_model()
    scaler = GradScaler(enable=False)
    loss = model(torch.randn(3, 6)).sum()
    assert scaler.scale(loss) is loss
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    scaler.unscale_(opt)
    assert all(torch.equal(g, p.grad) for g, p in zip(grads, model.parameters()))
    before = snapshot(model, opt)
    scaler.step(opt)
    assert not same(before, snapshot(model, opt))
    assert scaler.state_dict() == {} and scaler.get_init_loss_scaling() == 1.0
    scaler.load_state_dict({})  # ignored, as in Paddle


# -- scale below 1: Paddle checks the unscaled values -----------------------------------------


@pytest.mark.parametrize("fused", [False, True])
def test_below_scale_1_an_overflow_made_by_unscaling_is_found(fused):
    param = torch.nn.Parameter(torch.zeros(4, dtype=torch.float16))
    opt = torch.optim.Adam([param], lr=0.1, fused=fused) if fused else torch.optim.SGD([param], lr=0.1)
    scaler = GradScaler(init_loss_scaling=0.25)
    param.grad = torch.tensor([1.0, 20000.0, -3.0, 0.5], dtype=torch.float16)  # x4 overflows float16
    scaler.step(opt)
    scaler.update()
    assert scaler.get_skipped_steps() == 1 and scaler.get_scale() == 0.125
    assert torch.equal(param, torch.zeros(4, dtype=torch.float16))


def test_unscale_is_paddles_multiply_by_the_float32_reciprocal():
    torch.manual_seed(1)
    scaler = GradScaler(init_loss_scaling=3.0)
    params = [torch.nn.Parameter(torch.zeros(257, dtype=d)) for d in (torch.float32, torch.float16, torch.bfloat16)]
    opt = torch.optim.SGD(params, lr=0.1)
    grads = [torch.randn(257).to(p.dtype) * 100 for p in params]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    scaler.unscale_(opt)
    inv = torch.reciprocal(torch.tensor([3.0]))
    for p, g in zip(params, grads):
        expected = (g.float() * inv).to(g.dtype)
        assert torch.equal(p.grad.view(torch.int16 if g.element_size() == 2 else torch.int32),
                           expected.view(torch.int16 if g.element_size() == 2 else torch.int32))
    assert not torch.equal(params[0].grad, grads[0] / 3.0)  # the division Paddle does not do


# -- fused optimizers (torch's grad_scale / found_inf contract) ------------------------------


@pytest.mark.parametrize("explicit_unscale", [False, True])
@pytest.mark.parametrize("decr_n", [1, 2])
def test_fused_optimizers_follow_the_same_trajectory(explicit_unscale, decr_n):
    def run(fused):
        model, opt = make_model(opt="adam", fused=fused)
        scaler = GradScaler(init_loss_scaling=8.0, incr_every_n_steps=3, decr_ratio=0.3, decr_every_n_nan_or_inf=decr_n)
        trajectory = []
        torch.manual_seed(5)
        for i in range(30):
            x = torch.randn(4, 6)
            if i % 7 in (2, 3):
                x[0, 0] = float("nan")
            backward(scaler, model, x)
            if explicit_unscale:
                scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            d = scaler.state_dict()
            trajectory.append((d["scale"].item(), d["incr_count"], d["decr_count"]))
        return trajectory, scaler.get_skipped_steps(), [p.detach() for p in model.parameters()]

    plain, fused = run(False), run(True)
    assert plain[0] == fused[0] and plain[1] == fused[1] == 8  # steps 2, 3, 9, 10, 16, 17, 23, 24
    # torch's fused Adam divides by the scale, Paddle's kernel multiplies by its reciprocal.
    assert all(torch.allclose(a, b, rtol=0, atol=1e-6) for a, b in zip(plain[2], fused[2]))


@pytest.mark.parametrize("decr_ratio", [0.5, 0.3], ids=["the-optimizer-unscales", "unscaled-first"])
def test_a_fused_step_captured_in_a_cuda_graph_moves_the_scale_as_eager_steps_do(monkeypatch, decr_ratio):
    """torch's whole-network recipe (warm-up steps, then every step captured), the capture stood in
    for on CPU tensors: the scale tensor the graph holds is written in place, and the scale, the
    counters, the skips and the parameters follow the eager run bit for bit."""

    def run(capture_from):
        model, opt = make_model(opt="adam", fused=True)
        scaler = GradScaler(init_loss_scaling=8.0, incr_every_n_steps=2, decr_ratio=decr_ratio)
        torch.manual_seed(5)
        trajectory, tensors = [], set()
        for i in range(16):
            with monkeypatch.context() as m:
                if i >= capture_from:
                    m.setattr(_devices, "capturing", lambda t: True)
                x = torch.randn(4, 6)
                if i in (4, 5, 11):
                    x[0, 0] = float("inf")
                backward(scaler, model, x)
                scaler.step(opt)
                scaler.update()
                opt.zero_grad()
            if i >= capture_from:
                tensors.add(id(scaler._scale))
            trajectory.append((scaler.get_scale(), scaler.last_step_skipped(), scaler._incr_count, scaler._decr_count))
        params = [p.detach().view(torch.int32) for p in model.parameters()]
        return trajectory, scaler.get_skipped_steps(), params, len(tensors)

    eager, captured = run(capture_from=99), run(capture_from=2)
    assert captured[3] == 1  # one tensor from the capture on
    assert captured[:2] == eager[:2] and eager[1] == 3
    assert all(torch.equal(a, b) for a, b in zip(captured[2], eager[2]))
    assert len({s for s, *_ in eager[0]}) > 3  # it fell and grew


@pytest.mark.parametrize("decr_n", [1, 3])
def test_fused_trajectory_survives_a_setter_lowering_a_period_mid_run(decr_n):
    def run(fused):
        model, opt = make_model(opt="adam", fused=fused)
        scaler = GradScaler(init_loss_scaling=8.0, incr_every_n_steps=10, decr_every_n_nan_or_inf=decr_n)
        torch.manual_seed(3)
        out = []
        for i in range(16):
            x = torch.randn(4, 6)
            if i in (1, 2, 3, 12):
                x[0, 0] = float("inf")
            backward(scaler, model, x)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            if i == 9:  # incr_count is 6 here: lowering the period below it must not freeze growth
                scaler.set_incr_every_n_steps(2)
                scaler.set_decr_every_n_nan_or_inf(1)
            out.append(scaler.get_scale())
        return out, scaler.state_dict()["incr_count"]

    plain, fused = run(False), run(True)
    assert plain == fused
    assert plain[0][10] > plain[0][9]  # it grew right after the setter


@pytest.mark.parametrize(
    "init, decr_ratio, dtype, optimizer_unscales",
    [
        (1024.0, 0.5, torch.float32, True),  # every scale a power of two: division is exact
        (1000.0, 0.5, torch.float32, False),
        (1024.0, 0.3, torch.float32, False),
        (1024.0, 0.5, torch.float16, False),  # Paddle rounds unscaled fp16 grads to fp16
    ],
)
def test_fused_optimizers_unscale_only_when_their_division_is_paddles_multiply(
    monkeypatch, init, decr_ratio, dtype, optimizer_unscales
):
    from paddle_compat.amp import unscale

    calls = []
    monkeypatch.setattr(unscale, "unscale_", lambda *a, **k: calls.append("in place"))
    monkeypatch.setattr(unscale, "any_nonfinite", lambda *a, **k: calls.append("read only"))
    param = torch.nn.Parameter(torch.ones(8, dtype=dtype))
    opt = torch.optim.SGD([param], lr=0.125, fused=True)
    seen = {}
    original = opt.step

    def step(*args, **kwargs):
        seen["grad_scale"] = getattr(opt, "grad_scale", None)
        return original(*args, **kwargs)

    opt.step = step
    scaler = GradScaler(init_loss_scaling=init, decr_ratio=decr_ratio)
    param.grad = torch.full((8,), init, dtype=dtype)
    scaler.step(opt)
    assert calls == (["read only"] if optimizer_unscales else ["in place"])
    assert (seen["grad_scale"] is not None) == optimizer_unscales


def test_found_inf_flags_stay_0_or_1_for_torchs_fused_kernels():
    from paddle_compat.amp import unscale

    grads = [torch.tensor([float("inf")]), torch.tensor([float("nan")]), torch.tensor([1.0], dtype=torch.float16)]
    found = torch.zeros(1)
    unscale.any_nonfinite(grads, torch.ones(1), found)
    unscale.unscale_([g.clone() for g in grads], torch.ones(1), found, check_output=True)
    assert found.item() == 1.0


# -- logging, checkpoints ------------------------------------------------------------------


def test_each_decrease_is_logged_with_paddles_text_and_nothing_is_printed(caplog, capsys):
    model, opt = make_model()
    scaler = GradScaler(init_loss_scaling=2048.0, decr_ratio=0.5)
    caplog.set_level(logging.INFO, logger="paddle_compat.amp")
    for bad in (True, False, True):
        backward(scaler, model, torch.full((2, 6), float("inf") if bad else 1.0))
        scaler.minimize(opt)
        opt.zero_grad()
    assert [r.getMessage() for r in caplog.records if r.name == "paddle_compat.amp"] == [
        "Found inf or nan, current scale is: 2048.0, decrease to: 2048.0*0.5",
        "Found inf or nan, current scale is: 1024.0, decrease to: 1024.0*0.5",
    ]
    assert capsys.readouterr().out == ""


def test_state_dict_round_trips_through_torch_save_weights_only():
    model, opt = make_model()
    scaler = GradScaler(init_loss_scaling=1000.0, incr_every_n_steps=5, decr_every_n_nan_or_inf=3)
    for i in range(7):
        backward(scaler, model, torch.full((2, 6), float("nan")) if i in (2, 5, 6) else torch.randn(2, 6))
        scaler.minimize(opt)
        opt.zero_grad()
    state = scaler.state_dict()
    assert list(state) == ["scale", "incr_ratio", "decr_ratio", "incr_every_n_steps", "decr_every_n_nan_or_inf",
                           "incr_count", "decr_count", "use_dynamic_loss_scaling", "skipped_steps"]
    assert state["skipped_steps"] == 3
    assert state["scale"].dtype == torch.float32 and state["scale"].shape == (1,)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    resumed = GradScaler()
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    a, b = resumed.state_dict(), scaler.state_dict()
    assert torch.equal(a.pop("scale"), b.pop("scale")) and a == b
    assert (b["incr_count"], b["decr_count"]) == (0, 2)


def test_load_state_dict_takes_a_paddle_dict_with_a_numpy_scale():
    scaler = GradScaler()
    scaler.load_state_dict({
        "scale": np.array([512.0], dtype=np.float32), "incr_ratio": 2.0, "decr_ratio": 0.5,
        "incr_every_n_steps": 4, "decr_every_n_nan_or_inf": 2, "incr_count": np.int64(3), "decr_count": 1,
        "use_dynamic_loss_scaling": np.bool_(True),
    })
    d = scaler.state_dict()
    assert (d["scale"].item(), d["incr_count"], d["decr_count"], d["incr_every_n_steps"]) == (512.0, 3, 1, 4)
    assert scaler.get_init_loss_scaling() == 512.0


def test_load_state_dict_errors_change_nothing():
    scaler = GradScaler(init_loss_scaling=64.0)
    before = scaler.state_dict()
    with pytest.raises(
        RuntimeError,
        match=r"^The input state dict is empty, possibly because it was saved from a disabled instance of GradScaler.$",
    ):
        scaler.load_state_dict({})
    partial = dict(before)
    del partial["incr_count"], partial["decr_ratio"]
    with pytest.raises(KeyError, match=r"state_dict is missing 'decr_ratio', 'incr_count'"):
        scaler.load_state_dict(partial)
    for key, value, exc in [("incr_ratio", 0.5, ValueError), ("decr_count", -1, ValueError),
                            ("scale", torch.tensor([0.0]), ValueError), ("use_dynamic_loss_scaling", "no", TypeError)]:
        with pytest.raises(exc):
            scaler.load_state_dict({**before, key: value})
    for bad in (None, [("scale", 2.0)]):  # not a mapping: refused naming the argument
        with pytest.raises(TypeError, match=f"^state_dict should be a dict, but received {type(bad).__name__}$"):
            scaler.load_state_dict(bad)
    after = scaler.state_dict()
    assert torch.equal(after.pop("scale"), before.pop("scale")) and after == before


def test_get_scale_reads_no_device_on_the_common_path(monkeypatch):
    model, opt = make_model()
    scaler = GradScaler(init_loss_scaling=16.0, incr_every_n_steps=1)
    backward(scaler, model, torch.randn(2, 6))
    scaler.minimize(opt)
    calls = []
    monkeypatch.setattr(torch.Tensor, "item", lambda self: calls.append(1) or 0.0)
    assert scaler.get_scale() == 32.0 and scaler.state_dict()["incr_count"] == 0
    assert calls == []


class _Ops(TorchDispatchMode):
    """Counts the aten ops run inside it."""

    def __init__(self):
        super().__init__()
        self.counts = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


class _Idle(torch.optim.Optimizer):
    def __init__(self, params):
        super().__init__(params, {})

    def step(self, closure=None):
        return None


def test_an_ordinary_step_makes_one_flag_one_pass_per_bucket_and_one_host_read():
    """The hot path: per step one found_inf, one unscale pass per (device, dtype) bucket, one
    host read (the skip decision); update() touches no tensor while the scale stays."""
    params = [torch.nn.Parameter(torch.zeros(4)) for _ in range(3)]
    params.append(torch.nn.Parameter(torch.zeros(4, dtype=torch.float64)))  # a second bucket
    opt, scaler = _Idle(params), GradScaler(init_loss_scaling=8.0)
    for i in range(3):
        for p in params:
            p.grad = torch.ones_like(p)
        scaler.scale(torch.tensor(1.0))
        with _Ops() as step_ops:
            scaler.step(opt)
        with _Ops() as update_ops:
            scaler.update()
        assert step_ops.counts["zeros_like"] == 1
        assert step_ops.counts["reciprocal"] == (i == 0)  # once per scale tensor
        assert step_ops.counts["_amp_foreach_non_finite_check_and_unscale_"] == 2
        assert step_ops.counts["_local_scalar_dense"] == 1  # the one host sync
        assert update_ops.counts == {}


def test_scale_is_never_below_the_float32_normal_range():
    model, opt = make_model()
    scaler = GradScaler(init_loss_scaling=2.0**-120, decr_ratio=0.5)
    for _ in range(12):
        backward(scaler, model, torch.full((2, 6), float("inf")))
        scaler.minimize(opt)
        opt.zero_grad()
    assert scaler.get_scale() == 2.0**-126 and math.isfinite(1 / scaler.get_scale())


def test_a_float32_main_grad_is_what_gets_unscaled_and_checked():
    """decorate(master_grad=True) keeps the float32 grad in ``param.main_grad``; Paddle unscales that."""
    low = torch.nn.Parameter(torch.zeros(4, dtype=torch.float16))
    plain = torch.nn.Parameter(torch.zeros(2))
    low.main_grad = torch.full((4,), 3.0e5)  # beyond float16's range: only float32 holds it
    plain.grad = torch.full((2,), 8.0)
    scaler = GradScaler(init_loss_scaling=8.0)
    scaler.unscale_(torch.optim.SGD([low, plain], lr=0.1))
    assert torch.equal(low.main_grad, torch.full((4,), 37500.0)) and low.grad is None
    assert torch.equal(plain.grad, torch.ones(2))
    assert scaler._found_inf.item() == 0.0


def test_the_fused_path_logs_each_decrease_from_the_replayed_flags(caplog):
    model, opt = make_model(opt="adam", fused=True)
    scaler = GradScaler(init_loss_scaling=2048.0, decr_every_n_nan_or_inf=2, decr_ratio=0.5)
    caplog.set_level(logging.INFO, logger="paddle_compat.amp")
    for bad in (True, True, False, True, True):
        backward(scaler, model, torch.full((2, 6), float("nan") if bad else 1.0))
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    assert scaler.get_scale() == 512.0 and scaler.get_skipped_steps() == 4
    assert [r.getMessage() for r in caplog.records if r.name == "paddle_compat.amp"] == [
        "Found inf or nan, current scale is: 2048.0, decrease to: 2048.0*0.5",
        "Found inf or nan, current scale is: 1024.0, decrease to: 1024.0*0.5",
    ]


# -- checks added by the hardening review ----------------------------------------------------


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (lambda s: s.set_init_loss_scaling(1e-40), ValueError,
         "new_init_loss_scaling must be a finite number > 0 in float32's normal range, got 1e-40"),
        (lambda s: s.set_init_loss_scaling(2.0**30), ValueError,
         "new_init_loss_scaling (1073741824.0) must lie within "
         "[min_loss_scaling, max_loss_scaling] = [1.0, 1048576.0]"),
        (lambda s: s.set_decr_ratio(0.99999999), ValueError,
         "decr_ratio must stay a normal float32 below 1, got 0.99999999"),
        (lambda s: s.set_decr_ratio(1e-50), ValueError, "decr_ratio must stay a normal float32 below 1, got 1e-50"),
        (lambda s: s.set_incr_ratio(1e39), ValueError, "incr_ratio must stay finite and > 1 in float32, got 1e+39"),
        (lambda s: s.set_incr_ratio(1.00000001), ValueError,
         "incr_ratio must stay finite and > 1 in float32, got 1.00000001"),
        (lambda s: s.update(new_scale=-1.0), ValueError, "new_scale must be a finite number > 0, got -1.0"),
        (lambda s: s.load_state_dict({**s.state_dict(), "scale": torch.tensor([2.0**40])}), ValueError,
         "state_dict['scale'] (1099511627776.0) must lie within "
         "[min_loss_scaling, max_loss_scaling] = [1.0, 1048576.0]"),
        (lambda s: s.load_state_dict({**s.state_dict(), "scale": torch.tensor([1e-40])}), ValueError,
         "state_dict['scale'] must be a finite number > 0 in float32's normal range, got 9.99994610111476e-41"),
        (lambda s: s.load_state_dict({**s.state_dict(), "scale": torch.ones(2)}), ValueError,
         "state_dict['scale'] must hold exactly one number, got 2"),
        (lambda s: s.load_state_dict({**s.state_dict(), "scale": "big"}), TypeError,
         "state_dict['scale'] must be a number or a 1-element tensor/array, got str"),
        (lambda s: s.load_state_dict({**s.state_dict(), "skipped_steps": -3}), ValueError,
         "state_dict['skipped_steps'] should be >= 0, but received -3"),
        (lambda s: setattr(s, "_incr_ratio", 0.5), ValueError, "incr_ratio must be a finite number > 1, got 0.5"),
        (lambda s: setattr(s, "_decr_count", -1), ValueError, "_decr_count should be >= 0, but received -1"),
        (lambda s: setattr(s, "process_group", "world"), TypeError,
         "process_group must be a torch.distributed ProcessGroup or None, got str"),
    ],
)
def test_bad_values_are_refused_naming_them_and_change_nothing(call, exc, message):
    scaler = GradScaler(init_loss_scaling=1024.0, min_loss_scaling=1.0, max_loss_scaling=2.0**20)
    before = scaler.state_dict()
    with pytest.raises(exc) as info:
        call(scaler)
    assert str(info.value) == message
    after = scaler.state_dict()
    assert torch.equal(after.pop("scale"), before.pop("scale")) and after == before


@pytest.mark.parametrize("copy", ["pickle", "deepcopy"])
@pytest.mark.parametrize("fused", [False, True])
def test_a_copy_resumes_the_same_trajectory(copy, fused):
    import copy as copy_module
    import pickle

    def run(scaler, model, opt, bads):
        for bad in bads:
            backward(scaler, model, torch.full((2, 6), float("nan")) if bad else torch.ones(2, 6))
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()

    model, opt = make_model(opt="adam", fused=fused)
    scaler = GradScaler(init_loss_scaling=64.0, incr_every_n_steps=2, decr_every_n_nan_or_inf=2)
    run(scaler, model, opt, [False, True, True, False])
    twin = pickle.loads(pickle.dumps(scaler)) if copy == "pickle" else copy_module.deepcopy(scaler)
    model2 = copy_module.deepcopy(model)
    opt2 = type(opt)(model2.parameters(), lr=0.01, fused=fused)
    opt2.load_state_dict(copy_module.deepcopy(opt.state_dict()))  # torch would share the step tensors
    tail = [False, False, True, False, True, True]
    run(scaler, model, opt, tail)
    run(twin, model2, opt2, tail)
    a, b = scaler.state_dict(), twin.state_dict()
    assert torch.equal(a.pop("scale"), b.pop("scale")) and a == b
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), model2.parameters()))


def test_minimize_counts_as_an_optimizer_step_for_torch_lr_schedulers():
    from paddle_compat.optimizer import SGD

    w = torch.nn.Parameter(torch.ones(2))
    opt = SGD(learning_rate=0.1, parameters=[w])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 1.0)
    scaler = GradScaler()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns "Detected call of lr_scheduler.step() before optimizer.step()"
        scaled = scaler.scale(w.sum())
        scaled.backward()
        scaler.minimize(opt, scaled)
        sched.step()


def test_a_replaced_unscale_hook_decides_the_skip_as_in_paddles_fleet():
    """Paddle's fleet wrappers replace ``scaler._unscale`` and set ``_found_inf`` in it."""
    model, opt = make_model()
    scaler = GradScaler()
    calls = []

    def agreed_unscale(optimizer):
        calls.append(optimizer)
        AmpScaler._unscale(scaler, optimizer)
        scaler._found_inf = torch.tensor([True])  # as if another rank overflowed

    scaler._unscale = agreed_unscale
    before = [p.detach().clone() for p in model.parameters()]
    backward(scaler, model, torch.ones(2, 6))
    scaler.step(opt)
    scaler.update()
    assert calls == [opt] and scaler.last_step_skipped() is True
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    assert scaler.get_scale() == 2.0**15


def test_last_step_skipped():
    model, opt = make_model()
    scaler = GradScaler()
    assert scaler.last_step_skipped() is None
    for bad in (True, False):
        backward(scaler, model, torch.full((2, 6), float("inf")) if bad else torch.ones(2, 6))
        scaler.minimize(opt)
        opt.zero_grad()
        assert scaler.last_step_skipped() is bad
    assert GradScaler(enable=False).last_step_skipped() is False


def test_paddle_2x_defaults_on_request():
    old = GradScaler(defaults="2.x")
    assert (old.get_init_loss_scaling(), old.get_incr_every_n_steps(), old.get_decr_every_n_nan_or_inf()) == (
        32768.0, 1000, 2
    )
    assert GradScaler(incr_every_n_steps=7, defaults="2.x").get_incr_every_n_steps() == 7
    assert AmpScaler(defaults="2.x").get_init_loss_scaling() == 2.0**15
    with pytest.raises(ValueError, match=r"^defaults must be '3.x' or '2.x', got '1.x'$"):
        GradScaler(defaults="1.x")


def test_torch_names_on_ampscaler_name_paddles():
    with pytest.raises(
        TypeError,
        match=r"^AmpScaler\(\) got an unexpected keyword argument 'init_scale': Paddle's name is 'init_loss_scaling'",
    ):
        AmpScaler(init_scale=8.0)
    with pytest.raises(TypeError, match=r"^GradScaler\(\) got an unexpected keyword argument 'init_scalng'$"):
        GradScaler(init_scalng=8.0)  # no hint for a name nobody writes


def test_bad_values_under_torch_names_name_what_the_caller_wrote():
    with pytest.raises(ValueError, match=r"^growth_factor must be a finite number > 1, got 0.5$"):
        GradScaler(growth_factor=0.5)
    with pytest.raises(ValueError, match=r"^new_interval must be an integer in \[1, 2147483647\], got 0$"):
        GradScaler().set_growth_interval(0)


class _OlderProtocolSGD(torch.optim.Optimizer):
    """An optimizer written for torch's older scaling protocol: it says it handles scaling and
    expects the scaler in ``step(grad_scaler=...)`` (here it would ask torch's scaler for the
    scale); without one it is a plain SGD."""

    _step_supports_amp_scaling = True

    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})
        self.scalers = []

    def step(self, closure=None, grad_scaler=None):
        self.scalers.append(grad_scaler)
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    p.add_(p.grad, alpha=-group["lr"])


@pytest.mark.parametrize("style", ["step", "minimize", "unscale_first"])
@pytest.mark.parametrize("overflow", [False, True])
def test_an_optimizer_of_the_older_protocol_steps_on_unscaled_grads(style, overflow):
    # Neither torch's treatment (it would need torch's private scaler methods) nor a step on
    # scaled gradients (1023x too large at 1024): Paddle's, with a warning.
    w = torch.nn.Parameter(torch.ones(3))
    opt = _OlderProtocolSGD([w], lr=0.5)
    scaler = GradScaler(init_loss_scaling=1024.0)
    scaler.scale((w * torch.tensor([1.0, 2.0, math.inf if overflow else 3.0])).sum()).backward()
    with pytest.warns(UserWarning, match=r"_OlderProtocolSGD.step\(\) takes grad_scaler=") as record:
        if style == "minimize":
            scaler.minimize(opt, torch.zeros(1))
        else:
            if style == "unscale_first":
                scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
    assert record[0].filename == __file__
    assert scaler.last_step_skipped() is overflow
    if overflow:
        assert opt.scalers == [] and w.tolist() == [1.0, 1.0, 1.0]
    else:
        assert opt.scalers == [None] and w.tolist() == [0.5, 0.0, -0.5]
    assert scaler.get_scale() == (512.0 if overflow else 1024.0)


def test_private_flags_refuse_what_a_truth_test_would_misread():
    scaler = GradScaler()
    for bad in ("no", b"0"):
        with pytest.raises(TypeError, match="^_cache_found_inf should be a bool or None, but received"):
            scaler._cache_found_inf = bad
        with pytest.raises(TypeError, match="^_found_inf should be a bool or a bool tensor, but received"):
            scaler._found_inf = bad
    with pytest.raises(TypeError, match="^_found_inf should be a bool or a bool tensor, but received object$"):
        scaler._found_inf = object()
    assert scaler._cache_found_inf is None and scaler._found_inf.tolist() == [False]
    scaler._cache_found_inf = torch.tensor([True])  # what Paddle code may hand over
    scaler._found_inf = True
    assert scaler._cache_found_inf is True and scaler._found_inf.tolist() == [True]


def test_accelerate_is_not_told_an_optimizer_of_the_older_protocol_is_fused():
    # Such an optimizer is stepped as any other (skipped on the host): the warning Accelerate
    # gets is the one about unscaling, not the fused one (whose skips it could not see).
    w = torch.nn.Parameter(torch.ones(3))
    opt = _OlderProtocolSGD([w], lr=0.5)
    watched = opt.step

    def step(*args, **kwargs):  # what Accelerate's AcceleratedOptimizer puts on the instance
        return watched(*args, **kwargs)

    step.__module__ = "accelerate.optimizer"
    opt.step = step
    scaler = GradScaler(init_loss_scaling=1024.0)
    scaler.scale((w * 2.0).sum()).backward()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        scaler.step(opt)
    messages = [str(r.message) for r in record]
    assert not any("is fused" in m for m in messages), messages
    assert any(m.startswith("Accelerate steps _OlderProtocolSGD on gradients nobody unscaled before") for m in messages)
    assert opt.scalers == [None] and w.tolist() == [0.0, 0.0, 0.0]  # stepped on the unscaled gradient, 2


def _f32(bits: int) -> float:
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


# per dtype: a grad value and two float32 inverse scales around where T(f32(g) * inv) becomes inf
ROUNDING_EDGES = {
    torch.float32: (2.0, _f32(0x7F7FFFFF), _f32(0x7F7FFFFF) / 2),  # the float32 product overflows
    torch.float16: (1.0, 65520.0, _f32(0x477FEFFF)),  # 65520 rounds to inf in float16, just below to 65504
    torch.bfloat16: (1.0, _f32(0x7F7F8000), _f32(0x7F7F7FFF)),  # the same for bfloat16's largest value
    torch.float64: (torch.finfo(torch.float64).max / 2, _f32(0x40000001), 2.0),  # float64 product
}


@pytest.mark.parametrize("dtype", list(ROUNDING_EDGES))
@pytest.mark.parametrize("compiled", [True, False])
def test_the_read_only_check_rounds_as_paddle_with_or_without_the_compiled_kernels(dtype, compiled, monkeypatch):
    """On CPU ``any_nonfinite`` takes its flag from the compiled kernels when they run and every
    grad is contiguous, else from torch operations: either way inf/NaN in ``T(f32(g) * inv)``,
    rounded in float32 and then to the grad's dtype, also where only the unscaling overflows."""
    from paddle_compat import _native
    from paddle_compat.amp import unscale

    if not compiled:
        monkeypatch.setattr(_native, "kernels", lambda: None)
    elif _native.kernels() is None:
        pytest.skip("the compiled kernels are not built")

    def flag(values: list[float], inv: float, contiguous: bool = True) -> bool:
        grads = [torch.ones(300, dtype=dtype), torch.tensor(values, dtype=dtype)]
        if not contiguous:  # the torch path, always
            grads = [torch.stack([g, g], 1)[:, 0] for g in grads]
        found = torch.zeros(())
        unscale.any_nonfinite(grads, torch.tensor(inv), found)
        return bool(found.item())

    value, inv_bad, inv_ok = ROUNDING_EDGES[dtype]
    for contiguous in (True, False):
        assert flag([-value], inv_bad, contiguous) and not flag([-value], inv_ok, contiguous)
        assert flag([1.0, math.nan], 2.0**-16, contiguous) and flag([-math.inf], 1.0, contiguous)
        assert not flag([-3.0, 0.0], 2.0**-16, contiguous)
