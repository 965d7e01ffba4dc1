"""Per-parameter learning rates against real Paddle 3.3.1, for every optimizer: Paddle's
``optimize_attr`` (what ``ParamAttr(learning_rate=...)`` sets) on a plain parameter list, and group
ratios, which Paddle writes over that attribute. The loops of ``test_optimizer_parity``."""

from __future__ import annotations

from typing import Any

import paddle
import pytest

from ..optim_db import OPTIM_DB, OURS, _groups_by_name
from .test_optimizer_parity import Config, needs_hardware_rsqrt, run_parity

_RATIOS = {"w1": 0.3, "b2": 2.5}  # the other parameters keep 1.0


def _with_param_rates(api: Any, name: str, lr: float, grouped: bool) -> Any:
    """``api.optimizer.<name>(lr)`` over the parameters, after giving w1 and b2 Paddle's
    ``optimize_attr`` learning-rate ratio; ``grouped``: in two groups (biases at a 0.5 ratio)."""

    def make(ps: list) -> Any:
        for p in ps:
            key, tensor = p if isinstance(p, tuple) else (p.name.split("_")[0], p)
            if key in _RATIOS:
                if isinstance(p, tuple):  # a torch parameter: the attribute, as Paddle's holds it
                    tensor.optimize_attr = {"learning_rate": _RATIOS[key]}
                else:
                    tensor.optimize_attr["learning_rate"] = _RATIOS[key]
        # AdamW refuses a group weight_decay of None (its decay is a coefficient)
        params = _groups_by_name(ps, 0.0 if name == "AdamW" else None) if grouped else ps
        return getattr(api.optimizer, name)(lr, parameters=params)

    return make


_EVERY = [(info.cls.__name__, info.learning_rate) for info in OPTIM_DB]
_EIGEN_SQRT = {info.cls.__name__ for info in OPTIM_DB if info.eigen_sqrt}
RATE_CONFIGS = [
    (Config(f"{name.lower()}_{'group_rates_over' if grouped else 'param'}_attr_rates",
            _with_param_rates(OURS, name, lr, grouped), _with_param_rates(paddle, name, lr, grouped), steps=25),
     name in _EIGEN_SQRT)
    for name, lr in _EVERY
    for grouped in (False, True)
]


@pytest.mark.parametrize(("cfg", "eigen_sqrt"), RATE_CONFIGS, ids=[c.name for c, _ in RATE_CONFIGS])
def test_per_parameter_rates_as_paddle(cfg: Config, eigen_sqrt: bool) -> None:
    needs_hardware_rsqrt(cfg, eigen_sqrt)
    run_parity(cfg)
