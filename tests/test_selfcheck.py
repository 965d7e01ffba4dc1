"""``python -m paddle_compat.selfcheck``: green on this machine's CPU, red when a check fails."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from paddle_compat import _native, selfcheck
from paddle_compat.optimizer import _cases

ROOT = Path(__file__).resolve().parent.parent


def test_the_cpu_battery_passes_in_a_fresh_process(tmp_path: Path) -> None:
    out = tmp_path / "selfcheck.json"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PADDLE_COMPAT_")}, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "paddle_compat.selfcheck", "--device", "cpu", "--json", str(out)],
        capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["passed"] is True
    checks = {r["check"]: r["verdict"] for r in report["results"]}
    details = {r["check"]: r["detail"] for r in report["results"]}
    for name in selfcheck.CONFIGS:
        for label in selfcheck.DTYPES:
            check = f"{name} [{label}]"
            # SKIP only where the compiled kernels take no row (the forms would meet themselves)
            assert checks[check] == "PASS" or (
                checks[check] == "SKIP" and "do not take these dtypes" in details[check] and label != "fp32"
            ), check
    skipped = [check for check, verdict in checks.items() if verdict == "SKIP" and "[" in check]
    assert skipped == ["Rprop range, etas [bf16+master]", "Rprop range, etas [fp16+master, fp32 main_grad]"]
    assert checks["GradScaler trajectory with injected overflow"] == "PASS"
    assert "0 failed" in proc.stdout


def test_the_battery_runs_every_configuration_of_the_optimizers_table() -> None:
    """Every optimizer of the package (the table of ``optimizer/_cases``), each of its
    configurations, on the CPU; on a GPU those with GPU kernels."""
    names = [entry.title(config) for entry in _cases.TABLE for config in entry.configs]
    assert list(selfcheck.CONFIGS) == names
    params = [torch.nn.Parameter(torch.ones(3)) for _ in range(2)]
    built = [type(make(params, False)) for make in selfcheck.CONFIGS.values()]
    assert set(built) == {entry.cls for entry in _cases.TABLE}
    gpu = {type(make(params, False)) for make in selfcheck.CONFIGS.values() if make.entry.gpu_kernels}
    assert gpu == {entry.cls for entry in _cases.TABLE if entry.gpu_kernels}


def test_without_the_compiled_kernels_the_cpu_comparisons_are_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch forms are not compared with themselves: a user sees SKIP, not a PASS that proves nothing."""
    monkeypatch.setattr(selfcheck, "CONFIGS", {"SGD": selfcheck.CONFIGS["SGD"]})
    monkeypatch.setattr(selfcheck, "DTYPES", {"fp32": selfcheck.DTYPES["fp32"]})
    monkeypatch.setattr(_native, "status", lambda: _native.NativeStatus(False, "not built"))
    (result,) = selfcheck._optimizer_checks("cpu")
    assert result.verdict == "SKIP" and "not used" in result.detail


