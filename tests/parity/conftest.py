"""Shared set-up for the parity suite: Paddle on CPU, one torch thread, float16 as the recorded AMP dtype.

``auto_cast`` records its dtype on entry and never restores it, in Paddle and in paddle_compat,
so every test starts from the same recorded dtype on both sides: ``float16``, the one for which
dynamic loss scaling stays on (``tests/conftest.py`` sets ours). Tests of the dtype policy set
another one themselves.

Without Paddle installed every module here is reported skipped, unimported (they import Paddle).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

PADDLE = importlib.util.find_spec("paddle") is not None

if PADDLE:
    import paddle

    from .paddle_oracle import set_paddle_amp_dtype

    paddle.set_device("cpu")


class _NeedsPaddle(pytest.Module):
    def collect(self):
        reason = "needs paddlepaddle, the test oracle (pip install -e '.[test]')"
        raise pytest.skip.Exception(reason, allow_module_level=True)


def pytest_pycollect_makemodule(module_path, parent):
    if not PADDLE:
        return _NeedsPaddle.from_parent(parent, path=module_path)
    return None


def pytest_configure(config):
    # Noise from Paddle itself: its scaler tests a 1-element array for truth (numpy deprecation),
    # and its import looks for ccache.
    config.addinivalue_line("filterwarnings", "ignore:Conversion of an array with ndim > 0:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:No ccache found:UserWarning")


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """The tensors here are tiny: torch's worker threads only add contention on a busy machine."""
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)


@pytest.fixture(autouse=True)
def _paddle_amp_dtype_float16():
    set_paddle_amp_dtype("float16")
