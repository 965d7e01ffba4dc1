"""paddle_compat.parity conversions without Paddle: layer state by module type, optimizer, LR
scheduler and scaler state. (The same rules against real Paddle layers: tests/parity/test_parity_kit.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import paddle_compat.optimizer as popt
from paddle_compat.amp import GradScaler
from paddle_compat.amp.grad_scaler import STATE_DICT_KEYS
from paddle_compat.parity import (
    lr_scheduler_state_to_paddle,
    lr_scheduler_state_to_torch,
    optimizer_state_to_paddle,
    optimizer_state_to_torch,
    paddle_to_torch,
    pdio,
    scaler_state_to_paddle,
    torch_to_paddle,
)
from paddle_compat.parity.optimizer_state import beta_pow, steps_from_beta_pow


class Net(nn.Module):
    """One of every module type with a rule."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(4, 6)
        self.bn = nn.BatchNorm1d(6)
        self.emb = nn.Embedding(10, 6)
        self.ln = nn.LayerNorm(6)
        self.attn = nn.MultiheadAttention(6, 2, batch_first=True)
        self.rnn = nn.LSTM(6, 5, num_layers=2, bidirectional=True, batch_first=True)
        self.conv = nn.Conv1d(3, 2, 3)
        self.inorm = nn.InstanceNorm1d(3, affine=True)
        self.prelu = nn.PReLU(2)
        self.bil = nn.Bilinear(2, 3, 4)
        with torch.no_grad():
            for p in self.parameters():
                p.uniform_(-1, 1)
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)
            self.bn.num_batches_tracked.fill_(7)


# ------------------------------------------------------------------------------- layer state


def test_paddle_names_and_layouts():
    net = Net()
    pd = torch_to_paddle(net)
    sd = net.state_dict()
    # Linear: transposed; BatchNorm: Paddle's names, no num_batches_tracked
    np.testing.assert_array_equal(pd["fc.weight"], sd["fc.weight"].numpy().T)
    np.testing.assert_array_equal(pd["bn._mean"], sd["bn.running_mean"].numpy())
    np.testing.assert_array_equal(pd["bn._variance"], sd["bn.running_var"].numpy())
    assert not any("num_batches_tracked" in k or "running" in k for k in pd)
    # MultiheadAttention: in_proj split into q/k/v, each transposed; out_proj a Linear
    w = sd["attn.in_proj_weight"].numpy()
    for i, name in enumerate("qkv"):
        np.testing.assert_array_equal(pd[f"attn.{name}_proj.weight"], w[6 * i : 6 * (i + 1)].T)
        np.testing.assert_array_equal(
            pd[f"attn.{name}_proj.bias"], sd["attn.in_proj_bias"].numpy()[6 * i : 6 * (i + 1)]
        )
    np.testing.assert_array_equal(pd["attn.out_proj.weight"], sd["attn.out_proj.weight"].numpy().T)
    # LSTM: flat names as they are, plus Paddle's cell names
    np.testing.assert_array_equal(pd["rnn.weight_ih_l1_reverse"], sd["rnn.weight_ih_l1_reverse"].numpy())
    np.testing.assert_array_equal(pd["rnn.1.cell_bw.weight_ih"], sd["rnn.weight_ih_l1_reverse"].numpy())
    np.testing.assert_array_equal(pd["rnn.0.cell_fw.bias_hh"], sd["rnn.bias_hh_l0"].numpy())
    # InstanceNorm's weight is Paddle's scale; PReLU's is _weight; Bilinear's bias is [1, out]
    np.testing.assert_array_equal(pd["inorm.scale"], sd["inorm.weight"].numpy())
    np.testing.assert_array_equal(pd["prelu._weight"], sd["prelu.weight"].numpy())
    assert pd["bil.bias"].shape == (1, 4)
    # the rest as it is
    for k in ("emb.weight", "ln.weight", "ln.bias", "conv.weight", "conv.bias", "bil.weight"):
        np.testing.assert_array_equal(pd[k], sd[k].numpy())
    assert all(v.flags["C_CONTIGUOUS"] for v in pd.values())


def test_round_trip_is_bitwise():
    net = Net()
    back = paddle_to_torch(torch_to_paddle(net), Net())
    sd = net.state_dict()
    assert list(back) == list(sd)
    for k, v in sd.items():
        assert back[k].dtype == v.dtype and torch.equal(back[k], v), k
    fresh = Net()
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    fresh.load_state_dict(back)
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), sd.values(), strict=True))


