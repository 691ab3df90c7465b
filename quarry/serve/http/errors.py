"""Validation errors as the caller sees them: where and why, never the input.

FastAPI's default handler echoes each offending value (``"input": "globex"``) and fails
with a 500 while doing so when the value cannot be encoded: a lone surrogate
(``UnicodeEncodeError``) or a non-finite float from ``NaN``/``Infinity``/``1e400``
(``allow_nan=False``). This handler renders only the location, the error type and
pydantic's message, each made safe: a location part that is not a plain field name (it
came from the caller, e.g. the name of an extra key) is replaced by ``"…"``.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")
_MSG_CHARS = 300


def _safe_text(s: str, limit: int) -> str:
    return s.encode("utf-8", "replace").decode("utf-8")[:limit]


def _safe_loc(part: Any) -> str | int:
    if isinstance(part, int) and not isinstance(part, bool):
        return part
    if isinstance(part, str) and _FIELD.fullmatch(part):
        return part
    return "…"


def error_details(errors: list[dict[str, Any]], prefix: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """pydantic/FastAPI error dicts as ``{"loc", "type", "msg"}``, nothing of the input."""
    out = []
    for e in errors[:20]:  # a 20,000-item list makes 20,000 errors; the first 20 say enough
        out.append({"loc": [_safe_loc(p) for p in (*prefix, *e.get("loc", ()))][:10],
                    "type": _safe_text(str(e.get("type", "value_error")), 64),
                    "msg": _safe_text(str(e.get("msg", "invalid value")), _MSG_CHARS)})
    return out


async def validation_handler(_: Request, e: RequestValidationError) -> JSONResponse:
    return JSONResponse({"detail": error_details(list(e.errors()))}, status_code=422)
