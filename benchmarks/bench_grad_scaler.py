"""Per-step cost of loss scaling: plain training vs torch.amp.GradScaler vs paddle_compat's GradScaler.

    python benchmarks/bench_grad_scaler.py [--sizes 1M,10M,100M] [--rounds 7] [--steps 5] [--device cpu|cuda]

One run, interleaved rounds (every variant once per round, in rotating order), the same model
and data for every variant. Prints per-step medians, each scaler's overhead over plain training
and the ratios ours/torch. On CUDA it also counts host syncs per step and compares the
bandwidth of our check/unscale pass with a device copy of the same bytes, measured in the same
run. With Paddle installed (CPU), Paddle's own scaler overhead, forced on, is printed beside.
A second, identical torch variant runs in the same rounds as an A/A control: its ratio to the
first is the noise floor of the run. Absolute times mean little on a shared machine; read the
ratios.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paddle_compat.amp import GradScaler, unscale  # noqa: E402
from paddle_compat.amp.amp_state import amp_global_state  # noqa: E402

SIZES = {"1M": 1_000_000, "10M": 10_000_000, "100M": 100_000_000}
DEPTH, BATCH = 4, 32


def width_for(params: int) -> int:
    # DEPTH square layers of width w hold about DEPTH * w * w parameters.
    return int(math.sqrt(params / DEPTH))


def make_model(width: int, device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    layers = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]).to(device)


def make_optimizer(name: str, model: torch.nn.Module) -> torch.optim.Optimizer:
    params = model.parameters()
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-4)
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4)
    if name == "adam-fused":
        return torch.optim.Adam(params, lr=1e-4, fused=True)
    if name == "adamw-fused":
        return torch.optim.AdamW(params, lr=1e-4, fused=True)
    raise ValueError(name)


class Variant:
    """One training setup; ``run(n)`` does n full steps and returns seconds per step."""

    def __init__(self, kind: str, opt_name: str, width: int, device: str, x: torch.Tensor) -> None:
        self.kind, self.device, self.x = kind, device, x
        self.model = make_model(width, device)
        self.opt = make_optimizer(opt_name, self.model)
        if kind.startswith("torch"):
            self.scaler = torch.amp.GradScaler(device, init_scale=2.0**16, growth_interval=2000)
        elif kind == "ours":
            self.scaler = GradScaler()

    def step(self) -> None:
        loss = self.model(self.x).pow(2).mean()
        if self.kind == "plain":
            loss.backward()
            self.opt.step()
        elif self.kind.startswith("torch"):
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            scaled = self.scaler.scale(loss)
            scaled.backward()
            self.scaler.minimize(self.opt, scaled)
        self.opt.zero_grad(set_to_none=False)

    def run(self, n: int) -> float:
        sync = torch.cuda.synchronize if self.device == "cuda" else (lambda: None)
        sync()
        start = time.perf_counter()
        for _ in range(n):
            self.step()
        sync()
        return (time.perf_counter() - start) / n


class PaddleVariant:
    """The same MLP in real Paddle on CPU, with its GradScaler forced on (or none)."""

    def __init__(self, kind: str, opt_name: str, width: int) -> None:
        import numpy as np
        import paddle

        from tests.parity.paddle_oracle import paddle_scaler, set_paddle_amp_dtype

        paddle.seed(0)
        layers = []
        for _ in range(DEPTH):
            layers += [paddle.nn.Linear(width, width), paddle.nn.ReLU()]
        self.model = paddle.nn.Sequential(*layers[:-1])
        opt_cls = {"sgd": paddle.optimizer.SGD, "adam": paddle.optimizer.Adam}[opt_name]
        self.opt = opt_cls(learning_rate=1e-4, parameters=self.model.parameters())
        self.x = paddle.to_tensor(np.random.default_rng(0).standard_normal((BATCH, width)).astype("float32"))
        self.kind = kind
        if kind == "paddle":
            set_paddle_amp_dtype("float16")
            self.scaler = paddle_scaler("GradScaler")

    def run(self, n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            loss = self.model(self.x).pow(2).mean()
            if self.kind == "paddle":
                scaled = self.scaler.scale(loss)
                scaled.backward()
                self.scaler.minimize(self.opt, scaled)
            else:
                loss.backward()
                self.opt.step()
            self.opt.clear_grad(set_to_zero=True)
        return (time.perf_counter() - start) / n


def paddle_figures(size: str, opt_name: str, args: argparse.Namespace) -> tuple[float, float]:
    """Paddle's plain and scaled step medians (ms), from a child process: Paddle's own thread
    pools would otherwise share the process with torch's and skew the torch figures."""
    out = subprocess.run(
        [sys.executable, __file__, "--paddle-worker", f"{size},{opt_name}"]
        + ["--rounds", str(args.rounds), "--steps", str(args.steps)]
        + (["--threads", str(args.threads)] if args.threads else []),
        env={**os.environ, **({"OMP_NUM_THREADS": str(args.threads)} if args.threads else {})},
        check=True, capture_output=True, text=True,
    ).stdout
    plain, scaled = out.strip().splitlines()[-1].split()
    return float(plain), float(scaled)


