"""The fast update paths give the same bits as the torch forms they replace.

- CPU: the compiled C kernels (``paddle_compat._native``) against the in-place torch form
  (``_cpu_update`` and friends, taken with ``PADDLE_COMPAT_NATIVE=0``) and the plain expressions
  (``_plain_update``, taken when layouts differ, forced here), for every optimizer, dtype mix and
  option (their loading and checks: ``test_native.py``).
- GPU formulas: the Triton multi-tensor kernels, run on CPU tensors in Triton's interpreter,
  against the per-tensor GPU formulas (``_devices.gpu_kernels`` forced on, as in
  ``test_optimizer_gpu_formulas.py``).
- The GradScaler hand-over (``grad_scale``/``found_inf``) on every path.
Where both results are NaN the payloads are not compared (they depend on operand order, which
compilers may swap); every other value must have the same bits.
"""

from __future__ import annotations

import copy
import logging
import math

import pytest
import torch

import paddle_compat.nn as pnn
import paddle_compat.optimizer as popt
from paddle_compat import _devices, _native, _numerics
from paddle_compat.nn.clip import _eigen_sum, squared_l2_norms
from paddle_compat.optimizer import _cases, _eigen, _multi_tensor, lamb
from paddle_compat.optimizer.optimizer import Optimizer

from .optim_db import CLASSES, FAMILY, OPTIM_DB, case, cases, ids, new

# bf16/fp16 parameters without master weights are part of the matrix (Paddle's warning is expected)
pytestmark = pytest.mark.filterwarnings("ignore:Accumulating with FP16/BF16:UserWarning")

needs_compiler = pytest.mark.skipif(
    _native.kernels() is None, reason="the compiled kernels are off (not built: pip install -e . builds them)"
)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bits, wherever each lives (Adam's beta powers stay on the GPU with the
    multi-tensor kernels and on the host per tensor, as Paddle's)."""
    a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    nan_a, nan_b = torch.isnan(a.float()), torch.isnan(b.float())
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(nan_a, nan_b) and torch.equal(a.view(ints)[~nan_a], b.view(ints)[~nan_b])


def train(make, dtype, grad_dtype, main_grad, sizes, steps=3, nonfinite=False, device="cpu"):
    """Steps with fixed random gradients (drawn on the CPU, moved to ``device``); returns the
    parameters and the optimizer."""
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen).to(dtype).to(device)) for n in sizes]
    opt = make(params)
    for step in range(steps):
        for p in params:
            g = torch.randn(p.shape, generator=gen) * 0.1
            if nonfinite and step == 1:
                g[::7] = float("inf")
                g[3::11] = float("nan")
            g = g.to(grad_dtype).to(device)
            if main_grad:
                p.main_grad = g
            else:
                p.grad = g
        opt.step()
    return params, opt


def assert_same_run(a, b) -> None:
    (pa, oa), (pb, ob) = a, b
    for x, y in zip(pa, pb):
        assert same_bits(x, y)
        assert oa.state[x].keys() == ob.state[y].keys()
        for key, value in oa.state[x].items():
            if isinstance(value, torch.Tensor):
                assert same_bits(value, ob.state[y][key]), key


def maker(desc: str):
    """The table's configuration ``desc`` as ``make(params, multi_precision)`` (master weights
    switched on as ``decorate`` does for an optimizer whose constructor has no ``multi_precision``)."""
    info, inp = next((info, inp) for info in OPTIM_DB for inp in info.inputs if inp.desc == desc)
    if info.takes_multi_precision:
        return lambda ps, mp: inp.make(ps, multi_precision=mp)

    def make(ps, mp):
        opt = inp.make(ps)
        opt._multi_precision = mp
        return opt

    return make


# (parameter dtype, gradient dtype, multi_precision, gradient in main_grad)
DTYPES = {
    "fp32": (torch.float32, torch.float32, False, False),
    "fp64": (torch.float64, torch.float64, False, False),
    "bf16_master": (torch.bfloat16, torch.bfloat16, True, False),
    "fp16_master_fp32_main_grad": (torch.float16, torch.float32, True, True),
    "bf16": (torch.bfloat16, torch.bfloat16, False, False),
    "fp16_fp32_main_grad": (torch.float16, torch.float32, False, True),
}

SIZES = (300, 7, 1001)


