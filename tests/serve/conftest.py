"""One Ray + Serve application per test session, on an ephemeral loopback port, over a
small index built in a tmp dir from the sample corpus plus a few controlled documents."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from quarry.core.records import SourceDocument

SECRET = "serve-test-secret-0123456789-0123456789-0123456789-0123456789"
PLATFORM_SECRET = "serve-test-platform-secret-0123456789-0123456789-0123456789"  # cross-tenant /healthz
PREFIX = "quarrytest"

# Controlled evidence the assertions rely on (exact text, ids, ACLs).
FIXTURE_DOCS = [
    dict(doc_id="cutover-window", tenant="acme", acl=("*",), doc_type="runbook", title="Acme settlement window",
         text="Until the Acme cutover completes, the settlement batch for Acme runs daily at 16:00 UTC "
              "and refunds above 2.5% need approval. zebrafinch marker one."),
    dict(doc_id="pay-bands", tenant="acme", acl=("hr",), doc_type="policy", title="Pay bands",
         text="Pay bands for engineering levels are reviewed every April. quokkaband secret ranges apply."),
    dict(doc_id="globex-pay", tenant="globex", acl=("*",), doc_type="policy", title="Globex pay bands",
         text="Globex pay bands are confidential to globex staff. quokkaband globex ranges apply."),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build(root: str, tenant: str, docs: list[SourceDocument], suffix: str = "") -> int:
    """Build and publish one generation of ``tenant`` with the real in-process pipeline
    (structure-aware chunker, parents, tenant-wide stats). ``suffix`` is appended to every
    document's text: the hot-swap test uses it to mark a new generation's passages."""
    from quarry.core.embed.embedders import HashingEmbedder
    from quarry.core.ingest.pipeline import build_corpus

    docs = [d.model_copy(update={"text": d.text + suffix}) if suffix else d for d in docs if d.tenant == tenant]
    return build_corpus(docs, root, HashingEmbedder(dim=64))[tenant]


def corpus() -> dict[str, list[SourceDocument]]:
    from quarry.core.ingest.sources import SAMPLE_CORPUS, load_documents

    docs, _bad = load_documents(SAMPLE_CORPUS)
    docs += [SourceDocument(**d) for d in FIXTURE_DOCS]
    by_tenant: dict[str, list[SourceDocument]] = {}
    for d in docs:
        by_tenant.setdefault(d.tenant, []).append(d)
    return by_tenant


class Client:
    def __init__(self, base: str, root: str, docs):
        self.base, self.root, self.docs = base, root, docs
        self.secret, self.build = SECRET, build
        self.http = httpx.Client(base_url=base, timeout=60)

    def token(self, tenant="acme", subject="u1", groups=("support",), **kw) -> str:
        from quarry.serve.http.auth import mint_token

        return mint_token(tenant, subject, groups, secret=SECRET, **kw)

    def platform_token(self, **kw) -> str:
        from quarry.serve.http.auth import mint_platform_token

        return mint_platform_token(PLATFORM_SECRET, **kw)

    def h(self, token: str | None = None, run: str | None = None, **kw) -> dict[str, str]:
        h = {"Authorization": f"Bearer {token or self.token(**kw)}"}
        if run:
            h[RUN_HEADER] = run
        return h

    def new_run(self, token: str) -> str:
        r = self.http.post("/v1/runs", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        return r.json()["run_id"]

    def search(self, token: str, run: str, query: str, **body):
        return self.http.post("/v1/search", headers=self.h(token, run), json={"query": query, **body})

    def trace(self, trace_id: str, tenant="acme", groups: tuple[str, ...] | None = None):
        """Read a trace as an operator; by default one holding every group of the corpus,
        since an operator sees only the ids its own groups may read."""
        if groups is None:
            groups = tuple(sorted({g for ds in (self.docs or {}).values() for d in ds for g in d.acl} - {"*"}))
        op = self.token(tenant=tenant, subject="ops", groups=groups, scope="operator")
        return self.http.get(f"/v1/trace/{trace_id}", headers=self.h(op))


RUN_HEADER = "X-Quarry-Run"


@pytest.fixture(scope="session")
def quarry_app(tmp_path_factory):
    ray = pytest.importorskip("ray")
    from ray import serve

    from quarry.serve.app import build_app
    from quarry.serve.settings import AuthSettings, ServeSettings

    root = str(tmp_path_factory.mktemp("indexes"))
    docs = corpus()
    for tenant, ds in docs.items():
        build(root, tenant, ds)
    port = _free_port()
    from quarry.serve.launch import set_throughput_env

    set_throughput_env()  # the serving default (ServeSettings.throughput_optimized)
    ray.init(num_cpus=2, include_dashboard=False, namespace="quarry-test", log_to_driver=False,
             configure_logging=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    # Two gateway replicas (run rules across replicas); a Reranker serving whatever each
    # tenant's gate recorded, re-read every 0.5 s so tests can promote a ranker mid-session.
    auth = AuthSettings(hs256_secret=SECRET, platform_hs256_secret=PLATFORM_SECRET)
    settings = ServeSettings(index_root=root, auth=auth, gateway_replicas=2,
                             retriever_replicas=2,  # freshness: a change is seen by every replica
                             generation_check_ms=200, ray_namespace="quarry-test", store_name_prefix=PREFIX,
                             reranker_num_cpus=0.5, retriever_num_cpus=0.25, resolver_num_cpus=0.02,  # room for test_autoscale's app and deploy()'s
                             stage_check_s=0.5, candidate_width_ceiling=60)
    serve.run(build_app(settings), name="quarry", route_prefix="/")
    client = Client(f"http://127.0.0.1:{port}", root, docs)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if client.http.get("/healthz").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    yield client
    client.http.close()
    serve.shutdown()
    ray.shutdown()
