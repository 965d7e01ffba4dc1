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
