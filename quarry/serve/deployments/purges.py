"""What a serving replica does when a tenant is purged (``quarry purge``, docs/operations.md).

A purge bumps the tenant's purge epoch (``<root>/<tenant>/PURGED``). Each replica that holds
tenant data (Retriever, Reranker, Resolver) remembers the epoch each copy was loaded under;
a :class:`PurgeWatch` thread re-reads the epochs of the tenants it holds every
``generation_check_ms`` and, when one moved, the deployment drops every copy of that tenant:
its cached and retired index objects, its local copies of remote shards that are no longer
published, the query-vector cache and the process-wide text caches of the evidence, ranker and
tokenizer code (keyed by tenant and text, so no entry is another tenant's hit; a
``functools.lru_cache`` cannot drop one tenant's entries, so they are cleared whole). Requests
that already hold an index object finish on it; no new request gets it.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Callable

from quarry.core.index import layout

log = logging.getLogger("quarry.serve")


def clear_text_caches() -> None:
    """Empty the process-wide memo caches that hold passage text or its words."""
    from quarry.core.evidence import predicates, quantities, sentences, statements, subjects
    from quarry.core.rank import features
    from quarry.core.text import nlp, tokenizer

    for fn in (sentences.passage_sentences, statements._statements_cached, predicates.predicates,
               predicates._subject_stem, subjects.concept, nlp.parse_date, quantities._clock, tokenizer.stem):
        fn.cache_clear()
    features.forget_terms()


def published_prefixes(root: str, tenant: str) -> list[str]:
    """URIs of the tenant's folders that are published now (CURRENT's generation, the live delta)."""
    gen = layout.current_generation(root, tenant)
    if gen is None:
        return []
    out = [layout.generation_dir(root, tenant, gen)]
    parsed = layout.parse_watermark(layout.read_watermark(root, tenant))
    if parsed is not None and parsed[1] == gen:
        d = layout.delta_dir(root, tenant, parsed[0])
        out.append(d)
        try:
            ref = layout.read_json(layout.join(d, "manifest.json")).get("shard")
        except FileNotFoundError:
            ref = None
        if ref:
            out.append(layout.join(layout.changes_dir(root, tenant), str(ref).split("/", 1)[0]))
    return out


def drop_unpublished_copies(root: str, tenant: str, cache_root: str | None = None) -> int:
    """Delete this machine's local copies of the tenant's remote folders that are no longer
    published (a local root has none: its files are read in place); returns how many."""
    if layout.is_local(root):
        return 0
    cache = cache_root or tempfile.gettempdir()
    keep_prefixes = [p.rstrip("/") + "/" for p in published_prefixes(root, tenant)]
    keep = set()
    for d in layout.fetched_copies(cache, layout.tenant_dir(root, tenant)):
        uri = (d / ".complete").read_text().rstrip("/") + "/"
        if any(uri.startswith(p) for p in keep_prefixes):
            keep.add(d)
    return len(layout.drop_fetched(cache, layout.tenant_dir(root, tenant), keep))


class PurgeWatch:
    """Every ``interval_s``: for each tenant ``held()`` names (tenant -> the epochs its copies
    were loaded under), re-read the purge epoch and call ``drop(tenant, epoch)`` when a copy
    was loaded under another one."""

    def __init__(self, root: str, interval_s: float, held: Callable[[], dict[str, set[str | None]]],
                 drop: Callable[[str, str | None], None]):
        self.root, self.interval_s, self.held, self.drop = root, max(interval_s, 0.05), held, drop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="quarry-purge-watch", daemon=True)
        self._thread.start()

    def check(self) -> list[str]:
        """One pass; returns the tenants dropped."""
        dropped = []
        for tenant, epochs in self.held().items():
            try:
                cur = layout.read_purge_epoch(self.root, tenant)
            except Exception:  # noqa: BLE001 - storage hiccup: try again next pass
                log.exception("reading the purge epoch of %s failed", tenant)
                continue
            if any(e != cur for e in epochs):
                self.drop(tenant, cur)
                dropped.append(tenant)
        return dropped

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the watch must keep running
                log.exception("purge watch pass failed")

    def stop(self) -> None:
        self._stop.set()
