"""paddle_compat.parity comparison: ulps, tolerances, the first divergence, reports."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from paddle_compat.parity import Trace, assert_same_trajectory, compare, write_report
from paddle_compat.parity._arrays import DEFAULT_TOLERANCES, array_of, ulp_distance
from paddle_compat.parity.report import to_json, to_markdown


def trace(steps: list[tuple[dict, dict]], layout: str = "torch", **policy) -> Trace:
    t = Trace({"layout": layout, "framework": "test"})
    for scalars, tensors in steps:
        t.add_step(scalars, tensors, **policy)
    return t


def scal(**kw):
    base = {
        "loss": 1.0,
        "scale": 1024.0,
        "found_inf": False,
        "incr_count": 1,
        "decr_count": 0,
        "lr": 0.1,
        "grad_norm": 2.0,
    }
    return {**base, **kw}


W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)


def nudge(a: np.ndarray, flat: int, ulps: int = 1) -> np.ndarray:
    b = a.copy()
    v = b.reshape(-1)
    for _ in range(ulps):
        v[flat] = np.nextafter(v[flat], np.float32(np.inf))
    return b


# ----------------------------------------------------------------------------------------- ulps


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_ulp_distance(dtype):
    t = torch.tensor([1.0, -1.0, 0.0, 3.0, float("nan"), float("nan"), 2.0], dtype=getattr(torch, dtype))
    up = torch.nextafter(t, torch.full_like(t, float("inf")))
    a, name = array_of(t)
    b, _ = array_of(up)
    assert name == dtype
    d = ulp_distance(a, b, dtype)
    assert list(d[:4]) == [1, 1, 1, 1]
    assert d[4] == 0  # NaN and NaN
    tiny = torch.tensor([torch.finfo(getattr(torch, dtype)).tiny], dtype=getattr(torch, dtype))
    pos, neg = (
        array_of(torch.nextafter(torch.zeros(1, dtype=tiny.dtype), tiny))[0],
        array_of(-torch.nextafter(torch.zeros(1, dtype=tiny.dtype), tiny))[0],
    )
    assert ulp_distance(pos, neg, dtype)[0] == 2  # across zero: -min_subnormal, 0, +min_subnormal
    z = array_of(torch.tensor([0.0, -0.0], dtype=tiny.dtype))[0]
    assert ulp_distance(z[:1], z[1:], dtype)[0] == 0
    one, nan = (
        array_of(torch.tensor([1.0], dtype=tiny.dtype))[0],
        array_of(torch.tensor([float("nan")], dtype=tiny.dtype))[0],
    )
    assert ulp_distance(one, nan, dtype)[0] == math.inf


def test_ulp_distance_far_apart_in_float64():
    a, b = np.array([-np.finfo(np.float64).max]), np.array([np.finfo(np.float64).max])
    assert ulp_distance(a, b, "float64")[0] == pytest.approx(2.0 * (0x7FEFFFFFFFFFFFFF), rel=1e-15)


@pytest.mark.parametrize("dtype", sorted(DEFAULT_TOLERANCES))
def test_default_tolerances_are_torch_testings(dtype):
    """Our verdict agrees with torch.testing.assert_close's defaults on the same pairs."""
    tdt = getattr(torch, dtype)
    rng = np.random.default_rng(0)
    ref = torch.tensor(rng.standard_normal(400), dtype=torch.float64).to(tdt)
    rtol, atol = DEFAULT_TOLERANCES[dtype]
    for factor in (0.5, 0.9, 1.1, 2.0):  # inside, close inside, close outside, outside
        cand = (
            ref.double()
            + factor * (atol + rtol * ref.double().abs()) * torch.sign(torch.randn(400, dtype=torch.float64))
        ).to(tdt)
        for i in range(0, 400, 40):
            r, c = ref[i : i + 1], cand[i : i + 1]
            try:
                torch.testing.assert_close(c, r)
                theirs = True
            except AssertionError:
                theirs = False
            a = trace([(scal(), {"param/x": array_of(r)[0]})])
            b = trace([(scal(), {"param/x": array_of(c)[0]})])
            assert compare(a, b).ok == theirs, (dtype, factor, r, c)


