"""A Paddle fleet training script, ported by changing its imports (and nothing else of its
fleet, amp and optimizer calls). Run it with ``torchrun --nproc-per-node 2 -m
tests.distributed.paddle_style_train``; the tests run ``main`` inside their own ranks.

The Paddle original imported::

    import paddle
    import paddle.distributed as dist
    from paddle.distributed import fleet
    from paddle.distributed.sharding import group_sharded_parallel

Only the model (``paddle.nn`` -> ``torch.nn``) and the data are written for torch.
"""

from __future__ import annotations

import torch
from torch import nn

import paddle_compat as paddle
import paddle_compat.distributed as dist
from paddle_compat.distributed import fleet
from paddle_compat.distributed.sharding import group_sharded_parallel


def data(step: int, rank: int, bad: bool) -> torch.Tensor:
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(100 * step + rank))
    if bad:
        x[0, 0] = 1e6  # overflows float16 inside auto_cast
    return x


def main(bad_rank: int = 1, bad_step: int = 3, steps: int = 6) -> dict[str, list]:
    strategy = fleet.DistributedStrategy()
    strategy.hybrid_configs = {"dp_degree": dist.get_world_size(), "mp_degree": 1, "pp_degree": 1}
    fleet.init(is_collective=True, strategy=strategy)
    rank = dist.get_rank()

    def train(model, optimizer, scaler, clear_grad) -> list:
        history = []
        for step in range(steps):
            x = data(step, rank, bad=(rank, step) == (bad_rank, bad_step))
            with paddle.amp.auto_cast():
                loss = model(x).mean()
            scaled = scaler.scale(loss)
            scaled.backward()
            scaler.minimize(optimizer, scaled)
            clear_grad()
            history.append((scaler.get_scale(), scaler._cache_found_inf))
        return history

    # -- data parallel -------------------------------------------------------------------------
    torch.manual_seed(rank)  # different on each rank: distributed_model broadcasts rank 0's
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = paddle.optimizer.AdamW(learning_rate=1e-3, parameters=model.parameters())
    scaler = paddle.amp.GradScaler(init_loss_scaling=1024)
    model = fleet.distributed_model(model)
    optimizer = fleet.distributed_optimizer(optimizer)
    scaler = fleet.distributed_scaler(scaler)
    data_parallel = train(model, optimizer, scaler, optimizer.clear_grad)

    # -- group sharded (ZeRO-2) ------------------------------------------------------------------
    torch.manual_seed(rank)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    optimizer = paddle.optimizer.AdamW(learning_rate=1e-3, parameters=model.parameters())
    scaler = paddle.amp.GradScaler(init_loss_scaling=1024)
    model, optimizer, scaler = group_sharded_parallel(model, optimizer, "os_g", scaler=scaler)
    group_sharded = train(model, optimizer, scaler, optimizer.clear_grad)
    return {"data_parallel": data_parallel, "group_sharded": group_sharded}


if __name__ == "__main__":
    print(main())
