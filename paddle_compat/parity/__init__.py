"""``paddle_compat.parity``: prove that a torch port trains like the Paddle original, step by step.

- state conversion, by module type: :func:`paddle_to_torch`, :func:`torch_to_paddle`; optimizer
  accumulators (:func:`optimizer_state_to_torch`, :func:`optimizer_state_to_paddle`), LR scheduler
  and loss-scaler state; ``.pdparams``/``.pdopt`` files read without Paddle (:mod:`.pdio`);
- traces: :class:`TraceRecorder` records loss, scale, skipped steps, counters, learning rate,
  gradient norm, every parameter, gradient and optimizer accumulator, per step, from a torch run or
  (duck-typed) a Paddle one; saved as ``.json`` + ``.npz`` so CI can check against a golden trace
  without Paddle;
- :func:`diff_layers`: one step of a Paddle layer and its torch port, layer by layer, forward and
  backward, each torch layer fed the Paddle layer's input and output gradient (single-step mode);
  layers aligned by name, layer map or type (:mod:`.align`);
- :func:`compare` (first divergence, bitwise/ulp/abs/rel metrics, torch.testing's tolerances or
  exact), :func:`write_report` (JSON, Markdown, PNG), :func:`assert_same_trajectory`, the command
  line ``python -m paddle_compat.parity``, pytest fixtures in :mod:`.pytest_plugin`, and helpers for
  the Paddle script itself in :mod:`.paddle_side`.

Paddle is never imported here; recording a Paddle run happens in the Paddle script, typically in a
child process (:func:`record_script`).
"""

from . import pdio
from .compare import Comparison, Divergence, TensorMetrics, compare
from .convert import (
    Plan,
    paddle_to_torch,
    register_rule,
    torch_to_paddle,
    unregister_rule,
)
from .layer_diff import LayerDiff, LayerDivergence, diff_layers
from .optimizer_state import (
    lr_scheduler_state_to_paddle,
    lr_scheduler_state_to_torch,
    optimizer_state_to_paddle,
    optimizer_state_to_torch,
    scaler_state_to_paddle,
)
from .record import RecordingError, record_script
from .report import write_report
from .testing import assert_same_trajectory
from .trace import Trace, TraceRecorder, load_trace

__all__ = [
    "Comparison",
    "Divergence",
    "LayerDiff",
    "LayerDivergence",
    "Plan",
    "RecordingError",
    "TensorMetrics",
    "Trace",
    "TraceRecorder",
    "assert_same_trajectory",
    "compare",
    "diff_layers",
    "load_trace",
    "lr_scheduler_state_to_paddle",
    "lr_scheduler_state_to_torch",
    "optimizer_state_to_paddle",
    "optimizer_state_to_torch",
    "paddle_to_torch",
    "pdio",
    "record_script",
    "register_rule",
    "scaler_state_to_paddle",
    "torch_to_paddle",
    "unregister_rule",
    "write_report",
]
