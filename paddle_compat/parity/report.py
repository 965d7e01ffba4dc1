"""A comparison as JSON, as a Markdown summary, and as a PNG figure (matplotlib, optional).

The figure has two panels: both runs' loss-scale trajectories (skipped steps marked), and the
largest ulp distance of the parameters (and of the optimizer state) at each step.
Plotting needs the ``plot`` extra (``pip install paddle_compat[plot]``).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .compare import Comparison, TensorMetrics, fmt_ulps
from .convert import string_list

__all__ = ["FORMATS", "available_formats", "plot", "to_json", "to_markdown", "write_report"]

_MAX_ROWS = 200


def to_json(comparison: Comparison) -> str:
    """Everything :func:`compare` found, as a JSON document (non-finite floats as strings).

    Args:
        comparison: what ``compare`` returned.

    Example::

        Path("parity.json").write_text(to_json(compare(reference, candidate)))
    """
    return json.dumps(comparison.to_dict(), indent=1, allow_nan=False) + "\n"


def _num(x: Any) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        if math.isnan(x) or math.isinf(x):
            return str(x)
        return f"{x:.9g}"
    return str(x)


def _ulps(x: float | None) -> str:
    return "–" if x is None else fmt_ulps(x)


def to_markdown(comparison: Comparison) -> str:
    """A human summary: verdict, first divergence, the runs, per-step scalars, the differing tensors.

    Args:
        comparison: what ``compare`` returned.

    Example::

        Path("parity.md").write_text(to_markdown(compare(reference, candidate)))
    """
    c = comparison
    lines = [
        "# Parity report",
        "",
        f"**{'Within tolerance' if c.ok else 'Diverged'}** over {c.steps} steps ({c.mode}).",
        "",
    ]
    if c.first_divergence is not None:
        lines += ["## First divergence", "", c.first_divergence.describe(), ""]
    lines += ["## Runs", "", "| | reference | candidate |", "|---|---|---|"]
    for key in ("framework", "layout"):
        lines.append(f"| {key} | {c.reference_meta.get(key, '–')} | {c.candidate_meta.get(key, '–')} |")
    env_r, env_c = c.reference_meta.get("environment", {}), c.candidate_meta.get("environment", {})
    for key in sorted(set(env_r) | set(env_c)):
        lines.append(f"| {key} | {env_r.get(key, '–')} | {env_c.get(key, '–')} |")
    lines.append("")

    ulps = c.max_ulps_per_step("param/")
    differing: dict[int, int] = {}
    failing = {m.step for m in c.tensors if not m.ok}
    for m in c.tensors:
        if not m.bitwise_equal:
            differing[m.step] = differing.get(m.step, 0) + 1
    lines += [
        "## Steps",
        "",
        "| step | loss (reference) | loss (candidate) | scale (reference) | scale (candidate) | found_inf | "
        "max param ulps | tensors not bitwise equal |",
        "|---:|---:|---:|---:|---:|:---:|---:|---:|",
    ]
    for step, row in enumerate(c.scalars[:_MAX_ROWS]):
        loss, scale, inf = (
            row.get("loss", (None, None, True)),
            row.get("scale", (None, None, True)),
            row.get("found_inf"),
        )
        mark = "" if step not in failing and all(ok for _, _, ok in row.values()) else " ⚠"
        found = "–" if inf is None else (_num(inf[0]) if inf[0] == inf[1] else f"{_num(inf[0])} / {_num(inf[1])}")
        lines.append(
            f"| {step}{mark} | {_num(loss[0])} | {_num(loss[1])} | {_num(scale[0])} | {_num(scale[1])} | {found} | "
            f"{_ulps(ulps[step])} | {differing.get(step, 0)} |"
        )
    if c.steps > _MAX_ROWS:
        lines.append(f"| … | {c.steps - _MAX_ROWS} more steps in the JSON report | | | | | | |")
    lines.append("")

    worst: dict[str, dict[str, Any]] = {}
    for m in c.tensors:
        if m.bitwise_equal:
            continue
        w = worst.setdefault(
            m.name, {"first": m.step, "steps": 0, "ulps": None, "abs": 0.0, "rel": 0.0, "sampled": False}
        )
        w["steps"] += 1
        if m.max_ulps is not None:
            w["ulps"] = max(w["ulps"] or 0.0, m.max_ulps)
        w["abs"] = max(w["abs"], m.max_abs or 0.0)
        w["rel"] = max(w["rel"], m.max_rel or 0.0)
        w["sampled"] |= m.sampled
    if worst:
        lines += [
            "## Tensors that differ",
            "",
            "| tensor | first step | steps differing | max ulps | max abs | max rel |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, w in sorted(worst.items(), key=lambda kv: (kv[1]["first"], kv[0]))[:_MAX_ROWS]:
            star = " (sampled)" if w["sampled"] else ""
            cells = [f"`{name}`{star}", w["first"], w["steps"], _ulps(w["ulps"]), f"{w['abs']:.3g}", f"{w['rel']:.3g}"]
            lines.append("| " + " | ".join(map(str, cells)) + " |")
        lines.append("")
    if c.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in c.notes] + [""]
    return "\n".join(lines)


def plot(comparison: Comparison, path: str | os.PathLike[str]) -> Path:
    """Write the PNG figure: scale trajectories with skipped steps marked, and per-step max ulps.

    Uses matplotlib's object API (no pyplot, no global backend change).

    Args:
        comparison: what ``compare`` returned.
        path: the PNG file to write; returned as a ``Path``.

    Example::

        plot(compare(reference, candidate), "parity.png")
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("plotting needs matplotlib: pip install 'paddle_compat[plot]'") from e
    c = comparison
    steps = list(range(c.steps))
    layers = _layer_rows(c)
    fig = Figure(figsize=(9, 9.5 if layers else 6.5), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(3 if layers else 2, 1)
    top, bottom = axes[0], axes[1]
    bottom.sharex(top)
    sides = (
        ("reference", "-", {"marker": "x", "s": 40, "color": "C3"}),
        ("candidate", "--", {"marker": "o", "s": 70, "facecolors": "none", "edgecolors": "C3"}),
    )
    has_scale = any(row.get("scale", (None, None, True))[i] is not None for row in c.scalars for i in (0, 1))
    for side, (label, style, skip_marks) in enumerate(sides):
        key = "scale" if has_scale else "loss"
        values = [row.get(key, (None, None, True))[side] for row in c.scalars]
        xs = [s for s, v in zip(steps, values, strict=True) if v is not None and math.isfinite(v)]
        if xs:
            top.step(xs, [values[s] for s in xs], style, where="post", label=f"{label} {key}")
        skipped = [s for s, row in zip(steps, c.scalars, strict=True) if (row.get("found_inf") or (None, None))[side]]
        if skipped:
            ys = [values[s] if values[s] is not None else 1.0 for s in skipped]
            top.scatter(skipped, ys, label=f"{label}: step skipped", zorder=3, **skip_marks)
    if has_scale:
        top.set_yscale("log", base=2)
    top.set_ylabel("loss scale" if has_scale else "loss")
    top.set_title("Loss scale (skipped steps marked)" if has_scale else "Loss (no loss scaler recorded)")
    edge = bottom.get_xaxis_transform()  # x in data, y in axes fraction: marks at the top edge
    norm = c.by_norm
    per_step = c.max_rel_l2_per_step if norm else c.max_ulps_per_step
    for i, (prefix, label) in enumerate(
        (("param/", "parameters"), ("opt/", "optimizer state"), ("grad/", "gradients"))
    ):
        values = per_step(prefix)
        finite = [(s, u) for s, u in zip(steps, values, strict=True) if u is not None and math.isfinite(u)]
        if finite:
            bottom.plot([s for s, _ in finite], [u for _, u in finite], marker=".", label=label, color=f"C{i}")
        bad = [s for s, u in zip(steps, values, strict=True) if u is not None and not math.isfinite(u)]
        zero = _zero_reference_steps(c, prefix, norm)
        # marks at the top edge, not values: finite on both sides against an all-zero reference
        # (infinitely many ulps), or a NaN/inf against a number
        marks = (([s for s in bad if s in zero], "^", "against an all-zero reference"),
                 ([s for s in bad if s not in zero], "X", "inf/NaN against a number"))
        for where, marker, what in marks:
            if where:
                bottom.scatter(where, [0.96] * len(where), transform=edge, marker=marker, s=60, color=f"C{i}",
                               zorder=4, label=f"{label}: {what}")
    bottom.set_xlabel("step")
    if norm:
        bottom.set_yscale("symlog", linthresh=1e-9)
        bottom.set_ylabel("max norm-relative error")
        bottom.set_title("Largest norm-relative error per step (X = inf/NaN against a number, ^ = all-zero reference)")
    else:
        bottom.set_yscale("symlog", linthresh=1)
        bottom.set_ylim(bottom=0)
        bottom.set_ylabel("max ulp distance")
        bottom.set_title("Largest ulp distance per step (0 = bitwise equal; X = NaN against a number)")
    d = c.first_divergence
    if d is not None and d.step < c.steps:
        for ax in (top, bottom):
            ax.axvline(d.step, color="C3", alpha=0.4, linestyle=":", label="first divergence")
    if layers:
        _plot_layers(axes[2], layers, d.step if d is not None else 0)
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best", fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, format="png")
    return out


def _zero_reference(m: TensorMetrics, value: float | None) -> bool:
    """An infinite distance between finite values: the norm-relative error against an all-zero
    reference (an inf or NaN on either side makes ``max_abs`` infinite)."""
    return value is not None and math.isinf(value) and m.max_abs is not None and math.isfinite(m.max_abs)


def _zero_reference_steps(c: Comparison, prefix: str, norm: bool) -> set[int]:
    """The steps whose infinite distance for these tensors comes only from all-zero references."""
    zero: set[int] = set()
    nonfinite: set[int] = set()
    for m in c.tensors:
        value = m.rel_l2 if norm else m.max_ulps
        if m.name.startswith(prefix) and value is not None and not math.isfinite(value):
            (zero if _zero_reference(m, value) else nonfinite).add(m.step)
    return zero - nonfinite


def _layer_rows(c: Comparison) -> list[tuple[str, float | None, bool, bool]]:
    """At the first diverging step (else the last), each layer's output in forward order, then the
    gradients flowing back: ``(name, distance, ok, against an all-zero reference)``; the distance is
    the norm-relative error where it was judged by the norm, else the largest ulp distance (``inf``:
    a NaN against a number, or a zero reference)."""
    step = c.first_divergence.step if c.first_divergence is not None else c.steps - 1
    rows = []
    for m in c.tensors:
        if m.step == step and m.name.split("/", 1)[0] in ("act", "actgrad"):
            value = m.rel_l2 if m.bound is not None else m.max_ulps
            rows.append((m.name, value, m.ok, _zero_reference(m, value)))
    return rows


def _plot_layers(ax: Any, rows: list[tuple[str, float | None, bool, bool]], step: int) -> None:
    names = [row[0] for row in rows]
    finite = [v for _, v, _, _ in rows if v is not None and math.isfinite(v)]
    top = max(finite, default=1.0) or 1.0
    ys = list(range(len(rows)))
    for y, (_, v, ok, zero) in zip(ys, rows, strict=True):
        color = "C2" if ok else "C3"
        if v is None:
            continue
        if math.isfinite(v):
            ax.barh(y, v, color=color)
        else:  # inf or NaN: a mark at the edge, not a bar a billion billion long
            ax.scatter([top * 1.5], [y], marker="^" if zero else "X", s=60, color="C3", zorder=3)
            text = "all-zero reference" if zero else "inf/NaN"
            ax.annotate(text, (top * 1.5, y), xytext=(6, -3), textcoords="offset points", fontsize=7)
    ax.set_yticks(ys, [n.split("/", 1)[1] + (" (grad)" if n.startswith("actgrad/") else "") for n in names], fontsize=6)
    ax.invert_yaxis()
    ax.set_xscale("symlog", linthresh=1e-9)
    ax.set_xlabel("norm-relative error (or max ulps); red: out of tolerance")
    ax.set_title(f"Step {step}: per-layer divergence (outputs in forward order, then gradients)")


def _text(render: Callable[[Comparison], str]) -> Callable[[Comparison, Path], Path]:
    def write(comparison: Comparison, path: Path) -> Path:
        path.write_text(render(comparison))
        return path

    return write


# The report formats, named here only: the file each writes, how, and the module it needs.
_WRITERS: dict[str, tuple[str, Callable[[Comparison, Path], Path], str | None]] = {
    "json": ("report.json", _text(to_json), None),
    "md": ("report.md", _text(to_markdown), None),
    "png": ("report.png", plot, "matplotlib"),
}
FORMATS = tuple(_WRITERS)


def check_formats(formats: Iterable[str]) -> list[str]:
    """``formats`` as a list; ``TypeError`` for one string, ``ValueError`` naming the unknown ones
    (and the known ones)."""
    chosen = list(string_list(formats, "formats", "format names"))
    unknown = [f for f in chosen if f not in _WRITERS]
    if unknown:
        raise ValueError(f"formats: unknown {unknown}; choose from {', '.join(map(repr, FORMATS))}")
    return chosen


def available_formats() -> tuple[str, ...]:
    """The report formats this installation can write: ``"json"``, ``"md"``, and ``"png"`` when
    matplotlib is installed."""
    return tuple(f for f, (_, _, needs) in _WRITERS.items() if needs is None or importlib.util.find_spec(needs))


def write_report(
    comparison: Comparison, directory: str | os.PathLike[str], formats: Iterable[str] = FORMATS
) -> dict[str, Path]:
    """Write ``report.json``, ``report.md`` and ``report.png`` (those in ``formats``) into ``directory``.

    Args:
        comparison: what ``compare`` returned.
        directory: the folder (created if missing).
        formats: any of ``"json"``, ``"md"``, ``"png"`` (the PNG needs matplotlib).

    Returns ``{format: path written}``.

    Example::

        write_report(compare(paddle_trace, port_trace, exact=True), "parity-report")
    """
    chosen = check_formats(formats)
    out_dir = Path(directory)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for name, (filename, write, _) in _WRITERS.items():
        if name in chosen:
            written[name] = write(comparison, out_dir / filename)
    return written