def test_a_dtype_mix_the_compiled_kernels_do_not_take_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the compiled kernels take no row the torch form would be compared with itself: SKIP."""
    name = "Rprop range, etas"
    monkeypatch.setattr(selfcheck, "CONFIGS", {name: selfcheck.CONFIGS[name]})
    monkeypatch.setattr(selfcheck, "DTYPES", {k: selfcheck.DTYPES[k] for k in ("fp32", "bf16+master")})
    taken, skipped = selfcheck._optimizer_checks("cpu")
    assert (taken.verdict, skipped.verdict) == ("PASS", "SKIP") and "do not take these dtypes" in skipped.detail


def test_the_help_says_what_the_battery_is(capsys) -> None:
    with pytest.raises(SystemExit):
        selfcheck.main(["--help"])
    out = capsys.readouterr().out
    assert "``" not in out and "exit status is 0 only without a FAIL" in out


def test_a_failing_check_makes_the_exit_status_1(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(selfcheck, "CONFIGS", {"SGD": selfcheck.CONFIGS["SGD"]})
    monkeypatch.setattr(selfcheck, "DTYPES", {"fp32": selfcheck.DTYPES["fp32"]})
    monkeypatch.setattr(selfcheck, "_same_bits", lambda a, b: False)
    assert selfcheck.main(["--device", "cpu"]) == 1
    out = capsys.readouterr().out
    assert "SGD [fp32]" in out and "FAIL" in out


def test_a_crashing_check_is_a_failure_not_a_crash(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(selfcheck, "CONFIGS", {})

    def broken(device):
        raise RuntimeError("no such kernel")

    monkeypatch.setattr(selfcheck, "_scaler_check", broken)
    assert selfcheck.main(["--device", "cpu"]) == 1
    assert "RuntimeError: no such kernel" in capsys.readouterr().out


def test_each_verdict_is_printed_as_it_comes(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """A long battery shows its verdicts as they come: each check sees the verdicts before it on
    the terminal already."""
    monkeypatch.setattr(selfcheck, "CONFIGS", {"SGD": selfcheck.CONFIGS["SGD"]})
    monkeypatch.setattr(selfcheck, "DTYPES", {"fp32": selfcheck.DTYPES["fp32"], "fp64": selfcheck.DTYPES["fp64"]})
    monkeypatch.setattr(_native, "status", lambda: _native.NativeStatus(True, "pretended", "x", "y"))
    monkeypatch.setattr(selfcheck, "_train", lambda make, dtypes, device: [])
    monkeypatch.setattr(selfcheck, "_counting_rows", lambda: contextlib.nullcontext([1]))  # rows "added"
    shown = []  # what the terminal showed when each comparison ran

    def same_bits(a, b):
        shown.append(capsys.readouterr().out)
        return True

    monkeypatch.setattr(selfcheck, "_same_bits", same_bits)
    monkeypatch.setattr(selfcheck, "_recorded_checks", lambda: [same_bits(None, None) and selfcheck.Result(
        "Paddle's recorded bits", selfcheck.PASS, "pretended")])
    monkeypatch.setattr(selfcheck, "_scaler_check", lambda device: same_bits(None, None) and selfcheck.Result(
        "GradScaler trajectory with injected overflow", selfcheck.PASS, "pretended"))
    assert selfcheck.main(["--device", "cpu"]) == 0
    assert shown[0].startswith("versions") and "\ncompiled CPU kernels" in shown[0]  # the environment's
    assert shown[1:] == ["SGD [fp32]  PASS  compiled kernels vs torch forms\n",
                         "SGD [fp64]  PASS  compiled kernels vs torch forms\n",
                         "Paddle's recorded bits  PASS  pretended\n"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_cuda_without_a_gpu_is_refused() -> None:
    with pytest.raises(SystemExit) as info:
        selfcheck.main(["--device", "cuda"])
    assert info.value.code == 2


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_cuda_battery_passes() -> None:
    results = selfcheck.run("cuda")
    assert [r for r in results if r.verdict == "FAIL"] == []


@pytest.mark.parametrize("where", ["missing/selfcheck.json", "."])
def test_an_unwritable_json_path_is_refused_before_the_battery(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def battery(device: str) -> list:
        raise AssertionError("the battery ran")

    monkeypatch.setattr(selfcheck, "run", battery)
    path = tmp_path / where
    with pytest.raises(SystemExit) as info:
        selfcheck.main(["--device", "cpu", "--json", str(path)])
    assert info.value.code == 2
    reason = "No such file or directory" if where != "." else "Is a directory"
    assert capsys.readouterr().err.endswith(f"error: --json: cannot write {path}: {reason}\n")


def test_a_writable_json_path_is_not_left_behind_by_the_check(tmp_path: Path) -> None:
    path = tmp_path / "selfcheck.json"
    assert selfcheck._unwritable(str(path)) is None and not path.exists()
