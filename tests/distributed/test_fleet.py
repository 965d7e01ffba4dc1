"""In one process: the strategy, the topology, fleet with a one-rank group, argument checks,
and where the scaler's collective runs. The multi-process behaviour is in test_gloo.py."""

from __future__ import annotations

import copy
import datetime
import pickle
import re
import warnings

import pytest
import torch
import torch.distributed as dist

import paddle_compat as paddle
import paddle_compat.distributed as pdist
from paddle_compat.amp import GradScaler, unscale
from paddle_compat.distributed import fleet
from paddle_compat.distributed.fleet import CommunicateTopology, DistributedStrategy
from paddle_compat.distributed.sharding import group_sharded_parallel

LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def no_launcher(monkeypatch):
    for name in LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def one_rank(no_launcher):
    """fleet.init in a plain process: a one-rank gloo group, destroyed afterwards."""
    assert not dist.is_initialized()
    fleet.init(is_collective=True, backend="gloo", timeout=datetime.timedelta(seconds=10))
    yield
    dist.destroy_process_group()


def model_and_optimizer():
    model = torch.nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


# -- DistributedStrategy ---------------------------------------------------------------------


def test_strategy_has_paddles_defaults():
    s = DistributedStrategy()
    hybrid = s.hybrid_configs
    assert (hybrid["dp_degree"], hybrid["mp_degree"], hybrid["pp_degree"], hybrid["sharding_degree"]) == (-1, 1, 1, 1)
    assert s.hybrid_parallel_order == ["dp", "pp", "sharding", "sep", "cp", "mp"]
    assert (s.amp, s.find_unused_parameters, s.fuse_grad_size_in_MB) == (False, False, 32)
    assert s.amp_configs["init_loss_scaling"] == 32768.0 and s.amp_configs["decr_every_n_nan_or_inf"] == 2


def test_strategy_configs_update_the_keys_given_and_read_as_copies():
    s = DistributedStrategy()
    s.hybrid_configs = {"dp_degree": 2, "mp_degree": 2, "order": ["dp", "pp", "sharding", "sep", "mp"]}
    s.hybrid_configs = {"pp_degree": 1, "mp_configs": {"sync_param": True}}
    assert (s.hybrid_configs["dp_degree"], s.hybrid_configs["mp_degree"]) == (2, 2)
    assert s.hybrid_parallel_order == ["dp", "pp", "sharding", "sep", "mp"]
    s.hybrid_configs["dp_degree"] = 8  # a copy, as Paddle's
    assert s.hybrid_configs["dp_degree"] == 2
    assert copy.deepcopy(s).hybrid_configs == s.hybrid_configs


def test_strategy_refuses_unknown_names_and_wrong_types_with_paddles_texts():
    s = DistributedStrategy()
    with pytest.raises(ValueError, match=r"^key:foo_degree not in hybrid_configs$"):
        s.hybrid_configs = {"foo_degree": 2}
    with pytest.raises(TypeError, match=r"^nonexistent is not a attribute of DistributedStrategy$"):
        s.nonexistent = 3
    with pytest.raises(TypeError, match="amp should have value of bool type"):
        s.amp = 1
    with pytest.raises(TypeError, match=r"hybrid_configs\['mp_degree'\] must be an int"):
        s.hybrid_configs = {"mp_degree": 2.0}
    # a size: a finite number > 0 (NaN and inf were taken)
    for bad, exc, message in [(float("nan"), ValueError, "a finite number, but received nan"),
                              (float("inf"), ValueError, "a finite number, but received inf"),
                              (0, ValueError, "> 0, but received 0"),
                              ("32", TypeError, "a float or an int, but received str")]:
        with pytest.raises(exc, match=f"^fuse_grad_size_in_MB should be {re.escape(message)}$"):
            s.fuse_grad_size_in_MB = bad
    assert s.fuse_grad_size_in_MB == 32
    with pytest.raises(ValueError, match=r"hybrid_configs\['order'\]"):
        s.hybrid_configs = {"order": ["dp", "mp"]}
    assert s.hybrid_configs["mp_degree"] == 1  # nothing changed


