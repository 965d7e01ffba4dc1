"""Our GradScaler in real Hugging Face Accelerate (1.15): set as ``accelerator.scaler`` before
``prepare``. Trains, skips on overflow (the LR scheduler holds), save_state/load_state resume it,
and the calls of Accelerate's FSDP2 resume work. CPU, a tiny model, a few steps."""

import math

import pytest
import torch

accelerate = pytest.importorskip("accelerate")
from accelerate import Accelerator  # noqa: E402
from accelerate.state import AcceleratorState, GradientState  # noqa: E402

from paddle_compat import optimizer as popt  # noqa: E402
from paddle_compat.amp import GradScaler, auto_cast  # noqa: E402
from paddle_compat.integrations.accelerate import use_grad_scaler  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_accelerate_state():
    yield  # Accelerate keeps process-wide singletons; leave none behind
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def setup():
    """The recipe: mixed_precision="no" (Paddle's auto_cast does the casting), our scaler set
    before prepare()."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    accelerator = Accelerator(cpu=True, mixed_precision="no")
    accelerator.scaler = GradScaler(init_loss_scaling=1024, incr_every_n_steps=2)
    return (accelerator, *accelerator.prepare(model, optimizer, scheduler))


def batches(n):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)) for _ in range(n)]


def train(accelerator, model, optimizer, scheduler, data, bad=()):
    history = []
    for i, (x, y) in enumerate(data):
        with auto_cast(dtype="float16"):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y) * (math.inf if i in bad else 1.0)
        accelerator.backward(loss)  # scaler.scale(loss).backward()
        # Accelerate unscales only a scaler it made itself (fp16 on a GPU): unscale before clipping.
        accelerator.scaler.unscale_(optimizer.optimizer)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()  # scaler.step(optimizer, None), then scaler.update()
        scheduler.step()  # held when the step was skipped
        optimizer.zero_grad()
        history.append(
            (
                accelerator.optimizer_step_was_skipped,
                accelerator.scaler.get_scale(),
                scheduler.get_last_lr()[0],
                [p.detach().clone() for p in model.parameters()],
            )
        )
    return history


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b))


def test_trains_and_skips_the_overflowing_step_holding_the_lr():
    accelerator, model, optimizer, scheduler = setup()
    start = [p.detach().clone() for p in model.parameters()]
    history = train(accelerator, model, optimizer, scheduler, batches(4), bad={1})
    assert [h[0] for h in history] == [False, True, False, False]
    assert [h[1] for h in history] == [1024.0, 512.0, 512.0, 1024.0]
    assert [h[2] for h in history] == [0.05, 0.05, 0.025, 0.0125]
    assert not same(history[0][3], start)
    assert same(history[1][3], history[0][3])  # the skipped step left the weights
    assert not same(history[2][3], history[1][3])
    assert accelerator.scaler.get_skipped_steps() == 1


def test_clip_grad_norm_does_not_unscale_a_scaler_it_did_not_make():
    """Why the recipe unscales by hand: Accelerate's clip_grad_norm_ unscales only when it made
    the scaler (mixed_precision="fp16" on a GPU); otherwise it clips the scaled grads."""
    accelerator, model, optimizer, _ = setup()
    x, y = batches(1)[0]
    with auto_cast(dtype="float16"):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    accelerator.backward(loss)
    scaled_norm = accelerator.clip_grad_norm_(model.parameters(), math.inf)
    accelerator.scaler.unscale_(optimizer.optimizer)
    norm = accelerator.clip_grad_norm_(model.parameters(), math.inf)
    assert scaled_norm.item() == pytest.approx(1024 * norm.item(), rel=1e-6)


def full_and_loaded(make, run, tmp_path):
    """An uninterrupted run of 6 steps (overflows at 1 and 4), and a fresh ``make()`` loaded with
    ``load_state`` from the ``save_state`` of another run after 3 steps."""
    data = batches(6)
    full = run(*make(), data, bad={1, 4})
    AcceleratorState._reset_state(reset_partial_state=True)

    accelerator, model, optimizer, scheduler = make()
    run(accelerator, model, optimizer, scheduler, data[:3], bad={1})
    accelerator.save_state(tmp_path / "state")
    AcceleratorState._reset_state(reset_partial_state=True)

    loaded = make()
    loaded[0].load_state(tmp_path / "state")
    return full, loaded


def test_save_state_and_load_state_resume_the_scaler(tmp_path):
    full, (accelerator, model, optimizer, scheduler) = full_and_loaded(setup, train, tmp_path)
    data = batches(6)
    saved = torch.load(tmp_path / "state" / "scaler.pt", weights_only=True)
    assert saved["scale"].tolist() == [512.0] and (saved["incr_count"], saved["skipped_steps"]) == (1, 1)
    assert accelerator.scaler.state_dict() == {**saved, "scale": accelerator.scaler.state_dict()["scale"]}
    resumed = train(accelerator, model, optimizer, scheduler, data[3:], bad={1})
    assert [h[:3] for h in resumed] == [h[:3] for h in full[3:]]  # growth at step 3 needs the restored count
    assert same(resumed[-1][3], full[-1][3])
    assert accelerator.scaler.get_skipped_steps() == 2


def test_the_fsdp2_resume_path_calls_our_torch_private_shims(tmp_path, monkeypatch):
    """Under FSDP2, load_state loads the scaler itself, then calls
    scaler._lazy_init_scale_growth_tracker(scaler._device). Run exactly that branch of
    load_state by reporting FSDP2 (the only place load_state asks)."""
    accelerator, model, optimizer, scheduler = setup()
    train(accelerator, model, optimizer, scheduler, batches(3), bad={1})
    accelerator.save_state(tmp_path / "state")
    expected = accelerator.scaler.state_dict()
    AcceleratorState._reset_state(reset_partial_state=True)

    accelerator, model, optimizer, scheduler = setup()
    calls = []
    scaler = accelerator.scaler
    lazy_init = scaler._lazy_init_scale_growth_tracker
    monkeypatch.setattr(scaler, "_lazy_init_scale_growth_tracker", lambda dev: calls.append(dev) or lazy_init(dev))
    monkeypatch.setattr(type(accelerator), "is_fsdp2", property(lambda self: True))
    accelerator.load_state(tmp_path / "state")
    assert calls == ["cpu"]
    state = scaler.state_dict()
    assert state["scale"].tolist() == expected["scale"].tolist() == [512.0]
    assert {k: v for k, v in state.items() if k != "scale"} == {k: v for k, v in expected.items() if k != "scale"}


# -- paddle_compat's optimizers and Paddle's schedulers, through use_grad_scaler ---------------------


def paddle_setup(fused=False, shared=False):
    """What a ported Paddle script passes to Accelerate: Paddle's Momentum driven by Paddle's
    StepDecay (``shared``: a second optimizer driven by the same scheduler)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    sched = popt.lr.StepDecay(learning_rate=0.1, step_size=1, gamma=0.5)
    optimizer = popt.Momentum(learning_rate=sched, momentum=0.9, parameters=model.parameters(), fused=fused)
    accelerator = Accelerator(cpu=True, mixed_precision="no")
    use_grad_scaler(accelerator, GradScaler(init_loss_scaling=1024, incr_every_n_steps=2))
    if not shared:
        return (accelerator, *accelerator.prepare(model, optimizer, sched))
    other = torch.nn.Linear(4, 2)
    second = popt.SGD(learning_rate=sched, parameters=other.parameters())
    return (accelerator, *accelerator.prepare(model, optimizer, sched, second))


