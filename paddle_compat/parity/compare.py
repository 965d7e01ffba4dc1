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
import math
import os
from typing import Any

import numpy as np

from .. import _checks
from ._arrays import as_float, bits, is_float, tolerances, ulp_distance
from .trace import SCALARS, Series, Trace, json_float, load_trace

__all__ = ["Comparison", "Divergence", "TensorMetrics", "compare"]

ORDER = (
    "act",
    "loss",
    "actgrad",
    "grad",
    "grad_norm",
    "found_inf",
    "scale",
    "incr_count",
    "decr_count",
    "lr",
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

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values (non-finite floats as strings)."""
        return {k: json_float(v) for k, v in dataclasses.asdict(self).items()}


@dataclasses.dataclass
class Divergence:
    """Where the two runs first part: ``name`` is a scalar (``"scale"``) or a tensor
    (``"param/0.weight"``); ``index`` the first differing element (of the tensor's shape)."""

    step: int
    name: str
    reason: str
    index: tuple[int, ...] | None = None
    reference: Any = None
    candidate: Any = None
    ulps: float | None = None
    metrics: TensorMetrics | None = None

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

    @property
    def ok(self) -> bool:
        """Whether the runs agree (bitwise, or within tolerance) at every step compared."""
        return self.first_divergence is None

    @property
    def mode(self) -> str:
        """How values were compared, in words."""
        if self.exact:
            return "exact (bitwise)"
        if self.rtol is None:
            return "torch.testing's per-dtype tolerances"
        return f"rtol={self.rtol:g}, atol={self.atol:g}"

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


def _scalar_ok(name: str, a: Any, b: Any, exact: bool, rtol: float | None, atol: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if name in _EXACT_SCALARS or isinstance(a, bool) or isinstance(b, bool):
        return a == b
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if exact:
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    r, t = tolerances("float32", rtol, atol)
    return abs(a - b) <= t + r * abs(a) if math.isfinite(a) else a == b


# ------------------------------------------------------------------------------------- tensors


def _tensor(
    step: int, name: str, r: Series, pr: int, c: Series, pc: int, exact: bool, rtol: float | None, atol: float | None
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
        return TensorMetrics(step, name, True, 0.0, 0.0, 0.0, 0, n, sampled, True), None
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
    if exact:
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
        not bool(bad.any()) and not (exact and sampled),
    )
    if m.ok:
        return m, None
    if not bad.any():  # exact mode: the digests differ, the sampled elements do not
        return m, Divergence(step, name, "bits differ (not at the sampled elements)", metrics=m)
    first = int(np.flatnonzero(bad)[0])
    flat = int(index[first]) if index is not None else first
    where = tuple(int(i) for i in np.unravel_index(flat, r.shape)) if r.shape else ()
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


def _category(name: str) -> str:
    return name.split("/", 1)[0]


def compare(
    reference: Trace | str | os.PathLike[str],
    candidate: Trace | str | os.PathLike[str],
    *,
    exact: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    steps: int | None = None,
) -> Comparison:
    """Compare a candidate run (the port) with a reference run (Paddle), step by step.

    Args:
        reference, candidate: traces, or paths of saved ones.
        exact: bitwise comparison (what ``paddle_compat`` promises for its exact paths).
        rtol, atol: override torch.testing's per-dtype defaults (give both); not with ``exact``.
        steps: compare only the first ``steps`` steps (both runs must have them); by default every
            step, and runs of different lengths diverge where the shorter one ends.

    Returns:
        A :class:`Comparison`; ``.ok`` tells whether the runs agree, ``.first_divergence`` where
        they part.

    Example::

        result = compare("golden/paddle", "port", exact=True)
        assert result.ok, result.summary()
    """
    if exact and (rtol is not None or atol is not None):
        raise ValueError("exact=True compares bits: rtol/atol do not apply")
    tolerances("float32", rtol, atol)  # both or neither
    for name, given in (("reference", reference), ("candidate", candidate)):
        if not isinstance(given, (Trace, str, os.PathLike)):
            raise TypeError(f"{name} should be a Trace or the path of a saved one, but received {type(given).__name__}")
    ref, cand = load_trace(reference), load_trace(candidate)
    lr, lc = ref.meta.get("layout"), cand.meta.get("layout")
    if lr != lc:
        raise ValueError(
            f"the traces are in different layouts (reference {lr!r}, candidate {lc!r}): record the Paddle run "
            "with TraceRecorder(..., port=torch_module) so that it uses the port's names and layouts"
        )
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
    by_cat: dict[str, list[str]] = {}
    for k in names:
        by_cat.setdefault(_category(k), []).append(k)

    scalars: list[dict[str, tuple[Any, Any, bool]]] = []
    metrics: list[TensorMetrics] = []
    first: Divergence | None = None
    for step in range(n):
        row: dict[str, tuple[Any, Any, bool]] = {}
        for item in ORDER:
            if item in SCALARS:
                a, b = ref.steps[step].get(item), cand.steps[step].get(item)
                ok = _scalar_ok(item, a, b, exact, rtol, atol)
                row[item] = (a, b, ok)
                if not ok and first is None:
                    first = Divergence(
                        step, item, "differs" if exact or item in _EXACT_SCALARS else "out of tolerance", None, a, b
                    )
                continue
            for name in by_cat.get(item, []):
                r, c = ref.series.get(name), cand.series.get(name)
                pr = r.position(step) if r is not None else None
                pc = c.position(step) if c is not None else None
                if pr is None and pc is None:
                    continue
                if r is None or c is None or pr is None or pc is None:
                    if first is None:
                        side = "candidate" if pr is None else "reference"
                        first = Divergence(step, name, f"recorded only by the {side} at this step")
                    continue
                m, d = _tensor(step, name, r, pr, c, pc, exact, rtol, atol)
                metrics.append(m)
                if d is not None and first is None:
                    first = d
        scalars.append(row)
    if first is None and steps is None and len(ref) != len(cand):
        first = Divergence(n, "steps", f"the reference has {len(ref)} steps, the candidate {len(cand)}")
    return Comparison(exact, rtol, atol, n, ref.meta, cand.meta, scalars, metrics, first, notes)
