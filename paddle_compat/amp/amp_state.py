"""Process-wide AMP state, the counterpart of Paddle's ``amp_global_state()``.

The GradScaler reads ``amp_dtype`` (the dtype of the last ``auto_cast`` entered); ``auto_cast``
writes it. Like Paddle, it starts as ``"float32"`` and is never restored on exit.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AmpGlobalState:
    amp_dtype: str = "float32"


_STATE = AmpGlobalState()


def amp_global_state() -> AmpGlobalState:
    return _STATE
