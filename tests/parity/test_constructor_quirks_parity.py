"""Paddle 3.3.1's constructor quirks that ported programs rely on, reproduced bitwise.

- The Adam family takes ``beta1``/``beta2``/``epsilon`` as one-element tensors (Adam's and Lamb's
  own docstring examples do), and Adam, AdamW and Lamb then start their beta powers at 0.9 and
  0.999 whatever the tensors hold.
- Momentum rewrites the caller's group dicts (``weight_decay`` becomes ``None``, the fused
  decay's ``regularization_method``/``regularization_coeff`` are added): a second Momentum built
  from the same dicts trains without that decay (PaddleScience does so).
- The options' private attributes Paddle code reads (``Adam._beta1``, PaddleSpeech) exist.
- Every constructor's signature shows to ``inspect`` as Paddle's (PaddleVideo reads
  ``getfullargspec(...).args`` to switch ``multi_precision`` on).
"""

from __future__ import annotations

import inspect
import itertools

import numpy as np
import paddle
import pytest
import torch

import paddle_compat.optimizer as popt

from ..optim_db import CLASSES, OPTIM_DB, OURS, cases, ids
from .paddle_oracle import assert_bitwise_equal, copy_grads_to_paddle, paddle_params_like

_UNIQUE = itertools.count()  # Paddle refuses to reuse a parameter name


def twin_params(dtype: str, shapes: tuple[tuple[int, ...], ...] = ((10, 10), (10,)), seed: int = 0):
    """Parameters of ``shapes`` on both sides (default: a ``Linear(10, 10)``'s), the same values in ``dtype``."""
    rng = np.random.default_rng(seed)
    values = [(rng.standard_normal(s) * 0.3).astype(dtype) for s in shapes]
    ours = [torch.nn.Parameter(torch.from_numpy(v.copy())) for v in values]
    return ours, paddle_params_like(ours)


def linear_grads(step: int, params: list[torch.Tensor]) -> list[torch.Tensor]:
    """The gradients of ``mean(linear(inp))`` (Paddle's docstring examples): they do not depend on
    the parameters, so both sides get the same ones."""
    inp = torch.from_numpy(np.random.default_rng(100 + step).uniform(-0.1, 0.1, (10, 10)))
    weight, bias = (p.detach().requires_grad_(True) for p in params)
    torch.mean(inp.to(weight.dtype) @ weight + bias).backward()
    return [weight.grad, bias.grad]


def random_grads(step: int, params: list[torch.Tensor]) -> list[torch.Tensor]:
    rng = np.random.default_rng(200 + step)
    return [torch.from_numpy(rng.standard_normal(p.shape).astype(np.float32)).to(p.dtype) for p in params]


