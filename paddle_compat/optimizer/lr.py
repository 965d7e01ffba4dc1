"""``paddle.optimizer.lr``: Paddle 3.3.1's learning-rate schedulers, in plain Python.

A scheduler holds the current rate as a Python float (``last_lr``); calling it returns that rate and
``step()`` moves it on. Hand one to an optimizer of ``paddle_compat.optimizer`` as
``learning_rate=`` and the optimizer reads it at each step, as Paddle's do::

    from paddle_compat.optimizer import SGD, lr

    sched = lr.StepDecay(learning_rate=0.1, step_size=30, gamma=0.5)
    opt = SGD(learning_rate=sched, parameters=model.parameters())
    for epoch in range(90):
        train_one_epoch(model, opt)
        sched.step()

Every formula is evaluated with the same Python float operations, in the same order, as Paddle
3.3.1's, so the rates are bitwise Paddle's over any number of steps, and ``state_dict()`` has
Paddle's keys. What differs from Paddle is said in each class; in all of them:

- bad arguments raise ``TypeError``/``ValueError`` naming the argument (Paddle asserts some, and
  accepts NaN, infinite or negative values that later give a NaN, negative or crashing rate);
- ``set_state_dict`` checks the whole dict before changing anything and raises ``KeyError``
  naming every missing key (Paddle raises ``RuntimeError`` at the first, after loading the keys
  before it); a ``step()`` that raises (``OneCycleLR`` past its last step) changes nothing;
- ``ReduceOnPlateau.step`` takes ``torch.Tensor`` metrics where Paddle takes ``paddle.Tensor``.

A scheduler of your own subclasses ``LRScheduler`` and defines ``get_lr()`` (computing the rate
from ``self.last_epoch``, ``self.base_lr``, ``self.last_lr``), as in Paddle.

Every scheduler also speaks torch's scheduler protocol, by added names only, so PyTorch's training
frameworks take it as one of torch's (Lightning's ``configure_optimizers``, Accelerate's
``prepare``, Hugging Face's ``Trainer(optimizers=...)``): it is a ``torch.optim.lr_scheduler.LRScheduler``
(``ReduceOnPlateau`` a ``ReduceLROnPlateau``), with ``get_last_lr()``, ``load_state_dict()``,
``optimizer`` (the first optimizer it drives) and ``last_epoch``; and the ``lr`` of every
parameter group it drives follows ``step()`` and ``set_state_dict()`` at once, as torch's
schedulers set it (Paddle's optimizers read the rate at their next step).
"""

from __future__ import annotations

import functools
import math
import sys
import warnings
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

import torch
import torch.optim.lr_scheduler as _torch_lr

from .. import _checks
from .._stacklevel import user_stacklevel

__all__ = [
    "LRScheduler",
    "NoamDecay",
    "PiecewiseDecay",
    "NaturalExpDecay",
    "InverseTimeDecay",
    "PolynomialDecay",
    "LinearWarmup",
    "ExponentialDecay",
    "MultiStepDecay",
    "StepDecay",
    "LambdaDecay",
    "ReduceOnPlateau",
    "CosineAnnealingDecay",
    "MultiplicativeDecay",
    "OneCycleLR",
    "CyclicLR",
    "LinearLR",
    "CosineAnnealingWarmRestarts",
]


# --- argument checks -----------------------------------------------------------------------------
def _base_lr(value: Any, name: str = "learning_rate") -> None:
    """Paddle's check of a scheduler's initial rate (its texts), plus NaN and infinity."""
    if not _checks.is_real(value):
        which = "" if name == "learning_rate" else f" ({name})"  # Paddle's text, naming the argument
        raise TypeError(f"The type of learning rate{which} must be float, but received {type(value)}")
    if not (value >= 0) or math.isinf(value):
        raise ValueError(f"Invalid learning rate: {value} ({name} should be a finite number >= 0)")


# --- torch's protocol ----------------------------------------------------------------------------
_Method = TypeVar("_Method", bound=Callable[..., Any])

# torch's base classes, typed as Any: Paddle's names they share keep Paddle's meaning (``get_lr()``
# returns one rate, not torch's list; ``ReduceOnPlateau.best`` starts as None).
_TorchLRScheduler: Any = _torch_lr.LRScheduler
_TorchReduceLROnPlateau: Any = _torch_lr.ReduceLROnPlateau


