"""Request ceilings, enforced before anything parses the request.

A pure ASGI middleware, outermost in the gateway app: it sees the raw header list and the
body as bytes, so a 4 MiB ``Authorization`` header never reaches the token verifier and a
10 MiB body never reaches the JSON parser or the validation-error renderer.

- headers above ``max_header_bytes`` (names, values and the ``: `` / CRLF framing, the size
  on the wire) get 431;
- a ``Content-Length`` above ``max_body_bytes`` gets 413 without reading the body, and a
  streamed body is counted chunk by chunk and cut off at the limit;
- a non-empty body that is not JSON gets 415; JSON nested deeper than ``max_json_depth``
  gets 400 (Python's parser would otherwise recurse until ``RecursionError``, a 500).

Ray Serve's HTTP proxy (uvicorn) has no header or body ceiling of its own, so this is the
limit that holds over real HTTP; it runs in each gateway replica, after the proxy has
forwarded the request and before the route reads it.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from quarry.serve.settings import RequestLimits

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_BODY_METHODS = {"POST", "PUT", "PATCH"}


def header_bytes(headers: list[tuple[bytes, bytes]]) -> int:
    """Size of the header block as sent: ``name: value\\r\\n`` per header."""
    return sum(len(k) + len(v) + 4 for k, v in headers)


def json_depth_exceeds(body: bytes, max_depth: int) -> bool:
    """Whether ``[``/``{`` nest deeper than ``max_depth`` outside strings. Linear in the
    body, stops at the first excess; a body with few brackets is cleared without a scan."""
    if body.count(b"[") + body.count(b"{") <= max_depth:
        return False
    depth, in_str, escaped = 0, False, False
    for c in body:
        if in_str:
            if escaped:
                escaped = False
            elif c == 0x5C:  # backslash
                escaped = True
            elif c == 0x22:  # quote
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c in (0x5B, 0x7B):
            depth += 1
            if depth > max_depth:
                return True
        elif c in (0x5D, 0x7D):
            depth -= 1
    return False


def is_json_content_type(value: str) -> bool:
    media = value.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def _reply(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


class RequestLimitsMiddleware:
    """``limits`` is read per request through ``get_limits``: the gateway app is frozen by
    ``serve.ingress`` before the settings exist, so they arrive later (see ``edge``)."""

    def __init__(self, app, get_limits: Callable[[], RequestLimits]):
        self.app, self.get_limits = app, get_limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        lim = self.get_limits()
        headers = scope.get("headers") or []
        if header_bytes(headers) > lim.max_header_bytes:
            return await _reply(send, 431, f"request headers too large: at most {lim.max_header_bytes} bytes in all")
        declared = [v for k, v in headers if k.lower() == b"content-length"]
        if declared:
            if len(declared) > 1 or not declared[0].strip().isdigit():
                return await _reply(send, 400, "malformed Content-Length header")
            if int(declared[0]) > lim.max_body_bytes:
                return await _reply(send, 413, f"request body too large: at most {lim.max_body_bytes} bytes")
        body = bytearray()
        more = True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return None  # the client left; nobody to answer
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
            if len(body) > lim.max_body_bytes:
                return await _reply(send, 413, f"request body too large: at most {lim.max_body_bytes} bytes")
        if body and scope.get("method") in _BODY_METHODS:
            ctype = next((v.decode("latin-1") for k, v in headers if k.lower() == b"content-type"), "")
            if not is_json_content_type(ctype):
                return await _reply(send, 415, "request body must be JSON: send Content-Type: application/json")
            if json_depth_exceeds(bytes(body), lim.max_json_depth):
                return await _reply(send, 400, f"JSON nested too deeply: at most {lim.max_json_depth} levels")
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # after the body: wait for the disconnect as usual

        return await self.app(scope, replay, send)
