"""One optimizer step: paddle_compat.optimizer against torch.optim and against Paddle 3.3.1.

    python benchmarks/bench_optimizers.py [--device cpu|cuda] [--sizes 1M,10M,tf] [--rounds 15]
                                          [--threads 2] [--only SGD,Adam] [--no-paddle]
                                          [--block 3] [--interlude-mb 64]

Parameter sets: ``1M``/``10M``/``100M`` are four float32 tensors of a quarter each; ``tf`` is a
transformer-shaped list (16 blocks of 12 tensors, embeddings and a final norm: 196 tensors of
mixed sizes; ``--width`` sets the model width, 256 on CPU, 1024 on CUDA). Gradients are set once,
and every variant in the process steps the same parameters with its own state, so that where its
tensors lie in memory favours none.

One run, interleaved rounds: in every round each variant, in shuffled order, takes ``--block``
steps in a row, the first untimed, and the figures are medians of the timed ones. On the CPU
every step follows the same interlude, a write of a buffer larger than the last-level cache
(``--interlude-mb``, 0 for none), standing for the forward and backward passes a real step
follows, so that each step starts from cold data caches. The untimed first step of a block makes
the comparison fair to the code: four of the five in-process variants are torch.optim's, and a
variant stepping right after a different one finds the processor's other state (branch history,
translation buffers) trained on the other's code. Timing single steps in a plain rotation favours
whichever code most variants share: ours comes out about 15% slower there, and a lone torch.optim
among four instances of ours as much slower the other way round. Paddle (CPU only: these machines have
no Paddle GPU build) runs in a child process, in the same rounds: the parent waits while the child
steps, and the other way round, so the two never compete for the cores, and Paddle's thread pools do
not slow torch in the parent.
Ratios are ours over each anchor measured in the same run; the A/A line (torch.optim's default
against a second, identical instance) is the run's noise floor. Our step's bandwidth (the bytes the update
must move, over its time) is compared with a device-to-device copy measured in the same run on
CUDA, and on the CPU with an in-place ``a += b`` timed in the same rounds, after the same interlude;
on CUDA host syncs per step are counted with ``paddle_compat``'s GradScaler driving the optimizer.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paddle_compat.optimizer._cases import FAMILY as _FAMILY  # noqa: E402  (this checkout's, on the path above)

# The rest of paddle.optimizer, from the optimizers' table (``--only`` picks them; every one but Lamb
# has a torch.optim anchor).
FAMILY = [entry.name for entry in _FAMILY]

SIZES = {"1M": 1_000_000, "10M": 10_000_000, "100M": 100_000_000}
CONFIGS = ["SGD", "Momentum", "Adam", "Adam+L2", "AdamW", "AdamW+clip"]
LR = 1e-3


def shapes(size: str, width: int) -> list[tuple[int, ...]]:
    """The parameter shapes of a set (see the module docstring)."""
    if size in SIZES:
        return [(SIZES[size] // 4,)] * 4
    d = width
    block = [(d,), (d,), (d, 3 * d), (3 * d,), (d, d), (d,), (d,), (d,), (d, 4 * d), (4 * d,), (4 * d, d), (d,)]
    return [(8 * d, d), (512, d)] + block * 16 + [(d,), (d,)]


def make_tensors(size: str, width: int, device: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    values = [torch.randn(s, generator=gen) * 0.02 for s in shapes(size, width)]
    grads = [torch.randn(s, generator=gen) * 1e-3 for s in shapes(size, width)]
    return [v.to(device) for v in values], [g.to(device) for g in grads]


# --- the variants ---------------------------------------------------------------------------------
def ours(config: str, fused: bool = False) -> Callable[[list], Callable[[], None]]:
    """Ours; ``fused``: the scaler hands the skip over (no effect on a step without a scaler)."""
    import paddle_compat.nn as pnn
    import paddle_compat.optimizer as popt

    def build(params: list) -> Callable[[], None]:
        opt = {
            "SGD": lambda: popt.SGD(LR, parameters=params, fused=fused),
            "Momentum": lambda: popt.Momentum(LR, 0.9, parameters=params, fused=fused),
            "Adam": lambda: popt.Adam(LR, parameters=params, fused=fused),
            "Adam+L2": lambda: popt.Adam(LR, parameters=params, weight_decay=0.01, fused=fused),
            "AdamW": lambda: popt.AdamW(LR, parameters=params, weight_decay=0.01, fused=fused),
            "AdamW+clip": lambda: popt.AdamW(
                LR, parameters=params, weight_decay=0.01, grad_clip=pnn.ClipGradByGlobalNorm(1.0), fused=fused
            ),
            **{name: (lambda name=name: getattr(popt, name)(LR, parameters=params)) for name in FAMILY},
        }[config]()
        return opt.step

    return build


# torch.optim's counterparts of FAMILY (the same algorithm where torch has it; torch's ASGD averages
# the iterates instead, and its RMSprop adds epsilon outside the root: the nearest, not the same)
_TORCH_NAMES = {"RMSProp": "RMSprop"}  # where torch spells it otherwise
_TORCH_FAMILY = {name: _TORCH_NAMES.get(name, name) for name in FAMILY
                 if hasattr(torch.optim, _TORCH_NAMES.get(name, name))}


def torch_optim(config: str, mode: str) -> Callable[[list], Callable[[], None]]:
    """torch.optim's nearest optimizer; ``mode``: default, foreach or fused."""

    def build(params: list) -> Callable[[], None]:
        kw = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}[mode]
        opt = {
            "SGD": lambda: torch.optim.SGD(params, lr=LR, **kw),
            "Momentum": lambda: torch.optim.SGD(params, lr=LR, momentum=0.9, **kw),
            "Adam": lambda: torch.optim.Adam(params, lr=LR, **kw),
            "Adam+L2": lambda: torch.optim.Adam(params, lr=LR, weight_decay=0.01, **kw),
            "AdamW": lambda: torch.optim.AdamW(params, lr=LR, weight_decay=0.01, **kw),
            "AdamW+clip": lambda: torch.optim.AdamW(params, lr=LR, weight_decay=0.01, **kw),
            **{ours: (lambda name=name: getattr(torch.optim, name)(params, lr=LR, **kw))
               for ours, name in _TORCH_FAMILY.items()},
        }[config]()
        if config.endswith("+clip"):
            def step() -> None:
                torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=mode != "default" or None)
                opt.step()
            return step
        return opt.step

    return build