def test_strategy_names_the_settings_without_effect():
    s = DistributedStrategy()
    s.recompute = True
    s.amp_configs = {"init_loss_scaling": 1024.0, "use_pure_fp16": True}
    s.find_unused_parameters = True  # honoured: not named
    assert s.unhonoured_settings() == ["recompute", "amp_configs['init_loss_scaling']", "amp_configs['use_pure_fp16']"]
    s.amp = True  # now use_pure_fp16 acts (distributed_model casts for O2)
    assert s.unhonoured_settings() == ["recompute", "amp_configs['init_loss_scaling']"]


# -- topology --------------------------------------------------------------------------------


def test_topology_lays_ranks_out_row_major():
    topo = CommunicateTopology(["data", "pipe", "sharding", "sep", "model"], [2, 1, 1, 1, 3])
    assert topo.world_size() == 6
    assert topo.get_comm_list("model") == [[0, 1, 2], [3, 4, 5]]
    assert topo.get_comm_list("data") == [[0, 3], [1, 4], [2, 5]]
    assert topo.get_comm_list("pipe") == [[r] for r in range(6)]
    assert topo.get_axis_list("data", 1) == [3, 4, 5]
    assert topo.get_coord(4).model == 1 and topo.get_rank(data=1, pipe=0, sharding=0, sep=0, model=1) == 4
    with pytest.raises(ValueError, match="unknown axis 'expert'"):
        topo.get_dim("expert")


# -- where the scaler's collective runs ------------------------------------------------------


@pytest.mark.parametrize(
    "flag, config, expected",
    [
        ("cpu", "cpu:gloo,cuda:gloo", "cpu"),
        ("cpu", "cpu:gloo,cuda:nccl", "cpu"),  # mixed backends: a CPU flag stays on gloo
        ("cuda:0", "cpu:gloo,cuda:nccl", "cuda:0"),
        ("cuda:1", "cpu:gloo", "cpu"),  # an accelerator flag under a CPU-only group
        ("cpu", "cuda:nccl", "cuda:3"),  # CPU-offloaded grads under NCCL: the current CUDA device
    ],
)
def test_flag_is_reduced_where_the_group_serves_it(monkeypatch, flag, config, expected):
    class Current:
        @staticmethod
        def current_device():
            return 3

    monkeypatch.setattr(torch, "get_device_module", lambda kind: Current)
    assert unscale._reduction_device(torch.device(flag), config) == torch.device(expected)


def test_a_group_serving_no_device_is_an_error():
    with pytest.raises(RuntimeError, match="serves no device"):
        unscale._reduction_device(torch.device("cpu"), "undefined")


# -- the environment and fleet in one process ------------------------------------------------