def _sets_groups(method: _Method) -> _Method:
    """Wrap a method that moves the rate (``step``, ``set_state_dict``): afterwards the groups of
    the optimizers the scheduler drives hold the new rate, and ``step`` counts for torch's
    ``_step_count`` (Accelerate reads it)."""

    @functools.wraps(method)
    def wrapper(self: LRScheduler, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        if method.__name__ == "step":
            self._step_count += 1
        for optimizer in self._driven():
            optimizer._read_lr_scheduler(at_step=False)
        return result

    return wrapper  # type: ignore[return-value]


# --- the base class ------------------------------------------------------------------------------
class LRScheduler(_TorchLRScheduler):
    """Base class of the schedulers: the current rate, ``step()``, checkpoints.

    Subclass it and define ``get_lr()`` for a schedule of your own; ``step()`` increments
    ``last_epoch`` and stores ``get_lr()`` in ``last_lr``. A subclass may also define
    ``_get_closed_form_lr()``, which ``step(epoch)`` then uses instead of ``get_lr()`` (as Paddle).

    Args:
        learning_rate: the initial rate (``base_lr``), a float or int >= 0.
        last_epoch: the index of the last epoch; the constructor steps once, so the scheduler
            starts at ``last_epoch + 1`` (0 by default). Pass a later value to resume.
        verbose: print ``Epoch N: <Class> set learning rate to <lr>.`` at each step.

    Attributes: ``base_lr``, ``last_lr`` (the current rate), ``last_epoch``, ``verbose``; and
    torch's ``optimizer``, ``get_last_lr()``, ``load_state_dict()`` (see the module).

    Example::

        class Halving(LRScheduler):
            def get_lr(self):
                return self.base_lr * 0.5 ** self.last_epoch

        sched = Halving(learning_rate=0.1)
        sched.step()
        sched()  # 0.05
    """

    base_lr: float
    last_lr: float
    last_epoch: int
    verbose: bool
    # Keys saved beside Paddle's ones, and loaded when a dict has them (a dict saved by Paddle does not).
    _extra_state_keys: tuple[str, ...] = ()
    # torch's count of step() calls, the constructor's included (Accelerate reads and writes it).
    _step_count: int = 0
    # The optimizers whose groups' lr this scheduler sets (weak: each optimizer holds its scheduler).
    _compat_optimizers: tuple[weakref.ref[torch.optim.Optimizer], ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("step", "set_state_dict"):
            if name in cls.__dict__:
                setattr(cls, name, _sets_groups(cls.__dict__[name]))

    def __init__(self, learning_rate: float = 0.1, last_epoch: int = -1, verbose: bool = False) -> None:
        _base_lr(learning_rate)
        _checks.real("last_epoch", last_epoch)
        _checks.flag("verbose", verbose)
        self.base_lr = float(learning_rate)
        self.last_lr = float(learning_rate)
        self.last_epoch = last_epoch
        self.verbose = verbose
        self.step()

    def __call__(self) -> float:
        """The current learning rate (``last_lr``)."""
        return self.last_lr

    def __lt__(self, other: object) -> bool:
        """Refused: a scheduler is not a rate. Met where a ``torch.optim`` optimizer checks the
        ``lr=`` it was given (torch's own message would be ``'<' not supported ...``)."""
        raise TypeError(
            f"a Paddle learning-rate scheduler ({type(self).__name__}) is not a number: a torch.optim "
            "optimizer takes a float as lr= (and torch's schedulers); pass this one as learning_rate= "
            "to a paddle_compat.optimizer optimizer, or call it for its current rate"
        )

    __le__ = __gt__ = __ge__ = __lt__

    @_sets_groups
    def step(self, epoch: int | None = None) -> None:
        """Move to the next epoch (``epoch=None``) or to ``epoch``, and compute its rate.

        With an explicit ``epoch`` a scheduler that has a closed form (``CosineAnnealingDecay``)
        uses it; the others compute ``get_lr()`` as for a plain step.
        """
        previous = self.last_epoch
        if epoch is None:
            self.last_epoch += 1
            compute = self.get_lr
        else:
            _checks.real("epoch", epoch)
            self.last_epoch = epoch
            compute = getattr(self, "_get_closed_form_lr", self.get_lr)
        try:
            lr = compute()
        except BaseException:
            self.last_epoch = previous
            raise
        self.last_lr = lr
        self._report()

    def _report(self) -> None:
        if self.verbose:
            print(f"Epoch {self.last_epoch}: {type(self).__name__} set learning rate to {self.last_lr}.")

    def get_lr(self) -> float:
        """The rate of epoch ``self.last_epoch`` (to be defined by subclasses)."""
        raise NotImplementedError

    # --- torch's protocol ----------------------------------------------------------------------
    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """torch's ``optimizer``: the first optimizer given this scheduler as its rate that still
        drives by it (``None`` before any). Every one of them follows ``step()``."""
        return next(iter(self._driven()), None)

    def get_last_lr(self) -> list[float | torch.Tensor]:
        """torch's ``get_last_lr()``: the current rate once per parameter group of ``optimizer``
        (once without one)."""
        optimizer = self.optimizer
        return [self.last_lr] * (len(optimizer.param_groups) if optimizer is not None else 1)

    def _driven(self) -> list[Any]:  # paddle_compat's optimizers (which import this module)
        alive = [optimizer for ref in self._compat_optimizers if (optimizer := ref()) is not None]
        return [optimizer for optimizer in alive if getattr(optimizer, "_compat_lr_scheduler", None) is self]

    def _drive(self, optimizer: torch.optim.Optimizer) -> None:
        """Register ``optimizer`` as driven by this scheduler (its constructor or ``set_lr_scheduler``)."""
        if all(ref() is not optimizer for ref in self._compat_optimizers):
            self._compat_optimizers = (*(ref for ref in self._compat_optimizers if ref() is not None),
                                       weakref.ref(optimizer))

    def __getstate__(self) -> dict[str, Any]:
        """The state without the optimizers driven (weak references; an optimizer copied or
        unpickled with its scheduler registers again)."""
        state = dict(self.__dict__)
        state.pop("_compat_optimizers", None)
        return state

    # --- checkpoints ---------------------------------------------------------------------------
    def state_keys(self) -> None:
        """Set ``self.keys``: the attributes ``state_dict()`` saves (subclasses may add some)."""
        self.keys = ["last_epoch", "last_lr"]

    def state_dict(self) -> dict[str, Any]:
        """The attributes named by ``state_keys()`` (a one-element tensor is saved as a float)."""
        self.state_keys()
        saved: dict[str, Any] = {}
        for key in [*self.keys, *self._extra_state_keys]:
            if key not in self.__dict__:
                continue
            value = self.__dict__[key]
            if isinstance(value, torch.Tensor):
                if value.numel() != 1:
                    raise ValueError(f"{key} should have 1 element to be saved, but it has {value.numel()}")
                value = float(value)
            saved[key] = value
        return saved

    @_sets_groups
    def set_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what ``state_dict()`` saved (also a dict saved by Paddle).

        Every key of ``state_keys()`` must be there (``KeyError`` naming the missing ones, nothing
        changed); unknown keys are ignored with Paddle's warning.
        """
        self._check_state_dict(state_dict)
        for key in [*self.keys, *(k for k in self._extra_state_keys if k in state_dict)]:
            self.__dict__[key] = state_dict[key]
        unused = set(state_dict) - set(self.keys) - set(self._extra_state_keys) - set(self._nested_state_keys())
        if unused:
            warnings.warn(
                "There are some unused values in state_dict. Maybe the optimizer have different "
                "'LearningRateDecay' when invoking state_dict and set_dict",
                stacklevel=user_stacklevel(),  # the user's line, also through opt.load_state_dict
            )

    def set_dict(self, state_dict: dict[str, Any]) -> None:
        """Paddle's other name for ``set_state_dict``."""
        self.set_state_dict(state_dict)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's name for ``set_state_dict`` (not in Paddle): with ``state_dict`` it makes a
        scheduler a ``Stateful`` entry of a ``torch.distributed.checkpoint`` state dict."""
        self.set_state_dict(state_dict)

    def _nested_state_keys(self) -> tuple[str, ...]:
        """Keys holding the state of a wrapped scheduler (``LinearWarmup``)."""
        return ()

    def _check_state_dict(self, state_dict: Any) -> None:
        """Raise, changing nothing, unless ``set_state_dict(state_dict)`` can load all of it."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict should be a dict, but received {type(state_dict).__name__}")
        self.state_keys()
        missing = [key for key in self.keys if key not in state_dict]
        if missing:
            raise KeyError(f"the state_dict of {type(self).__name__} lacks the keys {missing}")
        if "last_epoch" in self.keys:  # what step() adds to, and get_lr() computes from
            _checks.real("state_dict['last_epoch']", state_dict["last_epoch"])
        last_lr = state_dict.get("last_lr")
        if "last_lr" in self.keys and not (_checks.is_real(last_lr) and math.isfinite(last_lr) and last_lr >= 0):
            raise ValueError(
                f"state_dict['last_lr'] should be a finite learning rate >= 0, but received {last_lr!r}"
            )


# --- the schedulers ------------------------------------------------------------------------------
class NoamDecay(LRScheduler):
    """The Transformer schedule: ``learning_rate * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)``.

    At epoch 0 the first term is taken as 1. ``warmup_steps`` must be > 0 here (Paddle fails with
    ``ZeroDivisionError`` on 0 and gives complex numbers below).

    Example: ``NoamDecay(d_model=512, warmup_steps=4000)``
    """

    d_model: int
    warmup_steps: int

    def __init__(
        self, d_model: int, warmup_steps: int, learning_rate: float = 1.0, last_epoch: int = -1, verbose: bool = False
    ) -> None:
        _checks.real("d_model", d_model)
        if d_model <= 0:
            raise ValueError("d_model should be grater than 0")
        _checks.real("warmup_steps", warmup_steps)
        _checks.above("warmup_steps", warmup_steps, 0)
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        first = 1 if self.last_epoch == 0 else self.last_epoch ** (-0.5)
        second = self.warmup_steps ** (-1.5) * self.last_epoch
        return self.base_lr * self.d_model ** (-0.5) * min(first, second)


class PiecewiseDecay(LRScheduler):
    """``values[i]`` while ``epoch < boundaries[i]``, then the last value.

    As in Paddle, ``values`` needs at least ``len(boundaries) + 1`` entries (the last one is used
    after the last boundary) and ``base_lr`` is 0.1, whatever the values. Here the values must be
    numbers >= 0 (Paddle takes anything).

    Example: ``PiecewiseDecay(boundaries=[100, 200], values=[0.1, 0.01, 0.001])``
    """

    boundaries: Sequence[int]
    values: Sequence[float]

    def __init__(
        self, boundaries: Sequence[int], values: Sequence[float], last_epoch: int = -1, verbose: bool = False
    ) -> None:
        for name, seq in (("boundaries", boundaries), ("values", values)):
            if not isinstance(seq, (list, tuple)):
                raise TypeError(f"{name} should be a list or tuple, but received {type(seq).__name__}")
            for i, item in enumerate(seq):
                _checks.real(f"{name}[{i}]", item)
        if len(boundaries) == 0:
            raise ValueError("The boundaries cannot be empty.")
        if len(values) <= len(boundaries):
            raise ValueError(
                f"The values have one more element than boundaries, but received len(values) [{len(values)}] "
                f"< len(boundaries) + 1 [{len(boundaries) + 1}]."
            )
        for i, value in enumerate(values):
            _checks.at_least(f"values[{i}]", value, 0)
        self.boundaries = boundaries
        self.values = values
        super().__init__(last_epoch=last_epoch, verbose=verbose)

    def get_lr(self) -> float:
        for boundary, value in zip(self.boundaries, self.values):
            if self.last_epoch < boundary:
                return value
        return self.values[len(self.values) - 1]


class NaturalExpDecay(LRScheduler):
    """``learning_rate * exp(-gamma * epoch)``, ``gamma > 0`` (Paddle asserts it).

    Example: ``NaturalExpDecay(learning_rate=0.5, gamma=0.1)``
    """

    gamma: float

    def __init__(self, learning_rate: float, gamma: float, last_epoch: int = -1, verbose: bool = False) -> None:
        _checks.real("gamma", gamma)
        _checks.above("gamma", gamma, 0.0)
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * math.exp(-1 * self.gamma * self.last_epoch)


class InverseTimeDecay(LRScheduler):
    """``learning_rate / (1 + gamma * epoch)``; ``gamma >= 0`` here (Paddle takes any, and a
    negative one reaches a division by zero or a negative rate).

    Example: ``InverseTimeDecay(learning_rate=0.5, gamma=0.1)``
    """

    gamma: float

    def __init__(self, learning_rate: float, gamma: float, last_epoch: int = -1, verbose: bool = False) -> None:
        _checks.real("gamma", gamma)
        _checks.at_least("gamma", gamma, 0.0)
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr / (1 + self.gamma * self.last_epoch)


class PolynomialDecay(LRScheduler):
    """``(learning_rate - end_lr) * (1 - epoch / decay_steps)**power + end_lr``.

    Without ``cycle`` the epoch stops at ``decay_steps``; with it, ``decay_steps`` grows to the next
    multiple of itself at or above the epoch. ``decay_steps`` (a positive int) and ``power > 0`` are
    asserted by Paddle; ``end_lr >= 0`` is checked here only.

    Example: ``PolynomialDecay(learning_rate=0.5, decay_steps=20, end_lr=0.0, power=2.0)``
    """

    decay_steps: int
    end_lr: float
    power: float
    cycle: bool

    def __init__(
        self,
        learning_rate: float,
        decay_steps: int,
        end_lr: float = 0.0001,
        power: float = 1.0,
        cycle: bool = False,
        last_epoch: int = -1,
        verbose: bool = False,
    ) -> None:
        _checks.integer("decay_steps", decay_steps)
        _checks.above("decay_steps", decay_steps, 0)
        _checks.real("end_lr", end_lr)
        _checks.at_least("end_lr", end_lr, 0)
        _checks.real("power", power)
        _checks.above("power", power, 0.0)
        _checks.flag("cycle", cycle)
        self.decay_steps = decay_steps
        self.end_lr = end_lr
        self.power = power
        self.cycle = cycle
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        epoch = self.last_epoch
        decay_steps = self.decay_steps
        if self.cycle:
            cycles = 1 if self.last_epoch == 0 else math.ceil(float(self.last_epoch) / float(self.decay_steps))
            decay_steps = self.decay_steps * cycles
        else:
            epoch = min(self.last_epoch, self.decay_steps)
        return (self.base_lr - self.end_lr) * (1 - float(epoch) / float(decay_steps)) ** self.power + self.end_lr


class LinearWarmup(LRScheduler):
    """A linear ramp from ``start_lr`` to ``end_lr`` over ``warmup_steps``, then ``learning_rate``.

    ``learning_rate`` is a float, or another scheduler, which takes over after the warm-up and is
    stepped to ``epoch - warmup_steps`` at each step. Its state is saved under ``"LinearWarmup_LR"``.
    ``warmup_steps`` must be a positive int and ``end_lr > start_lr`` (Paddle asserts both).
    Paddle warns of unused values whenever it loads the state of a warm-up around a scheduler;
    here it does not.

    Example::

        sched = LinearWarmup(CosineAnnealingDecay(0.1, T_max=100), warmup_steps=10, start_lr=0.0, end_lr=0.1)
    """

    learning_rate: float | LRScheduler
    warmup_steps: int
    start_lr: float
    end_lr: float

    def __init__(
        self,
        learning_rate: float | LRScheduler,
        warmup_steps: int,
        start_lr: float,
        end_lr: float,
        last_epoch: int = -1,
        verbose: bool = False,
    ) -> None:
        if not (_checks.is_real(learning_rate) or isinstance(learning_rate, LRScheduler)):
            raise TypeError(
                "the type of learning_rate should be [int, float or LRScheduler], the current type is "
                f"{learning_rate}"
            )
        if not isinstance(learning_rate, LRScheduler):
            _checks.real("learning_rate", learning_rate)
            _checks.at_least("learning_rate", learning_rate, 0)
        _checks.integer("warmup_steps", warmup_steps)
        _checks.above("warmup_steps", warmup_steps, 0)
        _checks.real("start_lr", start_lr)
        _checks.at_least("start_lr", start_lr, 0)  # the base class would name it learning_rate
        _checks.real("end_lr", end_lr)
        if not end_lr > start_lr:
            raise ValueError(f"end_lr {end_lr} must be greater than start_lr {start_lr}")
        self.learning_rate = learning_rate
        self.warmup_steps = warmup_steps
        self.start_lr = start_lr
        self.end_lr = end_lr
        super().__init__(start_lr, last_epoch, verbose)

    def get_lr(self) -> float:
        if self.last_epoch < self.warmup_steps:
            ramp = (self.end_lr - self.start_lr) * float(self.last_epoch) / float(self.warmup_steps)
            return ramp + self.start_lr
        if isinstance(self.learning_rate, LRScheduler):
            self.learning_rate.step(self.last_epoch - self.warmup_steps)
            return self.learning_rate()
        return self.learning_rate

    def _nested_state_keys(self) -> tuple[str, ...]:
        return ("LinearWarmup_LR",)

    def state_dict(self) -> dict[str, Any]:
        saved = super().state_dict()
        if isinstance(self.learning_rate, LRScheduler):
            saved["LinearWarmup_LR"] = self.learning_rate.state_dict()
        return saved

    def _check_state_dict(self, state_dict: Any) -> None:
        super()._check_state_dict(state_dict)
        if isinstance(self.learning_rate, LRScheduler):
            if "LinearWarmup_LR" not in state_dict:
                raise KeyError("the state_dict of LinearWarmup lacks the keys ['LinearWarmup_LR']")
            self.learning_rate._check_state_dict(state_dict["LinearWarmup_LR"])

    def set_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._check_state_dict(state_dict)  # the wrapped scheduler's too, before anything changes
        super().set_state_dict(state_dict)
        if isinstance(self.learning_rate, LRScheduler):
            self.learning_rate.set_state_dict(state_dict["LinearWarmup_LR"])


class ExponentialDecay(LRScheduler):
    """``learning_rate * gamma**epoch``, ``0 < gamma < 1`` (Paddle asserts it).

    Example: ``ExponentialDecay(learning_rate=0.5, gamma=0.9)``
    """

    gamma: float

    def __init__(self, learning_rate: float, gamma: float, last_epoch: int = -1, verbose: bool = False) -> None:
        _checks.real("gamma", gamma)
        if not 0.0 < gamma < 1.0:
            raise ValueError(f"gamma should be in (0.0, 1.0) so that the learning rate decays, but received {gamma}")
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * self.gamma**self.last_epoch


def _check_decay_factor(gamma: Any) -> None:
    _checks.real("gamma", gamma)
    if gamma >= 1.0:
        raise ValueError("gamma should be < 1.0.")
    _checks.at_least("gamma", gamma, 0.0)


class MultiStepDecay(LRScheduler):
    """``learning_rate * gamma**k``, ``k`` the number of ``milestones`` at or below the epoch.

    ``milestones`` is an increasing list or tuple and ``0 <= gamma < 1`` (Paddle takes a negative
    gamma).

    Example: ``MultiStepDecay(learning_rate=0.5, milestones=[30, 80], gamma=0.1)``
    """

    milestones: Sequence[int]
    gamma: float

    def __init__(
        self,
        learning_rate: float,
        milestones: Sequence[int],
        gamma: float = 0.1,
        last_epoch: int = -1,
        verbose: bool = False,
    ) -> None:
        if not isinstance(milestones, (tuple, list)):
            raise TypeError(
                f"The type of 'milestones' in 'MultiStepDecay' must be 'tuple, list', but received {type(milestones)}."
            )
        for i, milestone in enumerate(milestones):
            _checks.real(f"milestones[{i}]", milestone)
        if not all(milestones[i] < milestones[i + 1] for i in range(len(milestones) - 1)):
            raise ValueError("The elements of milestones must be incremented")
        _check_decay_factor(gamma)
        self.milestones = milestones
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        for i, milestone in enumerate(self.milestones):
            if self.last_epoch < milestone:
                return self.base_lr * self.gamma**i
        return self.base_lr * self.gamma ** len(self.milestones)


class StepDecay(LRScheduler):
    """``learning_rate * gamma**(epoch // step_size)``; ``step_size`` a positive int, ``0 <= gamma < 1``.

    Example: ``StepDecay(learning_rate=0.5, step_size=5, gamma=0.8)``
    """

    step_size: int
    gamma: float

    def __init__(
        self, learning_rate: float, step_size: int, gamma: float = 0.1, last_epoch: int = -1, verbose: bool = False
    ) -> None:
        if not _checks.is_int(step_size):
            raise TypeError(f"The type of 'step_size' must be 'int', but received {type(step_size)}.")
        _check_decay_factor(gamma)
        _checks.above("step_size", step_size, 0)
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)


