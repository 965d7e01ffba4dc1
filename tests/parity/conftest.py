"""Shared set-up for the parity suite: Paddle on CPU, and float16 as the recorded AMP dtype.

``auto_cast`` records its dtype on entry and never restores it, in Paddle and in paddle_compat,
so every test starts from the same recorded dtype on both sides: ``float16``, the one for which
dynamic loss scaling stays on. Tests of the dtype policy set another one themselves.
"""

from __future__ import annotations

import paddle
import pytest

from paddle_compat.amp import auto_cast

from .paddle_oracle import set_paddle_amp_dtype

paddle.set_device("cpu")


def pytest_configure(config):
    # Noise from Paddle itself: its scaler tests a 1-element array for truth (numpy deprecation),
    # and its import looks for ccache.
    config.addinivalue_line("filterwarnings", "ignore:Conversion of an array with ndim > 0:DeprecationWarning")
    config.addinivalue_line("filterwarnings", "ignore:No ccache found:UserWarning")


@pytest.fixture(autouse=True)
def _amp_dtype_float16():
    with auto_cast():  # records "float16" on our side
        pass
    set_paddle_amp_dtype("float16")
    yield
