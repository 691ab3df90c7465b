"""Seed 000 §11.7, asked in its own words: the decision does not depend on top_k.

The sample corpus as shipped, and rebuilt with ``condition``, ``events``, ``supersedes``
and ``superseded_by`` removed from the front matter (the links then come only from the
text, through enrichment), with the packaged MiniLM; two principals; every top_k from 1 to
10. On 19 January policy v3 governs with the rollout record supporting it, the ticket
comment is rejected (condition_ended, by the rollout record) and runbook v2 is rejected
(superseded_by policy v3), nothing unresolved. On 10 January the comment governs.
"""

from __future__ import annotations

import datetime as dt

import pytest

from quarry.core.index.shards import TenantIndex
from quarry.core.records import Principal, SearchRequest
from quarry.core.search.in_process import search

pytestmark = [pytest.mark.unit, pytest.mark.slow]

QUESTION = "Which settlement cutoff applies to Acme's Monday EUR batch on 19 January?"
PRINCIPALS = [frozenset({"all-staff"}), frozenset({"all-staff", "support", "engineering"})]
LINKS = ("condition", "events", "supersedes", "superseded_by")


@pytest.fixture(scope="module")
def stripped_root(tmp_path_factory, sample_docs, minilm) -> str:
    from quarry.core.ingest.contextualize_extractive import ExtractiveContextualizer
    from quarry.core.ingest.pipeline import build_corpus

    docs = [d.model_copy(update={"condition": None, "events": (), "supersedes": (), "superseded_by": ()})
            for d in sample_docs if d.tenant == "acme"]
    root = str(tmp_path_factory.mktemp("acme-stripped"))
    build_corpus(docs, root, minilm, ExtractiveContextualizer())
    return root


def _docs(items) -> set[str]:
    return {x.passage_id.split("#")[0] for x in items}


def _decide(root, minilm, groups, day, k):
    index = TenantIndex.load(root, "acme")
    p = Principal(tenant="acme", subject="seed", groups=groups)
    return search(index, p, SearchRequest(query=QUESTION, top_k=k, valid_at=day), minilm).decision


@pytest.mark.parametrize("corpus", ["as-shipped", "links-only-in-text"])
def test_the_seed_question_resolves_as_the_seed_at_every_width(corpus, sample_index_root, stripped_root, minilm):
    root = sample_index_root if corpus == "as-shipped" else stripped_root
    seen = set()
    for groups in PRINCIPALS:
        for k in range(1, 11):
            d = _decide(root, minilm, groups, dt.date(2026, 1, 19), k)
            assert _docs(d.governing) == {"settlement-policy@3"}, (groups, k, d)
            assert "deploy-acme-cutover@1" in _docs(d.supporting), (groups, k, d)
            rejected = {r.passage_id.split("#")[0]: r for r in d.rejected}
            assert rejected["ticket-482-comment-17@1"].reason == "condition_ended"
            assert rejected["ticket-482-comment-17@1"].by.startswith("deploy-acme-cutover@1#")
            runbook = [r for r in d.rejected if r.passage_id.startswith("settlement-runbook@2#")]
            assert runbook and all(r.reason == "superseded_by" and r.by.startswith("settlement-policy@3#")
                                   for r in runbook)
            assert d.unresolved == ()
            seen.add((tuple(s.passage_id for s in d.governing), tuple(s.passage_id for s in d.supporting),
                      tuple((r.passage_id, r.reason, r.by) for r in d.rejected)))
    assert len(seen) == 1  # the same record at every width, for both principals


def test_before_the_cutover_the_comment_governs(sample_index_root, stripped_root, minilm):
    for root in (sample_index_root, stripped_root):
        for groups in PRINCIPALS:
            for k in (1, 4, 10):
                d = _decide(root, minilm, groups, dt.date(2026, 1, 10), k)
                assert _docs(d.governing) == {"ticket-482-comment-17@1"}, (k, d)
                assert {r.passage_id.split("#")[0]: r.reason for r in d.rejected}["settlement-policy@3"] == \
                    "subordinate_to"
                assert d.unresolved == ()