def _check_lambda(cls: str, lr_lambda: Any) -> None:
    if not callable(lr_lambda):
        raise TypeError(f"The type of 'lr_lambda' in '{cls}' must be 'function', but received {type(lr_lambda)}.")


class LambdaDecay(LRScheduler):
    """``learning_rate * lr_lambda(epoch)``.

    Example: ``LambdaDecay(learning_rate=0.5, lr_lambda=lambda epoch: 0.95**epoch)``
    """

    lr_lambda: Callable[[int], float]

    def __init__(
        self, learning_rate: float, lr_lambda: Callable[[int], float], last_epoch: int = -1, verbose: bool = False
    ) -> None:
        _check_lambda("LambdaDecay", lr_lambda)
        self.lr_lambda = lr_lambda
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * self.lr_lambda(self.last_epoch)


class MultiplicativeDecay(LRScheduler):
    """``learning_rate * lr_lambda(1) * ... * lr_lambda(epoch)`` (recomputed from epoch 1 at each step, as Paddle).

    Example: ``MultiplicativeDecay(learning_rate=0.5, lr_lambda=lambda epoch: 0.95)``
    """

    lr_lambda: Callable[[int], float]

    def __init__(
        self, learning_rate: float, lr_lambda: Callable[[int], float], last_epoch: int = -1, verbose: bool = False
    ) -> None:
        _check_lambda("MultiplicativeDecay", lr_lambda)
        self.lr_lambda = lr_lambda
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        lr = self.base_lr
        for epoch in range(1, self.last_epoch + 1):
            lr = lr * self.lr_lambda(epoch)
        return lr


