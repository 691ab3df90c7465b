"""The gateway's request edge: size limits, the validation handler and the OpenAPI spec,
hooked onto the FastAPI app in one call.

``serve.ingress(api)`` freezes a copy of the app when the ``Gateway`` class is decorated,
so everything here must be installed *before* that decorator runs (``install``), and the
settings, which exist only when a replica starts, reach the frozen copy through this
process's slot (``configure``, called by ``Gateway.__init__``; one gateway per replica
process). Until configured, the defaults of ``RequestLimits`` hold.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError

from quarry.serve.http.errors import validation_handler
from quarry.serve.http.limits import RequestLimitsMiddleware
from quarry.serve.http.openapi import install_openapi
from quarry.serve.settings import RequestLimits, ServeSettings

_active: dict[str, Any] = {"settings": None, "run_store": None}


def configure(settings: ServeSettings, run_store: Any = None) -> None:
    _active["settings"] = settings
    _active["run_store"] = run_store


def current_settings() -> ServeSettings | None:
    return _active["settings"]


def current_run_store() -> Any:
    """This replica's run store (``quarry.serve.stores.runstore.RunStore``), for the admin purge."""
    return _active["run_store"]


def current_limits() -> RequestLimits:
    s = _active["settings"]
    return s.limits if s is not None else RequestLimits()


def install(api: FastAPI) -> None:
    api.add_exception_handler(RequestValidationError, validation_handler)
    api.add_middleware(RequestLimitsMiddleware, get_limits=current_limits)
    install_openapi(api, current_settings)
