"""auto_cast under threads, bad arguments, torch.compile, and with nothing registered at import."""

from __future__ import annotations

import operator
import os
import subprocess
import sys
import threading
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from paddle_compat import amp
from paddle_compat.amp import compile_boundary
from paddle_compat.amp.amp_state import amp_global_state

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


# --- threads ----------------------------------------------------------------------------

# (level, use_promote) -> dtypes of: fp32 matmul, relu of fp16, softmax of the matmul, fp32 add
EXPECTED = {
    ("O1", True): (F16, F16, F32, F32),
    ("OD", True): (F16, F32, F32, F32),
    ("O2", False): (F16, F16, F16, F16),
    ("O2", True): (F16, F16, F16, F32),
}


def test_threads_entering_and_leaving_levels_never_disturb_each_other():
    """Each thread enters and leaves O1, OD, O2 and O2 without promotion in turn while the
    others compute: OD's every-op kernels must never appear or vanish under another thread."""
    errors: list[str] = []
    x, w = torch.randn(8, 8), torch.randn(8, 8)

    def work(offset: int) -> None:
        try:
            configs = list(EXPECTED)
            for step in range(150):
                level, promote = configs[(offset + step) % len(configs)]
                with amp.auto_cast(level=level, use_promote=promote):
                    y = x @ w
                    got = (y.dtype, torch.relu(y.half()).dtype, torch.softmax(y, -1).dtype, (x + x).dtype)
                if got != EXPECTED[level, promote]:
                    errors.append(f"{level}/{promote}: {got}")
                if (x @ w).dtype != F32:
                    errors.append("auto_cast leaked out of its block")
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(repr(error))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        sys.setswitchinterval(interval)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []


