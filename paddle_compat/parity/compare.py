"""Compare two traces step by step: the first divergence, and per-step metrics of every tensor.

Within a step, things are checked in the order they are computed, so the first divergence is the
cause rather than a consequence: layer outputs (forward order), ``loss``, the gradients flowing
back through the layers (backward order), parameter gradients, ``grad_norm``, ``found_inf``,
``scale``, ``incr_count``, ``decr_count``, ``lr``, parameters, optimizer accumulators.

Two modes: ``exact=True`` (bitwise: every float must have the same bits, NaN payloads aside when
both are NaN); otherwise closeness as ``torch.testing.assert_close`` judges it,
``|candidate - reference| <= atol + rtol * |reference|``, with its per-dtype defaults (NaNs in the
same places count as equal). Counters and ``found_inf`` must match exactly in both modes.

Metrics per tensor and step: bitwise equality (from the stored digests, so also for sampled
tensors), maximum ulp distance, maximum absolute and relative error, the number of elements out
of tolerance. For a tensor stored as a sample on either side they are computed on the sampled
elements only, and marked so.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from .. import _checks
from ._arrays import as_float, bits, closeness, is_float, tolerances, ulp_distance
from .align import MHA_INLINE
from .trace import SCALARS, Series, Trace, json_float, load_trace, selected

__all__ = ["Comparison", "Divergence", "TensorMetrics", "compare"]

# The update path's scalars (skip decision, scale, counters, rate) come before the gradients: an
# update-path bug is never hidden behind gradient noise.
ORDER = (
    "act",
    "loss",
    "found_inf",
    "scale",
    "incr_count",
    "decr_count",
    "lr",
    "actgrad",
    "pre_clip_norm",
    "grad",
    "grad_norm",
    "clip_factor",
    "param",
    "opt",
)
_EXACT_SCALARS = frozenset({"found_inf", "incr_count", "decr_count"})


@dataclasses.dataclass
class TensorMetrics:
    """One tensor at one step. ``max_ulps`` is ``inf`` where a NaN meets a number; ``None`` where no
    values could be compared (both sides sampled differently)."""

    step: int
    name: str
    bitwise_equal: bool
    max_ulps: float | None = 0.0
    max_abs: float | None = 0.0
    max_rel: float | None = 0.0
    mismatched: int | None = 0
    compared: int = 0
    sampled: bool = False
    ok: bool = True
    rel_l2: float | None = None  # ||candidate - reference|| / ||reference|| (norm mode, see compare)
    bound: float | None = None  # the norm-relative bound applied (norm mode)

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values (non-finite floats as strings)."""
        return {k: json_float(v) for k, v in dataclasses.asdict(self).items()}


