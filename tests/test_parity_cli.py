"""``python -m paddle_compat.parity``: exit status 0 (agree / recorded), 1 (diverged / script failed),
2 (usage errors)."""

from __future__ import annotations

import os
import runpy
import select
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from paddle_compat.parity import Trace
from paddle_compat.parity.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def traces(tmp_path):
    w = np.linspace(-1, 1, 6, dtype=np.float32)
    same, other = Trace({"layout": "torch"}), Trace({"layout": "torch"})
    for t, last in ((same, w), (other, np.nextafter(w, np.float32(2)))):
        t.add_step({"loss": 1.0, "scale": 8.0, "found_inf": False}, {"param/w": w})
        t.add_step({"loss": 0.5, "scale": 8.0, "found_inf": False}, {"param/w": last})
    same.save(tmp_path / "a")
    other.save(tmp_path / "b")
    return tmp_path


def test_compare_exit_status(traces, capsys):
    assert main(["compare", str(traces / "a"), str(traces / "a"), "--exact"]) == 0
    assert "bitwise equal" in capsys.readouterr().out
    assert main(["compare", str(traces / "a"), str(traces / "b")]) == 0  # 1 ulp: within float32's tolerance
    assert main(["compare", str(traces / "a"), str(traces / "b"), "--exact", "--json", str(traces / "c.json")]) == 1
    out = capsys.readouterr().out
    assert "first divergence at step 1, param/w[0]: bits differ" in out and "1 ulps apart" in out
    assert (traces / "c.json").read_text().startswith("{")
    assert main(["compare", str(traces / "a"), str(traces / "b"), "--rtol", "0", "--atol", "0"]) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["compare", "a", "missing"], "no trace at"),
        (["compare", "a", "a", "--rtol", "1e-3"], "give --rtol and --atol together"),
        (["compare", "a", "a", "--exact", "--rtol", "0", "--atol", "0"], "--exact compares bits"),
        (["report", "a", "b", "--format", "pdf"], "--format: choose among"),
        (["compare", "a", "a", "--json", "no-folder/c.json"], "--json: cannot write no-folder/c.json"),
        (["report", "a", "a", "-o", "a.json"], "-o: cannot write the report into a.json"),
    ],
)
def test_usage_errors(traces, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(traces)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_argparse_errors_exit_2():
    with pytest.raises(SystemExit) as e:
        main(["compare", "only-one"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        main([])
    assert e.value.code == 2


def test_report(traces, capsys):
    assert main(["report", str(traces / "a"), str(traces / "b"), "--exact", "-o", str(traces / "rep")]) == 1
    assert sorted(p.name for p in (traces / "rep").iterdir()) == ["report.json", "report.md", "report.png"]
    assert main(["report", str(traces / "a"), str(traces / "a"), "-o", str(traces / "md"), "--format", "md"]) == 0
    assert [p.name for p in (traces / "md").iterdir()] == ["report.md"]


SCRIPT = """
import sys
print("the script runs", sys.argv[1:])
if "--fail" in sys.argv:
    raise SystemExit("the script failed on purpose")
if "--no-save" in sys.argv:
    raise SystemExit(0)
import torch
from paddle_compat.parity import TraceRecorder
torch.manual_seed(0)
rec = TraceRecorder(torch.nn.Linear(2, 1))
for _ in range(3):
    rec.record(torch.tensor(0.25))
rec.save()
"""


def test_record(tmp_path, capsys, monkeypatch):
    script = tmp_path / "side.py"
    script.write_text(textwrap.dedent(SCRIPT))
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    assert main(["record", "-o", str(tmp_path / "t"), str(script)]) == 0
    assert "recorded 3 steps" in capsys.readouterr().out
    assert len(Trace.load(tmp_path / "t")) == 3
    assert main(["record", "-o", str(tmp_path / "t"), str(script), "--fail"]) == 1
    assert "the script failed on purpose" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()  # the stale trace is gone
    assert main(["record", "-o", str(tmp_path / "u"), str(script), "--no-save"]) == 1
    assert "without saving a trace" in capsys.readouterr().err
    assert main(["record", "-o", str(tmp_path / "u"), str(tmp_path / "nope.py")]) == 2


def test_module_entry_point(traces, monkeypatch, capsys):
    """``python -m paddle_compat.parity`` runs ``main`` and exits with its status (run in-process)."""
    monkeypatch.setattr(
        sys, "argv", ["paddle_compat.parity", "compare", str(traces / "a"), str(traces / "b"), "--exact"]
    )
    with pytest.raises(SystemExit) as e:
        runpy.run_module("paddle_compat.parity", run_name="__main__")
    assert e.value.code == 1 and "first divergence at step 1" in capsys.readouterr().out


def test_damaged_trace_exits_2(traces, capsys):
    """The documented status for an unreadable trace is 2 (1 means: the runs diverge)."""
    data = (traces / "b.npz").read_bytes()
    (traces / "b.npz").write_bytes(data[: len(data) // 2])
    assert main(["compare", str(traces / "a"), str(traces / "b")]) == 2
    err = capsys.readouterr().err
    assert "b.npz is not this trace's data" in err and "Traceback" not in err


@pytest.mark.parametrize("rtol", ["nan", "-1", "inf"])
def test_bad_tolerance_exits_2(traces, capsys, rtol):
    assert main(["compare", str(traces / "a"), str(traces / "a"), "--rtol", rtol, "--atol", "0"]) == 2
    assert "rtol should be" in capsys.readouterr().err


def test_tolerance_and_baseline_flags(traces, capsys):
    a, b = str(traces / "a"), str(traces / "b")
    assert main(["compare", a, b, "--exact"]) == 1
    assert main(["compare", a, b, "--tolerance", "param=1e-6"]) == 0  # 1 ulp: 1e-7 of the norm
    assert main(["compare", a, b, "--tolerance", "param=1e-9"]) == 1
    assert main(["compare", a, b, "--baseline", b, "--tolerance", "0"]) == 0  # b is its own noise floor
    assert main(["compare", a, b, "--tolerance", "grad=x"]) == 2
    assert "--tolerance: a number, or NAME=BOUND pairs" in capsys.readouterr().err


RUN_SCRIPT = """
import torch
from paddle_compat import optimizer
from paddle_compat.parity import TraceRecorder

torch.manual_seed(0)
model = torch.nn.Linear(3, 2)
opt = optimizer.SGD(learning_rate={lr}, parameters=model.parameters())
rec = TraceRecorder(model, opt)
for step in range(3):
    loss = model(torch.ones(4, 3) * step).pow(2).mean()
    loss.backward()
    opt.step()
    rec.record(loss)
    opt.clear_grad()
rec.save()
"""


def test_run_records_both_scripts_and_compares(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    for name, lr in (("reference.py", 0.1), ("same.py", 0.1), ("other.py", 0.2)):
        (tmp_path / name).write_text(RUN_SCRIPT.format(lr=lr))
    out = str(tmp_path / "traces")
    assert main(["run", str(tmp_path / "reference.py"), str(tmp_path / "same.py"), "-o", out, "--exact"]) == 0
    assert (tmp_path / "traces" / "paddle.json").exists() and (tmp_path / "traces" / "port.json").exists()
    assert main(["run", str(tmp_path / "reference.py"), str(tmp_path / "other.py"), "-o", out, "--exact"]) == 1
    assert "first divergence at step 0, lr" in capsys.readouterr().out
    (tmp_path / "broken.py").write_text("raise SystemExit(3)")
    # the Paddle side fails first: no second script is run
    assert main(["run", str(tmp_path / "broken.py"), str(tmp_path / "same.py"), "-o", out]) == 1
    assert "recording the paddle script failed" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "missing.py"), str(tmp_path / "same.py"), "-o", out]) == 2


LIVE = """
import pathlib, sys, time
print("step 1 of a long run")  # no flush: the recorder asks for unbuffered output
gate = pathlib.Path(sys.argv[1])
deadline = time.monotonic() + 60
while not gate.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
print("the gate opened", file=sys.stderr)
import torch
from paddle_compat.parity import TraceRecorder
rec = TraceRecorder(torch.nn.Linear(2, 1))
rec.record(torch.tensor(0.25))
rec.save()
"""


def test_record_shows_the_scripts_output_as_it_runs_and_keeps_it(tmp_path):
    """The script's first line reaches the terminal while the script is still running (it waits for
    the test to open a gate), and all of it is kept in OUT.log."""
    script, gate = tmp_path / "side.py", tmp_path / "gate"
    script.write_text(LIVE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")
    proc = subprocess.Popen([sys.executable, "-m", "paddle_compat.parity", "record", "-o", str(tmp_path / "t"),
                             str(script), str(gate)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        first = proc.stdout.readline() if ready else "(nothing within 30 s)"
        running = proc.poll() is None
    finally:
        gate.touch()
        out, err = proc.communicate(timeout=300)
    assert first == "step 1 of a long run\n" and running
    assert proc.returncode == 0, err
    assert out == "the gate opened\nrecorded 1 steps, 2 tensors -> " + str(tmp_path / "t") + "\n"
    assert (tmp_path / "t.log").read_text() == "step 1 of a long run\nthe gate opened\n"


def test_run_shows_both_scripts_output_and_keeps_it(tmp_path, capsys, monkeypatch):
    script = tmp_path / "side.py"
    script.write_text(textwrap.dedent(SCRIPT))
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    assert main(["run", str(script), str(script), "-o", str(tmp_path / "traces"), "--exact"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"recording the paddle script ({script}):\nthe script runs []\n"
                          f"recording the port script ({script}):\nthe script runs []\n"), out
    for side in ("paddle", "port"):
        assert (tmp_path / "traces" / f"{side}.log").read_text() == "the script runs []\n"


def test_run_passes_the_arguments_after_the_double_dash_to_both_scripts(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    (tmp_path / "reference.py").write_text(RUN_SCRIPT.format(lr=0.2))
    (tmp_path / "port.py").write_text(
        "import sys\n" + RUN_SCRIPT.format(lr="float(sys.argv[1]) if sys.argv[1:] else 0.1")
    )
    out = str(tmp_path / "traces")
    argv = ["run", str(tmp_path / "reference.py"), str(tmp_path / "port.py"), "-o", out, "--exact"]
    assert main(argv) == 1  # the port's default rate
    assert "first divergence at step 0, lr" in capsys.readouterr().out
    assert main([*argv, "--", "0.2"]) == 0, capsys.readouterr()
