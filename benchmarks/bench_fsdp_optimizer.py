"""One optimizer step on FSDP2 shards: Paddle's AdamW (``paddle_compat.optimizer``) against
``torch.optim.AdamW(foreach=True)``, on the same sharded parameters and gradients.

    python benchmarks/bench_fsdp_optimizer.py [--sizes 1M,10M] [--rounds 15] [--steps 5] [--device cpu|cuda]

Two ranks (gloo on CPU, one thread each; NCCL on two GPUs with ``--device cuda``) shard an MLP
with ``fully_shard`` (one unit per layer and the root), make the gradients once (a forward and
backward pass) and then time ``optimizer.step()`` alone, in interleaved rounds (rotating order)
of three variants: torch's foreach AdamW, the same again (the A/A control: its ratio to the
first is the run's noise floor), and ours. Both settings run: without a clip, and with a
global-norm clip (ours: ``ClipGradByGlobalNorm(1.0)`` in the step, the norm all-reduced over the
ranks; torch's: ``clip_grad_norm_(..., foreach=True)`` before its step, which DTensor reduces
over the mesh too). It prints rank 0's medians of single steps and their ratios; read ours /
torch against the A/A control.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_distributed import BATCH, SIZES, interleaved, join, launch, make_model, markdown_table  # noqa: E402

from paddle_compat import optimizer as popt  # noqa: E402
from paddle_compat.nn import ClipGradByGlobalNorm  # noqa: E402

VARIANTS = ("torch foreach", "torch foreach (A/A)", "paddle_compat")


def sharded_model(params: int, device: torch.device) -> torch.nn.Module:
    """bench_distributed's MLP, sharded (one FSDP unit per layer, and the root), with gradients."""
    from torch.distributed.fsdp import fully_shard

    model = make_model(params, device)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    width = model[0].in_features
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


def rank_main(rank: int, args: argparse.Namespace, port: int) -> None:
    device = join(rank, args, port)
    rows = []
    for size in args.sizes.split(","):
        for clip in (False, True):
            model = sharded_model(SIZES[size], device)
            runs = [functools.partial(timed, stepper(v, model, clip), device=device) for v in VARIANTS]
            rows.append((size, clip, interleaved(runs, args.rounds, args.steps)))
            del model, runs
    if rank == 0:
        print(f"2 ranks, {device.type}, torch {torch.__version__}; medians of single steps (ms)\n")
        table = [
            [size, "global norm" if clip else "none", f"{torch_ms:.3f}", f"{control_ms:.3f}", f"{ours_ms:.3f}",
             f"{ours_ms / torch_ms:.3f}", f"{control_ms / torch_ms:.3f}"]
            for size, clip, (torch_ms, control_ms, ours_ms) in rows
        ]
        print(markdown_table(["size", "clip", *VARIANTS, "ours / torch", "A/A control"], table))
    dist.destroy_process_group()


def main() -> None:
    launch(__doc__, rank_main, rounds=15)


if __name__ == "__main__":
    main()