def _numpy() -> Any:
    """numpy when the program has imported it (paddle_compat does not need it otherwise)."""
    return sys.modules.get("numpy")


class ReduceOnPlateau(LRScheduler, _TorchReduceLROnPlateau):
    """Multiply the rate by ``factor`` when a metric has not improved for ``patience`` steps.

    ``step(metrics)`` takes the metric (a float, an int, a numpy scalar or a one-element numpy array
    or ``torch.Tensor``). A metric better than the best so far (``mode="min"``: lower; ``"max"``:
    higher; by more than ``threshold``, relative to the best with ``threshold_mode="rel"``) resets
    the count of bad steps; more than ``patience`` bad steps in a row multiply the rate by
    ``factor`` (not below ``min_lr``, and only when it drops by more than ``epsilon``), then
    ``cooldown`` steps are not counted. Tensor metrics are compared in their own dtype, as Paddle.

    Differs from Paddle: the metric is checked before anything changes, a metric of the wrong size
    raises ``ValueError`` (Paddle asserts), and a tensor metric is kept as a detached copy (Paddle
    keeps the caller's tensor, which a later in-place update would change). ``factor``,
    ``patience``, ``cooldown``, ``min_lr`` and ``epsilon`` must be >= 0 here.

    Example::

        sched = ReduceOnPlateau(learning_rate=0.1, patience=5)
        for epoch in range(100):
            sched.step(validation_loss(model))
    """

    mode: str  # "min" or "max"
    factor: float
    patience: int
    threshold: float
    threshold_mode: str  # "rel" or "abs"
    cooldown: int
    min_lr: float
    epsilon: float

    def __init__(
        self,
        learning_rate: float,
        mode: str = "min",  # "min" or "max"
        factor: float = 0.1,
        patience: int = 10,
        threshold: float = 1e-4,
        threshold_mode: str = "rel",  # "rel" or "abs"
        cooldown: int = 0,
        min_lr: float = 0,
        epsilon: float = 1e-8,
        verbose: bool = False,
    ) -> None:
        for name, text in (("mode", mode), ("threshold_mode", threshold_mode)):
            if not isinstance(text, str):
                raise TypeError(f"{name} should be a str, but received {type(text).__name__}")
        mode = mode.lower()
        if mode not in ("min", "max"):
            raise ValueError("mode: " + mode + " is unknown!")
        _checks.real("factor", factor)
        if factor >= 1.0:  # Paddle's text says "gamma"
            raise ValueError(f"factor should be < 1.0 (new_lr = origin_lr * factor), but received {factor}")
        _checks.at_least("factor", factor, 0.0)
        threshold_mode = threshold_mode.lower()
        if threshold_mode not in ("rel", "abs"):
            raise ValueError("threshold mode: " + threshold_mode + " is unknown!")
        if not _checks.is_real(learning_rate):
            raise TypeError(
                f"The type of 'learning_rate' in 'ReduceOnPlateau' must be 'float', but received {type(learning_rate)}."
            )
        _base_lr(learning_rate)
        for name, count in (("patience", patience), ("cooldown", cooldown)):
            _checks.integer(name, count)
            _checks.at_least(name, count, 0)
        _checks.real("threshold", threshold)
        _checks.flag("verbose", verbose)  # no base constructor here, as in Paddle
        for name, value in (("min_lr", min_lr), ("epsilon", epsilon)):
            _checks.real(name, value)
            _checks.at_least(name, value, 0)
        self.mode = mode
        self.factor = factor
        self.threshold_mode = threshold_mode
        self.patience = patience
        self.threshold = threshold
        self.cooldown = cooldown
        self.min_lr = min_lr
        self.epsilon = epsilon
        self.cooldown_counter = 0
        self.best = None
        self.num_bad_epochs = 0
        # Paddle does not call the base constructor: no first step, and the epoch count starts at 0.
        self.base_lr = float(learning_rate)
        self.last_lr = float(learning_rate)
        self.last_epoch = 0
        self.verbose = verbose

    def state_keys(self) -> None:
        self.keys = ["cooldown_counter", "best", "num_bad_epochs", "last_epoch", "last_lr"]

    def step(self, metrics: Any, epoch: int | None = None) -> None:  # type: ignore[override]
        """Take the metric of the epoch just finished and lower the rate if it has plateaued.

        Args:
            metrics: the metric (see the class).
            epoch: the epoch's index; by default the last one plus 1.
        """
        metrics = self._checked_metric(metrics)
        if epoch is not None:
            _checks.real("epoch", epoch)
        self.last_epoch = self.last_epoch + 1 if epoch is None else epoch
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            return
        if self.best is None or self._is_better(metrics, self.best):
            self.best = metrics
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.num_bad_epochs > self.patience:
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
            new_lr = max(self.last_lr * self.factor, self.min_lr)
            if self.last_lr - new_lr > self.epsilon:
                self.last_lr = new_lr
                self._report()

    @staticmethod
    def _checked_metric(metrics: Any) -> Any:
        np = _numpy()
        if isinstance(metrics, torch.Tensor):
            size = metrics.numel()
        elif np is not None and isinstance(metrics, np.ndarray):
            size = metrics.size
        elif _checks.is_real(metrics) or isinstance(metrics, bool) or (
            np is not None and isinstance(metrics, (np.float32, np.float64))
        ):
            return metrics
        else:
            raise TypeError(
                "metrics must be 'int', 'float', 'np.float64', 'numpy.ndarray' or 'torch.Tensor', "
                f"but receive {type(metrics)}"
            )
        if size != 1:
            raise ValueError(
                f"the size of metrics must be 1, but the current metrics.size is {size}. "
                "Maybe that you should call mean() to process it first."
            )
        return metrics.detach().clone() if isinstance(metrics, torch.Tensor) else metrics.copy()

    def _is_better(self, current: Any, best: Any) -> Any:
        if self.mode == "min":
            if self.threshold_mode == "rel":
                return current < best - best * self.threshold
            return current < best - self.threshold
        if self.threshold_mode == "rel":
            return current > best + best * self.threshold
        return current > best + self.threshold

    def _check_state_dict(self, state_dict: Any) -> None:
        super()._check_state_dict(state_dict)
        for key in ("cooldown_counter", "num_bad_epochs"):
            _checks.at_least(f"state_dict[{key!r}]", _checks.integer(f"state_dict[{key!r}]", state_dict[key]), 0)
        best = state_dict["best"]
        if best is not None:  # the next step compares the metric with it
            try:
                self._checked_metric(best)
            except (TypeError, ValueError):
                raise TypeError(
                    "state_dict['best'] should be None or a metric (a number, or a tensor or array of one element), "
                    f"but received {type(best).__name__}"
                ) from None


