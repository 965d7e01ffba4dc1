"""A small model trained the Paddle way: ``auto_cast`` + ``GradScaler``, on CUDA when present.

    python -m paddle_compat.demo [--steps N] [--device cpu|cuda] [--seed S]

Every step prints the loss, the loss scale and the skipped steps so far. The scale starts
high on purpose, so the first steps overflow and back off; one batch is corrupted with a NaN
to show a skipped step; then the scale grows back every ``incr_every_n_steps`` clean steps.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

import torch

from paddle_compat.amp import GradScaler, auto_cast


def make_data(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A noisy regression set: ``n`` rows of 32 features and their targets ``tanh(x @ w) + noise``.

    Args:
        n: the number of rows.
        generator: the random generator (the data depend only on its seed).

    Example::

        >>> import torch
        >>> from paddle_compat.demo import make_data
        >>> x, y = make_data(8, torch.Generator().manual_seed(0))
        >>> tuple(x.shape), tuple(y.shape)
        ((8, 32), (8, 1))
    """
    x = torch.randn(n, 32, generator=generator)
    w = torch.randn(32, 1, generator=generator)
    y = torch.tanh(x @ w) + 0.05 * torch.randn(n, 1, generator=generator)
    return x, y


def make_model(seed: int = 0) -> torch.nn.Sequential:
    """The demo's model, ``Linear(32,128)-GELU-Linear(128,128)-GELU-Linear(128,1)``, initialised
    from ``seed`` (``torch.manual_seed``).

    Args:
        seed: the seed of the initial weights.

    Example::

        >>> from paddle_compat.demo import make_model
        >>> len(make_model(0))
        5
    """
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 128), torch.nn.GELU(), torch.nn.Linear(128, 128), torch.nn.GELU(), torch.nn.Linear(128, 1)
    )


def batches(
    steps: int, seed: int = 0, corrupt_step: int | None = None, batch: int = 128
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The demo's mini-batches: ``batch`` rows drawn from ``make_data(4096)`` per step, the one of
    step ``corrupt_step`` (1-based) with a NaN in it.

    Args:
        steps: how many batches.
        seed: the seed of the data and of the draws.
        corrupt_step: the step whose batch holds a NaN (``None``: none).
        batch: rows per batch.

    Example::

        >>> from paddle_compat.demo import batches
        >>> [tuple(x.shape) for x, _ in batches(2, batch=4)]
        [(4, 32), (4, 32)]
    """
    generator = torch.Generator().manual_seed(seed)
    x_all, y_all = make_data(4096, generator)
    for step in range(1, steps + 1):
        index = torch.randint(0, x_all.shape[0], (batch,), generator=generator)
        x, y = x_all[index], y_all[index]  # indexing copies: the NaN below stays in this batch
        if step == corrupt_step:
            x[0, 0] = float("nan")
        yield x, y


def loss_of(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The demo's forward: ``auto_cast()`` (float16, O1), the MSE loss in float32.

    Args:
        model, x, y: the model, a batch and its targets.

    Example::

        >>> from paddle_compat.demo import batches, loss_of, make_model
        >>> x, y = next(batches(1, batch=4))
        >>> loss_of(make_model(), x, y).dtype
        torch.float32
    """
    with auto_cast():
        return torch.nn.functional.mse_loss(model(x).float(), y)


def main(argv: list[str] | None = None) -> int:
    """Run the demo (``python -m paddle_compat.demo``); returns the exit status.

    Args:
        argv: the command line's arguments (default: ``sys.argv[1:]``).

    Example::

        main(["--steps", "20", "--device", "cpu"])
    """
    parser = argparse.ArgumentParser(
        prog="python -m paddle_compat.demo",
        description="Train a small regression model the Paddle way (auto_cast + GradScaler) and print, "
        "at every step, the loss, the loss scale and how many steps were skipped.",
        epilog="The scale starts at 2**24 on purpose: the first float16 gradients overflow, those steps are "
        "skipped and the scale halves until it fits. Half-way, one batch holds a NaN: that step is skipped too.",
    )
    parser.add_argument("--steps", type=int, default=80, help="optimizer steps to run (default: 80)")
    parser.add_argument(
        "--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu",
        help="where to train (default: cuda when available, else cpu)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and the weights (default: 0)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")

    device = torch.device(args.device)
    model = make_model(args.seed).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    scaler = GradScaler(init_loss_scaling=2.0**24, incr_every_n_steps=20)
    corrupt_step = args.steps // 2

    print(f"paddle_compat demo: {args.steps} steps on {device}, auto_cast(float16) + GradScaler")
    print("The scale starts at 2**24 on purpose: the first steps overflow float16 and are skipped.")
    start, first_loss, loss_value = time.perf_counter(), None, float("nan")
    for step, (x, y) in enumerate(batches(args.steps, args.seed, corrupt_step), start=1):
        loss = loss_of(model, x.to(device), y.to(device))  # the corrupted batch: a step to skip
        scaled = scaler.scale(loss)
        scaled.backward()
        scaler.minimize(optimizer, scaled)
        optimizer.zero_grad()

        loss_value = loss.item()
        first_loss = loss_value if first_loss is None else first_loss
        note = ""
        if scaler.last_step_skipped():
            note = (
                "  <- skipped: the batch holds a NaN" if step == corrupt_step
                else "  <- skipped: float16 grads overflowed; the scale halved"
            )
        print(
            f"step {step:4d} | loss {loss_value:9.5f} | scale {scaler.get_scale():16.1f} "
            f"| skipped {scaler.get_skipped_steps():3d}{note}"
        )

    elapsed = time.perf_counter() - start
    print(
        f"summary: loss {first_loss:.5f} -> {loss_value:.5f}, final scale {scaler.get_scale():.1f}, "
        f"skipped steps {scaler.get_skipped_steps()} of {args.steps}, {elapsed / args.steps * 1e3:.2f} ms/step"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
