"""The CUDA paths, checked without a GPU: a step is all or nothing, flags and copies go to the right
device and stream (``paddle_compat._devices``), and the exact emulations of the GPU formulas.

The Triton kernels run in Triton's interpreter on CPU tensors; device routing is checked with
meta tensors and stand-ins for torch.cuda where nothing can run.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
from fractions import Fraction

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

import paddle_compat.optimizer as popt
from paddle_compat import _devices, _numerics
from paddle_compat.amp import scale_tracker, unscale
from paddle_compat.amp.scale_tracker import FoundInf
from paddle_compat.optimizer import _multi_tensor

from .test_optimizer_kernels import assert_same_run, interpreted_gpu_path, spy, train, use_native  # noqa: F401


# --- a step is all or nothing ---------------------------------------------------------------------
class _FailsToCompileUnaligned:
    """A Triton kernel whose unaligned variant fails to compile, at its first use (a launch, or a
    compile-only warmup), as a kernel variant Triton cannot build would."""

    def __init__(self, kernel) -> None:
        self.kernel = kernel

    @staticmethod
    def _compile(kwargs) -> None:
        if not kwargs["ALIGNED"]:
            raise RuntimeError("ptxas: the unaligned variant failed to compile")

    def warmup(self, *args, grid, **kwargs):
        self._compile(kwargs)
        return self.kernel.warmup(*args, grid=grid, **kwargs)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self._compile(kwargs)
            return self.kernel[grid](*args, **kwargs)

        return launch


@pytest.mark.parametrize("cls", [popt.SGD, popt.Momentum, popt.AdamW])
def test_a_later_kernel_variant_failing_to_compile_falls_back_before_anything_is_written(
    cls, interpreted_gpu_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """4096 elements take the aligned variant, 4099 the unaligned one, launched second."""
    mod = _multi_tensor.kernels(torch.device("cpu"))
    name = {popt.SGD: "sgd_kernel", popt.Momentum: "momentum_kernel", popt.AdamW: "adam_kernel"}[cls]
    monkeypatch.setattr(mod, name, _FailsToCompileUnaligned(getattr(mod, name)))
    monkeypatch.setattr(_multi_tensor, "_modules", dict(_multi_tensor._modules))  # disable() is undone afterwards
    make = lambda ps: cls(0.01, parameters=ps)  # noqa: E731
    sizes = (4096, 4099)
    with caplog.at_level(logging.WARNING, logger="paddle_compat"):
        fell_back = train(make, torch.float32, torch.float32, False, sizes)
    assert "failed" in caplog.text
    use_native(monkeypatch, False)
    assert_same_run(fell_back, train(make, torch.float32, torch.float32, False, sizes))


def test_every_variant_is_compiled_before_the_first_launch(interpreted_gpu_path, monkeypatch) -> None:
    mod = _multi_tensor.kernels(torch.device("cpu"))
    events: list[str] = []

    class Recording:
        def __init__(self, kernel) -> None:
            self.kernel = kernel

        def warmup(self, *args, grid, **kwargs):
            events.append(f"compile {kwargs['ALIGNED']}")
            return self.kernel.warmup(*args, grid=grid, **kwargs)

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                events.append(f"launch {kwargs['ALIGNED']}")
                return self.kernel[grid](*args, **kwargs)

            return launch

    monkeypatch.setattr(mod, "sgd_kernel", Recording(mod.sgd_kernel))
    train(lambda ps: popt.SGD(0.1, parameters=ps), torch.float32, torch.float32, False, (4096, 4099), steps=1)
    assert events == ["compile True", "compile False", "launch True", "launch False"]


# --- device routing -------------------------------------------------------------------------------
class _RecordTo(TorchFunctionMode):
    """Records each ``Tensor.to`` (target device, non_blocking); a copy out of a meta tensor gives ones."""

    def __init__(self) -> None:
        super().__init__()
        self.copies: list[tuple[str, bool]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = kwargs.get("device", args[1] if len(args) > 1 else None)
        if func is torch.Tensor.to and isinstance(target, (str, torch.device)):
            target = torch.device(target)
            self.copies.append((target.type, bool(kwargs.get("non_blocking", False))))
            if args[0].device.type == "meta":
                return torch.ones(args[0].shape, dtype=args[0].dtype, device=target)
        return func(*args, **kwargs)


def test_a_copy_onto_the_host_waits_and_one_onto_a_device_does_not() -> None:
    with _RecordTo() as mode:
        _devices.copy_to(torch.zeros(1, device="meta"), torch.device("cpu"))
        _devices.copy_to(torch.zeros(1), torch.device("meta"))
    assert mode.copies == [("cpu", False), ("meta", True)]
    same = torch.zeros(1)
    assert _devices.copy_to(same, torch.device("cpu")) is same


def test_flags_from_other_devices_reach_the_host_flag_before_it_is_read() -> None:
    """A flag of gradients on another device is folded into a host ``found_inf`` with a copy
    that the host waits for (a non-blocking one could be read before it lands)."""
    found_inf = torch.zeros(1)
    with _RecordTo() as mode:
        unscale._gather({found_inf.device: found_inf, torch.device("meta"): torch.zeros(1, device="meta")}, found_inf)
    assert mode.copies == [("cpu", False)]
    assert found_inf.item() == 1.0


def test_each_device_gets_its_own_copy_of_the_flag(interpreted_gpu_path, monkeypatch) -> None:
    """The GPU kernels read ``found_inf`` on their own device: here the flag lives on another
    (meta) device than the parameters, and the launches get a copy on theirs."""
    seen: list[torch.device] = []
    original = popt.SGD._multi_tensor_call

    def record(self, kern, launch, group, found_inf):
        seen.append(found_inf.device)
        return original(self, kern, launch, group, found_inf)

    monkeypatch.setattr(popt.SGD, "_multi_tensor_call", record)
    p = torch.nn.Parameter(torch.ones(8))
    p.grad = torch.ones(8)
    opt = popt.SGD(0.5, parameters=[p])
    with _RecordTo() as mode:
        opt._step_group(opt.param_groups[0], [(p, p.grad)], torch.zeros(1, device="meta"))
    assert seen == [torch.device("cpu")] * 2  # the compile pass, then the launch
    assert mode.copies == [("cpu", False)]  # one copy for the device, made once
    assert torch.equal(p.detach(), torch.ones(8))  # the copied flag reads 1: skipped


def test_the_copy_event_is_recorded_on_the_stream_of_the_flags_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """``FoundInf.in_flight`` on a flag of cuda:1 while cuda:0 is current: the copy and its event
    are ordered on cuda:1's current stream (torch.cuda stood in for: no GPU here)."""
    calls: list[tuple] = []

    class Event:
        def record(self, stream=None):
            calls.append(("record", stream))

        def query(self):
            return True

        def synchronize(self):
            pass

    class Host:
        def copy_(self, src, non_blocking=False):
            calls.append(("copy", non_blocking))

    class Device:
        def __init__(self, device):
            self.device = device

        def __enter__(self):
            calls.append(("current", self.device))

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "device", Device)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: f"stream of {device}")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch, "empty", lambda *a, **k: Host())

    class Flag:  # a float32 [1] flag on cuda:1
        device, shape, dtype = torch.device("cuda", 1), (1,), torch.float32

    flag = FoundInf.in_flight(Flag())  # type: ignore[arg-type]
    assert calls == [("current", torch.device("cuda", 1)), ("copy", True), ("record", "stream of cuda:1")]
    assert flag.ready()


