"""``python -m paddle_compat.selfcheck [--device cpu|cuda] [--json PATH]``: does this machine compute
what paddle_compat promises? The first thing to run on a new GPU machine.

A fixed battery, one verdict per line (``PASS``, ``FAIL``, or ``SKIP`` where the machine lacks what a
check needs), exit status 0 only without a ``FAIL`` (2 for bad arguments, such as a ``--json``
path that cannot be written: refused before the battery runs):

- the kernels in use, the versions and the Paddle CPU profile (``_paddle_cpu``: informational);
- on ``cpu``: 41 optimizer cases against real Paddle 3.3.1's recorded bits, on every profile in turn
  (``_recorded``), so that any host checks the bits of AVX-512 and of AVX2 hosts;
- every optimizer configuration against its exact emulation, bit for bit: on ``cpu`` the compiled
  kernels of every optimizer of ``paddle_compat.optimizer`` (the table of ``optimizer/_cases``)
  against its torch form; on ``cuda`` the GPU kernels (Triton, or the per-tensor path) of the
  optimizers that have them against Paddle's GPU formulas emulated exactly on the CPU, float64
  included;
- the GradScaler's scale and skip count through injected overflows against Paddle's policy replayed
  on the host;
- on ``cuda``: host syncs per step (0 with our optimizers made with ``fused=True``, which skip on
  the device; 1 otherwise), a whole training step (forward, backward, scaler, optimizer) captured
  in a CUDA graph and replayed against eager steps, and parameters on a second device that is not
  the current one, when there is one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

from . import __version__, _devices, _native, _paddle_cpu, _recorded
from .amp import GradScaler, auto_cast
from .amp.loss_scale import HOST, LossScaleState, next_state
from .nn.clip import ClipGradBase
from .optimizer import AdamW, _cases, _eigen, _multi_tensor

__all__ = ["Result", "main", "run"]

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass
class Result:
    check: str
    verdict: str
    detail: str = ""


# --- the optimizer configurations: every one of the optimizers' table ----------------------------
@dataclass(frozen=True)
class _Config:
    """One configuration of the table: ``make(params, multi_precision)`` builds it."""

    entry: _cases.Entry
    config: _cases.Config

    def __call__(self, params: Any, multi_precision: bool) -> torch.optim.Optimizer:
        return self.entry.build(self.config, params, multi_precision)


CONFIGS: dict[str, _Config] = {
    entry.title(config): _Config(entry, config) for entry in _cases.TABLE for config in entry.configs
}

# (parameter dtype, gradient dtype, multi_precision, gradient in main_grad)
DTYPES = {
    "fp32": (torch.float32, torch.float32, False, False),
    "bf16+master": (torch.bfloat16, torch.bfloat16, True, False),
    "fp16+master, fp32 main_grad": (torch.float16, torch.float32, True, True),
    "fp64": (torch.float64, torch.float64, False, False),
}
SIZES = (4096, 7, 3001)  # an aligned, a tiny and an unaligned tensor


def _train(make: _Config, dtypes: tuple[Any, ...], device: str) -> list[Tensor]:
    """Steps with fixed random gradients (drawn on the CPU); the parameters and states, on the CPU."""
    dtype, grad_dtype, mp, main_grad = dtypes
    steps = make.config.steps
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen).to(dtype).to(device)) for n in SIZES]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Paddle's warning on low-precision accumulators
        opt = make(params, mp)
        for _ in range(steps):
            for p in params:
                g = (torch.randn(p.shape, generator=gen) * 0.1).to(grad_dtype).to(device)
                if main_grad:
                    p.main_grad = g  # type: ignore[attr-defined]
                else:
                    p.grad = g
            opt.step()
    out = [p.detach().cpu() for p in params]
    for p in params:
        out += [v.detach().cpu() for v in opt.state[p].values() if isinstance(v, Tensor)]
    return out


def _same_bits(a: list[Tensor], b: list[Tensor]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        nan_x, nan_y = torch.isnan(x.float()), torch.isnan(y.float())
        ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
        if not (torch.equal(nan_x, nan_y) and torch.equal(x.view(ints)[~nan_x], y.view(ints)[~nan_y])):
            return False
    return True


@contextlib.contextmanager
def _compiled_kernels(on: bool) -> Iterator[None]:
    """The compiled CPU kernels switched on or off (``PADDLE_COMPAT_NATIVE``) for a while."""
    saved = _native._enabled
    _native._enabled = on
    try:
        yield
    finally:
        _native._enabled = saved


@contextlib.contextmanager
def _torch_forms() -> Iterator[None]:
    """The torch forms of the compiled CPU kernels, whose Eigen square root keeps the CPU's rsqrt
    from the kernels (which the forms take when the kernels are switched off for good: without it
    they take the correctly rounded root, and differ by design, ``_native.FALLBACK``)."""
    rsqrt = _eigen._hardware_rsqrt()
    saved = _eigen._hardware_rsqrt
    _eigen._hardware_rsqrt = lambda: rsqrt
    try:
        with _compiled_kernels(False):
            yield
    finally:
        _eigen._hardware_rsqrt = saved


@contextlib.contextmanager
def _gpu_formulas_on_cpu() -> Iterator[None]:
    """CPU tensors follow Paddle's GPU formulas: their exact emulation (``_numerics``)."""
    saved = _devices.gpu_kernels
    _devices.gpu_kernels = lambda t: True
    try:
        yield
    finally:
        _devices.gpu_kernels = saved


