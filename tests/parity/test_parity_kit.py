"""paddle_compat.parity against real Paddle 3.3.1: conversions of real layers (outputs equal),
files written by paddle.save, optimizer state resumed across frameworks bit for bit, Paddle's own
objects recorded by duck typing, and the demo's port checked live against a Paddle run."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import paddle
import pytest
import torch
from torch import nn

import paddle_compat.optimizer as popt
from paddle_compat.parity import (
    TraceRecorder,
    compare,
    optimizer_state_to_paddle,
    optimizer_state_to_torch,
    paddle_side,
    paddle_to_torch,
    pdio,
    record_script,
    torch_to_paddle,
)
from paddle_compat.parity._arrays import array_of

from ..optim_db import FAMILY, info_of
from ..test_parity_demo import demo_port  # the demo's port, loaded from examples/parity

ROOT = Path(__file__).resolve().parents[2]
X2 = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
XS = np.random.default_rng(1).standard_normal((2, 5, 8)).astype(np.float32)
XR = np.random.default_rng(2).standard_normal((2, 5, 3)).astype(np.float32)
X4 = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _bn():
    bn = nn.BatchNorm2d(3)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-1, 1)
    return bn


def _ln():
    ln = nn.LayerNorm(4)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-1, 1)
    return ln


def _mha(**kw):
    m = nn.MultiheadAttention(8, 2, batch_first=True, **kw)
    with torch.no_grad():
        m.in_proj_bias.uniform_(-1, 1) if m.in_proj_bias is not None else None
        m.out_proj.bias.uniform_(-1, 1)
    return m


K4 = np.random.default_rng(4).standard_normal((2, 5, 4)).astype(np.float32)
V6 = np.random.default_rng(5).standard_normal((2, 5, 6)).astype(np.float32)
IDS = np.array([[1, 2], [9, 0]])


def _fed(x: np.ndarray):
    """The torch call and the Paddle call of a layer on the same input ``x``."""
    return lambda m: m(torch.from_numpy(x)), lambda m: m(paddle.to_tensor(x))


# name -> (torch module, Paddle layer, torch call, Paddle call)
CASES = {
    "Linear": (lambda: nn.Linear(4, 5), lambda: paddle.nn.Linear(4, 5), *_fed(X2)),
    "Conv2D": (lambda: nn.Conv2d(3, 4, 3, padding=1), lambda: paddle.nn.Conv2D(3, 4, 3, padding=1), *_fed(X4)),
    "BatchNorm2D": (_bn, lambda: paddle.nn.BatchNorm2D(3), *_fed(X4)),
    "Embedding": (lambda: nn.Embedding(10, 4), lambda: paddle.nn.Embedding(10, 4), *_fed(IDS)),
    "LayerNorm": (_ln, lambda: paddle.nn.LayerNorm(4), *_fed(X2)),
    "MultiHeadAttention": (
        _mha,
        lambda: paddle.nn.MultiHeadAttention(8, 2),
        lambda m: m(*[torch.from_numpy(XS)] * 3, need_weights=False),
        lambda m: m(*[paddle.to_tensor(XS)] * 3),
    ),
    "MultiHeadAttention-kv": (
        lambda: _mha(kdim=4, vdim=6),
        lambda: paddle.nn.MultiHeadAttention(8, 2, kdim=4, vdim=6),
        lambda m: m(torch.from_numpy(XS), torch.from_numpy(K4), torch.from_numpy(V6), need_weights=False),
        lambda m: m(paddle.to_tensor(XS), paddle.to_tensor(K4), paddle.to_tensor(V6)),
    ),
    "LSTM": (
        lambda: nn.LSTM(3, 5, num_layers=2, bidirectional=True, batch_first=True),
        lambda: paddle.nn.LSTM(3, 5, num_layers=2, direction="bidirect"),
        *_fed(XR),
    ),
    "LSTM-proj": (
        lambda: nn.LSTM(3, 5, proj_size=2, batch_first=True), lambda: paddle.nn.LSTM(3, 5, proj_size=2), *_fed(XR)
    ),
    "GRU": (lambda: nn.GRU(3, 5, batch_first=True), lambda: paddle.nn.GRU(3, 5), *_fed(XR)),
    "SimpleRNN": (lambda: nn.RNN(3, 5, batch_first=True), lambda: paddle.nn.SimpleRNN(3, 5), *_fed(XR)),
}


def _outputs_equal(tm, pm, tcall, pcall) -> None:
    tm.eval()
    pm.eval()
    with torch.no_grad():
        t = _first(tcall(tm)).numpy()
    p = _first(pcall(pm)).numpy()
    # the same weights through two frameworks' kernels: equal to float32 rounding
    torch.testing.assert_close(torch.from_numpy(t), torch.from_numpy(p))


@pytest.mark.parametrize("case", list(CASES))
def test_paddle_layer_to_torch(case, tmp_path):
    make_t, make_p, tcall, pcall = CASES[case]
    torch.manual_seed(0)
    paddle.seed(0)
    tm, pm = make_t(), make_p()
    path = tmp_path / "layer.pdparams"
    paddle.save(pm.state_dict(), str(path))
    for source in (pm.state_dict(), path):  # Paddle tensors in memory, and the file, read without Paddle
        tm.load_state_dict(paddle_to_torch(source, tm))
        back = torch_to_paddle(tm)  # and back to Paddle's names and layouts: the very same bits
        assert set(back) == set(pm.state_dict())
        for k, v in pm.state_dict().items():
            assert back[k].tobytes() == v.numpy().tobytes(), k
    _outputs_equal(tm, pm, tcall, pcall)


@pytest.mark.parametrize("case", list(CASES))
def test_torch_module_to_paddle(case):
    make_t, make_p, tcall, pcall = CASES[case]
    torch.manual_seed(1)
    tm, pm = make_t(), make_p()
    state = torch_to_paddle(tm)
    assert set(state) == set(pm.state_dict())  # every name Paddle's layer has, aliases included
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Paddle warns for every key it cannot find
        pm.set_state_dict(state)
    _outputs_equal(tm, pm, tcall, pcall)
    # and back again, bit for bit
    back = paddle_to_torch(pm.state_dict(), tm)
    assert all(torch.equal(back[k], v) for k, v in tm.state_dict().items())


def test_paddle_tensors_as_arrays():
    """Paddle's tensors have detach() too: they must still be read as Paddle's, dtype name included."""
    arr, name = array_of(paddle.to_tensor(X2))
    assert name == "float32" and np.array_equal(arr, X2)
    arr, name = array_of(paddle.to_tensor(X2).astype("bfloat16"))
    assert name == "bfloat16" and arr.dtype == np.uint16
    assert arr.tobytes() == array_of(torch.from_numpy(X2).bfloat16())[0].tobytes()


# --------------------------------------------------------------------------------------- files


@pytest.mark.parametrize("protocol", [2, 3, 4])
def test_reads_what_paddle_save_writes(tmp_path, protocol):
    layer = paddle.nn.Sequential(paddle.nn.Linear(4, 3), paddle.nn.BatchNorm1D(3), paddle.nn.LSTM(3, 2))
    path = str(tmp_path / "m.pdparams")
    paddle.save(layer.state_dict(), path, protocol=protocol)
    ours, theirs = pdio.load(path), paddle.load(path, return_numpy=True)
    assert list(ours) == list(theirs)
    assert all(np.array_equal(ours[k], theirs[k]) for k in ours)
    assert pdio.parameter_names(path) == {k: v.name for k, v in layer.state_dict().items()}

    opt = paddle.optimizer.Adam(paddle.optimizer.lr.StepDecay(0.1, 2), parameters=layer.parameters())
    layer[1](layer[0](paddle.to_tensor(X2))).sum().backward()
    opt.step()
    path = str(tmp_path / "m.pdopt")
    paddle.save(opt.state_dict(), path, protocol=protocol)
    ours, theirs = pdio.load(path), paddle.load(path, return_numpy=True)
    assert ours["LR_Scheduler"] == theirs["LR_Scheduler"] == {"last_epoch": 0, "last_lr": 0.1}
    assert [k for k in ours if k != "LR_Scheduler"] == [k for k in theirs if k != "LR_Scheduler"]
    assert all(np.array_equal(ours[k], theirs[k]) for k in ours if k != "LR_Scheduler")

    # an object (not a plain state dict): tensors pickled as (name, array), master weights nested
    bf16 = paddle.to_tensor(X2).astype("bfloat16")
    path = str(tmp_path / "obj.pdopt")
    paddle.save(
        {"w_moment1_0": paddle.to_tensor(X2), "master_weights": {"w": paddle.to_tensor(X2)}, "b": bf16},
        path,
        protocol=protocol,
    )
    ours = pdio.load(path)
    np.testing.assert_array_equal(ours["master_weights"]["w"], X2)
    assert ours["b"].dtype == np.uint16 and np.array_equal(ours["b"], bf16.numpy())


def test_paddle_loads_what_pdio_writes(tmp_path):
    torch.manual_seed(0)
    tm = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    pm = paddle.nn.Sequential(paddle.nn.Linear(4, 3), paddle.nn.BatchNorm1D(3))
    path = str(tmp_path / "port.pdparams")
    pdio.save(torch_to_paddle(tm), path)
    pm.set_state_dict(paddle.load(path))
    np.testing.assert_array_equal(pm[0].weight.numpy(), tm[0].weight.detach().numpy().T)


# ------------------------------------------------------------------------------ optimizer state


class TorchNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(4, 8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        h = torch.tanh(self.fc(x))
        return self.out(self.attn(h, h, h, need_weights=False)[0]).pow(2).mean()


class PaddleNet(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.fc = paddle.nn.Linear(4, 8)
        self.attn = paddle.nn.MultiHeadAttention(8, 2)
        self.out = paddle.nn.Linear(8, 2)


def _port_backward(port, seed: int) -> None:
    """The port's gradients on a batch drawn from ``seed``."""
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal((2, 3, 4)).astype(np.float32))
    port.zero_grad()
    port(x).backward()


