"""The configured run-store backend (``ServeSettings.run_store``): the one module that
knows both implementations of the ``runstore.RunStore`` protocol."""

from __future__ import annotations

from quarry.serve.settings import ServeSettings
from quarry.serve.stores.redis_store import RedisRunStore
from quarry.serve.stores.runstore import RunStore
from quarry.serve.stores.runstore_actor import ActorRunStore


def make_run_store(settings: ServeSettings) -> RunStore:
    """The configured backend, attached from inside a gateway replica."""
    if settings.run_store == "redis":
        return RedisRunStore.from_settings(settings)
    return ActorRunStore.from_settings(settings)
