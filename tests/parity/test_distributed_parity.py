"""fleet's topology and DistributedStrategy against Paddle 3.3.1's own classes (no process
groups needed: both are plain Python there too)."""

from __future__ import annotations

import math

import pytest
from paddle.distributed import fleet as paddle_fleet
from paddle.distributed.fleet.base.topology import CommunicateTopology as PaddleTopology

from paddle_compat.distributed.fleet import CommunicateTopology, DistributedStrategy
from paddle_compat.distributed.fleet.distributed_strategy import _CONFIGS, _FLAGS

NAMES = ["data", "pipe", "sharding", "sep", "model"]


@pytest.mark.parametrize(
    "names, dims",
    [
        (NAMES, [2, 1, 1, 1, 2]),
        (NAMES, [1, 2, 2, 1, 2]),
        (NAMES, [2, 2, 1, 1, 1]),
        (NAMES, [3, 1, 1, 2, 1]),
        (["model", "data", "pipe", "sep", "sharding"], [2, 3, 1, 1, 2]),  # a custom order
    ],
)
def test_topology_matches_paddles(names, dims):
    ours, theirs = CommunicateTopology(names, dims), PaddleTopology(names, dims)
    assert ours.world_size() == theirs.world_size()
    for name in names:
        assert ours.get_comm_list(name) == theirs.get_comm_list(name), name
        for index in range(theirs.get_dim(name)):
            # Paddle's check groups are these lists: every rank with one dp (or sharding) index.
            assert ours.get_axis_list(name, index) == theirs.get_axis_list(name, index), (name, index)
    for rank in range(math.prod(dims)):
        assert tuple(ours.get_coord(rank)) == tuple(theirs.get_coord(rank))
        assert ours.get_rank(**ours.get_coord(rank)._asdict()) == rank


def test_strategy_defaults_are_paddles():
    ours, theirs = DistributedStrategy(), paddle_fleet.DistributedStrategy()
    for name in _FLAGS:
        assert getattr(ours, name) == getattr(theirs, name), name
    for name in _CONFIGS:
        paddle_config = getattr(theirs, name)
        for key, value in getattr(ours, name).items():
            expected = paddle_config[key]
            if isinstance(value, float):  # Paddle stores floats as float32 (decr_ratio 0.8)
                assert value == pytest.approx(expected, rel=1e-7), (name, key)
            elif isinstance(value, dict):  # nested hybrid sections: Paddle's are messages
                assert value == {}, (name, key)
            else:
                assert value == expected, (name, key)
    assert ours.hybrid_parallel_order == theirs.hybrid_parallel_order


def test_strategy_error_texts_are_paddles():
    ours, theirs = DistributedStrategy(), paddle_fleet.DistributedStrategy()
    for strategy, error in ((ours, ValueError), (theirs, AssertionError)):
        with pytest.raises(error, match=r"^key:foo_degree not in hybrid_configs$"):
            strategy.hybrid_configs = {"foo_degree": 2}
        with pytest.raises(TypeError, match=r"^nonexistent is not a attribute of DistributedStrategy$"):
            strategy.nonexistent = 3
