"""One rank of the distributed tests: ``python -m tests.distributed.worker OUT DEVICE INIT SCENARIO...``.

Started by ``launcher.launch`` (torchrun's environment variables). ``INIT`` is ``parallel_env``
(``paddle_compat.distributed.init_parallel_env``) or ``fleet:DP,MP`` (``fleet.init`` with those
hybrid degrees). Each scenario runs on every rank in turn and leaves ``OUT/NAME.RANK.pt``: what
the rank saw, for the tests to compare. A scenario that raises records its traceback instead;
``rank_raises`` is meant to end the run.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import paddle_compat.distributed as pdist
from paddle_compat.amp import GradScaler
from paddle_compat.amp.amp_state import amp_global_state
from paddle_compat.distributed import fleet

TIMEOUT = datetime.timedelta(seconds=30)  # any collective that waits longer fails the run
BAD = {2: 1, 5: 0}  # step -> the one rank whose input holds an inf
STEPS = 8
SCENARIOS: dict[str, Callable[[Context], Any]] = {}


class Context:
    def __init__(self, out: Path, device: torch.device) -> None:
        self.out, self.device = out, device
        self.rank, self.world = dist.get_rank(), dist.get_world_size()


def scenario(fn: Callable[[Context], Any]) -> Callable[[Context], Any]:
    SCENARIOS[fn.__name__] = fn
    return fn


# -- helpers ---------------------------------------------------------------------------------


def cpu_or_device_mesh(ctx: Context) -> Any:
    """All ranks as a mesh on the scenario's device (``fully_shard``'s default mesh is on CUDA
    wherever a GPU is present, also for a gloo group of CPU ranks)."""
    from torch.distributed.device_mesh import DeviceMesh

    return DeviceMesh.from_group(dist.group.WORLD, ctx.device.type)


def make_model(seed: int, device: torch.device) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4)).to(device)


def batch(step: int, rank: int, device: torch.device, bad: dict[int, int] = BAD) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    x, y = torch.randn(4, 8, generator=g), torch.randn(4, 4, generator=g)
    if bad.get(step) == rank:
        x[0, 0] = float("inf")
    return x.to(device), y.to(device)


def whole_batch(step: int, world: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """What every rank's batch adds up to, for the single-process reference."""
    xs, ys = zip(*(batch(step, r, device) for r in range(world)))
    return torch.cat(xs), torch.cat(ys)


def new_scaler(**kwargs: Any) -> GradScaler:
    return GradScaler(init_loss_scaling=2.0**10, incr_every_n_steps=2, **kwargs)


def train(
    model: nn.Module, opt: torch.optim.Optimizer, scaler: GradScaler, batches: list, api: str = "minimize"
) -> list:
    """One scaler-driven step per batch; returns (scale, skipped) after each step."""
    trajectory = []
    for x, y in batches:
        loss = (model(x) - y).pow(2).mean()
        scaled = scaler.scale(loss)
        scaled.backward()
        if api == "minimize":
            scaler.minimize(opt, scaled)
        elif api == "step":
            scaler.step(opt)
            scaler.update()
        elif api == "unscale_clip":
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 1.0)
            scaler.step(opt)
            scaler.update()
        opt.zero_grad()
        trajectory.append((scaler.get_scale(), bool(scaler.last_step_skipped())))
    return trajectory


def full_params(model: nn.Module) -> list[torch.Tensor]:
    """The parameters as full CPU tensors (DTensors gathered)."""
    out = []
    for p in model.parameters():
        p = p.detach()
        if hasattr(p, "full_tensor"):
            p = p.full_tensor()
        out.append(p.cpu().clone())
    return out


def reference(ctx: Context, make_opt: Callable, seed: int = 0, steps: int = STEPS) -> dict[str, Any]:
    """One process, the whole batch of every rank: what data parallelism must reproduce."""
    model = make_model(seed, ctx.device)
    opt = make_opt(model.parameters())
    trajectory = train(model, opt, new_scaler(), [whole_batch(s, ctx.world, ctx.device) for s in range(steps)])
    return {"trajectory": trajectory, "params": full_params(model)}


def sgd(params: Any) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def fused_adamw(params: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=0.01, fused=True)


def ddp(model: nn.Module, ctx: Context, **kwargs: Any) -> nn.Module:
    ids = [ctx.device] if ctx.device.type == "cuda" else None
    return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids, **kwargs)


# -- scenarios -------------------------------------------------------------------------------