def test_helpers_read_torchruns_variables_before_init(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert (pdist.get_rank(), pdist.get_world_size(), fleet.worker_index(), fleet.worker_num()) == (3, 4, 3, 4)
    assert (fleet.is_first_worker(), fleet.local_rank()) == (False, 1)
    with pytest.raises(RuntimeError, match="not initialized"):
        pdist.get_rank(group=object())


def test_init_parallel_env_alone_does_nothing_as_paddle(no_launcher):
    with pytest.warns(UserWarning, match=r"`paddle.distributed.init_parallel_env` will not do anything"):
        assert pdist.init_parallel_env() is None
    assert not dist.is_initialized()
    with pytest.raises(TypeError, match="timeout must be a datetime.timedelta"):
        pdist.init_parallel_env(timeout=30)


def test_fleet_alone_runs_on_a_one_rank_group(one_rank):
    hcg = fleet.get_hybrid_communicate_group()
    assert dist.get_world_size() == 1 and hcg.get_parallel_mode() is None  # Paddle's answer for one rank
    assert hcg.get_data_parallel_group() is dist.group.WORLD
    assert hcg.get_check_parallel_group() is dist.group.WORLD
    model, opt = model_and_optimizer()
    assert fleet.distributed_model(model) is model
    assert fleet.distributed_optimizer(opt) is opt
    scaler = GradScaler()
    assert fleet.distributed_scaler(scaler) is scaler and scaler.process_group is None
    t = torch.tensor([2.0])
    pdist.all_reduce(t, op=pdist.ReduceOp.MAX)
    assert pdist.all_reduce(t, sync_op=False).wait()
    fleet.barrier_worker()


def test_scaler_reduces_over_an_explicit_group_in_one_process(one_rank):
    model, opt = model_and_optimizer()
    scaler = fleet.distributed_scaler(GradScaler(init_loss_scaling=8.0), group=dist.group.WORLD)
    assert scaler.process_group is dist.group.WORLD
    for bad in (False, True):
        x = torch.full((1, 4), float("inf") if bad else 1.0)
        scaler.scale(model(x).sum()).backward()
        scaler.minimize(opt, None)
        opt.zero_grad()
    assert scaler.get_scale() == 4.0 and scaler.get_skipped_steps() == 1
    copied = pickle.loads(pickle.dumps(scaler))  # the default group travels by name
    assert copied.process_group is dist.group.WORLD


def test_scaler_collective_failure_names_the_scaler(one_rank, monkeypatch):
    def broken(*args, **kwargs):
        raise dist.DistBackendError("Connection closed by peer")

    monkeypatch.setattr(dist, "all_reduce", broken)
    expected = r"^GradScaler: the all-reduce \(MAX\) of found_inf .*Connection closed by peer"
    with pytest.raises(RuntimeError, match=expected):
        unscale.all_reduce_max(torch.zeros(1), dist.group.WORLD)


def test_distributed_model_casts_for_o2_when_the_strategy_asks(no_launcher):
    strategy = DistributedStrategy()
    strategy.amp = True
    strategy.amp_configs = {"use_pure_fp16": True}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # honoured settings: no warning
        fleet.init(is_collective=True, strategy=strategy, backend="gloo")
    try:
        model = fleet.distributed_model(torch.nn.Linear(4, 2))
        assert model.weight.dtype == torch.float16
    finally:
        dist.destroy_process_group()
    with pytest.raises(RuntimeError, match="destroyed"):
        fleet.get_hybrid_communicate_group()


def test_fleet_init_checks_everything_before_creating_a_group(no_launcher):
    strategy = DistributedStrategy()
    strategy.hybrid_configs = {"mp_degree": 2}
    with pytest.raises(ValueError, match="multiply to 2 ranks, but there are 1"):
        fleet.init(is_collective=True, strategy=strategy)
    strategy = DistributedStrategy()
    strategy.hybrid_configs = {"cp_degree": 2}
    with pytest.raises(NotImplementedError, match="cp_degree"):
        fleet.init(is_collective=True, strategy=strategy)
    with pytest.raises(NotImplementedError, match="role_maker"):
        fleet.init(object())
    with pytest.raises(ValueError, match="`is_collective` should be instance of `bool`"):
        fleet.init(is_collective=1)
    with pytest.raises(TypeError, match="strategy must be a fleet.DistributedStrategy"):
        fleet.init(is_collective=True, strategy={})
    # torch would assert, naming nothing; logging would say "Unknown level"
    unknown = r"^backend 'carrier-pigeon' names no known backend \(gloo, .*\): \['carrier-pigeon'\]$"
    with pytest.raises(ValueError, match=unknown):
        fleet.init(is_collective=True, backend="carrier-pigeon")
    with pytest.raises(ValueError, match=r"^backend 'cpu:gloo,cuda:pigeon' names no known backend .*\['pigeon'\]$"):
        fleet.init(is_collective=True, backend="cpu:gloo,cuda:pigeon")
    with pytest.raises(ValueError, match="^log_level must be an int or a level name such as 'INFO', got 'LOUD'$"):
        fleet.init(is_collective=True, backend="gloo", log_level="LOUD")
    assert not dist.is_initialized()
    strategy = DistributedStrategy()
    strategy.recompute = True
    with pytest.warns(UserWarning, match="no effect in paddle_compat: recompute"):
        fleet.init(is_collective=True, strategy=strategy, backend="gloo")
    dist.destroy_process_group()
    assert not dist.is_initialized()


def test_group_sharded_parallel_checks_its_arguments(no_launcher):
    from paddle_compat.optimizer import AdamW

    model, opt = model_and_optimizer()
    with pytest.raises(ValueError, match="The level must be os, os_g or p_g_os"):
        group_sharded_parallel(model, opt, "stage2")
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        group_sharded_parallel(model, "sgd", "os")
    with pytest.raises(NotImplementedError, match="dp_group and exclude_layer"):
        group_sharded_parallel(model, opt, "os", dp_group=object())
    with pytest.raises(TypeError, match="^segment_size should be an int, but received float$"):
        group_sharded_parallel(model, opt, "os", segment_size=2.5)
    with pytest.raises(ValueError, match="^segment_size should be >= 1, but received 0$"):
        group_sharded_parallel(model, opt, "os", segment_size=0)
    with pytest.raises(TypeError, match="^offload should be a bool, but received str$"):
        group_sharded_parallel(model, opt, "os", offload="no")
    with pytest.raises(RuntimeError, match="needs a process group"):  # ours pass the optimizer check
        group_sharded_parallel(model, AdamW(parameters=model.parameters()), "os")
    decorated = paddle.amp.decorate(torch.nn.Linear(4, 2), level="O2", dtype="bfloat16", master_grad=True)
    with pytest.raises(NotImplementedError, match="master_grad=True"):
        group_sharded_parallel(decorated, AdamW(parameters=decorated.parameters()), "os")
    with pytest.raises(ValueError, match="not the model's"):
        group_sharded_parallel(model, torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1), "os")
    with pytest.raises(RuntimeError, match="needs a process group"):
        group_sharded_parallel(model, opt, "os")