def parameters(values: list, grads: list) -> list[torch.nn.Parameter]:
    """Parameters holding copies of ``values``, with copies of ``grads`` as their gradients."""
    params = [torch.nn.Parameter(v.clone()) for v in values]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    return params


def instantiate(build: Callable[[list], Callable[[], None]], params: list) -> Callable[[], None]:
    step = build(params)
    step()  # creates the state (and, for ours, builds or loads the compiled kernels)
    return step


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(step: Callable[[], None], device: str, interlude: torch.Tensor | None = None) -> float:
    if interlude is not None:
        interlude.add_(1)  # evicts the caches (see the module docstring)
    sync(device)
    start = time.perf_counter()
    step()
    sync(device)
    return time.perf_counter() - start


# --- Paddle, in a child process -------------------------------------------------------------------
class PaddleChild:
    """A child process holding Paddle optimizers; ``step(config)`` times one step of one."""

    def __init__(self, size: str, width: int, configs: list[str], threads: int) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--paddle-child", size, "--width", str(width), "--threads", str(threads),
             "--only", ",".join(configs)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
        )
        assert self._read() == "ready"

    def _read(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the Paddle child process ended")
        return line.strip()

    def step(self, config: str) -> float:
        self.proc.stdin.write(config + "\n")
        self.proc.stdin.flush()
        return float(self._read())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def paddle_child(size: str, width: int, threads: int, configs: list[str]) -> None:
    import paddle

    paddle.set_device("cpu")
    paddle.base.core.set_num_threads(threads)
    values, grads = make_tensors(size, width, "cpu")
    steps = {}
    for config in configs:
        params = [paddle.create_parameter(list(v.shape), "float32") for v in values]
        for p, v in zip(params, values):
            p.set_value(v.numpy())
        # d/dp sum(p * G) is G: the gradients, set once (never cleared, as on our side)
        sum((p * paddle.to_tensor(g.numpy())).sum() for p, g in zip(params, grads)).backward()
        kw = {"learning_rate": LR, "parameters": params}
        opt = {
            "SGD": lambda kw: paddle.optimizer.SGD(**kw),
            "Momentum": lambda kw: paddle.optimizer.Momentum(momentum=0.9, **kw),
            "Adam": lambda kw: paddle.optimizer.Adam(**kw),
            "Adam+L2": lambda kw: paddle.optimizer.Adam(weight_decay=0.01, **kw),
            "AdamW": lambda kw: paddle.optimizer.AdamW(weight_decay=0.01, **kw),
            "AdamW+clip": lambda kw: paddle.optimizer.AdamW(
                weight_decay=0.01, grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0), **kw
            ),
            **{name: (lambda kw, name=name: getattr(paddle.optimizer, name)(**kw)) for name in FAMILY},
        }[config](kw)
        opt.step()
        steps[config] = opt.step
    print("ready", flush=True)
    for line in sys.stdin:
        start = time.perf_counter()
        steps[line.strip()]()
        print(time.perf_counter() - start, flush=True)


