"""Graph breaks of a compiled training step with torch.amp.GradScaler and with ours.

For each optimizer and backend: the graph breaks TorchDynamo reports (total and by kind), the
graphs it compiled, and whether both scalers end with the same scale and parameters.

    python benchmarks/count_graph_breaks.py                      # eager and inductor backends
    python benchmarks/count_graph_breaks.py --backends eager     # fast
"""

from __future__ import annotations

import argparse
import collections
import warnings

import torch
import torch._dynamo
from torch._dynamo.utils import counters

from paddle_compat.amp import GradScaler, auto_cast

OPTIMIZERS = {
    "SGD": lambda params: torch.optim.SGD(params, lr=0.1),
    "Adam": lambda params: torch.optim.Adam(params, lr=0.01),
    "AdamW fused": lambda params: torch.optim.AdamW(params, lr=0.01, fused=True),
}


def run(optimizer: str, scaler_kind: str, backend: str, steps: int = 3):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = OPTIMIZERS[optimizer](model.parameters())
    if scaler_kind == "torch":
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    else:
        scaler = GradScaler(init_loss_scaling=1024.0)

    def step(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(step, backend=backend)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        compiled(torch.randn(16, 8, generator=generator), torch.randn(16, 2, generator=generator))
    kinds = collections.Counter()
    for reason, count in counters["graph_break"].items():
        kinds[reason.splitlines()[0]] += count
    params = [p.detach().clone() for p in model.parameters()]
    return kinds, counters["stats"]["unique_graphs"], scaler.get_scale(), params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["eager", "inductor"])
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    with auto_cast(dtype="float16"):  # records float16 for our scaler's dtype policy
        pass
    print(f"torch {torch.__version__}")
    print("| backend | optimizer | breaks, torch's scaler | breaks, ours | graphs (torch / ours) | same result |")
    print("|---|---|---|---|---|---|")
    details = []
    for backend in args.backends:
        for name in OPTIMIZERS:
            t_kinds, t_graphs, t_scale, t_params = run(name, "torch", backend)
            o_kinds, o_graphs, o_scale, o_params = run(name, "ours", backend)
            same = t_scale == o_scale and all(torch.equal(a, b) for a, b in zip(t_params, o_params))
            print(f"| {backend} | {name} | {t_kinds.total()} | {o_kinds.total()} | {t_graphs} / {o_graphs} | {same} |")
            details.append((backend, name, t_kinds, o_kinds))
    for backend, name, t_kinds, o_kinds in details:
        print(f"\n{backend}, {name}:")
        for kind in sorted(set(t_kinds) | set(o_kinds)):
            print(f"  {t_kinds[kind]} / {o_kinds[kind]}  {kind}")


if __name__ == "__main__":
    main()