def test_num_batches_tracked_is_the_modules_own():
    net = Net()
    target = Net()
    target.bn.num_batches_tracked.fill_(3)
    assert paddle_to_torch(torch_to_paddle(net), target)["bn.num_batches_tracked"].item() == 3


def test_lstm_cell_names_alone_are_enough():
    net = nn.LSTM(3, 4, num_layers=2)
    pd = torch_to_paddle(net)
    cells_only = {k: v for k, v in pd.items() if ".cell." in k}
    flat_only = {k: v for k, v in pd.items() if ".cell." not in k}
    for variant in (cells_only, flat_only, pd):
        back = paddle_to_torch(variant, net)
        assert all(torch.equal(back[k], v) for k, v in net.state_dict().items())
    assert not any(".cell." in k for k in torch_to_paddle(net, aliases=False))


def test_lstm_aliases_must_agree():
    net = nn.LSTM(3, 4)
    pd = torch_to_paddle(net)
    pd["0.cell.weight_hh"] = pd["0.cell.weight_hh"] + 1
    with pytest.raises(ValueError, match="'weight_hh_l0' and '0.cell.weight_hh' are the same Paddle parameter"):
        paddle_to_torch(pd, net)


def test_lstm_projection():
    net = nn.LSTM(3, 5, proj_size=2)
    pd = torch_to_paddle(net)
    np.testing.assert_array_equal(pd["0.cell.weight_ho"], net.weight_hr_l0.detach().numpy().T)
    assert "weight_hr_l0" not in pd and "weight_ho_l0" not in pd


def test_multihead_attention_with_kdim_vdim():
    mha = nn.MultiheadAttention(8, 2, kdim=4, vdim=6)
    pd = torch_to_paddle(mha)
    assert {k: v.shape for k, v in pd.items() if k.endswith("weight")} == {
        "q_proj.weight": (8, 8),
        "k_proj.weight": (4, 8),
        "v_proj.weight": (6, 8),
        "out_proj.weight": (8, 8),
    }
    back = paddle_to_torch(pd, mha)
    assert all(torch.equal(back[k], v) for k, v in mha.state_dict().items())


def test_unsupported_modules_refused():
    with pytest.raises(ValueError, match="add_bias_kv=True"):
        torch_to_paddle(nn.MultiheadAttention(4, 2, add_bias_kv=True))
    with pytest.raises(ValueError, match="track_running_stats=True"):
        torch_to_paddle(nn.InstanceNorm1d(3, affine=True, track_running_stats=True))


def test_name_map():
    class Port(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 2)  # Paddle: self.linear
            self.head = nn.Module()
            self.head.w = nn.Parameter(torch.ones(2))  # Paddle: head.weight

    port = Port()
    pd = torch_to_paddle(port, name_map={"fc": "linear", "head.w": "head.weight"})
    assert set(pd) == {"linear.weight", "linear.bias", "head.weight"}
    np.testing.assert_array_equal(pd["linear.weight"], port.fc.weight.detach().numpy().T)  # still a Linear
    back = paddle_to_torch(pd, port, name_map={"fc": "linear", "head.w": "head.weight"})
    assert set(back) == {"fc.weight", "fc.bias", "head.w"}
    with pytest.raises(ValueError, match="name_map sends both"):
        torch_to_paddle(port, name_map={"fc.bias": "x", "head.w": "x"})
    with pytest.raises(TypeError, match="name_map"):
        torch_to_paddle(port, name_map=[("fc", "linear")])


def test_shape_mismatch_names_the_parameter_and_both_shapes():
    net = nn.Sequential(nn.Linear(4, 3))
    pd = torch_to_paddle(net)
    pd["0.weight"] = pd["0.weight"].T.copy()  # torch's layout by mistake
    with pytest.raises(ValueError) as e:
        paddle_to_torch(pd, net)
    msg = str(e.value)
    assert "'0.weight'" in msg and "[3, 4]" in msg and "[4, 3]" in msg


