"""Issue 23's revocation acceptance: under concurrent searches through both Gateway replicas
and both Retriever replicas of the session app, revoke and restore a document's access 20
times; no search that *started* after the revocation was published may show the document.
(Changes are published in-process by ``apply_local``, the same fold and publish as the Spark
job, so 40 publishes fit in a test.)"""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

pytestmark = [pytest.mark.serve, pytest.mark.slow]

TENANT, DOC = "revstress", "revoked-doc"
QUERY = "zebra quasar marmalade cutoff"


def test_no_search_started_after_a_revocation_shows_the_document(quarry_app):
    from quarry.core.changes.delta import apply_local
    from quarry.core.changes.log import Change
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.records import SourceDocument

    app = quarry_app
    docs = [SourceDocument(doc_id=DOC, version="1", tenant=TENANT, title="Zebra quasar",
                           text="## Cutoff\n\nThe zebra quasar marmalade cutoff is 15:00 on Mondays.", acl=("ops",)),
            SourceDocument(doc_id="other", version="1", tenant=TENANT, title="Other",
                           text="## Notes\n\nThe marmalade notes are public.", acl=("*",))]
    app.build(app.root, TENANT, docs)
    stop = threading.Event()
    windows: list[tuple[float, float]] = []  # (revocation published, restore begun), monotonic
    searches: list[tuple[float, float, bool]] = []  # (started, finished, showed the document)
    errors: dict[int, int] = {}
    lock = threading.Lock()

    def searcher(k: int) -> None:
        import httpx

        http = httpx.Client(base_url=app.base, timeout=60)
        n = 0
        while not stop.is_set():
            tok = app.token(tenant=TENANT, subject=f"s{k}-{n}", groups=("ops",))
            n += 1
            r = http.post("/v1/runs", headers={"Authorization": f"Bearer {tok}"})
            if r.status_code != 200:
                with lock:
                    errors[r.status_code] = errors.get(r.status_code, 0) + 1
                continue
            run, left = r.json()["run_id"], 1
            while left > 0 and not stop.is_set():
                started = time.monotonic()
                r = http.post("/v1/search", headers={"Authorization": f"Bearer {tok}", "X-Quarry-Run": run},
                              json={"query": QUERY, "top_k": 4})
                finished = time.monotonic()
                if r.status_code == 409:  # the run's search budget is spent
                    break
                with lock:
                    if r.status_code != 200:
                        errors[r.status_code] = errors.get(r.status_code, 0) + 1
                        break
                    body = r.json()
                    left = body["searches_left"]
                    searches.append((started, finished,
                                     any(e["passage_id"].startswith(f"{DOC}@") for e in body["excerpts"])))

    threads = [threading.Thread(target=searcher, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    emb = HashingEmbedder(64)
    try:
        for cycle in range(20):
            at = dt.datetime.now(dt.timezone.utc)
            apply_local(app.root, TENANT, [Change(op="acl", tenant=TENANT, doc_id=DOC, acl=("nobody",), at=at)], emb)
            revoked = time.monotonic()  # apply returned: every search started from now on must miss it
            time.sleep(0.4)
            windows.append((revoked, time.monotonic()))  # ... until the restore begins
            apply_local(app.root, TENANT, [Change(op="acl", tenant=TENANT, doc_id=DOC, acl=("ops",),
                                                  at=at + dt.timedelta(milliseconds=1))], emb)
            time.sleep(0.4)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    inside = [(st, fi, shown) for st, fi, shown in searches if any(w0 < st and fi < w1 for w0, w1 in windows)]
    violations = [round(st - w0, 3) for st, fi, shown in inside if shown for w0, w1 in windows if w0 < st and fi < w1]
    print(f"revocation stress: {len(searches)} searches, {len(inside)} wholly inside a revoked window, "
          f"{sum(s for *_, s in searches)} showed the document, errors {errors}, violations {violations[:10]}")
    assert errors == {}, errors
    assert len(inside) >= 20  # searches really ran inside the revoked windows
    assert any(shown for *_, shown in searches)  # and the document was found while it was visible
    assert violations == [], f"{len(violations)} searches started after a revocation showed it"
