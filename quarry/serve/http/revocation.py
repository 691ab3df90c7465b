"""A revocation list every Gateway replica reads: token ``jti``s, and per-subject cut-offs
("every token of tenant/subject issued before T"). One JSON file at an fsspec URI (local or
object storage), re-read at most every ``check_s``; so a revocation stops a token within
``check_s`` of being written (the verified-token cache consults it on every request).

File: ``{"jti": ["..."], "subjects": {"acme/alice": 1767000000}}``."""

from __future__ import annotations

import json
import threading
import time

import fsspec


def _read(uri: str) -> dict:
    try:
        with fsspec.open(uri, "rt") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {"jti": [], "subjects": {}}
    if not isinstance(data, dict):
        raise ValueError(f"revocation list {uri} is not a JSON object")
    return {"jti": list(data.get("jti", [])), "subjects": dict(data.get("subjects", {}))}


def add_revocation(uri: str, *, jti: str | None = None, tenant: str | None = None, subject: str | None = None,
                   before: float | None = None) -> dict:
    """Add a ``jti``, or a cut-off for ``tenant/subject`` (tokens issued before ``before``,
    default now). Read-modify-write: run from one operator at a time."""
    if (jti is None) == (subject is None):
        raise ValueError("give exactly one of jti or subject")
    data = _read(uri)
    if jti is not None:
        if jti not in data["jti"]:
            data["jti"].append(jti)
    else:
        if not tenant:
            raise ValueError("a subject revocation needs its tenant")
        data["subjects"][f"{tenant}/{subject}"] = float(time.time() if before is None else before)
    with fsspec.open(uri, "wt") as f:
        json.dump(data, f, sort_keys=True)
    return data


class RevocationList:
    def __init__(self, uri: str, check_s: float, clock=time.time):
        self.uri, self.check_s, self._clock = uri, check_s, clock
        self._lock = threading.Lock()
        self._read_at = float("-inf")
        self._jti: frozenset[str] = frozenset()
        self._subjects: dict[str, float] = {}

    def _refresh(self) -> None:
        now = self._clock()
        if now - self._read_at < self.check_s:
            return
        with self._lock:
            if now - self._read_at < self.check_s:
                return
            data = _read(self.uri)  # a read error propagates: the gateway answers it, not "not revoked"
            self._jti, self._subjects = frozenset(data["jti"]), {k: float(v) for k, v in data["subjects"].items()}
            self._read_at = now

    def revoked(self, jti: object, tenant: str, subject: str, iat: float) -> bool:
        self._refresh()
        if isinstance(jti, str) and jti in self._jti:
            return True
        cut = self._subjects.get(f"{tenant}/{subject}")
        return cut is not None and iat < cut
