"""The traps docs/porting.md lists, measured: Paddle 3.3.1 on one side, torch on the other.

Each test pins one statement of the guide, so a Paddle or torch release that changes the
behaviour fails here and the guide gets corrected.
"""

import numpy as np
import paddle
import pytest
import torch

import paddle_compat.optimizer as pc_optim
from paddle_compat.nn import ClipGradByGlobalNorm

SPECIALS = [float("nan"), -1.0, 2.0, float("inf"), float("-inf")]


def test_relu_turns_nan_into_zero_in_paddle_on_cpu_and_keeps_it_in_torch():
    x = np.array(SPECIALS, dtype=np.float32)
    for dtype in ("float32", "float64"):
        out = paddle.nn.functional.relu(paddle.to_tensor(x.astype(dtype))).numpy()
        np.testing.assert_array_equal(out, [0.0, 0.0, 2.0, np.inf, 0.0])
        np.testing.assert_array_equal(paddle.nn.ReLU()(paddle.to_tensor(x.astype(dtype))).numpy(), out)
    t = torch.relu(torch.tensor(x))
    assert torch.isnan(t[0]) and t[1:].tolist() == [0.0, 2.0, float("inf"), 0.0]
    # Paddle's maximum(x, 0) and relu6 keep the NaN, as torch's relu does
    assert np.isnan(paddle.maximum(paddle.to_tensor(x), paddle.zeros([5])).numpy()[0])
    assert np.isnan(paddle.nn.functional.relu6(paddle.to_tensor(x)).numpy()[0])


def test_gelu_of_inf_is_inf_in_paddle_and_nan_in_torchs_avx512_cpu_float32_kernel():
    inf = float("inf")
    gelu = torch.nn.functional.gelu
    for n in (1, 2, 64):
        np.testing.assert_array_equal(paddle.nn.functional.gelu(paddle.full([n], inf)).numpy(), np.full(n, np.inf))
    assert gelu(torch.full((1,), inf)).item() == inf
    vectorised = torch.cat([gelu(torch.full((2,), inf)), gelu(torch.full((64,), inf))])
    if torch.backends.cpu.get_cpu_capability() == "AVX512":  # its vectorised erf
        assert torch.isnan(vectorised).all()
    else:
        assert vectorised.eq(inf).all()
    assert gelu(torch.full((64,), inf, dtype=torch.float64)).eq(inf).all()
    assert gelu(torch.full((64,), inf), approximate="tanh").eq(inf).all()


def test_clip_with_only_a_lower_bound_turns_inf_into_float_max_in_paddle():
    x = paddle.to_tensor(np.array([np.inf], dtype=np.float32))
    assert paddle.clip(x, min=0.0).numpy()[0] == np.finfo(np.float32).max
    assert torch.clamp(torch.tensor([float("inf")]), min=0.0).item() == float("inf")


def test_named_parameters_lists_batchnorm_running_statistics_in_paddle():
    bn = paddle.nn.BatchNorm1D(3)
    names = [(n, p.stop_gradient) for n, p in bn.named_parameters()]
    assert names == [("weight", False), ("bias", False), ("_mean", True), ("_variance", True)]
    assert list(bn.state_dict()) == ["weight", "bias", "_mean", "_variance"]
    assert [n for n, _ in torch.nn.BatchNorm1d(3).named_parameters()] == ["weight", "bias"]
    assert list(torch.nn.BatchNorm1d(3).state_dict()) == [
        "weight", "bias", "running_mean", "running_var", "num_batches_tracked"]


@pytest.mark.filterwarnings("ignore:When training, we now always track global mean and variance")
def test_batchnorm_momentum_is_the_kept_fraction_and_running_variance_is_biased_in_paddle():
    x = np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32)
    bn = paddle.nn.BatchNorm1D(3)  # momentum 0.9
    bn.train()
    bn(paddle.to_tensor(x))
    np.testing.assert_allclose(bn._mean.numpy(), 0.1 * x.mean(0), rtol=1e-6)
    np.testing.assert_allclose(bn._variance.numpy(), 0.9 + 0.1 * x.var(0), rtol=1e-6)  # biased
    tbn = torch.nn.BatchNorm1d(3, momentum=0.1)
    tbn(torch.from_numpy(x))
    np.testing.assert_allclose(tbn.running_mean.numpy(), 0.1 * x.mean(0), rtol=1e-6)
    np.testing.assert_allclose(tbn.running_var.numpy(), 0.9 + 0.1 * x.var(0, ddof=1), rtol=1e-6)  # unbiased


def test_linear_weight_is_in_by_out_with_static_names_and_xavier_init_in_paddle():
    lin = paddle.nn.Linear(100, 200)
    assert list(lin.weight.shape) == [100, 200]
    assert torch.nn.Linear(100, 200).weight.shape == (200, 100)
    assert lin.weight.name.startswith("linear_") and lin.weight.name.endswith(".w_0")
    assert lin.bias.name.endswith(".b_0")
    bound = np.sqrt(6.0 / (100 + 200))  # Xavier (Glorot) uniform; the bias starts at zero
    assert np.abs(lin.weight.numpy()).max() <= bound and np.abs(lin.weight.numpy()).max() > 0.9 * bound
    assert (lin.bias.numpy() == 0).all()
    x = np.random.default_rng(1).standard_normal((2, 100)).astype(np.float32)
    t = torch.nn.Linear(100, 200)
    with torch.no_grad():
        t.weight.copy_(torch.from_numpy(lin.weight.numpy()).T)
        t.bias.copy_(torch.from_numpy(lin.bias.numpy()))
    np.testing.assert_allclose(
        t(torch.from_numpy(x)).detach().numpy(), lin(paddle.to_tensor(x)).numpy(), rtol=1e-5, atol=1e-6
    )


