"""The per-step checks of a kept plan (``optimizer/_engine.py``, ``_Plan.holds``) in the forms the
single-group tests of ``test_optimizer_plans.py`` do not reach: the state mapping compared whole
(a group with most of the state) or looked up per parameter (a small group beside a large one),
a state dict put in place of another, gradients that are new tensors at every step written into
the rows of a batch that holds only some of the parameters, and a rate written into kept rows of
several kinds.

The oracle is the same optimizer made fresh (no plan yet), loaded with the state at that point, or
the same run with a new plan made at every step: the bits must agree.
"""

from __future__ import annotations

import pytest
import torch

import paddle_compat.optimizer as popt
from tests.optim_db import CLASSES, new
from tests.test_optimizer_plans import STATEFUL, _first_param_shaped, _run_after

# the first group: one parameter (with 70 in the second, its plan looks each parameter's state up)
# or all but one (its plan compares the state mapping whole)
SPLITS = {"small first group": 1, "large first group": 70}


def _many_params(seed: int = 0) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(3 + i % 5, generator=gen)) for i in range(71)]


def _grouped(params: list[torch.nn.Parameter], split: int) -> list[dict]:
    return [{"params": params[:split]}, {"params": params[split:]}]


def _run_grouped_after(cls, change, split: int, steps: int = 2) -> None:
    """``_run_after`` with the parameters in two groups, the first of ``split``."""
    _run_after(cls, change, steps, _many_params(), lambda ps: _grouped(ps, split))


def _reset_first_group(opt, params) -> None:
    """A state tensor of each parameter of the first group put in place of its own."""
    for p in opt.param_groups[0]["params"]:
        key = _first_param_shaped(opt, p)
        opt.state[p][key] = torch.zeros_like(opt.state[p][key])


def _copy_first_group_dicts(opt, params) -> None:
    """Each parameter of the first group given a copy of its state dict (the same tensors)."""
    for p in opt.param_groups[0]["params"]:
        opt.state[p] = dict(opt.state[p])


def _reinsert_states(opt, params) -> None:
    """Every state taken out of the mapping and put back, in another order (the same dicts)."""
    states = {p: opt.state.pop(p) for p in list(opt.state)}
    for p in reversed(list(states)):
        opt.state[p] = states[p]


def _clear_first_group(opt, params) -> None:
    for p in opt.param_groups[0]["params"]:
        del opt.state[p]


CHANGES = {
    "reset": _reset_first_group, "copied dicts": _copy_first_group_dicts, "reinserted": _reinsert_states,
    "cleared": _clear_first_group,
}


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("split", SPLITS.values(), ids=SPLITS.keys())
@pytest.mark.parametrize("cls", STATEFUL, ids=lambda c: c.__name__)
def test_a_changed_state_of_one_group_is_followed(cls, split, change) -> None:
    _run_grouped_after(cls, CHANGES[change], split)


def _new_grads_run(cls, rebuild: bool) -> list[torch.Tensor]:
    """Steps with new gradient tensors each time (``zero_grad(set_to_none=True)``), a scheduled rate
    and one parameter of another rate ratio; a transposed parameter takes the torch forms, so the
    compiled kernels' batch holds only some of the parameters."""
    gen = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(n, generator=gen)) for n in (5, 300, 7)]
    params.insert(1, torch.nn.Parameter(torch.randn(6, 4, generator=gen).t()))
    params[2].optimize_attr = {"learning_rate": 0.5}
    sched = popt.lr.CosineAnnealingDecay(learning_rate=0.01, T_max=5)
    opt = new(cls, sched, params)
    for step in range(4):
        opt.clear_grad(set_to_zero=False)
        gen = torch.Generator().manual_seed(100 + step)
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen) * 0.1
        if rebuild:
            opt._compat_engine._plans.clear()
        opt.step()
        sched.step()
    return [p.detach().clone() for p in params] + [
        v.clone() for p in params for v in opt.state[p].values() if isinstance(v, torch.Tensor)
    ]


SCHEDULED = [cls for cls in CLASSES if cls is not popt.Rprop]  # Rprop's rate is only its first step size


@pytest.mark.parametrize("cls", SCHEDULED, ids=lambda c: c.__name__)
def test_new_gradients_and_rates_reach_the_kept_rows(cls) -> None:
    kept, rebuilt = _new_grads_run(cls, False), _new_grads_run(cls, True)
    assert len(kept) == len(rebuilt)
    for a, b in zip(kept, rebuilt):
        a, b = a.contiguous().view(-1), b.contiguous().view(-1)
        assert a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))