@scenario
def ddp_needs_nothing(ctx: Context) -> dict[str, Any]:
    """DDP all-reduces the grads in backward: a scaler without process_group agrees."""
    result = {}
    for name, make_opt in (("sgd", sgd), ("fused_adamw", fused_adamw)):
        model = ddp(make_model(0, ctx.device), ctx)
        opt = make_opt(model.parameters())
        trajectory = train(model, opt, new_scaler(), [batch(s, ctx.rank, ctx.device) for s in range(STEPS)])
        result[name] = {"trajectory": trajectory, "params": full_params(model), "reference": reference(ctx, make_opt)}
    return result


@scenario
def explicit_group(ctx: Context) -> dict[str, Any]:
    """No DDP, a different model on each rank (as tensor/pipeline shards are): only the
    scaler's collective makes the ranks agree. ``none`` is the control without it."""
    world = dist.group.WORLD
    variants = {
        "minimize": (sgd, "minimize", world),
        "step": (sgd, "step", world),
        "unscale_clip": (sgd, "unscale_clip", world),
        "fused_adamw": (fused_adamw, "step", world),
        "none": (sgd, "minimize", None),
    }
    batches = [batch(s, ctx.rank, ctx.device) for s in range(STEPS)]
    result = {}
    for name, (make_opt, api, group) in variants.items():
        model = make_model(ctx.rank, ctx.device)
        result[name] = train(model, make_opt(model.parameters()), new_scaler(process_group=group), batches, api)
    model = make_model(ctx.rank, ctx.device)
    scaler = fleet.distributed_scaler(new_scaler(), group=world)
    result["distributed_scaler_group"] = train(model, sgd(model.parameters()), scaler, batches)
    return result


@scenario
def fsdp2(ctx: Context) -> dict[str, Any]:
    """FSDP2's DTensor grads reduce the flag themselves; group_sharded_parallel on top of it."""
    from torch.distributed.fsdp import fully_shard

    from paddle_compat.distributed.sharding import group_sharded_parallel

    result = {}
    batches = [batch(s, ctx.rank, ctx.device) for s in range(STEPS)]
    for name, make_opt in (("fully_shard_sgd", sgd), ("fully_shard_fused_adamw", fused_adamw)):
        model = make_model(0, ctx.device)
        fully_shard(model, mesh=cpu_or_device_mesh(ctx))
        opt = make_opt(model.parameters())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trajectory = train(model, opt, new_scaler(), batches)
        result[name] = {
            "trajectory": trajectory,
            "params": full_params(model),
            "reference": reference(ctx, make_opt),
            "warnings": [str(w.message) for w in caught],
        }
    sgd_reference = result["fully_shard_sgd"]["reference"]
    for level in ("os", "os_g", "p_g_os"):
        model = make_model(ctx.rank, ctx.device)  # different on each rank: rank 0's is broadcast
        opt = sgd(model.parameters())
        model, opt, scaler = group_sharded_parallel(model, opt, level, scaler=new_scaler(), segment_size=100)
        units = sum(1 for m in model.modules() if type(m).__name__.startswith("FSDP"))
        trajectory = train(model, opt, scaler, batches)
        result[level] = {
            "trajectory": trajectory, "params": full_params(model), "reference": sgd_reference, "units": units
        }
    return result


def inject_inf(model: nn.Module, step: int, rank: int, bad: dict[int, int] = BAD) -> None:
    """An inf in this rank's own shard of the first gradient only: no other rank holds it."""
    if bad.get(step) == rank:
        grad = next(iter(model.parameters())).grad
        getattr(grad, "_local_tensor", grad).view(-1)[0] = float("inf")


def sharded_paddle_run(ctx: Context, model: nn.Module, opt: Any, scaler: GradScaler, steps: int = STEPS) -> dict:
    """Train a sharded model with a Paddle optimizer and the scaler (an inf injected into one
    rank's shard at the steps of BAD); record each step's whole scaled gradients, for
    ``replay``, and what the scaler decided."""
    grads, trajectory, norms = [], [], []
    dtype = next(model.parameters()).dtype
    for step in range(steps):
        x, y = (t.to(dtype) for t in batch(step, ctx.rank, ctx.device, bad={}))
        scaled = scaler.scale((model(x) - y).pow(2).mean())
        scaled.backward()
        inject_inf(model, step, ctx.rank)
        grads.append([p.grad.full_tensor() for p in model.parameters()])
        if step == 0:  # the global norm of the shards against one process's (no inf at step 0)
            from paddle_compat.nn import ClipGradByGlobalNorm

            clip = ClipGradByGlobalNorm(1.0)
            local = sum(float(p.grad._local_tensor.double().pow(2).sum()) for p in model.parameters())
            norms = [clip.global_norm([p.grad for p in model.parameters()]), clip.global_norm(grads[0]), local**0.5]
        scaler.minimize(opt, scaled)
        opt.clear_grad()
        trajectory.append((scaler.get_scale(), bool(scaler._cache_found_inf)))
    return {"grads": grads, "trajectory": trajectory, "params": full_params(model), "norms": norms}


