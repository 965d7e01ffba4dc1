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
    torch.set_num_threads(1)
    amp_global_state().amp_dtype = "float16"  # as if auto_cast had run: dynamic scaling stays on
    if args.device == "cuda":
        torch.cuda.set_device(rank)
        device, backend = torch.device("cuda", rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=datetime.timedelta(minutes=5)
    )
    latency = collective_latency(device)
    rows = []
    for size in args.sizes.split(","):
        for setting in ("local", "ddp"):
            setups = [Setup(v, setting, SIZES[size], device, rank) for v in VARIANTS]
            for s in setups:
                s.run(2)  # warm-up
            times: list[list[float]] = [[] for _ in setups]
            for r in range(args.rounds):
                for i in range(len(setups)):
                    j = (i + r) % len(setups)  # the same rotation on both ranks: collectives pair up
                    times[j].extend(setups[j].run(args.steps))
            rows.append((size, setting, [statistics.median(t) * 1e3 for t in times]))
            del setups
    if rank == 0:
        median, mean = latency
        print(f"found_inf all-reduce alone ({backend}, 2 ranks): median {median * 1e6:.0f} us, mean {mean * 1e6:.0f} us per call\n")
        print("| size | setting | " + " | ".join(VARIANTS) + " | with / without | A/A control | added per step |")
        print("|---|---|" + "---|" * (len(VARIANTS) + 3))
        for size, setting, (plain, control, reduced) in rows:
            print(
                f"| {size} | {setting} | {plain:.3f} | {control:.3f} | {reduced:.3f} | {reduced / plain:.3f} | "
                f"{control / plain:.3f} | {(reduced - plain) * 1e3:+.0f} us |"
            )
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1M,10M")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    if args.device == "cuda" and torch.cuda.device_count() < 2:
        parser.error("--device cuda needs two GPUs")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.start_processes(rank_main, args=(args, port), nprocs=2, start_method="spawn")


if __name__ == "__main__":
    main()