def test_missing_and_unexpected_keys():
    net = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    pd = torch_to_paddle(net)
    del pd["1._variance"]
    pd["2.weight"] = np.zeros(3, np.float32)
    with pytest.raises(ValueError) as e:
        paddle_to_torch(pd, net)
    assert "missing from the Paddle state dict: '1._variance'" in str(e.value)
    assert "unexpected in the Paddle state dict (not in the module): '2.weight'" in str(e.value)
    # strict=False: what is there, for load_state_dict(strict=False); unknown keys still refused
    del pd["2.weight"]
    partial = paddle_to_torch(pd, net, strict=False)
    assert "1.running_var" not in partial and "1.running_mean" in partial


def test_nothing_is_half_loaded():
    net = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    before = {k: v.clone() for k, v in net.state_dict().items()}
    pd = torch_to_paddle(nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2)))
    pd["1.weight"] = np.zeros((2, 3), np.float32)  # the second layer's shape is wrong
    with pytest.raises(ValueError, match="'1.weight'"):
        net.load_state_dict(paddle_to_torch(pd, net))
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


def test_bad_values_refused():
    net = nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"state\['weight'\] is str"):
        paddle_to_torch({"weight": "x", "bias": np.zeros(2, np.float32)}, net)
    with pytest.raises(TypeError, match="state must be a dict"):
        paddle_to_torch([1, 2], net)
    with pytest.raises(TypeError, match="module must be a torch.nn.Module"):
        torch_to_paddle(object())


def test_bfloat16_travels_as_uint16_bits():
    net = nn.Linear(3, 2).to(torch.bfloat16)
    pd = torch_to_paddle(net)
    assert pd["weight"].dtype == np.uint16
    back = paddle_to_torch(pd, net)
    assert back["weight"].dtype == torch.bfloat16 and torch.equal(back["weight"], net.weight.detach())


def test_pdparams_file_round_trip(tmp_path):
    net = Net()
    path = tmp_path / "net.pdparams"
    pdio.save(torch_to_paddle(net), path, parameter_names={"fc.weight": "linear_0.w_0"})
    back = paddle_to_torch(path, net)  # the name table is skipped
    assert all(torch.equal(back[k], v) for k, v in net.state_dict().items())
    assert pdio.parameter_names(path) == {"fc.weight": "linear_0.w_0"}


# ------------------------------------------------------------------------------- optimizer state


def _train(model: nn.Module, opt, steps: int, seed: int = 1) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(5, 4, generator=gen)
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()


def _names(model: nn.Module) -> dict[str, str]:
    """A Paddle-like parameter-name table for the model's Paddle twin."""
    return {k: f"p{i}.w_0" for i, k in enumerate(torch_to_paddle(model))}


def _mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))


def test_paddle_compat_adam_to_paddle_and_back_resumes_bitwise():
    model, twin = _mlp(), _mlp()
    opt = popt.Adam(learning_rate=0.01, parameters=model.parameters())
    _train(model, opt, 3)
    names = _names(model)
    pd = optimizer_state_to_paddle(opt, model, names)
    assert set(pd) == {
        f"{n}_{acc}_0" for n in names.values() for acc in ("moment1", "moment2", "beta1_pow_acc", "beta2_pow_acc")
    }
    np.testing.assert_array_equal(pd["p0.w_0_moment1_0"], opt.state[model[0].weight]["moment1"].numpy().T)
    assert pd["p0.w_0_beta1_pow_acc_0"].dtype == np.float32 and pd["p0.w_0_beta1_pow_acc_0"].shape == (1,)
    assert pd["p0.w_0_beta1_pow_acc_0"][0] == beta_pow(0.9, 3)

    twin.load_state_dict(model.state_dict())
    opt2 = popt.Adam(learning_rate=0.01, parameters=twin.parameters())
    opt2.load_state_dict(optimizer_state_to_torch(pd, opt2, twin, names))
    _train(model, opt, 4, seed=2)
    _train(twin, opt2, 4, seed=2)
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)


def test_torch_adam_to_paddle_and_back():
    model = _mlp()
    opt = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.99))
    _train(model, opt, 5)
    names = _names(model)
    pd = optimizer_state_to_paddle(opt, model, names)
    assert pd["p0.w_0_beta1_pow_acc_0"][0] == beta_pow(0.8, 5)
    np.testing.assert_array_equal(pd["p0.w_0_moment2_0"], opt.state[model[0].weight]["exp_avg_sq"].numpy().T)
    twin = _mlp()
    opt2 = torch.optim.Adam(twin.parameters(), lr=0.01, betas=(0.8, 0.99))
    sd = optimizer_state_to_torch(pd, opt2, twin, names)
    for i, p in enumerate(model.parameters()):
        assert sd["state"][i]["step"].item() == 5.0
        assert torch.equal(sd["state"][i]["exp_avg"], opt.state[p]["exp_avg"])
    opt2.load_state_dict(sd)