class CosineAnnealingDecay(LRScheduler):
    """Cosine annealing from ``learning_rate`` to ``eta_min`` over ``T_max`` epochs, and back.

    A plain ``step()`` uses Paddle's recursive form (from the previous rate); ``step(epoch)`` the
    closed form ``eta_min + (learning_rate - eta_min) * (1 + cos(pi * epoch / T_max)) / 2``.
    ``T_max`` must be a positive int (Paddle asserts it).

    Example: ``CosineAnnealingDecay(learning_rate=0.5, T_max=10)``
    """

    T_max: int
    eta_min: float

    def __init__(
        self, learning_rate: float, T_max: int, eta_min: float = 0, last_epoch: int = -1, verbose: bool = False
    ) -> None:
        if isinstance(T_max, bool) or not isinstance(T_max, int):
            raise TypeError(f"The type of 'T_max' in 'CosineAnnealingDecay' must be 'int', but received {type(T_max)}.")
        if not _checks.is_real(eta_min):
            raise TypeError(
                f"The type of 'eta_min' in 'CosineAnnealingDecay' must be 'float, int', but received {type(eta_min)}."
            )
        _checks.real("eta_min", eta_min)
        _checks.at_least("eta_min", eta_min, 0)  # Paddle takes it, and the rate turns negative
        _checks.above("T_max", T_max, 0)
        self.T_max = T_max
        self.eta_min = float(eta_min)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        if self.last_epoch == 0:
            return self.base_lr
        if (self.last_epoch - 1 - self.T_max) % (2 * self.T_max) == 0:
            return self.last_lr + (self.base_lr - self.eta_min) * (1 - math.cos(math.pi / self.T_max)) / 2
        ratio = (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / (
            1 + math.cos(math.pi * (self.last_epoch - 1) / self.T_max)
        )
        return ratio * (self.last_lr - self.eta_min) + self.eta_min

    def _get_closed_form_lr(self) -> float:
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2


class OneCycleLR(LRScheduler):
    """The one-cycle policy: up from ``max_learning_rate / divide_factor`` to ``max_learning_rate``
    over ``phase_pct`` of ``total_steps``, then down to ``end_learning_rate`` (``three_phase``: back
    to the initial rate first, then down), by cosine or linear annealing.

    Stepping past ``total_steps`` raises ``ValueError`` (and, here, changes nothing). Differs from
    Paddle: a first phase of zero length (``phase_pct * total_steps == 1``) raises ``ValueError``
    (Paddle: ``ZeroDivisionError``), and ``divide_factor`` must be > 0.

    Example: ``OneCycleLR(max_learning_rate=1.0, total_steps=100, end_learning_rate=0.0001)``
    """

    def __init__(
        self,
        max_learning_rate: float,
        total_steps: int,
        divide_factor: float = 25.0,
        end_learning_rate: float = 0.0001,
        phase_pct: float = 0.3,
        anneal_strategy: Literal["cos", "linear"] = "cos",
        three_phase: bool = False,
        last_epoch: int = -1,
        verbose: bool = False,
    ) -> None:
        if not _checks.is_real(max_learning_rate):
            raise TypeError(f"'max_learning_rate' must be 'float' or 'int', but received {type(max_learning_rate)}")
        _checks.real("max_learning_rate", max_learning_rate)
        if max_learning_rate < 0:
            raise ValueError("'max_learning_rate' must be a positive integer.")
        if not _checks.is_real(end_learning_rate):
            raise TypeError(f"'end_learning_rate' must be 'float' or 'int', but received {type(end_learning_rate)}")
        _checks.real("end_learning_rate", end_learning_rate)
        if end_learning_rate < 0:
            raise ValueError("'end_learning_rate' must be a positive integer.")
        if not _checks.is_int(total_steps):
            raise TypeError(f"'total_step' must be 'int', but received {type(total_steps)}")
        if total_steps <= 0:
            raise ValueError("'total_step' must be a positive integer.")
        if not isinstance(phase_pct, float):
            raise TypeError(f"'phase_pct' must be 'float', but received {type(phase_pct)}")
        if not 0 <= phase_pct <= 1:
            raise ValueError(f"'phase_pct' must be between 0 and 1, but received {phase_pct}")
        if not _checks.is_real(divide_factor):
            raise TypeError(f"'divide_factor' must be 'float' or 'int', but received {type(divide_factor)}")
        _checks.real("divide_factor", divide_factor)
        _checks.above("divide_factor", divide_factor, 0)
        _checks.flag("three_phase", three_phase)
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"'anneal_strategy' must by one of 'cos' or 'linear', but received {anneal_strategy}")
        if three_phase and phase_pct >= 0.5:
            raise ValueError("When three_phase is True, 'phase_pct' must be less than 0.5")
        if phase_pct * total_steps - 1 == 0:
            raise ValueError(
                f"phase_pct * total_steps should not be 1 (its first phase would last no step), but received "
                f"phase_pct={phase_pct}, total_steps={total_steps}"
            )
        self.total_steps = total_steps
        initial_lr = max_learning_rate / float(divide_factor)
        min_lr = float(end_learning_rate)
        # Phase boundaries (in steps), phase lengths and the rates at the boundaries, as Paddle.
        rise_end = phase_pct * total_steps - 1
        last = total_steps - 1
        if three_phase:
            fall_end = 2 * phase_pct * total_steps - 2
            self._step_config = [0, rise_end, fall_end, last, last]
            self._steps_size = [rise_end - 0, fall_end - rise_end, last - fall_end, last - fall_end]
            self._lr_config = [initial_lr, max_learning_rate, initial_lr, min_lr]
        else:
            self._step_config = [0, rise_end, last, last]
            self._steps_size = [rise_end - 0, last - rise_end, last - rise_end]
            self._lr_config = [initial_lr, max_learning_rate, min_lr]
        self.anneal_func = self._cos_annealing if anneal_strategy == "cos" else self._linear_annealing
        super().__init__(initial_lr, last_epoch, verbose)

    @staticmethod
    def _cos_annealing(start_lr: float, end_lr: float, pct: float) -> float:
        return end_lr + (start_lr - end_lr) / 2.0 * (math.cos(math.pi * pct) + 1)

    @staticmethod
    def _linear_annealing(start_lr: float, end_lr: float, pct: float) -> float:
        return (end_lr - start_lr) * pct + start_lr

    def get_lr(self) -> float:
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(
                f"Tried to step {step} times. However the number of total steps is {self.total_steps}"
            )
        last_phase = len(self._lr_config) - 2
        for i, (end_step, size) in enumerate(zip(self._step_config[1:], self._steps_size)):
            if step <= end_step or i == last_phase:
                pct = (step - self._step_config[i]) / size
                return self.anneal_func(self._lr_config[i], self._lr_config[i + 1], pct)
        raise AssertionError("unreachable: the last phase always answers")


