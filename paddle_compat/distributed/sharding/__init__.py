"""``paddle.distributed.sharding`` on torch's FSDP2 (``torch.distributed.fsdp.fully_shard``)."""

from .group_sharded import group_sharded_parallel, save_group_sharded_model

__all__ = ["group_sharded_parallel", "save_group_sharded_model"]
