"""Memory and per-step time of recording a parity trace, on a 1M-parameter model.

    python benchmarks/bench_parity_trace.py [--steps 100] [--memory-steps 20] [--rounds 3]

Each variant runs in a child process of its own (so that its resident memory is its own): the same
model (4 square Linear layers, 1.0M parameters), data and optimizer (paddle_compat's AdamW), with

- ``untraced`` twice (the second is the A/A control: its ratio to the first is the run's noise);
- ``in memory``: ``TraceRecorder`` keeping everything (``--memory-steps`` steps only: it grows);
- ``streamed``: ``TraceRecorder(path=...)``, every tensor of every step written to disk as recorded;
- ``streamed, every 10``: the same, tensors every 10 steps;
- ``digests``: in memory, every tensor above 1 element kept as a digest and 8 samples (golden traces).

The variants run in interleaved rounds (each once per round); printed per variant: the median over
rounds of its median step time (training + recording), its ratio to ``untraced``, ``rec/train``
(the time ``record()`` takes over the training step's, measured step by step in the same process:
robust to a loaded machine), the resident memory (RSS) after 10 steps, halfway and at the end (last
round), its growth per step past step 10, and the size of the files written. Absolute times on a
shared machine mean little; read ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTH, DEPTH, BATCH = 500, 4, 64  # 4 * (500 * 500 + 500) = 1,002,000 parameters


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def child(mode: str, steps: int, out: str) -> dict:
    import torch

    import paddle_compat.optimizer as popt
    from paddle_compat.parity import TraceRecorder

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(DEPTH)])
    opt = popt.AdamW(learning_rate=1e-3, parameters=model.parameters())
    kw: dict = {
        "untraced": None,
        "in memory": {},
        "streamed": {"path": out},
        "streamed, every 10": {"path": out, "every": 10},
        "digests": {"full_max_elements": 1, "sample": 8},
    }[mode.removesuffix(" (A/A)")]
    rec = TraceRecorder(model, opt, **kw) if kw is not None else None
    x = torch.randn(BATCH, WIDTH)
    times, recording, rss = [], [], {}
    for step in range(1, steps + 1):
        start = time.perf_counter()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        trained = time.perf_counter()
        if rec is not None:
            rec.record(loss)
        opt.clear_grad()
        end = time.perf_counter()
        times.append(end - start)
        recording.append(end - trained)
        for mark, at in (("10", 10), ("mid", steps // 2), ("end", steps)):
            if step == at:
                rss[mark] = (step, _rss_mb())
    size = 0.0
    if rec is not None and kw:
        rec.save(None if "path" in kw else out)
        size = sum(p.stat().st_size for p in Path(out).parent.glob(Path(out).name + ".*")) / 2**20
    train = [t - r for t, r in zip(times, recording, strict=True)]
    return {
        "median_ms": 1e3 * statistics.median(times[2:]),
        "record_ms": 1e3 * statistics.median(recording[2:]),
        # recording against training measured in the same process, step by step: robust to load
        "record_share": statistics.median(r / t for r, t in zip(recording[2:], train[2:], strict=True)),
        "rss": rss,
        "file_mb": size,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--memory-steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.out)))
        return
    modes = ["untraced", "in memory", "streamed", "streamed, every 10", "digests", "untraced (A/A)"]
    results: dict[str, dict] = {}
    times: dict[str, list[float]] = {m: [] for m in modes}
    shares: dict[str, list[float]] = {m: [] for m in modes}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for r in range(args.rounds):
        for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:  # rotating order
            steps = args.memory_steps if mode == "in memory" else args.steps
            with tempfile.TemporaryDirectory() as tmp:
                proc = subprocess.run(
                    [sys.executable, __file__, "--child", mode, "--steps", str(steps), "--out", f"{tmp}/t"],
                    capture_output=True,
                    text=True,
                    env=env,
                    check=True,
                )
            results[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
            times[mode].append(results[mode]["median_ms"])
            shares[mode].append(results[mode]["record_share"])
    for mode in modes:
        results[mode]["median_ms"] = statistics.median(times[mode])
        results[mode]["record_share"] = statistics.median(shares[mode])
    base = results["untraced"]["median_ms"]
    print(
        f"{DEPTH * (WIDTH * WIDTH + WIDTH):,} parameters, AdamW, {args.steps} steps ({args.memory_steps} in memory), "
        f"{args.rounds} rounds"
    )
    print(
        f"{'variant':<20} {'ms/step':>8} {'ratio':>6} {'rec/train':>9} {'RSS@10':>8} {'RSS@mid':>8} "
        f"{'RSS@end':>8} {'MB/step':>8} {'files':>8}"
    )
    for mode, r in results.items():
        rss = r["rss"]
        (s10, m10), (send, mend) = rss["10"], rss["end"]
        growth = (mend - m10) / max(send - s10, 1)
        print(
            f"{mode:<20} {r['median_ms']:8.2f} {r['median_ms'] / base:6.2f} {r['record_share']:9.2f} "
            f"{m10:8.0f} {rss['mid'][1]:8.0f} {mend:8.0f} {growth:8.2f} {r['file_mb']:8.1f}"
        )


if __name__ == "__main__":
    main()
