"""Cost of paddle_compat's auto_cast against torch.autocast, forward + backward.

Runs a transformer block and a small CNN under ``torch.autocast`` and under
``paddle_compat.amp.auto_cast``, in interleaved rounds in one process, and prints median step
times and their ratios to torch.autocast:

* ``auto_cast O1`` (default lists) computes softmax, layer_norm, mean... in float32 where
  torch's CPU autocast keeps them low precision, so its ratio includes those precision choices;
* ``auto_cast O2`` makes, for these two models, the same per-op choices as torch.autocast on
  CPU, so its ratio is the interception cost alone.

    python benchmarks/bench_auto_cast.py [--device cpu|cuda] [--dtype bfloat16|float16] [--rounds N] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from paddle_compat import amp
from paddle_compat.amp import op_interceptor


class TransformerBlock(nn.Module):
    def __init__(self, dim: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 10),
    )


def step_fn(model: nn.Module, x: torch.Tensor, target: torch.Tensor, ctx: Callable, loss_fn: Callable) -> Callable:
    def step() -> None:
        with ctx():
            loss = loss_fn(model(x), target)
        loss.backward()
        model.zero_grad(set_to_none=True)

    return step


def measure(name: str, model: nn.Module, x: torch.Tensor, target: torch.Tensor, loss_fn: Callable,
            args: argparse.Namespace) -> None:
    dtype = getattr(torch, args.dtype)
    contexts = {
        "torch.autocast": lambda: torch.autocast(args.device, dtype=dtype),
        "auto_cast O1": lambda: amp.auto_cast(dtype=args.dtype),
        "auto_cast O2": lambda: amp.auto_cast(level="O2", dtype=args.dtype),
    }
    steps = {k: step_fn(model, x, target, c, loss_fn) for k, c in contexts.items()}
    times: dict[str, list[float]] = {k: [] for k in steps}
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    order = list(steps)
    for round_ in range(args.rounds + args.warmup):
        # Rotate who goes first: a fixed order biases the variant that always follows another.
        for key in order[round_ % len(order):] + order[: round_ % len(order)]:
            step = steps[key]
            sync()
            start = time.perf_counter()
            for _ in range(args.inner):
                step()
            sync()
            if round_ >= args.warmup:
                times[key].append((time.perf_counter() - start) / args.inner)
    base = statistics.median(times["torch.autocast"])
    line = f"{name:18s} torch.autocast {base * 1e3:8.3f} ms"
    for key in ("auto_cast O1", "auto_cast O2"):
        ours = statistics.median(times[key])
        line += f" | {key} {ours * 1e3:8.3f} ms, ratio {ours / base:.3f}"
    calls = intercepted_calls(steps["auto_cast O1"])
    line += f" | {calls} intercepted ops/step (~{calls * args.per_call_us / 1e3:.3f} ms)"
    print(line)


def intercepted_calls(step: Callable) -> int:
    seen: list[str] = []
    op_interceptor.observers.append(lambda op, dtype: seen.append(op))
    try:
        step()
    finally:
        op_interceptor.observers.pop()
    return len(seen)


def per_call_overhead_us(device: str, n: int = 4000, repeats: int = 7) -> float:
    """Extra time an intercepted op costs over torch.autocast's own C++ cast (tiny tensor);
    medians of interleaved repeats, as one timing swings by a few us on a busy machine."""
    x = torch.randn(4, 4, device=device)
    timings: dict[str, list[float]] = {"torch": [], "ours": []}
    for _ in range(repeats):
        for key, ctx in (("torch", lambda: torch.autocast(device, dtype=torch.bfloat16)),
                         ("ours", lambda: amp.auto_cast(dtype="bfloat16"))):
            with ctx():
                x @ x
                start = time.perf_counter()
                for _ in range(n):
                    x @ x
                timings[key].append((time.perf_counter() - start) / n)
    return max(0.0, (statistics.median(timings["ours"]) - statistics.median(timings["torch"])) * 1e6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--inner", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    args.per_call_us = per_call_overhead_us(args.device)
    print(f"torch {torch.__version__}, device {args.device}, dtype {args.dtype}, threads {torch.get_num_threads()}, "
          f"interception overhead per intercepted op {args.per_call_us:.1f} us")
    block = TransformerBlock().to(args.device)
    x = torch.randn(8, 128, 256, device=args.device)
    measure("transformer block", block, x, x, lambda out, t: nn.functional.mse_loss(out.float(), t), args)
    cnn = small_cnn().to(args.device)
    images = torch.randn(32, 3, 32, 32, device=args.device)
    labels = torch.randint(0, 10, (32,), device=args.device)
    measure("small CNN", cnn, images, labels, lambda out, t: nn.functional.cross_entropy(out.float(), t), args)


if __name__ == "__main__":
    main()