def test_a_scaler_bound_to_another_group_refuses_to_pickle(one_rank):
    scaler = GradScaler(process_group=dist.new_group([0]))
    with pytest.raises(RuntimeError, match="process_group other than the default group cannot be pickled"):
        pickle.dumps(scaler)
    scaler.process_group = None
    assert pickle.loads(pickle.dumps(scaler)).process_group is None


def test_checkpoints_state_creation_step_changes_nothing(no_launcher):
    """torch.distributed.checkpoint's get_state_dict creates a fresh optimizer's state with a
    step at rate 0 on zero gradients; a scheduler's rate and weight decay must not move the
    parameters, nor the step advance Adam's beta powers."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    from paddle_compat import optimizer as popt

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    before = [p.detach().clone() for p in model.parameters()]
    opt = popt.AdamW(popt.lr.StepDecay(0.5, 2), parameters=model.parameters(), weight_decay=0.1)
    _, optim_sd = get_state_dict(model, opt)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    state = optim_sd["state"]["weight"]
    assert float(state["beta1_pow_acc"]) == pytest.approx(0.9) and not state["moment1"].any()
    assert opt.param_groups[0]["lr"] == 0.5  # the scheduler's rate is back


def test_a_users_first_step_at_rate_0_on_zero_gradients_is_a_step(no_launcher):
    """Only torch.distributed.checkpoint's state creation is told apart (by its caller): a warmup
    from rate 0 on zero gradients steps as in Paddle, and Adam's beta powers advance."""
    import torch.distributed.checkpoint.state_dict  # imported, as in a sharded run

    from paddle_compat import optimizer as popt

    model = torch.nn.Linear(4, 2)
    opt = popt.AdamW(popt.lr.LinearWarmup(0.5, 2, 0.0, 0.5), parameters=model.parameters(), weight_decay=0.1)
    model(torch.zeros(3, 4)).sum().mul(0).backward()
    opt.step()
    assert float(opt.state[model.weight]["beta1_pow_acc"]) == pytest.approx(0.81)


