"""Paddle 3.x's default auto-cast op lists, by Paddle op name, and the custom-list merge.

The contents match ``paddle.amp.amp_lists`` of Paddle 3.3.1 (a parity test compares them).
"""

from __future__ import annotations

from collections.abc import Iterable

# Numerically safe, performance-critical ops: always computed in the AMP dtype.
WHITE_LIST: frozenset[str] = frozenset(
    {
        "conv2d",
        "einsum",
        "matmul",
        "matmul_v2",
        "linear_v2",
        "max_pool2d_with_index",
        "mul",
        "fused_gemm_epilogue",
        "fused_rotary_position_embedding",
        "flash_attn",
    }
)

# White for float16 only (Paddle has no bfloat16 kernels for them).
ONLY_FP16_WHITE_LIST: frozenset[str] = frozenset(
    {
        "fake_quantize_dequantize_abs_max",
        "fake_quantize_dequantize_moving_average_abs_max",
        "fused_attention",
        "fused_feedforward",
    }
)

FP16_WHITE_LIST: frozenset[str] = WHITE_LIST | ONLY_FP16_WHITE_LIST
BF16_WHITE_LIST: frozenset[str] = WHITE_LIST

# Numerically dangerous ops: computed in float32 at level O1.
FP16_BLACK_LIST: frozenset[str] = frozenset(
    {
        "tan", "acos", "asin", "sinh", "cosh", "atanh", "tanh_shrink", "erfinv",
        "exp", "expm1", "log", "log10", "log2", "reciprocal", "rsqrt", "pow", "square",
        "reduce_sum", "mean", "reduce_mean", "reduce_prod", "cumprod", "cumsum",
        "dist", "pnorm", "frobenius_norm", "renorm", "group_norm", "layer_norm",
        "softmax", "softmin", "softplus", "log_softmax",
        "softmax_with_cross_entropy", "sigmoid_cross_entropy_with_logits",
        "c_softmax_with_cross_entropy", "c_softmax_with_multi_label_cross_entropy",
        "cross_entropy", "cross_entropy2", "nll_loss", "huber_loss", "triplet_margin_loss",
        "log_loss", "hsigmoid_loss", "margin_cross_entropy",
    }
)
BF16_BLACK_LIST: frozenset[str] = FP16_BLACK_LIST

# Ops whose low-precision backward is slower than float32: float32 at O1 and O2.
EXTRA_BLACK_LIST: frozenset[str] = frozenset(
    {
        "linear_interp_v2",
        "nearest_interp_v2",
        "bilinear_interp_v2",
        "bicubic_interp_v2",
        "trilinear_interp_v2",
        "lookup_table",
        "lookup_table_v2",
        "scatter",
    }
)

LEVELS = ("O0", "OD", "O1", "O2")


def white_list() -> dict[str, dict[str, set[str]]]:
    """Default white lists by dtype and level, shaped like ``paddle.amp.white_list()``.

    Example::

        >>> from paddle_compat import amp
        >>> "matmul_v2" in amp.white_list()["float16"]["O1"]
        True
    """
    return {
        "float16": {level: set(FP16_WHITE_LIST) for level in ("OD", "O1", "O2")},
        "bfloat16": {level: set(BF16_WHITE_LIST) for level in ("OD", "O1", "O2")},
    }


def black_list() -> dict[str, dict[str, set[str]]]:
    """Default black lists by dtype and level, shaped like ``paddle.amp.black_list()``.

    OD has none (every non-white op runs in float32 anyway); O2 keeps only the extra list.

    Example::

        >>> from paddle_compat import amp
        >>> "softmax" in amp.black_list()["bfloat16"]["O1"], "softmax" in amp.black_list()["bfloat16"]["O2"]
        (True, False)
    """
    return {
        dtype: {"OD": set(), "O1": set(black | EXTRA_BLACK_LIST), "O2": set(EXTRA_BLACK_LIST)}
        for dtype, black in (("float16", FP16_BLACK_LIST), ("bfloat16", BF16_BLACK_LIST))
    }


def effective_lists(
    custom_white_list: Iterable[str] | None,
    custom_black_list: Iterable[str] | None,
    level: str,
    dtype: str,
) -> tuple[set[str], set[str]]:
    """The (white, black) name sets an ``auto_cast`` uses, after Paddle's custom-list merge.

    Args:
        custom_white_list: Paddle op names to add to the white list (None: none).
        custom_black_list: Paddle op names to add to the black list (None: none).
        level: ``"O0"``, ``"OD"``, ``"O1"`` or ``"O2"``.
        dtype: ``"float16"`` or ``"bfloat16"``.

    A custom white name leaves the black list and joins the white list; a custom black name
    does the opposite. Names given in both raise ``ValueError`` as in Paddle. O0 has no lists.

    Example::

        >>> from paddle_compat.amp.amp_lists import effective_lists
        >>> white, black = effective_lists(["softmax"], ["matmul_v2"], "O1", "float16")
        >>> "softmax" in white, "matmul_v2" in black
        (True, True)
    """
    if level == "O0":
        return set(), set()
    white = set(white_list()[dtype][level])
    black = set(black_list()[dtype][level])
    custom_white = set(custom_white_list or ())
    custom_black = set(custom_black_list or ())
    check_disjoint(custom_white, custom_black)
    black -= custom_white
    white |= custom_white
    white -= custom_black
    black |= custom_black
    return white, black


def check_disjoint(custom_white: set[str] | frozenset[str], custom_black: set[str] | frozenset[str]) -> None:
    """Raise Paddle's ``ValueError`` when a name is in both custom lists.

    Args:
        custom_white: the custom white list's names.
        custom_black: the custom black list's names.
    """
    if custom_white & custom_black:
        raise ValueError("Custom white list overlap custom black list")
