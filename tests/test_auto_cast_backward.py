"""auto_cast during backward: the user's Python that backward runs is cast, the kernels are not.

Paddle casts every op its Python API runs while an auto_cast is active, hooks included (its AMP
code has no backward exception), and refuses a hook that changes the gradient's dtype; its
backward kernels are never cast. A backward called outside auto_cast casts nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from paddle_compat.amp import auto_cast


def test_a_hook_that_changes_the_gradients_dtype_is_refused_as_in_paddle():
    v = torch.rand(3, 3, requires_grad=True)
    v.register_hook(lambda g: torch.mm(g, g))
    with auto_cast(), pytest.raises(RuntimeError, match="has changed the type of value"):
        torch.mm(v, v).sum().backward()


def test_a_hook_computes_its_white_ops_in_float16():
    torch.manual_seed(0)
    v = torch.rand(3, 3, requires_grad=True)
    seen = {}

    def hook(g):
        seen["g"] = g
        return g - 0.1 * torch.mm(g, g)  # mm in float16, the subtraction promoted back to float32

    v.register_hook(hook)
    with auto_cast():
        torch.mm(v, v).sum().backward()
    g = seen["g"]
    assert g.dtype == torch.float32
    assert torch.equal(v.grad, g - 0.1 * torch.mm(g.half(), g.half()))


def test_a_hook_outside_auto_cast_is_not_cast():
    v = torch.rand(3, 3, requires_grad=True)
    v.register_hook(lambda g: torch.mm(g, g))
    with auto_cast():
        loss = torch.mm(v, v).sum()
    loss.backward()
    assert v.grad.dtype == torch.float32


def square_function(on_backward):
    """A custom Function computing x * x whose backward first calls ``on_backward()``."""

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad):
            on_backward()
            (x,) = ctx.saved_tensors
            return 2 * x * grad

    return Square


def test_a_custom_functions_backward_is_cast():
    # Paddle casts the ops of a PyLayer's backward.
    seen = []
    x = torch.rand(3, 3, requires_grad=True)
    square = square_function(lambda: seen.append(torch.mm(x.detach(), x.detach()).dtype))
    with auto_cast():
        square.apply(x).sum().backward()
    assert seen == [torch.float16]


def test_a_module_backward_hook_is_cast():
    seen = []
    layer = torch.nn.Linear(3, 3)
    layer.register_full_backward_hook(
        lambda module, grad_in, grad_out: seen.append(torch.mm(grad_out[0].float(), module.weight).dtype))
    with auto_cast():
        layer(torch.rand(2, 3, requires_grad=True)).float().sum().backward()
    assert seen == [torch.float16]


@pytest.mark.parametrize("cast_args", [
    {"level": "O1"}, {"level": "O2", "dtype": "bfloat16", "use_promote": False}, {"level": "OD"},
    {"level": "O1", "custom_white_list": ["elementwise_mul", "elementwise_div", "softmax"]},
])
def test_backward_kernels_are_not_cast(cast_args):
    # A backward run inside auto_cast gives the bits of one run outside it.
    def grads(inside):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.GELU(),
                                    torch.nn.Linear(8, 4), torch.nn.Softmax(-1))
        x = torch.randn(4, 8, requires_grad=True)
        with auto_cast(**cast_args):
            loss = (model(x).float().log() * x[:, :4]).sum()
            if inside:
                loss.backward()
        if not inside:
            loss.backward()
        return [x.grad, *(p.grad for p in model.parameters())]

    for inside, outside in zip(grads(True), grads(False)):
        assert torch.equal(inside, outside)


def test_a_saved_tensor_unpack_hook_is_cast():
    seen = []

    def unpack(t):
        seen.append(torch.mm(t, t).dtype)
        return t

    x = torch.rand(3, 3, requires_grad=True)
    with auto_cast():
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, unpack):
            y = (x * x).sum()
        y.backward()
    assert seen and set(seen) == {torch.float16}


def test_a_torch_without_the_engines_entry_imports_and_casts_no_hook():
    # A later torch may rename the private entry the hook check looks for: nothing crashes, and
    # the hooks are then treated as kernels (not cast).
    script = textwrap.dedent("""
        import torch
        import torch.autograd.graph

        del torch.autograd.graph._engine_run_backward  # torch.autograd bound it at its import
        from paddle_compat.amp import auto_cast

        seen = []
        v = torch.rand(3, 3, requires_grad=True)
        v.register_hook(lambda g: seen.append(torch.mm(g, g).dtype))
        with auto_cast():
            torch.mm(v, v).sum().backward()
        print(seen)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[torch.float32]"