@contextlib.contextmanager
def _clips_on(device: str) -> Iterator[None]:
    """Gradient clips take their norms on ``device`` for a while (gradients moved there and back).

    On a GPU a norm's sum runs in torch's order, not Paddle's (which is not reproduced: see
    docs/optimizers.md), so the last bits of a clip factor differ from any CPU emulation's; the
    emulation of a GPU run borrows the device's norms and checks everything else bit for bit.
    """
    saved = ClipGradBase.__call__

    def on_device(clip: ClipGradBase, params_grads: Any) -> Any:
        moved = [(p, None if g is None else g.to(device)) for p, g in params_grads]
        return [(p, None if g is None else g.cpu()) for p, g in saved(clip, moved)]

    ClipGradBase.__call__ = on_device  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        ClipGradBase.__call__ = saved  # type: ignore[method-assign]


@contextlib.contextmanager
def _lamb_norms_on(device: str) -> Iterator[None]:
    """Lamb's trust-ratio norms taken on ``device`` for a while, as ``_clips_on`` does for the clips:
    the GPU's sums are torch's, which no CPU emulation reproduces; the rest is checked bit for bit."""
    from .optimizer import lamb

    saved = lamb.squared_l2_norms, lamb.squared_l2_norm

    def on_device(xs: Any) -> list[Tensor]:
        return [sq.cpu() for sq in saved[0]([x.to(device) for x in xs])]

    lamb.squared_l2_norms = on_device
    lamb.squared_l2_norm = lambda x: on_device([x])[0]
    try:
        yield
    finally:
        lamb.squared_l2_norms, lamb.squared_l2_norm = saved


@contextlib.contextmanager
def _counting_rows() -> Iterator[list[int]]:
    """Counts the rows handed to the kernels for a while (``[count]``; none: the torch forms ran)."""
    added = [0]
    saved = _native.Batch.add

    def add(batch: _native.Batch, *args: Any, **kwargs: Any) -> None:
        added[0] += 1
        saved(batch, *args, **kwargs)

    _native.Batch.add = add  # type: ignore[method-assign, assignment]
    try:
        yield added
    finally:
        _native.Batch.add = saved  # type: ignore[method-assign]


def _optimizer_checks(device: str) -> Iterator[Result]:
    for name, make in CONFIGS.items():
        if device != "cpu" and not make.entry.gpu_kernels:  # no GPU kernels to check
            continue
        for label, dtypes in DTYPES.items():
            check = f"{name} [{label}]"
            if device == "cpu" and not _native.status().compiled:  # the torch forms against themselves
                yield Result(check, SKIP, "the compiled kernels are not used: nothing to compare")
                continue
            if device == "cpu":
                with _torch_forms():
                    reference = _train(make, dtypes, "cpu")
                with _counting_rows() as rows:
                    got = _train(make, dtypes, "cpu")
                if not rows[0]:  # (Rprop's low-precision parameters with master weights)
                    yield Result(check, SKIP, "the compiled kernels do not take these dtypes: the torch form runs")
                    continue
                what = "compiled kernels vs torch forms"
            else:
                with _gpu_formulas_on_cpu(), _compiled_kernels(False), _clips_on(device), _lamb_norms_on(device):
                    reference = _train(make, dtypes, "cpu")
                got = _train(make, dtypes, device)
                what = "GPU kernels vs exact emulation (clip and Lamb norms summed on the device)"
            yield Result(check, PASS if _same_bits(got, reference) else FAIL, what)