def _step_both(port, popt_, layer, paddle_opt, seed: int) -> None:
    """One step on each side with the same gradients (the port's, at the port's parameters)."""
    _port_backward(port, seed)
    paddle_side.copy_grads(port, layer)
    popt_.step()
    paddle_opt.step()
    paddle_opt.clear_grad()


def _params_equal(port, layer) -> None:
    back = paddle_to_torch(layer.state_dict(), port)
    for k, v in port.state_dict().items():
        assert torch.equal(back[k], v), k


OPTIMIZERS = {
    "AdamW": (
        lambda ps: popt.AdamW(0.01, parameters=ps, weight_decay=0.1),
        lambda ps: paddle.optimizer.AdamW(0.01, parameters=ps, weight_decay=0.1),
    ),
    "Momentum": (
        lambda ps: popt.Momentum(0.05, momentum=0.9, parameters=ps),
        lambda ps: paddle.optimizer.Momentum(0.05, momentum=0.9, parameters=ps),
    ),
}
# options of the other optimizers (the rest take their defaults)
_KIT_OPTIONS: dict[str, dict] = {
    "RMSProp": {"learning_rate": 0.01, "momentum": 0.5, "centered": True},
    "Adagrad": {"learning_rate": 0.05, "initial_accumulator_value": 0.1},
    "RAdam": {"beta2": 0.9},
    "ASGD": {"batch_num": 2},
}
# The other optimizers of paddle.optimizer, with their accumulators' names, shapes and layouts (ASGD's
# stacked history, NAdam's and RAdam's parameter-shaped powers, int64 counters). Not Lamb: its trust
# ratio is per parameter, and the port's attention holds Paddle's three projections in one tensor
# (Lamb's accumulators are Adam's, converted for AdamW above).
OPTIMIZERS.update(
    {
        name: (
            lambda ps, name=name, kw=kw: getattr(popt, name)(parameters=ps, **kw),
            lambda ps, name=name, kw=kw: getattr(paddle.optimizer, name)(parameters=ps, **kw),
        )
        for name, kw in (
            (cls.__name__, _KIT_OPTIONS.get(cls.__name__, {})) for cls in FAMILY if cls is not popt.Lamb
        )
    }
)


