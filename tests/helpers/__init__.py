"""Helpers shared by the test suite: a fake OpenAI-compatible server (``llm_server``), the
freshness oracle (``freshness``), the build-job helpers (``build_job``, ``pause_at_stage``) and
the learned-ranker fixtures (``ranker``). ``pyproject.toml`` puts ``tests/`` on pytest's
``pythonpath``, so tests import them as ``helpers.<module>``."""
