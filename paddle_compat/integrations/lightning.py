"""Lightning precision plugins that compute with Paddle's ``auto_cast`` rules and scale the loss
with a ``paddle_compat`` ``GradScaler``. Importing this module imports ``lightning``.

``PaddleMixedPrecision`` is for ``lightning.pytorch.Trainer``, ``PaddleFabricMixedPrecision``
for ``lightning.fabric.Fabric``; ``paddle_compat.integrations.pytorch_lightning`` has the
``Trainer`` plugin for the standalone ``pytorch_lightning`` package. ``HoldScheduleOnSkippedSteps``,
mixed into a ``LightningModule``, holds a per-step schedule on skipped steps. Recipes, and what each
framework calls on the scaler: ``docs/integrations.md``.
"""

from __future__ import annotations

from lightning.fabric.plugins.precision import MixedPrecision as FabricMixedPrecision
from lightning.pytorch.plugins.precision import MixedPrecision

from ._paddle_amp import HoldScheduleOnSkippedSteps, PaddleAmpPlugin

__all__ = ["HoldScheduleOnSkippedSteps", "PaddleFabricMixedPrecision", "PaddleMixedPrecision"]


class PaddleMixedPrecision(PaddleAmpPlugin, MixedPrecision):  # type: ignore[misc]  # see _paddle_amp
    """``Trainer`` plugin: Lightning's ``MixedPrecision`` with Paddle's ``auto_cast`` in place
    of ``torch.autocast`` around ``training_step``, validation, test and predict.

    Lightning calls the scaler's ``scale``, ``unscale_`` (before clipping), ``step`` and
    ``update``, and saves its ``state_dict()`` in the trainer's checkpoint under this class's
    name, restored on resume. Arguments: see ``__init__``.

    Example::

        from paddle_compat.amp import GradScaler
        from paddle_compat.integrations.lightning import PaddleMixedPrecision

        plugin = PaddleMixedPrecision("float16", scaler=GradScaler(init_loss_scaling=1024))
        trainer = lightning.pytorch.Trainer(plugins=[plugin], gradient_clip_val=1.0)
    """


class PaddleFabricMixedPrecision(PaddleAmpPlugin, FabricMixedPrecision):  # type: ignore[misc]  # see _paddle_amp
    """``Fabric`` plugin: Fabric's ``MixedPrecision`` with Paddle's ``auto_cast`` in place of
    ``torch.autocast`` around the forward of modules set up by ``fabric.setup``.

    Fabric calls the scaler's ``scale`` in ``fabric.backward``, ``unscale_`` in
    ``fabric.clip_gradients``, ``step`` and ``update`` in ``optimizer.step()``. Unlike Fabric's
    own plugin it leaves inputs in their dtype. Arguments: see ``__init__``.

    Example::

        fabric = lightning.fabric.Fabric(accelerator="cpu", plugins=[PaddleFabricMixedPrecision()])
    """
