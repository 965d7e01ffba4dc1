"""Adapters for training frameworks; each module imports its framework, this package none.

* ``paddle_compat.integrations.lightning``: precision plugins for Lightning's ``Trainer`` and
  ``Fabric`` (the ``lightning`` package) that compute with Paddle's ``auto_cast`` rules and
  scale with a ``paddle_compat`` ``GradScaler``;
* ``paddle_compat.integrations.pytorch_lightning``: the same ``Trainer`` plugin for the
  standalone ``pytorch_lightning`` package.

Hugging Face Accelerate needs no adapter: ``docs/integrations.md`` has the recipe.
"""