# --- Paddle's own recorded bits ----------------------------------------------------------------------
@contextlib.contextmanager
def _profile(name: str) -> Iterator[None]:
    """Paddle's CPU profile ``name`` forced (``PADDLE_COMPAT_PADDLE_CPU``) for a while."""
    saved = os.environ.get(_paddle_cpu.ENV)
    os.environ[_paddle_cpu.ENV] = name
    try:
        yield
    finally:
        if saved is None:
            del os.environ[_paddle_cpu.ENV]
        else:
            os.environ[_paddle_cpu.ENV] = saved


def _recorded_checks() -> list[Result]:
    """Every recorded case, on each profile forced in turn, against Paddle's recorded digests."""
    try:
        import numpy  # noqa: F401  (the cases' inputs come from NumPy's generator)
    except ImportError:
        return [Result("Paddle's recorded bits", SKIP, "NumPy is not installed: the cases' inputs cannot be made")]
    results = []
    for name, entry in sorted(_recorded.record()["profiles"].items()):
        with _profile(name):
            wrong = [case for case, want in sorted(entry["cases"].items())
                     if _recorded.digests(case) != want]
        detail = f"{len(entry['cases']) - len(wrong)}/{len(entry['cases'])} cases bitwise to {entry['source']}"
        results.append(Result(f"Paddle's recorded bits, profile {name}", FAIL if wrong else PASS,
                              detail + (f"; differ: {', '.join(wrong)}" if wrong else "")))
    return results


# --- the GradScaler ---------------------------------------------------------------------------------
_OVERFLOWS = {2, 3, 9, 14, 15, 16}


def _scaler_check(device: str) -> Result:
    """The scale and skip count through injected overflows, against Paddle's policy on the host."""
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4).to(device)
    opt = AdamW(0.001, parameters=model.parameters())
    scaler = GradScaler(init_loss_scaling=1024.0, incr_every_n_steps=3, decr_every_n_nan_or_inf=2, decr_ratio=0.3)
    policy = scaler._tracker.policy
    expected, state = [], LossScaleState(1024.0, 0, 0)
    got = []
    for step in range(24):
        x = torch.randn(8, 16)
        if step in _OVERFLOWS:
            x[0, 0] = float("inf")
        with auto_cast(dtype="float16"):  # the scaler scales for float16 training, as Paddle's
            loss = model(x.to(device)).float().pow(2).mean()
        scaled = scaler.scale(loss)
        scaled.backward()
        scaler.minimize(opt, scaled)
        opt.clear_grad()
        got.append(scaler.get_scale())
        state, _ = next_state(state, step in _OVERFLOWS, policy, HOST)
        expected.append(state.scale)
    skipped = scaler.get_skipped_steps()
    ok = got == expected and skipped == len(_OVERFLOWS)
    return Result("GradScaler trajectory with injected overflow", PASS if ok else FAIL,
                  f"{len(got)} steps, {skipped} skipped" + ("" if ok else f"; scales {got} != {expected}"))


# --- CUDA only ----------------------------------------------------------------------------------------
def _sync_check(device: str) -> list[Result]:
    results = []
    for name, make, target in (
        ("AdamW(fused=True) (ours, skips on the device)", lambda ps: AdamW(0.01, parameters=ps, fused=True), 0),
        ("AdamW (ours, the scaler skips it)", lambda ps: AdamW(0.01, parameters=ps), 1),
        ("torch.optim.SGD (not fused)", lambda ps: torch.optim.SGD(ps, lr=0.01), 1),
    ):
        params = [torch.nn.Parameter(torch.randn(1000, device=device)) for _ in range(3)]
        opt, scaler = make(params), GradScaler()
        counts = []
        for step in range(4):
            for p in params:
                p.grad = torch.randn_like(p)
            with auto_cast(dtype="float16"):
                scaled = scaler.scale(torch.zeros((), device=device))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    scaler.minimize(opt, scaled)
                finally:
                    torch.cuda.set_sync_debug_mode("default")
            if step:
                counts.append(sum("synchroniz" in str(w.message) for w in caught))
        ok = all(c == target for c in counts)
        results.append(Result(f"host syncs per step: {name}", PASS if ok else FAIL, f"{counts} (target {target})"))
    return results