def replay(model: nn.Module, opt: Any, scaler: GradScaler, grads: list) -> dict:
    """One process: the same steps on whole tensors, from the recorded gradients."""
    trajectory = []
    for step_grads in grads:
        for p, g in zip(model.parameters(), step_grads, strict=True):
            p.grad = g.clone()
        scaler.minimize(opt, torch.ones(()))
        opt.clear_grad()
        trajectory.append((scaler.get_scale(), bool(scaler._cache_found_inf)))
    return {"trajectory": trajectory, "params": full_params(model)}


def state_layout(opt: Any) -> list:
    """(key, kind, placements) of every state tensor: DTensors placed as their parameter?"""
    out = set()
    for group in opt.param_groups:
        for p in group["params"]:
            for key, value in opt.state[p].items():
                placed = getattr(value, "placements", None)
                out.add((key, type(value).__name__, placed == p.placements if placed is not None else None))
    return sorted(out)


def _paddle_optimizers() -> dict[str, Callable[[Any], Any]]:
    from paddle_compat import optimizer as popt
    from paddle_compat.nn import ClipGradByGlobalNorm

    return {
        "sgd": lambda ps: popt.SGD(0.1, parameters=ps, weight_decay=0.01),
        "momentum": lambda ps: popt.Momentum(0.1, momentum=0.9, parameters=ps, use_nesterov=True, weight_decay=0.01),
        "adam": lambda ps: popt.Adam(0.01, parameters=ps),
        "adamw": lambda ps: popt.AdamW(
            popt.lr.LinearWarmup(popt.lr.CosineAnnealingDecay(0.02, T_max=8), 3, 0.0, 0.02),
            parameters=ps, weight_decay=0.1,
        ),
        "adamw_bf16_master": lambda ps: popt.AdamW(0.01, parameters=ps, multi_precision=True),
        "adamw_clip": lambda ps: popt.AdamW(0.01, parameters=ps, grad_clip=ClipGradByGlobalNorm(0.05)),
        "rmsprop": lambda ps: popt.RMSProp(0.01, parameters=ps, momentum=0.5, centered=True),
        "adagrad": lambda ps: popt.Adagrad(0.1, parameters=ps),
        "adamax": lambda ps: popt.Adamax(0.01, parameters=ps),
        "adadelta": lambda ps: popt.Adadelta(1.0, parameters=ps),
        "nadam": lambda ps: popt.NAdam(0.01, parameters=ps),
        "radam": lambda ps: popt.RAdam(0.01, parameters=ps),
        "rprop": lambda ps: popt.Rprop(0.01, parameters=ps),
        "adagrad_param_attr": lambda ps: popt.Adagrad(0.1, parameters=_first_at_ratio(list(ps), 0.3)),
    }


def _first_at_ratio(params: list, ratio: float) -> list:
    """The parameters, the first with Paddle's per-parameter rate (``ParamAttr(learning_rate=ratio)``)."""
    params[0].optimize_attr = {"learning_rate": ratio}
    return params