def use_native(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    """What ``PADDLE_COMPAT_NATIVE`` (``1``/``0``) does, read once per process, switched for a test."""
    monkeypatch.setattr(_native, "_enabled", on)


def keep_hardware_rsqrt(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch forms' Eigen square root keeps the CPU's rsqrt (from the compiled kernels) while
    the kernels themselves are switched off: the forms then compute the same roots."""
    rsqrt = _eigen._hardware_rsqrt()
    monkeypatch.setattr(_eigen, "_hardware_rsqrt", lambda: rsqrt)


def forms(monkeypatch: pytest.MonkeyPatch, make, dtypes, sizes=SIZES, **kwargs):
    """The same run through the compiled kernels, the in-place torch form and the plain one."""
    dtype, grad_dtype, mp, main_grad = dtypes
    use_native(monkeypatch, True)
    compiled = train(lambda ps: make(ps, mp), dtype, grad_dtype, main_grad, sizes, **kwargs)
    keep_hardware_rsqrt(monkeypatch)
    use_native(monkeypatch, False)
    in_place = train(lambda ps: make(ps, mp), dtype, grad_dtype, main_grad, sizes, **kwargs)
    monkeypatch.setattr(Optimizer, "_same_layout", staticmethod(lambda *tensors: False))
    plain = train(lambda ps: make(ps, mp), dtype, grad_dtype, main_grad, sizes, **kwargs)
    monkeypatch.undo()
    return compiled, in_place, plain


# Adam/AdamW have a CPU form per Paddle CPU profile: its AVX-512 kernel (FMAs) and its reference kernel
FORMS = [(inp.desc, "avx512f") for _, inp in cases("forms")]
FORMS += [(inp.desc, "avx2") for info, inp in cases("forms") if info.cpu_profiles]


@needs_compiler
@pytest.mark.parametrize("dtypes", DTYPES.values(), ids=DTYPES.keys())
@pytest.mark.parametrize(("name", "profile"), FORMS, ids=[f"{n}-{p}" for n, p in FORMS])
def test_compiled_in_place_and_plain_forms_agree(name, dtypes, profile, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PADDLE_COMPAT_PADDLE_CPU", profile)
    compiled, in_place, plain = forms(monkeypatch, maker(name), dtypes, steps=case(name).options.get("steps", 3))
    assert_same_run(compiled, in_place)
    assert_same_run(compiled, plain)


@needs_compiler
@pytest.mark.parametrize("name", ids(cases("nonfinite")))
def test_forms_agree_on_inf_and_nan_gradients(name, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled, in_place, plain = forms(
        monkeypatch, maker(name), DTYPES["fp32"], nonfinite=True, steps=case(name).options.get("steps", 3)
    )
    assert_same_run(compiled, in_place)
    assert_same_run(compiled, plain)


@needs_compiler
@pytest.mark.parametrize(("name", "sizes"), [("sgd", (2_000_003, 100_000)), ("momentum", (1_000_003, 50_001)),
                                             ("adamw", (300_001, 70_000)), ("rmsprop", (13, 300_001, 70_003)),
                                             ("nadam", (13, 300_001, 70_003)), ("lamb", (13, 300_001, 70_003))])
def test_threaded_kernels_give_the_same_bits(name, sizes) -> None:
    """Large enough for the kernels to split the work across threads, inside and across tensors
    (one thread gives the torch forms' bits: the tests above). The threads' shares of RMSProp's and
    NAdam's tensors start inside Eigen's 8-lane packets."""
    saved = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        threaded = train(lambda ps: maker(name)(ps, False), torch.float32, torch.float32, False, sizes, steps=2)
        torch.set_num_threads(1)
        single = train(lambda ps: maker(name)(ps, False), torch.float32, torch.float32, False, sizes, steps=2)
    finally:
        torch.set_num_threads(saved)
    assert_same_run(threaded, single)


@needs_compiler
@pytest.mark.parametrize("dtypes", ["fp32", "fp64", "bf16_master"])
def test_lamb_in_several_groups_gives_the_same_bits(dtypes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lamb's kernel takes the tensors in groups that fit its buffer (two groups here)."""
    monkeypatch.setattr(lamb, "_GROUP", 500)
    compiled, in_place, plain = forms(monkeypatch, maker("lamb"), DTYPES[dtypes])
    assert_same_run(compiled, in_place)
    assert_same_run(compiled, plain)


def spy(monkeypatch: pytest.MonkeyPatch, owner: object, names: list[str]) -> list[str]:
    calls: list[str] = []
    for name in names:
        original = getattr(owner, name)

        def wrapper(*args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapper)
    return calls


@needs_compiler
def test_the_compiled_kernels_are_used_unless_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = spy(monkeypatch, _native.Kernels, ["sgd", "momentum", "adam", "sumsq"])
    params = [torch.nn.Parameter(torch.randn(10)) for _ in range(3)]
    for p in params:
        p.grad = torch.randn(10)
    for cls in (popt.SGD, popt.Momentum, popt.Adam):
        cls(0.1, parameters=params, grad_clip=pnn.ClipGradByGlobalNorm(1.0)).step()
    assert calls == ["sumsq", "sgd", "sumsq", "momentum", "sumsq", "adam"]
    calls.clear()
    use_native(monkeypatch, False)
    assert _native.kernels() is None
    popt.AdamW(0.1, parameters=params, grad_clip=pnn.ClipGradByGlobalNorm(1.0)).step()
    assert calls == []


# The dtype mixes that keep their torch forms (docs/optimizers.md): the forms tests above compare
# the compiled kernels only where they run, so which ones run is pinned here.
FAMILY_KERNELS = tuple(cls.__name__.lower() for cls in FAMILY)  # their _native.Kernels methods
TORCH_FORM_ONLY = {
    "lamb": {"bf16", "fp16_fp32_main_grad"},
    "adamax": {"bf16", "fp16_fp32_main_grad"},
    "rprop": {"bf16_master", "fp16_master_fp32_main_grad", "bf16", "fp16_fp32_main_grad"},
}


@needs_compiler
@pytest.mark.parametrize("dtypes", DTYPES.keys())
@pytest.mark.parametrize("name", FAMILY_KERNELS)
def test_the_family_kernels_run_on_the_dtype_mixes_they_take(name, dtypes, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = spy(monkeypatch, _native.Kernels, [name])
    dtype, grad_dtype, mp, main_grad = DTYPES[dtypes]
    train(lambda ps: maker(name)(ps, mp), dtype, grad_dtype, main_grad, SIZES)
    assert len(calls) == (0 if dtypes in TORCH_FORM_ONLY.get(name, ()) else 3)


@needs_compiler
def test_rows_are_kept_while_nothing_changes_and_rebuilt_when_something_does(monkeypatch: pytest.MonkeyPatch) -> None:
    params = [torch.nn.Parameter(torch.randn(50)) for _ in range(2)]
    for p in params:
        p.grad = torch.randn(50)
    opt = popt.Adam(0.1, parameters=params)
    built = spy(monkeypatch, popt.Adam, ["_compiled_row"])
    opt.step()
    opt.step()
    assert len(built) == 2  # built once, kept for the second step
    opt.zero_grad()  # set_to_none: the next gradients are new tensors, the rows follow them
    for p in params:
        p.grad = torch.randn(50)
    opt.step()
    assert len(built) == 2
    opt.set_lr(0.05)  # a new rate is written into the kept rows (a scheduler moves it every step)
    opt.step()
    assert len(built) == 2
    reference = popt.Adam(0.1, parameters=[torch.nn.Parameter(p.detach().clone()) for p in params])
    reference.load_state_dict(opt.state_dict())  # a new state: the kept rows must not be used
    opt.load_state_dict(reference.state_dict())
    opt.step()
    assert len(built) == 4


# --- the optional forms: an optimizer needs only its torch form -------------------------------------
class Halving(Optimizer):
    """An optimizer with only the required hooks (``_kernel``; no state)."""

    def __init__(self, learning_rate: float = 0.5, parameters=None) -> None:
        super().__init__(learning_rate, parameters, None, None, False, {})

    def _kernel(self, param, value, grad, state, group, lr):
        return value - grad * lr


def test_an_optimizer_with_only_the_torch_form_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = spy(monkeypatch, _native.Kernels, ["sgd", "momentum", "adam"])
    rows = spy(monkeypatch, Halving, ["_compiled_row"])  # not even asked for rows
    p = torch.nn.Parameter(torch.ones(4))
    p.grad = torch.full((4,), 2.0)
    Halving(parameters=[p]).step()
    assert torch.equal(p.detach(), torch.zeros(4)) and calls == [] and rows == []


class CpuOnlySGD(popt.SGD):
    """SGD without its GPU form: the GPU formula then runs per tensor."""

    _multi_tensor_call = Optimizer._multi_tensor_call


def test_a_missing_gpu_form_takes_the_per_tensor_gpu_formula(interpreted_gpu_path, monkeypatch) -> None:
    rows = spy(monkeypatch, CpuOnlySGD, ["_compiled_row"])
    make = lambda ps: CpuOnlySGD(0.1, parameters=ps, weight_decay=0.01)  # noqa: E731
    without = train(make, torch.float32, torch.float32, False, GPU_SIZES)
    assert interpreted_gpu_path == [] and rows == []
    use_native(monkeypatch, False)
    assert_same_run(without, train(make, torch.float32, torch.float32, False, GPU_SIZES))


# --- the torch forms' exact building blocks ---------------------------------------------------------
def test_the_fma_emulation_rounds_once() -> None:
    """Cases where rounding the float64 sum, then to the target, would round twice wrongly."""
    a = torch.tensor([1 + 2**-12] * 3)  # a*a = 1 + 2**-11 + 2**-24: a float32 tie, moved by c
    c = torch.tensor([2.0**-60, -(2.0**-60), 0.0])
    assert _numerics.fma(a, a, c).tolist() == [1 + 2**-11 + 2**-23, 1 + 2**-11, 1 + 2**-11]
    assert _numerics.fma(a, a[0].item(), c).tolist() == [1 + 2**-11 + 2**-23, 1 + 2**-11, 1 + 2**-11]
    b = torch.tensor([1 + 2**-4] * 2)  # b*b = 1 + 2**-3 + 2**-8: a bfloat16 tie
    low = _numerics.fma(b, b, torch.tensor([2.0**-40, -(2.0**-40)], dtype=torch.bfloat16))
    assert low.dtype == torch.bfloat16 and low.tolist() == [1 + 2**-3 + 2**-7, 1 + 2**-3]
    inf = _numerics.fma(torch.tensor([3e38]), torch.tensor([10.0]), torch.tensor([1.0]))
    assert inf.tolist() == [math.inf]


def test_float64_square_roots_are_correctly_rounded() -> None:
    from fractions import Fraction

    gen = torch.Generator().manual_seed(0)
    x = torch.rand(400, generator=gen, dtype=torch.float64) * 10.0 ** torch.randint(-30, 30, (400,), generator=gen)
    for xi, si in zip(x.tolist(), _numerics.sqrt_rn(x).tolist()):
        ulp = Fraction(math.ulp(si))
        low, high = Fraction(si) - ulp / 2, Fraction(si) + ulp / 2
        assert low * low < Fraction(xi) < high * high


# --- Paddle's CPU sum of squares ------------------------------------------------------------------
@needs_compiler
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compiled_sum_of_squares_is_eigens(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    sizes = [0, 1, 7, 8, 9, 17, 8191, 8192, 8193, 16385, 40_003, 100_000]
    xs = [(torch.randn(n, generator=gen) * 10.0 ** torch.randint(-3, 3, (n,), generator=gen)).to(dtype)
          for n in sizes]
    for x, sq in zip(xs, squared_l2_norms(xs)):
        assert sq.dtype == dtype and same_bits(sq, _eigen_sum((x * x).reshape(-1))), x.numel()


# --- GPU formulas: the Triton multi-tensor kernels, interpreted on CPU tensors ----------------------
@pytest.fixture
def interpreted_gpu_path(monkeypatch: pytest.MonkeyPatch):
    """CPU tensors take the GPU formulas (the test hook of test_optimizer_gpu_formulas.py) and the
    Triton kernels run in Triton's interpreter."""
    pytest.importorskip("triton")
    from triton._C.libtriton import interpreter

    if not hasattr(interpreter, "fma_fp32"):  # seen with Triton 3.6 (the suite pins a later one)
        pytest.skip("this Triton's interpreter rounds tl.fma twice: it cannot stand in for the GPU")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(_devices, "gpu_kernels", lambda t: True)
    monkeypatch.setattr(_eigen, "_hardware_rsqrt", lambda: None)  # Eigen's sqrt as on CUDA: the IEEE root
    if _multi_tensor.kernels(torch.device("cpu")) is None:
        pytest.skip("this Triton cannot interpret the kernels")
    return spy(monkeypatch, _multi_tensor, MULTI_TENSOR_CALLS)


# the launch functions of _multi_tensor, one per optimizer (AdamW's is Adam's)
MULTI_TENSOR_CALLS = [cls.__name__.lower() for cls in CLASSES if cls is not popt.AdamW]


GPU_DTYPES = {k: DTYPES[k] for k in ("fp32", "bf16_master", "fp16_master_fp32_main_grad")}
GPU_SIZES = (300, 7, 2500)


@pytest.mark.parametrize("dtypes", GPU_DTYPES.values(), ids=GPU_DTYPES.keys())
@pytest.mark.parametrize("name", ids(cases("gpu")))
def test_multi_tensor_kernels_match_the_per_tensor_gpu_formulas(
    name, dtypes, interpreted_gpu_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dtype, grad_dtype, mp, main_grad = dtypes
    info = next(info for info, inp in cases("gpu") if inp.desc == name)
    if info.computes_in_param_dtype and dtype != torch.float32:
        pytest.skip("fp16/bf16 arithmetic: the per-tensor form")
    make = lambda ps: maker(name)(ps, mp)  # noqa: E731
    steps = case(name).options.get("steps", 3)
    per_tensor_calls = spy(monkeypatch, info.cls, ["_kernel"])
    multi = train(make, dtype, grad_dtype, main_grad, GPU_SIZES, steps)
    assert interpreted_gpu_path, "the multi-tensor kernels did not run"
    assert not per_tensor_calls, "a parameter took the per-tensor form"
    use_native(monkeypatch, False)
    per_tensor = train(make, dtype, grad_dtype, main_grad, GPU_SIZES, steps)
    assert_same_run(multi, per_tensor)


GPU_NONFINITE = [inp.desc for info, inp in cases("gpu") if "nonfinite" in inp.suites]


@pytest.mark.parametrize("name", GPU_NONFINITE)
def test_multi_tensor_kernels_match_on_inf_and_nan_gradients(
    name, interpreted_gpu_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make = lambda ps: maker(name)(ps, False)  # noqa: E731
    multi = train(make, torch.float32, torch.float32, False, GPU_SIZES, nonfinite=True)
    assert interpreted_gpu_path
    use_native(monkeypatch, False)
    assert_same_run(multi, train(make, torch.float32, torch.float32, False, GPU_SIZES, nonfinite=True))


# (a launch function, a configuration): the GPU rows have moved their powers to the device first
@pytest.mark.parametrize(("launch", "name"), [("adam", "adamw"), ("radam", "radam"), ("asgd", "asgd"),
                                              ("lamb", "lamb"), ("adamax", "adamax")])
def test_a_failing_gpu_kernel_falls_back_to_the_per_tensor_path(
    launch, name, interpreted_gpu_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("no such instruction")

    monkeypatch.setattr(_multi_tensor, launch, broken)
    monkeypatch.setattr(_multi_tensor, "_modules", dict(_multi_tensor._modules))  # restored afterwards
    make = lambda ps: maker(name)(ps, False)  # noqa: E731
    with caplog.at_level(logging.WARNING, logger="paddle_compat"):
        fell_back = train(make, torch.float32, torch.float32, False, GPU_SIZES)
    assert "failed" in caplog.text and _multi_tensor.kernels(torch.device("cpu")) is None
    use_native(monkeypatch, False)
    assert_same_run(fell_back, train(make, torch.float32, torch.float32, False, GPU_SIZES))


def _ptx(kernel, signature: dict, constexprs: dict) -> str:
    """The kernel compiled for an H100 (sm_90) without a GPU: Triton's compiler runs on the host."""
    triton = pytest.importorskip("triton")
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError:
        pytest.skip("this Triton has no host-side compile API")
    signature = {**signature, **{name: "constexpr" for name in constexprs}}
    source = ASTSource(kernel, signature, constexprs=constexprs, attrs={(0,): [["tt.divisibility", 16]]})
    options = {"num_warps": 8, "enable_fp_fusion": False}
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    return compiled.asm["ptx"]


F32 = "fp32"
COMPILED = [
    ("sgd_kernel", 1, {}, {"W": 0, "G": 2, "P": 2}),
    ("momentum_kernel", 4, {"mu": F32, "coeff": F32, "rescale": F32},
     {"W": 0, "G": 3, "P": 3, "HAS_COEFF": True, "NESTEROV": True}),
    ("adam_kernel", 3, {"b1": F32, "b2": F32, "c1": F32, "c2": F32, "eps": F32},
     {"W": 0, "G": 2, "P": 2, "S": 2, "AMSGRAD": True}),
    ("rmsprop_kernel", 0, {"rho": F32, "keep": F32, "eps": F32, "mu": F32},
     {"W": 0, "G": 2, "P": 2, "S": 0, "CENTERED": True}),
    ("adagrad_kernel", 0, {"eps": F32}, {"W": 0, "G": 3, "P": 3, "S": 0}),
    ("adadelta_kernel", 0, {"rho": F32, "keep": F32, "eps": F32}, {"W": 0, "G": 2, "P": 2, "S": 0}),
    ("adamax_kernel", 0, {"b1": F32, "c1": F32, "b2": F32, "eps": F32}, {"W": 0, "G": 2, "P": 2, "S": 0}),
    ("asgd_kernel", 0, {}, {"NB": 3, "W": 0, "G": 2, "P": 2, "S": 2}),
    ("rprop_kernel", 0, {"lo": F32, "hi": F32, "eta_minus": F32, "eta_plus": F32}, {"W": 0, "G": 0, "P": 15}),
    ("radam_kernel", 0, {"pow3": "*i64", "b1": F32, "c1": F32, "b2": F32, "c2": F32, "eps": F32, "rho_inf": F32},
     {"W": 0, "G": 2, "P": 2, "S": 0}),
    ("nadam_kernel", 0, {"pow3": "*i64", "table": "*fp32", "b1": F32, "c1": F32, "b2": F32, "c2": F32, "eps": F32,
                         "c096": F32, "p096": F32}, {"TABLE": 2466, "W": 0, "G": 2, "P": 2, "S": 0}),
    ("lamb_direction_kernel", 0, {"directions": "*fp32", "offsets": "*i64", "b1": F32, "c1": F32, "b2": F32,
                                  "c2": F32, "eps": F32}, {"W": 0, "G": 2, "S": 0}),
    ("lamb_update_kernel", 0, {"directions": "*fp32", "offsets": "*i64", "p_squares": "*fp32", "d_squares": "*fp32"},
     {"W": 0, "P": 2, "ALWAYS_ADAPT": False}),
]
# the arguments between ``found`` and the hyper-parameters, where a kernel has any
_BEFORE_FOUND = {"radam_kernel": ["pow3"], "nadam_kernel": ["pow3"]}


@pytest.mark.parametrize(("name", "fmas_per_element", "extra", "constexprs"), COMPILED, ids=[c[0] for c in COMPILED])
@pytest.mark.parametrize("aligned", [False, True])
def test_gpu_kernels_compile_with_ieee_arithmetic(name, fmas_per_element, extra, constexprs, aligned) -> None:
    """Compiled (not interpreted): exactly the FMAs of Paddle's GPU formulas (the later optimizers'
    torch forms have none) and nothing else contracted, IEEE division and square root, no flushing
    of subnormals, and vector memory accesses for aligned tensors."""
    pytest.importorskip("triton")
    mod = _multi_tensor._load(interpret=False)
    if mod is None:
        pytest.skip("this Triton cannot build the kernels")
    before = {key: extra[key] for key in _BEFORE_FOUND.get(name, [])}
    after = {key: value for key, value in extra.items() if key not in before}
    signature = {"base": "*u8", "blocks": "*i32", "rows": "*i64", "grads": "*i64", "per": "*fp32", **before,
                 "found": "*fp32", **after}
    ptx = _ptx(getattr(mod, name), signature,
               {**constexprs, "HAS_FOUND": True, "ALIGNED": aligned, "BLOCK": _multi_tensor.BLOCK})
    elements_per_thread = _multi_tensor.BLOCK // (8 * 32)
    assert ptx.count("fma.rn.f32") == fmas_per_element * elements_per_thread
    assert ".ftz" not in ptx and "approx" not in ptx
    if name not in ("sgd_kernel", "momentum_kernel", "rprop_kernel", "asgd_kernel"):
        assert "div.rn.f32" in ptx or "sqrt.rn.f32" in ptx
    assert ("ld.global.v4.b32" in ptx) == aligned


@pytest.mark.parametrize("name", ["radam_powers_kernel", "nadam_powers_kernel"])
def test_power_kernels_compile_with_ieee_arithmetic(name) -> None:
    pytest.importorskip("triton")
    mod = _multi_tensor._load(interpret=False)
    if mod is None:
        pytest.skip("this Triton cannot build the kernels")
    signature = {"base": "*u8", "rows": "*i64", "pow3": "*i64", "found": "*fp32"}
    if name == "radam_powers_kernel":
        signature.update(b1=F32, b2=F32)
        constexprs = {"HAS_FOUND": True}
    else:
        signature.update(table="*fp32", b1=F32, b2=F32, c096=F32, p096=F32)
        constexprs = {"TABLE": 2466, "HAS_FOUND": True}
    ptx = _ptx(getattr(mod, name), signature, constexprs)
    assert "fma" not in ptx and ".ftz" not in ptx and "approx" not in ptx
    assert ("div.rn.f32" in ptx) == (name == "radam_powers_kernel")


def test_multi_tensor_adam_keeps_the_beta_powers_on_the_device(interpreted_gpu_path) -> None:
    p = torch.nn.Parameter(torch.randn(10))
    p.grad = torch.randn(10)
    opt = popt.Adam(0.1, parameters=[p])
    opt.step()
    opt.step()
    assert opt.state[p]["beta1_pow_acc"].device == p.device
    assert opt.state[p]["beta1_pow_acc"].item() == pytest.approx(0.9**3)


# --- the GradScaler hand-over -------------------------------------------------------------------------
def unscaled(g: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Paddle's unscale: T(f32(g) * reciprocal(f32(scale)))."""
    return (g.float() * torch.reciprocal(scale.float())).to(g.dtype)


def handover_runs(make, found: float, dtype=torch.float32, changed_when_skipped=()):
    """One step with grad_scale/found_inf set, beside the reference: unscale by hand, then step
    (found 0) or leave everything alone (found 1; but ``changed_when_skipped``, Adamax's beta power)."""
    scale = torch.tensor([1024.0])
    gen = torch.Generator().manual_seed(0)
    inits = [torch.randn(n, generator=gen).to(dtype) for n in (40, 3)]
    sides = []
    for _ in range(2):
        params = [torch.nn.Parameter(v.clone()) for v in inits]
        sides.append((params, make(params)))
    gen = torch.Generator().manual_seed(1)
    for step in range(3):
        grads = [(torch.randn(v.shape, generator=gen) * 100).to(dtype) for v in inits]
        (ours, opt), (ref, ref_opt) = sides
        for p, r, g in zip(ours, ref, grads):
            p.grad, r.grad = g.clone(), unscaled(g, scale)
        skip = found and step == 2
        before = [(p.detach().clone(), {k: v.clone() for k, v in opt.state[p].items()
                                        if isinstance(v, torch.Tensor) and k not in changed_when_skipped})
                  for p in ours]
        opt.grad_scale, opt.found_inf = scale, torch.tensor([1.0 if skip else 0.0])
        opt.step()
        del opt.grad_scale, opt.found_inf
        if skip:
            for p, (value, state) in zip(ours, before):
                assert same_bits(p, value)
                assert all(same_bits(opt.state[p][k], v) for k, v in state.items())
            ref_opt._skipped_step()  # what a skip leaves in the gradients (a global-norm clip scales them)
        else:
            ref_opt.step()
            assert_same_run((ours, opt), (ref, ref_opt))
        for p, r in zip(ours, ref):  # unscaled in place (and clipped, as the reference's, if stepped)
            assert same_bits(p.grad, r.grad)


HANDOVER = {inp.desc: (info, inp) for info, inp in cases("handover")}


def handover(name: str, found: float) -> None:
    info, inp = HANDOVER[name]
    handover_runs(inp.make, found, inp.options.get("dtype", torch.float32), info.changed_when_skipped)


def test_the_fused_scaler_contract_is_opt_in_as_in_torch() -> None:
    for cls in CLASSES:
        p = torch.nn.Parameter(torch.randn(3))
        assert new(cls, 0.01, [p])._step_supports_amp_scaling is False  # (RMSProp, Adagrad: no default rate)
        fused = new(cls, 0.01, [p], fused=True)
        assert fused._step_supports_amp_scaling is True and fused._unscales_like_paddle is True
        assert copy.deepcopy(fused)._step_supports_amp_scaling is True
        with pytest.raises(TypeError, match="fused should be a bool, but received int"):
            new(cls, 0.01, [p], fused=1)


@pytest.mark.parametrize("native", ["1", "0"], ids=["compiled", "torch"])
@pytest.mark.parametrize("found", [0.0, 1.0], ids=["finite", "skipped"])
@pytest.mark.parametrize("name", HANDOVER)
def test_handover_on_cpu(name, found, native, monkeypatch: pytest.MonkeyPatch) -> None:
    use_native(monkeypatch, native == "1")
    handover(name, found)


def has_gpu_kernels(cls: type) -> bool:
    return _cases.entry_of(cls).gpu_kernels


@pytest.mark.parametrize("found", [0.0, 1.0], ids=["finite", "skipped"])
@pytest.mark.parametrize("name", [name for name, (info, _) in HANDOVER.items() if has_gpu_kernels(info.cls)])
def test_handover_with_a_device_flag(name, found, interpreted_gpu_path) -> None:
    """The flag is never read on the host: the kernels (and the clip's factor) test it."""
    handover(name, found)
    assert interpreted_gpu_path  # (the reference's steps, without a flag, launch them too)


@pytest.mark.parametrize("k", [0, 1, 1234, 2464, 2465])
def test_nadam_gpu_kernel_finds_every_power_of_its_schedule(k, interpreted_gpu_path, monkeypatch) -> None:
    """The schedule's power deep into its sequence (its last value, a subnormal, repeats)."""
    from paddle_compat.optimizer import nadam

    def run():
        gen = torch.Generator().manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in (40, 3)]
        opt = popt.NAdam(0.01, parameters=params, momentum_decay=0.3)
        for step in range(3):
            for p in params:
                p.grad = torch.randn(p.shape, generator=gen)
            if step == 1:
                for p in params:
                    opt.state[p]["momentum_decay_pow"].fill_(nadam._decay_sequence()[0][k])
            opt.step()
        return params, opt

    multi = run()
    assert interpreted_gpu_path.count("nadam") >= 6  # (a compile pass and a launch per step)
    use_native(monkeypatch, False)
    assert_same_run(multi, run())


def test_nadam_off_its_schedule_takes_the_per_tensor_form(interpreted_gpu_path) -> None:
    """Its GPU kernel looks the schedule's power up in the sequence it follows from 1."""
    p = torch.nn.Parameter(torch.randn(10))
    p.grad = torch.randn(10)
    opt = popt.NAdam(0.01, parameters=[p])
    opt.step()
    assert interpreted_gpu_path
    interpreted_gpu_path.clear()
    opt.state[p]["momentum_decay_pow"] = torch.tensor([0.5])
    opt.step()
    assert interpreted_gpu_path == [] and opt.state[p]["momentum_decay_pow"].item() == _numerics.round_f32(0.5 * 0.96)


def test_handover_with_a_device_flag_on_the_per_tensor_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the multi-tensor kernels the per-tensor GPU path reads the flag (one sync)."""
    monkeypatch.setattr(_devices, "gpu_kernels", lambda t: True)
    use_native(monkeypatch, False)
    for name in HANDOVER:
        for found in (0.0, 1.0):
            info, inp = HANDOVER[name]
            handover_runs(inp.make, found, changed_when_skipped=info.changed_when_skipped)


def test_torch_grad_scaler_drives_the_handover() -> None:
    params = [torch.nn.Parameter(torch.randn(5))]
    opt = popt.Adam(0.1, parameters=params, fused=True)
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    params[0].grad = torch.full((5,), 8.0)
    scaler.scale(torch.tensor(1.0))
    scaler.step(opt)  # torch sees _step_supports_amp_scaling and hands grad_scale/found_inf over
    assert torch.equal(params[0].grad, torch.ones(5))  # unscaled by the optimizer
    assert not hasattr(opt, "grad_scale") and not hasattr(opt, "found_inf")
    assert opt.state[params[0]]["beta1_pow_acc"].item() == pytest.approx(0.81)


def test_torch_grad_scaler_skips_a_default_optimizer_itself() -> None:
    params = [torch.nn.Parameter(torch.randn(5))]
    opt = popt.Adam(0.1, parameters=params)
    called = []
    opt.register_step_pre_hook(lambda *args: called.append(True))
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    params[0].grad = torch.full((5,), math.inf)
    scaler.scale(torch.tensor(1.0))
    scaler.step(opt)  # an ordinary optimizer: torch's scaler unscales and does not call step on inf
    assert called == [] and not opt.state[params[0]]


# --- on a GPU (skipped without one) -----------------------------------------------------------------
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("name", ids(cases("cuda")))
@pytest.mark.parametrize("dtypes", GPU_DTYPES.values(), ids=GPU_DTYPES.keys())
def test_cuda_multi_tensor_matches_per_tensor(name, dtypes, monkeypatch: pytest.MonkeyPatch) -> None:
    if _multi_tensor.kernels(torch.device("cuda")) is None:
        pytest.skip("no Triton")
    dtype, grad_dtype, mp, main_grad = dtypes
    make = lambda ps: maker(name)(ps, mp)  # noqa: E731
    steps = case(name).options.get("steps", 3)
    multi = train(make, dtype, grad_dtype, main_grad, (3000, 7, 100_003), steps, device="cuda")
    use_native(monkeypatch, False)
    assert_same_run(multi, train(make, dtype, grad_dtype, main_grad, (3000, 7, 100_003), steps, device="cuda"))


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("cls", [c for c in CLASSES if has_gpu_kernels(c)])
def test_cuda_step_with_grad_scaler_makes_no_host_sync(cls) -> None:
    """(The optimizers without GPU kernels read the flag on the host, one sync per step.)"""
    from paddle_compat.amp import GradScaler

    if _multi_tensor.kernels(torch.device("cuda")) is None:
        pytest.skip("no Triton")
    params = [torch.nn.Parameter(torch.randn(1000, device="cuda")) for _ in range(3)]
    opt = cls(0.01, parameters=params, grad_clip=pnn.ClipGradByGlobalNorm(1.0), fused=True)
    scaler = GradScaler()
    for step in range(4):
        for p in params:
            p.grad = torch.randn_like(p)
        if step == 2:
            params[0].grad[0] = math.inf
        scaled = scaler.scale(torch.zeros((), device="cuda"))
        if step > 0:
            torch.cuda.set_sync_debug_mode("error")
        try:
            scaler.minimize(opt, scaled)
        finally:
            torch.cuda.set_sync_debug_mode("default")


def _cuda_params(make):
    """Two CUDA parameters (a seeded draw, the same every call) with their gradients, and
    ``make(params)``, the optimizer over them."""
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen).cuda()) for n in (1000, 33)]
    for p in params:
        p.grad = torch.randn(p.numel(), generator=gen).cuda()
    return params, make(params)


def _captured_step(opt):
    """``opt.step()`` captured in a CUDA graph on a side stream, as torch's recipe does (after the
    caller's eager warm-up)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            opt.step()
    torch.cuda.current_stream().wait_stream(stream)
    return graph


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("cls", [c for c in CLASSES if has_gpu_kernels(c)])
def test_cuda_step_can_be_captured_in_a_graph(cls) -> None:
    if _multi_tensor.kernels(torch.device("cuda")) is None:
        pytest.skip("no Triton")
    (eager, eager_opt), (graphed, graphed_opt) = (_cuda_params(lambda ps: cls(0.01, parameters=ps)) for _ in range(2))
    eager_opt.step()
    graphed_opt.step()  # warm-up: state, device tables
    graph = _captured_step(graphed_opt)
    for _ in range(3):
        eager_opt.step()
        graph.replay()
    torch.cuda.synchronize()
    assert_same_run((graphed, graphed_opt), (eager, eager_opt))


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("name", [cls.__name__ for cls in CLASSES if cls is not popt.Rprop])  # (its rate: a first step)
def test_cuda_replays_of_a_captured_step_follow_the_scheduler(name: str) -> None:
    """A scheduler of ours stepped between replays: each replay steps at its rate, as eager steps do."""
    if _multi_tensor.kernels(torch.device("cuda")) is None:
        pytest.skip("no Triton")
    scheds = [popt.lr.CosineAnnealingDecay(0.01, T_max=10) for _ in range(2)]
    (eager, eager_opt), (graphed, graphed_opt) = (
        _cuda_params(lambda ps, sched=sched: getattr(popt, name)(sched, parameters=ps)) for sched in scheds
    )
    eager_sched, graphed_sched = scheds
    for opt, sched in ((eager_opt, eager_sched), (graphed_opt, graphed_sched)):
        opt.step()  # warm-up: state, device tables
        sched.step()
    graph = _captured_step(graphed_opt)
    for _ in range(4):
        eager_opt.step()
        eager_sched.step()
        graph.replay()
        graphed_sched.step()
    torch.cuda.synchronize()
    assert_same_run((graphed, graphed_opt), (eager, eager_opt))
