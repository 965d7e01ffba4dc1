"""A ``paddle_compat`` ``GradScaler`` for Hugging Face Accelerate (and so for Hugging Face's
``Trainer``, which steps through Accelerate). Importing this module imports ``accelerate``.

Accelerate has no argument for a scaler of your own: ``accelerator.scaler`` set before
``prepare()`` is the hook, and then its ``clip_grad_norm_``/``clip_grad_value_`` do not unscale
(they unscale only a scaler Accelerate made itself, for ``mixed_precision="fp16"`` on a GPU), so
they clip the still-scaled gradients. ``use_grad_scaler`` sets the scaler and makes the clips
unscale it first. Recipes: ``docs/integrations.md``.
"""

from __future__ import annotations

from typing import Any

from accelerate import Accelerator
from accelerate.optimizer import AcceleratedOptimizer

from ..amp.grad_scaler import AmpScaler, OptimizerState

__all__ = ["use_grad_scaler"]


def use_grad_scaler(accelerator: Accelerator, scaler: AmpScaler) -> None:
    """Let ``accelerator`` scale with ``scaler``: ``backward`` scales the loss, the prepared
    optimizers step through ``scaler.step`` + ``update`` (so ``optimizer_step_was_skipped`` and
    an ``AcceleratedScheduler`` see the skipped steps), and ``clip_grad_norm_``/``clip_grad_value_``
    unscale the gradients first (once per step, on the micro-step that updates under gradient
    accumulation; an ``unscale_`` of your own is not repeated).

    Call it before ``prepare()`` (for Hugging Face's ``Trainer``: on ``trainer.accelerator``,
    before ``train()``). Build the accelerator with ``mixed_precision="no"`` and compute under
    ``paddle_compat.amp.auto_cast``: ``"fp16"`` brings torch's scaler and ``torch.autocast``.

    Example::

        accelerator = Accelerator(mixed_precision="no")
        use_grad_scaler(accelerator, GradScaler(init_loss_scaling=1024))
        model, optimizer = accelerator.prepare(model, optimizer)
    """
    if not isinstance(scaler, AmpScaler):
        raise TypeError(f"scaler must be a paddle_compat.amp.GradScaler, got {type(scaler).__name__}")
    if not isinstance(accelerator, Accelerator):
        raise TypeError(f"accelerator must be an accelerate.Accelerator, got {type(accelerator).__name__}")
    if accelerator.scaler is not None and accelerator.scaler is not scaler:
        raise ValueError(
            f"the Accelerator has a scaler of its own ({type(accelerator.scaler).__name__}, from "
            f"mixed_precision={accelerator.mixed_precision!r}); build it with mixed_precision='no' and compute "
            "under paddle_compat.amp.auto_cast"
        )
    if accelerator._optimizers:
        raise RuntimeError(
            "use_grad_scaler() must come before accelerator.prepare(): prepare() hands the scaler to the optimizers"
        )
    accelerator.scaler = scaler
    scaler._clips_unscale_first = True  # no warning when Accelerate steps gradients its clip did not unscale

    def unscale_gradients(optimizer: Any = None) -> None:
        """Accelerate's ``unscale_gradients``, for our scaler: each optimizer's gradients once, on
        the step that updates (inside ``accelerator.accumulate`` a micro-step's gradients stay
        scaled: the next backward adds scaled gradients to them)."""
        if not accelerator.sync_gradients:
            return
        optimizers = accelerator._optimizers if optimizer is None else optimizer
        for opt in optimizers if isinstance(optimizers, (list, tuple)) else [optimizers]:
            while isinstance(opt, AcceleratedOptimizer):
                opt = opt.optimizer
            state = scaler._step_state.optimizer_states.get(id(opt), OptimizerState.INIT)
            if state is OptimizerState.INIT:
                scaler.unscale_(opt)

    # An instance attribute: clip_grad_norm_ and clip_grad_value_ call self.unscale_gradients().
    accelerator.unscale_gradients = unscale_gradients  # type: ignore[method-assign]