class CyclicLR(LRScheduler):
    """Cycles between ``base_learning_rate`` and ``max_learning_rate``: up over ``step_size_up``
    steps, down over ``step_size_down`` (default: the same).

    ``mode``: ``"triangular"`` (constant amplitude), ``"triangular2"`` (halved each cycle),
    ``"exp_range"`` (times ``exp_gamma**iteration``); or a ``scale_fn`` of the cycle number
    (``scale_mode="cycle"``) or of the iteration (``"iterations"``). ``exp_gamma`` must be a float
    (as Paddle).

    Example: ``CyclicLR(base_learning_rate=0.1, max_learning_rate=1.0, step_size_up=10)``
    """

    cycle_size: float
    step_up_pct: float
    max_lr: float
    amplitude: float
    mode: Literal["triangular", "triangular2", "exp_range"]
    gamma: float
    scale_fn: Callable[[float], float]
    scale_mode: Literal["cycle", "iterations"]

    def __init__(
        self,
        base_learning_rate: float,
        max_learning_rate: float,
        step_size_up: int,
        step_size_down: int | None = None,
        mode: Literal["triangular", "triangular2", "exp_range"] = "triangular",
        exp_gamma: float = 1.0,
        scale_fn: Callable[[float], float] | None = None,
        scale_mode: Literal["cycle", "iterations"] = "cycle",
        last_epoch: int = -1,
        verbose: bool = False,
    ) -> None:
        _base_lr(base_learning_rate, "base_learning_rate")
        if not _checks.is_real(max_learning_rate):
            raise TypeError(f"'max_learning_rate' must be 'float' or 'int', but received {type(max_learning_rate)}")
        _checks.real("max_learning_rate", max_learning_rate)
        if max_learning_rate < 0:
            raise ValueError(f"'max_learning_rate' must be a positive integer, but received {max_learning_rate}")
        for name, size in (("step_size_up", step_size_up), ("step_size_down", step_size_down)):
            if size is None and name == "step_size_down":
                continue
            if not _checks.is_int(size):
                raise TypeError(f"The type of '{name}' must be int, but received {type(size)}")
            if size <= 0:
                raise ValueError(f"'{name}' must be a positive integer, but received {size}")
        if not isinstance(exp_gamma, float):
            raise TypeError(f"The type of 'exp_gamma' must be float, but received {type(exp_gamma)}")
        _checks.real("exp_gamma", exp_gamma)
        _checks.at_least("exp_gamma", exp_gamma, 0)  # Paddle takes it, and every other rate is negative
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError(
                "'mode' is invalid and 'scale_fn' is not specified, make sure one of 'mode' or 'scale_fn' is valid"
            )
        if scale_fn is not None and not callable(scale_fn):
            raise TypeError(f"scale_fn should be a callable, but received {type(scale_fn).__name__}")
        if scale_mode not in ("cycle", "iterations"):
            raise ValueError("'scale_mode' must be one of 'cycle' or 'iterations")
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.cycle_size = up + down
        self.step_up_pct = up / self.cycle_size
        self.max_lr = float(max_learning_rate)
        self.amplitude = self.max_lr - base_learning_rate
        self.mode = mode
        self.gamma = exp_gamma
        if scale_fn is not None:
            self.scale_fn = scale_fn
            self.scale_mode = scale_mode
        elif mode == "triangular":
            self.scale_fn, self.scale_mode = self._triangular_scale_fn, "cycle"
        elif mode == "triangular2":
            self.scale_fn, self.scale_mode = self._triangular2_scale_fn, "cycle"
        else:
            self.scale_fn, self.scale_mode = self._exp_range_scale_fn, "iterations"
        super().__init__(base_learning_rate, last_epoch, verbose)

    def _triangular_scale_fn(self, x: float) -> float:
        return 1.0

    def _triangular2_scale_fn(self, x: float) -> float:
        return 1 / 2.0 ** (x - 1)

    def _exp_range_scale_fn(self, x: float) -> float:
        return self.gamma**x

    def get_lr(self) -> float:
        iterations = self.last_epoch
        cycle = 1 + iterations // self.cycle_size
        pct_per_cycle = 1.0 + iterations / self.cycle_size - cycle
        if pct_per_cycle <= self.step_up_pct:
            scale_factor = pct_per_cycle / self.step_up_pct
        else:
            scale_factor = (1 - pct_per_cycle) / (1 - self.step_up_pct)
        base_height = self.amplitude * scale_factor
        x = cycle if self.scale_mode == "cycle" else iterations
        return self.base_lr + base_height * self.scale_fn(x)


