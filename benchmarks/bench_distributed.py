"""Per-step cost of the scaler's found_inf all-reduce (``GradScaler(process_group=...)``).

    python benchmarks/bench_distributed.py [--sizes 1M,10M] [--rounds 9] [--steps 5] [--device cpu|cuda]

Two ranks (gloo on CPU, one thread each; NCCL on two GPUs with ``--device cuda``) train the same
MLP, each on its own data, in two settings:

- ``local``: no DDP, as under tensor/pipeline parallelism or a custom sharded optimizer, where
  the collective is what makes the ranks agree;
- ``ddp``: DistributedDataParallel, where the collective is redundant (the grads already agree)
  and only costs.

In each setting three variants run in interleaved rounds (rotating order): the scaler without a
process group, the same again (the A/A control: its ratio to the first is the run's noise
floor), and the scaler with ``process_group=WORLD``. It prints rank 0's medians of single steps
and their ratios, plus the bare collective's latency (one 1-element MAX all-reduce). Absolute
times on a shared machine mean little; read the ratios against the A/A control.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paddle_compat.amp import GradScaler  # noqa: E402
from paddle_compat.amp.amp_state import amp_global_state  # noqa: E402
from paddle_compat.amp.unscale import all_reduce_max  # noqa: E402

SIZES = {"1M": 1_000_000, "10M": 10_000_000, "100M": 100_000_000}
DEPTH, BATCH = 4, 32
VARIANTS = ("no collective", "no collective (A/A)", "process_group=WORLD")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(params: int, device: torch.device) -> torch.nn.Module:
    width = int(math.sqrt(params / DEPTH))
    torch.manual_seed(0)
    layers = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]).to(device)


class Setup:
    def __init__(self, variant: str, setting: str, params: int, device: torch.device, rank: int) -> None:
        model = make_model(params, device)
        self.model = torch.nn.parallel.DistributedDataParallel(model) if setting == "ddp" else model
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-4)
        group = dist.group.WORLD if variant == "process_group=WORLD" else None
        self.scaler = GradScaler(process_group=group)
        width = model[0].in_features
        self.x = torch.randn(BATCH, width, generator=torch.Generator().manual_seed(rank)).to(device)
        self.device = device

    def run(self, steps: int) -> list[float]:
        """Seconds of each of ``steps`` steps (single steps: their median shrugs off the ones
        a busy machine preempts)."""
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        times = []
        for _ in range(steps):
            sync()
            start = time.perf_counter()
            scaled = self.scaler.scale(self.model(self.x).pow(2).mean())
            scaled.backward()
            self.scaler.minimize(self.opt, scaled)
            self.opt.zero_grad(set_to_none=False)
            sync()
            times.append(time.perf_counter() - start)
        return times


def collective_latency(device: torch.device, repeats: int = 200) -> tuple[float, float]:
    """Seconds per all_reduce_max of a 1-element flag (what the scaler adds per step): the
    median call (the collective itself) and the mean (with the waits for a descheduled peer)."""
    flag = torch.zeros(1, device=device)
    for _ in range(10):
        all_reduce_max(flag, dist.group.WORLD)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    dist.barrier()
    calls = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        all_reduce_max(flag, dist.group.WORLD)
        sync()
        calls.append(time.perf_counter() - start)
    return statistics.median(calls), statistics.fmean(calls)


def rank_main(rank: int, args: argparse.Namespace, port: int) -> None:
    amp_global_state().amp_dtype = "float16"  # as if auto_cast had run: dynamic scaling stays on
    device = join(rank, args, port)
    backend = dist.get_backend()
    latency = collective_latency(device)
    rows = []
    for size in args.sizes.split(","):
        for setting in ("local", "ddp"):
            setups = [Setup(v, setting, SIZES[size], device, rank) for v in VARIANTS]
            rows.append((size, setting, interleaved([s.run for s in setups], args.rounds, args.steps)))
            del setups
    if rank == 0:
        median, mean = latency
        print(
            f"found_inf all-reduce alone ({backend}, 2 ranks): "
            f"median {median * 1e6:.0f} us, mean {mean * 1e6:.0f} us per call\n"
        )
        header = ["size", "setting", *VARIANTS, "with / without", "A/A control", "added per step"]
        table = [
            [size, setting, f"{plain:.3f}", f"{control:.3f}", f"{reduced:.3f}", f"{reduced / plain:.3f}",
             f"{control / plain:.3f}", f"{(reduced - plain) * 1e3:+.0f} us"]
            for size, setting, (plain, control, reduced) in rows
        ]
        print(markdown_table(header, table))
    dist.destroy_process_group()


def interleaved(runs: list[Callable[[int], list[float]]], rounds: int, steps: int) -> list[float]:
    """Milliseconds, the median single step of each of ``runs`` (``run(steps)`` gives the seconds
    of ``steps`` steps): after two warm-up steps each, ``rounds`` rounds in rotating order, the same
    on every rank so that their collectives pair up."""
    for run in runs:
        run(2)
    times: list[list[float]] = [[] for _ in runs]
    for r in range(rounds):
        for i in range(len(runs)):
            j = (i + r) % len(runs)
            times[j].extend(runs[j](steps))
    return [statistics.median(t) * 1e3 for t in times]


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def launch(doc: str, rank_main: Callable[[int, argparse.Namespace, int], None], rounds: int) -> None:
    """Parse the options (``doc`` is the help) and run ``rank_main(rank, args, port)`` as two ranks."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1M,10M")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    if args.device == "cuda" and torch.cuda.device_count() < 2:
        parser.error("--device cuda needs two GPUs")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.start_processes(rank_main, args=(args, free_port()), nprocs=2, start_method="spawn")


def join(rank: int, args: argparse.Namespace, port: int) -> torch.device:
    """This rank's device, after joining the two-rank group (gloo on CPU, NCCL on CUDA)."""
    torch.set_num_threads(1)
    if args.device == "cuda":
        torch.cuda.set_device(rank)
        device, backend = torch.device("cuda", rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=datetime.timedelta(minutes=5)
    )
    return device


def main() -> None:
    launch(__doc__, rank_main, rounds=9)


if __name__ == "__main__":
    main()