# ---------------------------------------------------------------------------------- the verdict


def test_identical_traces_agree_exactly():
    a = trace([(scal(), {"param/w": W}), (scal(loss=0.5), {"param/w": W * 2})])
    result = compare(a, a, exact=True)
    assert result.ok and result.first_divergence is None and result.steps == 2
    assert all(m.bitwise_equal and m.max_ulps == 0 for m in result.tensors)


def test_first_divergence_names_step_tensor_element_and_ulps():
    a = trace([(scal(), {"param/w": W}), (scal(), {"param/w": W}), (scal(), {"param/w": W})])
    b = trace([(scal(), {"param/w": W}), (scal(), {"param/w": nudge(W, 6)}), (scal(), {"param/w": nudge(W, 2, 5)})])
    result = compare(a, b, exact=True)
    d = result.first_divergence
    assert (d.step, d.name, d.index, d.ulps) == (1, "param/w", (1, 2), 1.0)
    assert d.reference == float(W[1, 2]) and d.candidate == float(np.nextafter(W[1, 2], np.float32(1)))
    assert "step 1, param/w[1, 2]: bits differ" in result.summary() and "1 ulps apart" in result.summary()
    m = [m for m in result.tensors if m.step == 1][0]
    assert (m.bitwise_equal, m.max_ulps, m.mismatched, m.compared) == (False, 1.0, 1, 12)
    # within float32's tolerance, the same runs agree
    assert compare(a, b).ok
    assert result.max_ulps_per_step() == [0.0, 1.0, 5.0]


def test_causal_order_within_a_step():
    """found_inf, the scale and the rate are checked before the gradients (an update-path bug is never
    hidden behind gradient noise), and the parameters after them; differing gradients are named as
    the cause of a differing skip."""
    a = trace([(scal(), {"grad/w": W, "param/w": W})])
    b = trace([(scal(found_inf=True), {"grad/w": W, "param/w": W + 1})])
    assert compare(a, b).first_divergence.name == "found_inf"
    assert compare(a, b).first_divergence.causes == []
    c = trace([(scal(found_inf=True), {"grad/w": W + 1, "param/w": W + 1})])
    d = compare(a, c).first_divergence
    assert d.name == "found_inf"
    assert d.causes == ["the gradients differ at this step too (grad/w): the skip decision follows from them"]
    lr = trace([(scal(lr=0.5), {"actgrad/fc": W + 1, "grad/w": W + 1, "param/w": W + 1})])
    a_act = trace([(scal(), {"actgrad/fc": W, "grad/w": W, "param/w": W})])
    assert compare(a_act, lr).first_divergence.name == "lr"  # before the gradients, the layers' included
    d = trace([(scal(incr_count=2), {"grad/w": W, "param/w": W})])
    assert compare(a, d).first_divergence.name == "incr_count"  # counters: exact even with tolerances


def test_scalars_exact_and_tolerant():
    a = trace([(scal(loss=1.0), {})])
    b = trace([(scal(loss=float(np.nextafter(np.float32(1), np.float32(2)))), {})])
    assert not compare(a, b, exact=True).ok and compare(a, b).ok
    nan_a, nan_b = trace([(scal(loss=math.nan), {})]), trace([(scal(loss=math.nan), {})])
    assert compare(nan_a, nan_b, exact=True).ok
    assert not compare(nan_a, a).ok
    assert not compare(trace([(scal(loss=0.0), {})]), trace([(scal(loss=-0.0), {})]), exact=True).ok
    assert not compare(trace([(scal(scale=None), {})]), a).ok


