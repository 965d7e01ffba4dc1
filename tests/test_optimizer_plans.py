"""What an optimizer's kept plan depends on (``optimizer/_engine.py``): the state tensors the user
replaces, a cleared state, the gradients' sizes, devices and dtypes, and the rate, which moves
without a new plan.

The oracle is the same optimizer made fresh (no plan yet) and loaded with the state at that point:
it steps on new rows, with the same kernels, so the bits must agree.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

import paddle_compat.optimizer as popt
from paddle_compat import _devices, _native
from paddle_compat.optimizer import _multi_tensor
from tests.optim_db import CLASSES, new
from tests.test_kernel_door import fresh_python
from tests.test_optimizer_kernels import interpreted_gpu_path  # noqa: F401

ROOT = Path(__file__).resolve().parents[1]
SIZES = (5, 300, 7)
STATEFUL = [cls for cls in CLASSES if cls is not popt.SGD]


def _params(seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in SIZES]


def _grads(params: list[torch.nn.Parameter], step: int) -> None:
    """This step's gradients, written into the ones there are (as after Paddle's ``clear_grad()``:
    the kept rows then point at the same gradients, and only what changed is rewritten)."""
    gen = torch.Generator().manual_seed(100 + step)
    for p in params:
        g = (torch.randn(p.shape, generator=gen) * 0.1).to(p.dtype)
        if p.grad is None:
            p.grad = g
        else:
            p.grad.copy_(g)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(-1).view(torch.uint8),
                                                                      b.view(-1).view(torch.uint8))


def _assert_same(opt, params, ref, ref_params) -> None:
    for p, q in zip(params, ref_params):
        assert _same_bits(p.detach(), q.detach())
        assert opt.state[p].keys() == ref.state[q].keys()
        for key, value in opt.state[p].items():
            if isinstance(value, torch.Tensor):
                assert _same_bits(value, ref.state[q][key]), key


def _fresh_copy(cls, opt, params, grouping=list):
    """The oracle: a new optimizer (no plan) on copies of ``params`` (in ``grouping(params)``'s
    groups), loaded with ``opt``'s state."""
    ref_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    ref = new(cls, 0.01, grouping(ref_params))
    ref.load_state_dict(opt.state_dict())
    return ref, ref_params


def _first_param_shaped(opt, p) -> str:
    return next(k for k, v in opt.state[p].items() if isinstance(v, torch.Tensor) and v.shape == p.shape)


def _run_after(cls, change, steps: int = 2, params=None, grouping=list):
    """Two steps, ``change(opt, params)``, then ``steps`` more, against a fresh copy made after the
    change (``params``: ``_params()`` unless given, in ``grouping(params)``'s groups)."""
    params = _params() if params is None else params
    opt = new(cls, 0.01, grouping(params))
    for step in range(2):
        _grads(params, step)
        opt.step()
    change(opt, params)
    ref, ref_params = _fresh_copy(cls, opt, params, grouping)
    for step in range(2, 2 + steps):
        _grads(params, step)
        _grads(ref_params, step)
        opt.step()
        ref.step()
    _assert_same(opt, params, ref, ref_params)
    assert list(opt.state_dict()["state"]) == list(ref.state_dict()["state"])
    return opt


@pytest.mark.parametrize("cls", STATEFUL, ids=lambda c: c.__name__)
def test_a_state_tensor_put_in_place_of_another_is_the_one_updated(cls) -> None:
    replaced = {}

    def reset(opt, params):
        for p in params:
            key = _first_param_shaped(opt, p)
            replaced[p] = (key, torch.zeros_like(opt.state[p][key]))
            opt.state[p][key] = replaced[p][1]

    opt = _run_after(cls, reset)
    for p, (key, tensor) in replaced.items():
        assert opt.state[p][key] is tensor and tensor.any()  # the user's tensor, stepped


def offload(opt, params) -> None:
    """Each parameter's first moment given other memory (``.data = ...``): the same tensor object."""
    for p in params:
        key = _first_param_shaped(opt, p)
        opt.state[p][key].data = opt.state[p][key].detach().clone().mul_(0.5)


_OFFLOADED = textwrap.dedent("""
    from tests.test_optimizer_plans import STATEFUL, _run_after, offload
    for cls in STATEFUL:
        _run_after(cls, offload)
        print(cls.__name__, "followed")
""")


def test_a_state_tensor_given_other_memory_is_followed() -> None:
    """The rows kept the freed memory of the moment's old storage (written there: a crash), in a
    subprocess for that reason."""
    proc = fresh_python(_OFFLOADED, ROOT, 600, PYTHONWARNINGS="ignore")
    assert proc.stdout.splitlines() == [f"{cls.__name__} followed" for cls in STATEFUL]


