"""Passages outside ``valid_at``: the filter keeps them from delivery, and resolution still
decides over those the search without it ranks among its first candidates, rejecting each
with its reason (a rule that starts next week, an offer that lapsed). Only the validity
filter is lifted: ACL and tenant mask the probe like any leg.

Invented corpus: a climbing centre's rules, a memo that changes one of them from a future
date, a lapsed offer, and a restricted memo the principal may not read."""

from __future__ import annotations

import datetime as dt

import pytest

from quarry.core.embed.embedders import HashingEmbedder
from quarry.core.index.shards import TenantIndex
from quarry.core.records import Principal, SearchRequest, SourceDocument
from quarry.core.search.in_process import search
from quarry.core.search.settings import SearchSettings

pytestmark = [pytest.mark.unit]

EMB = HashingEmbedder(dim=64)
STAFF = Principal(tenant="cragside", subject="t", groups=frozenset({"all-staff"}))
DAY = dt.date(2026, 2, 25)
D = dt.date


def _doc(doc_id: str, text: str, **kw) -> SourceDocument:
    base = dict(doc_id=doc_id, tenant="cragside", acl=("all-staff",), text=text, title=doc_id.replace("-", " "),
                doc_type="policy", authority="policy", published_at=D(2025, 9, 1))
    base.update(kw)
    return SourceDocument(**base)


@pytest.fixture(scope="module")
def cragside(tmp_path_factory):
    from quarry.core.ingest.pipeline import build_corpus

    docs = [
        _doc("cragside-wall-rules", "# Wall rules\n\nChildren under 14 climb with an adult on the lead wall. "
             "The auto-belay lines close 30 minutes before the centre closes.", effective_from=D(2025, 9, 1)),
        _doc("cragside-memo-auto-belay", "# Auto-belay lines\n\nFrom 2 March 2026 the auto-belay lines close "
             "60 minutes before the centre closes.", doc_type="memo", effective_from=D(2026, 3, 2)),
        _doc("cragside-offer-winter", "# Winter offer\n\nThe auto-belay lines are free for members until "
             "31 January 2026.", doc_type="pricing", authority="pricing", effective_to=D(2026, 1, 31)),
        _doc("cragside-memo-setters", "# Setters\n\nFrom 9 March 2026 the auto-belay lines close 90 minutes "
             "before the centre closes on setting days.", doc_type="memo", acl=("route-setters",),
             effective_from=D(2026, 3, 9)),
    ]
    root = str(tmp_path_factory.mktemp("cragside"))
    build_corpus(docs, root, EMB)
    return TenantIndex.load(root, "cragside")


def _rejected(res) -> dict[str, str]:
    return {r.passage_id.split("@")[0]: r.reason for r in res.decision.rejected}


def test_a_rule_starting_later_and_a_lapsed_offer_are_rejected_not_delivered(cragside):
    res = search(cragside, STAFF, SearchRequest(query="when do the auto-belay lines close", top_k=1, valid_at=DAY),
                 EMB, SearchSettings())
    assert {e.passage_id.split("@")[0] for e in res.excerpts} == {"cragside-wall-rules"}
    rejected = _rejected(res)
    assert rejected.get("cragside-memo-auto-belay") == "not_yet_effective"
    assert rejected.get("cragside-offer-winter") == "no_longer_effective"
    assert "cragside-memo-setters" not in rejected  # never read: the ACL masks the probe too
    assert "not in force at valid_at" in next(s.note for s in res.stages if s.name == "resolve")


def test_off_or_without_valid_at_nothing_is_added(cragside):
    off = search(cragside, STAFF, SearchRequest(query="when do the auto-belay lines close", top_k=1, valid_at=DAY),
                 EMB, SearchSettings(out_of_force=0))
    assert "cragside-memo-auto-belay" not in _rejected(off)
    undated = search(cragside, STAFF, SearchRequest(query="when do the auto-belay lines close", top_k=1),
                     EMB, SearchSettings(resolution_pool=1))
    assert all(r.reason not in ("not_yet_effective", "no_longer_effective") for r in undated.decision.rejected)


def test_a_reader_of_the_restricted_memo_sees_it_rejected_too(cragside):
    setter = Principal(tenant="cragside", subject="s", groups=frozenset({"all-staff", "route-setters"}))
    res = search(cragside, setter, SearchRequest(query="when do the auto-belay lines close", top_k=1, valid_at=DAY),
                 EMB, SearchSettings(out_of_force=3))
    assert _rejected(res).get("cragside-memo-setters") == "not_yet_effective"
