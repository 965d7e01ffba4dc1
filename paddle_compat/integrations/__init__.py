"""Adapters for training frameworks; each module imports its framework, this package none.

* ``paddle_compat.integrations.lightning``: precision plugins for Lightning's ``Trainer`` and
  ``Fabric`` (the ``lightning`` package) that compute with Paddle's ``auto_cast`` rules and
  scale with a ``paddle_compat`` ``GradScaler``;
* ``paddle_compat.integrations.pytorch_lightning``: the same ``Trainer`` plugin for the
  standalone ``pytorch_lightning`` package.
* ``paddle_compat.integrations.accelerate``: ``use_grad_scaler`` hands a ``GradScaler`` to
  Hugging Face Accelerate (and to Hugging Face's ``Trainer``, through its accelerator), its
  gradient clips unscaling first.

Recipes for each: ``docs/integrations.md``.
"""
