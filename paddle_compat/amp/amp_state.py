"""The AMP state ``auto_cast`` records, the counterpart of Paddle's ``amp_global_state()``.

The GradScaler reads ``amp_dtype``, the dtype of the last ``auto_cast`` entered in this thread;
``auto_cast`` writes it. As in Paddle it starts as ``"float32"`` and is not restored on exit.

Difference from Paddle: the state is per thread (Paddle's is one per process), so a bfloat16
``auto_cast`` in one thread does not switch off dynamic loss scaling for a float16 scaler in
another. A thread that never entered an ``auto_cast`` sees ``"float32"``.
"""

from __future__ import annotations

import threading


class AmpGlobalState(threading.local):
    """Per-thread AMP state; ``amp_dtype`` is ``"float32"``, ``"float16"`` or ``"bfloat16"``."""

    amp_dtype: str = "float32"  # class default: what a thread sees until it sets its own


_STATE = AmpGlobalState()


def amp_global_state() -> AmpGlobalState:
    """The calling thread's AMP state (one object, with per-thread attribute values).

    Example::

        >>> from paddle_compat import amp
        >>> from paddle_compat.amp.amp_state import amp_global_state
        >>> with amp.auto_cast(dtype="bfloat16"):
        ...     pass
        >>> amp_global_state().amp_dtype
        'bfloat16'
    """
    return _STATE
