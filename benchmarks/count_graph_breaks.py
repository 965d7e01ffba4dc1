"""Graph breaks of a compiled training step with torch.amp.GradScaler and with ours.

For each optimizer and backend: the graph breaks TorchDynamo reports (total and by kind), the
graphs it compiled, and whether both scalers end with the same scale and parameters.

    python benchmarks/count_graph_breaks.py                      # eager and inductor backends
    python benchmarks/count_graph_breaks.py --backends eager     # fast
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import torch
import torch._dynamo
from torch._dynamo.utils import counters

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paddle_compat.amp import auto_cast  # noqa: E402
from tests.compiled_step import graph_breaks, make, training_step  # noqa: E402  (what tests/test_compile.py runs)

OPTIMIZERS = {"sgd": "SGD", "adam": "Adam", "fused_adamw": "AdamW fused"}  # compiled_step's names: the table's


def run(optimizer: str, scaler_kind: str, backend: str, steps: int = 3):
    model, opt, scaler = make(optimizer, scaler_kind)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(training_step(model, opt, scaler), backend=backend)
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        compiled(torch.randn(16, 8, generator=generator), torch.randn(16, 2, generator=generator))
    params = [p.detach().clone() for p in model.parameters()]
    return graph_breaks(), counters["stats"]["unique_graphs"], scaler.get_scale(), params


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
        for optimizer, name in OPTIMIZERS.items():
            t_kinds, t_graphs, t_scale, t_params = run(optimizer, "torch", backend)
            o_kinds, o_graphs, o_scale, o_params = run(optimizer, "ours", backend)
            same = t_scale == o_scale and all(torch.equal(a, b) for a, b in zip(t_params, o_params))
            print(f"| {backend} | {name} | {t_kinds.total()} | {o_kinds.total()} | {t_graphs} / {o_graphs} | {same} |")
            details.append((backend, name, t_kinds, o_kinds))
    for backend, name, t_kinds, o_kinds in details:
        print(f"\n{backend}, {name}:")
        for kind in sorted(set(t_kinds) | set(o_kinds)):
            print(f"  {t_kinds[kind]} / {o_kinds[kind]}  {kind}")


if __name__ == "__main__":
    main()
