"""Activation recompute under auto_cast: the recomputed forward runs under the forward's state.

Every gradient is compared bit for bit with the same run without recompute."""

from __future__ import annotations

import inspect
import logging
import os
import random
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
import torch
import torch.utils.checkpoint as torch_checkpoint
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from paddle_compat.amp import auto_cast
from paddle_compat.distributed.fleet.recompute import recompute_sequential
from paddle_compat.distributed.fleet.utils import recompute
from tests.torch_release import needs_compile_support

_GENERATOR = "_checkpoint_without_reentrant_generator"
CASES = [("O1", "float16"), ("O1", "bfloat16"), ("O2", "float16"), ("O2", "bfloat16"),
         ("OD", "float16"), ("OD", "bfloat16")]


def _block() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.GELU(), torch.nn.LayerNorm(16),
        torch.nn.Linear(16, 8), torch.nn.Softmax(-1))


APIS = {
    "plain": lambda block, x: block(x),
    "checkpoint-reentrant": lambda block, x: checkpoint(block, x, use_reentrant=True),
    "checkpoint-non-reentrant": lambda block, x: checkpoint(block, x, use_reentrant=False),
    "checkpoint_sequential": lambda block, x: checkpoint_sequential(block, 3, x, use_reentrant=False),
    "checkpoint_sequential-reentrant": lambda block, x: checkpoint_sequential(block, 2, x, use_reentrant=True),
    "recompute": lambda block, x: recompute(block, x),
    "recompute-non-reentrant": lambda block, x: recompute(block, x, use_reentrant=False),
    "recompute_sequential": lambda block, x: recompute_sequential({"segments": 3}, block, x),
}


def _grads(api, level, dtype, backward_under=None, **cast_args):
    block = _block()
    torch.manual_seed(1)
    x = torch.randn(4, 8, requires_grad=True)
    with auto_cast(level=level, dtype=dtype, **cast_args):
        out = APIS[api](block, x)
        loss = out.float().pow(2).sum()
    if backward_under is None:
        loss.backward()
    else:
        with backward_under:
            loss.backward()
    return [out, x.grad, *(p.grad for p in block.parameters())]


