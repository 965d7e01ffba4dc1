"""One optimizer step on FSDP2 shards: Paddle's AdamW (``paddle_compat.optimizer``) against
``torch.optim.AdamW(foreach=True)``, on the same sharded parameters and gradients.

    python benchmarks/bench_fsdp_optimizer.py [--sizes 1M,10M] [--rounds 15] [--steps 5] [--device cpu|cuda]

Ranks (2 gloo ranks on CPU, one thread each; with ``--device cuda`` one rank per GPU over NCCL,
at least 2 GPUs) shard an MLP with ``fully_shard`` (one unit per layer and the root), make the
gradients once (a forward and backward pass) and then time ``optimizer.step()`` alone, in
interleaved rounds (rotating order) of three variants: torch's foreach AdamW, the same again
(the A/A control: its ratio to the first is the run's noise floor), and ours. Both settings run:
without a clip, and with a global-norm clip (ours: ``ClipGradByGlobalNorm(1.0)`` in the step, the
norm all-reduced over the ranks; torch's: ``clip_grad_norm_(..., foreach=True)`` before its
step, which DTensor reduces over the mesh too). It prints rank 0's medians of single steps and
their ratios; read ours / torch against the A/A control.
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

from paddle_compat import optimizer as popt  # noqa: E402
from paddle_compat.nn import ClipGradByGlobalNorm  # noqa: E402

SIZES = {"1M": 1_000_000, "10M": 10_000_000, "100M": 100_000_000}
DEPTH, BATCH = 4, 32
VARIANTS = ("torch foreach", "torch foreach (A/A)", "paddle_compat")


def make_model(params: int, device: torch.device) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    width = int(math.sqrt(params / DEPTH))
    torch.manual_seed(0)
    layers = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1]).to(device)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    x = torch.randn(BATCH, width, generator=torch.Generator().manual_seed(dist.get_rank())).to(device)
    model(x).pow(2).mean().backward()  # the gradients every timed step reuses
    return model


def stepper(variant: str, model: torch.nn.Module, clip: bool) -> Callable[[], None]:
    params = list(model.parameters())
    if variant == "paddle_compat":
        opt = popt.AdamW(1e-4, parameters=params, grad_clip=ClipGradByGlobalNorm(1.0) if clip else None)
        return opt.step
    torch_opt = torch.optim.AdamW(params, lr=1e-4, foreach=True)
    if not clip:
        return torch_opt.step

    def clipped_step() -> None:
        torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        torch_opt.step()

    return clipped_step


def timed(step: Callable[[], None], steps: int, device: torch.device) -> list[float]:
    """Seconds of each of ``steps`` single steps (their median shrugs off preempted ones)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = []
    for _ in range(steps):
        sync()
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return times


def rank_main(rank: int, args: argparse.Namespace, port: int, nprocs: int) -> None:
    torch.set_num_threads(1)
    if args.device == "cuda":
        torch.cuda.set_device(rank)
        device, backend = torch.device("cuda", rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=nprocs,
        timeout=datetime.timedelta(minutes=5),
    )
    rows = []
    for size in args.sizes.split(","):
        for clip in (False, True):
            model = make_model(SIZES[size], device)
            steps = [stepper(v, model, clip) for v in VARIANTS]
            for step in steps:
                timed(step, 2, device)  # warm-up: state, plans, kernels
            times: list[list[float]] = [[] for _ in steps]
            for r in range(args.rounds):
                for i in range(len(steps)):
                    j = (i + r) % len(steps)  # the same rotation on every rank: the clips' collectives pair up
                    times[j].extend(timed(steps[j], args.steps, device))
            rows.append((size, clip, [statistics.median(t) * 1e3 for t in times]))
            del model, steps
    if rank == 0:
        print(f"{nprocs} ranks, {device.type}, torch {torch.__version__}; medians of single steps (ms)\n")
        print("| size | clip | " + " | ".join(VARIANTS) + " | ours / torch | A/A control |")
        print("|---|---|" + "---|" * (len(VARIANTS) + 2))
        for size, clip, (torch_ms, control_ms, ours_ms) in rows:
            print(
                f"| {size} | {'global norm' if clip else 'none'} | {torch_ms:.3f} | {control_ms:.3f} | {ours_ms:.3f} | "
                f"{ours_ms / torch_ms:.3f} | {control_ms / torch_ms:.3f} |"
            )
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1M,10M")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    nprocs = 2 if args.device == "cpu" else torch.cuda.device_count()
    if args.device == "cuda" and nprocs < 2:
        parser.error("--device cuda needs two GPUs")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.start_processes(rank_main, args=(args, port, nprocs), nprocs=nprocs, start_method="spawn")


if __name__ == "__main__":
    main()