@dataclasses.dataclass
class Divergence:
    """Where the two runs first part: ``name`` is a scalar (``"scale"``) or a tensor
    (``"param/0.weight"``); ``index`` the first differing element (of the tensor's shape). (A layer
    diff's first difference, a layer and a phase, is :class:`.layer_diff.LayerDivergence`.)"""

    step: int
    name: str
    reason: str
    index: tuple[int, ...] | None = None
    reference: Any = None
    candidate: Any = None
    ulps: float | None = None
    metrics: TensorMetrics | None = None
    causes: list[str] = dataclasses.field(default_factory=list)  # known reasons, in words

    def describe(self) -> str:
        """One line for people: where, why, both values, how many ulps apart."""
        where = f"step {self.step}, {self.name}"
        if self.index is not None:
            where += f"[{', '.join(map(str, self.index))}]"
        text = f"first divergence at {where}: {self.reason}"
        if self.reference is not None or self.candidate is not None:
            text += f"; reference {self.reference!r}, candidate {self.candidate!r}"
        if self.ulps is not None:
            text += f" ({fmt_ulps(self.ulps)} ulps apart)"
        m = self.metrics
        if m is not None and not m.bitwise_equal and m.max_ulps is not None:
            scope = "sampled elements" if m.sampled else "elements"
            text += (
                f"; over the tensor: {m.mismatched} of {m.compared} {scope} differ, max {fmt_ulps(m.max_ulps)} ulps, "
                f"max abs {m.max_abs:.3g}, max rel {m.max_rel:.3g}"
            )
            if m.rel_l2 is not None and m.bound is not None:
                text += f", norm-relative {m.rel_l2:.3g} (bound {m.bound:.3g})"
        for cause in self.causes:
            text += f"\n  cause: {cause}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """The fields and the description, JSON-ready."""
        return {
            "step": self.step,
            "name": self.name,
            "reason": self.reason,
            "index": list(self.index) if self.index is not None else None,
            "reference": _json_value(self.reference),
            "candidate": _json_value(self.candidate),
            "ulps": json_float(self.ulps),
            "causes": list(self.causes),
            "description": self.describe(),
        }


@dataclasses.dataclass
class Comparison:
    """The result of :func:`compare`: ``ok`` (within tolerance everywhere), ``first_divergence``,
    per-step ``scalars`` (``[{name: (reference, candidate, ok)}]``), ``tensors`` (every
    :class:`TensorMetrics`), and ``notes`` on structural differences.

    Example::

        result = compare("golden/paddle", "port", exact=True)
        if not result.ok:
            print(result.summary())
            print(result.max_ulps_per_step("param/"))
    """

    exact: bool
    rtol: float | None
    atol: float | None
    steps: int
    reference_meta: dict[str, Any]
    candidate_meta: dict[str, Any]
    scalars: list[dict[str, tuple[Any, Any, bool]]]
    tensors: list[TensorMetrics]
    first_divergence: Divergence | None
    notes: list[str]
    norm: str | None = None  # how the norm-relative mode was set (tolerance, baseline), in words

    @property
    def ok(self) -> bool:
        """Whether the runs agree (bitwise, or within tolerance) at every step compared."""
        return self.first_divergence is None

    @property
    def mode(self) -> str:
        """How values were compared, in words."""
        if self.exact:
            rest = "exact (bitwise)"
        elif self.rtol is None:
            rest = "torch.testing's per-dtype tolerances"
        else:
            rest = f"rtol={self.rtol:g}, atol={self.atol:g}"
        return rest if self.norm is None else f"{self.norm}; the rest {rest}"

    def max_ulps_per_step(self, prefix: str = "param/") -> list[float | None]:
        """Per step, the largest ulp distance over some tensors (``None``: none compared).

        Args:
            prefix: the tensors whose name starts with it (``"param/"``, ``"opt/"``, ``"grad/"``...).
        """
        out: list[float | None] = [None] * self.steps
        for m in self.tensors:
            if m.name.startswith(prefix) and m.max_ulps is not None:
                out[m.step] = max(out[m.step] or 0.0, m.max_ulps)
        return out

    def max_rel_l2_per_step(self, prefix: str = "param/") -> list[float | None]:
        """Per step, the largest norm-relative error over some tensors (``None``: none judged by it).

        Args:
            prefix: the tensors whose name starts with it.
        """
        out: list[float | None] = [None] * self.steps
        for m in self.tensors:
            if m.name.startswith(prefix) and m.rel_l2 is not None:
                out[m.step] = max(out[m.step] or 0.0, m.rel_l2)
        return out

    @property
    def by_norm(self) -> bool:
        """Whether tensors were judged by norm-relative bounds (``tolerance`` or ``baseline``)."""
        return any(m.bound is not None for m in self.tensors)

    def summary(self) -> str:
        """A few lines: the verdict, how many tensors differ, the first divergence, the notes."""
        differing = sorted({m.name for m in self.tensors if not m.bitwise_equal})
        lines = [
            f"{self.steps} steps compared, {self.mode}: "
            + (("bitwise equal" if self.exact else "within tolerance") if self.ok else "DIVERGED"),
            f"{len({m.name for m in self.tensors})} tensors, {len(differing)} not bitwise equal at some step",
        ]
        if self.first_divergence is not None:
            lines.append(self.first_divergence.describe())
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Everything, JSON-ready (what ``report.to_json`` writes)."""
        return {
            "ok": self.ok,
            "exact": self.exact,
            "rtol": self.rtol,
            "atol": self.atol,
            "norm": self.norm,
            "steps": self.steps,
            "first_divergence": self.first_divergence.to_dict() if self.first_divergence else None,
            "notes": self.notes,
            "reference": self.reference_meta,
            "candidate": self.candidate_meta,
            "scalars": [
                {
                    k: {"reference": _json_value(a), "candidate": _json_value(b), "ok": ok}
                    for k, (a, b, ok) in st.items()
                }
                for st in self.scalars
            ],
            "tensors": [m.to_dict() for m in self.tensors],
        }


