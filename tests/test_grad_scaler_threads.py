"""One GradScaler shared by several threads: each thread skips on its own gradients and unscales
with the scale its own ``scale()`` used; the shared scale and counts stay consistent."""

import threading

import torch

from paddle_compat.amp import GradScaler, auto_cast
from paddle_compat.amp.scale_tracker import FoundInf

THREADS, STEPS, LR = 4, 40, 0.5


def _worker(scaler, index, barrier, results, errors):
    try:
        with auto_cast():  # the AMP dtype the scaler checks is per thread: float16 here too
            pass
        gen = torch.Generator().manual_seed(index)
        w = torch.nn.Parameter(torch.zeros(64))
        opt = torch.optim.SGD([w], lr=LR)
        skipped = 0
        for step in range(STEPS):
            x = torch.randint(-4, 5, (64,), generator=gen).float()  # small integers: exact arithmetic
            bad = (step + index) % 5 == 0
            if bad:
                x[step % 64] = float("inf") if step % 2 else float("nan")
            before = w.detach().clone()
            barrier.wait()  # all threads inside the same phase: maximal interleaving
            scaler.scale((w * x).sum()).backward()
            barrier.wait()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            if bad:
                skipped += 1
                assert torch.equal(w.detach(), before), f"thread {index} step {step}: a bad step was applied"
            else:
                # d(sum(w*x))/dw = x: exactly -LR * x after unscaling with the right scale.
                assert torch.equal(w.detach(), before - LR * x), f"thread {index} step {step}: wrong update"
            assert scaler.last_step_skipped() is bad
        results[index] = skipped
    except BaseException as error:  # reported by the main thread
        errors.append(error)
        barrier.abort()


def test_a_shared_scaler_decides_each_threads_skip_on_its_own_grads():
    # Powers of two and a growth at every finite update: the scale moves all the time while
    # other threads hold loss values scaled with the previous one.
    scaler = GradScaler(init_loss_scaling=2.0**10, incr_every_n_steps=1, max_loss_scaling=2.0**20)
    barrier = threading.Barrier(THREADS, timeout=30)
    results, errors = {}, []
    threads = [threading.Thread(target=_worker, args=(scaler, i, barrier, results, errors)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        raise errors[0]
    assert scaler.get_skipped_steps() == sum(results.values()) == THREADS * STEPS // 5
    scale = scaler.get_scale()
    assert 1.0 <= scale <= 2.0**20 and scale == 2.0 ** round(torch.tensor(scale).log2().item())


def test_a_scale_moved_by_another_thread_just_after_scale_took_it():
    """Deterministic form of the race above: another thread's update() lands between scale()
    taking the scale tensor and recording it; the grads are still unscaled with that tensor."""
    scaler = GradScaler(init_loss_scaling=4.0, incr_every_n_steps=1)
    tracker, claim = scaler._tracker, scaler._tracker.claim

    def claim_then_another_thread_moves_it(device):
        scale = claim(device)
        tracker.claim = claim  # only once
        tracker.update(FoundInf.known(False))  # 4 -> 8
        return scale

    tracker.claim = claim_then_another_thread_moves_it
    w = torch.nn.Parameter(torch.ones(2))
    scaler.scale(w.sum()).backward()  # grads 4
    scaler.unscale_(torch.optim.SGD([w], lr=0.1))
    assert torch.equal(w.grad, torch.ones(2)) and scaler.get_scale() == 8.0


def test_threads_have_their_own_optimizer_state_machine():
    scaler = GradScaler()
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([w], lr=0.1)
    scaler.scale(w.sum()).backward()
    scaler.unscale_(opt)
    seen = []

    def other():
        # This thread has not unscaled: its own unscale_ is allowed, and finds the grads finite.
        scaler.unscale_(opt)
        seen.append(scaler._found_inf.item())

    t = threading.Thread(target=other)
    t.start()
    t.join(timeout=10)
    assert seen == [False]


def test_a_bfloat16_auto_cast_in_one_thread_leaves_another_threads_scaler_on():
    ready, done = threading.Event(), threading.Event()

    def bfloat16_thread():
        with auto_cast(dtype="bfloat16"):
            ready.set()
            done.wait(timeout=10)

    t = threading.Thread(target=bfloat16_thread)
    t.start()
    ready.wait(timeout=10)
    with auto_cast():  # float16 in this thread
        pass
    scaler = GradScaler()
    scaled = scaler.scale(torch.tensor(1.0))
    done.set()
    t.join(timeout=10)
    assert scaler.is_enable() and scaler.is_use_dynamic_loss_scaling() and scaled.item() == 2.0**16
