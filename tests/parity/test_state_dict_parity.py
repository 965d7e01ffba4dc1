"""state_dict() / load_state_dict() parity with Paddle, and resuming from saved states."""

from __future__ import annotations

import random

import numpy as np
import paddle
import pytest
import torch

from paddle_compat.amp import AmpScaler, GradScaler, auto_cast
from paddle_compat.amp.grad_scaler import STATE_DICT_KEYS

from .paddle_oracle import (
    assert_bitwise_equal,
    copy_grads_to_paddle,
    paddle_params_like,
    paddle_scaler,
    to_numpy,
)

LR = 0.125  # a power of two: torch's and Paddle's SGD then agree bitwise
OURS = {"GradScaler": GradScaler, "AmpScaler": AmpScaler}
KEYS = list(paddle_scaler().state_dict())  # Paddle's own keys, in its order: the oracle
EMPTY_MESSAGE = (
    "The input state dict is empty, possibly because it was saved from a disabled instance of GradScaler."
)

CONFIGS = [
    dict(init_loss_scaling=1000.0, incr_ratio=1.3, decr_ratio=0.3, incr_every_n_steps=3, decr_every_n_nan_or_inf=2),
    dict(init_loss_scaling=3.7, incr_ratio=4.0, decr_ratio=0.5, incr_every_n_steps=2, decr_every_n_nan_or_inf=1),
    dict(init_loss_scaling=65536.0, incr_ratio=1.7, decr_ratio=0.9, incr_every_n_steps=5, decr_every_n_nan_or_inf=3),
    dict(init_loss_scaling=1024.0, use_dynamic_loss_scaling=False),
]


class Twin:
    """A tiny model held in torch, with a mirrored Paddle copy, stepped through both scalers."""

    def __init__(self, seed: int):
        torch.manual_seed(seed)
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2))
        self.tparams = list(self.model.parameters())
        self.pparams = paddle_params_like(self.tparams)
        self.opt = torch.optim.SGD(self.tparams, lr=LR)
        self.popt = paddle.optimizer.SGD(learning_rate=LR, parameters=self.pparams)
        self.gen = torch.Generator().manual_seed(seed)
        self.rng = random.Random(seed)

    def step(self, ours, pscaler, label: str) -> None:
        with auto_cast():
            loss = self.model(torch.randn(3, 4, generator=self.gen)).pow(2).mean()
        scaled = ours.scale(loss)
        p_scaled = pscaler.scale(paddle.to_tensor(to_numpy(loss)))
        assert_bitwise_equal(scaled, p_scaled, f"{label}: scaled loss")
        scaled.backward()
        if self.rng.random() < 0.3:
            p = self.tparams[self.rng.randrange(len(self.tparams))]
            p.grad.view(-1)[self.rng.randrange(p.numel())] = self.rng.choice([np.inf, -np.inf, np.nan])
        copy_grads_to_paddle(self.tparams, self.pparams)
        ours.step(self.opt)
        pscaler.step(self.popt)
        ours.update()
        pscaler.update()
        self.opt.zero_grad()
        self.popt.clear_grad()
        assert_same(ours, pscaler, label)
        for i, (tp, pp) in enumerate(zip(self.tparams, self.pparams, strict=True)):
            assert_bitwise_equal(tp, pp, f"{label}: parameter {i}")

    def paddle_only_step(self, pscaler) -> None:
        """Advance the Paddle side alone (ours is not there yet: it will resume from Paddle's state)."""
        with auto_cast():
            loss = self.model(torch.randn(3, 4, generator=self.gen)).pow(2).mean()
        scale = torch.from_numpy(np.asarray(pscaler.state_dict()["scale"]).copy())
        (loss * scale).backward()
        if self.rng.random() < 0.3:
            p = self.tparams[self.rng.randrange(len(self.tparams))]
            p.grad.view(-1)[self.rng.randrange(p.numel())] = self.rng.choice([np.inf, -np.inf, np.nan])
        copy_grads_to_paddle(self.tparams, self.pparams)
        pscaler.step(self.popt)
        pscaler.update()
        # Keep the torch copy equal to Paddle's parameters.
        with torch.no_grad():
            for tp, pp in zip(self.tparams, self.pparams, strict=True):
                tp.copy_(torch.from_numpy(to_numpy(pp).copy()))
        self.opt.zero_grad()
        self.popt.clear_grad()


def assert_same(ours, pscaler, label: str) -> None:
    osd, psd = ours.state_dict(), pscaler.state_dict()
    ours_keys = sorted(set(osd) - {"skipped_steps"})  # our one extra key
    assert ours_keys == sorted(psd), f"{label}: keys ours {ours_keys} vs Paddle {sorted(psd)}"
    if psd:
        assert_bitwise_equal(osd["scale"], psd["scale"], f"{label}: scale")
        for key in KEYS[1:]:
            assert osd[key] == psd[key], f"{label}: {key} ours {osd[key]!r} vs Paddle {psd[key]!r}"