def test_a_flag_recorded_while_a_cuda_graph_is_captured_stays_on_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fused step captured whole into a CUDA graph: ``FoundInf.in_flight`` takes no pinned buffer
    and records no event there (illegal, or an event the host could never wait on); the host reads
    the flag on the device once the capture is over, at each read: each replay sets it anew
    (torch.cuda stood in for: no GPU here)."""
    capturing = [True]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])

    def no_copy(t):
        raise AssertionError("a pinned copy and an event made during a capture")

    monkeypatch.setattr(scale_tracker, "copy_to_host_async", no_copy)

    class Flag:  # a float32 [1] flag on cuda:0, set at the replays
        device, shape, dtype = torch.device("cuda", 0), (1,), torch.float32
        reads = 0

        def item(self):  # the replays found inf, then not
            self.reads += 1
            return 1.0 if self.reads == 1 else 0.0

    tensor = Flag()
    flag = FoundInf.in_flight(tensor)  # type: ignore[arg-type]
    assert flag.on_device and not flag.ready() and tensor.reads == 0
    capturing[0] = False
    assert flag.ready() and flag.value() is True and flag.value() is False
    assert tensor.reads == 2


def test_capturing_asks_torch_cuda_for_cuda_tensors_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_devices.capturing``, which puts the scale tracker on its in-place path (torch.cuda stood in
    for: no GPU here)."""
    capturing = [True]
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing[0])

    cuda = torch.device("cuda", 1)
    assert _devices.capturing(cuda) and not _devices.capturing(torch.device("cpu"))
    capturing[0] = False
    assert not _devices.capturing(cuda)


