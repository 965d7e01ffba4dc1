"""diff_layers against real Paddle 3.3.1: a transformer (MultiHeadAttention included) and a CNN written
in both frameworks, Paddle's own forward and backward on the reference side (CPU, float32).

A clean port is equal within noise; each injected porting bug is named at its layer, forward and
backward; layers differ in structure (Paddle's attention calls four Linear sublayers, torch's none)
without a divergence; names and types align ports whose names differ."""

from __future__ import annotations

import json

import numpy as np
import paddle
import pytest
import torch
from torch import nn

from paddle_compat.parity import Divergence, LayerDivergence, diff_layers, paddle_to_torch

from .twin_models import (
    PaddleCNN,
    PaddleTransformer,
    TorchCNN,
    TorchTransformer,
    cnn_input,
    hand_loader,
    transformer_input,
)

MODELS = {
    "transformer": (PaddleTransformer, TorchTransformer, transformer_input, "blocks.1.attn.out_proj.weight"),
    "cnn": (PaddleCNN, TorchCNN, cnn_input, "proj.weight"),
}


def _run(model: str, bug: str | None = None, **kw):
    paddle.seed(0)
    make_paddle, make_torch, make_input, square = MODELS[model]
    load = hand_loader(square if bug == "transpose" else None)
    return diff_layers(make_paddle(), make_torch(None if bug == "transpose" else bug), make_input(), load=load, **kw)


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("single_step", [True, False], ids=["single-step", "chained"])
def test_clean_port_is_equal(model, single_step):
    result = _run(model, single_step=single_step)
    assert result.ok, result.summary() + "\n" + result.tree()
    assert len(result.layers) >= 9
    assert all(c.ok for _, c in result.params)
    if model == "transformer":  # Paddle's q/k/v/out projections: a note with its reason, not a divergence
        (note,) = [n for n in result.notes if "q_proj" in n]
        assert "blocks.1.attn.out_proj (Linear)" in note and "torch's MultiheadAttention computes" in note
        assert "compared as part of it" in note
    else:  # torch's BatchNorm running_var differs from Paddle's by n/(n-1): known, not a divergence
        bn2 = next(r for r in result.layers if r.key == "bn2")
        var = next(c for c in bn2.forward if c.what.startswith("running_var"))
        assert var.ok and "unbiased batch variance, n/(n-1) = 256/255" in var.reason


EXPECTED = {  # (model, bug): (forward layer, load layer or None)
    ("transformer", "gelu"): ("blocks.1.act", None),
    ("transformer", "eps"): ("blocks.0.ln2", None),
    ("transformer", "transpose"): ("blocks.1.attn", "blocks.1.attn.out_proj"),
    ("cnn", "gelu"): ("act2", None),
    ("cnn", "eps"): ("norm", None),
    ("cnn", "transpose"): ("proj", "proj"),
}


@pytest.mark.parametrize(("model", "bug"), sorted(EXPECTED))
def test_injected_bug_is_named_at_its_layer(model, bug):
    result = _run(model, bug)
    layer, loaded = EXPECTED[(model, bug)]
    assert not result.ok
    assert type(result.first_forward) is LayerDivergence and LayerDivergence is not Divergence  # two clear names
    assert result.first_forward.layer == layer, result.summary()
    assert result.first_backward.layer == layer, result.summary()  # single-step: no build-up backward either
    if loaded is None:
        assert result.first_load is None
    else:
        assert result.first.phase == "load" and result.first_load.layer == loaded
        assert "untransposed" in result.first_load.check.reason
        as_json = json.loads(json.dumps(result.to_dict()))
        assert as_json["first_load"]["layer"] == loaded and as_json["first"] == as_json["first_load"]
        assert [p["name"] for p in as_json["params"] if not p["ok"]] == [f"{loaded}.weight"]
    check = result.first_forward.check
    assert check.metrics["rel_l2"] > 16 * check.noise  # stands out of the noise floor by far
    tree = result.tree().splitlines()
    marked = [line for line in tree if "<-- first divergence" in line]
    assert len(marked) == 1 and marked[0].strip().startswith((loaded or layer).rpartition(".")[2] + " (")
    assert "twin_models.py:" in result.first_forward.site  # the line that calls the layer