def paddle_train(accelerator, model, optimizer, scheduler, data, bad=(), clip=True):
    history = []
    for i, (x, y) in enumerate(data):
        with auto_cast(dtype="float16"):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y) * (math.inf if i in bad else 1.0)
        accelerator.backward(loss)
        norm = accelerator.clip_grad_norm_(model.parameters(), 0.5) if clip else None  # unscales first
        optimizer.step()
        scheduler.step()  # an AcceleratedScheduler: held when the step was skipped
        optimizer.zero_grad()
        history.append((accelerator.optimizer_step_was_skipped, accelerator.scaler.get_scale(),
                        optimizer.param_groups[0]["lr"], norm, [p.detach().clone() for p in model.parameters()]))
    return history


def test_paddle_optimizer_and_scheduler_skip_hold_the_schedule_and_clip_unscaled():
    accelerator, model, optimizer, scheduler = paddle_setup()
    assert type(scheduler).__name__ == "AcceleratedScheduler" and scheduler.scheduler.optimizer is optimizer.optimizer
    start = [p.detach().clone() for p in model.parameters()]
    history = paddle_train(accelerator, model, optimizer, scheduler, batches(4), bad={1})
    assert [h[0] for h in history] == [False, True, False, False]
    assert [h[1] for h in history] == [1024.0, 512.0, 512.0, 1024.0]
    assert [h[2] for h in history] == [0.05, 0.05, 0.025, 0.0125]  # the group's rate, held at the skip
    assert same(history[1][4], history[0][4]) and not same(history[2][4], history[1][4])
    # the norm of the unscaled gradients, and a first step of lr * 0.5 (clipped at 0.5)
    assert 0.5 < history[0][3].item() < 10
    moved = torch.cat([(a - b).flatten() for a, b in zip(history[0][4], start)]).norm()
    assert moved.item() == pytest.approx(0.1 * 0.5, rel=1e-3)


def test_an_unscale_of_your_own_is_not_repeated():
    accelerator, model, optimizer, _ = paddle_setup()
    x, y = batches(1)[0]
    with auto_cast(dtype="float16"):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    accelerator.backward(loss)
    accelerator.scaler.unscale_(optimizer.optimizer)
    grads = [p.grad.clone() for p in model.parameters()]
    accelerator.clip_grad_norm_(model.parameters(), math.inf)
    accelerator.clip_grad_value_(model.parameters(), math.inf)
    assert same([p.grad for p in model.parameters()], grads)