@pytest.mark.parametrize("cls", STATEFUL, ids=lambda c: c.__name__)
def test_a_cleared_state_starts_again(cls) -> None:
    _run_after(cls, lambda opt, params: opt.state.clear())


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_a_parameter_given_other_memory_is_followed(cls) -> None:
    def move(opt, params):
        params[1].data = params[1].detach().clone()

    _run_after(cls, move)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_a_new_parameter_group_is_stepped(cls) -> None:
    params = _params()
    opt = new(cls, 0.01, params)
    _grads(params, 0)
    opt.step()
    extra = torch.nn.Parameter(torch.ones(11))
    opt.add_param_group({"params": [extra]})
    extra.grad = torch.full((11,), 0.25)
    opt.step()
    assert not torch.equal(extra.detach(), torch.ones(11))
    assert bool(opt.state[extra]) == (cls is not popt.SGD)


# --- gradients the kernels cannot read: refused before anything changes -----------------------------
_BAD_GRADS = textwrap.dedent("""
    import torch
    from paddle_compat.amp import GradScaler
    from tests.optim_db import CLASSES, new

    BAD = {
        "one": lambda: torch.ones(1),
        "twice": lambda: torch.ones(8),
        "int64": lambda: torch.ones(4, dtype=torch.int64),
        "meta": lambda: torch.ones(4, device="meta"),
    }
    for cls in CLASSES:
        for first in (False, True):
            for name, bad in BAD.items():
                p = torch.nn.Parameter(torch.arange(4.0))
                opt = new(cls, 0.01, [p])
                if not first:
                    p.grad = torch.full((4,), 0.5)
                    opt.step()
                before = p.detach().clone()
                state = {k: v.clone() for k, v in opt.state[p].items()} if p in opt.state else None
                p.main_grad = bad()
                given = p.main_grad.clone() if name != "meta" else None
                scaler = GradScaler(init_loss_scaling=4.0)
                for how in ("step", "scaler"):
                    try:
                        opt.step() if how == "step" else scaler.step(opt)
                        outcome = "stepped"
                    except (TypeError, ValueError) as error:
                        outcome = f"{type(error).__name__}: {error}"
                    step = scaler._step_state  # nothing unscaled, no flag, the scale as it was
                    unchanged = torch.equal(p.detach(), before) and (
                        p not in opt.state if state is None
                        else all(torch.equal(opt.state[p][k], v) for k, v in state.items())
                    ) and (given is None or torch.equal(p.main_grad, given)) and (
                        scaler.get_scale() == 4.0 and not step.optimizer_states and step.found_inf is None
                    )
                    print(cls.__name__, "first" if first else "later", name, how,
                          "unchanged" if unchanged else "CHANGED", outcome, sep=" | ")
""")


def test_a_gradient_of_another_size_device_or_dtype_is_refused_by_name(tmp_path: Path) -> None:
    """A main_grad of another size read at the parameter's size crashed the process (or was read
    past its end, or broadcast): each must be refused naming the parameter, with nothing changed."""
    proc = fresh_python(_BAD_GRADS, ROOT, 600)
    lines = proc.stdout.splitlines()
    assert len(lines) == len(CLASSES) * 2 * 4 * 2
    expected = {
        "one": "ValueError: {cls}: the main_grad of parameter 0 of parameter group 0 has shape [1], "
               "but the parameter has shape [4]",
        "twice": "ValueError: {cls}: the main_grad of parameter 0 of parameter group 0 has shape [8], "
                 "but the parameter has shape [4]",
        "int64": "TypeError: {cls}: the main_grad of parameter 0 of parameter group 0 has dtype torch.int64; "
                 "a gradient is float16, bfloat16, float32 or float64",
        "meta": "TypeError: {cls}: the main_grad of parameter 0 of parameter group 0 is on meta, "
                "but the parameter is on cpu",
    }
    for line in lines:
        cls, _, name, _, unchanged, outcome = line.split(" | ")
        assert unchanged == "unchanged", line
        assert outcome == expected[name].format(cls=cls), line


# --- the rate: a scheduler's new rate is written into the kept rows ----------------------------------
def _scheduled_run(cls, rebuild: bool, dtype=torch.float32, ratio: float | None = None, steps: int = 4):
    params = [torch.nn.Parameter(p.detach().to(dtype)) for p in _params()]
    if ratio is not None:
        params[0].optimize_attr = {"learning_rate": ratio}
    sched = popt.lr.CosineAnnealingDecay(learning_rate=0.01, T_max=5)
    opt = new(cls, sched, params)
    for step in range(steps):
        _grads(params, step)
        if rebuild:
            opt._compat_engine._plans.clear()  # a new plan at every step: the rows made for this rate
        opt.step()
        sched.step()
    return params, opt