def test_chained_mode_names_the_forward_layer():
    result = _run("transformer", "gelu", single_step=False)
    assert result.first_forward.layer == "blocks.1.act"


def test_one_layer_alone():
    """A Paddle MultiHeadAttention and torch's, alone: the root layers align; the projections are notes."""
    paddle.seed(0)
    pm = paddle.nn.MultiHeadAttention(8, 2)
    tm = nn.MultiheadAttention(8, 2, batch_first=True)
    x = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
    result = diff_layers(pm, tm, (x, x, x), kwargs={})
    assert result.ok, result.summary()
    assert [r.key for r in result.layers] == ["(model)"]


class RenamedBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm_a = nn.LayerNorm(16, eps=1e-6)
        self.attention = nn.MultiheadAttention(16, 2, batch_first=True)
        self.norm_b = nn.LayerNorm(16, eps=1e-6)
        self.up = nn.Linear(16, 32)
        self.gelu = nn.GELU()
        self.down = nn.Linear(32, 16)

    def forward(self, x):
        h = self.norm_a(x)
        x = x + self.attention(h, h, h, need_weights=False)[0]
        return x + self.down(self.gelu(self.up(self.norm_b(x))))


class RenamedPort(nn.Module):
    def __init__(self, gelu: str = "none") -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.pos = nn.Parameter(torch.zeros(6, 16))
        self.layers = nn.ModuleList([RenamedBlock(), RenamedBlock()])
        self.layers[1].gelu = nn.GELU(approximate=gelu)
        self.final_norm = nn.LayerNorm(16, eps=1e-6)
        self.head = nn.Linear(16, 50)

    def forward(self, ids):
        x = self.embed(ids) + self.pos
        for layer in self.layers:
            x = layer(x)
        return self.head(self.final_norm(x))


RENAMES = {"embed": "emb", "layers": "blocks", "final_norm": "norm"}
INNER = {"norm_a": "ln1", "attention": "attn", "norm_b": "ln2", "up": "fc1", "gelu": "act", "down": "fc2"}
NAME_MAP = {**RENAMES, **{f"layers.{i}.{a}": f"blocks.{i}.{b}" for i in range(2) for a, b in INNER.items()}}


def _load_renamed(paddle_model, torch_model):
    torch_model.load_state_dict(paddle_to_torch(paddle_model.state_dict(), torch_model, name_map=NAME_MAP))


@pytest.mark.parametrize("how", ["name_map", "layer_map", "type"])
def test_ports_with_other_names_align(how):
    """By the state conversion's name_map, by a layer map, or by structure and type alone."""
    kw: dict = {}
    if how == "name_map":
        kw = {"name_map": NAME_MAP}
    elif how == "layer_map":
        kw = {"layer_map": {v: k for k, v in NAME_MAP.items()}, "load": _load_renamed}
    else:
        kw = {"load": _load_renamed}
    paddle.seed(0)
    clean = diff_layers(PaddleTransformer(), RenamedPort(), transformer_input(), **kw)
    assert clean.ok, clean.summary()
    assert len(clean.layers) == 18
    expected = {"name_map": "name", "layer_map": "layer_map", "type": "type"}[how]
    hows = {r.how for r in clean.layers}
    assert expected in hows and hows <= {expected, "name"}  # the root and "head" share their names
    paddle.seed(0)
    buggy = diff_layers(PaddleTransformer(), RenamedPort(gelu="tanh"), transformer_input(), **kw)
    assert buggy.first_forward.layer == "layers.1.gelu"
    assert next(r for r in buggy.layers if r.key == "layers.1.gelu").paddle_key == "blocks.1.act"


def test_ignore_and_depth():
    result = _run("transformer", "gelu", ignore=["blocks.1.act"])
    assert "blocks.1.act" not in [r.key for r in result.layers]
    assert result.ok, result.summary()  # the deliberately different layer, ignored: the run passes
    block = next(r for r in result.layers if r.key == "blocks.1")  # would only repeat its sublayer's difference
    assert not block.judged and block.remark == "not judged: it contains ignored layers (blocks.1.act)"
    assert "    1 (TorchBlock): not judged (contains ignored layers)" in result.tree()
    assert next(r for r in result.layers if r.key == "blocks.1.fc2").forward  # the layers around it: compared
    by_type = _run("transformer", "gelu", ignore_types=[nn.GELU, "GELU"])
    assert not any(r.kind == "gelu" for r in by_type.layers)
    assert by_type.ok
    shallow = _run("transformer", "gelu", depth=1)
    assert {r.key for r in shallow.layers} == {"(model)", "emb", "norm", "head"}  # blocks is a LayerList: never called
    assert shallow.first_forward.layer == "(model)"