# --------------------------------------------------------------------------------- format


@pytest.mark.parametrize("cls", ["GradScaler", "AmpScaler"])
def test_state_dict_format(cls):
    kwargs = CONFIGS[0]
    ours, pscaler = OURS[cls](**kwargs), paddle_scaler(cls, **kwargs)
    osd, psd = ours.state_dict(), pscaler.state_dict()
    # Paddle's 8 keys in its order, then ours: the skipped-step count survives a checkpoint.
    assert list(osd) == [*KEYS, "skipped_steps"] and list(psd) == KEYS and len(KEYS) == 8
    assert STATE_DICT_KEYS == tuple(KEYS)  # what load_state_dict and the converters require
    assert isinstance(osd["scale"], torch.Tensor)
    assert osd["scale"].dtype == torch.float32 and tuple(osd["scale"].shape) == (1,)
    assert_bitwise_equal(osd["scale"], psd["scale"], "scale")
    for key in KEYS[1:]:
        assert osd[key] == psd[key] and type(osd[key]) is type(psd[key]), (
            f"{key}: ours {osd[key]!r} ({type(osd[key]).__name__}) vs Paddle {psd[key]!r} ({type(psd[key]).__name__})"
        )


def test_state_dict_is_a_snapshot():
    """Like Paddle's (a numpy copy), the returned dict does not alias the live scale, and a loaded
    dict is copied in."""
    ours, pscaler = GradScaler(init_loss_scaling=8.0), paddle_scaler(init_loss_scaling=8.0)
    osd, psd = ours.state_dict(), pscaler.state_dict()
    osd["scale"][0] = 5.0
    psd["scale"][0] = 5.0
    assert ours.get_scale() == float(pscaler.state_dict()["scale"][0]) == 8.0
    ours.load_state_dict(osd)
    pscaler.load_state_dict(psd)
    osd["scale"][0] = 7.0
    psd["scale"][0] = 7.0
    assert ours.get_scale() == float(pscaler.state_dict()["scale"][0]) == 5.0


# ------------------------------------------------------------------ resuming from Paddle


@pytest.mark.parametrize("cfg", range(len(CONFIGS)))
@pytest.mark.parametrize("cls", ["GradScaler", "AmpScaler"])
def test_resume_from_paddle_saved_state(cfg, cls, tmp_path):
    kwargs = CONFIGS[cfg]
    twin = Twin(seed=100 + cfg)
    pscaler = paddle_scaler("GradScaler", **kwargs)  # Paddle's AmpScaler has no step()/update()
    for _ in range(9):
        twin.paddle_only_step(pscaler)
    path = str(tmp_path / "scaler.pdparams")
    paddle.save(pscaler.state_dict(), path)
    loaded = paddle.load(path, return_numpy=True)
    assert isinstance(loaded["scale"], np.ndarray)

    # Both sides resume from the same file, from their constructors' defaults: everything must
    # come from the loaded dict.
    ours = OURS[cls]()
    ours.load_state_dict(loaded)
    resumed = paddle_scaler("GradScaler")
    resumed.load_state_dict(paddle.load(path, return_numpy=True))
    assert_same(ours, pscaler, "right after load_state_dict")
    assert_same(ours, resumed, "right after load_state_dict")
    # Paddle's load_state_dict() makes the loaded scale the new init_loss_scaling.
    assert ours.get_init_loss_scaling() == float(resumed.get_init_loss_scaling()) == float(loaded["scale"][0])
    for name in ("incr_ratio", "decr_ratio", "incr_every_n_steps", "decr_every_n_nan_or_inf"):
        assert getattr(ours, "get_" + name)() == getattr(resumed, "get_" + name)(), name
    assert ours.is_use_dynamic_loss_scaling() == resumed.is_use_dynamic_loss_scaling()
    for i in range(12):
        twin.step(ours, resumed, f"resumed step {i}")


def test_resume_mid_count(tmp_path):
    """incr_count/decr_count carried over mid-way: the next increase/decrease lands where Paddle's does."""
    kwargs = dict(init_loss_scaling=64.0, incr_every_n_steps=3, decr_every_n_nan_or_inf=2)
    pscaler = paddle_scaler(**kwargs)
    pscaler.update()
    pscaler.update()  # incr_count 2 of 3
    state = pscaler.state_dict()
    paddle.save(state, str(tmp_path / "s.pdparams"))
    ours = GradScaler()
    ours.load_state_dict(paddle.load(str(tmp_path / "s.pdparams"), return_numpy=True))
    assert ours.state_dict()["incr_count"] == 2
    ours.update()
    pscaler.update()
    assert_same(ours, pscaler, "after the third good step")
    assert ours.get_scale() == 128.0