def _assert_bitwise(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype
        assert torch.equal(a, e)


@pytest.mark.parametrize("level,dtype", CASES)
@pytest.mark.parametrize("api", [name for name in APIS if name != "plain"])
def test_recompute_gradients_are_bitwise_those_without_recompute(api, level, dtype):
    _assert_bitwise(_grads(api, level, dtype), _grads("plain", level, dtype))


@pytest.mark.parametrize("api", ["checkpoint-reentrant", "checkpoint-non-reentrant", "recompute"])
def test_the_whole_state_is_restored_not_the_one_backward_runs_under(api):
    # O2 without promotion, a custom list, and a backward called inside another auto_cast.
    cast_args = {"use_promote": False, "custom_black_list": ["layer_norm"], "custom_white_list": ["softmax"]}
    expected = _grads("plain", "O2", "float16", **cast_args)
    other = auto_cast(level="O1", dtype="bfloat16")
    _assert_bitwise(_grads(api, "O2", "float16", backward_under=other, **cast_args), expected)
    _assert_bitwise(_grads(api, "O2", "float16", **cast_args), expected)


@pytest.mark.parametrize("api", ["checkpoint-reentrant", "checkpoint-non-reentrant", "recompute"])
def test_a_forward_without_auto_cast_is_recomputed_without_it(api):
    expected = _grads("plain", "O0", "float16")
    _assert_bitwise(_grads(api, "O0", "float16", backward_under=auto_cast(dtype="bfloat16")), expected)


def test_backward_in_another_thread_recomputes_under_the_forward_state():
    # What CUDA's autograd device threads do: the recomputation runs where no auto_cast is active.
    expected = _grads("plain", "O1", "float16")
    block = _block()
    torch.manual_seed(1)
    x = torch.randn(4, 8, requires_grad=True)
    with auto_cast():
        out = checkpoint(block, x, use_reentrant=False)
    errors = []

    def run():
        try:
            out.float().pow(2).sum().backward()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert not errors
    _assert_bitwise([out, x.grad, *(p.grad for p in block.parameters())], expected)


def test_nested_checkpoints():
    block, inner = _block(), torch.nn.Linear(8, 8)

    def forward(x, nested):
        y = block(x)
        return checkpoint(inner, y, use_reentrant=False) if nested else inner(y)

    results = []
    for nested in (False, True):
        torch.manual_seed(1)
        x = torch.randn(4, 8, requires_grad=True)
        with auto_cast():
            out = checkpoint(forward, x, nested, use_reentrant=False) if nested else forward(x, nested)
        out.float().sum().backward()
        results.append([out, x.grad, *(p.grad.clone() for p in (*block.parameters(), *inner.parameters()))])
        for p in (*block.parameters(), *inner.parameters()):
            p.grad = None
    _assert_bitwise(results[1], results[0])


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_recompute_replays_python_random_as_paddle_does(use_reentrant):
    linear = torch.nn.Linear(4, 4)

    def drop_path(x):  # stochastic depth drawn from Python's random, as ported models do
        return linear(x) * torch.full((4,), 2.0 if random.random() < 0.5 else 0.5)  # saved for backward

    grads = []
    for run in (drop_path, lambda x: recompute(drop_path, x, use_reentrant=use_reentrant)):
        random.seed(3)
        x = torch.ones(2, 4, requires_grad=True)
        run(x).sum().backward()
        grads.append(x.grad)
        random.random()  # the recomputation must not depend on the state backward finds
    assert torch.equal(grads[0], grads[1])


def test_recompute_binds_keyword_inputs_and_gives_tuples_of_tensors_gradients():
    def f(pair, scale, bias=None):
        return (pair[0] * pair[1]) * scale + bias

    a, b, c = (torch.full((3,), v, requires_grad=True) for v in (2.0, 3.0, 1.0))
    recompute(f, (a, b), 2.0, bias=c).sum().backward()
    assert a.grad.tolist() == [6.0] * 3 and b.grad.tolist() == [4.0] * 3 and c.grad.tolist() == [1.0] * 3


def test_recompute_argument_checks_are_paddles():
    x = torch.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="^Currently, keyword-only arguments are not supported"):
        recompute(lambda a, *, k=1: a * k, x, k=2)
    assert torch.equal(recompute(lambda a, *, k=1: a * k, x, k=2, use_reentrant=False), x * 2)
    with pytest.raises(ValueError, match="^Recompute receive a tuple containing tensor and non-tensor at same time.$"):
        recompute(lambda p: p[0], (x, 2))
    with pytest.raises(ValueError, match="^Recompute receive a tuple containing tensor holds different stop"):
        recompute(lambda p: p[0], (x, torch.ones(2)))


@pytest.mark.parametrize("call,error,message", [
    (lambda x: recompute(42, x), TypeError, "function should be a callable"),
    (lambda x: recompute(torch.sin, x, use_reentrant="yes"), TypeError, "use_reentrant should be a bool"),
    (lambda x: recompute(torch.sin, x, preserve_rng_state=None), TypeError, "preserve_rng_state should be a bool"),
    (lambda x: recompute_sequential([2], [torch.sin], x), TypeError, "ctx should be a dict"),
    (lambda x: recompute_sequential({"segments": 0}, [torch.sin], x), ValueError, r"ctx\['segments'\] should be"),
    (lambda x: recompute_sequential({"segments": 3}, [torch.sin] * 2, x), ValueError, r"ctx\['segments'\]"),
    (lambda x: recompute_sequential({"segments": "2"}, [torch.sin] * 2, x), TypeError, r"ctx\['segments'\]"),
    (lambda x: recompute_sequential({"segments": 1}, 42, x), TypeError, "^functions should be an nn.Sequential"),
    (lambda x: recompute_sequential({"segments": 1}, [torch.sin, 2], x), TypeError,
     "^functions should hold callables, but holds a int.$"),
])
def test_bad_arguments_are_refused_naming_them(call, error, message):
    with pytest.raises(error, match=message):
        call(torch.ones(2, requires_grad=True))