def test_amp_dtype_is_per_thread():
    """A bfloat16 auto_cast in one thread leaves another thread's float16 scaler dynamic."""
    seen = {}

    def other() -> None:
        seen["before"] = amp_global_state().amp_dtype
        with amp.auto_cast(dtype="bfloat16"):
            pass
        seen["after"] = amp_global_state().amp_dtype

    with amp.auto_cast(dtype="float16"):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert seen == {"before": "float32", "after": "bfloat16"}
    assert amp_global_state().amp_dtype == "float16"
    scaler = amp.GradScaler(init_loss_scaling=8.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scaled = scaler.scale(torch.tensor(1.0))
    assert float(scaled) == 8.0 and scaler._use_dynamic_loss_scaling


def test_one_context_object_shared_by_threads():
    ctx = amp.auto_cast(level="OD")
    results = []

    def work() -> None:
        for _ in range(50):
            with ctx:
                results.append(torch.relu(torch.ones(2, dtype=F16)).dtype)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for thread in threads:
        thread.start()
    with ctx:
        assert torch.exp(torch.ones(2, dtype=F16)).dtype == F32
    for thread in threads:
        thread.join(timeout=60)
    assert results == [F32] * 150 and not amp.is_autocast_enabled()


# --- arguments --------------------------------------------------------------------------

BAD_ARGUMENTS = [
    (dict(level=None), TypeError, r"^level should be a str \('O0', 'OD', 'O1' or 'O2'\), but got NoneType\.$"),
    (dict(level="O3"), ValueError, r"^level should be O0, OD, O1 or O2\.$"),
    (dict(enable="yes"), TypeError, r"^enable should be a bool, but received str$"),
    (dict(use_promote=None), TypeError, r"^use_promote should be a bool, but received NoneType$"),
    (dict(dtype=None), TypeError,
     r"^dtype should be a str \('float16' or 'bfloat16'\) or a torch\.dtype, but got NoneType\.$"),
    (dict(dtype="float32"), ValueError, r"^If enable amp, dtype should be 'float16' or 'bfloat16'\.$"),
    (dict(custom_white_list="matmul"), TypeError,
     r"^custom_white_list should be a set, list or tuple of op names, "
     r"but got a str \(write \['matmul'\] for one op\)\.$"),
    (dict(custom_black_list=3), TypeError,
     r"^custom_black_list should be a set, list or tuple of op names, but got int\.$"),
    (dict(custom_black_list=["exp", 3]), TypeError,
     r"^custom_black_list should hold op names \(str\), but holds a int\.$"),
    (dict(custom_white_list=["exp"], custom_black_list=("exp",)), ValueError,
     r"^Custom white list overlap custom black list$"),
    (dict(enable=False, custom_white_list=["exp"], custom_black_list=["exp"]), ValueError,
     r"^Custom white list overlap custom black list$"),  # as in Paddle, also when disabled
]


@pytest.mark.parametrize("kwargs,error,message", BAD_ARGUMENTS)
@pytest.mark.parametrize("entry", [amp.auto_cast, amp.amp_guard])
def test_bad_arguments_raise_at_the_call_before_anything_changes(entry, kwargs, error, message):
    before = amp_global_state().amp_dtype
    with pytest.raises(error, match=message):
        entry(**{"dtype": "bfloat16", **kwargs})  # the call itself raises, not the `with`
    assert amp_global_state().amp_dtype == before == "float16"
    assert not amp.is_autocast_enabled()


@pytest.mark.parametrize("kwargs,message", [
    (dict(device_type=0), r"^device_type should be a str or None, but got int\.$"),
    (dict(device_type="cuda", cache_enabled=None), r"^cache_enabled should be a bool, but received NoneType$"),
    (dict(device_type="cuda", enabled="no"), r"^enabled should be a bool, but received str$"),
])
def test_autocast_checks_its_arguments(kwargs, message):
    with pytest.raises(TypeError, match=message):
        amp.autocast(**kwargs)
    assert amp_global_state().amp_dtype == "float16"


def test_bool_like_flags_and_torch_dtypes_are_accepted():
    with amp.auto_cast(enable=1, use_promote=0, level="o2", dtype=torch.bfloat16):
        assert amp.get_autocast_dtype() == "bfloat16"
        assert torch.relu(torch.ones(2)).dtype == BF16  # O2 without promotion
    assert amp_global_state().amp_dtype == "bfloat16"


def test_auto_cast_decorates_functions():
    @amp.auto_cast(dtype="bfloat16")
    def matmul(x):
        return x @ x

    assert matmul(torch.ones(2, 2)).dtype == BF16
    assert not amp.is_autocast_enabled()


def test_a_decorated_function_may_be_called_again_and_recursively():
    @amp.auto_cast(level="OD")
    def depth(n):
        inner = depth(n - 1) if n else []
        return [torch.relu(torch.ones(1, dtype=F16)).dtype, *inner]

    assert depth(2) == depth(1) + [F32] == [F32] * 3
    assert not amp.is_autocast_enabled()


# --- op names ---------------------------------------------------------------------------

# Lists real Paddle code passes (PaddleNLP's trainer and llm configs, PaddleMIX, Paddle's own
# tests): a verbatim port must stay quiet.
PADDLENLP_WHITE = ["lookup_table", "lookup_table_v2", "flash_attn", "flash_attn_v1", "flash_attn_npu", "matmul",
                   "matmul_v2", "fused_gemm_epilogue", "fused_attention", "fused_feedforward", "fused_rms_norm",
                   "fused_rotary_position_embedding", "batch_norm", "sync_batch_norm", "layer_norm"]
PADDLENLP_BLACK = ["reduce_sum", "c_softmax_with_cross_entropy", "softmax_with_cross_entropy", "elementwise_div",
                   "sin", "cos", "c_embedding", "linspace", "fused_multi_transformer"]


def test_paddle_only_op_names_are_accepted_quietly(caplog):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with caplog.at_level("DEBUG", logger="paddle_compat.amp"):
            for level in ("O1", "O2"):
                with amp.auto_cast(custom_white_list=PADDLENLP_WHITE, custom_black_list=PADDLENLP_BLACK, level=level):
                    assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == F16
    logged = [r.getMessage() for r in caplog.records]
    assert all(m.startswith("op '") for m in logged)
    assert len(logged) == len(set(logged))  # at most one line per name


def test_sync_batch_norm_governs_batch_norm():
    bn = nn.BatchNorm1d(4)
    x = torch.randn(3, 4, dtype=F16)
    with amp.auto_cast(level="O2"):
        assert bn(x).dtype == F16  # gray at O2: its fp16 input keeps it fp16
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with amp.auto_cast(level="O2", custom_black_list=["sync_batch_norm"]):
            assert bn(x).dtype == F32


def test_unknown_op_name_warns_at_the_callers_line():
    with pytest.warns(UserWarning, match="op 'matmull_v2' in a custom list is neither") as record:
        amp.auto_cast(custom_white_list=["matmull_v2"])
    assert record[0].filename == __file__
    with pytest.warns(UserWarning, match="op 'softmaxx'") as record:
        amp.amp_guard(custom_black_list=["softmaxx"], level="O2")
    assert record[0].filename == __file__


def test_too_many_configurations_for_compile_guards_warn_at_the_callers_line(monkeypatch):
    import importlib

    from paddle_compat.amp import op_interceptor

    auto_cast_module = importlib.import_module("paddle_compat.amp.auto_cast")  # the attribute is the function

    monkeypatch.setattr(op_interceptor, "_GUARD_DTYPES", (F16, BF16))
    monkeypatch.setattr(op_interceptor, "_guard_dtypes", {})
    auto_cast_module._cached_config.cache_clear()
    try:
        amp.auto_cast(custom_white_list=["acos"])
        amp.auto_cast(custom_white_list=["asin"])
        with pytest.warns(UserWarning, match="more than 2 distinct auto_cast configurations") as record:
            amp.auto_cast(custom_white_list=["atan"])
        assert record[0].filename == __file__
    finally:
        auto_cast_module._cached_config.cache_clear()  # drop the configs holding the test's codes


# --- import -----------------------------------------------------------------------------

_REGISTRATIONS = """
import torch
def state():
    keys = ("AutocastIPU", "AutocastHPU")
    return [(len(torch._C._dispatch_get_registrations_for_dispatch_key(k)),
             torch._C._dispatch_has_backend_fallback(getattr(torch._C.DispatchKey, k))) for k in keys]
seen = [state()]
import paddle_compat.optimizer
seen.append(state())
import paddle_compat
from paddle_compat import amp
seen.append(state())
with amp.auto_cast(level="OD"):
    torch.ones(1) + 1
seen.append(state())
print(seen)
"""


def test_importing_registers_nothing():
    """No import-time side effect on torch's dispatcher (neither importing the optimizers nor
    the whole package); the first auto_cast registers."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", _REGISTRATIONS], env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    before, after_optimizer, after_package, after_use = eval(out)  # noqa: S307 - our own child's output
    assert before == after_optimizer == after_package == [(0, False), (0, False)]
    assert all(count > 0 and fallback for count, fallback in after_use)


# --- torch.compile ----------------------------------------------------------------------

class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.fc1(x)
        return h, torch.softmax(h, -1), self.fc2(self.norm(h)), h.float().mean()


def _run(model, x, backward=True, **kwargs):
    with amp.auto_cast(**kwargs):
        outs = model(x)
    if not backward:
        return outs, []
    outs[2].float().sum().backward()
    grads = [p.grad for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return outs, grads


CONFIGS = {
    # inductor is slow to compile (seconds per graph): O1 forward and backward, then the case
    # that failed before, O2 after O1 on one compiled model (O2 must not reuse O1's graph).
    "inductor": [dict(), dict(level="O2", backward=False)],
    # aot_eager builds the same graphs without code generation: every level, a dtype, a list.
    "aot_eager": [dict(), dict(level="O2"), dict(level="O2", use_promote=False), dict(level="OD"),
                  dict(dtype="bfloat16"), dict(custom_black_list=["linear"]), dict(enable=False), dict()],
}


@pytest.mark.parametrize("backend", CONFIGS)
def test_compiled_model_gives_eager_dtypes_and_values(backend):
    torch.manual_seed(0)
    model, x = _Block(), torch.randn(4, 8)
    compiled = torch.compile(model, backend=backend)
    for kwargs in CONFIGS[backend]:
        (eager, eager_grads), (ours, our_grads) = _run(model, x, **kwargs), _run(compiled, x, **kwargs)
        assert [t.dtype for t in ours] == [t.dtype for t in eager], kwargs
        for a, b in zip([*ours, *our_grads], [*eager, *eager_grads]):
            assert a.dtype == b.dtype
            torch.testing.assert_close(a.float(), b.float(), atol=2e-2, rtol=2e-2)
    with torch.no_grad():
        assert [t.dtype for t in compiled(x)] == [F32] * 4  # outside auto_cast again


def test_auto_cast_inside_a_compiled_function_runs_the_rest_eagerly():
    """What docs/integrations.md says: the dtypes are eager's, only the graph before the block is
    compiled (the model inside is not), and fullgraph=True refuses it."""
    model, graphs = nn.Linear(8, 2), []

    def backend(gm, example_inputs):
        graphs.append([node.target for node in gm.graph.nodes if node.op == "call_function"])
        return gm.forward

    def step(x):
        y = x * 2
        with amp.auto_cast(dtype="float16"):
            out = model(y)
        return out, out.float().sum() + 1

    torch._dynamo.reset()
    out, _ = torch.compile(step, backend=backend)(torch.randn(4, 8))
    assert out.dtype == torch.float16 and graphs == [[operator.mul]]
    torch._dynamo.reset()
    with pytest.raises(torch._dynamo.exc.Unsupported, match="torch.compiler.disable"):
        torch.compile(step, backend=backend, fullgraph=True)(torch.randn(4, 8))


def test_aot_autograd_cache_is_off_while_auto_cast_is_active():
    """Its key cannot tell our configurations apart across processes: a cached graph traced
    under another configuration (or another paddle_compat version) would come back."""
    import torch._functorch._aot_autograd.autograd_cache  # noqa: F401 - its reader loaded: restored on exit
    import torch._functorch.config as functorch_config

    with amp.auto_cast():  # earlier tests may have left it off (while its reader was not loaded)
        pass
    assert functorch_config.enable_autograd_cache is True
    with amp.auto_cast():
        assert functorch_config.enable_autograd_cache is False
        with amp.auto_cast(level="O2"):
            assert functorch_config.enable_autograd_cache is False
        assert functorch_config.enable_autograd_cache is False
    assert functorch_config.enable_autograd_cache is True


def test_aot_autograd_cache_setting_is_not_switched_at_every_step_before_torch_compile(monkeypatch):
    """Switching it costs tens of µs per auto_cast: until a compile has loaded the module that
    reads it (here: while a name that is not loaded stands for it), it stays off between steps,
    though Dynamo is imported (any torch.optim optimizer imports it)."""
    import torch._dynamo  # noqa: F401
    import torch._functorch._aot_autograd.autograd_cache  # noqa: F401
    import torch._functorch.config as functorch_config

    with amp.auto_cast():  # earlier tests may have left it off
        pass
    assert functorch_config.enable_autograd_cache is True
    monkeypatch.setattr(compile_boundary, "_READER", "a module not loaded")
    seen = []
    for _ in range(2):
        with amp.auto_cast():
            pass
        seen.append(functorch_config.enable_autograd_cache)
    monkeypatch.undo()
    with amp.auto_cast():
        pass
    assert seen == [False, False]
    assert functorch_config.enable_autograd_cache is True


def test_aot_autograd_cache_is_off_in_each_thread_with_an_active_auto_cast():
    """torch keeps its config per thread since 2.12: a second thread entering auto_cast while
    another thread's is active must switch its own cache setting off, and each thread gets its
    own setting back."""
    import torch._functorch._aot_autograd.autograd_cache  # noqa: F401 - torch.compile in use
    import torch._functorch.config as functorch_config

    seen: dict[str, bool] = {}
    first_in, second_done = threading.Event(), threading.Event()

    def first() -> None:
        with amp.auto_cast():
            first_in.set()
            second_done.wait(timeout=60)
        seen["first after"] = functorch_config.enable_autograd_cache

    def second() -> None:
        first_in.wait(timeout=60)
        with amp.auto_cast(level="O2"):
            seen["second inside"] = functorch_config.enable_autograd_cache
        seen["second after"] = functorch_config.enable_autograd_cache
        second_done.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert seen == {"second inside": False, "second after": True, "first after": True}


def test_auto_cast_inside_a_compiled_function_runs_eagerly():
    """Dynamo does not trace auto_cast (it breaks the graph there); the block still casts."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8), nn.Softmax(-1)), torch.randn(2, 8)

    def step(x):
        y = x * 2
        with amp.auto_cast(level="O2", use_promote=False):
            z = model(y)
        return z, y + 1

    eager, compiled = step(x), torch.compile(step, backend="aot_eager")(x)
    assert [t.dtype for t in compiled] == [t.dtype for t in eager] == [F16, F32]
    torch.testing.assert_close(compiled[0], eager[0])
    assert not amp.is_autocast_enabled()


def test_linear_bias_is_inside_paddles_linear_op():
    """Paddle's linear_v2 op takes the bias: at O1 the fp32 bias is cast with x and W, so the
    layer's output stays low precision (unlike conv, whose bias is a separate add)."""
    layer = nn.Linear(4, 4)
    with amp.auto_cast():
        out = layer(torch.randn(2, 4))
    assert out.dtype == F16
    x = torch.randn(2, 4)
    with amp.auto_cast():
        out = layer(x)
    expected = F.linear(x.half(), layer.weight.half(), layer.bias.half())
    assert torch.equal(out, expected)


def test_a_taken_dispatch_key_is_reported():
    """Another backend (Gaudi's, here simulated) owning one of our keys: a clear error, and
    nothing registered half-way."""
    script = """
import torch
held = torch.library.Library("_", "IMPL")
held.fallback(torch.library.fallthrough_kernel, "AutocastHPU")
from paddle_compat import amp
for _ in range(2):
    try:
        amp.auto_cast()
    except RuntimeError as error:
        print(error)
print(torch._C._dispatch_has_backend_fallback(torch._C.DispatchKey.AutocastIPU))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.splitlines()
    message = ("paddle_compat.amp: auto_cast needs the dispatch key AutocastHPU, which another library "
               "(a Graphcore or Gaudi backend?) has taken.")
    assert out == [message, message, "False"]
