"""What a steady AdamW step's bookkeeping costs: the kept plan's checks, piece by piece, and whole steps.

    python benchmarks/profile_plan_checks.py [--tensors 200] [--numel 4096] [--rounds 40]
                                             [--against CHECKOUT] [--kernel]

Float32 CPU tensors (``--tensors`` of ``--numel`` elements), one thread. First the pieces of a
steady step (same parameters and states, the plan kept): ``Engine.update`` and the parts of
``_Plan.holds`` (the parameters, the gradients' layouts, the states' dicts, values and addresses),
``_Plan.point_at``, ``Optimizer._work`` and the rest of ``step()``, each timed in blocks of 10 calls
interleaved over ``--rounds`` rounds (medians, in µs). The compiled kernel's call is stubbed out
(its time is the arithmetic, not the bookkeeping) unless ``--kernel``.

With ``--against CHECKOUT`` (another checkout of this repository, its kernels built in place) its
``paddle_compat`` is imported beside this one as a second package, and whole steps of the two run
interleaved in shuffled order in this process (same machine state for both): constant and
scheduled rate (``lr.CosineAnnealingDecay`` stepped after every step), gradients kept or new tensors
at every step (as after ``zero_grad(set_to_none=True)``); an A/A control (a second instance of this
checkout's) gives the run's noise.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import statistics
import sys
import time
from collections.abc import Callable
from itertools import chain
from pathlib import Path
from typing import Any

import torch

import paddle_compat.optimizer as popt
from paddle_compat import native_status
from paddle_compat.optimizer import _engine


def _setup(mod: Any, n: int, numel: int, scheduled: bool, stub: bool) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(numel, generator=gen)) for _ in range(n)]
    grads = [[torch.randn(numel, generator=gen) * 1e-2 for _ in range(n)] for _ in range(2)]
    sched = mod.lr.CosineAnnealingDecay(learning_rate=1e-3, T_max=1000) if scheduled else None
    opt = mod.AdamW(sched if scheduled else 1e-3, parameters=params, weight_decay=0.01)
    for p, g in zip(params, grads[0]):
        p.grad = g
    opt.step()
    if sched is not None:
        sched.step()
    if stub:
        opt._compiled_call = lambda *args: None
    return {"params": params, "grads": grads, "sched": sched, "opt": opt, "i": 0}


def _median_us(tests: dict[str, Callable[[], Any]], rounds: int, calls: int = 10) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in tests}
    for _ in range(rounds):
        for name, f in tests.items():
            start = time.perf_counter()
            for _ in range(calls):
                f()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def pieces(n: int, numel: int, rounds: int, stub: bool) -> None:
    v = _setup(popt, n, numel, False, stub)
    opt = v["opt"]
    group = opt.param_groups[0]
    engine = opt._compat_engine
    pairs = opt._work(None)[0][1]
    plan = engine._plans[id(group)]
    params, grads = [p for p, _ in pairs], [g for _, g in pairs]
    head = plan.head
    values = plan.values
    tests: dict[str, Callable[[], Any]] = {
        "step()": opt.step,
        "Optimizer._work": lambda: opt._work(None),
        "Engine.update": lambda: engine.update(opt, group, pairs, None),
        "  _Plan.holds": lambda: plan.holds(opt, head, params, grads),
        "    parameters (objects, addresses)": lambda: (_engine._same(params, plan.params), _engine._addresses(params)),
        "    rate ratios": lambda: _engine._ratios(params),
        "    gradients' dtypes, layouts, shapes": lambda: _engine._grad_layout(grads),
        "    states (all)": lambda: plan._states_hold(opt.state, params),
        "      the mapping, whole": lambda: plan._seen(opt.state),
        "      the values, flattened": lambda: tuple(chain.from_iterable(map(dict.values, plan.dicts))),
        "      the values' addresses": lambda: _engine._pointers(values),
        "  _Plan.point_at": lambda: plan.point_at(grads),
    }
    print(f"AdamW, {n} x {numel} float32, 1 thread, the kernel {'stubbed' if stub else 'called'}; "
          f"median µs per call ({len(values)} state values):")
    with torch.no_grad():  # as in step(): the parameters a plan leaves to the torch forms are updated in place
        medians = _median_us(tests, rounds)
    for name, us in medians.items():
        print(f"  {name:40s} {us:8.1f}")


def _import_checkout(path: Path) -> Any:
    """The ``paddle_compat`` of another checkout, as the package ``paddle_compat_against``."""
    root = path / "paddle_compat"
    spec = importlib.util.spec_from_file_location(
        "paddle_compat_against", root / "__init__.py", submodule_search_locations=[str(root)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return importlib.import_module("paddle_compat_against.optimizer")


def against(other: Any, n: int, numel: int, rounds: int, stub: bool) -> None:
    print(f"whole steps, {n} x {numel} float32, 1 thread, the kernel {'stubbed' if stub else 'called'}; "
          "median ms per step (other: the checkout given)")
    for scheduled in (False, True):
        for new_grads in (False, True):
            variants = {
                "other": _setup(other, n, numel, scheduled, stub),
                "this": _setup(popt, n, numel, scheduled, stub),
                "this-bis": _setup(popt, n, numel, scheduled, stub),
            }

            def step(v: dict[str, Any], new_grads: bool = new_grads) -> float:
                v["i"] += 1
                if new_grads:  # made beforehand: the time is the step's
                    for p, g in zip(v["params"], v["grads"][v["i"] & 1]):
                        p.grad = g
                start = time.perf_counter()
                v["opt"].step()
                if v["sched"] is not None:
                    v["sched"].step()
                return time.perf_counter() - start

            times: dict[str, list[float]] = {name: [] for name in variants}
            order = list(variants)
            for _ in range(rounds):
                random.shuffle(order)
                for name in order:
                    step(variants[name])  # untimed: the first of the block
                    times[name] += [step(variants[name]) for _ in range(4)]
            med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
            print(f"  {'scheduled' if scheduled else 'constant':9s} {'new grads' if new_grads else 'same grads':10s} "
                  f"other {med['other']:6.3f}  this {med['this']:6.3f}  this/other {med['this'] / med['other']:.3f}  "
                  f"A/A {med['this-bis'] / med['this']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tensors", type=int, default=200)
    parser.add_argument("--numel", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--against", type=Path, default=None)
    parser.add_argument("--kernel", action="store_true", help="call the compiled kernel (default: stubbed out)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(native_status())
    pieces(args.tensors, args.numel, args.rounds, not args.kernel)
    if args.against is not None:
        against(_import_checkout(args.against.resolve()), args.tensors, args.numel, args.rounds, not args.kernel)


if __name__ == "__main__":
    main()
