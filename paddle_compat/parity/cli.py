"""``python -m paddle_compat.parity``: record, compare and report parity traces.

    python -m paddle_compat.parity record -o traces/paddle paddle_side.py --steps 40
    python -m paddle_compat.parity compare traces/paddle traces/port --exact
    python -m paddle_compat.parity report traces/paddle traces/port -o parity-report
    python -m paddle_compat.parity run paddle_train.py port_train.py -o traces --tolerance 1e-4 -- --steps 40
    python -m paddle_compat.parity layers models.py:paddle_model models.py:port --input batch.npz

Exit status: 0 when the runs agree (within tolerance, or bitwise with ``--exact``) or the recording
succeeded; 1 when they diverge (the first divergence is printed) or the recorded script failed;
2 on usage errors (bad arguments, missing or unreadable traces, incompatible traces).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
    rec.add_argument("-o", "--out", required=True,
                     help="trace path (OUT.json + OUT.npz; the script's output, shown as it runs, kept in OUT.log)")
    rec.add_argument("--python", help="interpreter for the script (default: this one)")
    rec.add_argument("--timeout", type=float, help="seconds before the script is stopped")
    rec.add_argument("script", help="the Python script (it calls TraceRecorder.save() with no path)")
    rec.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")

    lay = sub.add_parser(
        "layers",
        help="one step of a Paddle model and its port, layer by layer (diff_layers)",
        description="Each model is FILE.py:NAME or module:NAME, a function returning the model (or the model "
        "itself); the input is a .npy file, or a .npz whose arrays are the positional inputs in order.",
    )
    lay.add_argument("paddle_model", help="FILE.py:NAME or module:NAME giving the Paddle layer")
    lay.add_argument("port", help="FILE.py:NAME or module:NAME giving the torch port")
    lay.add_argument("--input", required=True, help="a .npy file, or a .npz of the positional inputs in order")
    lay.add_argument("--load", choices=("paddle", "none"), default="paddle", help="'none': weights already loaded")
    lay.add_argument("--chained", action="store_true", help="compare the natural runs (not single-step)")
    lay.add_argument("--rtol", type=float, help="norm-relative tolerance (default 1e-6)")
    lay.add_argument("--ignore", default="", help="comma-separated glob patterns of layer paths not to compare")
    lay.add_argument("--depth", type=int, help="compare layers at most this deep")
    lay.add_argument("--json", metavar="FILE", help="also write the full result as JSON")

    commands = (
        ("compare", "compare two traces"),
        ("report", f"compare and write a report ({', '.join(FORMATS)})"),
        ("run", "record a Paddle script and the port's script (child processes), then compare"),
    )
    for name, help_text in commands:
        p = sub.add_parser(name, help=help_text)
        if name == "run":
            p.add_argument("reference", metavar="paddle_script", help="the Paddle script (saves its trace)")
            p.add_argument("candidate", metavar="port_script", help="the port's script (saves its trace)")
            p.add_argument("-o", "--out", default="parity-traces",
                           help="the traces' folder, the scripts' output kept there as paddle.log and port.log "
                           "(default: %(default)s)")
            p.add_argument("--timeout", type=float, help="seconds before a script is stopped")
            p.epilog = "arguments after -- go to both scripts (run a.py b.py -o traces -- --steps 40)"
        else:
            p.add_argument("reference", help="the reference trace (Paddle)")
            p.add_argument("candidate", help="the candidate trace (the port)")
        p.add_argument("--exact", action="store_true", help="bitwise comparison")
        p.add_argument("--rtol", type=float, help="relative tolerance (with --atol; default: per dtype)")
        p.add_argument("--atol", type=float, help="absolute tolerance (with --rtol)")
        p.add_argument("--steps", type=int, help="compare only the first STEPS steps")
        p.add_argument(
            "--tolerance",
            help="norm-relative bounds: one number, or NAME=BOUND pairs by category, glob or name "
            "(e.g. 'grad=1e-4,act/*=1e-5')",
        )
        p.add_argument("--baseline", help="a second reference trace: its distance from the reference is the noise")
        p.add_argument("--baseline-factor", type=float, default=10.0, help="how far beyond that noise (default 10)")
        if name != "report":
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
            args.reference,
            args.candidate,
            exact=args.exact,
            rtol=args.rtol,
            atol=args.atol,
            steps=args.steps,
            tolerance=_tolerance(args.tolerance),
            baseline=args.baseline,
            baseline_factor=args.baseline_factor,
        )
    except (OSError, ValueError, KeyError) as e:
        raise _Usage(str(e)) from e


def _tolerance(spec: str | None) -> float | dict[str, float] | None:
    """``--tolerance``: one number, or ``NAME=BOUND`` pairs separated by commas."""
    if spec is None:
        return None
    try:
        if "=" not in spec:
            return float(spec)
        pairs = [item.split("=", 1) for item in spec.split(",") if item.strip()]
        return {k.strip(): float(v) for k, v in pairs}
    except ValueError:
        raise _Usage(f"--tolerance: a number, or NAME=BOUND pairs separated by commas (got {spec!r})") from None


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


def _object(spec: str) -> Any:
    """``FILE.py:NAME`` or ``module:NAME``: the object, called when it is a function or a class."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise _Usage(f"{spec!r}: give FILE.py:NAME or module:NAME")
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise _Usage(f"{spec!r}: no file {where}")
            loader = importlib.util.spec_from_file_location(path.stem, path)
            if loader is None or loader.loader is None:
                raise _Usage(f"{spec!r}: cannot import {where}")
            module = importlib.util.module_from_spec(loader)
            sys.path.insert(0, str(path.resolve().parent))  # the file's own imports, as when run as a script
            try:
                loader.loader.exec_module(module)
            finally:
                sys.path.remove(str(path.resolve().parent))
        else:
            module = importlib.import_module(where)
        found = getattr(module, name)
    except (ImportError, AttributeError) as e:
        raise _Usage(f"{spec!r}: {e}") from e
    # a function or a class builds the model; anything else is the model itself
    return found() if inspect.isfunction(found) or isinstance(found, type) else found