def _needs_hardware_rsqrt(name: str) -> None:
    """Paddle's float32 Eigen sqrt (these optimizers') is bitwise only with the CPU's own rsqrt."""
    from paddle_compat.optimizer import _eigen

    if info_of(getattr(popt, name)).eigen_sqrt and _eigen._hardware_rsqrt() is None:
        pytest.skip("Eigen's float32 sqrt needs the CPU's rsqrt from the compiled kernels, not available here")


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_resume_paddle_checkpoint_in_the_port(name, tmp_path):
    """Paddle trains, saves .pdparams/.pdopt; the port loads both (read without Paddle) and the two
    continue bit for bit."""
    _needs_hardware_rsqrt(name)
    make_ours, make_paddle = OPTIMIZERS[name]
    port, layer = TorchNet(), PaddleNet()
    paddle_side.copy_params_to_paddle(port, layer)
    paddle_opt = make_paddle(layer.parameters())
    for seed in range(3):  # Paddle alone (the port's forward gives the gradients)
        paddle_side.copy_params(layer, port)
        _port_backward(port, seed)
        paddle_side.copy_grads(port, layer)
        paddle_opt.step()
        paddle_opt.clear_grad()
    paddle.save(layer.state_dict(), str(tmp_path / "m.pdparams"))
    paddle.save(paddle_opt.state_dict(), str(tmp_path / "m.pdopt"))

    port.load_state_dict(paddle_to_torch(tmp_path / "m.pdparams", port))
    ours = make_ours(port.parameters())
    ours.load_state_dict(optimizer_state_to_torch(tmp_path / "m.pdopt", ours, port, tmp_path / "m.pdparams"))
    for seed in range(3, 6):
        _step_both(port, ours, layer, paddle_opt, seed)
        _params_equal(port, layer)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_resume_port_checkpoint_in_paddle(name):
    _needs_hardware_rsqrt(name)
    make_ours, make_paddle = OPTIMIZERS[name]
    port, layer = TorchNet(), PaddleNet()
    ours = make_ours(port.parameters())
    for seed in range(3):
        _port_backward(port, seed)
        ours.step()
    paddle_side.copy_params_to_paddle(port, layer)
    paddle_opt = make_paddle(layer.parameters())
    paddle_opt.set_state_dict(optimizer_state_to_paddle(ours, port, layer.state_dict()))
    for seed in range(3, 6):
        _step_both(port, ours, layer, paddle_opt, seed)
        _params_equal(port, layer)


