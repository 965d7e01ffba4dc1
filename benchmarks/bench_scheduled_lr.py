"""One AdamW step with a learning-rate scheduler stepped at every step, against a constant rate.

    python benchmarks/bench_scheduled_lr.py [--tensors 200] [--numel 4096] [--rounds 21]
                                            [--block 5] [--threads 1] [--device cpu|cuda]

Float32 tensors (``--tensors`` of ``--numel`` elements) on ``--device``, gradients set once. On CUDA
each timed step ends with a synchronize (the host's time and the kernels'). Variants, each with
its own parameters and state:

- ``constant``: our AdamW at a constant rate;
- ``scheduled``: our AdamW driven by ``lr.CosineAnnealingDecay``, ``scheduler.step()`` after
  every optimizer step (the scheduler's own step is timed with it, as in a training loop);
- ``torch``: ``torch.optim.AdamW(foreach=True)`` with ``torch.optim.lr_scheduler.CosineAnnealingLR``
  stepped after every step;
- ``constant-bis``: a second, identical instance of ``constant`` (the A/A control: the run's noise).

Interleaved rounds: in every round each variant, in shuffled order, takes ``--block`` steps in a
row, the first untimed; figures are medians of the timed ones. Ratios are of medians measured in
this run (absolute times on a shared machine mean little). The rate changes at every step: a step
that rebuilds its plan when the rate moves shows here as ``scheduled`` far above ``constant``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import torch

import paddle_compat.optimizer as popt

DEVICE = torch.device("cpu")


def _params(n: int, numel: int, seed: int) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(numel, generator=gen).to(DEVICE)) for _ in range(n)]
    for p in params:
        p.grad = (torch.randn(numel, generator=gen) * 1e-2).to(DEVICE)
    return params


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def ours(n: int, numel: int, scheduled: bool) -> Callable[[], None]:
    params = _params(n, numel, 0)
    if not scheduled:
        opt = popt.AdamW(1e-3, parameters=params, weight_decay=0.01)
        return opt.step
    sched = popt.lr.CosineAnnealingDecay(learning_rate=1e-3, T_max=1000)
    opt = popt.AdamW(sched, parameters=params, weight_decay=0.01)

    def step() -> None:
        opt.step()
        sched.step()

    return step


def torch_foreach(n: int, numel: int) -> Callable[[], None]:
    params = _params(n, numel, 0)
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, foreach=True)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000)

    def step() -> None:
        opt.step()
        sched.step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tensors", type=int, default=200)
    parser.add_argument("--numel", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--block", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    torch.set_num_threads(args.threads)
    variants = {
        "constant": ours(args.tensors, args.numel, False),
        "scheduled": ours(args.tensors, args.numel, True),
        "torch": torch_foreach(args.tensors, args.numel),
        "constant-bis": ours(args.tensors, args.numel, False),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for step in variants.values():
        step()  # the state, the plans, the kernels loaded
    order = list(variants)
    for _ in range(args.rounds):
        random.shuffle(order)
        for name in order:
            step = variants[name]
            step()  # untimed: the first of the block
            _sync()
            for _ in range(args.block - 1):
                start = time.perf_counter()
                step()
                _sync()
                times[name].append(time.perf_counter() - start)
    med = {name: statistics.median(t) * 1e3 for name, t in times.items()}
    print(f"AdamW, {args.tensors} x {args.numel} float32 on {args.device}, {args.threads} thread(s), "
          f"{args.rounds} rounds x {args.block - 1} timed steps; median ms per step:")
    for name, value in med.items():
        print(f"  {name:13s} {value:7.3f}")
    print(f"scheduled / constant      {med['scheduled'] / med['constant']:.3f}")
    print(f"scheduled / torch foreach {med['scheduled'] / med['torch']:.3f}")
    print(f"A/A constant-bis / constant {med['constant-bis'] / med['constant']:.3f}")


if __name__ == "__main__":
    main()
