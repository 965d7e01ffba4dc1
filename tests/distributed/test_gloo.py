"""Real process groups on CPU (gloo): 2 ranks for DDP, FSDP2, an explicit group, checkpoints,
a Paddle-style script and failures; 4 ranks for fleet's hybrid groups. One launch each
(``conftest.py``); an inf enters one rank's input at a time (``worker.BAD``)."""

from __future__ import annotations

import math

import pytest
import torch

from paddle_compat.distributed.fleet import ParallelMode

from ..optim_db import CLASSES
from .worker import BAD

UNION = sorted(BAD)  # the steps every rank must skip when the ranks agree


def skipped(trajectory: list[tuple[float, bool]]) -> list[int]:
    return [step for step, (_, skip) in enumerate(trajectory) if skip]


def assert_same_on_every_rank(trajectories: list[list[tuple[float, bool]]]) -> None:
    for rank, trajectory in enumerate(trajectories[1:], 1):
        assert trajectory == trajectories[0], f"rank {rank} differs from rank 0"


def assert_ranks_agree_and_skip_the_union(trajectories: list[list[tuple[float, bool]]]) -> None:
    assert_same_on_every_rank(trajectories)
    assert skipped(trajectories[0]) == UNION


def assert_match_one_process(runs: list[dict], rtol: float = 1e-6, atol: float = 1e-7) -> None:
    """The ranks agree, and match one process trained on the whole batch: the same scales and
    skips, the same parameters to within ``rtol``/``atol`` (data parallelism sums the batch in
    another order than one process does)."""
    assert_ranks_agree_and_skip_the_union([r["trajectory"] for r in runs])
    assert runs[0]["trajectory"] == runs[0]["reference"]["trajectory"]
    for run in runs:
        for p, r in zip(run["params"], run["reference"]["params"], strict=True):
            torch.testing.assert_close(p, r, rtol=rtol, atol=atol)


@pytest.mark.parametrize("optimizer", ["sgd", "fused_adamw"])
def test_ddp_needs_no_process_group(gloo_2, optimizer):
    runs = [result[optimizer] for result in gloo_2.results("ddp_needs_nothing")]
    assert_match_one_process(runs)
    for run in runs:
        assert all(torch.equal(p, q) for p, q in zip(run["params"], runs[0]["params"]))


@pytest.mark.parametrize("variant", ["minimize", "step", "unscale_clip", "fused_adamw", "distributed_scaler_group"])
def test_explicit_group_makes_ranks_with_different_grads_agree(gloo_2, variant):
    assert_ranks_agree_and_skip_the_union([result[variant] for result in gloo_2.results("explicit_group")])


def test_without_a_group_ranks_with_different_grads_diverge(gloo_2):
    """The control: each rank skips only its own overflow and the scales drift apart."""
    trajectories = [result["none"] for result in gloo_2.results("explicit_group")]
    for rank, trajectory in enumerate(trajectories):
        assert skipped(trajectory) == [step for step, bad_rank in BAD.items() if bad_rank == rank]
    assert trajectories[0][-1][0] != trajectories[1][-1][0] or trajectories[0] != trajectories[1]


@pytest.mark.parametrize("variant", ["fully_shard_sgd", "fully_shard_fused_adamw", "os", "os_g", "p_g_os"])
def test_fsdp2_ranks_agree_and_match_one_process(gloo_2, variant):
    assert_match_one_process([result[variant] for result in gloo_2.results("fsdp2")])


@pytest.mark.parametrize("variant", ["fully_shard_sgd", "fully_shard_fused_adamw"])
def test_fsdp2_steps_without_warnings(gloo_2, variant):
    # The scaler's shape-[1] tensors once made DTensor warn about implicit replication.
    for result in gloo_2.results("fsdp2"):
        assert result[variant]["warnings"] == []


def test_group_sharded_levels_map_to_fsdp_units(gloo_2):
    (result, *_) = gloo_2.results("fsdp2")
    # os/os_g: the whole model is one unit; p_g_os: Linear(8, 16) (144 elements >= the
    # segment_size of 100) gets its own unit, the rest stays with the root.
    assert (result["os"]["units"], result["os_g"]["units"], result["p_g_os"]["units"]) == (1, 1, 2)


