"""The ``>>>`` examples in the package's docstrings run and print what they show."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    *(f"paddle_compat.amp.{name}" for name in ("amp_lists", "amp_state", "auto_cast", "cast_rule",
                                                 "checkpoint_bridge", "debugging", "decorate", "loss_scale",
                                                 "master_grad", "op_interceptor", "op_table")),
    "paddle_compat.demo",
    "paddle_compat.distributed.fleet.distributed_strategy",
    "paddle_compat.distributed.fleet.recompute",
    "paddle_compat.distributed.fleet.topology",
    "paddle_compat.regularizer",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def _scaler_example_names(tmp_path) -> dict:
    """What the examples of ``amp.grad_scaler`` take as given: a model and its input, a
    ``paddle_compat`` SGD over it, a loss computed under ``auto_cast``, a scaler and its scaled
    loss after backward, a scheduler, a checkpoint and its path; fresh for each docstring."""
    import torch

    from paddle_compat.amp import GradScaler, auto_cast
    from paddle_compat.optimizer import SGD, lr

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    x = torch.randn(3, 4)
    optimizer = SGD(learning_rate=0.1, parameters=model.parameters())
    scaler = GradScaler(init_loss_scaling=1024)
    with auto_cast():
        loss = model(x).mean()
    checkpoint = {"scaler": GradScaler(init_loss_scaling=512).state_dict()}
    path = tmp_path / "checkpoint.pt"
    torch.save(checkpoint, path)
    return {
        "torch": torch, "auto_cast": auto_cast, "model": model, "x": x, "optimizer": optimizer, "scaler": scaler,
        "loss": loss,
        "lr_scheduler": lr.StepDecay(0.1, 2), "checkpoint": checkpoint, "path": path, "step": 9,
    }


def test_grad_scaler_docstring_examples_run(tmp_path):
    import paddle_compat.amp.grad_scaler as module

    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in finder.find(module) if t.examples]
    for test in tests:
        test.globs.update(_scaler_example_names(tmp_path))
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert len(tests) >= 30 and result.failed == 0