def test_cross_entropy_takes_classes_on_the_last_axis_in_paddle_and_on_dim_1_in_torch():
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((2, 5, 4)).astype(np.float32)
    labels = rng.integers(0, 4, (2, 5)).astype(np.int64)
    want = float(paddle.nn.functional.cross_entropy(paddle.to_tensor(logits), paddle.to_tensor(labels)))
    got = torch.nn.functional.cross_entropy(torch.from_numpy(logits).permute(0, 2, 1), torch.from_numpy(labels))
    assert got.item() == pytest.approx(want, rel=1e-6)
    with pytest.raises(RuntimeError):
        torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.from_numpy(labels))
    # Paddle also takes labels shaped [N, 1]; torch wants [N]
    two_d = float(paddle.nn.functional.cross_entropy(paddle.to_tensor(logits[:, 0]), paddle.to_tensor(labels[:, :1])))
    got = torch.nn.functional.cross_entropy(torch.from_numpy(logits[:, 0]), torch.from_numpy(labels[:, 0]))
    assert got.item() == pytest.approx(two_d, rel=1e-6)


def test_apply_decay_param_fun_gets_static_names_in_paddle_and_named_parameters_names_here():
    seen_paddle, seen_ours = [], []
    model = paddle.nn.Sequential(paddle.nn.Linear(2, 2))
    x = paddle.ones([1, 2])
    opt = paddle.optimizer.AdamW(
        parameters=model.parameters(), apply_decay_param_fun=lambda n: seen_paddle.append(n) or True
    )
    model(x).sum().backward()
    opt.step()
    assert sorted(set(seen_paddle)) == sorted([model[0].weight.name, model[0].bias.name])
    assert all(n.startswith("linear_") for n in seen_paddle)
    tmodel = torch.nn.Sequential(torch.nn.Linear(2, 2))
    topt = pc_optim.AdamW(
        parameters=tmodel.named_parameters(), apply_decay_param_fun=lambda n: seen_ours.append(n) or True
    )
    tmodel(torch.ones(1, 2)).sum().backward()
    topt.step()
    assert sorted(set(seen_ours)) == ["0.bias", "0.weight"]


def test_clear_grad_zeroes_in_paddle_and_zero_grad_drops_in_torch():
    p = paddle.create_parameter([2], "float32")
    (p * 2).sum().backward()
    paddle.optimizer.SGD(parameters=[p]).clear_grad()
    np.testing.assert_array_equal(p.grad.numpy(), [0.0, 0.0])
    t = torch.nn.Parameter(torch.ones(2))
    (t * 2).sum().backward()
    torch.optim.SGD([t], lr=0.1).zero_grad()
    assert t.grad is None
    (t * 2).sum().backward()
    pc_optim.SGD(parameters=[t]).clear_grad()
    assert torch.equal(t.grad, torch.zeros(2))


def _doc(name: str) -> str:
    from pathlib import Path

    return " ".join((Path(__file__).resolve().parents[2] / "docs" / name).read_text().split())


def test_minimize_with_parameter_groups_raises_type_error_in_paddle():
    layer = paddle.nn.Linear(2, 2)
    for cls in (paddle.optimizer.SGD, paddle.optimizer.Adam):
        opt = cls(0.1, parameters=[{"params": [layer.weight]}, {"params": [layer.bias], "learning_rate": 0.5}])
        loss = layer(paddle.ones([1, 2])).sum()
        loss.backward()
        with pytest.raises(TypeError, match="must be list of Tensor, but got dict"):
            opt.minimize(loss)
    # here minimize() applies each group's options, as step() does
    w, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    ours = pc_optim.SGD(0.25, parameters=[{"params": [w]}, {"params": [b], "learning_rate": 0.5}])
    w.grad, b.grad = torch.ones(2), torch.ones(2)
    ours.minimize(torch.zeros(()))
    assert w.tolist() == [0.75, 0.75] and b.tolist() == [0.875, 0.875]
    assert "Paddle 3.3.1's dygraph `minimize` raises `TypeError` there" in _doc("optimizers.md")


def test_a_norm_clip_over_a_transposed_linear_weight_sums_in_another_order():
    rng = np.random.default_rng(0)
    grad = rng.standard_normal((96, 80)).astype(np.float32)  # Paddle's Linear weight: [in, out]
    param = paddle.create_parameter([96, 80], "float32")
    ((_, paddles),) = paddle.nn.ClipGradByGlobalNorm(1.0)._dygraph_clip([(param, paddle.to_tensor(grad))])
    paddles = paddles.numpy()
    clip = ClipGradByGlobalNorm(1.0)
    ((_, same_layout),) = clip([(torch.nn.Parameter(torch.zeros(96, 80)), torch.from_numpy(grad.copy()))])
    ((_, torch_layout),) = clip([(torch.nn.Parameter(torch.zeros(80, 96)), torch.from_numpy(grad.T.copy()))])
    assert np.array_equal(same_layout.numpy().view(np.uint32), paddles.view(np.uint32))
    differ = torch_layout.numpy().T.view(np.uint32) != paddles.view(np.uint32)
    assert differ.any() and np.allclose(torch_layout.numpy().T, paddles, rtol=1e-6, atol=0)
    for doc in ("porting.md", "optimizers.md"):
        assert "`[out, in]` where Paddle's is `[in, out]`" in _doc(doc), doc