def _json_value(x: Any) -> Any:
    if isinstance(x, np.generic):
        x = x.item()
    return json_float(x)


def fmt_ulps(u: float) -> str:
    """An ulp distance for people: an integer, or ``inf``."""
    return "inf" if math.isinf(u) else str(int(u))


# ------------------------------------------------------------------------------------- scalars


def _scalar_ok(
    name: str, a: Any, b: Any, exact: bool, rtol: float | None, atol: float | None, bound: float | None = None
) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if name in _EXACT_SCALARS or isinstance(a, bool) or isinstance(b, bool):
        return a == b
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if bound is not None:
        return a == b or (math.isfinite(a) and math.isfinite(b) and _scalar_rel(a, b) <= bound)
    if exact:
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    r, t = tolerances("float32", rtol, atol)
    return abs(a - b) <= t + r * abs(a) if math.isfinite(a) else a == b


def _scalar_rel(a: float, b: float) -> float:
    return 0.0 if a == b else (abs(b - a) / abs(a) if a != 0 else math.inf)


# ------------------------------------------------------------------------------------- tensors


def _tensor(
    step: int,
    name: str,
    r: Series,
    pr: int,
    c: Series,
    pc: int,
    exact: bool,
    rtol: float | None,
    atol: float | None,
    bound: float | None = None,
) -> tuple[TensorMetrics, Divergence | None]:
    same_dtype = r.dtype == c.dtype
    unlike = None
    if r.shape != c.shape:
        unlike = f"shapes differ: reference {list(r.shape)}, candidate {list(c.shape)}"
    elif exact and not same_dtype:
        unlike = f"dtypes differ: reference {r.dtype}, candidate {c.dtype}"
    if unlike is not None:
        m = TensorMetrics(step, name, False, None, None, None, None, 0, False, False)
        return m, Divergence(step, name, unlike, metrics=m)
    equal = same_dtype and r.digests[pr] == c.digests[pc]
    # comparable flat values: in full, or the elements sampled on one side (when the other kept them)
    index = r.index if r.index is not None else c.index
    sampled = index is not None
    va: np.ndarray | None
    vb: np.ndarray | None
    if index is None:
        va, vb = r.data[pr], c.data[pc]
    else:
        va, vb = r.elements(pr, index), c.elements(pc, index)
    if equal:
        n = 0 if va is None or vb is None else va.size
        return TensorMetrics(step, name, True, 0.0, 0.0, 0.0, 0, n, sampled, True, 0.0, bound), None
    if va is None or vb is None:
        m = TensorMetrics(step, name, False, None, None, None, None, 0, True, exact is False)
        return m, (
            Divergence(step, name, "digests differ (no common sampled elements to show)", metrics=m) if exact else None
        )
    dtype = r.dtype if same_dtype else "float64"
    fa, fb = as_float(va, r.dtype).astype(np.float64), as_float(vb, c.dtype).astype(np.float64)
    both_nan = np.isnan(fa) & np.isnan(fb)
    with np.errstate(divide="ignore", invalid="ignore"):
        absd = np.where(both_nan | (fa == fb), 0.0, np.abs(fa - fb))  # fa == fb: equal infinities
        absd[np.isnan(absd)] = np.inf  # a NaN against a number
        rel = np.where(absd == 0, 0.0, absd / np.abs(fa))
    if same_dtype and is_float(dtype):
        ulps = ulp_distance(va, vb, dtype)
        differs = bits(va, dtype) != bits(vb, dtype)
        differs &= ~(both_nan)
    else:
        ulps = None
        differs = absd != 0
    rel_l2 = closeness(fa, fb)["rel_l2"] if is_float(r.dtype) else None
    if bound is not None:  # norm mode: the tensor as a whole; inf/NaN must sit in the same places
        nonfinite = ~(np.isfinite(fa) & np.isfinite(fb)) & ~both_nan & (fa != fb)
        within = rel_l2 is not None and rel_l2 <= bound
        bad = nonfinite | (differs if not within else np.zeros_like(differs))
    elif exact:
        bad = differs
    else:
        rt, at = tolerances(r.dtype if same_dtype else "float32", rtol, atol)
        bad = ~(absd <= at + rt * np.abs(fa))
        bad &= ~both_nan
    m = TensorMetrics(
        step,
        name,
        False,
        float(ulps.max()) if ulps is not None and ulps.size else None,
        float(absd.max()) if absd.size else 0.0,
        float(rel.max()) if rel.size else 0.0,
        int(bad.sum()),
        int(va.size),
        sampled,
        # Exact mode with every value compared: only NaN payloads differ, which counts as equal.
        not bool(bad.any()) and not (exact and sampled and bound is None),
        rel_l2,
        bound,
    )
    if m.ok:
        return m, None
    if not bad.any():  # exact mode: the digests differ, the sampled elements do not
        return m, Divergence(step, name, "bits differ (not at the sampled elements)", metrics=m)
    first = int(np.flatnonzero(bad)[0])
    flat = int(index[first]) if index is not None else first
    where = tuple(int(i) for i in np.unravel_index(flat, r.shape)) if r.shape else ()
    if bound is not None:
        reason = f"norm-relative error {rel_l2:.3g} over the bound {bound:.3g}" if rel_l2 is not None else "differs"
        if rel_l2 is not None and rel_l2 <= bound:
            reason = "inf/NaN in different places"
    else:
        reason = "bits differ" if exact else "out of tolerance"
    if not same_dtype:
        reason += f" (dtypes differ: reference {r.dtype}, candidate {c.dtype})"
    return m, Divergence(
        step,
        name,
        reason,
        where,
        _scalar_of(va[first], r.dtype),
        _scalar_of(vb[first], c.dtype),
        float(ulps[first]) if ulps is not None else None,
        m,
    )