def test_use_grad_scaler_refuses_what_cannot_work():
    with pytest.raises(TypeError, match="scaler must be a paddle_compat.amp.GradScaler, got GradScaler"):
        use_grad_scaler(Accelerator(cpu=True), torch.amp.GradScaler("cpu"))
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(popt.SGD(parameters=torch.nn.Linear(2, 2).parameters()))
    with pytest.raises(RuntimeError, match=r"use_grad_scaler\(\) must come before accelerator.prepare\(\)"):
        use_grad_scaler(accelerator, GradScaler())
    assert accelerator.scaler is None


def test_a_fused_paddle_optimizer_warns_that_accelerate_cannot_see_its_skips():
    accelerator, model, optimizer, scheduler = paddle_setup(fused=True)
    skips_unseen = "Momentum is fused .* see no skipped step and advance the LR schedule"
    with pytest.warns(UserWarning, match=skips_unseen) as record:
        history = paddle_train(accelerator, model, optimizer, scheduler, batches(3), bad={1}, clip=False)
    assert {w.filename for w in record if "is fused" in str(w.message)} == {__file__}  # the optimizer.step() line
    assert [h[0] for h in history] == [False, False, False]  # what Accelerate sees
    assert accelerator.scaler.get_skipped_steps() == 1 and same(history[1][4], history[0][4])
    assert [h[2] for h in history] == [0.05, 0.025, 0.0125]


def test_a_paddle_scheduler_shared_by_two_optimizers():
    accelerator, model, optimizer, scheduler, second = paddle_setup(shared=True)
    paddle_train(accelerator, model, optimizer, scheduler, batches(2))
    assert optimizer.param_groups[0]["lr"] == second.param_groups[0]["lr"] == 0.025 == scheduler.get_last_lr()[0]


def test_paddle_scheduler_and_optimizer_resume_from_save_state(tmp_path):
    full, (accelerator, model, optimizer, scheduler) = full_and_loaded(paddle_setup, paddle_train, tmp_path)
    assert optimizer.param_groups[0]["lr"] == full[2][2]  # the rate follows the loaded scheduler at once
    resumed = paddle_train(accelerator, model, optimizer, scheduler, batches(6)[3:], bad={1})
    assert [h[:3] for h in resumed] == [h[:3] for h in full[3:]]
    assert same(resumed[-1][4], full[-1][4])


def test_register_for_checkpointing_takes_a_paddle_scheduler(tmp_path):
    accelerator = Accelerator(cpu=True)
    sched = popt.lr.CosineAnnealingDecay(learning_rate=0.1, T_max=10)
    accelerator.register_for_checkpointing(sched)
    for _ in range(3):
        sched.step()
    saved = sched()
    accelerator.save_state(tmp_path / "state")
    sched.step()
    accelerator.load_state(tmp_path / "state")
    assert sched.last_epoch == 3 and sched() == saved


def test_a_scaler_set_by_hand_warns_when_accelerate_steps_gradients_nobody_unscaled():
    """The silent failure use_grad_scaler mends: a scaler set as accelerator.scaler, and
    clip_grad_norm_ clipping the scaled gradients (Hugging Face's Trainer does so at its default
    max_grad_norm=1.0)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    accelerator = Accelerator(cpu=True, mixed_precision="no")
    accelerator.scaler = GradScaler(init_loss_scaling=1024)
    model, optimizer = accelerator.prepare(model, popt.SGD(learning_rate=0.1, parameters=model.parameters()))
    x, y = batches(1)[0]
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    nobody_unscaled = "Accelerate steps SGD on gradients nobody unscaled before: .*use_grad_scaler"
    with pytest.warns(UserWarning, match=nobody_unscaled) as record:
        optimizer.step()
    assert [w.filename for w in record if "nobody unscaled" in str(w.message)] == [__file__]  # this line


def test_gradient_accumulation_unscales_once_on_the_step_that_updates():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    sched = popt.lr.StepDecay(learning_rate=0.1, step_size=1, gamma=0.5)
    optimizer = popt.SGD(learning_rate=sched, parameters=model.parameters())
    accelerator = Accelerator(cpu=True, mixed_precision="no", gradient_accumulation_steps=2)
    use_grad_scaler(accelerator, GradScaler(init_loss_scaling=1024))
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, sched)
    reference = [p.detach().clone().requires_grad_() for p in model.parameters()]
    start = [p.detach().clone() for p in model.parameters()]
    for x, y in batches(2):
        with accelerator.accumulate(model):
            accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
            accelerator.clip_grad_norm_(model.parameters(), math.inf)  # every micro-step, as users write it
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        # the same two halves of the loss, unscaled, by hand
        out = torch.nn.functional.linear(x, reference[0], reference[1])
        (torch.nn.functional.mse_loss(out, y) / 2).backward()
    moved = [p.detach() - s for p, s in zip(model.parameters(), start)]
    expected = [-0.1 * r.grad for r in reference]
    assert all(torch.allclose(m, e, rtol=1e-5, atol=1e-7) for m, e in zip(moved, expected))
    assert optimizer.param_groups[0]["lr"] == 0.05  # one update, one scheduler step