# --- the exact emulations the GPU formulas are checked against ------------------------------------
def test_the_float64_fma_rounds_once() -> None:
    """Paddle's double kernels are contracted by nvcc as its float ones: one rounding, checked
    against exact rational arithmetic (cancellations and halfway cases included)."""
    rng = random.Random(0)
    cases = []
    for i in range(3000):
        a = rng.uniform(-1, 1) * 2.0 ** rng.randint(-60, 60)
        b = rng.uniform(-1, 1) * 2.0 ** rng.randint(-60, 60)
        near = -float(Fraction(a) * Fraction(b))
        c = [near, near * (1 + 2.0**-52), rng.uniform(-1, 1) * 2.0 ** rng.randint(-130, 130),
             float(Fraction(a) * Fraction(b)) * 2.0**-54][i % 4]
        cases.append((a, b, c))
    cases += [(1 + 2.0**-30, 1 + 2.0**-30, -1.0), (3.0, 5.0, math.inf), (math.inf, 0.0, 1.0), (1e300, 1e300, -1.0)]
    a, b, c = (torch.tensor([x[i] for x in cases], dtype=torch.float64) for i in range(3))
    got = _numerics.fma(a, b, c).tolist()
    for (x, y, z), r in zip(cases, got):
        if not all(map(math.isfinite, (x, y, z))) or abs(x * y) > 1e300:
            assert r == x * y + z or (math.isnan(r) and math.isnan(x * y + z))
            continue
        assert r == float(Fraction(x) * Fraction(y) + Fraction(z)), (x, y, z)


def test_the_scalar_fma_rounds_once() -> None:
    lr, coeff = 0.005612671375274658, _numerics.round_f32(0.1)
    twice = _numerics.round_f32(1 - _numerics.round_f32(lr * coeff))
    once = _numerics.fma_scalar(-lr, coeff, 1.0, torch.float32)
    assert once != twice  # the case AdamW's GPU factor meets
    exact = 1 - Fraction(lr) * Fraction(coeff)
    f32 = np.float32(once)
    neighbours = [float(np.nextafter(f32, np.float32(0))), once, float(np.nextafter(f32, np.float32(2)))]
    assert min(neighbours, key=lambda x: abs(Fraction(x) - exact)) == once  # the nearest float32
    assert _numerics.fma_scalar(3.0, 5.0, 1e-300, torch.float64) == 15.0