def test_the_sublayers_agree_remark():
    """A bug in a functional call between sublayers: the parent is named, with the remark."""

    class FunctionalGelu(TorchTransformer):
        def __init__(self) -> None:
            super().__init__()
            self.blocks[0].forward = self._block_forward

        def _block_forward(self, x):
            b = self.blocks[0]
            h = b.ln1(x)
            x = x + b.attn(h, h, h, need_weights=False)[0]
            return x + b.fc2(torch.nn.functional.gelu(b.fc1(b.ln2(x)), approximate="tanh"))

    paddle.seed(0)
    result = diff_layers(PaddleTransformer(), FunctionalGelu(), transformer_input(), ignore=["blocks.0.act"])
    assert result.first_forward.layer == "blocks.0"
    assert result.first_forward.remark == "its sublayers agree: the difference is in its own forward code"


def test_rtol_by_layer_and_phase_the_most_specific_wins():
    """A bound for one layer tightens it under a looser global one; a phase's bound covers that phase."""
    assert _run("transformer", "gelu", rtol={"*": 1.0}).ok
    tight = _run("transformer", "gelu", rtol={"*": 1.0, "blocks.1.act": 1e-6})
    assert tight.first_forward.layer == tight.first_backward.layer == "blocks.1.act"
    loose_forward = _run("transformer", "gelu", rtol={"forward": 1.0})
    assert loose_forward.first_forward is None and loose_forward.first_backward.layer == "blocks.1.act"


def test_arguments_are_checked():
    pm, tm, x = PaddleCNN(), TorchCNN(), cnn_input()
    for kw, err, msg in [
        ({"rtol": float("nan")}, ValueError, "rtol should be a finite number, but received nan"),
        ({"rtol": {"blocks.*": -1}}, ValueError, r"rtol\['blocks.\*'\] should be >= 0, but received -1"),
        ({"depth": -1}, ValueError, "depth should be >= 0, but received -1"),
        ({"ignore": "bn1"}, TypeError, "ignore must be a list of glob patterns"),
        ({"ignore_types": [3]}, TypeError, "ignore_types must hold classes or class names"),
        ({"ignore_types": "GELU"}, TypeError, "ignore_types must be a list of classes or class names, got 'GELU'"),
        ({"load": "torch"}, ValueError, "load must be 'paddle', a callable or None"),
        ({"layer_map": {"a": 1}}, TypeError, "layer_map must be a dict"),
        ({"layer_map": {"nonexistent": "conv1"}}, ValueError,
         r"^layer_map\['nonexistent'\]: the Paddle model has no layer 'nonexistent'$"),
        ({"layer_map": {"conv1": "conv_1"}}, ValueError,
         r"^layer_map\['conv1'\]: the torch model has no module 'conv_1'$"),
        ({"rtol": {1: 0.1}}, TypeError,
         r"^rtol keys should be layer paths, globs or phases \(strings\), but received 1$"),
        ({"single_step": "yes"}, TypeError, "single_step should be a bool"),
    ]:
        with pytest.raises(err, match=msg):
            diff_layers(pm, tm, x, **kw)
    with pytest.raises(TypeError, match="inputs must be a numpy array or a tuple of numpy arrays, got Tensor"):
        diff_layers(pm, tm, torch.zeros(1))
    with pytest.raises(TypeError, match="inputs\\[1\\] must be a numpy array, got list"):
        diff_layers(pm, tm, (x, [x]))
    with pytest.raises(ValueError, match="load='paddle': missing from the Paddle state dict: .*give name_map="):
        diff_layers(pm, TorchTransformer(), x)
    with pytest.raises(TypeError, match="paddle_model must be a paddle.nn.Layer"):
        diff_layers(tm, tm, x)
    with pytest.raises(ValueError, match="paddle_model is in train mode, torch_model in eval mode: put both in"):
        diff_layers(pm, TorchCNN().eval(), x)


