"""``python -m paddle_compat.parity layers``: diff_layers from the command line, against real Paddle."""

from __future__ import annotations

import json
import textwrap

import numpy as np

from paddle_compat.parity.cli import main

MODELS = """
import paddle
import torch


def paddle_model():
    paddle.seed(0)
    return paddle.nn.Sequential(paddle.nn.Linear(4, 8), paddle.nn.GELU(), paddle.nn.Linear(8, 2))


def port():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))


def buggy_port():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(8, 2))
"""


def test_layers_subcommand(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models.py").write_text(textwrap.dedent(MODELS))
    np.save(tmp_path / "x.npy", np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32))
    assert main(["layers", "models.py:paddle_model", "models.py:port", "--input", "x.npy"]) == 0
    out = capsys.readouterr().out
    assert "4 layers compared (single-step): equal within noise" in out and "1 (GELU): ok" in out
    argv = ["layers", "models.py:paddle_model", "models.py:buggy_port", "--input", "x.npy", "--json", "r.json"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "first divergence (forward) at 1:" in out and "1 (GELU): DIFFERS fwd bwd   <-- first divergence" in out
    assert json.loads((tmp_path / "r.json").read_text())["first_forward"]["layer"] == "1"
    assert main([*argv[:5], "--ignore", "1"]) == 0  # the different activation, ignored
    np.savez(tmp_path / "x.npz", np.load(tmp_path / "x.npy"))
    assert main(["layers", "models.py:paddle_model", "models.py:port", "--input", "x.npz", "--chained"]) == 0
    assert "(chained)" in capsys.readouterr().out
    for spec, message in (
        ("models.py", "give FILE.py:NAME"),
        ("nowhere.py:m", "no file nowhere.py"),
        ("models.py:missing", "has no attribute 'missing'"),
    ):
        assert main(["layers", spec, "models.py:port", "--input", "x.npy"]) == 2
        assert message in capsys.readouterr().err
    assert main(["layers", "models.py:paddle_model", "models.py:port", "--input", "nothing.npy"]) == 2
    assert "--input: cannot read nothing.npy" in capsys.readouterr().err