def _inputs(path: str) -> Any:
    import numpy as np

    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise _Usage(f"--input: cannot read {path}: {e}") from e
    if isinstance(loaded, np.ndarray):
        return loaded
    with loaded:
        return tuple(loaded[k] for k in loaded.files)


def _layers(args: argparse.Namespace) -> int:
    from .layer_diff import diff_layers

    paddle_model, port = _object(args.paddle_model), _object(args.port)
    kwargs: dict[str, Any] = {}
    if args.rtol is not None:
        kwargs["rtol"] = args.rtol
    if args.depth is not None:
        kwargs["depth"] = args.depth
    try:
        result = diff_layers(
            paddle_model,
            port,
            _inputs(args.input),
            load=None if args.load == "none" else "paddle",
            single_step=not args.chained,
            ignore=[g.strip() for g in args.ignore.split(",") if g.strip()],
            **kwargs,
        )
    except (TypeError, ValueError) as e:
        raise _Usage(str(e)) from e
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(result.to_dict(), indent=1))
        except OSError as e:
            raise _Usage(f"--json: cannot write {args.json}: {e.strerror or e}") from e
    print(result.summary())
    print(result.tree())
    return 0 if result.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line (``python -m paddle_compat.parity``); returns the exit status.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).

    Example::

        status = main(["compare", "traces/paddle", "traces/port", "--exact"])
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    if argv[:1] == ["run"] and "--" in argv:  # the scripts' own arguments
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    args = _parser().parse_args(argv)
    try:
        if args.command == "layers":
            return _layers(args)
        if args.command == "record":
            try:
                trace = record_script(args.script, args.out, args=args.args, python=args.python, timeout=args.timeout,
                                      echo=sys.stdout)
            except FileNotFoundError as e:
                raise _Usage(str(e)) from e
            except RecordingError as e:
                print(f"recording failed: {e}", file=sys.stderr)
                return 1
            print(f"recorded {len(trace)} steps, {len(trace.series)} tensors -> {args.out}")
            return 0
        if args.command == "run":
            out = Path(args.out)
            for side, script in (("paddle", args.reference), ("port", args.candidate)):
                print(f"recording the {side} script ({script}):", flush=True)
                try:
                    record_script(script, out / side, args=script_args, timeout=args.timeout, echo=sys.stdout)
                except FileNotFoundError as e:
                    raise _Usage(str(e)) from e
                except RecordingError as e:
                    print(f"recording the {side} script failed: {e}", file=sys.stderr)
                    return 1
            args.reference, args.candidate = str(out / "paddle"), str(out / "port")
        result = _compare(args)
        if args.command != "report":
            if args.json:
                try:
                    Path(args.json).write_text(to_json(result))
                except OSError as e:
                    raise _Usage(f"--json: cannot write {args.json}: {e.strerror or e}") from e
        else:
            formats = _formats(args.format)
            try:
                written = write_report(result, args.out, formats)
            except ImportError as e:
                raise _Usage(str(e)) from e
            except OSError as e:
                raise _Usage(f"-o: cannot write the report into {args.out}: {e.strerror or e}") from e
            print("report: " + ", ".join(str(p) for p in written.values()))
        print(result.summary())
        return 0 if result.ok else 1
    except _Usage as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