PADDLE_ON_SHARDS = [
    "sgd", "momentum", "adam", "adamw", "adamw_bf16_master", "adamw_torch_forms", "adamw_os", "adamw_os_g",
    "adamw_p_g_os", "momentum_uneven", "adamw_uneven", "adamw_uneven_torch_forms",
    "rmsprop", "adagrad", "adamax", "adadelta", "nadam", "radam", "rprop", "adagrad_param_attr",
]


# the optimizers that refuse sharded parameters (their update needs the whole: test below)
REFUSE_SHARDS = {"lamb", "asgd"}


def test_every_optimizer_of_the_table_steps_shards_or_refuses_them() -> None:
    """The cases above cover the optimizers' table (``optim_db``, from the package's): a new
    optimizer needs a case here (``worker._paddle_optimizers``) or its refusal."""
    covered = {case.split("_")[0] for case in PADDLE_ON_SHARDS} | REFUSE_SHARDS
    assert {cls.__name__.lower() for cls in CLASSES} == covered


def ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    from paddle_compat.parity._arrays import ulp_distance

    dtype = str(a.dtype).removeprefix("torch.")
    return int(ulp_distance(a.float().numpy(), b.float().numpy(), "float32").max()) if dtype == "bfloat16" else int(
        ulp_distance(a.numpy(), b.numpy(), dtype).max()
    )