@scenario
def paddle_optimizers_fsdp2(ctx: Context) -> dict[str, Any]:
    """Paddle's optimizers stepping FSDP2 shards (fully_shard, group_sharded_parallel), against
    one process replaying the same whole gradients; also through the torch forms (no compiled
    kernels)."""
    from torch.distributed.fsdp import fully_shard

    from paddle_compat import _native
    from paddle_compat.distributed.sharding import group_sharded_parallel

    def uneven_model(seed: int, device: torch.device) -> nn.Module:
        """Shards of 2 and 1 rows, and of 1 and 0 (rank 1's shards of the middle layer are empty)."""
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(8, 3), nn.Tanh(), nn.Linear(3, 1), nn.Linear(1, 4)).to(device)

    makers = _paddle_optimizers()
    cases = [(name, name, "fully_shard", True, make_model) for name in makers]
    cases += [("adamw_torch_forms", "adamw", "fully_shard", False, make_model)]
    cases += [(f"adamw_{level}", "adamw", level, True, make_model) for level in ("os", "os_g", "p_g_os")]
    cases += [("momentum_uneven", "momentum", "fully_shard", True, uneven_model)]
    cases += [("adamw_uneven", "adamw", "fully_shard", True, uneven_model)]
    cases += [("adamw_uneven_torch_forms", "adamw", "fully_shard", False, uneven_model)]
    result = {}
    for case, name, how, native, build in cases:
        saved_native, _native._enabled = _native._enabled, native
        try:
            dtype = torch.bfloat16 if "bf16" in name else torch.float32
            model = build(ctx.rank if how != "fully_shard" else 0, ctx.device).to(dtype)
            if how == "fully_shard":
                fully_shard(model, mesh=cpu_or_device_mesh(ctx))
                opt, scaler = makers[name](model.parameters()), new_scaler()
            else:  # every rank starts elsewhere: rank 0's parameters are broadcast
                opt = makers[name](model.parameters())
                model, opt, scaler = group_sharded_parallel(model, opt, how, scaler=new_scaler(), segment_size=100)
            start = full_params(model)
            run = sharded_paddle_run(ctx, model, opt, scaler)
            reference = build(0, ctx.device).to(dtype)
            with torch.no_grad():
                for p, value in zip(reference.parameters(), start):
                    p.copy_(value)
            run["reference"] = replay(reference, makers[name](reference.parameters()), new_scaler(), run.pop("grads"))
            run["layout"] = state_layout(opt)
            result[case] = run
        finally:
            _native._enabled = saved_native
    # Lamb's trust ratio needs whole norms and ASGD's history is not sharded: refused, nothing moved
    from paddle_compat import optimizer as popt

    refused = {}
    for name, make in (("lamb", popt.Lamb), ("asgd", popt.ASGD)):
        model = make_model(0, ctx.device)
        fully_shard(model, mesh=cpu_or_device_mesh(ctx))
        opt = make(0.01, parameters=model.parameters())
        before = full_params(model)
        (model(batch(0, ctx.rank, ctx.device, {})[0]).sum()).backward()
        try:
            opt.step()
        except TypeError as error:
            refused[name] = (str(error), all(torch.equal(a, b) for a, b in zip(before, full_params(model))))
    result["refused"] = refused
    return result


@scenario
def checkpoint(ctx: Context) -> dict[str, Any]:
    """Save on rank 0 half-way, resume on every rank: the same run as without the break."""
    from paddle_compat.distributed.sharding import group_sharded_parallel, save_group_sharded_model

    half = STEPS // 2
    batches = [batch(s, ctx.rank, ctx.device) for s in range(STEPS)]
    result: dict[str, Any] = {}

    model = ddp(make_model(0, ctx.device), ctx)
    opt, scaler = sgd(model.parameters()), new_scaler()
    result["ddp_straight"] = {"trajectory": train(model, opt, scaler, batches), "params": full_params(model)}

    model = ddp(make_model(0, ctx.device), ctx)
    opt, scaler = sgd(model.parameters()), new_scaler()
    first = train(model, opt, scaler, batches[:half])
    path = ctx.out / "ddp_ckpt.pt"
    if ctx.rank == 0:
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "scaler": scaler.state_dict()}, path)
    dist.barrier()
    state = torch.load(path, weights_only=True)
    model = ddp(make_model(99, ctx.device), ctx)  # another init: the checkpoint must replace it
    model.module.load_state_dict(state["model"])
    opt, scaler = sgd(model.parameters()), new_scaler()
    opt.load_state_dict(state["opt"])
    scaler.load_state_dict(state["scaler"])
    resumed = first + train(model, opt, scaler, batches[half:])
    result["ddp_resumed"] = {"trajectory": resumed, "params": full_params(model)}

    def adam(params: Any) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=0.01)

    def paddle_adamw(params: Any) -> Any:  # its scheduler is stepped half-way, and must travel
        from paddle_compat import optimizer as popt

        return popt.AdamW(popt.lr.StepDecay(0.01, step_size=1, gamma=0.5), parameters=params, weight_decay=0.1)

    def half_way(opt: Any) -> None:
        scheduler = getattr(opt, "_compat_lr_scheduler", None)
        if scheduler is not None:
            scheduler.step()

    for kind, make_opt in (("sharded", adam), ("sharded_paddle", paddle_adamw)):
        plain = make_model(0, ctx.device)
        model, opt, scaler = group_sharded_parallel(plain, make_opt(plain.parameters()), "os_g", scaler=new_scaler())
        first = train(model, opt, scaler, batches[:half])
        half_way(opt)
        second = train(model, opt, scaler, batches[half:])
        result[f"{kind}_straight"] = {"trajectory": first + second, "params": full_params(model)}

        plain = make_model(0, ctx.device)
        model, opt, scaler = group_sharded_parallel(plain, make_opt(plain.parameters()), "os_g", scaler=new_scaler())
        first = train(model, opt, scaler, batches[:half])
        half_way(opt)
        folder = ctx.out / f"{kind}_ckpt"
        save_group_sharded_model(model, str(folder), opt)
        if ctx.rank == 0:
            torch.save(scaler.state_dict(), folder / "scaler.pt")
        dist.barrier()
        plain = make_model(99, ctx.device)
        plain.load_state_dict(torch.load(folder / "model.pdmodel", weights_only=True))
        opt = make_opt(plain.parameters())
        opt.load_state_dict(torch.load(folder / "model.pdopt", weights_only=True))
        scaler = new_scaler()
        scaler.load_state_dict(torch.load(folder / "scaler.pt", weights_only=True))
        model, opt, scaler = group_sharded_parallel(plain, opt, "os_g", scaler=scaler)
        second = train(model, opt, scaler, batches[half:])
        result[f"{kind}_resumed"] = {"trajectory": first + second, "params": full_params(model)}
    return result