def test_nan_in_the_same_place_is_equal():
    x = W.copy()
    x[0, 0] = np.nan
    assert compare(trace([(scal(), {"param/w": x})]), trace([(scal(), {"param/w": x.copy()})]), exact=True).ok
    y = x.copy()
    y[0, 1] = np.nan
    d = compare(trace([(scal(), {"param/w": x})]), trace([(scal(), {"param/w": y})])).first_divergence
    assert d.index == (0, 1) and d.ulps == math.inf


def test_structure_differences():
    a = trace([(scal(), {"param/w": W, "opt/w/moment1": W})])
    b = trace([(scal(), {"param/w": W, "opt/v/moment1": W})])
    d = compare(a, b).first_divergence
    assert d.name == "opt/w/moment1" and "recorded only by the reference" in d.reason
    shaped = trace([(scal(), {"param/w": W.reshape(4, 3), "opt/w/moment1": W})])
    assert "shapes differ" in compare(a, shaped).first_divergence.reason
    # a whole category recorded on one side only: a note, not a divergence
    c = trace([(scal(), {"param/w": W, "opt/w/moment1": W, "act/0": W})])
    result = compare(a, c)
    assert result.ok and result.notes == ["only the candidate recorded act/ tensors: not compared"]
    # different lengths: the common steps are compared, then the shorter run is the divergence
    longer = trace([(scal(), {"param/w": W, "opt/w/moment1": W})] * 3)
    result = compare(longer, a)
    assert result.steps == 1 and (result.first_divergence.step, result.first_divergence.name) == (1, "steps")


def test_sampled_tensors():
    big = np.random.default_rng(0).standard_normal(100).astype(np.float32)
    a = trace([(scal(), {"param/w": big})], full_max_elements=10, sample=8)
    index = a.series["param/w"].index
    outside = next(i for i in range(100) if i not in set(index))
    # a difference outside the sample: the digest still sees it
    b = trace([(scal(), {"param/w": nudge(big, outside)})])
    result = compare(a, b, exact=True)
    assert not result.ok and result.first_divergence.reason == "bits differ (not at the sampled elements)"
    assert result.tensors[0].sampled and result.tensors[0].compared == len(index)
    assert compare(a, b).ok  # with tolerances only the sample can be judged
    # a difference inside the sample: found, with its index in the full tensor
    c = trace([(scal(), {"param/w": nudge(big, int(index[3]))})])
    d = compare(a, c, exact=True).first_divergence
    assert d.index == (int(index[3]),) and d.ulps == 1.0


def test_argument_checks():
    a = trace([(scal(), {})])
    with pytest.raises(ValueError, match="rtol and atol must be given together"):
        compare(a, a, rtol=1e-3)
    with pytest.raises(ValueError, match="exact=True compares bits"):
        compare(a, a, exact=True, rtol=1e-3, atol=0.0)
    with pytest.raises(ValueError, match="different layouts"):
        compare(a, trace([(scal(), {})], layout="paddle"))
    loose = trace([(scal(loss=1.01), {})])
    assert not compare(a, loose).ok and compare(a, loose, rtol=0.1, atol=0.0).ok
    for bad, why in ((float("nan"), "a finite number"), (-1, ">= 0"), (float("inf"), "a finite number")):
        # NaN and -1 once passed and made equal traces diverge
        with pytest.raises(ValueError, match=f"rtol should be {why}, but received {bad}"):
            compare(a, a, rtol=bad, atol=0.0)
        with pytest.raises(ValueError, match=f"atol should be {why}, but received {bad}"):
            compare(a, a, rtol=0.0, atol=bad)
    with pytest.raises(TypeError, match="rtol should be a float or an int, but received str"):
        compare(a, a, rtol="0.1", atol=0.0)
    with pytest.raises(TypeError, match="reference should be a Trace or the path of a saved one, but received int"):
        compare(42, a)
    with pytest.raises(TypeError, match="exact should be a bool"):
        compare(a, a, exact="yes")


