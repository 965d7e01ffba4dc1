"""auto_cast: Paddle's per-op precision rule, per level and dtype, on CPU."""

from __future__ import annotations

import platform
import warnings

import pytest
import torch
import torch.nn.functional as F

from paddle_compat import _paddle_cpu, amp
from paddle_compat.amp.amp_state import amp_global_state
from paddle_compat.amp.cast_rule import dest_dtype

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16
DTYPES = {"float16": F16, "bfloat16": BF16}


def _x(dtype=F32, shape=(4, 8)):
    return torch.randn(*shape, dtype=dtype)


# op name -> callable taking (fp32 input, low-precision input) and returning the op's output
OPS = {
    "matmul": lambda x, h: x @ x.T,
    "linear": lambda x, h: F.linear(x, torch.randn(8, 8)),
    "conv2d": lambda x, h: F.conv2d(x.view(1, 1, 4, 8), torch.randn(2, 1, 3, 3)),
    "softmax": lambda x, h: F.softmax(x, -1),
    "exp": lambda x, h: torch.exp(x),
    "log": lambda x, h: torch.log(x.abs() + 1),
    "mean": lambda x, h: x.mean(),
    "sum": lambda x, h: x.sum(-1),
    "layer_norm": lambda x, h: F.layer_norm(x, (8,)),
    "log_softmax": lambda x, h: F.log_softmax(x, -1),
    "cross_entropy": lambda x, h: F.cross_entropy(x, torch.tensor([0, 1, 2, 3])),
    "relu": lambda x, h: torch.relu(x),
    "add_mixed": lambda x, h: x + h,
    "add_low": lambda x, h: h + h,
    "embedding": lambda x, h: F.embedding(torch.tensor([0, 2]), x),
    "interpolate": lambda x, h: F.interpolate(x[None, None], scale_factor=2.0, mode="bilinear"),
}