def test_sgd_momentum_and_velocity():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    _train(model, opt, 2)
    names = _names(model)
    pd = optimizer_state_to_paddle(opt, model, names)
    assert set(pd) == {f"{n}_velocity_0" for n in names.values()}
    ours = popt.Momentum(learning_rate=0.1, momentum=0.9, parameters=model.parameters())
    sd = optimizer_state_to_torch(pd, ours, model, names)
    assert torch.equal(sd["state"][0]["velocity"], opt.state[model[0].weight]["momentum_buffer"])
    back = optimizer_state_to_torch(pd, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), model, names)
    assert torch.equal(back["state"][2]["momentum_buffer"], opt.state[model[2].weight]["momentum_buffer"])


def test_parameters_without_state_get_paddles_initial_values():
    model = _mlp()
    opt = popt.AdamW(learning_rate=0.01, parameters=model.parameters())
    pd = optimizer_state_to_paddle(opt, model, _names(model))  # never stepped
    assert not pd["p0.w_0_moment1_0"].any() and pd["p0.w_0_moment1_0"].shape == (4, 6)
    assert pd["p1.w_0_beta2_pow_acc_0"][0] == np.float32(0.999)


def test_master_weights(tmp_path):
    model = _mlp().half()
    opt = popt.Adam(learning_rate=0.01, parameters=model.parameters(), multi_precision=True)
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.5)
    opt.step()
    names = _names(model)
    pd = optimizer_state_to_paddle(opt, model, names)
    assert set(pd["master_weights"]) == set(names.values())
    np.testing.assert_array_equal(pd["master_weights"]["p0.w_0"], opt.state[model[0].weight]["master_weight"].numpy().T)
    path = tmp_path / "opt.pdopt"
    pdio.save(pd, path)
    opt2 = popt.Adam(learning_rate=0.01, parameters=model.parameters(), multi_precision=True)
    sd = optimizer_state_to_torch(path, opt2, model, names)
    assert sd["state"][0]["master_weight"].dtype == torch.float32
    assert torch.equal(sd["state"][0]["master_weight"], opt.state[model[0].weight]["master_weight"])


def test_optimizer_state_errors():
    model = _mlp()
    opt = popt.Adam(learning_rate=0.01, parameters=model.parameters())
    _train(model, opt, 1)
    names = _names(model)
    pd = optimizer_state_to_paddle(opt, model, names)
    with pytest.raises(ValueError, match="'stray_moment1_0'"):
        optimizer_state_to_torch({**pd, "stray_moment1_0": np.zeros(1)}, opt, model, names)
    bad = dict(pd)
    bad["p0.w_0_moment1_0"] = np.zeros((6, 4), np.float32)
    with pytest.raises(ValueError, match=r"'0.weight'.*\[6, 4\].*\[4, 6\]"):
        optimizer_state_to_torch(bad, opt, model, names)
    with pytest.raises(ValueError, match="no Paddle name for '0.bias'"):
        optimizer_state_to_paddle(opt, model, {"0.weight": "w"})
    with pytest.raises(TypeError, match="only paddle_compat.optimizer"):
        optimizer_state_to_paddle(torch.optim.RMSprop(model.parameters()), model, names)
    # torch.optim.Adam needs the update count: unreadable once the powers underflow
    under = dict(pd)
    for k in under:
        if "pow_acc" in k:
            under[k] = np.zeros(1, np.float32)
    adam = torch.optim.Adam(model.parameters())
    with pytest.raises(ValueError, match="pass steps="):
        optimizer_state_to_torch(under, adam, model, names)
    assert optimizer_state_to_torch(under, adam, model, names, steps=5000)["state"][0]["step"].item() == 5000