@scenario
def dcp_reshard(ctx: Context) -> dict[str, Any]:
    """Four ranks. A sharded run (Paddle's AdamW with a scheduler and a clip, a scaler)
    checkpointed with torch.distributed.checkpoint half-way, on 2 ranks and resumed on 4, and the
    other way round, against the same run without the break. The gradients are set, whole and
    the same whatever the world size (one rank's shard gets an inf at step 3), so the runs on
    2 and on 4 ranks must also agree with each other, bit for bit."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import distribute_tensor

    from paddle_compat import optimizer as popt
    from paddle_compat.nn import ClipGradByGlobalNorm

    pair = dist.new_group([0, 1])
    groups = {2: pair, 4: dist.group.WORLD}
    steps, half = 6, 3

    def build(world: int) -> tuple:
        model = make_model(0, ctx.device)
        fully_shard(model, mesh=DeviceMesh.from_group(groups[world], ctx.device.type))
        sched = popt.lr.LinearWarmup(popt.lr.CosineAnnealingDecay(0.02, T_max=8), 2, 0.0, 0.02)
        clip = ClipGradByGlobalNorm(1e30)  # takes part, never engages: its factor is exactly 1
        opt = popt.AdamW(sched, parameters=model.parameters(), weight_decay=0.1, grad_clip=clip)
        return model, opt, sched, new_scaler()

    def train_steps(run: tuple, first: int, last: int) -> list:
        model, opt, sched, scaler = run
        trajectory = []
        for step in range(first, last):
            g = torch.Generator().manual_seed(500 + step)
            for p in model.parameters():
                whole = torch.randn(p.shape, generator=g) * scaler.get_scale()
                p.grad = distribute_tensor(whole, p.device_mesh, p.placements, src_data_rank=None)
            inject_inf(model, step, dist.get_rank(), {3: 1})
            scaler.minimize(opt, torch.ones(()))
            if not scaler._cache_found_inf:
                sched.step()
            opt.clear_grad()
            trajectory.append((scaler.get_scale(), bool(scaler._cache_found_inf)))
        return trajectory

    def state(run: tuple) -> dict[str, Any]:
        model, opt, sched, scaler = run
        model_sd, optim_sd = get_state_dict(model, opt)
        return {"model": model_sd, "optim": optim_sd, "lr": sched, "scaler": scaler}

    def save(run: tuple, path: Path, world: int) -> None:
        dcp.save(state(run), checkpoint_id=path, process_group=groups[world])

    def load(run: tuple, path: Path, world: int) -> None:
        loaded = state(run)
        dcp.load(loaded, checkpoint_id=path, process_group=groups[world])
        set_state_dict(run[0], run[1], model_state_dict=loaded["model"], optim_state_dict=loaded["optim"])

    def summary(run: tuple, trajectory: list) -> dict[str, Any]:
        model, opt, sched, scaler = run
        moments = [opt.state[p][k].full_tensor() for p in model.parameters() for k in ("moment1", "moment2")]
        pows = [float(opt.state[p][k]) for p in model.parameters() for k in ("beta1_pow_acc", "beta2_pow_acc")]
        return {
            "trajectory": trajectory, "params": full_params(model), "moments": moments, "pows": pows,
            "lr": (sched.last_epoch, sched()), "scaler": scaler.state_dict(),
        }

    result: dict[str, Any] = {}
    for saved_on, resumed_on in ((2, 4), (4, 2)):
        path = ctx.out / f"dcp_{saved_on}_to_{resumed_on}"
        if ctx.rank < saved_on:
            run = build(saved_on)
            result[f"straight_{saved_on}"] = summary(run, train_steps(run, 0, steps))
            run = build(saved_on)
            first = train_steps(run, 0, half)
            save(run, path, saved_on)
        dist.barrier()
        if ctx.rank < resumed_on:
            run = build(resumed_on)
            load(run, path, resumed_on)
            result[f"resumed_{saved_on}_to_{resumed_on}"] = summary(run, train_steps(run, half, steps))
            result[f"resumed_{saved_on}_to_{resumed_on}"]["first"] = first if ctx.rank < saved_on else None
        dist.barrier()
    return result


@scenario
def paddle_script(ctx: Context) -> dict[str, Any]:
    """The Paddle-style script, run as it is (its fleet.init finds the group already there)."""
    from . import paddle_style_train

    return paddle_style_train.main(bad_rank=1, bad_step=3)


@scenario
def hybrid(ctx: Context) -> dict[str, Any]:
    """Four ranks, dp=2 x mp=2 (fleet.init from the environment): the groups, and training
    where DDP syncs each dp pair and only distributed_scaler syncs the mp partners."""
    hcg = fleet.get_hybrid_communicate_group()
    ranks = dist.get_process_group_ranks
    result: dict[str, Any] = {
        "mode": hcg.get_parallel_mode(),
        "dp": ranks(hcg.get_data_parallel_group()),
        "mp": ranks(hcg.get_model_parallel_group()),
        "pp": ranks(hcg.get_pipe_parallel_group()),
        "sharding": ranks(hcg.get_sharding_parallel_group()),
        "check": ranks(hcg.get_check_parallel_group()),
        "ids": (hcg.get_data_parallel_rank(), hcg.get_model_parallel_rank(), hcg.get_stage_id()),
        "src": (hcg.get_data_parallel_group_src_rank(), hcg.get_model_parallel_group_src_rank()),
    }
    mp_rank = hcg.get_model_parallel_rank()
    bad = {2: 3, 5: 0}  # one rank each time; its dp partner sees it through DDP
    for name in ("distributed_scaler", "mp_group", "none"):
        model = fleet.distributed_model(make_model(mp_rank, ctx.device))  # an mp shard, shared by the dp pair
        opt = fleet.distributed_optimizer(sgd(model.parameters()))
        scaler = new_scaler()
        if name == "distributed_scaler":
            scaler = fleet.distributed_scaler(scaler)
        elif name == "mp_group":
            scaler = fleet.distributed_scaler(scaler, group=hcg.get_model_parallel_group())
        batches = [batch(s, ctx.rank, ctx.device, bad) for s in range(STEPS)]
        result[name] = {"trajectory": train(model, opt, scaler, batches), "ddp": type(model).__name__}
    return result


@scenario
def hybrid_clip(ctx: Context) -> dict[str, Any]:
    """Four ranks, three layouts (dp2 x mp2, pp2 x mp2, sharding2 x mp2, fleet.init again for
    each): a global-norm clip through fleet.distributed_optimizer, on a model whose every stage
    holds a weight split over the mp ranks (is_distributed) and a bias replicated on them; with
    sharding both are also DTensors sharded over the sharding group. SGD at rate 1 from zero
    weights leaves each weight at minus its clipped gradient."""
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    from paddle_compat import optimizer as popt
    from paddle_compat.nn import ClipGradByGlobalNorm

    layouts = {
        "dp2_mp2": {"dp_degree": 2, "mp_degree": 2},
        "pp2_mp2": {"pp_degree": 2, "mp_degree": 2},
        "sharding2_mp2": {"sharding_degree": 2, "mp_degree": 2},
        "dp2_mp2_dtensor": {"dp_degree": 2, "mp_degree": 2},  # torch's tensor parallelism: DTensors on mesh["mp"]
    }
    result: dict[str, Any] = {}
    for name, degrees in layouts.items():
        strategy = fleet.DistributedStrategy()
        strategy.hybrid_configs = {"dp_degree": 1, "mp_degree": 1, "pp_degree": 1, "sharding_degree": 1, **degrees}
        # gloo as the launch's (fleet.init's default on a GPU machine adds NCCL, one GPU per rank)
        backend = "gloo" if ctx.device.type == "cpu" else None
        fleet.init(is_collective=True, strategy=strategy, backend=backend, timeout=TIMEOUT)
        hcg = fleet.get_hybrid_communicate_group()
        mp_rank, mp_size = hcg.get_model_parallel_rank(), hcg.get_model_parallel_world_size()
        g = torch.Generator().manual_seed(7)
        whole = [(torch.randn(8, 6, generator=g) * 3, torch.randn(6, generator=g) * 3) for _ in range(2)]
        stages = whole[: hcg.get_pipe_parallel_world_size()]
        grad_w, grad_b = stages[hcg.get_stage_id()][0].chunk(mp_size)[mp_rank], stages[hcg.get_stage_id()][1]
        w, b = torch.zeros_like(grad_w), torch.zeros_like(grad_b)
        if hcg.get_sharding_parallel_world_size() > 1:
            mesh = hcg.get_device_mesh()["sharding"]
            w, b, grad_w, grad_b = (
                distribute_tensor(t, mesh, [Shard(0)], src_data_rank=None) for t in (w, b, grad_w, grad_b)
            )
        if name.endswith("dtensor"):
            mesh = hcg.get_device_mesh()["mp"]
            w, grad_w = (DTensor.from_local(t, mesh, [Shard(0)], run_check=False) for t in (w, grad_w))
            b, grad_b = (DTensor.from_local(t, mesh, [Replicate()], run_check=False) for t in (b, grad_b))
        w, b = nn.Parameter(w), nn.Parameter(b)
        if not name.endswith("dtensor"):
            w.is_distributed = True  # as Paddle's model-parallel layers mark their split weights
        opt = fleet.distributed_optimizer(popt.SGD(1.0, parameters=[w, b], grad_clip=ClipGradByGlobalNorm(1.0)))
        w.grad, b.grad = grad_w.clone(), grad_b.clone()
        opt.step()
        seen = [(-p.detach() / grad).full_tensor() if hasattr(p, "full_tensor") else -p.detach() / grad
                for p, grad in ((w, grad_w), (b, grad_b))]
        # and distributed_scaler: an inf in rank 3's gradient alone is skipped on every rank
        scaler = fleet.distributed_scaler(new_scaler())
        before = [p.detach().clone() for p in (w, b)]
        w.grad, b.grad = grad_w.clone(), grad_b.clone()
        if ctx.rank == 3:
            getattr(w.grad, "_local_tensor", w.grad).view(-1)[0] = float("inf")
        scaler.minimize(opt, torch.ones(()))
        skipped_step = (bool(scaler._cache_found_inf), all(torch.equal(p, q) for p, q in zip((w, b), before)))
        squares = sum(float(t.double().pow(2).sum()) for stage in stages for t in stage)
        replicated = sum(float(stage[1].double().pow(2).sum()) for stage in stages)
        result[name] = {
            "clip": type(opt._grad_clip).__name__,
            "seen": seen,
            "expected": 1.0 / (max(squares**0.5, 1.0) + 1e-6),  # the whole model's norm, Paddle's formula
            "bias_counted_mp_times": 1.0 / ((squares + (mp_size - 1) * replicated) ** 0.5 + 1e-6),
            "mesh": hcg.get_device_mesh().mesh_dim_names,
            "scaler_skipped": skipped_step,
        }
    return result


def recipe_namespace() -> dict[str, Any]:
    """The large-model recipe of docs/distributed.md, executed as the reader would copy it."""
    from tests.doc_examples import blocks

    (block,) = [b for b in blocks("docs/distributed.md") if "def main(path: str, first: int, last: int)" in b.code]
    namespace: dict[str, Any] = {"__name__": "recipe"}
    exec(compile(block.code, block.id, "exec"), namespace)
    return namespace


@scenario
def recipe(ctx: Context) -> dict[str, Any]:
    """On 2 ranks: the recipe's steps 0-3 and checkpoint; on 4 (a later launch): its resumed
    steps 4-7. Then, on each, the checkpoint of step 4 loaded into a fresh build, for the tests
    to compare across the world sizes."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    ns = recipe_namespace()
    path = ctx.out.parent / "recipe"  # shared by the two launches
    first, last = (0, 4) if ctx.world == 2 else (4, 8)
    try:
        losses = ns["main"](str(path), first, last)
    finally:  # its bfloat16 auto_cast would switch off the float16 scalers of the scenarios after it
        amp_global_state().amp_dtype = "float16"
    model, opt, sched = ns["build"]()
    state = ns["checkpointed"](model, opt, sched)
    dcp.load(state, checkpoint_id=f"{path}/step4")
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    params = list(model.parameters())
    return {
        "losses": losses,
        "params": full_params(model),
        "masters": [opt.state[p]["master_weight"].full_tensor() for p in params],
        "moments": [opt.state[p][k].full_tensor() for p in params for k in ("moment1", "moment2")],
        "lr": (sched.last_epoch, sched()),
        "units": sum(1 for m in model.modules() if type(m).__name__.startswith("FSDP")),
    }