def step_both(ours_opt, paddle_opt, ours: list, paddles: list, steps: int, grads=linear_grads) -> None:
    """``steps`` steps with the same gradients on both sides, comparing the parameters bitwise after each."""
    for step in range(steps):
        for o, g in zip(ours, grads(step, ours), strict=True):
            o.grad = g.clone()
        copy_grads_to_paddle(ours, paddles)
        ours_opt.step()
        paddle_opt.step()
        ours_opt.clear_grad()
        paddle_opt.clear_grad()
        for o, pp in zip(ours, paddles, strict=True):
            assert_bitwise_equal(o.detach(), pp, f"step {step}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adam_docstring_example_with_tensor_betas(dtype):
    """Paddle's ``Adam`` docstring, second example: tensor betas, ``weight_decay=0.01``."""
    ours, paddles = twin_params(dtype)
    ours_opt = popt.Adam(
        learning_rate=0.1, parameters=ours, beta1=torch.tensor([0.9]), beta2=torch.tensor([0.99]), weight_decay=0.01
    )
    paddle_opt = paddle.optimizer.Adam(
        learning_rate=0.1, parameters=paddles, beta1=paddle.to_tensor([0.9], dtype="float32"),
        beta2=paddle.to_tensor([0.99], dtype="float32"), weight_decay=0.01,
    )
    step_both(ours_opt, paddle_opt, ours, paddles, 4)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lamb_docstring_example_with_tensor_betas(dtype):
    """Paddle's ``Lamb`` docstring example: tensor betas, ``lamb_weight_decay=0.01``."""
    ours, paddles = twin_params(dtype)
    ours_opt = popt.Lamb(
        learning_rate=0.002, beta1=torch.tensor([0.9]), beta2=torch.tensor([0.85]), parameters=ours,
        lamb_weight_decay=0.01,
    )
    paddle_opt = paddle.optimizer.Lamb(
        learning_rate=0.002, beta1=paddle.to_tensor([0.9], dtype="float32"),
        beta2=paddle.to_tensor([0.85], dtype="float32"), parameters=paddles, lamb_weight_decay=0.01,
    )
    step_both(ours_opt, paddle_opt, ours, paddles, 4)


@pytest.mark.parametrize("name", [info.cls.__name__ for info in OPTIM_DB if info.tensor_options])
def test_tensor_betas_and_epsilon_follow_paddle(name):
    """Every tensor option at a value other than Paddle's defaults, in float64 (the beta powers of
    Adam, AdamW and Lamb start at 0.9 and 0.999 anyway; Adamax's at the tensor's beta1)."""
    ours, paddles = twin_params("float64", seed=1)
    values = {"beta1": 0.8, "beta2": 0.95, "epsilon": 1e-3}
    ours_opt = getattr(popt, name)(
        0.01, parameters=ours, **{k: torch.tensor([v], dtype=torch.float32) for k, v in values.items()}
    )
    paddle_opt = getattr(paddle.optimizer, name)(
        0.01, parameters=paddles, **{k: paddle.to_tensor([v], dtype="float32") for k, v in values.items()}
    )
    step_both(ours_opt, paddle_opt, ours, paddles, 4)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_constructor_signatures_show_as_paddles(cls):
    """Paddle's arguments, order and defaults, plus our keyword-only ``fused``."""
    ours = inspect.getfullargspec(cls.__init__)
    theirs = inspect.getfullargspec(getattr(paddle.optimizer, cls.__name__).__init__)
    assert ours.args == theirs.args
    assert ours.defaults == theirs.defaults
    assert ours.kwonlyargs == ["fused"] and ours.kwonlydefaults == {"fused": False}
    assert list(inspect.signature(cls.__init__).parameters) == [*theirs.args, "fused"]
    assert list(inspect.signature(cls).parameters) == [*theirs.args[1:], "fused"]


def _momentum_groups(api, params: list) -> list[dict]:
    """Three groups: the optimizer's decay, a group's own float decay, a group's ``L1Decay``."""
    return [
        {"params": params[:1]},
        {"params": params[1:2], "weight_decay": 0.05, "learning_rate": 0.5},
        {"params": params[2:], "weight_decay": api.regularizer.L1Decay(0.02)},
    ]


def test_momentum_built_twice_from_the_same_group_dicts():
    ours, paddles = twin_params("float32", ((4, 3), (3,), (5,)), seed=2)
    our_groups, paddle_groups = _momentum_groups(OURS, ours), _momentum_groups(paddle, paddles)
    popt.Momentum(0.1, 0.9, parameters=our_groups, weight_decay=0.01)
    paddle.optimizer.Momentum(0.1, 0.9, parameters=paddle_groups, weight_decay=0.01)
    for o, p in zip(our_groups, paddle_groups, strict=True):
        assert o.keys() == p.keys()
        assert o["regularization_method"] == p["regularization_method"]
        assert o["regularization_coeff"] == p["regularization_coeff"]
        assert (o["weight_decay"] is None) == (p["weight_decay"] is None)
    assert [g["weight_decay"] for g in our_groups[:2]] == [None, None]
    assert our_groups[2]["weight_decay"].coeff == 0.02
    # the second optimizer of each side, from the rewritten dicts: no L2 decay left
    ours_opt = popt.Momentum(0.1, 0.9, parameters=our_groups, weight_decay=0.01)
    paddle_opt = paddle.optimizer.Momentum(0.1, 0.9, parameters=paddle_groups, weight_decay=0.01)
    step_both(ours_opt, paddle_opt, ours, paddles, 4, random_grads)


PARITY = cases("parity")


@pytest.mark.parametrize(("info", "inp"), PARITY, ids=ids(PARITY))
def test_option_attributes_are_paddles(info, inp):
    """Each option of Paddle's ``_default_dict`` is an attribute (``_beta1``; Adagrad's public
    ``initial_accumulator_value``) of both optimizers, with the same value (objects: the same type)."""
    ours_params, paddles = twin_params("float32", ((3, 2), (2,), (2, 2), (2,)))
    names = ["w1", "b1", "w2", "b2"]
    for name, p in zip(names, paddles, strict=True):
        p.name = f"{name}_{next(_UNIQUE)}"
    ours = inp.make(list(zip(names, ours_params, strict=True)))
    theirs = inp.build(paddle, paddles)
    compared = 0
    for key in theirs._default_dict:
        attr = next((a for a in (f"_{key}", key) if hasattr(theirs, a)), None)
        if attr is None:
            continue
        o, p = getattr(ours, attr), getattr(theirs, attr)
        if isinstance(p, (bool, int, float, str)) or p is None:
            assert o == p, f"{attr}: ours {o!r} vs Paddle {p!r}"
        else:
            assert type(o).__name__ == type(p).__name__, attr
        compared += 1
    assert compared or not theirs._default_dict
