import pytest

from paddle_compat.amp.amp_state import amp_global_state


@pytest.fixture(autouse=True)
def _fp16_amp_dtype():
    """Each test starts as if ``auto_cast()`` (float16) had been entered, and restores after."""
    state = amp_global_state()
    saved = state.amp_dtype
    state.amp_dtype = "float16"
    yield
    state.amp_dtype = saved
