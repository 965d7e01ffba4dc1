"""paddle_compat.parity.align: pairing the layer calls of two runs (no Paddle needed: both sides are
played by torch modules; tests/parity/test_layer_diff_parity.py aligns real Paddle models)."""

from __future__ import annotations

from torch import nn

from paddle_compat.parity.align import Call, align, kind_of


def calls(*spec):
    """Calls in completion order from (path, module) pairs."""
    seen: dict[str, int] = {}
    out = []
    for order, (path, module) in enumerate(spec):
        n = seen.get(path, 0)
        seen[path] = n + 1
        out.append(Call(path, n, module, kind_of(module), order))
    return out


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.act = nn.GELU()


class OtherNamedBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.dense = nn.Linear(2, 2)
        self.gelu = nn.GELU()


def test_kinds_agree_across_frameworks_and_class_names():
    assert kind_of(nn.MultiheadAttention(4, 2).out_proj) == "linear"
    assert kind_of(nn.BatchNorm2d(3)) == kind_of(nn.BatchNorm1d(3)) == "batchnorm"
    assert kind_of(Block()) == kind_of(OtherNamedBlock()) == "{gelu,linear}"


def test_names_then_types():
    p = calls(("a.fc", nn.Linear(2, 2)), ("a.act", nn.GELU()), ("a", Block()), ("head", nn.Linear(2, 2)), ("", Block()))
    t = calls(
        ("x.dense", nn.Linear(2, 2)),
        ("x.gelu", nn.GELU()),
        ("x", OtherNamedBlock()),
        ("head", nn.Linear(2, 2)),
        ("", Block()),
    )
    pairs, notes = align(p, t)
    assert [(q.paddle.key, q.torch.key, q.how) for q in pairs] == [
        ("a.fc", "x.dense", "type"),
        ("a.act", "x.gelu", "type"),
        ("a", "x", "type"),
        ("head", "head", "name"),
        ("(model)", "(model)", "name"),
    ]
    assert notes == []
    mapped, _ = align(p, t, layer_map={"a": "x", "a.fc": "x.dense", "a.act": "x.gelu"})
    assert [q.how for q in mapped][:3] == ["layer_map"] * 3
    back, _ = align(p, t, name_map={"x": "a", "x.dense": "a.fc", "x.gelu": "a.act"})
    assert [q.how for q in back] == ["name"] * 5


def test_one_sided_calls_are_notes_with_their_reason():
    mha = nn.MultiheadAttention(4, 2)
    p = calls(*[(f"attn.{n}_proj", nn.Linear(4, 4)) for n in "qkvo"], ("attn", mha), ("extra", nn.ReLU()))
    t = calls(("attn", mha), ("only_torch", nn.Tanh()))
    pairs, notes = align(p, t)
    assert [q.torch.key for q in pairs] == ["attn"]
    assert notes[0].startswith("Paddle's attn.q_proj (Linear), attn.k_proj (Linear), attn.v_proj (Linear), attn.o_proj")
    assert "torch's MultiheadAttention computes the q/k/v/out projections inside one call" in notes[0]
    assert notes[1] == "Paddle's extra (ReLU): no torch call matched them by name or type: not compared"
    assert notes[2] == "torch's only_torch (Tanh): no Paddle call matched them: not compared"


def test_name_matches_out_of_order_are_notes():
    p = calls(("a", nn.ReLU()), ("b", nn.Tanh()))
    t = calls(("b", nn.Tanh()), ("a", nn.ReLU()))
    pairs, notes = align(p, t)
    assert len(pairs) == 1 and "run in another order" in notes[0]


def test_ignore_and_depth():
    p = calls(("blk.fc", nn.Linear(2, 2)), ("blk", Block()), ("", Block()))
    t = calls(("blk.fc", nn.Linear(2, 2)), ("blk", Block()), ("", Block()))
    assert [q.torch.key for q in align(p, t, depth=1)[0]] == ["blk", "(model)"]
    assert [q.torch.key for q in align(p, t, ignore=["blk"])[0]] == ["(model)"]
    assert [q.torch.key for q in align(p, t, ignore_types=[nn.Linear])[0]] == ["blk", "(model)"]
    assert [q.torch.key for q in align(p, t, ignore_types=["Linear"])[0]] == ["blk", "(model)"]