SCHEDULED = [cls for cls in CLASSES if cls is not popt.Rprop]  # Rprop's rate is only its first step size


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("cls", SCHEDULED, ids=lambda c: c.__name__)
def test_a_scheduler_moves_the_rate_of_the_kept_rows(cls, dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[int] = []
    original = cls._compiled_row

    def counting(self, *args, **kwargs):
        built.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, "_compiled_row", counting)
    kept = _scheduled_run(cls, False, dtype, ratio=0.3)
    rows = len(built)
    rebuilt = _scheduled_run(cls, True, dtype, ratio=0.3)
    _assert_same(kept[1], kept[0], rebuilt[1], rebuilt[0])
    if _native.kernels() is not None and rows and cls is not popt.Lamb:
        assert rows == len(SIZES), "a new rate made a new plan"  # Lamb asks its callback at every step


def test_set_lr_is_followed_by_the_kept_rows() -> None:
    runs = []
    for rebuild in (False, True):
        params = _params()
        opt = popt.SGD(0.1, parameters=params)
        for step, lr in enumerate((0.1, 0.05, 0.025)):
            opt.set_lr(lr)
            _grads(params, step)
            if rebuild:
                opt._compat_engine._plans.clear()
            opt.step()
        runs.append(params)
    for p, q in zip(*runs):
        assert _same_bits(p.detach(), q.detach())