def ulps_of_the_largest(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest difference, in ulps of ``b``'s largest magnitude."""
    largest = b.abs().max()
    return float((a - b).abs().max() / (torch.nextafter(largest, torch.tensor(float("inf"))) - largest))


@pytest.mark.parametrize("case", PADDLE_ON_SHARDS)
def test_paddle_optimizers_step_fsdp2_shards_bitwise_as_one_process(gloo_2, case):
    """Each rank updates its shards; gathered, they are one process's tensors after the same
    steps from the same whole gradients, bit for bit; an inf in one rank's shard is skipped on
    every rank; the state is DTensors placed as their parameter (the beta powers: plain)."""
    runs = [result[case] for result in gloo_2.results("paddle_optimizers_fsdp2")]
    assert_ranks_agree_and_skip_the_union([run["trajectory"] for run in runs])
    for run in runs:
        assert run["trajectory"] == run["reference"]["trajectory"]
        for p, q in zip(run["params"], run["reference"]["params"], strict=True):
            assert p.dtype == q.dtype and torch.equal(p, q)
        for key, kind, placed in run["layout"]:
            assert (kind, placed) == (("Tensor", None) if key in HOST_STATE else ("DTensor", True)), key


# what the optimizers keep on the host as plain [1] tensors (Adam's, Lamb's beta powers; NAdam's ...)
HOST_STATE = {key for cls in CLASSES for key in cls._host_state}


def test_lamb_and_asgd_refuse_sharded_parameters(gloo_2):
    for result in gloo_2.results("paddle_optimizers_fsdp2"):
        (lamb, lamb_unchanged), (asgd, asgd_unchanged) = result["refused"]["lamb"], result["refused"]["asgd"]
        assert "Lamb cannot update sharded parameters" in lamb and lamb_unchanged
        assert "ASGD cannot update sharded parameters" in asgd and asgd_unchanged


def test_global_norm_clip_sums_every_shard_on_every_rank(gloo_2):
    runs = [result["adamw_clip"] for result in gloo_2.results("paddle_optimizers_fsdp2")]
    assert_ranks_agree_and_skip_the_union([run["trajectory"] for run in runs])
    for run in runs:
        sharded, whole, local_only = run["norms"]
        assert torch.equal(sharded, runs[0]["norms"][0])  # one all-reduced norm on every rank
        assert ulps(sharded, whole) <= 4  # the partial sums add up in another order than one process's
        assert abs(local_only - float(whole)) > 0.1 * float(whole)  # this rank's shards alone: a wrong norm
        for p, q in zip(run["params"], run["reference"]["params"], strict=True):
            # The norms' few ulps move every update by a few ulps of its size (lr), not of each
            # element: measured at the tensor's largest magnitude (an element near 0 counts 79 ulps
            # of its own for a difference of 1 ulp of the largest, on an AVX2 host).
            assert ulps_of_the_largest(p, q) <= 4


@pytest.mark.parametrize("kind", ["ddp", "sharded", "sharded_paddle"])
def test_checkpoint_on_rank_0_resumes_the_same_run_on_every_rank(gloo_2, kind):
    for result in gloo_2.results("checkpoint"):
        straight, resumed = result[f"{kind}_straight"], result[f"{kind}_resumed"]
        assert skipped(straight["trajectory"]) == UNION
        assert resumed["trajectory"] == straight["trajectory"]
        assert all(torch.equal(p, q) for p, q in zip(resumed["params"], straight["params"], strict=True))


@pytest.mark.parametrize("part", ["data_parallel", "group_sharded"])
def test_paddle_style_script_ports_by_changing_imports(gloo_2, part):
    histories = [result[part] for result in gloo_2.results("paddle_script")]
    assert_same_on_every_rank(histories)
    # auto_cast's float16 overflows on rank 1 at step 3 only; both ranks skip it and halve.
    assert histories[0] == [(1024.0, False)] * 3 + [(512.0, True)] + [(512.0, False)] * 2


def test_a_rank_that_never_steps_fails_the_others_at_the_timeout(gloo_2):
    waiting, _ = gloo_2.results("peer_hangs")
    assert waiting["error"].startswith("GradScaler: the all-reduce (MAX) of found_inf over its process_group failed.")
    assert "Timed out" in waiting["error"]
    assert 1.9 < waiting["seconds"] < 10  # the group's 2 s timeout, not a hang


def test_a_rank_that_raises_fails_the_others_promptly(gloo_2):
    failing = gloo_2.launch.ranks[1]
    assert failing.returncode == 1 and "injected failure on rank 1" in failing.output
    assert gloo_2.launch.ranks[0].returncode == 3, gloo_2.logs()  # rank 0 caught the error and exited
    waiting = torch.load(gloo_2.out / "rank_raises.0.pt", weights_only=True)
    assert waiting["error"].startswith("GradScaler: the all-reduce (MAX) of found_inf over its process_group failed.")
    assert "by peer" in waiting["error"]  # gloo: "Connection closed/reset by peer"
    assert waiting["seconds"] < 10  # well before the 30 s collective timeout


def test_hybrid_groups_follow_paddles_layout(gloo_4):
    # dp=2 x mp=2 in Paddle's default order (mp innermost): mp partners are neighbours.
    results = gloo_4.results("hybrid")
    for rank, r in enumerate(results):
        dp_id, mp_id = divmod(rank, 2)
        assert r["mode"] == ParallelMode.TENSOR_PARALLEL
        assert r["dp"] == [mp_id, mp_id + 2]
        assert r["mp"] == [2 * dp_id, 2 * dp_id + 1]
        assert r["check"] == r["mp"]  # every axis but dp
        assert r["pp"] == r["sharding"] == [rank]
        assert r["ids"] == (dp_id, mp_id, 0)
        assert r["src"] == (r["dp"][0], r["mp"][0])


@pytest.mark.parametrize("variant", ["distributed_scaler", "mp_group"])
def test_hybrid_distributed_scaler_makes_every_rank_agree(gloo_4, variant):
    runs = [result[variant] for result in gloo_4.results("hybrid")]
    assert all(run["ddp"] == "DistributedDataParallel" for run in runs)
    assert_same_on_every_rank([run["trajectory"] for run in runs])
    assert skipped(runs[0]["trajectory"]) == [2, 5]


def test_hybrid_without_distributed_scaler_only_dp_partners_agree(gloo_4):
    """The control: DDP carries an overflow to the dp partner, not to the mp partners."""
    runs = [result["none"] for result in gloo_4.results("hybrid")]
    # An inf on rank 3 at step 2 reaches rank 1 (its dp partner); on rank 0 at step 5, rank 2.
    assert [skipped(run["trajectory"]) for run in runs] == [[5], [2], [5], [2]]


@pytest.mark.parametrize("saved_on, resumed_on", [(2, 4), (4, 2)])
def test_sharded_checkpoint_resumes_on_another_world_size_bitwise(gloo_4, saved_on, resumed_on):
    """torch.distributed.checkpoint saves model, Paddle AdamW (DTensor moments, beta powers),
    scheduler and scaler on one world size; the run resumed on another continues as the run
    without the break, bit for bit: parameters, moments, beta powers, rate, scale and skips."""
    results = gloo_4.results("dcp_reshard")
    for rank in range(resumed_on):
        straight = results[rank][f"straight_{resumed_on}"]
        resumed = results[rank][f"resumed_{saved_on}_to_{resumed_on}"]
        if rank < saved_on:
            assert resumed["first"] + resumed["trajectory"] == straight["trajectory"]
        assert resumed["trajectory"] == straight["trajectory"][3:]
        assert skipped(straight["trajectory"]) == [3]
        for key in ("params", "moments"):
            assert all(torch.equal(p, q) for p, q in zip(resumed[key], straight[key], strict=True)), key
        assert resumed["pows"] == straight["pows"] and resumed["lr"] == straight["lr"]
        assert resumed["scaler"] == straight["scaler"] | {"scale": resumed["scaler"]["scale"]}
        assert torch.equal(resumed["scaler"]["scale"], straight["scaler"]["scale"])
    # The gradients are the same on any world size, and so is every update: 2 ranks = 4 ranks.
    two, four = results[0]["straight_2"], results[0]["straight_4"]
    assert all(torch.equal(p, q) for p, q in zip(two["params"], four["params"], strict=True))


@pytest.mark.parametrize("layout", ["dp2_mp2", "pp2_mp2", "sharding2_mp2", "dp2_mp2_dtensor"])
def test_hybrid_clip_takes_the_whole_models_norm_counting_replicas_once(gloo_4, layout):
    """fleet.distributed_optimizer installs Paddle's hybrid clip: the norm is the whole model's
    (split weights summed over mp, stages over pp, shards over sharding; the bias replicated on
    the mp ranks counted once), with Paddle's ``clip_norm / (max(norm, clip_norm) + 1e-6)``; and
    fleet.distributed_scaler makes an inf on one rank skip the step on all four."""
    for run in (result[layout] for result in gloo_4.results("hybrid_clip")):
        assert run["clip"] == "HybridParallelClipGrad"
        assert run["mesh"] == ("dp", "pp", "sharding", "sep", "mp")
        for seen in run["seen"]:
            torch.testing.assert_close(seen.double(), torch.full_like(seen, run["expected"], dtype=torch.float64),
                                       rtol=2e-7, atol=0)
        assert abs(run["bias_counted_mp_times"] / run["expected"] - 1) > 1e-3  # what counting it twice gives
        assert run["scaler_skipped"] == (True, True)  # distributed_scaler: rank 3's inf skips every rank


def test_the_large_model_recipe_runs_and_resumes_on_another_world_size(gloo_2, gloo_4):
    """docs/distributed.md's recipe: 4 steps on 2 ranks, then 4 more resumed on 4 ranks; its
    step-4 checkpoint loads into either world size as the same state, bit for bit."""
    two, four = gloo_2.results("recipe"), gloo_4.results("recipe")
    for run in two + four:
        assert len(run["losses"]) == 4 and all(math.isfinite(loss) for loss in run["losses"])
        assert run["units"] == 5  # one FSDP unit per block, and the root
        assert run["lr"] == four[0]["lr"] and run["lr"][0] == 4
        for key in ("params", "masters", "moments"):
            assert all(torch.equal(p, q) for p, q in zip(run[key], two[0][key], strict=True)), key
        assert all(p.dtype == torch.bfloat16 for p in run["params"])
        assert all(m.dtype == torch.float32 and torch.equal(m.to(torch.bfloat16), p)
                   for m, p in zip(run["masters"], run["params"], strict=True))