class LinearLR(LRScheduler):
    """A linear ramp of the factor from ``start_factor`` to ``end_factor`` over ``total_steps``,
    computed recursively from the previous rate (as Paddle); constant afterwards.

    ``0 < start_factor <= 1``, ``0 <= end_factor <= 1``, ``total_steps > 0`` (as Paddle, which
    lets NaN through).

    Example: ``LinearLR(learning_rate=0.5, total_steps=5, start_factor=1.0 / 3, end_factor=1.0)``
    """

    start_factor: float
    end_factor: float
    total_steps: int

    def __init__(
        self,
        learning_rate: float,
        total_steps: int,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        last_epoch: int = -1,
        verbose: bool = False,
    ) -> None:
        _checks.real("start_factor", start_factor)
        _checks.real("end_factor", end_factor)
        _checks.real("total_steps", total_steps)
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError(
                f"`start_factor` must be greater than 0 and less or equal to 1, but got {start_factor}"
            )
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError(f"`end_factor` must be greater than 0 and less than 1, but got {end_factor}")
        if total_steps <= 0:
            raise ValueError(f"`total_steps` must be greater than 0, but got {total_steps}")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_steps = total_steps
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        if self.last_epoch == 0:
            return self.base_lr * self.start_factor
        if self.last_epoch > self.total_steps:
            return self.last_lr
        start = self.total_steps * self.start_factor
        span = self.end_factor - self.start_factor
        return self.last_lr * (1.0 + span / (start + (self.last_epoch - 1) * span))


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing restarted every ``T_i`` epochs, the period growing by ``T_mult`` after each restart.

    ``eta_min + (learning_rate - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2``. ``step(epoch)`` also
    takes a fractional epoch.

    Differs from Paddle: ``state_dict()`` also saves ``T_cur`` and ``T_i``, so a resumed run
    continues its cycle (Paddle saves only ``last_epoch``/``last_lr`` and restarts the cycle on
    resume). A dict without them (saved by Paddle) loads as in Paddle.

    Example: ``CosineAnnealingWarmRestarts(learning_rate=0.5, T_0=10, T_mult=2)``
    """

    T_0: int
    T_i: float  # a float after a step(epoch) with a fractional epoch, as in Paddle
    T_mult: int
    eta_min: float
    T_cur: float
    _extra_state_keys = ("T_cur", "T_i")

    def __init__(
        self,
        learning_rate: float,
        T_0: int,
        T_mult: int = 1,
        eta_min: float = 0,
        last_epoch: int = -1,
        verbose: bool = False,
    ) -> None:
        if isinstance(T_0, bool) or not isinstance(T_0, int) or T_0 <= 0:
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if isinstance(T_mult, bool) or not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        _checks.real("eta_min", eta_min)
        _checks.at_least("eta_min", eta_min, 0)  # Paddle takes it, and the rate turns negative
        _checks.real("last_epoch", last_epoch)
        self.T_0 = T_0
        self.T_i = T_0
        self.T_mult = T_mult
        self.eta_min = eta_min
        self.T_cur = last_epoch
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2

    def step(self, epoch: float | None = None) -> None:
        """Move to the next epoch, or to ``epoch`` (a float allowed, >= 0)."""
        t_cur: float
        t_i: float
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            t_cur, t_i = self.T_cur + 1, self.T_i
            if t_cur >= t_i:
                t_cur, t_i = t_cur - t_i, t_i * self.T_mult
        else:
            _checks.real("epoch", epoch)
            if epoch < 0:
                raise ValueError(f"Expected non-negative epoch, but got {epoch}")
            if epoch < self.T_0:
                t_cur, t_i = epoch, self.T_0
            elif self.T_mult == 1:
                t_cur, t_i = epoch % self.T_0, self.T_i
            else:
                restarts = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                t_cur = epoch - self.T_0 * (self.T_mult**restarts - 1) / (self.T_mult - 1)
                t_i = self.T_0 * self.T_mult**restarts
        self.T_cur, self.T_i = t_cur, t_i
        self.last_epoch = math.floor(epoch)
        self.last_lr = self.get_lr()
        self._report()

    def _check_state_dict(self, state_dict: Any) -> None:
        super()._check_state_dict(state_dict)
        if ("T_cur" in state_dict) != ("T_i" in state_dict):
            raise KeyError(
                "the state_dict of CosineAnnealingWarmRestarts has one of 'T_cur' and 'T_i' without the other"
            )
        if "T_i" in state_dict:
            _checks.real("state_dict['T_cur']", state_dict["T_cur"])
            _checks.real("state_dict['T_i']", state_dict["T_i"])
            _checks.above("state_dict['T_i']", state_dict["T_i"], 0)