def test_resume_from_default_paddle_load(tmp_path):
    """``paddle.load`` without ``return_numpy`` hands ``scale`` back as a paddle.Tensor."""
    pscaler = paddle_scaler(init_loss_scaling=3.7, incr_every_n_steps=4)
    for _ in range(3):
        pscaler.update()
    paddle.save(pscaler.state_dict(), str(tmp_path / "s.pdparams"))
    loaded = paddle.load(str(tmp_path / "s.pdparams"))
    assert isinstance(loaded["scale"], paddle.Tensor)
    ours = GradScaler()
    ours.load_state_dict(loaded)
    assert_same(ours, pscaler, "after loading")
    for i in range(3):
        ours.update()
        pscaler.update()
        assert_same(ours, pscaler, f"update {i}")


def test_load_paddle_dict_with_python_scale_types():
    """A hand-built Paddle-style dict: numpy float32 array, numpy float64 array, plain list."""
    for scale in (np.array([3.7], np.float32), np.array([3.7], np.float64), [3.7]):
        d = dict(zip(KEYS, [scale, 2.0, 0.5, 7, 2, 3, 1, True], strict=True))
        ours, pscaler = GradScaler(), paddle_scaler()
        ours.load_state_dict(d)
        pscaler.load_state_dict(d)
        assert_same(ours, pscaler, f"scale given as {type(scale).__name__} {getattr(scale, 'dtype', '')}")


# ------------------------------------------------------------------ our own round trip


@pytest.mark.parametrize("cfg", range(len(CONFIGS)))
def test_torch_save_round_trip_resumes_identically(cfg, tmp_path):
    kwargs = CONFIGS[cfg]
    twin = Twin(seed=200 + cfg)
    ours, pscaler = GradScaler(**kwargs), paddle_scaler(**kwargs)
    for i in range(8):
        twin.step(ours, pscaler, f"step {i}")
    path = tmp_path / "scaler.pt"
    torch.save(ours.state_dict(), path)
    resumed = GradScaler()
    resumed.load_state_dict(torch.load(path, weights_only=True))
    assert_same(resumed, pscaler, "after torch.load")
    assert resumed.get_skipped_steps() == ours.get_skipped_steps()
    for i in range(10):
        twin.step(resumed, pscaler, f"resumed step {i}")


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("cls", ["GradScaler", "AmpScaler"])
def test_empty_state_dict_raises_paddles_error(cls):
    with pytest.raises(RuntimeError) as pinfo:
        paddle_scaler(cls).load_state_dict({})
    assert str(pinfo.value) == EMPTY_MESSAGE
    with pytest.raises(RuntimeError) as oinfo:
        OURS[cls]().load_state_dict({})
    assert str(oinfo.value) == EMPTY_MESSAGE


@pytest.mark.parametrize("missing", KEYS)
def test_missing_key_raises_naming_it(missing):
    full = GradScaler(init_loss_scaling=5.0).state_dict()
    pfull = paddle_scaler(init_loss_scaling=5.0).state_dict()
    with pytest.raises(KeyError) as pinfo:
        paddle_scaler().load_state_dict({k: v for k, v in pfull.items() if k != missing})
    assert pinfo.value.args[0] == missing  # Paddle: KeyError(missing)
    with pytest.raises(Exception) as oinfo:
        GradScaler().load_state_dict({k: v for k, v in full.items() if k != missing})
    assert isinstance(oinfo.value, KeyError), f"Paddle raises KeyError, ours {type(oinfo.value).__name__}"
    assert missing in str(oinfo.value)


def test_disabled_state_dict_round_trip():
    """A disabled scaler saves {}; loading {} into an enabled one is Paddle's RuntimeError."""
    ours, pscaler = GradScaler(enable=False), paddle_scaler(enable=False)
    assert ours.state_dict() == pscaler.state_dict() == {}
    with pytest.raises(RuntimeError, match="^" + EMPTY_MESSAGE.replace(".", r"\.") + "$"):
        GradScaler().load_state_dict(ours.state_dict())


def test_paddle_loads_our_dict_and_a_paddle_dict_keeps_our_skipped_count():
    twin = Twin(seed=7)
    ours = GradScaler(init_loss_scaling=2.0**120, incr_every_n_steps=3)
    pscaler = paddle_scaler(init_loss_scaling=2.0**120, incr_every_n_steps=3)
    for i in range(6):
        twin.step(ours, pscaler, f"step {i}")
    assert ours.get_skipped_steps() > 0
    fresh = paddle_scaler()
    fresh.load_state_dict(ours.state_dict())  # the extra key is ignored by Paddle
    assert_same(ours, fresh, "Paddle loading ours")
    resumed = GradScaler()
    resumed.load_state_dict(pscaler.state_dict())  # no skipped_steps key: the count is kept
    assert resumed.get_skipped_steps() == 0