def test_recompute_logs_paddles_line_when_nothing_needs_a_gradient(caplog):
    with caplog.at_level(logging.WARNING, logger="paddle_compat.distributed"):
        recompute(torch.sin, torch.ones(2), use_reentrant=False)
    assert "[Recompute]: None of the inputs to current recompute block need grad" in caplog.text


def test_recompute_sequential_feeds_each_output_on_as_one_input():
    # Paddle unpacks the output of a segment along its first dimension (a TypeError for a batch
    # of 3); here it is the next segment's one input, as in torch's checkpoint_sequential.
    model = torch.nn.Sequential(*(torch.nn.Linear(4, 4) for _ in range(4)))
    x = torch.randn(3, 4, requires_grad=True)
    for segments in (1, 2, 3, 4):
        assert torch.equal(recompute_sequential({"segments": segments}, model, x), model(x))


@pytest.mark.parametrize("use_checkpoint", [False, True])
def test_torch_compile_recomputes_what_eager_computed(use_checkpoint):
    # torch.compile's own activation recompute replays the traced graph, casts included, and its
    # compiled backward is not cast again under an auto_cast active at backward. (No dropout:
    # compiled and eager dropout draw differently.)
    block = torch.nn.Sequential(*(m for m in _block() if not isinstance(m, torch.nn.Dropout)))

    def grads(forward):
        torch.manual_seed(1)
        x = torch.randn(4, 8, requires_grad=True)
        with auto_cast():
            out = forward(x)
        with auto_cast(dtype="bfloat16"):
            out.float().pow(2).sum().backward()
        found = [out, x.grad, *(p.grad for p in block.parameters())]
        block.zero_grad(set_to_none=True)
        return found

    expected = grads(block)
    torch._dynamo.reset()
    forward = (lambda x: checkpoint(block, x, use_reentrant=False)) if use_checkpoint else block
    _assert_bitwise(grads(torch.compile(forward, backend="aot_eager", fullgraph=True)), expected)


