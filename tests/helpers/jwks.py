"""A real local JWKS endpoint for rotation tests: an HTTP server whose key list the test
replaces (``state["keys"]``) and that counts its fetches (``state["fetches"]``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def jwks_server() -> Iterator[tuple[str, dict]]:
    """(URL of ``/jwks.json``, the mutable state) while the server runs."""
    state: dict = {"keys": [], "fetches": 0}

    class H(BaseHTTPRequestHandler):
        def do_GET(self):
            state["fetches"] += 1
            body = json.dumps({"keys": list(state["keys"])}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/jwks.json", state
    finally:
        srv.shutdown()
        srv.server_close()
