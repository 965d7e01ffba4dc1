"""paddle_compat.parity traces: what the recorder keeps per step, files, storage, layer taps.
(Recording Paddle's own objects: tests/parity/test_parity_kit.py.)"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import paddle_compat.optimizer as popt
from paddle_compat.amp import GradScaler
from paddle_compat.parity import Trace, TraceRecorder, compare
from paddle_compat.parity.optimizer_state import beta_pow
from paddle_compat.parity.trace import ENV_OUT

INJECT = {2: float("inf"), 5: float("nan")}


def run(steps: int = 7, *, opt_cls=popt.Adam, scaler: bool = True, gelu: str = "none", **rec) -> Trace:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(approximate=gelu), torch.nn.Linear(8, 2))
    opt = (
        opt_cls(learning_rate=0.01, parameters=model.parameters())
        if opt_cls is popt.Adam
        else opt_cls(model.parameters(), lr=0.01)
    )
    sc = GradScaler(init_loss_scaling=1024.0, incr_every_n_steps=2) if scaler else None
    recorder = TraceRecorder(model, opt, sc, **rec)
    gen = torch.Generator().manual_seed(1)
    for step in range(steps):
        loss = model(torch.randn(3, 4, generator=gen)).pow(2).mean()
        if sc is not None:
            scaled = sc.scale(loss)
            scaled.backward()
            if step in INJECT:
                model[0].weight.grad[0, 0] = INJECT[step]
            sc.minimize(opt, scaled)
        else:
            loss.backward()
            opt.step()
        recorder.record(loss)
        opt.zero_grad()
    recorder.close()
    return recorder.trace


def test_scalars_per_step():
    trace = run()
    assert len(trace) == 7
    found = [s["found_inf"] for s in trace.steps]
    assert found == [False, False, True, False, False, True, False]
    scales = [s["scale"] for s in trace.steps]
    # x2 every 2 clean steps, x0.5 on each bad one
    assert scales == [1024.0, 2048.0, 1024.0, 1024.0, 2048.0, 1024.0, 1024.0]
    assert [(s["incr_count"], s["decr_count"]) for s in trace.steps][:3] == [(1, 0), (0, 0), (0, 0)]
    assert all(s["lr"] == 0.01 for s in trace.steps)
    assert math.isnan(trace.steps[5]["grad_norm"]) and trace.steps[0]["grad_norm"] > 0
    assert isinstance(trace.steps[0]["loss"], float)


def test_tensors_per_step():
    trace = run()
    names = list(trace.series)
    assert names[:4] == ["grad/0.weight", "grad/0.bias", "grad/2.weight", "grad/2.bias"]
    assert {n for n in names if n.startswith("param/")} == {
        "param/0.weight",
        "param/0.bias",
        "param/2.weight",
        "param/2.bias",
    }
    assert {n.rsplit("/", 1)[1] for n in names if n.startswith("opt/")} == {
        "moment1",
        "moment2",
        "beta1_pow_acc",
        "beta2_pow_acc",
    }
    s = trace.series["opt/0.weight/beta1_pow_acc"]
    # skipped steps leave Paddle's beta powers alone: 5 updates in 7 steps
    assert s.data[-1][0] == beta_pow(0.9, 5)
    np.testing.assert_array_equal(trace.series["param/0.weight"].data[2], trace.series["param/0.weight"].data[1])


def test_torch_optimizer_state_is_shown_as_paddles():
    """torch.optim.Adam's state under Paddle's names; before its first update (a skipped first step),
    the initial accumulators Paddle creates at its first minimize()."""
    trace = run(opt_cls=torch.optim.Adam)
    assert "opt/0.weight/moment1" in trace.series and "opt/0.weight/exp_avg" not in trace.series
    s = trace.series["opt/0.bias/beta2_pow_acc"]
    assert s.steps == list(range(7)) and s.data[0][0] == beta_pow(0.999, 1) and s.data[-1][0] == beta_pow(0.999, 5)

    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.Adam(model.parameters())
    sc = GradScaler()
    rec = TraceRecorder(model, opt, sc)
    model.weight.grad = torch.full((1, 2), float("inf"))
    model.bias.grad = torch.ones(1)
    sc.step(opt)
    sc.update()
    rec.record()
    assert rec.trace.steps[0]["found_inf"] is True
    assert not rec.trace.series["opt/weight/moment1"].data[0].any()
    assert rec.trace.series["opt/weight/beta1_pow_acc"].data[0][0] == np.float32(0.9)


def test_save_and_load(tmp_path):
    trace = run(meta={"config": "a"})
    path = trace.save(tmp_path / "t")
    assert path.name == "t.json" and (tmp_path / "t.npz").exists()
    doc = json.loads(path.read_text())  # strict JSON: non-finite floats are strings
    assert doc["steps"][5]["grad_norm"] == "nan"
    back = Trace.load(tmp_path / "t.npz")
    assert back.meta["run"] == {"config": "a"} and back.meta["framework"] == "torch"
    assert math.isnan(back.steps[5]["grad_norm"]) and back.steps[:5][:-1] == trace.steps[:5][:-1]
    for name, s in trace.series.items():
        b = back.series[name]
        assert (b.dtype, b.shape, b.steps, b.digests) == (s.dtype, s.shape, s.steps, s.digests)
        assert all(x.dtype == y.dtype and x.tobytes() == y.tobytes() for x, y in zip(b.data, s.data, strict=True))
    assert compare(trace, back, exact=True).ok
    np.testing.assert_array_equal(back.final("param/0.bias"), trace.series["param/0.bias"].data[-1])


def test_load_refuses_other_files(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ValueError, match="not a paddle_compat parity trace"):
        Trace.load(tmp_path / "x")
    with pytest.raises(FileNotFoundError):
        Trace.load(tmp_path / "missing")


def _two_traces(tmp_path):
    for name, value in (("a", 1.0), ("b", 2.0)):
        t = Trace({"layout": "torch"})
        t.add_step({"loss": 1.0}, {"param/w": np.full(3, value, np.float32)})
        t.save(tmp_path / name)
    return tmp_path / "a.json", tmp_path / "a.npz", tmp_path / "b.npz"


def _damage_npz(npz, tmp_path):
    """The npz with one array's header claiming 2**40 elements (a zip that is otherwise valid)."""
    import io
    import zipfile

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": (2**40,)})
    out = tmp_path / "forged.npz"
    with zipfile.ZipFile(npz) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, buf.getvalue() if info.filename == "0.0.npy" else zin.read(info))
    return out.read_bytes()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncated npz", r"c\.npz is not this trace's data.*File is not a zip file"),
        ("npz of another trace", r"c\.json and .*c\.npz are not the two files of one trace"),
        ("forged npz header", r"c\.npz is not this trace's data.*its header needs 4398046511"),
        ("json list", r"c\.json is not a paddle_compat parity trace"),
        ("corrupt json", r"c\.json is not a parity trace \(not JSON"),
        ("json missing steps", r"c\.json is damaged: 'steps' is not a list"),
        ("json bad tensor entry", r"c\.json is damaged: tensor entry 0"),
    ],
)
def test_load_refuses_damaged_files(tmp_path, damage, message):
    """Each is a ValueError naming the file (the command line's exit status 2), before the arrays are read."""
    jpath, npath, other = _two_traces(tmp_path)
    doc = json.loads(jpath.read_text())
    data, text = npath.read_bytes(), jpath.read_text()
    if damage == "truncated npz":
        data = data[: len(data) // 2]
    elif damage == "npz of another trace":
        data = other.read_bytes()
    elif damage == "forged npz header":
        data = _damage_npz(npath, tmp_path)
    elif damage == "json list":
        text = "[1, 2]"
    elif damage == "corrupt json":
        text = text[:-20]
    elif damage == "json missing steps":
        text = json.dumps({**doc, "steps": None})
    else:
        text = json.dumps({**doc, "tensors": [{**doc["tensors"][0], "shape": [-3]}]})
    (tmp_path / "c.json").write_text(text)
    (tmp_path / "c.npz").write_bytes(data)
    with pytest.raises(ValueError, match=message):
        Trace.load(tmp_path / "c")


def test_sampled_storage_keeps_digests():
    full, small = run(), run(full_max_elements=8, sample=4)
    s = small.series["param/0.weight"]
    assert not s.full and len(s.index) == 4 and s.data[0].shape == (4,)
    assert small.series["param/2.bias"].full  # 2 elements
    assert s.digests == full.series["param/0.weight"].digests
    assert compare(full, small, exact=True).ok and compare(small, full, exact=True).ok


def test_recorder_options_are_checked():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(TypeError, match="^sample should be an int, but received str$"):
        TraceRecorder(model, sample="16")
    with pytest.raises(ValueError, match="^sample should be >= 1, but received 0$"):
        TraceRecorder(model, sample=0)
    with pytest.raises(TypeError, match="^full_max_elements should be an int, but received float$"):
        TraceRecorder(model, full_max_elements=1e6)


def test_save_path_from_the_environment(tmp_path, monkeypatch):
    torch.manual_seed(0)
    rec = TraceRecorder(torch.nn.Linear(2, 2))
    rec.record(torch.tensor(1.5))
    monkeypatch.delenv(ENV_OUT, raising=False)
    with pytest.raises(ValueError, match=ENV_OUT):
        rec.save()
    monkeypatch.setenv(ENV_OUT, str(tmp_path / "env"))
    assert rec.save() == tmp_path / "env.json"
    t = Trace.load(tmp_path / "env")
    assert t.steps[0]["loss"] == 1.5 and t.steps[0]["scale"] is None and t.steps[0]["lr"] is None


def test_duck_typed_scalers():
    """A scaler without last_step_skipped(): the skipped-step count moves; Paddle's: _cache_found_inf."""

    class Counting:
        def __init__(self):
            self.n = 0

        def get_skipped_steps(self):
            return self.n

        def state_dict(self):
            return {"scale": np.array([8.0], np.float32), "incr_count": np.int64(1), "decr_count": 0}

    class PaddleLike:
        _cache_found_inf = None

        def state_dict(self):
            return {}

    model = torch.nn.Linear(1, 1)
    counting, paddle_like = Counting(), PaddleLike()
    rec_a, rec_b = TraceRecorder(model, None, counting), TraceRecorder(model, None, paddle_like)
    for skipped in (False, True, True, False):
        counting.n += skipped
        paddle_like._cache_found_inf = np.array([skipped])
        rec_a.record()
        rec_b.record()
    assert [s["found_inf"] for s in rec_a.trace.steps] == [False, True, True, False]
    assert [s["found_inf"] for s in rec_b.trace.steps] == [False, True, True, False]
    assert rec_a.trace.steps[0]["scale"] == 8.0 and rec_a.trace.steps[0]["incr_count"] == 1

    # torch's own GradScaler: the scale, nothing else
    torch_scaler = torch.amp.GradScaler("cpu", init_scale=64.0)
    rec_c = TraceRecorder(model, None, torch_scaler)
    rec_c.record()
    assert rec_c.trace.steps[0]["scale"] == 64.0
    assert rec_c.trace.steps[0]["found_inf"] is None and rec_c.trace.steps[0]["incr_count"] is None


def test_bad_arguments():
    with pytest.raises(TypeError, match="torch.nn.Module or a paddle.nn.Layer"):
        TraceRecorder(object())
    with pytest.raises(ValueError, match="full_max_elements"):
        TraceRecorder(torch.nn.Linear(1, 1), full_max_elements=-1)
    with pytest.raises(ValueError, match="sample"):
        TraceRecorder(torch.nn.Linear(1, 1), sample=0)
    with pytest.raises(ValueError, match="port= is for recording a Paddle model"):
        TraceRecorder(torch.nn.Linear(1, 1), port=torch.nn.Linear(1, 1))


def test_layer_taps_name_the_first_diverging_layer():
    exact, tanh = run(3, layers=True), run(3, layers=True, gelu="tanh")
    assert [n for n in exact.series if n.startswith("act/")] == ["act/0", "act/1", "act/2", "act/(model)"]
    # backward order; the model's output is layer 2's very tensor, whose hooks run in the order set
    assert [n for n in exact.series if n.startswith("actgrad/")] == [
        "actgrad/2",
        "actgrad/(model)",
        "actgrad/1",
        "actgrad/0",
    ]
    result = compare(exact, tanh, exact=True)
    d = result.first_divergence
    assert (d.step, d.name) == (0, "act/1") and d.ulps >= 1
    # with tolerances, GELU's tanh approximation is still far out (about 1e-4 relative)
    assert compare(exact, tanh).first_divergence.name == "act/1"


def test_layer_called_twice_in_a_step():
    lin = torch.nn.Linear(2, 2)
    model = torch.nn.Sequential(lin, torch.nn.ReLU(), lin)
    rec = TraceRecorder(model, layers=True)
    model(torch.ones(1, 2)).sum().backward()
    rec.record()
    assert [n for n in rec.trace.series if n.startswith("act/")] == ["act/0", "act/1", "act/0#1", "act/(model)"]
    rec.close()
    model(torch.ones(1, 2))
    rec.record()
    assert "act/0" not in {n for n, s in rec.trace.series.items() if 1 in s.steps}


def test_pre_clip_norm_and_clip_factor():
    """before_step() records the unscaled global norm before the clip and the factor the clip applies."""
    from paddle_compat.nn import ClipGradByGlobalNorm

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = popt.SGD(learning_rate=0.1, parameters=model.parameters(), grad_clip=ClipGradByGlobalNorm(0.05))
    sc = GradScaler(init_loss_scaling=256.0)
    rec = TraceRecorder(model, opt, sc)
    x = torch.randn(5, 4)
    norms = []
    for step in range(2):
        scaled = sc.scale(model(x).pow(2).mean())
        scaled.backward()
        if step == 1:
            model.weight.grad[0, 0] = float("inf")
        unscaled = [p.grad.double() / 256.0 for p in model.parameters()]
        norms.append(float(torch.sqrt(sum((g * g).sum() for g in unscaled))))
        rec.before_step()
        sc.minimize(opt, scaled)
        rec.record()
        opt.clear_grad()
    first, second = rec.trace.steps
    assert first["pre_clip_norm"] == pytest.approx(norms[0], rel=1e-12)
    assert first["clip_factor"] == pytest.approx(0.05 / norms[0]) and first["clip_factor"] < 1
    assert second["pre_clip_norm"] == math.inf and second["clip_factor"] is None
    assert (first["found_inf"], second["found_inf"]) == (False, True)  # before_step() does not consume the verdict
    assert rec.trace.meta["parameter_tensors"] == 2 and rec.trace.meta["unbiased_running_var"] == []


def test_streaming_keeps_nothing_in_memory_and_reads_back_the_same(tmp_path):
    in_memory = run()
    streamed = run(path=tmp_path / "s")
    assert streamed.streaming and (tmp_path / "s.npz").exists() and not (tmp_path / "s.json").exists()
    assert all(len(s.data) == 0 and len(s.steps) == 7 for s in streamed.series.values())  # rows on disk only
    np.testing.assert_array_equal(streamed.final("param/0.weight"), in_memory.final("param/0.weight"))
    with pytest.raises(ValueError, match="still streaming"):
        compare(streamed, in_memory)
    with pytest.raises(ValueError, match="streams to"):
        streamed.save(tmp_path / "elsewhere")
    streamed.save()
    assert not streamed.streaming and (tmp_path / "s.json").exists()
    assert compare(in_memory, streamed, exact=True).ok
    back = Trace.load(tmp_path / "s")
    assert compare(in_memory, back, exact=True).ok
    s = back.series["param/0.weight"]
    assert type(s.data).__name__ == "_Rows"
    assert s.data[3].tobytes() == in_memory.series["param/0.weight"].data[3].tobytes()
    back.add_step({"loss": 0.0}, {"param/0.weight": in_memory.final("param/0.weight")})  # a loaded trace extends
    assert s.steps[-1] == 7 and len(s.data) == 8
    back.close()


def test_no_recording_after_a_streamed_trace_is_saved(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = torch.nn.Linear(2, 2)
    rec = TraceRecorder(model, path="s")
    rec.record()
    rec.save(tmp_path / "s.json")  # its own path, spelled otherwise
    with pytest.raises(ValueError, match=r"record\(\) after save\(\): this recorder's streamed trace is finished"):
        rec.record()
    assert len(Trace.load(tmp_path / "s")) == 1


def test_a_streamed_trace_goes_where_the_record_command_asks(tmp_path, monkeypatch):
    """Under `python -m paddle_compat.parity record` (which sets ENV_OUT), save() with no path
    finishes the stream where it streams and leaves the trace where the command looks for it."""
    monkeypatch.setenv(ENV_OUT, str(tmp_path / "asked"))
    model = torch.nn.Linear(2, 2)
    rec = TraceRecorder(model, path=tmp_path / "own")
    rec.record(model(torch.ones(1, 2)).sum())
    assert rec.save() == tmp_path / "own.json"
    asked = Trace.load(tmp_path / "asked")
    assert compare(Trace.load(tmp_path / "own"), asked, exact=True).ok and len(asked) == 1


def test_the_recorder_as_a_context_manager_finishes_a_streamed_trace_even_after_an_error(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="the loop failed"):
        with TraceRecorder(model, path=tmp_path / "crashed", layers=True) as rec:
            for step in range(3):
                rec.record(model(torch.ones(1, 2)).sum())
                if step == 1:
                    raise RuntimeError("the loop failed")
    assert not rec.trace.streaming and rec._watcher is None  # hooks removed
    trace = Trace.load(tmp_path / "crashed")
    assert len(trace) == 2 and trace.series["act/0"].steps == [0, 1]
    trace.close()


def test_every_n_steps_the_layers_are_copied_only_on_kept_steps(monkeypatch):
    from paddle_compat.parity import hooks

    copied = []
    monkeypatch.setattr(hooks, "copy_of", lambda t: copied.append(1) or np.zeros(1))
    run(layers=True)
    per_step = len(copied) / 7
    copied.clear()
    sparse = run(layers=True, every=3)
    assert sparse.series["act/0"].steps == [0, 3, 6]
    assert len(copied) == 3 * per_step > 0  # outputs and gradients of steps 0, 3 and 6 only


def test_every_and_patterns():
    full = run()
    sparse = run(every=3, include=["param/*", "grad/*"], exclude=["*.bias"])
    assert sorted(sparse.series) == ["grad/0.weight", "grad/2.weight", "param/0.weight", "param/2.weight"]
    assert sparse.series["param/0.weight"].steps == [0, 3, 6]
    assert [s["loss"] for s in sparse.steps] == [s["loss"] for s in full.steps]  # scalars at every step
    result = compare(full, sparse, exact=True)
    assert result.ok and "left out by a trace's include/exclude patterns, not compared: grad/0.bias" in result.notes[-1]
    with pytest.raises(ValueError, match="every should be >= 1, but received 0"):
        run(every=0)
    with pytest.raises(TypeError, match="include must be a list of glob patterns"):
        run(include="param/*")