def test_accumulators_not_yet_created_are_paddles_also_for_float64():
    """A parameter not yet updated gets what Paddle's Adam creates at its first update, in its
    dtypes: for a float64 parameter, float64 moments and beta powers."""
    torch.manual_seed(0)
    port = nn.Linear(3, 2).double()
    layer = paddle.nn.Linear(3, 2)
    layer.to(dtype="float64")
    pd = optimizer_state_to_paddle(popt.Adam(0.01, parameters=port.parameters()), port, layer.state_dict())
    theirs = paddle.optimizer.Adam(0.01, parameters=layer.parameters())
    layer(paddle.ones([1, 3], dtype="float64")).sum().backward()
    theirs.step()
    assert {k: v.dtype for k, v in pd.items()} == {k: v.numpy().dtype for k, v in theirs.state_dict().items()}


# ------------------------------------------------------------------------------ recording Paddle


def test_paddle_objects_recorded_in_the_ports_layout():
    port, layer = TorchNet(), PaddleNet()
    paddle_side.copy_params_to_paddle(port, layer)
    ours = popt.AdamW(0.01, parameters=port.parameters())
    paddle_opt = paddle.optimizer.AdamW(0.01, parameters=layer.parameters())
    rec_t = TraceRecorder(port, ours)
    rec_p = TraceRecorder(layer, paddle_opt, port=port)
    for seed in range(2):
        _step_both(port, ours, layer, paddle_opt, seed)
        port_loss = torch.tensor(0.0)
        rec_t.record(port_loss)
        # the Paddle side's gradients were cleared in _step_both: give them back for the record
        paddle_side.copy_grads(port, layer)
        rec_p.record(port_loss)
    assert rec_p.trace.meta["framework"] == "paddle" and rec_p.trace.meta["layout"] == "torch"
    assert list(rec_p.trace.series) == list(rec_t.trace.series)
    assert "opt/attn.in_proj_weight/moment1" in rec_p.trace.series  # q/k/v moments merged
    result = compare(rec_p.trace, rec_t.trace, exact=True)
    assert result.ok, result.summary()
    raw = TraceRecorder(layer, paddle_opt)  # no port: Paddle's own names and layouts
    raw.record()
    assert raw.trace.meta["layout"] == "paddle" and "param/attn.q_proj.weight" in raw.trace.series
    with pytest.raises(ValueError, match="different layouts"):
        compare(raw.trace, rec_t.trace)


def test_paddle_layer_taps_name_the_first_diverging_layer():
    """Paddle's forward against the port's, in float32 on CPU: equal within tolerance, until a
    wrong port (GELU's tanh approximation) parts at that layer."""

    def run_torch(approximate: str):
        torch.manual_seed(0)
        m = nn.Sequential(nn.Linear(4, 8), nn.GELU(approximate=approximate), nn.Linear(8, 1))
        rec = TraceRecorder(m, layers=True)
        m(torch.from_numpy(X2)).sum().backward()
        rec.record()
        return m, rec.trace

    port, port_trace = run_torch("none")
    layer = paddle.nn.Sequential(paddle.nn.Linear(4, 8), paddle.nn.GELU(), paddle.nn.Linear(8, 1))
    paddle_side.copy_params_to_paddle(port, layer)
    rec = TraceRecorder(layer, layers=True, port=port)
    layer(paddle.to_tensor(X2)).sum().backward()
    rec.record()
    assert [n for n in rec.trace.series if n.startswith("act")] == [n for n in port_trace.series if n.startswith("act")]
    assert compare(rec.trace, port_trace).ok
    _, wrong = run_torch("tanh")
    assert compare(rec.trace, wrong).first_divergence.name == "act/1"


# ------------------------------------------------------------------------------ the demo, live


def test_demo_port_live_against_paddle(tmp_path):
    """Paddle runs in a child process (the kit's own way), for the first 8 steps: the scale backs
    off 5 times and the two runs update 3 times; the port must match every bit."""
    steps = 8
    paddle_trace = record_script(
        ROOT / "examples" / "parity" / "demo_paddle.py",
        tmp_path / "paddle",
        args=["--steps", str(steps)],
        env={"PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        port = demo_port.train("port", steps=steps)
    finally:
        torch.set_num_threads(saved)
    result = compare(paddle_trace, port, exact=True)
    assert result.ok, result.summary()
    assert sum(s["found_inf"] for s in port.steps) >= 4