_GRAPH_OVERFLOWS = {4, 5}  # the steps (replays) that find inf: the scale falls, then grows


def _graph_check(device: str, with_scaler: bool = True, decr_every: int = 1) -> Result:
    """torch's whole-network capture: forward, backward, (scaler,) optimizer in one CUDA graph, replayed
    against eager steps; with a scaler through injected overflows and growth, its scale, counters and
    skips read after each replay (``decr_every`` 1: torch's update kernel; 2: Paddle's rule on tensors)."""

    def build() -> tuple[torch.nn.Module, AdamW, GradScaler]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(device)
        opt = AdamW(0.01, parameters=model.parameters(), fused=True)  # skips on the device: nothing to read
        scaler = GradScaler(init_loss_scaling=64.0, incr_every_n_steps=2, decr_every_n_nan_or_inf=decr_every)
        return model, opt, scaler

    xs = [torch.randn(16, 32, device=device, generator=None) for _ in range(12)]
    if with_scaler:
        for i in _GRAPH_OVERFLOWS:
            xs[i][0, 0] = float("inf")

    def step(model: torch.nn.Module, opt: AdamW, scaler: GradScaler, x: Tensor) -> None:
        opt.clear_grad(set_to_zero=False)
        if not with_scaler:
            model(x).pow(2).mean().backward()
            opt.step()
            return
        with auto_cast(dtype="float16"):
            loss = model(x).float().pow(2).mean()
        scaled = scaler.scale(loss)
        scaled.backward()
        scaler.minimize(opt, scaled)

    def seen(scaler: GradScaler) -> tuple[Any, ...]:  # one sync per read, none per replay
        return (scaler.get_scale(), scaler._incr_count, scaler._decr_count, scaler.last_step_skipped(),
                scaler.get_skipped_steps())

    eager = build()
    graphed = build()
    static_x = xs[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for x in xs[:3]:  # warm-up: state, tables, kernels
            static_x.copy_(x)
            step(*graphed, static_x)
    torch.cuda.current_stream().wait_stream(side)
    for x in xs[:3]:
        step(*eager, x)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(*graphed, static_x)
    got, expected = [], []
    for x in xs[3:]:
        static_x.copy_(x)
        graph.replay()
        step(*eager, x)
        if with_scaler:
            got.append(seen(graphed[2]))
            expected.append(seen(eager[2]))
    torch.cuda.synchronize()
    same = _same_bits([p.detach().cpu() for p in graphed[0].parameters()],
                      [p.detach().cpu() for p in eager[0].parameters()])
    replays = len(xs) - 3
    if not with_scaler:
        return Result("CUDA graph of a whole training step (torch's recipe)", PASS if same else FAIL,
                      f"{replays} replays against eager steps")
    scales = [s[0] for s in expected]
    moved = min(scales) < scales[0] < max(scales)  # it fell, then grew past where it started
    ok = same and got == expected and moved and expected[-1][4] == len(_GRAPH_OVERFLOWS)
    detail = f"{replays} replays, {len(_GRAPH_OVERFLOWS)} overflows, scales {scales}"
    if got != expected:
        detail += f"; replayed (scale, incr, decr, skipped, skips) {got} != eager {expected}"
    elif not same:
        detail += "; parameters differ"
    return Result(f"CUDA graph of a whole training step with a GradScaler (decr_every_n_nan_or_inf={decr_every})",
                  PASS if ok else FAIL, detail)


def _second_device_check() -> Result:
    if torch.cuda.device_count() < 2:
        return Result("parameters on a second, non-current GPU", SKIP, "one GPU")
    make = CONFIGS["Adam L2 AMSGrad, global norm"]
    with _gpu_formulas_on_cpu(), _compiled_kernels(False):
        reference = _train(make, DTYPES["bf16+master"], "cpu")
    with torch.cuda.device(0):
        got = _train(make, DTYPES["bf16+master"], "cuda:1")
    return Result("parameters on a second, non-current GPU", PASS if _same_bits(got, reference) else FAIL,
                  "Adam on cuda:1 while cuda:0 is current")


# --- the battery ------------------------------------------------------------------------------------
def _environment(device: str) -> list[Result]:
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    native = _native.status()
    results = [
        Result("versions", PASS, f"paddle_compat {__version__}, torch {torch.__version__}, Triton {triton_version}, "
                                 f"Python {platform.python_version()}"),
        Result("compiled CPU kernels", PASS if native.compiled else SKIP,
               f"loaded: {native.level}" if native.compiled else f"unavailable ({native.reason}): the torch forms run"),
        Result("Paddle CPU profile", PASS, f"{native.paddle_cpu} ("
               + (f"forced by {_paddle_cpu.ENV}" if _paddle_cpu.forced() else "this CPU's") + ")"),
    ]
    if device == "cuda":
        gpu = _multi_tensor.kernels(torch.device(device)) is not None
        use = "in use" if gpu else "unavailable: per-tensor path"
        results.append(Result("Triton GPU kernels", PASS if gpu else SKIP, f"{torch.cuda.get_device_name()}; {use}"))
    return results


def run(device: str, on_result: Callable[[Result], None] | None = None) -> list[Result]:
    """The battery for ``device`` (``"cpu"`` or ``"cuda"``); a check that raises is a ``FAIL``.
    ``on_result`` gets each verdict as soon as it is known (the command line prints it)."""
    steps: list[Callable[[], Iterable[Result]]] = [lambda: _environment(device), lambda: _optimizer_checks(device),
                                               lambda: [_scaler_check(device)]]
    if device == "cpu":
        steps.insert(2, _recorded_checks)
    if device == "cuda":
        steps += [lambda: _sync_check(device), lambda: [_graph_check(device, with_scaler=False)],
                  lambda: [_graph_check(device, decr_every=1), _graph_check(device, decr_every=2)],
                  lambda: [_second_device_check()]]
    results: list[Result] = []

    def verdict(result: Result) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    for index, step in enumerate(steps):
        try:
            for result in step():
                verdict(result)
        except Exception as error:  # a crash is a verdict too
            last = traceback.format_exception_only(type(error), error)[-1].strip()
            verdict(Result(f"battery part {index + 1}", FAIL, last))
    return results


_DESCRIPTION = (
    "Does this machine compute what paddle_compat promises? A fixed battery, one verdict per line (PASS, FAIL, "
    "or SKIP where the machine lacks what a check needs); the exit status is 0 only without a FAIL."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paddle_compat.selfcheck", description=_DESCRIPTION)
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None,
                        help="the battery to run (default: cuda when a GPU is visible, else cpu)")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is visible to torch")
    if args.json:
        reason = _unwritable(args.json)
        if reason is not None:  # said now, not after the whole battery (exit status 2, as the parity CLI)
            parser.error(f"--json: cannot write {args.json}: {reason}")
    start = time.perf_counter()
    # each verdict printed as it comes (the battery takes a while), aligned on the optimizers' names
    width = max((len(f"{name} [{label}]") for name in CONFIGS for label in DTYPES), default=40)
    results = run(device, lambda r: print(f"{r.check:<{width}}  {r.verdict:<4}  {r.detail}", flush=True))
    failed = sum(r.verdict == FAIL for r in results)
    print(f"\n{len(results)} checks on {device}: {failed} failed ({time.perf_counter() - start:.1f} s)")
    if args.json:
        report = {"device": device, "passed": not failed, "results": [asdict(r) for r in results]}
        try:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(report, f, indent=1)
        except OSError as e:  # it became unwritable while the battery ran
            parser.error(f"--json: cannot write {args.json}: {e.strerror or e}")
    return 1 if failed else 0


def _unwritable(path: str) -> str | None:
    """Why ``path`` cannot be written (``None``: it can), found by opening it for appending (which
    changes no existing file; one created here is removed)."""
    existed = os.path.lexists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as e:
        return e.strerror or str(e)
    if not existed:
        os.remove(path)
    return None


if __name__ == "__main__":
    sys.exit(main())