def test_a_grad_output_of_the_wrong_shape_is_refused_before_the_backward():
    pm, tm = PaddleCNN(), TorchCNN()
    message = r"^grad_output has shape \[3\], but the models' \(first\) output has shape \["
    with pytest.raises(ValueError, match=message):
        diff_layers(pm, tm, cnn_input(), grad_output=np.ones(3, np.float32))
    assert all(p.grad is None for p in tm.parameters())
    assert all(p.grad is None for p in pm.parameters()) and not pm.conv1._forward_post_hooks


class MyDense(nn.Module):
    """A user's own dense layer, its weight [out, in] under other names than Paddle's Linear."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(n_out, n_in))
        self.b = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.w.T + self.b


def test_custom_layer_with_a_registered_rule():
    from paddle_compat.parity import register_rule, unregister_rule

    paddle.seed(0)
    pm = paddle.nn.Sequential(paddle.nn.Linear(4, 4), paddle.nn.GELU(), paddle.nn.Linear(4, 3))
    tm = nn.Sequential(MyDense(4, 4), nn.GELU(), MyDense(4, 3))
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    with pytest.raises(ValueError, match="missing from the Paddle state dict"):
        diff_layers(pm, tm, x)
    register_rule(MyDense, rename={"w": "weight", "b": "bias"}, transpose=["w"])
    try:
        result = diff_layers(pm, tm, x)
        assert result.ok, result.summary()
        assert [r.how for r in result.layers] == ["name"] * 4
        assert any(c.what == "grad w" for c in result.layers[0].backward)  # gradients compared in torch's layout
    finally:
        unregister_rule(MyDense)


def test_models_are_left_as_they_were():
    paddle.seed(0)
    pm, tm = PaddleCNN(), TorchCNN()
    before = {k: v.numpy().copy() for k, v in pm.state_dict().items()}
    result = diff_layers(pm, tm, cnn_input())
    assert result.ok
    after = {k: v.numpy() for k, v in pm.state_dict().items()}
    assert all(np.array_equal(before[k], after[k]) for k in before)  # Paddle's BatchNorm statistics too
    assert torch.equal(tm.bn1.running_var, torch.from_numpy(before["bn1._variance"]))
    assert all(p.grad is None for p in tm.parameters()) and all(p.grad is None for p in pm.parameters())
    assert not tm._forward_hooks and not tm.bn1._forward_pre_hooks  # hooks removed
    flat = nn.Sequential(TorchCNN(), nn.Flatten(0))
    with pytest.raises(ValueError, match="the models' outputs differ in shape"):
        diff_layers(pm, flat, cnn_input(), load=None)
    assert not flat[0].conv1._forward_hooks and not pm.conv1._forward_post_hooks  # also after an error


class PaddlePositions(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.pos_table = self.create_parameter([4, 3])
        self.proj = paddle.nn.Linear(3, 3)

    def forward(self, x):
        return self.proj(x + self.pos_table)


class PortPositions(nn.Module):
    """Paddle's ``pos_table`` and ``proj`` under other names; ``bug``: the table's gradient doubled."""

    def __init__(self, bug: bool = False) -> None:
        super().__init__()
        self.pos = nn.Parameter(torch.zeros(4, 3))
        self.fc = nn.Linear(3, 3)
        self.bug = bug

    def forward(self, x):
        pos = 2 * self.pos - self.pos.detach() if self.bug else self.pos  # the same value, twice the gradient
        return self.fc(x + pos)


def test_name_map_covers_the_models_own_parameter_gradients():
    """A model-level parameter renamed by name_map has its gradient compared at the model."""
    x = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)
    names = {"pos": "pos_table", "fc": "proj"}
    paddle.seed(0)
    clean = diff_layers(PaddlePositions(), PortPositions(), x, name_map=names)
    assert clean.ok, clean.summary()
    root = next(r for r in clean.layers if r.key == "(model)")
    assert "grad pos" in [c.what for c in root.backward]
    paddle.seed(0)
    buggy = diff_layers(PaddlePositions(), PortPositions(bug=True), x, name_map=names)
    assert buggy.first_forward is None
    assert (buggy.first_backward.layer, buggy.first_backward.check.what) == ("(model)", "grad pos")
