"""``python -m paddle_compat.parity``: record, compare and report parity traces.

    python -m paddle_compat.parity record -o traces/paddle paddle_side.py --steps 40
    python -m paddle_compat.parity compare traces/paddle traces/port --exact
    python -m paddle_compat.parity report traces/paddle traces/port -o parity-report

Exit status: 0 when the runs agree (within tolerance, or bitwise with ``--exact``) or the recording
succeeded; 1 when they diverge (the first divergence is printed) or the recorded script failed;
2 on usage errors (bad arguments, missing or unreadable traces, incompatible traces).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .compare import Comparison, compare
from .record import RecordingError, record_script
from .report import FORMATS, available_formats, check_formats, to_json, write_report

__all__ = ["main"]


class _Usage(Exception):
    """A usage error found after parsing (exit status 2)."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m paddle_compat.parity",
        description="Prove a torch port trains like Paddle: record traces, compare them step by step.",
        epilog="exit status: 0 the runs agree (or the recording succeeded), 1 they diverge (or the recorded "
        "script failed), 2 usage error",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    rec = sub.add_parser("record", help="run a script that records a trace, in a child process")
    rec.add_argument("-o", "--out", required=True, help="trace path (OUT.json + OUT.npz)")
    rec.add_argument("--python", help="interpreter for the script (default: this one)")
    rec.add_argument("--timeout", type=float, help="seconds before the script is stopped")
    rec.add_argument("script", help="the Python script (it calls TraceRecorder.save() with no path)")
    rec.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")

    report_help = f"compare and write a report ({', '.join(FORMATS)})"
    for name, help_text in (("compare", "compare two traces"), ("report", report_help)):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("reference", help="the reference trace (Paddle)")
        p.add_argument("candidate", help="the candidate trace (the port)")
        p.add_argument("--exact", action="store_true", help="bitwise comparison")
        p.add_argument("--rtol", type=float, help="relative tolerance (with --atol; default: per dtype)")
        p.add_argument("--atol", type=float, help="absolute tolerance (with --rtol)")
        p.add_argument("--steps", type=int, help="compare only the first STEPS steps")
        if name == "compare":
            p.add_argument("--json", metavar="FILE", help="also write the full comparison as JSON")
        else:
            p.add_argument("-o", "--out", default="parity-report", help="report folder (default: parity-report)")
            p.add_argument(
                "--format", default=None, help=f"comma-separated: {','.join(FORMATS)} (default: all available)"
            )
    return parser


def _compare(args: argparse.Namespace) -> Comparison:
    if args.exact and (args.rtol is not None or args.atol is not None):
        raise _Usage("--exact compares bits: --rtol/--atol do not apply")
    if (args.rtol is None) != (args.atol is None):
        raise _Usage("give --rtol and --atol together")
    try:
        return compare(
            args.reference, args.candidate, exact=args.exact, rtol=args.rtol, atol=args.atol, steps=args.steps
        )
    except (OSError, ValueError, KeyError) as e:
        raise _Usage(str(e)) from e


def _formats(requested: str | None) -> list[str]:
    if requested is not None:
        formats = [f.strip() for f in requested.split(",") if f.strip()]
        try:
            if not formats:
                raise ValueError
            return check_formats(formats)
        except ValueError:
            raise _Usage(f"--format: choose among {', '.join(FORMATS)} (got {requested!r})") from None
    formats = list(available_formats())
    if set(formats) != set(FORMATS):
        print("note: matplotlib is not installed, so no PNG (pip install 'paddle_compat[plot]')", file=sys.stderr)
    return formats


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (``python -m paddle_compat.parity``); returns the exit status.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).

    Example::

        status = main(["compare", "traces/paddle", "traces/port", "--exact"])
    """
    args = _parser().parse_args(argv)
    try:
        if args.command == "record":
            try:
                trace = record_script(args.script, args.out, args=args.args, python=args.python, timeout=args.timeout)
            except FileNotFoundError as e:
                raise _Usage(str(e)) from e
            except RecordingError as e:
                print(f"recording failed: {e}", file=sys.stderr)
                return 1
            print(f"recorded {len(trace)} steps, {len(trace.series)} tensors -> {args.out}")
            return 0
        result = _compare(args)
        if args.command == "compare":
            if args.json:
                with open(args.json, "w") as f:
                    f.write(to_json(result))
        else:
            formats = _formats(args.format)
            try:
                written = write_report(result, args.out, formats)
            except ImportError as e:
                raise _Usage(str(e)) from e
            print("report: " + ", ".join(str(p) for p in written.values()))
        print(result.summary())
        return 0 if result.ok else 1
    except _Usage as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