# ---------------------------------------------------------------------------------------- report


def test_reports(tmp_path):
    a = trace([(scal(), {"param/w": W}), (scal(found_inf=True, scale=512.0), {"param/w": W}), (scal(), {"param/w": W})])
    b = trace(
        [
            (scal(), {"param/w": W}),
            (scal(found_inf=True, scale=512.0), {"param/w": W}),
            (scal(), {"param/w": nudge(W, 0, 3)}),
        ]
    )
    result = compare(a, b, exact=True)
    doc = json.loads(to_json(result))
    assert doc["ok"] is False and doc["first_divergence"]["step"] == 2 and doc["first_divergence"]["index"] == [0, 0]
    assert doc["scalars"][1]["found_inf"] == {"reference": True, "candidate": True, "ok": True}
    md = to_markdown(result)
    assert "**Diverged** over 3 steps (exact (bitwise))" in md and "step 2, param/w[0, 0]" in md
    assert "| `param/w` | 2 | 1 | 3 |" in md
    written = write_report(result, tmp_path / "rep")
    assert sorted(written) == ["json", "md", "png"]
    png = written["png"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    with pytest.raises(ValueError, match="unknown"):
        write_report(result, tmp_path, ["pdf"])


def test_steps_limit():
    a = trace([(scal(), {"param/w": W})] * 3)
    b = trace([(scal(), {"param/w": W})] * 2 + [(scal(), {"param/w": W + 1})])
    assert compare(a, b, steps=2).ok and not compare(a, b).ok
    assert compare(a, trace([(scal(), {"param/w": W})]), steps=1).ok
    with pytest.raises(ValueError, match="steps=4, but the reference has 3 steps"):
        compare(a, b, steps=4)
    with pytest.raises(ValueError, match="steps should be >= 0, but received -1"):
        compare(a, b, steps=-1)


def test_traces_of_the_wrong_type_are_named():
    a = trace([(scal(), {"param/w": W})])
    with pytest.raises(TypeError, match="^reference should be a Trace or the path of a saved one, but received int$"):
        compare(42, a)
    with pytest.raises(TypeError, match="^candidate should be a Trace or the path of a saved one, but received dict$"):
        compare(a, {})


def test_dtypes_differ():
    a = trace([(scal(), {"param/w": W})])
    b = trace([(scal(), {"param/w": W.astype(np.float64)})])
    assert compare(a, b, exact=True).first_divergence.reason == "dtypes differ: reference float32, candidate float64"
    assert compare(a, b).ok  # the same values, within tolerance


# --------------------------------------------------------------------- norm tolerances, baseline, causes


def test_norm_tolerance_does_not_saturate_near_zero():
    """0 against 1e-9 is a billion ulps, and nothing at the tensor's scale."""
    w = np.array([0.0, 1.0, -2.0, 0.5], np.float32)
    near = w.copy()
    near[0] = 1e-9
    a, b = trace([(scal(), {"grad/w": w})]), trace([(scal(), {"grad/w": near})])
    assert compare(a, b, exact=True).first_divergence.ulps > 1e8
    assert not compare(a, b, rtol=1e-6, atol=0.0).ok
    result = compare(a, b, tolerance={"grad": 1e-6})
    assert result.ok and result.tensors[0].rel_l2 == pytest.approx(1e-9 / math.sqrt(5.25), rel=1e-3)
    off = trace([(scal(), {"grad/w": w * np.float32(1.001)})])
    d = compare(a, off, tolerance={"grad": 1e-6}).first_divergence
    assert d.name == "grad/w" and d.reason.startswith("norm-relative error 0.001 over the bound 1e-06")
    inf = w.copy()
    inf[1] = np.inf
    assert compare(a, trace([(scal(), {"grad/w": inf})]), tolerance=1.0).first_divergence.reason == (
        "inf/NaN in different places"
    )


def test_tolerance_keys_resolve_from_the_most_specific():
    a = trace([(scal(), {"grad/x.w": W, "grad/y.w": W, "param/x.w": W})])
    b = trace([(scal(loss=1.01), {"grad/x.w": W * 1.01, "grad/y.w": W * 1.0001, "param/x.w": W * 1.0001})])
    tol = {"*": 1e-3, "grad": 1e-3, "grad/x.*": 0.1, "loss": 0.1}
    assert compare(a, b, tolerance=tol).ok
    d = compare(a, b, tolerance={**tol, "grad/x.w": 1e-3}).first_divergence
    assert d.name == "grad/x.w"  # an exact name beats a glob
    assert compare(a, b, tolerance={"loss": 0.1, "grad": 0.1}).first_divergence.name == "param/x.w"  # exact mode
    with pytest.raises(ValueError, match=r"tolerance\['grad'\] should be >= 0, but received -1"):
        compare(a, b, tolerance={"grad": -1})


def test_baseline_separates_noise_from_a_bug():
    """A second reference, an ulp away, shows how much noise each tensor carries at each step."""
    rng = np.random.default_rng(0)
    noise = [rng.standard_normal(W.shape).astype(np.float32) * 1e-4 for _ in range(3)]
    ref = trace([(scal(), {"grad/w": W + k}) for k in range(3)])
    base = trace([(scal(), {"grad/w": W + k + noise[k]}) for k in range(3)])
    port = trace([(scal(), {"grad/w": W + k - 3 * noise[k]}) for k in range(3)])
    assert not compare(ref, port).ok  # torch.testing's float32 tolerance calls the noise a divergence
    assert compare(ref, port, baseline=base).ok
    buggy = trace([(scal(), {"grad/w": W + k + (1e-2 if k == 2 else 0)}) for k in range(3)])
    d = compare(ref, buggy, baseline=base).first_divergence
    assert (d.step, d.name) == (2, "grad/w")
    assert not compare(ref, port, baseline=base, baseline_factor=1.0).ok
    assert_same_trajectory(ref, port, baseline=base)  # the same options, as an assertion
    with pytest.raises(AssertionError, match="grad/w"):
        assert_same_trajectory(ref, port, baseline=base, baseline_factor=1.0)


def test_a_baseline_of_another_model_is_refused():
    ref = trace([(scal(), {"grad/w": W, "param/w": W})])
    port = trace([(scal(), {"grad/w": W, "param/w": W})])
    other = trace([(scal(), {"grad/v": W, "param/v": W})])
    with pytest.raises(ValueError) as info:
        compare(ref, port, baseline=other)
    assert str(info.value) == (
        "the baseline does not record the reference's tensors (4 differ; the baseline alone has 'grad/v'): "
        "a baseline is a second run of the reference model"
    )
    wider = trace([(scal(), {"grad/w": np.concatenate([W, W]), "param/w": W})])
    with pytest.raises(ValueError) as info:
        compare(ref, port, baseline=wider)
    assert str(info.value) == (
        f"the baseline's 'grad/w' has shape {[2 * W.shape[0], *W.shape[1:]]}, the reference's {list(W.shape)}: "
        "a baseline is a second run of the reference model"
    )


def test_layers_recorded_on_one_side_are_notes():
    a = trace([(scal(), {"act/attn.q_proj": W, "act/attn": W, "act/extra": W, "param/w": W})])
    b = trace([(scal(), {"act/attn": W, "param/w": W})])
    result = compare(a, b, exact=True)
    assert result.ok
    inline = "act/attn.q_proj: torch's MultiheadAttention computes the q/k/v/out projections inside one call"
    assert any(inline in n for n in result.notes)
    assert "only the reference recorded act/extra: layers without a counterpart, not compared" in result.notes


def test_named_causes():
    ahead = trace([(scal(lr=0.1 * 0.9**k), {}) for k in range(4)])
    port = trace([(scal(lr=0.1 * 0.9 ** (k + 1)), {}) for k in range(4)])
    d = compare(ahead, port, exact=True).first_divergence
    assert (d.step, d.name) == (0, "lr") and "its schedule runs one step ahead of Paddle's" in d.causes[0]
    skipped = trace([(scal(found_inf=True), {"grad/w": W * 0})])
    unscaled = trace([(scal(found_inf=True), {"grad/w": W})])
    d = compare(skipped, unscaled, exact=True).first_divergence
    assert d.name == "grad/w" and "after a skipped step Paddle leaves every gradient multiplied by 0" in d.causes[0]
    clipped = Trace({"layout": "torch", "framework": "paddle", "parameter_tensors": 38})
    clipped.add_step(scal(clip_factor=0.5, pre_clip_norm=2.0), {"grad/w": W, "param/w": W})
    port = Trace({"layout": "torch", "framework": "torch", "parameter_tensors": 30})
    port.add_step(scal(clip_factor=0.5, pre_clip_norm=2.0), {"grad/w": W, "param/w": nudge(W, 0)})
    d = compare(clipped, port, exact=True).first_divergence
    assert d.name == "param/w" and "over 38 tensors in the reference and 30 in the candidate" in d.causes[0]
    assert "cause: the global-norm clip engaged (factor 0.5, pre-clip norm 2.0)" in d.describe()


def test_png_marks_nan_and_shows_the_layers(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from paddle_compat.parity.report import plot

    nan = W.copy()
    nan[0, 0] = np.nan
    a = trace([(scal(), {"act/fc": W, "act/out": W, "grad/w": W})] * 2)
    b = trace(
        [(scal(), {"act/fc": W, "act/out": W, "grad/w": W}), (scal(), {"act/fc": W, "act/out": W * 2, "grad/w": nan})]
    )
    result = compare(a, b, exact=True)
    assert result.first_divergence.step == 1
    drawn = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: drawn.append(self))
    plot(result, tmp_path / "r.png")
    (fig,) = drawn
    _, middle, layers = fig.axes
    ys = [y for line in middle.get_lines() for y in line.get_ydata() if line.get_label() == "gradients"]
    assert ys == [0.0]  # step 1's NaN is not a point at 2**64 ...
    marks = [c for c in middle.collections if c.get_label() == "gradients: inf/NaN against a number"]
    assert len(marks) == 1 and marks[0].get_offsets()[0][0] == 1  # ... but a mark at step 1
    assert layers.get_title() == "Step 1: per-layer divergence (outputs in forward order, then gradients)"
    assert [t.get_text() for t in layers.get_yticklabels()] == ["fc", "out"]


def test_the_report_formats_are_named_in_one_table(tmp_path, monkeypatch, capsys):
    import importlib.util

    from paddle_compat.parity import cli, report

    assert report.FORMATS == ("json", "md", "png")
    a = trace([(scal(), {"param/w": W})])
    written = report.write_report(compare(a, a), tmp_path / "all")
    assert list(written) == list(report.FORMATS) and [p.name for p in written.values()] == [
        "report.json", "report.md", "report.png"]
    with pytest.raises(ValueError, match=r"^formats: unknown \['pdf'\]; choose from 'json', 'md', 'png'$"):
        report.write_report(compare(a, a), tmp_path, ["md", "pdf"])
    with pytest.raises(TypeError, match=r"^formats must be a list of format names \(strings\), got str$"):
        report.write_report(compare(a, a), tmp_path, "md")  # not the formats 'm' and 'd'
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert report.available_formats() == ("json", "md")
    with pytest.raises(SystemExit):
        cli.main(["report", "--help"])
    assert "comma-separated: json,md,png" in capsys.readouterr().out


def test_a_baseline_equal_to_the_reference_still_allows_kernel_rounding():
    """Where the baseline happened to match the reference bit for bit (an ulp's nudge that a
    BatchNorm cancels, Adam's first step of lr times a sign), its distance is 0: the bound is still
    the kernels' floor, so a clean port an ulp away passes, while lr, scale and counters, which both
    sides compute the same way, must still agree exactly."""
    tensors = {"act/fc": W, "actgrad/fc": W, "grad/fc.bias": W, "param/fc.bias": W, "opt/fc.bias/moment1": W}
    ref = trace([(scal(), tensors)] * 2)
    loss = float(np.nextafter(np.float32(1.0), np.float32(2)))
    port = trace([(scal(loss=loss), {k: nudge(v, 5) for k, v in tensors.items()})] * 2)
    result = compare(ref, port, baseline=ref)
    assert result.ok, result.summary()  # was: a bound of 0, and loss diverged at 1 ulp
    from paddle_compat.parity.compare import kernel_floor

    assert {m.bound for m in result.tensors} == {kernel_floor("grad/x")} == {16 * 2.0**-23}
    assert kernel_floor("act/x", "float16") == 16 * 2.0**-10 and kernel_floor("lr") is None
    late = trace([(scal(), tensors), (scal(lr=float(np.nextafter(np.float32(0.1), np.float32(1)))), tensors)])
    d = compare(ref, late, baseline=ref).first_divergence
    assert (d.step, d.name) == (1, "lr")
    bug = trace([(scal(), {**tensors, "grad/fc.bias": W * np.float32(1.0001)})] * 2)
    assert compare(ref, bug, baseline=ref).first_divergence.name == "grad/fc.bias"  # 1e-4: a bug


def test_a_single_tolerance_never_compares_torchs_running_var():
    """torch's BatchNorm running_var is n/(n-1) off Paddle's by design: a tolerance for everything
    ("*", a single number, the "param" category) leaves it out; naming it compares it."""
    var = np.ones(4, np.float32)
    ref = trace([(scal(), {"param/bn.weight": var, "param/bn.running_var": var})])
    ref.meta.update(framework="paddle")
    port = trace([(scal(), {"param/bn.weight": var, "param/bn.running_var": var * np.float32(256 / 255)})])
    port.meta.update(framework="torch", unbiased_running_var=["bn.running_var"])
    for tolerance in (1e-6, {"*": 1e-6}, {"param": 1e-6}):
        result = compare(ref, port, tolerance=tolerance)
        assert result.ok, (tolerance, result.summary())
        assert any(n.startswith("param/bn.running_var not compared") for n in result.notes)
    for tolerance in ({"param/bn.running_var": 1e-6}, {"param/bn.*": 1e-6}):
        assert compare(ref, port, tolerance=tolerance).first_divergence.name == "param/bn.running_var"
    assert compare(ref, port, tolerance={"param/bn.running_var": 1e-2}).ok


def test_png_labels_an_all_zero_reference_as_such(tmp_path, monkeypatch):
    """A gradient that is all zeros in the reference (a frozen branch) and not in the port is an
    infinite norm-relative error between finite numbers: marked as a zero reference, not inf/NaN."""
    from matplotlib.figure import Figure

    from paddle_compat.parity.report import plot

    zero = np.zeros_like(W)
    a = trace([(scal(), {"actgrad/fc": zero, "grad/w": zero, "grad/v": W})] * 2)
    b = trace([(scal(), {"actgrad/fc": W, "grad/w": W, "grad/v": W})] * 2)
    result = compare(a, b, tolerance=1e-6)
    assert result.first_divergence.name == "actgrad/fc"
    drawn = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: drawn.append(self))
    plot(result, tmp_path / "r.png")
    _, middle, layers = drawn[0].axes
    marks = {c.get_label(): [int(x) for x, _ in c.get_offsets()] for c in middle.collections}
    assert marks == {"gradients: against an all-zero reference": [0, 1]}
    assert [t.get_text() for t in layers.texts] == ["all-zero reference"]
