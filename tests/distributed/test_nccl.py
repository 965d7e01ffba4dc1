"""The key cases on CUDA with NCCL (2 ranks, one GPU each); skipped without two GPUs."""

from __future__ import annotations

import pytest
import torch

from .test_gloo import UNION, assert_match_one_process, assert_ranks_agree_and_skip_the_union

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices"),
]


@pytest.mark.parametrize("optimizer", ["sgd", "fused_adamw"])
def test_ddp_needs_no_process_group(nccl_2, optimizer):
    runs = [result[optimizer] for result in nccl_2.results("ddp_needs_nothing")]
    # CUDA kernels round differently from one launch to another: looser than on gloo.
    assert_match_one_process(runs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("variant", ["minimize", "step", "unscale_clip", "fused_adamw", "distributed_scaler_group"])
def test_explicit_group(nccl_2, variant):
    assert_ranks_agree_and_skip_the_union([result[variant] for result in nccl_2.results("explicit_group")])


@pytest.mark.parametrize("variant", ["fully_shard_sgd", "fully_shard_fused_adamw", "os", "os_g", "p_g_os"])
def test_fsdp2(nccl_2, variant):
    assert_ranks_agree_and_skip_the_union([result[variant]["trajectory"] for result in nccl_2.results("fsdp2")])


CASES = [
    "cpu_grads_nccl_group", "cpu_grads_mixed_world", "cuda_grads_mixed_world", "cuda_grads_gloo_group", "fsdp2_offload"
]


@pytest.mark.parametrize("case", CASES)
def test_flag_reduced_on_the_device_the_group_serves(nccl_2, case):
    results = nccl_2.results("nccl_paths")
    assert results[0]["configs"][0] == "cpu:gloo,cuda:nccl"  # init_parallel_env's default on CUDA
    assert_ranks_agree_and_skip_the_union([r[case] for r in results])


def test_fused_path_makes_no_host_sync_with_the_collective(nccl_2):
    results = nccl_2.results("nccl_paths")
    assert [r["fused_host_syncs"] for r in results] == [[], []]
    assert results[0]["fused"] == results[1]["fused"] and results[0]["fused"][1] == len(UNION)