# --- the GPU tables after a CUDA graph capture (the host side, on the CPU) ---------------------------
def test_an_eager_step_after_a_replay_rewrites_the_gradient_table(
    interpreted_gpu_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replay rewrites the tables to the captured gradients unseen by the host: an eager step
    after it must write its own, even when its gradients are where the host last wrote them."""

    def run(replayed: bool) -> list[torch.Tensor]:
        params = [torch.nn.Parameter(torch.ones(8)) for _ in range(2)]
        eager = [torch.full((8,), 0.5) for _ in params]
        captured = [torch.full((8,), 2.0) for _ in params]
        opt = popt.SGD(0.25, parameters=params)
        for p, g in zip(params, eager):
            p.grad = g
        opt.step()
        monkeypatch.setattr(_devices, "capturing", lambda device: True)
        for p, g in zip(params, captured):
            p.grad = g
        opt.step()  # "captured": the tables now hold the captured gradients' offsets
        monkeypatch.setattr(_devices, "capturing", lambda device: False)
        for p, g in zip(params, eager):
            p.grad = g
        opt.step()  # eager again: the host writes the eager gradients' offsets
        batch = next(iter(opt._compat_engine._plans[id(opt.param_groups[0])].multi_tensor.values()))[0]
        if replayed:  # what a replay does: the captured offsets back in the table
            for launch in batch.launches:
                origin = launch.base.data_ptr()
                launch.grads.copy_(torch.tensor([captured[i].data_ptr() - origin for i in launch.members]))
        opt.step()
        return [p.detach().clone() for p in params]

    assert all(torch.equal(a, b) for a, b in zip(run(True), run(False)))


def test_a_plan_is_never_made_inside_a_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """Making the GPU tables copies from host memory: refused inside a capture, with nothing written."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(_devices, "gpu_kernels", lambda t: True)
    if _multi_tensor.kernels(torch.device("cpu")) is None:
        pytest.skip("this Triton cannot interpret the kernels")
    monkeypatch.setattr(_devices, "capturing", lambda device: True)
    params = _params()
    _grads(params, 0)
    before = [p.detach().clone() for p in params]
    opt = popt.Adam(0.01, parameters=params)
    with pytest.raises(_multi_tensor.CaptureError, match="cannot be made inside a CUDA graph capture"):
        opt.step()
    assert all(torch.equal(p.detach(), b) for p, b in zip(params, before))


def _replay(opt: popt.Optimizer, captured: list[torch.Tensor]) -> None:
    """What a replay of a captured step does: the captured gradients' offsets back in the tables
    (the capture's fill kernels), the kernels launched on the tables as the device holds them (and
    the device work of ``_finish_update``: Adamax's beta power), and none of the host's Python."""
    group = opt.param_groups[0]
    plan = opt._compat_engine._plans[id(group)]
    ((device, (batch, _)),) = plan.multi_tensor.items()
    for launch in batch.launches:
        origin = launch.base.data_ptr()
        launch.grads.copy_(torch.tensor([captured[i].data_ptr() - origin for i in launch.members]))
        opt._multi_tensor_call(plan.kernels[device], launch, group, None)
    opt._finish_update([(group, list(zip(group["params"], captured)))])


@pytest.mark.parametrize("cls", SCHEDULED, ids=lambda c: c.__name__)
def test_a_replayed_step_follows_the_scheduler(cls, interpreted_gpu_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheduler of ours stepped between replays writes its rate to the device tables, where the
    replayed kernels read it: the replays step as eager steps at the scheduler's rates do."""

    def run(replayed: bool) -> list[torch.Tensor]:
        params = [torch.nn.Parameter(torch.linspace(-1.0, 1.0, 8)) for _ in range(2)]
        sched = popt.lr.CosineAnnealingDecay(0.25, T_max=10)
        opt = new(cls, sched, params, weight_decay=0.1)
        for p in params:
            p.grad = torch.full((8,), 0.5)
        opt.step()  # eager: the plan and its tables
        sched.step()
        captured = [torch.full((8,), 2.0) for _ in params]
        for p, g in zip(params, captured):
            p.grad = g
        monkeypatch.setattr(_devices, "capturing", lambda device: True)
        opt.step()  # "captured" (it runs here, as the first replay)
        monkeypatch.setattr(_devices, "capturing", lambda device: False)
        for _ in range(2):
            sched.step()
            if replayed:
                _replay(opt, captured)
            else:
                opt.step()
        return [p.detach().clone() for p in params]

    assert all(torch.equal(a, b) for a, b in zip(run(True), run(False)))


def test_a_new_rate_inside_a_capture_is_refused(interpreted_gpu_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rate set inside a capture could not be recorded (the tables' rates are written eagerly):
    refused, by a scheduler's step and by a step, with nothing written."""
    params = _params()
    _grads(params, 0)
    sched = popt.lr.StepDecay(0.01, step_size=1)
    opt = popt.Adam(sched, parameters=params)
    opt.step()
    monkeypatch.setattr(_devices, "capturing", lambda device: True)
    opt.step()  # the same rate: fine
    before = [p.detach().clone() for p in params]
    with pytest.raises(_multi_tensor.CaptureError, match="a new learning rate inside a CUDA graph capture"):
        sched.step()
    opt.param_groups[0]["lr"] = 0.5  # as torch's schedulers set it
    opt._compat_lr_scheduler = None
    with pytest.raises(_multi_tensor.CaptureError, match="a new learning rate inside a CUDA graph capture"):
        opt.step()
    assert all(torch.equal(p.detach(), b) for p, b in zip(params, before))


# --- a GPU-only run, and Triton's interpreter with CUDA tensors -------------------------------------
def test_a_gpu_only_step_never_looks_for_the_cpu_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parameters all on a GPU (stood for by the GPU formulas on CPU tensors, without the Triton
    kernels): the CPU kernels are never loaded, so a machine without them gives no warning."""
    asked = []
    monkeypatch.setattr(_devices, "gpu_kernels", lambda t: True)
    monkeypatch.setattr(_multi_tensor, "kernels", lambda device: None)
    monkeypatch.setattr(_native, "kernels", lambda: asked.append(1))
    params = _params()
    _grads(params, 0)
    popt.Momentum(0.01, parameters=params).step()
    assert asked == []


def test_the_triton_interpreter_refuses_cuda_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton")
    monkeypatch.setattr(_multi_tensor, "_interpreting", lambda: True)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET=1 runs Triton kernels on the host, which cannot read"):
        _multi_tensor.kernels(torch.device("cuda"))


@pytest.mark.parametrize("change", ["state", "rate"])
@pytest.mark.parametrize("cls", STATEFUL, ids=lambda c: c.__name__)
def test_the_gpu_tables_follow_a_replaced_state_or_a_new_rate(
    cls, change, interpreted_gpu_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same on the GPU path (its Triton kernels, interpreted on CPU tensors): a state tensor put
    in place of another, or a new rate (written into the kept tables), against a fresh copy."""

    def reset_or_rate(opt, params):
        if change == "rate":
            opt.set_lr(0.005)
            return
        for p in params:
            key = _first_param_shaped(opt, p)
            opt.state[p][key] = torch.zeros_like(opt.state[p][key])

    _run_after(cls, reset_or_rate)
    assert interpreted_gpu_path


def test_a_new_rate_rewrites_the_rate_columns_only(interpreted_gpu_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheduler's step writes the GPU tables' rate columns, once; the step after it, on the same
    gradients, uploads nothing (the gradients' offsets have not moved)."""
    params = _params()
    _grads(params, 0)
    sched = popt.lr.StepDecay(0.01, step_size=1)
    opt = popt.Adam(sched, parameters=params)
    opt.step()
    written = []
    real = _multi_tensor._write
    monkeypatch.setattr(_multi_tensor, "_write", lambda table, *a: (written.append(table.stride()), real(table, *a)))
    sched.step()
    assert written and set(written) == {(_native.PER,)}
    written.clear()
    opt.step()
    assert written == []