def _scalar_of(x: Any, dtype: str) -> float | int | bool:
    v = as_float(np.asarray(x), dtype) if dtype in ("bfloat16",) else np.asarray(x)
    return v.item()


# ------------------------------------------------------------------------------------- driver


def _check_tolerance(arg: str, value: Any) -> None:
    if value is not None:
        _checks.at_least(arg, _checks.real(arg, value), 0)


def _category(name: str) -> str:
    return name.split("/", 1)[0]


Tolerance = float | Mapping[str, float]


def _causes(d: Divergence, ref: Trace, cand: Trace, at_step: list[TensorMetrics]) -> list[str]:
    """Known reasons for a divergence, from what both traces recorded at its step."""
    out = []
    step, cat = d.step, _category(d.name)
    r, c = ref.steps[step], cand.steps[step]
    grads_off = [m for m in at_step if m.name.startswith("grad/") and not m.ok]
    if d.name in ("found_inf", "scale", "incr_count", "decr_count") and grads_off:
        out.append(
            f"the gradients differ at this step too ({', '.join(m.name for m in grads_off[:3])}): "
            "the skip decision follows from them"
        )
    if d.name == "lr":
        for shift, words in ((1, "one step ahead of"), (-1, "one step behind")):
            k = step + shift
            if 0 <= k < len(ref) and c.get("lr") is not None and c.get("lr") == ref.steps[k].get("lr"):
                out.append(
                    f"the candidate's rate is the reference's of step {k}: its schedule runs {words} Paddle's "
                    "(scheduler.step() called at another point of the loop, or last_epoch off by one)"
                )
                break
    if cat == "grad" and r.get("found_inf") and c.get("found_inf"):
        out.append(
            "both runs skipped this step: after a skipped step Paddle leaves every gradient multiplied by 0 "
            "(0, and NaN where it held inf or NaN); a port that leaves them unscaled differs here, "
            "without consequence for the parameters"
        )
    factor = r.get("clip_factor")
    if cat in ("param", "opt") and not grads_off and isinstance(factor, float) and factor < 1.0:
        n_r, n_c = ref.meta.get("parameter_tensors"), cand.meta.get("parameter_tensors")
        text = f"the global-norm clip engaged (factor {factor:.6g}, pre-clip norm {r.get('pre_clip_norm')})"
        if n_r is not None and n_c is not None and n_r != n_c:
            text += (
                f": its sum of squares runs over {n_r} tensors in the reference and {n_c} in the candidate "
                "(Paddle's MultiHeadAttention keeps q/k/v apart, torch's packs them), so it cannot be bitwise"
            )
        elif ref.meta.get("framework") != cand.meta.get("framework"):
            text += (
                ": Paddle sums the squares of its Linear weights in [in, out] order, torch in [out, in] order, "
                "so the factor can differ in its last bits"
            )
        out.append(text)
    return out