@scenario
def peer_hangs(ctx: Context) -> dict[str, Any]:
    """Rank 1 never reaches the step: rank 0's collective fails after the group's timeout."""
    short = dist.new_group(timeout=datetime.timedelta(seconds=2))
    result: dict[str, Any] = {}
    if ctx.rank == 0:
        model = make_model(0, ctx.device)
        scaler = new_scaler(process_group=short)
        start = time.monotonic()
        try:
            train(model, sgd(model.parameters()), scaler, [batch(0, 0, ctx.device)])
        except RuntimeError as error:
            result = {"error": str(error), "seconds": time.monotonic() - start}
    dist.barrier()  # the default group still works
    return result


@scenario
def rank_raises(ctx: Context) -> dict[str, Any]:
    """Rank 1 raises before its step and exits; rank 0, in the scaler's collective, fails soon
    after with a clear error. Ends the run."""
    model = make_model(ctx.rank, ctx.device)
    scaler = new_scaler(process_group=dist.group.WORLD)
    if ctx.rank == 1:
        raise RuntimeError("injected failure on rank 1")
    start = time.monotonic()
    try:
        train(model, sgd(model.parameters()), scaler, [batch(0, 0, ctx.device)])
    except RuntimeError as error:
        torch.save({"error": str(error), "seconds": time.monotonic() - start}, ctx.out / f"rank_raises.{ctx.rank}.pt")
        sys.exit(3)
    return {"error": None}