def test_checkpoints_set_state_dict_of_an_unsharded_model_loads_without_the_scheduler_entry(no_launcher):
    """torch.distributed.checkpoint keeps only "state" and "param_groups", sharded or not; a
    user's own load_state_dict still needs Paddle's "LR_Scheduler" entry."""
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    from paddle_compat import optimizer as popt

    def build():
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2)
        return model, popt.AdamW(popt.lr.StepDecay(0.5, 2), parameters=model.parameters(), weight_decay=0.1)

    model, opt = build()
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    model_state, optim_state = get_state_dict(model, opt)
    assert "LR_Scheduler" not in optim_state
    model2, opt2 = build()
    set_state_dict(model2, opt2, model_state_dict=model_state, optim_state_dict=optim_state)
    assert torch.equal(opt2.state[model2.weight]["moment1"], opt.state[model.weight]["moment1"])
    with pytest.raises(KeyError, match="LR_Scheduler state must be included"):
        opt2.load_state_dict({key: opt.state_dict()[key] for key in ("state", "param_groups")})


def test_a_whole_state_loaded_into_a_sharded_optimizer_is_sharded(one_rank):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from paddle_compat import optimizer as popt

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = popt.Momentum(0.1, parameters=model.parameters())
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    saved = opt.state_dict()
    fully_shard(model, mesh=init_device_mesh("cpu", (1,)))  # the CPU even where a GPU is present
    sharded = popt.Momentum(0.1, parameters=model.parameters())
    sharded.load_state_dict(saved)
    for p, whole in zip(model.parameters(), saved["state"].values()):
        velocity = sharded.state[p]["velocity"]
        assert isinstance(velocity, DTensor) and velocity.placements == p.placements
        assert torch.equal(velocity.full_tensor(), whole["velocity"])


def test_fleet_mesh_and_a_hybrid_clip_in_one_process(one_rank):
    import io

    from paddle_compat import optimizer as popt
    from paddle_compat.distributed.fleet.hybrid_parallel_optimizer import HybridParallelClipGrad
    from paddle_compat.nn import ClipGradByGlobalNorm

    hcg = fleet.get_hybrid_communicate_group()
    mesh = hcg.get_device_mesh()
    assert mesh.mesh_dim_names == ("dp", "pp", "sharding", "sep", "mp") and mesh.mesh.shape == (1, 1, 1, 1, 1)
    param = torch.nn.Parameter(torch.ones(3))
    clip = ClipGradByGlobalNorm(0.5)
    opt = popt.SGD(0.1, parameters=[param], grad_clip=clip)
    assert fleet.distributed_optimizer(opt)._grad_clip is clip  # one process: left alone, as Paddle
    with pytest.raises(TypeError, match="clip should be a ClipGradByGlobalNorm"):
        HybridParallelClipGrad(0.5, hcg)
    opt._grad_clip = HybridParallelClipGrad(clip, hcg)
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    buffer.seek(0)
    again = popt.SGD(0.1, parameters=[param])
    again.set_state_dict(torch.load(buffer, weights_only=True))
    loaded = again.param_groups[0]["grad_clip"]
    assert type(loaded) is HybridParallelClipGrad and loaded.clip_norm == 0.5 and loaded._hcg is hcg
    param.grad = torch.full((3,), 2.0)  # norm sqrt(12): scaled by 0.5 / (sqrt(12) + 1e-6)
    again.step()
    expected = 1 - 0.1 * 2.0 * (0.5 / (12**0.5 + 1e-6))
    torch.testing.assert_close(param.detach(), torch.full((3,), expected), rtol=1e-6, atol=0)