def _check_baseline(base: Trace, ref: Trace) -> None:
    """A baseline is a second run of the reference: the same tensors, of the same shapes (a trace of
    another model would lend its noise to names it does not share, or to other shapes)."""
    only = sorted(set(base.series) ^ set(ref.series))
    if only:
        side = "baseline" if only[0] in base.series else "reference"
        raise ValueError(
            f"the baseline does not record the reference's tensors ({len(only)} differ; the {side} alone has "
            f"{only[0]!r}): a baseline is a second run of the reference model"
        )
    for name, series in ref.series.items():
        if base.series[name].shape != series.shape:
            raise ValueError(
                f"the baseline's {name!r} has shape {list(base.series[name].shape)}, the reference's "
                f"{list(series.shape)}: a baseline is a second run of the reference model"
            )


def bound_for(table: Mapping[str, float], name: str, group: str) -> float | None:
    """The most specific bound in ``table`` for ``name``: its exact key, else the longest glob matching
    it, else its ``group`` (a trace's category, a layer diff's phase), else ``"*"``; ``None``: none.

    Example::

        bound_for({"grad": 1e-4, "grad/fc.*": 1e-3}, "grad/fc.weight", "grad")   # 1e-3
    """
    named = _named_bound(table, name)
    return named if named is not None else table.get(group, table.get("*"))


def _named_bound(table: Mapping[str, float], name: str) -> float | None:
    """The bound ``table`` gives ``name`` itself: its exact key, else the longest glob matching it
    (not its category nor ``"*"``); ``None``: none."""
    if name in table:
        return table[name]
    globs = sorted((k for k in table if k != "*" and any(ch in k for ch in "*?[")), key=len, reverse=True)
    for pattern in globs:
        if fnmatch.fnmatchcase(name, pattern):
            return table[pattern]
    return None


# The least bound a baseline gives, in machine epsilons of the tensor's dtype (float32: 16 eps =
# 1.9e-6), for what the two frameworks' kernels compute: they sum in other orders and round exp,
# tanh or sqrt otherwise, so a clean port may differ by a few ulps of a tensor's scale even where
# the baseline run happened to match the reference bit for bit (a BatchNorm makes an ulp's nudge of
# the weights before it vanish from the loss; Adam's first step is lr times a sign). Without this
# floor the baseline's distance 0 became a bound of 0. The scheduler's rate and the scaler's scale
# and counters are computed the same way on both sides: no floor, they must agree exactly.
KERNEL_NOISE_EPS = 16
_KERNEL_CATEGORIES = frozenset(
    {"act", "actgrad", "loss", "grad", "pre_clip_norm", "grad_norm", "clip_factor", "param", "opt"}
)
_EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}


def kernel_floor(name: str, dtype: str = "float32") -> float | None:
    """The least norm-relative bound a baseline gives ``name`` (``None``: none, it must agree exactly).

    Example::

        kernel_floor("grad/fc.weight")   # 1.9e-06: 16 float32 epsilons
        kernel_floor("lr")               # None
    """
    if _category(name) not in _KERNEL_CATEGORIES:
        return None
    return KERNEL_NOISE_EPS * _EPS.get(dtype, _EPS["float32"])