@scenario
def nccl_paths(ctx: Context) -> dict[str, Any]:
    """CUDA only. Where the flag is reduced: CPU grads (as when offloaded) under an NCCL-only
    group go through CUDA; under the default ``cpu:gloo,cuda:nccl`` group CPU flags stay on
    gloo and CUDA flags on NCCL; CUDA flags under a gloo group. And the fused path makes no
    host sync even with the collective (NCCL orders it on the stream)."""
    world, cpu = dist.group.WORLD, torch.device("cpu")
    nccl_only = dist.new_group(backend="nccl")
    gloo_only = dist.new_group(backend="gloo")
    result: dict[str, Any] = {
        "configs": [dist.get_backend_config(g) for g in (world, nccl_only, gloo_only)],
    }
    cases = {
        "cpu_grads_nccl_group": (cpu, nccl_only),
        "cpu_grads_mixed_world": (cpu, world),
        "cuda_grads_mixed_world": (ctx.device, world),
        "cuda_grads_gloo_group": (ctx.device, gloo_only),
    }
    for name, (device, group) in cases.items():
        model = make_model(ctx.rank, device)
        scaler = new_scaler(process_group=group)
        batches = [batch(s, ctx.rank, device) for s in range(STEPS)]
        result[name] = train(model, sgd(model.parameters()), scaler, batches)

    from paddle_compat.distributed.sharding import group_sharded_parallel

    plain = make_model(0, ctx.device)  # FSDP2 with CPUOffloadPolicy: CPU DTensor grads
    sharded = group_sharded_parallel(plain, sgd(plain.parameters()), "os_g", scaler=new_scaler(), offload=True)
    result["fsdp2_offload"] = train(*sharded, [batch(s, ctx.rank, ctx.device) for s in range(STEPS)])

    model = make_model(ctx.rank, ctx.device)
    opt, scaler = fused_adamw(model.parameters()), new_scaler(process_group=world)
    syncs = []
    for step in range(STEPS):
        x, y = batch(step, ctx.rank, ctx.device)
        scaler.scale((model(x) - y).pow(2).mean()).backward()
        torch.cuda.synchronize()
        if step >= 2:  # after the communicators exist
            torch.cuda.set_sync_debug_mode("error")
        try:
            scaler.step(opt)
            scaler.update()
        except RuntimeError as error:
            syncs.append(str(error))
        finally:
            torch.cuda.set_sync_debug_mode("default")
        opt.zero_grad()
    result["fused_host_syncs"] = syncs
    result["fused"] = (scaler.get_scale(), scaler.get_skipped_steps())
    return result


# -- main ------------------------------------------------------------------------------------


def main() -> None:
    out, device_type, init, *names = sys.argv[1:]
    torch.set_num_threads(1)
    amp_global_state().amp_dtype = "float16"  # as if auto_cast had run: dynamic scaling stays on
    if device_type == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        device, backend = torch.device("cuda", torch.cuda.current_device()), None  # cpu:gloo,cuda:nccl
    else:
        device, backend = torch.device("cpu"), "gloo"  # a forked CPU rank never touches CUDA
    if init == "parallel_env":
        pdist.init_parallel_env(backend=backend, timeout=TIMEOUT)
    else:
        dp, mp = map(int, init.removeprefix("fleet:").split(","))
        strategy = fleet.DistributedStrategy()
        strategy.hybrid_configs = {"dp_degree": dp, "mp_degree": mp, "pp_degree": 1}
        fleet.init(is_collective=True, strategy=strategy, backend=backend, timeout=TIMEOUT)
    ctx = Context(Path(out), device)
    for name in names:
        try:
            result = SCENARIOS[name](ctx)
        except Exception:
            if name == "rank_raises":
                raise
            result = {"error": traceback.format_exc()}
        torch.save(result, ctx.out / f"{name}.{ctx.rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