def test_adamw_gpu_decay_factor_is_one_fma() -> None:
    p = torch.nn.Parameter(torch.ones(3))
    opt = popt.AdamW(0.005612671375274658, parameters=[p], weight_decay=0.1)
    factor = opt._gpu_decay_factor(p, opt.param_groups[0], opt._group_lr(opt.param_groups[0]), torch.float32)
    assert factor == _numerics.fma_scalar(-0.005612671375274658, _numerics.round_f32(0.1), 1.0, torch.float32)


def test_adam_gpu_formula_reads_the_beta_powers_without_a_host_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-tensor GPU form (after a Triton failure, or without Triton) reads the beta powers
    as tensors where they live: no ``.item()``."""
    monkeypatch.setattr(_devices, "gpu_kernels", lambda t: True)
    use_native(monkeypatch, False)
    items: list[str] = []

    class CountItems(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.Tensor.item:
                items.append("item")
            return func(*args, **(kwargs or {}))

    params = [torch.nn.Parameter(torch.randn(5)) for _ in range(3)]
    opt = popt.AdamW(0.01, parameters=params)
    for step in range(2):
        for p in params:
            p.grad = torch.randn(5)
        if step == 1:
            with CountItems():
                opt.step()
        else:
            opt.step()
    assert items == []


# --- CUDA graphs: new gradient tensors rewrite the gradient table alone, in place -----------------
def _steps_with_grads(make, grads_per_step):
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in (4096, 4099)]
    opt = make(params)
    for grads in grads_per_step:
        for p, g in zip(params, grads(params)):
            p.grad = g
        opt.step()
    return params, opt


def test_new_gradient_tensors_keep_the_device_tables(interpreted_gpu_path, monkeypatch) -> None:
    """torch's whole-network capture gives the gradients new addresses inside the capture: the
    step must not make or upload new tables then, only rewrite the gradient offsets in place."""
    uploads = spy(monkeypatch, _devices, ["upload"])
    gen = torch.Generator().manual_seed(1)
    make = lambda ps: popt.AdamW(0.01, parameters=ps)  # noqa: E731
    fresh = lambda ps: [torch.randn(p.shape, generator=gen) for p in ps]  # noqa: E731
    params, opt = _steps_with_grads(make, [fresh])
    (batch, _), = opt._compat_engine._plans[id(opt.param_groups[0])].multi_tensor.values()
    tables = [(launch, launch.rows, launch.grads.data_ptr()) for launch in batch.launches]
    uploads.clear()
    for _ in range(2):
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
    assert uploads == []
    assert [(launch, launch.rows, launch.grads.data_ptr()) for launch in batch.launches] == tables


def test_a_gradient_that_loses_its_alignment_gets_new_tables(interpreted_gpu_path, monkeypatch) -> None:
    gen = torch.Generator().manual_seed(1)
    aligned = lambda ps: [torch.randn(p.shape, generator=gen) for p in ps]  # noqa: E731
    # views 4 bytes into a buffer: not 16-byte aligned
    unaligned = lambda ps: [torch.randn(p.numel() + 1, generator=gen)[1:] for p in ps]  # noqa: E731
    make = lambda ps: popt.SGD(0.1, parameters=ps)  # noqa: E731
    gen.manual_seed(1)
    multi = _steps_with_grads(make, [aligned, unaligned])
    opt = multi[1]
    (batch, _), = opt._compat_engine._plans[id(opt.param_groups[0])].multi_tensor.values()
    assert not any(launch.aligned for launch in batch.launches)  # vector loads would be wrong now
    for p, g in zip(multi[0], aligned(multi[0])):
        p.grad = g
    opt.step()
    use_native(monkeypatch, False)
    gen.manual_seed(1)
    assert_same_run(multi, _steps_with_grads(make, [aligned, unaligned, aligned]))


# --- float64 on the GPU path: Paddle's double kernels, contracted as its float ones --------------
def _fma64(a, b, c):
    """Exact ``a*b + c`` rounded once to float64, element by element (rational arithmetic)."""
    a, b, c = np.broadcast_arrays(np.float64(a), np.float64(b), np.float64(c))
    flat = [float(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in zip(a.ravel(), b.ravel(), c.ravel())]
    return np.array(flat, dtype=np.float64).reshape(a.shape)


def _momentum64(p, g, st, lr, mu=0.9, coeff=0.01, rescale=0.5):
    # Paddle passes mu, the L2 coefficient and rescale_grad as float attributes
    mu, coeff, rescale = (float(np.float32(x)) for x in (mu, coeff, rescale))
    g = g * rescale
    g = _fma64(coeff, p, g)
    v = _fma64(st.get("v", np.zeros_like(p)), mu, g)
    st["v"] = v
    return _fma64(-_fma64(v, mu, g), lr, p)


def _adamw64(p, g, st, lr, b1=0.9, b2=0.999, eps=1e-8, coeff=0.1):
    b1p, b2p = st.get("b1p", b1), st.get("b2p", b2)
    p = p * _fma64(-lr, np.float64(np.float32(coeff)), 1.0)  # Paddle passes coeff as a float attribute
    m = _fma64(b1, st.get("m", np.zeros_like(p)), (1 - b1) * g)
    v = _fma64(b2, st.get("v", np.zeros_like(p)), ((1 - b2) * g) * g)
    p = _fma64(m / (np.sqrt(v) / np.sqrt(1 - b2p) + eps), -(lr / (1 - b1p)), p)
    st.update(m=m, v=v, b1p=b1p * b1, b2p=b2p * b2)
    return p


@pytest.mark.parametrize(("make", "reference"), [
    (lambda ps: popt.SGD(0.1, parameters=ps), lambda p, g, st, lr: _fma64(-lr, g, p)),
    (lambda ps: popt.Momentum(0.05, 0.9, parameters=ps, use_nesterov=True, weight_decay=0.01, rescale_grad=0.5),
     _momentum64),
    (lambda ps: popt.AdamW(0.01, parameters=ps, weight_decay=0.1), _adamw64),
], ids=["sgd", "momentum", "adamw"])
def test_float64_gpu_formulas_round_each_fma_once(make, reference, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_devices, "gpu_kernels", lambda t: True)
    rng = np.random.default_rng(0)
    expected = rng.standard_normal(40)
    p = torch.nn.Parameter(torch.from_numpy(expected.copy()))
    opt = make([p])
    state: dict = {}
    for _ in range(4):
        g = rng.standard_normal(40) * 0.1
        p.grad = torch.from_numpy(g)
        opt.step()
        expected = reference(expected, g, state, opt.get_lr())
        assert np.array_equal(p.detach().numpy().view(np.int64), expected.view(np.int64))


# --- on GPUs (skipped without them) -------------------------------------------------------------
from paddle_compat import selfcheck  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
needs_two = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


def _emulated(make, dtypes):
    with selfcheck._gpu_formulas_on_cpu(), selfcheck._compiled_kernels(False), selfcheck._clips_on("cuda"):
        return selfcheck._train(make, dtypes, "cpu")


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("name", ["Momentum Nesterov L2", "AdamW lr_ratio, low-precision moments"])
def test_cuda_float64_matches_its_exact_emulation(name) -> None:
    make = selfcheck.CONFIGS[name]
    assert selfcheck._same_bits(selfcheck._train(make, selfcheck.DTYPES["fp64"], "cuda"),
                                _emulated(make, selfcheck.DTYPES["fp64"]))


@pytest.mark.cuda
@needs_two
def test_cuda_parameters_on_a_non_current_device() -> None:
    assert selfcheck._second_device_check().verdict == "PASS"


@pytest.mark.cuda
@needs_two
def test_cuda_one_optimizer_over_two_devices_with_a_scaler() -> None:
    """Parameters on cuda:0 and cuda:1, a GradScaler whose flag lives on cuda:0, an overflow on
    cuda:1: every device skips that step and follows the emulation otherwise."""
    from paddle_compat.amp import GradScaler, auto_cast

    torch.manual_seed(0)
    inits = [torch.randn(4096), torch.randn(3001)]
    runs = []
    for devices in (["cuda:0", "cuda:1"], ["cpu", "cpu"]):
        params = [torch.nn.Parameter(v.to(d)) for v, d in zip(inits, devices)]
        opt, scaler = popt.AdamW(0.01, parameters=params, fused=True), GradScaler(init_loss_scaling=8.0)
        gen = torch.Generator().manual_seed(1)
        with contextlib.ExitStack() as stack:
            if devices[0] == "cpu":
                stack.enter_context(selfcheck._gpu_formulas_on_cpu())
            for step in range(4):
                grads = [torch.randn(v.shape, generator=gen) for v in inits]
                if step == 2:
                    grads[1][5] = math.inf
                for p, g in zip(params, grads):
                    p.grad = (g * 8.0).to(p.device)
                with auto_cast(dtype="float16"):
                    scaled = scaler.scale(torch.zeros((), device=devices[0]))
                scaler.minimize(opt, scaled)
        runs.append(([p.detach().cpu() for p in params], scaler.get_skipped_steps()))
    assert runs[0][1] == runs[1][1] == 1
    assert selfcheck._same_bits(runs[0][0], runs[1][0])


@pytest.mark.cuda
@needs_cuda
def test_cuda_a_later_variant_failing_to_compile_falls_back_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _multi_tensor.kernels(torch.device("cuda"))
    if mod is None:
        pytest.skip("no Triton")
    monkeypatch.setattr(mod, "adam_kernel", _FailsToCompileUnaligned(mod.adam_kernel))
    monkeypatch.setattr(_multi_tensor, "_modules", dict(_multi_tensor._modules))
    make = lambda ps: popt.AdamW(0.01, parameters=ps)  # noqa: E731
    fell_back = train(make, torch.float32, torch.float32, False, (4096, 4099), device="cuda")
    use_native(monkeypatch, False)
    assert_same_run(fell_back, train(make, torch.float32, torch.float32, False, (4096, 4099), device="cuda"))


@pytest.mark.cuda
@needs_cuda
@pytest.mark.parametrize("with_scaler, decr_every", [(False, 1), (True, 1), (True, 2)],
                         ids=["torch-recipe", "with-grad-scaler", "with-grad-scaler-paddle-rule"])
def test_cuda_whole_training_step_captured_in_a_graph(with_scaler, decr_every) -> None:
    """Replays through injected overflows and growth: the scale moves as eager steps move it."""
    result = selfcheck._graph_check("cuda", with_scaler, decr_every)
    assert result.verdict == "PASS", result.detail


@pytest.mark.cuda
@needs_cuda
def test_cuda_eager_steps_around_a_replay_read_their_own_gradients_and_rate() -> None:
    """A replay rewrites the device tables to the captured gradients and rate, unseen by the host:
    an eager step after it must write its own even where they look unchanged to the host, and a
    rate moved before the capture is the one replays use. Powers of two: every value is exact."""
    params = [torch.nn.Parameter(torch.ones(1024, device="cuda")) for _ in range(2)]
    eager = [torch.full_like(p, 0.5) for p in params]
    static = [torch.full_like(p, 2.0) for p in params]
    opt = popt.SGD(0.25, parameters=params)

    def step(grads: list[torch.Tensor], lr: float) -> None:
        opt.set_lr(lr)
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()

    step(eager, 0.25)  # the plan and its tables, made eagerly: 1 - 0.125
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(static, 0.5)  # recorded, not run
    step(eager, 0.25)  # - 0.125
    graph.replay()  # - 0.5 * 2
    step(eager, 0.25)  # - 0.125, reading the eager gradients at the eager rate
    torch.cuda.synchronize()
    for p in params:
        assert torch.equal(p.detach(), torch.full_like(p, -0.375))
