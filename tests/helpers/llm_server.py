"""A tiny OpenAI-compatible ``/v1/chat/completions`` server for tests (no model, no network).

Binds 127.0.0.1 on an ephemeral port and runs in a background thread::

    with FakeLLMServer(fail_first=2) as srv:
        settings = LLMSettings(base_url=srv.base_url, model="fake")
        ...
        assert srv.requests == 3

By default it answers the prompt format of ``quarry.core.ingest.contextualize`` with a JSON array
holding one sentence per ``<chunk id="i">`` tag: ``"Chunk i of <title>."``. Knobs make it
fail, stall, rate-limit, drop ``usage`` or answer with arbitrary content.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_TITLE = re.compile(r"^Document title: (.*)$", re.M)
_CHUNK = re.compile(r'<chunk id="(\d+)">')


def default_answer(payload: dict[str, Any]) -> str:
    """One deterministic sentence per chunk of the first user message."""
    user = next(m["content"] for m in payload["messages"] if m["role"] == "user")
    m = _TITLE.search(user)
    title = m.group(1) if m else "the document"
    return json.dumps([f"Chunk {i} of {title}." for i in _CHUNK.findall(user)])


class FakeLLMServer:
    """Configurable fake endpoint. All counters are safe to read after requests finish.

    fail_first: the first N requests answer ``fail_status`` (500 by default; 429 works too).
    slow_first / slow_s: the first N requests sleep ``slow_s`` before answering.
    delay_s: every request sleeps this long (to observe concurrency).
    status: if set, every request answers this status (e.g. 400) with an error body.
    usage: include a ``usage`` block (prompt chars/4, completion chars/4).
    answer: payload -> content string; defaults to ``default_answer``.
    """

    def __init__(
        self,
        *,
        fail_first: int = 0,
        fail_status: int = 500,
        slow_first: int = 0,
        slow_s: float = 0.0,
        delay_s: float = 0.0,
        status: int | None = None,
        usage: bool = True,
        answer: Callable[[dict[str, Any]], str] | None = None,
    ) -> None:
        self.fail_first, self.fail_status = fail_first, fail_status
        self.slow_first, self.slow_s, self.delay_s = slow_first, slow_s, delay_s
        self.status, self.usage = status, usage
        self.answer = answer or default_answer
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.payloads: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.usages: list[tuple[int, int]] = []  # (prompt_tokens, completion_tokens) actually returned
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)  # wakes at shutdown, so a stalled handler never outlives the test

    def _handle(self, h: BaseHTTPRequestHandler) -> tuple[int, dict[str, Any]]:
        length = int(h.headers.get("Content-Length") or 0)
        payload = json.loads(h.rfile.read(length) or b"{}")
        with self._lock:
            self.requests += 1
            n = self.requests
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.payloads.append(payload)
            self.headers.append({k.lower(): v for k, v in h.headers.items()})
        try:
            if self.delay_s:
                self._sleep(self.delay_s)
            if n <= self.slow_first:
                self._sleep(self.slow_s)
            if h.path.rstrip("/") != "/v1/chat/completions":
                return 404, {"error": {"message": f"no route {h.path}"}}
            if self.status is not None:
                return self.status, {"error": {"message": f"fake error {self.status}", "type": "invalid_request_error"}}
            if n <= self.fail_first:
                return self.fail_status, {"error": {"message": f"fake failure {n}"}}
            content = self.answer(payload)
            body: dict[str, Any] = {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "created": 0,
                "model": payload.get("model", ""),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            }
            if self.usage:
                prompt = sum(len(m.get("content") or "") for m in payload.get("messages", [])) // 4 + 1
                completion = len(content) // 4 + 1
                body["usage"] = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
                with self._lock:
                    self.usages.append((prompt, completion))
            return 200, body
        finally:
            with self._lock:
                self.in_flight -= 1

    def start(self) -> FakeLLMServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

            def do_POST(self) -> None:  # noqa: N802
                code, body = server._handle(self)
                data = json.dumps(body).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left: expected in timeout tests

            def log_message(self, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            block_on_close = False

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # disconnects mid-request are part of the tests

        self._httpd = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def fake_llm_server(**kwargs: Any) -> Iterator[FakeLLMServer]:
    """Context manager form; wrap it in a pytest fixture where convenient."""
    srv = FakeLLMServer(**kwargs).start()
    try:
        yield srv
    finally:
        srv.stop()
