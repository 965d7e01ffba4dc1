"""The compiled CPU kernels and the GPU kernels read memory through raw pointers: only plain dense
tensors may reach them (``_devices.addressable``). Every other kind takes the torch forms, or the
step raises an error naming the parameter; a crash of the process is never an outcome."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import paddle_compat.optimizer as popt
from paddle_compat import _devices, _native

from . import optim_db
from .test_optimizer_kernels import keep_hardware_rsqrt, needs_compiler, same_bits, spy, use_native

ROOT = Path(__file__).resolve().parent.parent


def fresh_python(code: str, cwd: Path, timeout: int, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a fresh process (where a crash kills the child only), with this checkout's
    package and the compiled kernels as a user has them (``PADDLE_COMPAT_NATIVE`` unset); it must exit 0."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    environ.pop("PADDLE_COMPAT_NATIVE", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env=environ, cwd=cwd)
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc
CLASSES = optim_db.CLASSES  # every optimizer of the case table


class Tagged(torch.Tensor):
    """A tensor subclass (as libraries make them): its pointer is the wrapper's business."""


def _run(cls, make_param, make_grad, steps=2):
    gen = torch.Generator().manual_seed(0)
    inits = [torch.randn(6, 5, generator=gen) for _ in range(2)]
    params = [torch.nn.Parameter(make_param(v.clone())) for v in inits]
    opt = cls(0.1, parameters=params)
    for _ in range(steps):
        for p in params:
            p.grad = make_grad(torch.randn(6, 5, generator=gen))
        opt.step()
    return [torch.Tensor(p.detach()).as_subclass(torch.Tensor) for p in params]


@needs_compiler
@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize(("kind", "make_param", "make_grad"), [
    ("subclass", lambda v: v.as_subclass(Tagged), lambda g: g.as_subclass(Tagged)),
    ("negative view", lambda v: v, lambda g: torch._neg_view(-g)),
    ("non-contiguous", lambda v: v.t().contiguous().t(), lambda g: g.t().contiguous().t()),
], ids=lambda x: x if isinstance(x, str) else "")
def test_tensors_the_kernels_cannot_address_take_the_torch_forms(cls, kind, make_param, make_grad, monkeypatch):
    rows = spy(monkeypatch, _native.Batch, ["add"])
    got = _run(cls, make_param, make_grad)
    assert rows == []
    monkeypatch.undo()
    keep_hardware_rsqrt(monkeypatch)  # the torch forms' float32 roots, as beside the kernels
    use_native(monkeypatch, False)
    plain = _run(cls, lambda v: v.t().contiguous().t() if kind == "non-contiguous" else v, lambda g: g)
    assert all(same_bits(a, b) for a, b in zip(got, plain))


def test_the_kernels_door_refuses_what_it_cannot_address() -> None:
    plain = torch.zeros(4)
    batch = _native.Batch()
    for other in (plain.as_subclass(Tagged), torch.zeros(4, device="meta"), torch._neg_view(plain)):
        with pytest.raises(TypeError, match="plain dense tensors"):
            batch.add(plain, other, None)
        assert not _devices.addressable(other)
    assert len(batch) == 0 and _devices.addressable(torch.nn.Parameter(plain))


@pytest.mark.parametrize("cls", CLASSES)
def test_meta_parameters_step_or_name_the_parameter(cls) -> None:
    p = torch.nn.Parameter(torch.zeros(4, device="meta"))
    p.grad = torch.zeros(4, device="meta")
    try:
        cls(0.1, parameters=[p]).step()
    except TypeError as error:
        assert str(error).startswith(f"{cls.__name__} cannot update parameter 0 of parameter group 0"), error
    assert p.device.type == "meta"


@pytest.mark.parametrize("cls", CLASSES)
def test_fake_tensors_step_or_name_the_parameter(cls) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        p = torch.nn.Parameter(torch.zeros(4))
        p.grad = torch.ones(4)
        try:
            cls(0.1, parameters=[p]).step()
        except TypeError as error:
            assert f"{cls.__name__} cannot update parameter 0 of parameter group 0" in str(error), error


def test_a_sparse_parameter_is_refused_by_name() -> None:
    dense = torch.nn.Parameter(torch.ones(3))
    sparse = torch.nn.Parameter(torch.eye(3).to_sparse())
    with pytest.raises(TypeError, match=r"^parameter 1 of parameter group 0 is a torch.sparse_coo tensor"):
        popt.SGD(0.1, parameters=[dense, sparse])
    opt = popt.Adam(0.1, parameters=[dense])
    with pytest.raises(TypeError, match=r"^parameter 0 of parameter group 1 is a torch.sparse_coo tensor"):
        opt.add_param_group({"params": [sparse]})
    assert len(opt.param_groups) == 1


_DTENSOR_STEP = textwrap.dedent("""
    import os, sys, tempfile
    import torch, torch.distributed as dist
    from torch.distributed.tensor import DeviceMesh, Shard, distribute_tensor
    from tests.optim_db import CLASSES

    dist.init_process_group("gloo", rank=0, world_size=1, init_method="file://" + tempfile.mktemp())
    mesh = DeviceMesh("cpu", [0])
    for cls in CLASSES:
        p = torch.nn.Parameter(distribute_tensor(torch.randn(8, 4), mesh, [Shard(0)]))
        p.grad = distribute_tensor(torch.randn(8, 4), mesh, [Shard(0)])
        try:
            cls(0.1, parameters=[p]).step()
            print(cls.__name__, "stepped")
        except TypeError as error:
            print(cls.__name__, "refused:", error)
    dist.destroy_process_group()
""")


def test_dtensor_parameters_never_crash_the_process(tmp_path: Path) -> None:
    """A DTensor shard (FSDP2's parameters) handed to the compiled kernels killed the process; it
    must step through the torch forms or raise naming the parameter."""
    proc = fresh_python(_DTENSOR_STEP, tmp_path, 300)
    lines = proc.stdout.splitlines()
    assert len(lines) == len(CLASSES)
    for line in lines:
        name = line.split(" ", 1)[0]
        whole = f"{name} refused: {name} cannot update sharded parameters (DTensor: FSDP2, tensor parallel)"
        assert line.endswith("stepped") or "cannot update parameter 0 of parameter group 0" in line or (
            name in ("Lamb", "ASGD") and line.startswith(whole)), line  # they need whole tensors, by design


def test_the_clips_sum_of_squares_reads_only_plain_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from paddle_compat.nn.clip import squared_l2_norms

    calls = spy(monkeypatch, _native.Kernels, ["sumsq"])
    x = torch.randn(100)
    (tagged,) = squared_l2_norms([x.as_subclass(Tagged)])
    assert calls == [] and same_bits(torch.Tensor(tagged).as_subclass(torch.Tensor), squared_l2_norms([x])[0])
    with FakeTensorMode():
        (fake,) = squared_l2_norms([torch.randn(100)])
    assert fake.shape == () and calls == ["sumsq"]  # the plain one only