# --- CUDA extras ----------------------------------------------------------------------------------
def copy_bandwidth(numel: int, rounds: int) -> float:
    """Bytes per second of a device-to-device copy of ``numel`` float32 values (read + write)."""
    src = torch.empty(numel, device="cuda")
    dst = torch.empty_like(src)
    times = [timed(lambda: dst.copy_(src), "cuda") for _ in range(rounds)]
    return 8 * numel / statistics.median(times)


def syncs_per_step(values: list, grads: list, config: str, steps: int = 3) -> float:
    """Host syncs per step of ours built with ``fused=True``, driven by paddle_compat's GradScaler
    (``minimize``); an ordinary optimizer makes one (the scaler reads the flag)."""
    from paddle_compat.amp import GradScaler

    opt = ours(config, fused=True)(parameters(values, grads)).__self__
    scaler = GradScaler()
    loss = torch.zeros((), device="cuda")
    scaler.minimize(opt, scaler.scale(loss))  # the first step builds the state
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            for _ in range(steps):
                scaler.minimize(opt, scaler.scale(loss))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message).lower() for w in caught) / steps


# Bytes a step must move per float32 parameter: each operand read once and each updated one written
# once (ASGD: its one slice of y; RMSProp: not centered; Lamb, two passes over its direction: none).
BYTES_PER_ELEMENT = {"SGD": 12, "Momentum": 20, "Adam": 28, "Adam+L2": 28, "AdamW": 28, "AdamW+clip": 36,
                     "Adagrad": 20, "RMSProp": 28, "Adamax": 28, "Adadelta": 28, "NAdam": 28, "RAdam": 28,
                     "ASGD": 28, "Rprop": 28}


def stream(numel: int) -> Callable[[], None]:
    """The CPU's bandwidth anchor: ``a += b`` over ``numel`` float32 values, in place (12 bytes an
    element, like SGD's update: two reads and one write, no line fetched only to be overwritten)."""
    a, b = torch.zeros(numel), torch.zeros(numel)
    return lambda: a.add_(b)


