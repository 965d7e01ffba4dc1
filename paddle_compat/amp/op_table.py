"""Which torch (ATen) operations each Paddle op name governs.

Auto-cast decides per ATen operator, so every Paddle name resolves to ATen base names (all
functional overloads of each base name are governed; in-place and ``out=`` overloads never are,
as Paddle exempts in-place APIs). Custom lists may also use ATen base names directly
(``"linear"``, ``"bmm"``, ``"upsample_bilinear2d"``...).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable

import torch

from .._stacklevel import user_stacklevel

DEPTHWISE_CONV2D = "depthwise_conv2d"

# Paddle op name -> ATen base names. The names in Paddle's default lists come first.
PADDLE_TO_ATEN: dict[str, tuple[str, ...]] = {
    # white
    "conv2d": ("conv1d", "conv2d"),  # Paddle's conv1d runs the conv2d op
    "einsum": ("einsum",),
    "matmul": ("matmul", "mm"),
    "matmul_v2": ("matmul", "mm"),
    "linear_v2": ("linear",),
    "max_pool2d_with_index": ("max_pool2d_with_indices",),
    "fused_gemm_epilogue": ("_addmm_activation",),
    "flash_attn": ("scaled_dot_product_attention",),
    # black (O1)
    "tan": ("tan",),
    "acos": ("acos",),
    "asin": ("asin",),
    "sinh": ("sinh",),
    "cosh": ("cosh",),
    "atanh": ("atanh",),
    "erfinv": ("erfinv",),
    "exp": ("exp",),
    "expm1": ("expm1",),
    "log": ("log",),
    "log10": ("log10",),
    "log2": ("log2",),
    "reciprocal": ("reciprocal",),
    "rsqrt": ("rsqrt",),
    "pow": ("pow",),
    "square": ("square", "mse_loss"),  # Paddle's mse_loss is mean(square(x - y))
    "reduce_sum": ("sum",),
    "mean": ("mean",),
    "reduce_mean": ("mean",),
    "reduce_prod": ("prod",),
    "cumprod": ("cumprod",),
    "cumsum": ("cumsum",),
    "dist": ("dist",),
    "pnorm": ("linalg_vector_norm", "norm"),
    "frobenius_norm": ("frobenius_norm",),
    "renorm": ("renorm",),
    "group_norm": ("group_norm",),
    "layer_norm": ("layer_norm",),
    "softmax": ("softmax", "_softmax"),
    "softplus": ("softplus",),
    "log_softmax": ("log_softmax", "_log_softmax"),
    "softmax_with_cross_entropy": ("cross_entropy_loss",),
    "cross_entropy": ("cross_entropy_loss",),
    "cross_entropy2": ("cross_entropy_loss",),
    "sigmoid_cross_entropy_with_logits": ("binary_cross_entropy_with_logits",),
    "nll_loss": ("nll_loss", "nll_loss2d", "nll_loss_nd"),
    "huber_loss": ("huber_loss", "smooth_l1_loss"),  # Paddle's smooth_l1_loss runs huber_loss
    "triplet_margin_loss": ("triplet_margin_loss",),
    # extra black (O1 and O2)
    "linear_interp_v2": ("upsample_linear1d",),
    "nearest_interp_v2": (
        "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
        "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
    ),
    "bilinear_interp_v2": ("upsample_bilinear2d", "_upsample_bilinear2d_aa"),
    "bicubic_interp_v2": ("upsample_bicubic2d", "_upsample_bicubic2d_aa"),
    "trilinear_interp_v2": ("upsample_trilinear3d",),
    "lookup_table": ("embedding",),
    "lookup_table_v2": ("embedding",),
    "scatter": ("index_copy", "index_add", "index_put"),
    # gray ops that torch would not reconcile by type promotion (it raises on mixed dtypes,
    # or its own autocast would cast them): intercepted so Paddle's promote rule applies.
    "bmm": ("bmm",),
    "addmm": ("addmm", "addbmm", "baddbmm"),
    "mv": ("mv", "addmv"),
    "dot": ("dot", "vdot"),
    "conv3d": ("conv3d",),
    # Paddle runs a 2-D convolution whose groups equal its input channels as this op (gray);
    # not a torch op name: the conv kernel looks it up for such convolutions.
    "depthwise_conv2d": (DEPTHWISE_CONV2D,),
    "conv2d_transpose": ("conv_transpose1d", "conv_transpose2d"),
    "conv3d_transpose": ("conv_transpose3d",),
    "prelu": ("prelu",),
    # pools: torch composes some of them from governed ops (max_pool2d from
    # max_pool2d_with_indices, a 1x1 adaptive_avg_pool2d from mean), Paddle's are single ops;
    # Paddle's 1-D pools run as pool2d.
    "pool2d": (
        "max_pool1d", "avg_pool1d", "adaptive_avg_pool1d", "adaptive_max_pool1d",
        "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d",
    ),
    "pool3d": ("max_pool3d", "avg_pool3d", "adaptive_avg_pool3d", "adaptive_max_pool3d"),
    "batch_norm": ("batch_norm",),
    "sync_batch_norm": ("batch_norm",),  # Paddle's SyncBatchNorm is batch_norm for AMP purposes
    "instance_norm": ("instance_norm",),
    "bilinear": ("bilinear",),
    "rnn": ("lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell"),
    # gray elementwise ops, governed only when a custom list names them
    "elementwise_add": ("add",),
    "elementwise_sub": ("sub",),
    "elementwise_mul": ("mul",),
    "elementwise_div": ("div",),
    "relu": ("relu",),
    "gelu": ("gelu",),
    "sigmoid": ("sigmoid",),
    "tanh": ("tanh",),
    "sin": ("sin",),
    "cos": ("cos",),
    "sqrt": ("sqrt",),
    "abs": ("abs",),
}

# Paddle op names with no torch counterpart. Default lists and ported code name them (fused
# kernels, distributed ops...); in a custom list they are accepted and govern nothing, without a
# warning (one debug log line each), so that a verbatim port stays quiet.
_FUSED = "a Paddle fused kernel; torch code runs its parts as separate ops"
_DISTRIBUTED = "a Paddle distributed op; a single-process run never has it"
_ATTENTION = "a Paddle attention kernel; torch code uses scaled_dot_product_attention ('flash_attn')"
NO_TORCH_COUNTERPART: dict[str, str] = {
    "mul": "Paddle's legacy flattening matmul op; torch has no such op",
    "fake_quantize_dequantize_abs_max": "a Paddle quantization op",
    "fake_quantize_dequantize_moving_average_abs_max": "a Paddle quantization op",
    "tanh_shrink": "torch's tanhshrink is composed of sub and tanh, governed one by one",
    "softmin": "torch's softmin runs softmax on the negated input, governed by 'softmax'",
    "log_loss": "torch has no log_loss op (binary_cross_entropy is Paddle's bce_loss)",
    "hsigmoid_loss": "torch has no hierarchical sigmoid loss",
    "swiglu": "torch has no swiglu op; its parts (silu, mul) are governed one by one",
    **dict.fromkeys((
        "fused_rotary_position_embedding", "fused_attention", "fused_feedforward",
        "fused_multi_transformer", "fused_bias_dropout_residual_layer_norm", "fused_rms_norm",
        "fused_layer_norm", "fused_bias_act", "fused_dropout_add", "fused_linear",
        "fused_linear_param_grad_add", "fused_matmul_bias", "fused_softmax_mask",
        "fused_softmax_mask_upper_triangle", "fused_bn_add_activation",
        "fused_embedding_eltwise_layernorm", "fused_fc_elementwise_layernorm", "resnet_unit",
    ), _FUSED),
    **dict.fromkeys((
        "flash_attn_v1", "flash_attn_npu", "flash_attn_unpadded", "flash_attn_qkvpacked",
        "flash_attn_varlen_qkvpacked", "memory_efficient_attention",
        "variable_length_memory_efficient_attention",
    ), _ATTENTION),
    **dict.fromkeys((
        "c_softmax_with_cross_entropy", "c_softmax_with_multi_label_cross_entropy",
        "margin_cross_entropy", "c_embedding", "c_identity", "c_concat",
    ), _DISTRIBUTED),
}

# Gray ops governed at every level (see their entries above).
PROMOTED_GRAY: tuple[str, ...] = (
    "bmm", "addmm", "mv", "dot", "conv3d", "depthwise_conv2d", "conv2d_transpose", "conv3d_transpose",
    "prelu", "pool2d", "pool3d", "batch_norm", "instance_norm", "bilinear", "rnn",
)
PROMOTED_GRAY_ATEN: frozenset[str] = frozenset(a for n in PROMOTED_GRAY for a in PADDLE_TO_ATEN[n])

# Paddle adds a convolution's bias with a separate (gray) add op, after the convolution; the
# value is the number of spatial dims.
CONV_ATEN: dict[str, int] = {
    "conv1d": 1, "conv2d": 2, "conv3d": 3,
    "conv_transpose1d": 1, "conv_transpose2d": 2, "conv_transpose3d": 3,
}

# Norm ops whose float inputs other than x (weight, bias, running stats) Paddle neither
# looks at nor casts.
X_ONLY_ATEN: frozenset[str] = frozenset({"layer_norm", "batch_norm"})


def aten_names(name: str) -> tuple[str, ...]:
    """ATen base names governed by a Paddle op name or an ATen base name (empty: none).

    Args:
        name: a Paddle op name (``"matmul_v2"``) or an ATen base name (``"bmm"``).

    Example::

        >>> from paddle_compat.amp.op_table import aten_names
        >>> aten_names("matmul_v2"), aten_names("bmm"), aten_names("fused_attention")
        (('matmul', 'mm'), ('bmm',), ())
    """
    if name in PADDLE_TO_ATEN:
        return PADDLE_TO_ATEN[name]
    if name in NO_TORCH_COUNTERPART:
        return ()
    return (name,) if _is_aten_op(name) else ()


def resolve(names: Iterable[str]) -> set[str]:
    """ATen base names governed by ``names``.

    Args:
        names: Paddle op names or ATen base names, as given in a custom list.

    A Paddle-only op name (``NO_TORCH_COUNTERPART``) governs nothing, quietly (a debug log
    line, once per name); any other name that governs nothing warns, pointing at the caller.

    Example::

        >>> from paddle_compat.amp.op_table import resolve
        >>> sorted(resolve(["elementwise_add", "sync_batch_norm", "fused_rms_norm"]))
        ['add', 'batch_norm']
    """
    resolved: set[str] = set()
    for name in names:
        governed = aten_names(name)
        if name in NO_TORCH_COUNTERPART:
            if name not in _logged:
                _logged.add(name)
                _log.debug("op '%s' in a custom list governs no torch op (%s)", name, NO_TORCH_COUNTERPART[name])
        elif not governed:
            warnings.warn(
                f"paddle_compat.amp: op '{name}' in a custom list is neither a known Paddle op name "
                "nor a torch op; it has no effect.",
                stacklevel=user_stacklevel(),
            )
        resolved.update(governed)
    return resolved


_log = logging.getLogger("paddle_compat.amp")
_logged: set[str] = set()


def _is_aten_op(name: str) -> bool:
    packet = getattr(torch.ops.aten, name, None)
    return isinstance(packet, torch._ops.OpOverloadPacket) and bool(packet.overloads())