class _Bounds:
    """The norm-relative bound of each tensor or scalar: from ``tolerance`` (an exact name, then the
    longest matching glob, then its category, then ``"*"``), raised to ``factor`` times the
    baseline's own distance from the reference where a baseline is given, and never below the
    kernels' floor (:func:`kernel_floor`) there."""

    def __init__(self, tolerance: Tolerance | None, baseline: Trace | None, reference: Trace, factor: float) -> None:
        self.table = {"*": float(tolerance)} if isinstance(tolerance, (int, float)) else dict(tolerance or {})
        self.baseline, self.reference, self.factor = baseline, reference, factor
        self._noise: dict[str, list[float | None]] = {}

    def configured(self, name: str) -> float | None:
        return bound_for(self.table, name, _category(name))

    def noise(self, step: int, name: str) -> float | None:
        """The largest norm-relative distance of the baseline from the reference up to this step
        (``None``: not recorded). Noise grows as a run goes on; one step's value alone is a sample of
        one, which can fall near zero by chance."""
        seen = self._noise.setdefault(name, [])
        while len(seen) <= step:
            k = len(seen)
            here = self._distance(k, name)
            before = seen[-1] if seen else None
            seen.append(here if before is None else (before if here is None else max(here, before)))
        return seen[step]

    def _distance(self, step: int, name: str) -> float | None:
        b, r = self.baseline, self.reference
        if b is None or step >= len(b):
            return None
        if name in SCALARS:
            x, y = r.steps[step].get(name), b.steps[step].get(name)
            if not isinstance(x, (int, float)) or not isinstance(y, (int, float)) or isinstance(x, bool):
                return None
            return _scalar_rel(float(x), float(y)) if math.isfinite(x) and math.isfinite(y) else None
        rs, bs = r.series.get(name), b.series.get(name)
        if rs is None or bs is None or rs.shape != bs.shape or not is_float(rs.dtype):
            return None
        pr, pb = rs.position(step), bs.position(step)
        if pr is None or pb is None or (rs.index is None) != (bs.index is None):
            return None
        fr, fb = as_float(rs.data[pr], rs.dtype), as_float(bs.data[pb], bs.dtype)
        return closeness(fr, fb)["rel_l2"]

    def bound(self, step: int, name: str) -> float | None:
        configured = self.configured(name)
        noise = self.noise(step, name)
        if noise is None:
            return configured
        series = self.reference.series.get(name)
        floor = kernel_floor(name, series.dtype if series is not None else "float32") or 0.0
        return max(configured or 0.0, self.factor * noise, floor)


# Layers a torch port computes without calling a submodule (the reason a one-sided act/ tensor has).
_INLINE = re.compile(r"\.(q|k|v|out)_proj(#\d+)?$")


def _one_sided_layer_notes(only: dict[str, list[str]]) -> list[str]:
    notes = []
    for side, names in only.items():
        if not names:
            continue
        inline = [n for n in names if _INLINE.search(n)]
        rest = [n for n in names if not _INLINE.search(n)]
        if inline:
            notes.append(f"only the {side} recorded {', '.join(inline)}: {MHA_INLINE}")
        if rest:
            notes.append(f"only the {side} recorded {', '.join(rest)}: layers without a counterpart, not compared")
    return notes


