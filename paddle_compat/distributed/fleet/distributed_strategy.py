"""``DistributedStrategy``: Paddle's fleet configuration object, as plain Python.

It takes the fields Paddle scripts set, with Paddle's defaults and key checks. Only some act on
torch (``HONOURED``); ``fleet.init`` warns once about any other field set to a non-default value,
so a porter sees what has no effect instead of guessing.
"""

from __future__ import annotations

import copy
from typing import Any

from ... import _checks

__all__ = ["DistributedStrategy"]

# Paddle's hybrid axes (short names) and their default nesting order, outermost first.
HYBRID_AXES = ("dp", "pp", "sharding", "sep", "cp", "mp")

_HYBRID_SCALARS: dict[str, Any] = {
    "dp_degree": -1,  # -1: inferred from the world size
    "mp_degree": 1,
    "pp_degree": 1,
    "sharding_degree": 1,
    "sep_degree": 1,
    "ep_degree": 1,
    "moe_sharding_degree": 1,
    "cp_degree": 1,
    "cp_sharding_degree": 1,
    "enable_optimizer_timer": False,
    "split_norm_comm": False,
}
# Nested sections of hybrid_configs (NCCL and overlap tuning): kept, never acted on.
_HYBRID_SECTIONS = (
    "mp_configs",
    "pp_configs",
    "sharding_configs",
    "dp_configs",
    "sep_configs",
    "dp_sep_configs",
    "pp_tp_configs",
    "ep_configs",
    "moe_sharding_configs",
    "default_comm_group_configs",
    "cp_configs",
    "cp_sharding_configs",
    "dp_cp_configs",
    "cp_mp_configs",
)

_FLAGS: dict[str, Any] = {
    "amp": False,
    "recompute": False,
    "pipeline": False,
    "tensor_parallel": False,
    "sharding": False,
    "gradient_merge": False,
    "find_unused_parameters": False,
    "fuse_all_reduce_ops": True,
    "fuse_grad_size_in_MB": 32,
    "last_comm_group_size_MB": 1.0,
    "nccl_comm_num": 1,
    "without_graph_optimization": True,
    "heter_ccl_mode": False,
}

_CONFIGS: dict[str, dict[str, Any]] = {
    "amp_configs": {
        "init_loss_scaling": 32768.0,
        "incr_every_n_steps": 1000,
        "decr_every_n_nan_or_inf": 2,
        "incr_ratio": 2.0,
        "decr_ratio": 0.8,
        "use_dynamic_loss_scaling": True,
        "custom_white_list": [],
        "custom_black_list": [],
        "custom_black_varnames": [],
        "use_pure_fp16": False,
        "use_fp16_guard": True,
        "use_optimizer_fp16": False,
        "use_pure_bf16": False,
    },
    "recompute_configs": {
        "checkpoints": [],
        "enable_offload": False,
        "checkpoint_shape": [],
        "enable_tuning": False,
        "refined_ops_patterns": [],
    },
    "pipeline_configs": {
        "micro_batch_size": 1,
        "accumulate_steps": 1,
        "schedule_mode": "1F1B",
        "p2p_cache_shape": True,
        "enable_partial_send_recv": True,
    },
    "gradient_merge_configs": {"k_steps": 1, "avg": True},
    "tensor_parallel_configs": {"tensor_parallel_degree": 1, "tensor_init_seed": -1},
    "sharding_configs": {
        "sharding_segment_strategy": "segment_broadcast_MB",
        "segment_broadcast_MB": 32.0,
        "segment_anchors": [],
        "sharding_degree": 8,
        "mp_degree": 1,
        "dp_degree": 1,
        "hybrid_dp": False,
        "gradient_merge_acc_step": 1,
        "optimize_offload": False,
        "pp_allreduce_in_optimize": False,
        "pp_degree": 1,
        "optimize_cast": False,
        "_dp_as_optimizer_sharding": False,
        "stage": 1,
        "enable_tuning": False,
        "use_calc_stream": False,
    },
    "hybrid_configs": {**_HYBRID_SCALARS, **{section: {} for section in _HYBRID_SECTIONS}},
}

# What paddle_compat acts on (see docs/distributed.md); every other field is only kept.
HONOURED = {
    "hybrid_configs": ("dp_degree", "mp_degree", "pp_degree", "sharding_degree", "sep_degree", "order"),
    "find_unused_parameters": (),  # DistributedDataParallel(find_unused_parameters=...)
    "fuse_grad_size_in_MB": (),  # DistributedDataParallel(bucket_cap_mb=...)
    "amp": (),
    "amp_configs": ("use_pure_fp16", "use_pure_bf16"),  # distributed_model casts for O2, as Paddle
}


