"""Our optimizers pickle and deep-copy (with their LR scheduler, clip and decay), and the copy
resumes the same trajectory bit for bit."""

import copy
import pickle

import pytest
import torch

from paddle_compat.optimizer import lr

from .optim_db import cases

MAKERS = {inp.desc: inp.make for _, inp in cases("copies")}


def step(model, opt, i):
    model(torch.full((2, 4), float(i + 1))).pow(2).mean().backward()
    opt.step()
    opt.clear_grad()
    if hasattr(opt._learning_rate, "step"):
        opt._learning_rate.step()


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
@pytest.mark.parametrize("name", list(MAKERS))
def test_a_copy_resumes_the_same_trajectory(name, how):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = MAKERS[name](list(model.parameters()))
    torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: 1.0)  # installs a step wrapper on the instance
    for i in range(3):
        step(model, opt, i)
    twin_model, twin_opt = pickle.loads(pickle.dumps((model, opt))) if how == "pickle" else copy.deepcopy((model, opt))
    assert type(twin_opt._learning_rate) is type(opt._learning_rate)
    if isinstance(opt._learning_rate, lr.LRScheduler):  # the copy has its own scheduler
        assert twin_opt._learning_rate is not opt._learning_rate
    for i in range(3, 7):
        step(model, opt, i)
        step(twin_model, twin_opt, i)
        assert all(torch.equal(a, b) for a, b in zip(model.parameters(), twin_model.parameters())), f"step {i}"
    assert twin_opt.get_lr() == opt.get_lr()