def test_steps_from_beta_pow():
    for beta in (0.9, 0.999, 0.5):
        for t in (0, 1, 7, 120):
            assert steps_from_beta_pow(beta, beta_pow(beta, t)) == t
    assert beta_pow(0.5, 300) == 0 and steps_from_beta_pow(0.5, beta_pow(0.5, 300)) is None  # underflowed
    assert steps_from_beta_pow(0.9, 0.5) is None  # not a power of 0.9
    assert steps_from_beta_pow(0.9, 0.0) is None


# ------------------------------------------------------------------------------- scheduler, scaler


def test_torch_lr_scheduler_state():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for _ in range(5):
        opt.step()
        sched.step()
    pd = lr_scheduler_state_to_paddle(sched)
    assert pd == {"last_epoch": 5, "last_lr": 0.25}
    opt2 = torch.optim.SGD(model.parameters(), lr=1.0)
    sched2 = torch.optim.lr_scheduler.StepLR(opt2, step_size=2, gamma=0.5)
    sched2.load_state_dict(lr_scheduler_state_to_torch(pd, sched2))
    assert sched2.last_epoch == 5 and sched2.get_last_lr() == [0.25]
    with pytest.raises(ValueError, match="no 'last_lr'"):
        lr_scheduler_state_to_torch({"last_epoch": 1}, sched2)
    for bad, exc, message in [
        ({"last_epoch": 1, "last_lr": float("nan")}, ValueError, r"^state\['last_lr'\] should be a finite number"),
        ({"last_epoch": 1, "last_lr": -0.1}, ValueError, r"^state\['last_lr'\] should be >= 0"),
        ({"last_epoch": "1", "last_lr": 0.1}, TypeError, r"^state\['last_epoch'\] should be a float or an int"),
        ({"last_epoch": 1.5, "last_lr": 0.1}, ValueError, r"^state\['last_epoch'\] should be a whole number"),
        ([1, 0.1], TypeError, "^state should be a dict"),
    ]:
        with pytest.raises(exc, match=message):
            lr_scheduler_state_to_torch(bad, sched2)
    for call in (lambda: lr_scheduler_state_to_paddle("x"), lambda: lr_scheduler_state_to_torch(pd, "x")):
        refused = "^scheduler should be a Paddle-style or a torch LR scheduler, but received str$"
        with pytest.raises(TypeError, match=refused):
            call()


def test_paddle_style_scheduler_passes_through():
    class PaddleStyle:
        def __init__(self) -> None:
            self.state = {"last_epoch": 3, "last_lr": 0.1}

        def state_dict(self):
            return dict(self.state)

        def set_state_dict(self, sd):
            self.state = dict(sd)

    s = PaddleStyle()
    assert lr_scheduler_state_to_paddle(s) == {"last_epoch": 3, "last_lr": 0.1}
    assert lr_scheduler_state_to_torch({"last_epoch": 9, "last_lr": 0.5}, s) == {"last_epoch": 9, "last_lr": 0.5}


def test_scaler_state_to_paddle():
    scaler = GradScaler(init_loss_scaling=1024.0, incr_every_n_steps=3)
    pd = scaler_state_to_paddle(scaler)
    # Paddle's 8 keys in its order: the scaler's own, without skipped_steps (both checked against Paddle)
    assert list(pd) == list(STATE_DICT_KEYS) == [k for k in scaler.state_dict() if k != "skipped_steps"]
    assert isinstance(pd["scale"], np.ndarray) and pd["scale"].dtype == np.float32 and pd["scale"][0] == 1024.0
    other = GradScaler()
    other.load_state_dict(pd)  # Paddle's format loads as it is
    assert other.get_scale() == 1024.0 and other.get_incr_every_n_steps() == 3
    assert scaler_state_to_paddle(GradScaler(enable=False)) == {}
    with pytest.raises(ValueError, match="missing 'incr_ratio'"):
        scaler_state_to_paddle({"scale": 1.0})