class DistributedStrategy:
    """Paddle's ``fleet.DistributedStrategy``: the fields Paddle scripts set, Paddle's defaults.

    Config dicts (``hybrid_configs``, ``amp_configs``, ...) behave as in Paddle: assigning a
    dict updates only the keys it names, an unknown key raises, and reading returns a copy
    (so ``strategy.hybrid_configs["dp_degree"] = 2`` changes nothing; assign a dict).

    Acted on: ``hybrid_configs`` degrees ``dp/mp/pp/sharding/sep`` and ``order`` (the process
    groups of ``get_hybrid_communicate_group``, what ``distributed_model`` and
    ``distributed_scaler`` do), ``find_unused_parameters`` and ``fuse_grad_size_in_MB`` (passed
    to ``DistributedDataParallel``), ``amp`` with ``amp_configs["use_pure_fp16"/"use_pure_bf16"]``
    (``distributed_model`` casts the model for O2, as Paddle does). Everything else is kept and
    has no effect; ``fleet.init`` names the ones set to a non-default value in one warning.
    ``cp/ep/moe_sharding`` degrees above 1 are refused by ``fleet.init``.

    Example::

        strategy = fleet.DistributedStrategy()
        strategy.hybrid_configs = {"dp_degree": 2, "mp_degree": 2, "pp_degree": 1}
        fleet.init(is_collective=True, strategy=strategy)

    Differences from Paddle: plain Python, not a protobuf message; a value of the wrong type
    raises ``TypeError`` (Paddle logs a warning and ignores it); an unknown config key raises
    ``ValueError`` (Paddle: ``AssertionError``, same text); nested ``hybrid_configs`` sections
    (``mp_configs``, ``pp_configs``, ...) are plain dicts that accept any key.
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_values", dict(_FLAGS))
        object.__setattr__(self, "_configs", copy.deepcopy(_CONFIGS))
        object.__setattr__(self, "hybrid_parallel_order", list(HYBRID_AXES))

    def __getattr__(self, name: str) -> Any:  # only for names not found the ordinary way
        if name in _FLAGS:
            return self.__dict__["_values"][name]
        if name in _CONFIGS:
            return copy.deepcopy(self.__dict__["_configs"][name])
        raise AttributeError(f"'DistributedStrategy' object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FLAGS:
            self._values[name] = _checked_flag(name, value)
        elif name == "hybrid_configs":
            self._set_hybrid(value)
        elif name in _CONFIGS:
            self._configs[name].update(_checked_config(name, value, self._configs[name]))
        elif name == "hybrid_parallel_order":
            object.__setattr__(self, name, _checked_order(value))
        else:
            raise TypeError(f"{name} is not a attribute of DistributedStrategy")

    def _set_hybrid(self, value: Any) -> None:
        value = dict(_checked_config("hybrid_configs", value, self._configs["hybrid_configs"], extra=("order",)))
        order = value.pop("order", None)
        for key, item in value.items():
            if key in _HYBRID_SECTIONS:
                if not isinstance(item, dict):
                    raise TypeError(f"hybrid_configs[{key!r}] must be a dict, got {type(item).__name__}")
            elif key.endswith("_degree") and not _checks.is_int(item):
                raise TypeError(f"hybrid_configs[{key!r}] must be an int, got {item!r}")
        if order is not None:
            object.__setattr__(self, "hybrid_parallel_order", _checked_order(order))
        configs = self._configs["hybrid_configs"]
        for key, item in value.items():
            if key in _HYBRID_SECTIONS:
                configs[key] = {**configs[key], **copy.deepcopy(item)}
            else:
                configs[key] = item

    def unhonoured_settings(self) -> list[str]:
        """The fields (and config keys) set to a non-default value that paddle_compat ignores
        (``fleet.init`` names them in a warning).

        Example::

            >>> from paddle_compat.distributed.fleet import DistributedStrategy
            >>> strategy = DistributedStrategy()
            >>> strategy.recompute = True
            >>> strategy.unhonoured_settings()
            ['recompute']
        """
        found = [name for name, default in _FLAGS.items() if name not in HONOURED and self._values[name] != default]
        for name, defaults in _CONFIGS.items():
            acted_on = HONOURED.get(name, ())
            found += [
                f"{name}[{key!r}]"
                for key, default in defaults.items()
                if key not in acted_on and self._configs[name][key] != default
            ]
        if self._values["amp"] is False:  # the pure-fp16/bf16 switches act only under amp
            found += [f"amp_configs[{key!r}]" for key in HONOURED["amp_configs"] if self._configs["amp_configs"][key]]
        return found

    def __repr__(self) -> str:
        changed = {n: self._values[n] for n, d in _FLAGS.items() if self._values[n] != d}
        changed.update(
            {
                n: {k: v for k, v in c.items() if v != _CONFIGS[n][k]}
                for n, c in self._configs.items()
                if c != _CONFIGS[n]
            }
        )
        if self.hybrid_parallel_order != list(HYBRID_AXES):
            changed["hybrid_parallel_order"] = self.hybrid_parallel_order
        return f"DistributedStrategy({changed})"


def _checked_flag(name: str, value: Any) -> Any:
    default = _FLAGS[name]
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise TypeError(f"{name} should have value of bool type, got {type(value).__name__}")
    else:
        _checks.above(name, _checks.real(name, value), 0)
    return value


def _checked_config(name: str, value: Any, current: dict[str, Any], extra: tuple[str, ...] = ()) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict, got {type(value).__name__}")
    for key in value:
        if key not in current and key not in extra:
            raise ValueError(f"key:{key} not in {name}")
    return copy.deepcopy(value)


def _checked_order(order: Any) -> list[str]:
    """Each of Paddle's five topology axes once; ``cp`` may be left out (Paddle's own examples do)."""
    required = set(HYBRID_AXES) - {"cp"}
    if (
        not isinstance(order, (list, tuple))
        or len(set(order)) != len(order)
        or not required <= set(order) <= set(HYBRID_AXES)
    ):
        raise ValueError(
            f"hybrid_configs['order'] must name each of {sorted(required)} once (and 'cp' at most once), got {order!r}"
        )
    return list(order)
