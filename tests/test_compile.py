"""torch.compile: a compiled training step with our scaler breaks its graph no more often than
with torch.amp.GradScaler, and follows the eager trajectory (scale, skips, parameters).

The "eager" backend keeps these fast: graph breaks are Dynamo's, the same under every backend
(inductor gave the same counts, see docs/integrations.md)."""

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters

from .compiled_step import OPTIMIZERS, graph_breaks, make, training_step

# Dynamo's own imports touch a deprecated torch.jit API; not ours.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")

# Steps 2 and 3 overflow; growth every 2 finite steps: the scale goes up, down, down, up.
BAD_STEPS = (2, 3)
STEPS = 7


def train(optimizer, scaler_kind, compiled):
    """STEPS steps of the same step function; returns the scales, the final parameters and the
    graph breaks by kind."""
    model, opt, scaler = make(optimizer, scaler_kind)
    step = training_step(model, opt, scaler)
    torch._dynamo.reset()
    counters.clear()
    run = torch.compile(step, backend="eager") if compiled else step
    generator = torch.Generator().manual_seed(1)
    scales = []
    for i in range(STEPS):
        x = torch.randn(16, 8, generator=generator)
        if i in BAD_STEPS:
            x[0, 0] = float("inf")  # same shapes and dtypes: no recompilation, a NaN loss
        run(x, torch.zeros(16, 2))
        scales.append(scaler.get_scale())
    params = [p.detach().clone() for p in model.parameters()]
    return scales, params, graph_breaks()


def skipped_steps(scales):
    return [i for i in range(1, len(scales)) if scales[i] < scales[i - 1]]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    yield
    torch._dynamo.reset()
    counters.clear()


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_no_more_graph_breaks_than_torchs_scaler_and_the_eager_trajectory(optimizer):
    torch_scales, torch_params, torch_breaks = train(optimizer, "torch", compiled=True)
    scales, params, breaks = train(optimizer, "ours", compiled=True)
    # No more breaks than torch's, and none of another kind: each call into the scaler is one
    # break, as for torch's scaler; none happens inside our code.
    assert 0 < breaks.total() <= torch_breaks.total(), (breaks, torch_breaks)
    assert breaks <= torch_breaks, (breaks, torch_breaks)

    eager_scales, eager_params, _ = train(optimizer, "ours", compiled=False)
    assert scales == eager_scales == [1024.0, 2048.0, 1024.0, 512.0, 512.0, 1024.0, 1024.0]
    assert skipped_steps(scales) == [2, 3]
    # Paddle's rules and torch's agree on this run, so torch's scaler is a second witness.
    assert torch_scales == scales
    # torch compiles Adam's (non-fused) update differently from its eager kernels, so the
    # parameters are compared with torch's scaler under the same compilation.
    expected = torch_params if optimizer == "adam" else eager_params
    assert all(torch.equal(p, q) for p, q in zip(params, expected))


def test_the_optimizer_step_is_still_compiled_inside_our_step():
    """As under torch's scaler, optimizer.step is compiled though the scaler's own code is not."""
    model, opt, scaler = make("adam", "ours")

    def step(x):
        scaler.scale(model(x).pow(2).mean()).backward()
        scaler.step(opt)
        scaler.update()

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(step, backend="eager")
    for _ in range(2):
        compiled(torch.randn(4, 8))
    assert counters["stats"]["unique_graphs"] == 2  # the forward and Adam's update
    assert not any("paddle_compat" in reason for reason in counters["graph_break"])


def test_a_failed_fused_step_takes_its_inputs_back_and_counts_nothing():
    model, opt, scaler = make("fused_adamw", "ours")
    scaler.scale(model(torch.randn(4, 8)).pow(2).mean()).backward()
    real_step = opt.step

    def failing_step(*args, **kwargs):
        assert opt.grad_scale is not None and opt.found_inf is not None
        raise ValueError("boom")

    opt.step = failing_step
    with pytest.raises(ValueError, match="boom"):
        scaler.step(opt)
    assert not hasattr(opt, "grad_scale") and not hasattr(opt, "found_inf")
    assert scaler.last_step_skipped() is None  # nothing recorded
    opt.step = real_step
    scaler.step(opt)  # not marked as stepped: a retry works
    scaler.update()
    assert scaler.last_step_skipped() is False and scaler.get_skipped_steps() == 0