def compare(
    reference: Trace | str | os.PathLike[str],
    candidate: Trace | str | os.PathLike[str],
    *,
    exact: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    steps: int | None = None,
    tolerance: Tolerance | None = None,
    baseline: Trace | str | os.PathLike[str] | None = None,
    baseline_factor: float = 10.0,
) -> Comparison:
    """Compare a candidate run (the port) with a reference run (Paddle), step by step.

    Args:
        reference, candidate: traces, or paths of saved ones.
        exact: bitwise comparison (what ``paddle_compat`` promises for its exact paths).
        rtol, atol: override torch.testing's per-dtype defaults (give both); not with ``exact``.
        steps: compare only the first ``steps`` steps (both runs must have them); by default every
            step, and runs of different lengths diverge where the shorter one ends.
        tolerance: norm-relative bounds, ``||candidate - reference|| / ||reference|| <= bound`` per
            tensor (``|b - a| / |a|`` per scalar): one number for everything, or a dict keyed by
            exact name (``"param/0.weight"``, ``"lr"``), glob (``"act/blocks.*"``), category
            (``"grad"``, ``"act"``, ``"opt"``) or ``"*"``. What it covers is judged by the norm,
            which does not saturate near zero as ulps do; the rest by ``exact`` or ``rtol``/``atol``.
        baseline: a second reference run (a trace or its path) that differs from ``reference``
            only by noise (another kernel order, or its weights moved by an ulp): every tensor and
            scalar it has is judged by the norm, within ``baseline_factor`` times the baseline's
            own distance from the reference at that step (or the ``tolerance`` bound, if larger).
        baseline_factor: how far beyond the baseline's noise a candidate may go.

    Returns:
        A :class:`Comparison`; ``.ok`` tells whether the runs agree, ``.first_divergence`` where
        they part.

    Example::

        result = compare("golden/paddle", "port", exact=True)
        assert result.ok, result.summary()

        # Paddle's own forward on the reference side: judged by norm, against a nudged rerun's noise
        result = compare("traces/paddle", "traces/port", tolerance={"grad": 1e-4, "act/*": 1e-5},
                         baseline="traces/paddle_nudged")
    """
    _checks.flag("exact", exact)
    if exact and (rtol is not None or atol is not None):
        raise ValueError("exact=True compares bits: rtol/atol do not apply")
    _check_tolerance("rtol", rtol)
    _check_tolerance("atol", atol)
    tolerances("float32", rtol, atol)  # both or neither
    if isinstance(tolerance, Mapping):
        for key, value in tolerance.items():
            if not isinstance(key, str):
                raise TypeError(f"tolerance keys should be names, globs or categories, but received {key!r}")
            _check_tolerance(f"tolerance[{key!r}]", value)
    elif tolerance is not None:
        _check_tolerance("tolerance", tolerance)
    _check_tolerance("baseline_factor", baseline_factor)
    for name, given in (("reference", reference), ("candidate", candidate), ("baseline", baseline)):
        if not isinstance(given, (Trace, str, os.PathLike)) and not (name == "baseline" and given is None):
            raise TypeError(f"{name} should be a Trace or the path of a saved one, but received {type(given).__name__}")
    ref, cand = load_trace(reference), load_trace(candidate)
    base = load_trace(baseline) if baseline is not None else None
    lr, lc = ref.meta.get("layout"), cand.meta.get("layout")
    if lr != lc:
        raise ValueError(
            f"the traces are in different layouts (reference {lr!r}, candidate {lc!r}): record the Paddle run "
            "with TraceRecorder(..., port=torch_module) so that it uses the port's names and layouts"
        )
    if base is not None and base.meta.get("layout") != lr:
        raise ValueError(f"the baseline's layout is {base.meta.get('layout')!r}, the reference's {lr!r}")
    if base is not None:
        _check_baseline(base, ref)
    bounds = _Bounds(tolerance, base, ref, float(baseline_factor))
    notes: list[str] = []
    if steps is not None:
        _checks.at_least("steps", _checks.integer("steps", steps), 0)
        if steps > min(len(ref), len(cand)):
            raise ValueError(f"steps={steps}, but the reference has {len(ref)} steps and the candidate {len(cand)}")
        n = steps
    else:
        n = min(len(ref), len(cand))
        if len(ref) != len(cand):
            notes.append(f"the reference has {len(ref)} steps, the candidate {len(cand)}: comparing the first {n}")
    cats_r = {_category(k) for k in ref.series}
    cats_c = {_category(k) for k in cand.series}
    for cat in sorted(cats_r ^ cats_c):
        side = "reference" if cat in cats_r else "candidate"
        notes.append(f"only the {side} recorded {cat}/ tensors: not compared")
    names = [k for k in ref.series if _category(k) in cats_c] + [
        k for k in cand.series if k not in ref.series and _category(k) in cats_r
    ]
    # a layer recorded by one side only is a note, never a divergence (structures differ)
    layer_only: dict[str, list[str]] = {"reference": [], "candidate": []}
    for k in names:
        if _category(k) in ("act", "actgrad") and (k in ref.series) != (k in cand.series):
            layer_only["reference" if k in ref.series else "candidate"].append(k)
    one_sided = {k for side in layer_only.values() for k in side}
    notes += _one_sided_layer_notes(layer_only)
    unselected = sorted(
        k
        for k in names
        if any(k not in t.series and not selected(t.meta, k) for t in (ref, cand))
    )
    if unselected:
        one_sided |= set(unselected)
        notes.append(f"left out by a trace's include/exclude patterns, not compared: {', '.join(unselected)}")
    if {ref.meta.get("framework"), cand.meta.get("framework")} == {"paddle", "torch"}:
        unbiased = {f"param/{k}" for t in (ref, cand) for k in t.meta.get("unbiased_running_var", [])}
        unbiased &= set(names)
        # only a tolerance naming them (exactly or by a glob) compares them: a single number, "*" or
        # the "param" category is meant for the rest, and would call the known difference a bug
        if unbiased and not any(_named_bound(bounds.table, k) is not None for k in unbiased):
            one_sided |= unbiased
            notes.append(
                f"{', '.join(sorted(unbiased))} not compared: torch's BatchNorm updates its running variance "
                "with the unbiased batch variance, Paddle's with the biased one (n/(n-1) apart, a known "
                "difference; diff_layers checks the rule itself); name them in tolerance= to compare anyway"
            )
    by_cat: dict[str, list[str]] = {}
    for k in names:
        if k not in one_sided:
            by_cat.setdefault(_category(k), []).append(k)

    scalars: list[dict[str, tuple[Any, Any, bool]]] = []
    metrics: list[TensorMetrics] = []
    first: Divergence | None = None
    for step in range(n):
        row: dict[str, tuple[Any, Any, bool]] = {}
        for item in ORDER:
            if item in SCALARS:
                a, b = ref.steps[step].get(item), cand.steps[step].get(item)
                bound = None if item in _EXACT_SCALARS else bounds.bound(step, item)
                ok = _scalar_ok(item, a, b, exact, rtol, atol, bound)
                row[item] = (a, b, ok)
                if not ok and first is None:
                    reason = "differs" if (exact and bound is None) or item in _EXACT_SCALARS else "out of tolerance"
                    first = Divergence(step, item, reason, None, a, b)
                continue
            for name in by_cat.get(item, []):
                r, c = ref.series.get(name), cand.series.get(name)
                pr = r.position(step) if r is not None else None
                pc = c.position(step) if c is not None else None
                if pr is None and pc is None:
                    continue
                if r is None or c is None or pr is None or pc is None:
                    missing = cand if pc is None else ref
                    if step % int(missing.meta.get("every") or 1):
                        continue  # that side records its tensors every N steps
                    if first is None:
                        side = "candidate" if pr is None else "reference"
                        first = Divergence(step, name, f"recorded only by the {side} at this step")
                    continue
                m, d = _tensor(step, name, r, pr, c, pc, exact, rtol, atol, bounds.bound(step, name))
                metrics.append(m)
                if d is not None and first is None:
                    first = d
        scalars.append(row)
    if first is None and steps is None and len(ref) != len(cand):
        first = Divergence(n, "steps", f"the reference has {len(ref)} steps, the candidate {len(cand)}")
    if first is not None and first.step < n:
        first.causes = _causes(first, ref, cand, [m for m in metrics if m.step == first.step])
    norm = None
    if base is not None:
        norm = f"by norm, within {baseline_factor:g}x the baseline's noise"
        norm += f" or the tolerance {tolerance}" if tolerance is not None else ""
    elif tolerance is not None:
        norm = f"by norm, within {tolerance}"
    return Comparison(exact, rtol, atol, n, ref.meta, cand.meta, scalars, metrics, first, notes, norm)
