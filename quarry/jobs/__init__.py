"""Batch jobs over ``quarry.core``: the PySpark build (``build`` composes ``build_settings``,
``build_plan``, ``build_publish``; executors run ``stages``), ``apply_changes``, ``compact``,
``reconcile`` and ``train_ranker``. Jobs import ``quarry.core`` only: never the CLI, serving
or evaluation (a publication gate is passed in, see ``build_settings.CaseGate``)."""