def paddle_worker(spec: str, args: argparse.Namespace) -> None:
    size, opt_name = spec.split(",")
    width = width_for(SIZES[size])
    variants = [PaddleVariant("plain", opt_name, width), PaddleVariant("paddle", opt_name, width)]
    for v in variants:
        v.run(2)
    times: list[list[float]] = [[], []]
    for r in range(args.rounds):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            times[i].append(variants[i].run(args.steps))
    print(f"{statistics.median(times[0]) * 1e3} {statistics.median(times[1]) * 1e3}")


def syncs_per_step(variant: Variant, steps: int = 5) -> float:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                variant.step()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message).lower() for w in caught) / steps


def unscale_bandwidth(model: torch.nn.Module, repeats: int = 20) -> tuple[float, float]:
    """GB/s of our fused check/unscale pass and of a copy of the same bytes (read + write)."""
    grads = [torch.randn_like(p) for p in model.parameters()]
    nbytes = 2 * sum(g.numel() * g.element_size() for g in grads)
    inv, found = torch.ones(1, device="cuda") * 0.5, torch.zeros(1, device="cuda")
    dst = [torch.empty_like(g) for g in grads]

    def timed(fn) -> float:
        fn()
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(repeats):
            fn()
        end.record()
        end.synchronize()
        return nbytes * repeats / (begin.elapsed_time(end) / 1e3) / 1e9

    ours = timed(lambda: unscale.unscale_(grads, inv, found, check_output=False))
    copy = timed(lambda: torch._foreach_copy_(dst, grads))
    return ours, copy


def bench(size: str, opt_name: str, args: argparse.Namespace) -> None:
    width = width_for(SIZES[size])
    x = torch.randn(BATCH, width, device=args.device)
    # "torch-again" is the A/A control: its ratio to "torch" is this machine's noise floor.
    kinds = ["plain", "torch", "ours", "torch-again"]
    variants = {k: Variant(k, opt_name, width, args.device, x) for k in kinds}
    for v in variants.values():
        v.run(2)  # warm up: lazy state, allocator, kernels
    times: dict[str, list[float]] = {k: [] for k in variants}
    order = list(variants)
    for r in range(args.rounds):
        for k in order[r % len(order):] + order[: r % len(order)]:
            times[k].append(variants[k].run(args.steps))
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    params = sum(p.numel() for p in variants["plain"].model.parameters())
    over_torch, over_ours = med["torch"] - med["plain"], med["ours"] - med["plain"]
    line = (
        f"{size:>4} ({params / 1e6:6.1f}M) {opt_name:<11} plain {med['plain']:8.2f} ms | torch {med['torch']:8.2f} | "
        f"ours {med['ours']:8.2f} | ratio ours/torch {med['ours'] / med['torch']:.3f} | "
        f"overhead torch {over_torch:+7.3f} ours {over_ours:+7.3f} ms"
    )
    if over_torch > 0:
        line += f" (ours/torch {over_ours / over_torch:.2f})"
    line += f" | A/A control torch/torch {med['torch-again'] / med['torch']:.3f}"
    if args.paddle and args.device == "cpu" and opt_name in ("sgd", "adam"):
        plain, scaled = paddle_figures(size, opt_name, args)
        line += f" | paddle overhead {scaled - plain:+7.3f} ms (step {scaled:.2f})"
    print(line, flush=True)
    if args.device == "cuda":
        print(
            f"      host syncs/step: torch {syncs_per_step(variants['torch']):.1f}, "
            f"ours {syncs_per_step(variants['ours']):.1f}",
            flush=True,
        )
        if size == "100M" and opt_name == "sgd":
            ours, copy = unscale_bandwidth(variants["plain"].model)
            print(
                f"      check/unscale pass {ours:.0f} GB/s vs copy {copy:.0f} GB/s ({ours / copy:.0%} of copy)",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--sizes", default=None, help="comma list of 1M,10M,100M (default: 1M,10M on CPU, all on CUDA)")
    parser.add_argument("--optimizers", default=None, help="default: sgd,adam (+ adam-fused,adamw-fused on CUDA)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--no-paddle", dest="paddle", action="store_false", help="skip Paddle's figures")
    parser.add_argument("--paddle-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.paddle_worker:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return paddle_worker(args.paddle_worker, args)
    if args.threads:
        torch.set_num_threads(args.threads)
    on_cuda = args.device == "cuda"
    sizes = (args.sizes or ("1M,10M,100M" if on_cuda else "1M,10M")).split(",")
    opts = (args.optimizers or ("sgd,adam,adam-fused,adamw-fused" if on_cuda else "sgd,adam")).split(",")
    if args.paddle:
        try:
            import paddle  # noqa: F401
        except ImportError:
            args.paddle = False
    amp_global_state().amp_dtype = "float16"  # as after `with auto_cast():`, so dynamic scaling stays on
    print(f"torch {torch.__version__}, device {args.device}"
          f"{' (' + torch.cuda.get_device_name() + ')' if on_cuda else ''}, threads {torch.get_num_threads()}, "
          f"rounds {args.rounds} x {args.steps} steps, batch {BATCH}, depth {DEPTH}")
    for size in sizes:
        for opt_name in opts:
            try:
                bench(size, opt_name, args)
            except torch.OutOfMemoryError:
                print(f"{size:>4} {opt_name:<11} skipped: out of device memory", flush=True)
            if on_cuda:
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