def test_a_sharded_step_keeps_its_plan_and_shows_the_real_state_after(one_rank):
    """On a one-rank mesh: DTensor parameters step as plain ones, bit for bit; the optimizer's
    state is its own between steps (DTensors), and the kernels' plan is kept from step to step
    while nothing changes, made again after load_state_dict."""
    from collections import defaultdict

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    from paddle_compat import optimizer as popt

    torch.manual_seed(0)
    model, plain = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    plain.load_state_dict(model.state_dict())
    fully_shard(model, mesh=init_device_mesh("cpu", (1,)))  # the CPU even where a GPU is present
    opt = popt.AdamW(0.01, parameters=model.parameters(), weight_decay=0.1)
    ref = popt.AdamW(0.01, parameters=plain.parameters(), weight_decay=0.1)
    plans = []
    for step in range(3):
        grads = [torch.randn(p.shape, generator=torch.Generator().manual_seed(step)) for p in plain.parameters()]
        for p, q, g in zip(model.parameters(), plain.parameters(), grads):
            p.grad, q.grad = DTensor.from_local(g.clone(), p.device_mesh, p.placements), g.clone()
        opt.step()
        ref.step()
        plans.append(opt._compat_engine._plans[id(opt.param_groups[0])])
        assert type(opt.state) is defaultdict
        if step == 1:
            opt.load_state_dict(opt.state_dict())
    assert plans[0] is not None and plans[1] is plans[0] and plans[2] is not plans[1]
    for p, q in zip(model.parameters(), plain.parameters()):
        assert torch.equal(p.full_tensor(), q.detach())
        assert isinstance(opt.state[p]["moment1"], DTensor)
        assert torch.equal(opt.state[p]["moment2"].full_tensor(), ref.state[q]["moment2"])


def test_clips_on_dtensor_gradients(one_rank):
    """On a one-rank mesh a DTensor is its whole tensor: every clip gives the plain tensor's
    result; a Partial gradient (addends, not slices) is refused, naming it, before any change."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Partial, Shard

    from paddle_compat.nn import ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue

    mesh = DeviceMesh.from_group(dist.group.WORLD, "cpu")
    grads = [torch.randn(5, 3, generator=torch.Generator().manual_seed(i)) * 4 for i in range(2)]
    params = [torch.nn.Parameter(torch.zeros(5, 3)) for _ in grads]
    for clip in (ClipGradByGlobalNorm(1.0), ClipGradByNorm(1.0), ClipGradByValue(0.5)):
        plain = clip([(p, g.clone()) for p, g in zip(params, grads)])
        sharded = clip([(p, DTensor.from_local(g.clone(), mesh, [Shard(0)])) for p, g in zip(params, grads)])
        for (_, a), (_, b) in zip(plain, sharded):
            assert isinstance(b, DTensor) and torch.equal(b.full_tensor(), a), type(clip).__name__
    partial = DTensor.from_local(grads[0].clone(), mesh, [Partial()])
    for clip in (ClipGradByGlobalNorm(1.0), ClipGradByNorm(1.0)):
        with pytest.raises(ValueError, match="is a DTensor with a Partial placement"):
            clip([(params[0], partial)])
    assert torch.equal(partial.to_local(), grads[0])


@pytest.mark.parametrize(
    ("name", "ask", "says"),
    [
        ("_init_optim_state", "creating_state", "Adam's beta powers advance"),
        ("_load_optim_state_dict", "loading_state", "'LR_Scheduler' entry"),
    ],
)
def test_a_torch_without_the_checkpoint_calls_we_recognise_is_told_once(no_launcher, monkeypatch, name, ask, says):
    """The calls torch.distributed.checkpoint is recognised by are private to torch: this torch has
    them (the tests above depend on it), and a release that renames one gets a warning, once."""
    import torch.distributed.checkpoint.state_dict as dcp_state_dict

    from paddle_compat.optimizer import _dcp

    assert callable(getattr(dcp_state_dict, name))
    monkeypatch.delattr(dcp_state_dict, name)
    monkeypatch.setattr(_dcp, "_warned", set())
    with pytest.warns(RuntimeWarning, match=f"has no {name}.*{re.escape(says)}") as record:
        assert getattr(_dcp, ask)() is False
    assert record[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert getattr(_dcp, ask)() is False