# expected compute dtype for fp32 inputs ('amp' = the AMP dtype) per level
EXPECTED_FP32_INPUT = {
    #                 O1     O2     O2 no promote  OD    O0
    "matmul":        ("amp", "amp", "amp", "amp", "f32"),
    "linear":        ("amp", "amp", "amp", "amp", "f32"),
    "conv2d":        ("amp", "amp", "amp", "amp", "f32"),
    "softmax":       ("f32", "f32", "amp", "f32", "f32"),
    "exp":           ("f32", "f32", "amp", "f32", "f32"),
    "log":           ("f32", "f32", "amp", "f32", "f32"),
    "mean":          ("f32", "f32", "amp", "f32", "f32"),
    "sum":           ("f32", "f32", "amp", "f32", "f32"),
    "layer_norm":    ("f32", "f32", "amp", "f32", "f32"),
    "log_softmax":   ("f32", "f32", "amp", "f32", "f32"),
    "cross_entropy": ("f32", "f32", "amp", "f32", "f32"),
    "relu":          ("f32", "f32", "amp", "f32", "f32"),
    "add_mixed":     ("f32", "f32", "amp", "f32", "f32"),
    "add_low":       ("amp", "amp", "amp", "f32", "amp"),
    "embedding":     ("f32", "f32", "f32", "f32", "f32"),
    "interpolate":   ("f32", "f32", "f32", "f32", "f32"),
}
LEVELS = [("O1", True), ("O2", True), ("O2", False), ("OD", True), ("O0", True)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("level_index", range(5), ids=["O1", "O2", "O2-nopromote", "OD", "O0"])
@pytest.mark.parametrize("op", OPS)
def test_fp32_inputs(op, level_index, dtype):
    level, use_promote = LEVELS[level_index]
    with amp.auto_cast(level=level, dtype=dtype, use_promote=use_promote):
        out = OPS[op](_x(), _x(DTYPES[dtype]))
    expected = EXPECTED_FP32_INPUT[op][level_index]
    assert out.dtype == (DTYPES[dtype] if expected == "amp" else F32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["softmax", "exp", "mean", "layer_norm", "cross_entropy", "log_softmax"])
def test_o2_black_list_is_only_the_extra_list(op, dtype):
    """At O2 the FP16 black list is gray: low-precision inputs stay low precision."""
    low = DTYPES[dtype]
    with amp.auto_cast(level="O2", dtype=dtype):
        assert OPS[op](_x(low), _x(low)).dtype == low
    with amp.auto_cast(level="O1", dtype=dtype):
        assert OPS[op](_x(low), _x(low)).dtype == F32


def test_dest_dtype_rule():
    args = dict(amp_dtype=F16)
    assert dest_dtype(True, False, {F32}, "O1", **args) == F16
    assert dest_dtype(False, True, {F16}, "O1", **args) == F32
    assert dest_dtype(False, False, {F16, F32}, "O1", **args) == F32
    assert dest_dtype(False, False, {F16, BF16}, "O1", **args) == F16
    assert dest_dtype(False, False, {F16}, "OD", **args) == F32
    assert dest_dtype(False, False, {F32}, "O2", use_promote=False, **args) == F16
    assert dest_dtype(True, True, {F32}, "O2", use_promote=False, **args) == F32


def test_grads_come_back_in_each_inputs_dtype():
    x = _x().requires_grad_()
    w = torch.randn(8, 8, dtype=F16, requires_grad=True)
    with amp.auto_cast():
        y = F.linear(x, w)
        loss = F.softmax(y, -1).sum()
    assert y.dtype == F16 and loss.dtype == F32
    loss.backward()
    assert x.grad.dtype == F32 and w.grad.dtype == F16


def test_norm_layers_cast_only_x():
    ln = torch.nn.LayerNorm(8)  # fp32 weight and bias, as after an fp16 O2 decorate
    with amp.auto_cast(level="O2"):
        out = ln(_x(F16))
    assert out.dtype == F16 and ln.weight.dtype == F32


def test_non_float_and_float64_inputs_are_never_cast():
    with amp.auto_cast(level="OD"):
        assert torch.exp(_x(torch.float64)).dtype == torch.float64
        assert torch.tensor([1, 2]).sum().dtype == torch.int64
    with amp.auto_cast():
        assert (_x(torch.float64) @ _x(torch.float64).T).dtype == torch.float64


def test_inplace_ops_are_not_cast():
    x = _x(F16)
    with amp.auto_cast():
        x.exp_()
        y = _x(F16)
        y.add_(_x())
    assert x.dtype == F16 and y.dtype == F16


def test_composite_torch_functions_are_seen_op_by_op():
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    q = _x(shape=(1, 4, 8))
    with amp.auto_cast():
        out, _ = mha(q, q, q)
        normalized = F.normalize(_x(F16))  # the norm is black (pnorm), so the result promotes
    assert out.dtype == F16
    assert normalized.dtype == F32


def test_conv_bias_is_a_separate_gray_add():
    """Paddle's conv2d op has no bias: an fp32 bias promotes the layer's output at O1."""
    x = _x(shape=(2, 4, 8, 8))
    conv, no_bias = torch.nn.Conv2d(4, 8, 3), torch.nn.Conv2d(4, 8, 3, bias=False)
    conv1d = torch.nn.Conv1d(4, 8, 3)
    with amp.auto_cast():
        out = conv(x)
        assert no_bias(x).dtype == F16 and conv1d(x[:, :, 0]).dtype == F32
        assert conv(x[0]).dtype == F32  # unbatched input
    expected = F.conv2d(x.half(), conv.weight.half()).float() + conv.bias[None, :, None, None]
    assert out.dtype == F32 and torch.equal(out, expected)
    with amp.auto_cast(custom_white_list=["elementwise_add"]):
        assert conv(x).dtype == F16


def test_depthwise_conv2d_is_gray():
    x = _x(shape=(2, 4, 8, 8))
    depthwise = torch.nn.Conv2d(4, 8, 3, groups=4, bias=False)
    with amp.auto_cast():
        assert depthwise(x).dtype == F32
        assert depthwise(x.half()).dtype == F32  # the fp32 weight promotes it
        assert depthwise.half()(x.half()).dtype == F16
    depthwise.float()
    with amp.auto_cast(custom_white_list=["depthwise_conv2d"]):
        assert depthwise(x).dtype == F16


def test_pools_are_single_gray_ops():
    x = _x(shape=(2, 4, 8, 8)).requires_grad_()
    with amp.auto_cast():
        assert F.max_pool2d(x, 2).dtype == F32  # torch builds it from max_pool2d_with_indices (white)
        assert F.adaptive_avg_pool2d(x.half(), 1).dtype == F16  # torch builds it from mean (black)
        assert F.max_pool2d(x, 2, return_indices=True)[0].dtype == F16  # Paddle's max_pool2d_with_index


def test_mse_loss_follows_paddles_square_and_mean():
    a, b = _x(F16), _x(F16)
    with amp.auto_cast():
        assert F.mse_loss(a, b).dtype == F32
    with amp.auto_cast(level="O2"):
        assert F.mse_loss(a, b).dtype == F16


def test_custom_lists_take_paddle_and_torch_names():
    a, b = _x(), _x()
    with amp.auto_cast(custom_white_list={"elementwise_add"}):
        assert (a + b).dtype == F16
    with amp.auto_cast(custom_white_list={"elementwise_add"}, level="O2"):
        assert (a + b).dtype == F16
    with amp.auto_cast(custom_black_list={"conv2d"}):
        assert OPS["conv2d"](a, None).dtype == F32
    with amp.auto_cast(custom_black_list=["matmul_v2"]):
        assert (a @ b.T).dtype == F32
    with amp.auto_cast(custom_black_list=("linear",)):
        assert OPS["linear"](a, None).dtype == F32
    with amp.auto_cast(custom_white_list=["softmax"]):
        assert F.softmax(a, -1).dtype == F16


def test_custom_list_overlap_raises_like_paddle():
    with pytest.raises(ValueError, match="^Custom white list overlap custom black list$"):
        with amp.auto_cast(custom_white_list={"exp"}, custom_black_list=["exp", "log"]):
            pass


@pytest.mark.parametrize("name", ["custom_white_list", "custom_black_list"])
def test_a_custom_list_of_lists_names_the_argument(name):
    with pytest.raises(TypeError, match=f"^{name} should hold op names \\(str\\), but holds a list\\.$"):
        with amp.auto_cast(**{name: [["matmul"]]}):
            pass


def test_unmapped_custom_names():
    """A name neither Paddle nor torch knows warns; a Paddle-only op name is accepted quietly."""
    with pytest.warns(UserWarning, match="op 'no_such_op_anywhere' in a custom list is neither"):
        with amp.auto_cast(custom_white_list=["no_such_op_anywhere"]):
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with amp.auto_cast(custom_white_list=["fused_attention"]):
            assert (_x() @ _x().T).dtype == F16


def test_nesting_queries_and_restore():
    assert not amp.is_autocast_enabled() and amp.get_autocast_dtype() == "float16"
    with amp.auto_cast(dtype="bfloat16"):
        assert amp.is_autocast_enabled() and amp.get_autocast_dtype() == "bfloat16"
        with amp.auto_cast(level="OD", dtype="float16"):
            assert amp.get_autocast_gpu_dtype() == "float16"
            assert torch.relu(_x(F16)).dtype == F32
            with amp.auto_cast(enable=False):
                assert not amp.is_autocast_enabled()
                assert (_x() @ _x().T).dtype == F32
            assert torch.relu(_x(F16)).dtype == F32
        assert amp.get_autocast_cpu_dtype() == "bfloat16"
        assert (_x() @ _x().T).dtype == BF16
        assert torch.relu(_x(F16)).dtype == F16
    assert not amp.is_autocast_enabled()
    assert (_x() @ _x().T).dtype == F32


def test_restores_on_exception():
    with pytest.raises(RuntimeError, match="boom"):
        with amp.auto_cast(level="OD"):
            raise RuntimeError("boom")
    assert not amp.is_autocast_enabled()
    assert torch.exp(_x(F16)).dtype == F16


def test_plain_torch_autocast_is_untouched():
    with amp.auto_cast():
        pass
    with torch.autocast("cpu", dtype=BF16):
        assert (_x() @ _x().T).dtype == BF16


def test_records_amp_dtype_and_never_restores_it():
    with amp.auto_cast(dtype="bfloat16"):
        pass
    assert amp_global_state().amp_dtype == "bfloat16"
    with amp.auto_cast(enable=False, dtype="float16"):
        pass
    assert amp_global_state().amp_dtype == "float16"
    with pytest.raises(ValueError):
        with amp.auto_cast(level="O3", dtype="bfloat16"):
            pass
    assert amp_global_state().amp_dtype == "float16"


def test_autocast_alias():
    with amp.autocast("cuda", dtype="bfloat16", cache_enabled=False):
        assert amp.get_autocast_dtype() == "bfloat16"
    with amp.autocast(None, enabled=False):
        assert not amp.is_autocast_enabled()


def test_lowercase_level_and_dtype_accepted():
    with amp.auto_cast(level="o1", dtype="BFLOAT16"):
        assert amp.get_autocast_dtype() == "bfloat16"


def test_bad_level_and_dtype():
    with pytest.raises(ValueError, match=r"^level should be O0, OD, O1 or O2\.$"):
        with amp.auto_cast(level="O3"):
            pass
    with pytest.raises(ValueError, match="dtype should be 'float16' or 'bfloat16'"):
        with amp.auto_cast(dtype="float32"):
            pass
    with amp.auto_cast(enable=False, dtype="float32"):  # Paddle raises KeyError here
        assert not amp.is_autocast_enabled()


def test_is_supported_on_cpu():
    if torch.cuda.is_available():
        pytest.skip("answers for a CUDA device")
    assert amp.is_float16_supported() is False and amp.is_float16_supported("cpu") is False
    # Paddle asks the CPU for AVX-512 F, BW, VL and DQ (tests/parity checks it against Paddle on this host)
    flags = _paddle_cpu._cpu_flags() or set()
    expected = platform.machine() == "x86_64" and {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags
    assert amp.is_bfloat16_supported() is expected and amp.is_bfloat16_supported("cpu") is expected


def test_bfloat16_support_on_cpu_follows_avx512(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    for flags, expected in [({"avx2", "fma"}, False), ({"avx512f", "avx512bw", "avx512vl"}, False),
                            ({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx2"}, True), (None, False)]:
        monkeypatch.setattr(_paddle_cpu, "_cpu_flags", lambda flags=flags: flags)
        _paddle_cpu.bfloat16_supported.cache_clear()
        assert amp.is_bfloat16_supported("cpu") is expected, flags
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    _paddle_cpu.bfloat16_supported.cache_clear()
    assert amp.is_bfloat16_supported("cpu") is False
    monkeypatch.undo()
    _paddle_cpu.bfloat16_supported.cache_clear()


def test_white_and_black_list_shapes():
    assert amp.white_list()["float16"]["O1"] >= {"matmul_v2", "conv2d"}
    assert "softmax" in amp.black_list()["bfloat16"]["O1"]
    assert amp.black_list()["float16"]["O2"] == amp.black_list()["float16"]["O1"] - {
        n
        for n in amp.black_list()["float16"]["O1"]
        if "interp" not in n and n not in {"lookup_table", "lookup_table_v2", "scatter"}
    }
    assert amp.black_list()["float16"]["OD"] == set()


def test_no_warnings_by_default():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with amp.auto_cast(level="O2", dtype="bfloat16"):
            F.linear(_x(), torch.randn(8, 8))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_rules():
    x = _x().cuda()
    with amp.auto_cast():
        assert (x @ x.T).dtype == F16
        assert torch.softmax(x.half(), -1).dtype == F32
        assert x.half().mean().dtype == F32


def test_other_threads_are_not_affected():
    import threading

    seen = {}

    def worker():
        seen["enabled"] = amp.is_autocast_enabled()
        seen["dtype"] = (_x() @ _x().T).dtype

    with amp.auto_cast(level="OD"):
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        assert (_x() @ _x().T).dtype == F16
    assert seen == {"enabled": False, "dtype": F32}


def test_od_leaves_views_and_casts_alone():
    x = _x(F16)
    with amp.auto_cast(level="OD"):
        view = x.view(-1)
        assert view.dtype == F16 and view.data_ptr() == x.data_ptr()
        assert x.float().dtype == F32 and x.to(BF16).dtype == BF16
        assert torch.tanh(x).dtype == F32


def test_any_torch_op_name_can_be_listed():
    with amp.auto_cast(custom_white_list=["sin"]):
        assert torch.sin(_x()).dtype == F16
    with amp.auto_cast():
        assert torch.sin(_x()).dtype == F32
