"""The torch fallback (no compiled kernels) against torch.optim's foreach implementation.

    PADDLE_COMPAT_NATIVE=0 python benchmarks/bench_fallback.py [--params 4M] [--tensors 4]
                                                                [--rounds 15] [--threads 2]

Where the compiled CPU kernels are not used (not built at install, refused, or
``PADDLE_COMPAT_NATIVE=0``) the optimizers run their torch forms, with Paddle's roundings. This
times one step of each against ``torch.optim``'s ``foreach=True`` step of the same optimizer on the
same sizes: SGD, Momentum, and Adam/AdamW in both of Paddle's CPU profiles (``avx2``: its reference
kernel, on CPUs without AVX-512 and for float64, the update in double; ``avx512f``: the fused
multiply-adds of its AVX-512 kernel, which the torch forms emulate). The profile is set by the
script itself (``PADDLE_COMPAT_PADDLE_CPU``); the compiled kernels are also timed when they load (``compiled`` rows).

Interleaved rounds: each round every variant, in shuffled order, takes an untimed step then a
timed one after a write of a buffer larger than the last-level cache (the forward and backward
passes a real step follows); figures are medians. Ratios are ours over torch.optim's foreach step
of the same optimizer measured in the same run; the A/A line (torch's AdamW against a second,
identical instance) is the run's noise floor.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ["PADDLE_COMPAT_NATIVE"] = "0"  # read once, at the first step: the fallback is what is timed

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import paddle_compat.optimizer as popt  # noqa: E402
from paddle_compat import _native  # noqa: E402

LR = 1e-3

# name: (ours, the torch.optim anchor, Paddle's CPU profile or None)
CONFIGS: dict[str, tuple[Callable[[list], object], Callable[[list], object], str | None]] = {
    "SGD": (lambda ps: popt.SGD(LR, parameters=ps), lambda ps: torch.optim.SGD(ps, LR, foreach=True), None),
    "Momentum": (lambda ps: popt.Momentum(LR, 0.9, parameters=ps),
                 lambda ps: torch.optim.SGD(ps, LR, momentum=0.9, foreach=True), None),
    "Adam avx2": (lambda ps: popt.Adam(LR, parameters=ps), lambda ps: torch.optim.Adam(ps, LR, foreach=True), "avx2"),
    "Adam avx512f": (lambda ps: popt.Adam(LR, parameters=ps), lambda ps: torch.optim.Adam(ps, LR, foreach=True),
                     "avx512f"),
    "AdamW avx2": (lambda ps: popt.AdamW(LR, parameters=ps),
                   lambda ps: torch.optim.AdamW(ps, LR, weight_decay=0.01, foreach=True), "avx2"),
    "AdamW avx512f": (lambda ps: popt.AdamW(LR, parameters=ps),
                      lambda ps: torch.optim.AdamW(ps, LR, weight_decay=0.01, foreach=True), "avx512f"),
}


def parse_count(text: str) -> int:
    scale = {"K": 10**3, "M": 10**6}.get(text[-1].upper(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", default="4M")
    parser.add_argument("--tensors", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated configuration names")
    parser.add_argument("--interlude-mb", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    n = parse_count(args.params) // args.tensors
    gen = torch.Generator().manual_seed(0)
    values = [torch.randn(n, generator=gen) * 0.02 for _ in range(args.tensors)]
    grads = [torch.randn(n, generator=gen) * 1e-3 for _ in range(args.tensors)]

    def variant(build: Callable[[list], object], profile: str | None, native: bool) -> Callable[[], None]:
        params = [torch.nn.Parameter(v.clone()) for v in values]
        for p, g in zip(params, grads):
            p.grad = g
        opt = build(params)

        def step() -> None:
            if profile is not None:
                os.environ["PADDLE_COMPAT_PADDLE_CPU"] = profile
            _native._enabled = native
            opt.step()  # type: ignore[attr-defined]

        return step

    names = [c for c in CONFIGS if not args.only or c in args.only.split(",")]
    _native._enabled = True
    status = getattr(_native, "status", None)  # absent in checkouts older than it (A/B runs)
    compiled = bool(status and status().compiled)  # whether the compiled kernels load here: timed too
    variants: dict[str, Callable[[], None]] = {}
    for name in names:
        ours, anchor, profile = CONFIGS[name]
        variants[f"{name} | ours (torch forms)"] = variant(ours, profile, False)
        variants[f"{name} | torch foreach"] = variant(anchor, None, False)
        if compiled:
            variants[f"{name} | ours (compiled)"] = variant(ours, profile, True)
    variants["A/A | torch AdamW foreach, second instance"] = variant(CONFIGS["AdamW avx512f"][1], None, False)
    times: dict[str, list[float]] = {k: [] for k in variants}
    interlude = torch.empty(args.interlude_mb * 2**18)
    for r in range(args.rounds):
        order = list(variants)
        random.shuffle(order)
        for key in order:
            variants[key]()
            interlude.fill_(r)
            start = time.perf_counter()
            variants[key]()
            times[key].append(time.perf_counter() - start)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    print(f"{args.params} float32 parameters in {args.tensors} tensors, {args.threads} threads, "
          f"{args.rounds} rounds; torch {torch.__version__}")
    print(f"{'optimizer':18s} {'torch foreach ms':>16s} {'ours torch forms ms':>20s} {'ratio':>7s}"
          + (f" {'ours compiled ms':>17s} {'ratio':>7s}" if compiled else ""))
    for name in names:
        anchor = med[f"{name} | torch foreach"]
        ours = med[f"{name} | ours (torch forms)"]
        line = f"{name:18s} {anchor:16.2f} {ours:20.2f} {ours / anchor:7.2f}"
        if compiled:
            c = med[f"{name} | ours (compiled)"]
            line += f" {c:17.2f} {c / anchor:7.2f}"
        print(line)
    base = "AdamW avx512f | torch foreach"
    aa = med["A/A | torch AdamW foreach, second instance"] / med[base] if "AdamW avx512f" in names else float("nan")
    print(f"A/A control (torch AdamW foreach, two instances): {aa:.2f}")


if __name__ == "__main__":
    main()
