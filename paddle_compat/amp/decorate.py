"""``decorate``: Paddle's pure low-precision (O2) setup of models and optimizers.

Differences from Paddle: it also acts on CPU (Paddle returns everything untouched there); all
arguments are checked before anything is changed, at O1 too (Paddle casts the models before it
rejects a bad ``save_dtype``, and checks nothing at O1); bad or wrapped models and bad
optimizers raise ``TypeError`` (Paddle: ``RuntimeError``); with ``master_grad`` the float32
gradient of a low-precision parameter is kept in ``param.main_grad`` because torch requires
``param.grad`` to have the parameter's dtype (so with ``master_weight=False`` a torch optimizer
steps with ``main_grad`` rounded to the parameter's dtype, where Paddle's kernels read the
float32 gradient directly).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

from .. import _checks
from .cast_rule import AMP_DTYPES
from .master_grad import accumulate_into_main_grad, clear_grads, grad_of, main_grad_of

_LOW = tuple(AMP_DTYPES.values())
_SAVE_DTYPES = {**AMP_DTYPES, "float32": torch.float32, "float64": torch.float64}
_ALWAYS_FP32 = (nn.modules.batchnorm._BatchNorm,)  # BatchNorm1d/2d/3d, SyncBatchNorm, lazy ones
_FP32_FOR_FLOAT16 = (nn.LayerNorm, nn.modules.instancenorm._InstanceNorm)
_MASTER_GRAD_HOOKED = "_paddle_compat_master_grad"
# Paddle refuses its DataParallel; torch's wrappers are refused alike (DDP's gradient buckets
# are laid out for the parameters' dtypes when it is built, so casting afterwards breaks it).
_WRAPPERS = (nn.DataParallel, nn.parallel.DistributedDataParallel)
_WRAPPED_MESSAGE = ("For distributed AMP training, you should first use paddle_compat.amp.decorate() to "
                    "decorate origin model, and then wrap it in torch.nn.DataParallel or "
                    "DistributedDataParallel to get distributed model.")
_EXCLUDED_MESSAGE = ("excluded_layers must be either a nn.Layer instance/type or a list of "
                     "nn.Layer instances/types.")


def decorate(
    models: nn.Module | list[nn.Module],
    optimizers: Any = None,
    level: str = "O1",
    dtype: str = "float16",
    master_weight: bool | None = None,
    save_dtype: str | None = None,
    master_grad: bool = False,
    excluded_layers: Any = None,
) -> Any:
    """Cast models for O2 training and give optimizers float32 master weights.

    Args:
        models: a ``torch.nn.Module`` or a list of them. Decorate before wrapping a model in
            ``DataParallel``/``DistributedDataParallel`` (a wrapped model raises, as in Paddle).
        optimizers: a ``torch.optim.Optimizer`` or Paddle-style optimizer (with
            ``_multi_precision``), a list of them, or None.
        level: ``"O1"`` (returns everything untouched) or ``"O2"``.
        dtype: ``"float16"`` or ``"bfloat16"``.
        master_weight: at O2, whether optimizers update float32 master weights (None: yes).
        save_dtype: ``"float16"``, ``"bfloat16"``, ``"float32"``, ``"float64"`` or None: the
            dtype ``state_dict()`` returns floating entries in.
        master_grad: at O2, whether the float32 gradient of each low-precision parameter is
            kept in ``param.main_grad`` after backward, and optimizers step with it. (With
            ``master_weight=False`` a torch optimizer gets it rounded to the parameter's dtype.)
        excluded_layers: module instances (with their submodules) or module types that keep
            float32, or a list of them.

    O2 casts the floating parameters and buffers of every module to ``dtype`` except
    ``excluded_layers``, BatchNorm layers and, for float16, LayerNorm/InstanceNorm. Returns
    ``models``, or ``(models, optimizers)`` when optimizers are given, in the shapes they were
    given. Every argument is checked before anything changes.

    Example::

        >>> import torch
        >>> from paddle_compat import amp
        >>> model = torch.nn.Linear(4, 4)
        >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> model, opt = amp.decorate(model, opt, level="O2", dtype="bfloat16")
        >>> model.weight.dtype
        torch.bfloat16
    """
    if not isinstance(level, str) or level not in ("O1", "O2"):
        raise ValueError("level should be O1 or O2, O1 represent AMP train mode, "
                         "O2 represent Pure fp16 train mode.")
    if not isinstance(dtype, str) or dtype not in AMP_DTYPES:
        raise ValueError("dtype only support float16 or bfloat16.")
    if master_weight is not None:
        _checks.flag("master_weight", master_weight, int_ok=True)
    _checks.flag("master_grad", master_grad, int_ok=True)
    if save_dtype is not None and (not isinstance(save_dtype, str) or save_dtype not in _SAVE_DTYPES):
        raise ValueError("save_dtype can only be float16 float32 or float64, but your input "
                         f"save_dtype is {save_dtype}.")
    if level == "O1":
        return models if optimizers is None else (models, optimizers)

    model_list = _as_list(models, lambda m: isinstance(m, nn.Module), "models", "torch.nn.Module",
                          "models must be either a single model or a list of models.")
    for model in model_list:
        if isinstance(model, _WRAPPERS):
            raise TypeError(_WRAPPED_MESSAGE)
    optimizer_list = [] if optimizers is None else _as_list(
        optimizers, _is_optimizer, "optimizers", "torch.optim.Optimizer",
        "optimizers must be either a single optimizer or a list of optimizers.")
    kept = _excluded_modules(model_list, excluded_layers)

    low = AMP_DTYPES[dtype]
    for model in model_list:
        for module in model.modules():
            if not _keeps_fp32(module, dtype, kept):
                module._apply(lambda t: t.to(low) if t.is_floating_point() else t, recurse=False)
    for optimizer in optimizer_list:
        if hasattr(optimizer, "_multi_precision"):  # Paddle-style optimizer: its own masters
            optimizer._multi_precision = master_weight is not False
        elif master_weight is not False:
            _mix_into(optimizer, MasterWeightMixin)
        elif master_grad:
            _mix_into(optimizer, MainGradMixin)
    if master_grad:
        for model in model_list:
            for param in model.parameters():
                if param.dtype in _LOW and param.requires_grad and not getattr(param, _MASTER_GRAD_HOOKED, False):
                    param.register_post_accumulate_grad_hook(accumulate_into_main_grad)
                    setattr(param, _MASTER_GRAD_HOOKED, True)  # a second decorate adds no second hook
    if save_dtype is not None:
        for model in model_list:
            for module in model.modules():
                # The public name arrived in torch 2.5; the private one has the same contract.
                register = getattr(module, "register_state_dict_post_hook", module._register_state_dict_hook)
                register(_StateDictCast(_SAVE_DTYPES[save_dtype]))

    if optimizers is None:
        return models
    return models, optimizers


amp_decorate = decorate


def _as_list(value: Any, valid: Callable[[Any], bool], name: str, kind: str, message: str) -> list[Any]:
    if valid(value):
        return [value]
    if not isinstance(value, list):
        raise TypeError(message)
    for item in value:
        if not valid(item):
            raise TypeError(f"Current train mode is pure fp16, {name} should be {kind}, but receive {type(item)}.")
    return value


def _is_optimizer(value: Any) -> bool:
    return isinstance(value, torch.optim.Optimizer) or hasattr(value, "_multi_precision")


def _excluded_modules(models: list[nn.Module], excluded: Any) -> set[int]:
    """ids of the modules that keep float32 because ``excluded_layers`` names them."""
    items = [] if excluded is None else excluded if isinstance(excluded, list) else [excluded]
    instances: list[nn.Module] = []
    types: list[type] = []
    for item in items:
        if isinstance(item, nn.Module):
            instances.append(item)
        elif isinstance(item, type) and issubclass(item, nn.Module):
            types.append(item)
        else:
            raise TypeError(_EXCLUDED_MESSAGE)
    kept = {id(sub) for inst in instances for sub in inst.modules()}
    if types:
        kept |= {id(m) for model in models for m in model.modules() if isinstance(m, tuple(types))}
    return kept


def _keeps_fp32(module: nn.Module, dtype: str, kept: set[int]) -> bool:
    return (id(module) in kept or isinstance(module, _ALWAYS_FP32)
            or (dtype == "float16" and isinstance(module, _FP32_FOR_FLOAT16)))


class _StateDictCast:
    """save_dtype: casts a module's own floating entries in ``state_dict()`` results."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype

    def __call__(self, module: nn.Module, state_dict: dict[str, Any], prefix: str, local_metadata: Any) -> None:
        for name in (*module._parameters, *module._buffers):
            value = state_dict.get(prefix + name)
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                state_dict[prefix + name] = value.to(self.dtype)


# --- master weights for any torch.optim.Optimizer -----------------------------------------

# The mixins below are only ever mixed in front of a torch.optim.Optimizer subclass (``_mixed``);
# the type checker is told so, so that it checks their calls on the optimizer.
if TYPE_CHECKING:
    _OptimizerBase = torch.optim.Optimizer
else:
    _OptimizerBase = object


class _Mixin(_OptimizerBase):
    """What the mixins share: the class ``decorate`` mixes one into is made at run time
    (``_mixed``), so the optimizer pickles as that class's two bases, the mixin and its own class."""

    def __reduce_ex__(self, protocol: Any) -> Any:
        return _restore_mixed, type(self).__bases__, self.__getstate__()


class MasterWeightMixin(_Mixin):
    """Makes a torch optimizer update float32 master copies of its low-precision params.

    Masters are created from the params at the first ``step`` (or ``load_state_dict``), as in
    Paddle, and replace them in ``param_groups``; after each step the params receive the
    masters rounded to their dtype. ``state_dict`` carries the masters under
    ``"master_weights"``.
    """

    _master_pairs: list[tuple[Tensor, Tensor]] | None = None  # (param, its float32 master)

    def _paddle_compat_grads(self) -> list[Tensor]:
        """The grads this optimizer will use (for GradScaler): the low-precision params' own
        grads (or their float32 ``main_grad``), and the other params' grads."""
        grads = [grad_of(p) for p, _ in self._master_pairs or ()]
        low = {id(m) for _, m in self._master_pairs or ()}
        for group in self.param_groups:
            grads += [grad_of(p) for p in group["params"] if id(p) not in low]
        return [g for g in grads if g is not None]

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Step the float32 masters with the params' grads (as float32), then round the params
        from them."""
        pairs = self._create_masters()
        self._sync_grads()
        loss = super().step(_closure_then(closure, self._sync_grads))
        with torch.no_grad():
            for param, master in pairs:
                param.copy_(master)
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the grads of the masters and of the low-precision params (``main_grad`` too), the same way."""
        super().zero_grad(set_to_none)
        for param, _ in self._master_pairs or ():
            clear_grads(param, set_to_none)

    def state_dict(self) -> dict[str, Any]:
        """The optimizer's state dict, plus the masters under ``"master_weights"``."""
        state = super().state_dict()
        if self._master_pairs is not None:
            index = {id(m): i for i, m in enumerate(p for g in self.param_groups for p in g["params"])}
            state["master_weights"] = {index[id(m)]: m.detach().clone() for _, m in self._master_pairs}
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a ``state_dict()``; its ``"master_weights"`` go to the masters and, rounded, to
        the params."""
        state_dict = dict(state_dict)
        masters = state_dict.pop("master_weights", None)
        pairs = self._create_masters()  # so that float state is loaded as float32, onto the masters
        super().load_state_dict(state_dict)
        if masters:
            flat = [p for g in self.param_groups for p in g["params"]]
            by_master = {id(m): p for p, m in pairs}
            with torch.no_grad():
                for i, value in masters.items():
                    flat[i].copy_(value)
                    by_master[id(flat[i])].copy_(flat[i])

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_master_pairs": self._master_pairs}

    def _create_masters(self) -> list[tuple[Tensor, Tensor]]:
        """The (param, master) pairs, created at the first call."""
        if self._master_pairs is not None:
            return self._master_pairs
        pairs: list[tuple[Tensor, Tensor]] = []
        for group in self.param_groups:
            for i, param in enumerate(group["params"]):
                if param.dtype in _LOW:
                    master = param.detach().float().requires_grad_(param.requires_grad)
                    if param in self.state:
                        self.state[master] = self.state.pop(param)
                    group["params"][i] = master
                    pairs.append((param, master))
        self._master_pairs = pairs
        return pairs

    def _sync_grads(self) -> None:
        for param, master in self._master_pairs or ():
            grad = grad_of(param)
            master.grad = None if grad is None else grad.float()


class MainGradMixin(_Mixin):
    """Makes a torch optimizer without master weights step with ``master_grad``'s grads.

    Paddle's optimizer kernels step low-precision parameters with float32 gradients directly;
    torch optimizers need a gradient of the parameter's dtype. So before each step every
    low-precision parameter with a ``main_grad`` (accumulated in float32) gets it as ``.grad``,
    rounded to its dtype; ``zero_grad`` clears ``main_grad`` too, as it clears ``.grad``.
    """

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Give each low-precision param its ``main_grad`` as ``.grad``, then step."""
        self._load_main_grads()
        return super().step(_closure_then(closure, self._load_main_grads))

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the grads and every ``main_grad`` the same way: drop them, or zero them in place."""
        super().zero_grad(set_to_none)
        for group in self.param_groups:
            for param in group["params"]:
                clear_grads(param, set_to_none)

    def _load_main_grads(self) -> None:
        for group in self.param_groups:
            for param in group["params"]:
                main = main_grad_of(param)
                if main is not None and param.dtype in _LOW:
                    param.grad = main.to(param.dtype)


def _closure_then(closure: Callable[[], Any] | None, then: Callable[[], None]) -> Callable[[], Any] | None:
    """A step closure that also runs ``then`` after the user's, so that the grads it makes reach
    the tensors the optimizer steps (None stays None)."""
    if closure is None:
        return None

    def wrapped() -> Any:
        with torch.enable_grad():
            loss = closure()
        then()
        return loss

    return wrapped


_OptimizerClass = type[torch.optim.Optimizer]
_mixed_classes: dict[tuple[type, _OptimizerClass], _OptimizerClass] = {}


def _mixed(mixin: type, cls: _OptimizerClass) -> _OptimizerClass:
    """``cls`` with ``mixin`` in front (one class per pair)."""
    if (mixin, cls) not in _mixed_classes:
        mixed = type(cls.__name__, (mixin, cls), {"__module__": cls.__module__})
        _mixed_classes[mixin, cls] = cast(_OptimizerClass, mixed)  # a subclass of cls, made at run time
    return _mixed_classes[mixin, cls]


def _restore_mixed(mixin: type, cls: _OptimizerClass) -> torch.optim.Optimizer:
    """Unpickling: an empty instance of the mixed class; its state follows."""
    mixed = _mixed(mixin, cls)
    return mixed.__new__(mixed)


def _mix_into(optimizer: torch.optim.Optimizer, mixin: type) -> None:
    if isinstance(optimizer, _Mixin):  # decorated before: the first decorate's choice stays
        return
    optimizer.__class__ = _mixed(mixin, type(optimizer))
    if getattr(optimizer.__dict__.get("step"), "_wrapped_by_lr_sched", False):
        # An LR scheduler created earlier bound the old class's step; rebind it to ours.
        optimizer_ref = weakref.ref(optimizer)

        def step(*args: Any, **kwargs: Any) -> Any:
            opt = optimizer_ref()
            if opt is None:
                raise ReferenceError("the optimizer this step belongs to no longer exists")
            opt._opt_called = True  # type: ignore[attr-defined]  # torch's LR scheduler reads it
            return type(opt).step(opt, *args, **kwargs)

        step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]  # torch's LR scheduler's mark
        optimizer.step = step  # type: ignore[method-assign]  # an instance attribute, as torch's is
