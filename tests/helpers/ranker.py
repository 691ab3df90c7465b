"""A small real index for the learned-ranker tests: one tenant of the sample corpus, chunked
small and embedded with the hashing embedder (no model), and labelled queries over it."""

from __future__ import annotations

from quarry.core.embed.embedders import HashingEmbedder, passage_text_for_embedding
from quarry.core.index.build import build_tenant_index
from quarry.core.ingest.chunking import CHUNKER_VERSION, ChunkSettings, chunk_document
from quarry.core.ingest.sources import SAMPLE_CORPUS, load_documents

# (query, relevant doc ids) over the acme tenant of the sample corpus
CASES = [
    ("webhook deliveries rejected with error E-4471", ["ticket-517", "ticket-517-comment-3"]),
    ("EUR settlement cutoff for migrated tenants", ["settlement-policy"]),
    ("refund rejected as expired refund window", ["refund-policy", "ticket-541"]),
    ("duplicate payouts postmortem December", ["postmortem-duplicate-payouts-2025-12"]),
    ("webhook delivery outage in August", ["postmortem-webhook-outage-2025-08"]),
    ("how do I rotate API keys", ["help-api-keys"]),
    ("when do payouts arrive", ["help-payout-schedule"]),
    ("incident response severity levels", ["incident-response-policy"]),
    ("maximum payout limits", ["payout-limits-policy"]),
    ("daily reconciliation job fails", ["reconciliation-job-runbook"]),
    ("treasury bank account details", ["treasury-accounts"]),
    ("FX rates service update March", ["deploy-fx-rates-2026-03"]),
    ("ledger service rollout November", ["deploy-ledger-service-2025-11"]),
    ("which GBP cutoff applies after the migration", ["ticket-559"]),
    ("why did the January reconciliation fail", ["ticket-482", "ticket-482-comment-17"]),
    ("idempotent payout batch job migration", ["deploy-payout-batch-migration"]),
    ("knowledge base access groups", ["access-control-policy"]),
    ("cutover to the consolidated settlement platform", ["deploy-acme-cutover"]),
    ("is SSO included in our plan master services agreement", ["msa-acme"]),
    ("payouts on hold for a sub-account", ["ticket-530"]),
]


def build_sample_index(root, tenant: str = "acme") -> int:
    """Build ``tenant`` of the sample corpus under ``root``; returns the generation."""
    docs, _ = load_documents(SAMPLE_CORPUS)
    passages, parents = [], []
    for d in docs:
        if d.tenant == tenant:
            ps, pa = chunk_document(d, ChunkSettings(max_tokens=120))
            passages += ps
            parents += pa
    emb = HashingEmbedder(dim=64)
    vecs = emb.encode([passage_text_for_embedding(p) for p in passages])
    return build_tenant_index(str(root), tenant, passages, parents, vecs, embedder_name=emb.name,
                              chunker_version=CHUNKER_VERSION)