# --- the run --------------------------------------------------------------------------------------
def bench(size: str, args: argparse.Namespace) -> None:
    device, width = args.device, args.width or (1024 if args.device == "cuda" else 256)
    values, grads = make_tensors(size, width, device)
    numel = sum(v.numel() for v in values)
    modes = ["default", "foreach", "fused"]
    child = None
    if device == "cpu" and not args.no_paddle:
        child = PaddleChild(size, width, args.only, args.threads)
    label = f"{size} ({len(values)} tensors, {numel / 1e6:.1f}M float32 parameters)"
    cold = f", each after a {args.interlude_mb} MiB write" if device == "cpu" and args.interlude_mb else ""
    print(f"\n## {label}, {device}, {torch.get_num_threads()} threads, median of {args.rounds} rounds"
          f" of {args.block} steps{cold}")
    header = "| optimizer | ours ms | torch default | foreach | fused |" + (" Paddle |" if child else "")
    header += " ours/torch default | ours/foreach | ours/fused |" + (" ours/Paddle |" if child else "") + " A/A |"
    header += " ours GB/s (of copy) | syncs/step |" if device == "cuda" else " ours GB/s (of a += b) |"
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    bandwidth = copy_bandwidth(numel, args.rounds) if device == "cuda" else None
    interlude = None
    if device == "cpu" and args.interlude_mb:
        interlude = torch.zeros(args.interlude_mb * 2**20 // 4)
    for config in args.only:
        # Every variant steps the same parameters and gradients (each with its own state), so that
        # none is faster or slower for where in memory its tensors happen to lie: with a copy each,
        # two instances of the same optimizer differed by up to 8% (the steps are memory-bound).
        params = parameters(values, grads)
        variants = {"ours": instantiate(ours(config), params)}
        for mode in modes:
            try:
                variants[mode] = instantiate(torch_optim(config, mode), params)
            except (RuntimeError, ValueError, TypeError, KeyError) as exc:  # no such kernel, or no counterpart
                print(f"<!-- torch {mode} {config}: {exc!r} -->")
        # A/A: a second instance of torch's default (of ours where torch has no counterpart)
        anchor = "default" if "default" in variants else "ours"
        variants["A/A"] = instantiate(torch_optim(config, "default") if anchor == "default" else ours(config), params)
        if child is not None:
            variants["Paddle"] = lambda config=config: child.step(config)
        if device == "cpu":
            variants["a += b"] = stream(numel)
        times: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        order = random.Random(0)
        for _ in range(args.rounds):
            order.shuffle(names)  # no variant always follows the same one
            for name in names:
                for k in range(args.block):
                    if name == "Paddle":
                        if interlude is not None:
                            interlude.add_(1)  # the child shares the machine's caches
                        t = variants[name]()
                    else:
                        t = timed(variants[name], device, interlude)
                    if k or args.block == 1:
                        times[name].append(t)
        med = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
        ratio = lambda a, b, med=med: f"{med[a] / med[b]:.2f}" if b in med else "-"  # noqa: E731
        row = f"| {config} | {med['ours']:.3f} | " + " | ".join(
            f"{med[m]:.3f}" if m in med else "-" for m in modes
        ) + " |"
        if child:
            row += f" {med['Paddle']:.3f} |"
        row += f" {ratio('ours', 'default')} | {ratio('ours', 'foreach')} | {ratio('ours', 'fused')} |"
        if child:
            row += f" {ratio('ours', 'Paddle')} |"
        row += f" {med['A/A'] / med[anchor]:.2f} |"
        achieved = BYTES_PER_ELEMENT.get(config, 0) * numel / (med["ours"] / 1e3)
        if device == "cpu":
            bandwidth = 12 * numel / (med["a += b"] / 1e3)
        of_anchor = f" {achieved / 1e9:.0f} ({achieved / bandwidth:.2f}) |" if achieved else " - |"
        row += of_anchor
        if device == "cuda":
            row += f" {syncs_per_step(values, grads, config):.1f} |"
        print(row, flush=True)
        del variants
    if child is not None:
        child.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--sizes", default=None, help="comma-separated: 1M, 10M, 100M, tf")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (torch, the compiled kernels, Paddle)")
    parser.add_argument("--width", type=int, default=None, help="model width of the tf set")
    parser.add_argument("--only", default=",".join(CONFIGS),
                        help="comma-separated optimizer configurations (also: " + ",".join(FAMILY) + ", or all)")
    parser.add_argument("--no-paddle", action="store_true", help="skip Paddle (CPU)")
    parser.add_argument("--block", type=int, default=3,
                        help="steps per variant in a row in each round, the first untimed (1: one, timed)")
    parser.add_argument("--interlude-mb", type=int, default=64,
                        help="CPU: MiB written before every timed step, to start each from cold caches (0: none)")
    parser.add_argument("--paddle-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.only = CONFIGS + FAMILY if args.only == "all" else args.only.split(",")
    torch.set_num_threads(args.threads)
    if args.paddle_child:
        paddle_child(args.paddle_child, args.width, args.threads, args.only)
        return
    sizes = args.sizes or ("100M,tf" if args.device == "cuda" else "1M,10M,tf")
    print(f"torch {torch.__version__}" + (f", {torch.cuda.get_device_name()}" if args.device == "cuda" else ""))
    for size in sizes.split(","):
        bench(size, args)


if __name__ == "__main__":
    main()