def test_a_fresh_process_recomputes_under_auto_cast():
    # As a user meets it: nothing installed by a fixture or an earlier test.
    script = textwrap.dedent("""
        import torch
        from torch.distributed._composable import checkpoint as composable  # imported before any auto_cast
        from torch.utils.checkpoint import checkpoint
        from paddle_compat.amp import auto_cast
        from paddle_compat.distributed.fleet.utils import recompute

        def run(api):
            torch.manual_seed(0)
            block = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 8))
            x = torch.randn(4, 8, requires_grad=True)
            with auto_cast(level="O2", dtype="bfloat16"):
                out = api(block, x)
            out.float().sum().backward()
            return [x.grad, *(p.grad for p in block.parameters())]

        plain = run(lambda b, x: b(x))
        for api in (lambda b, x: recompute(b, x), lambda b, x: recompute(b, x, use_reentrant=False),
                    lambda b, x: checkpoint(b, x, use_reentrant=False),
                    lambda b, x: checkpoint(b, x, use_reentrant=True), lambda b, x: composable(b)(x)):
            assert all(torch.equal(a, e) for a, e in zip(run(api), plain))
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def _selective(block, x):
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    def policy(ctx, op, *args, **kwargs):  # keep matmuls, recompute the rest
        return CheckpointPolicy.MUST_SAVE if op is torch.ops.aten.mm.default else CheckpointPolicy.PREFER_RECOMPUTE

    return checkpoint(block, x, use_reentrant=False,
                      context_fn=lambda: create_selective_checkpoint_contexts(policy))


def _wrapped(block, x):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    return checkpoint_wrapper(block)(x)


def _composable(block, x):
    from torch.distributed._composable import checkpoint as composable_checkpoint

    return composable_checkpoint(block)(x)


@pytest.mark.parametrize("api", [_selective, _wrapped, _composable])
def test_torchs_other_checkpoint_entries_recompute_under_the_forward_state(api):
    APIS["other"] = api
    try:
        _assert_bitwise(_grads("other", "O2", "bfloat16"), _grads("plain", "O2", "bfloat16"))
    finally:
        del APIS["other"]


@needs_compile_support
@pytest.mark.parametrize("use_reentrant", [True, False])
def test_fleet_recompute_inside_torch_compile(use_reentrant):
    expected = _grads("plain", "O1", "float16")
    torch._dynamo.reset()
    APIS["compiled"] = torch.compile(lambda block, x: recompute(block, x, use_reentrant=use_reentrant),
                                     backend="aot_eager")
    try:
        found = _grads("compiled", "O1", "float16")
    finally:
        del APIS["compiled"]
    _assert_bitwise(found, expected)


def _bridge_reset(monkeypatch):
    """A process where the bridge has not installed yet; the names it sets come back afterwards."""
    from torch.distributed._composable import checkpoint_activation

    from paddle_compat.amp import checkpoint_bridge

    monkeypatch.setattr(checkpoint_bridge, "_installed", False)
    for module, name in ((torch_checkpoint, _GENERATOR), (torch_checkpoint, "CheckpointFunction"),
                         (checkpoint_activation, _GENERATOR)):
        monkeypatch.setattr(module, name, inspect.unwrap(getattr(module, name)))
    return checkpoint_bridge, checkpoint_activation


@pytest.mark.parametrize("missing", [[_GENERATOR], ["CheckpointFunction"], [_GENERATOR, "CheckpointFunction"]])
def test_a_torch_without_the_checkpoint_internals_gets_one_warning(monkeypatch, missing):
    bridge, _ = _bridge_reset(monkeypatch)
    torchs_function = torch_checkpoint.CheckpointFunction
    for name in missing:
        monkeypatch.setattr(torch_checkpoint, name, None)  # renamed away, or no longer what it was
    with pytest.warns(UserWarning, match=f"has no {' or '.join(missing)} in torch.utils.checkpoint"):
        bridge.install()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bridge.install()  # once
    generator = getattr(torch_checkpoint, _GENERATOR)
    assert (generator is None) == (_GENERATOR in missing)
    assert generator is None or generator.__wrapped__ is inspect.unwrap(generator)
    function = torch_checkpoint.CheckpointFunction
    assert function is None if "CheckpointFunction" in missing else function.__bases__ == (torchs_function,)


def test_a_patch_made_before_the_first_auto_cast_keeps_running_inside_ours(monkeypatch):
    bridge, composable = _bridge_reset(monkeypatch)
    calls = []
    torchs = getattr(torch_checkpoint, _GENERATOR)

    def patch(kind):
        def generator(fn, *args, **kwargs):
            calls.append(kind)
            return torchs(fn, *args, **kwargs)

        return generator

    monkeypatch.setattr(torch_checkpoint, _GENERATOR, patch("checkpoint"))
    monkeypatch.setattr(composable, _GENERATOR, patch("composable"))
    bridge.install()
    expected = _grads("plain", "O2", "bfloat16")
    _assert_bitwise(_grads("checkpoint-non-reentrant", "O2", "bfloat16"), expected)
    APIS["other"] = _composable
    try:
        _assert_bitwise(_grads("other", "O2", "bfloat16"), expected)
    finally:
        del APIS["other"]
    assert calls == ["checkpoint", "composable"]


def test_replaying_refuses_what_it_cannot_call_naming_it():
    from paddle_compat.amp.checkpoint_bridge import replaying

    with pytest.raises(TypeError, match="^fn should be a callable, but received int$"):
        replaying(42)


@pytest.mark.parametrize("api", ["recompute", "recompute-non-reentrant"])
def test_fleet_recompute_needs_no_bridge(monkeypatch, api):
    bridge, _ = _bridge_reset(monkeypatch)
    monkeypatch.setattr(bridge, "_installed", True)  # as on a torch whose internals it could not wrap
    _assert_bitwise(_grads(api, "O2", "bfloat16"), _grads("plain", "O2", "bfloat16"))
