"""The examples in the docstrings of paddle_compat.amp's auto_cast, decorate and debugging modules run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["amp_lists", "amp_state", "auto_cast", "cast_rule", "debugging", "decorate", "master_grad",
           "op_interceptor", "op_table"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(f"paddle_compat.amp.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
