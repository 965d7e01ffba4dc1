"""Paddle's eager auto-cast decision for one op, as a pure function.

Mirrors Paddle's C++ ``GetAmpDestDtype``/``GetPromoteType`` except the final place check:
Paddle forces float32 when no input lives on a GPU (so it does nothing on CPU); we apply the
rule on every device. Paddle's build-dependent "no low-precision kernel" demotion is not modelled.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

# The low-precision dtypes an auto_cast or decorate may use, by Paddle's names.
AMP_DTYPES: dict[str, torch.dtype] = {"float16": torch.float16, "bfloat16": torch.bfloat16}
# Only these dtypes are ever cast; float64, integer, bool and complex inputs are left alone.
CASTABLE: frozenset[torch.dtype] = frozenset({torch.float32, *AMP_DTYPES.values()})


def dest_dtype(
    is_white: bool,
    is_black: bool,
    input_dtypes: Iterable[torch.dtype],
    level: str,
    amp_dtype: torch.dtype,
    use_promote: bool = True,
) -> torch.dtype:
    """The dtype an op computes in under Paddle's rule.

    Args:
        is_white: whether the op is in the white list.
        is_black: whether the op is in the black list.
        input_dtypes: the dtypes of the tensors the rule looks at (only x for norm ops).
        level: ``"OD"``, ``"O1"`` or ``"O2"``.
        amp_dtype: ``torch.float16`` or ``torch.bfloat16``.
        use_promote: only matters at O2, as in Paddle.

    Example::

        >>> import torch
        >>> from paddle_compat.amp.cast_rule import dest_dtype
        >>> dest_dtype(False, False, {torch.float16, torch.float32}, "O1", torch.float16)
        torch.float32
    """
    if level == "O2" and not use_promote:
        return torch.float32 if is_black else amp_dtype
    if is_white:
        return amp_dtype
    if is_black or level == "OD":
        return torch.float32
    # O1, and O2 with promotion: any float32 input promotes the op to float32.
    return torch.float32 if torch.float32 in input_dtypes else amp_dtype