def test_results_never_share_memory_with_their_source():
    """Paddle's set_value keeps a numpy array's buffer: a converted array aliasing a live torch tensor
    (a bias needs no transpose) would tie the two frameworks' parameters together."""
    model = _mlp()
    opt = popt.Momentum(learning_rate=0.1, parameters=model.parameters())
    _train(model, opt, 1)
    opt_a = popt.Adam(learning_rate=0.1, parameters=model.parameters())
    _train(model, opt_a, 1)
    live = [t.numpy() for t in model.state_dict().values()]
    live += [v.numpy() for st in list(opt.state.values()) + list(opt_a.state.values()) for v in st.values()]
    names = _names(model)
    outputs = list(torch_to_paddle(model).values())
    outputs += list(optimizer_state_to_paddle(opt, model, names).values())
    outputs += list(optimizer_state_to_paddle(opt_a, model, names).values())
    assert not any(np.shares_memory(o, t) for o in outputs for t in live)
    pd = torch_to_paddle(model)
    back = paddle_to_torch(pd, model)
    assert not any(np.shares_memory(b.numpy(), a) for b in back.values() for a in pd.values())


class StepDecayLike:
    """A Paddle-style LR scheduler (what paddle_compat.optimizer.lr provides): called for the rate."""

    def __init__(self, lr: float = 0.1) -> None:
        self.last_epoch, self.last_lr = 0, lr

    def __call__(self) -> float:
        return self.last_lr

    def step(self) -> None:
        self.last_epoch += 1
        self.last_lr *= 0.5

    def state_dict(self):
        return {"last_epoch": self.last_epoch, "last_lr": self.last_lr}

    def set_state_dict(self, sd):
        self.last_epoch, self.last_lr = sd["last_epoch"], sd["last_lr"]


def test_lr_scheduler_state_travels_with_the_optimizer_state():
    model = _mlp()
    sched = StepDecayLike()
    opt = popt.Adam(learning_rate=sched, parameters=model.parameters())
    _train(model, opt, 2)
    sched.step()
    names = _names(model)
    pd = optimizer_state_to_paddle(opt, model, names)
    assert pd["LR_Scheduler"] == {"last_epoch": 1, "last_lr": 0.05}
    sched2 = StepDecayLike()
    opt2 = popt.Adam(learning_rate=sched2, parameters=model.parameters())
    sd = optimizer_state_to_torch(pd, opt2, model, names)
    opt2.load_state_dict(sd)
    assert (sched2.last_epoch, sched2.last_lr) == (1, 0.05) and opt2.get_lr() == 0.05


class FusedDense(torch.nn.Module):
    """A user's layer: a [out, in] weight named w, a fused qkv weight, and a call counter buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 4))
        self.qkv = torch.nn.Parameter(torch.randn(6, 4))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))


def test_registered_rule_for_a_custom_layer():
    from paddle_compat.parity import register_rule, unregister_rule

    model = torch.nn.Sequential(FusedDense())
    assert sorted(torch_to_paddle(model)) == ["0.calls", "0.qkv", "0.w"]  # no rule: as they are
    register_rule(FusedDense, rename={"w": "weight"}, transpose=["w", "qkv"], split={"qkv": ("q", "k", "v")},
                  torch_only=["calls"])
    try:
        state = torch_to_paddle(model)
        assert sorted(state) == ["0.k", "0.q", "0.v", "0.weight"]
        np.testing.assert_array_equal(state["0.weight"], model[0].w.detach().numpy().T)
        np.testing.assert_array_equal(state["0.k"], model[0].qkv.detach().numpy()[2:4].T)
        back = torch.nn.Sequential(FusedDense())
        back[0].calls.fill_(7)
        back.load_state_dict(paddle_to_torch(state, back))
        assert torch.equal(back[0].w, model[0].w) and torch.equal(back[0].qkv, model[0].qkv)
        assert int(back[0].calls) == 7  # torch-only: the module's own value
        with pytest.raises(ValueError, match=r"shape mismatch for '0.weight'"):
            paddle_to_torch({**state, "0.weight": state["0.weight"].T.copy()}, back)
        register_rule(FusedDense, rename={"missing": "x"})
        with pytest.raises(ValueError, match=r"names \['missing'\], which the module does not hold"):
            torch_to_paddle(model)
    finally:
        unregister_rule(FusedDense)
    assert sorted(torch_to_paddle(model)) == ["0.calls", "0.qkv", "0.w"]
    with pytest.raises(TypeError, match="module_type must be a torch.nn.Module subclass"):
        register_rule(int)
    with pytest.raises(ValueError, match=r"\['w'\] given more than one role"):
        register_rule(FusedDense, rename={"w": "weight"}, torch_only=["w"])
    with pytest.raises(TypeError, match="transpose must be a list of names"):
        register_rule(FusedDense, transpose="w")
