"""A document named by its title in another's text: the enricher keeps the phrase
(``supersedes_titles``), and the graph and the resolver match it against the tenant's
titles, so supersession needs no doc id; a value named *in* a document ("the GBP 80
charge in the parking policy") never supersedes the whole document.

Sentences are invented for these tests (a ferry operator, a marina), not taken from any
evaluation corpus."""

from __future__ import annotations

import datetime as dt

import pytest

from quarry.core.embed.embedders import HashingEmbedder
from quarry.core.evidence.graph import graph_of
from quarry.core.evidence.resolve import resolve
from quarry.core.evidence.titles import names_title
from quarry.core.index.shards import TenantIndex
from quarry.core.ingest.enrich import enrich
from quarry.core.ingest.pipeline import build_corpus, prepare
from quarry.core.records import Principal, SourceDocument

pytestmark = pytest.mark.unit

D = dt.date
P = Principal(tenant="t", subject="u", groups=frozenset({"all-staff"}))


def doc(doc_id: str, text: str, **kw) -> SourceDocument:
    base = dict(doc_id=doc_id, tenant="t", acl=("all-staff",), doc_type="policy", text=text)
    base.update(kw)
    return SourceDocument(**base)


@pytest.mark.parametrize("phrase,title,named", [
    ("the Berthing Standard BS-01 issued in May 2025", "Berthing Standard BS-01", True),
    ("The mooring price list issued in June 2025", "Marina mooring price list (June 2025)", True),
    ("the previous mooring price list (June 2025)", "Marina mooring price list (June 2025)", True),
    # another number is another document
    ("the Berthing Standard BS-01 issued in May 2025", "Berthing Standard BS-02", False),
    ("The mooring price list issued in June 2025", "Marina mooring price list (March 2026)", False),
    # a value in a document, not the document
    ("the EUR 40 daily charge in the mooring price list", "Mooring price list", False),
    # too little of the title
    ("the price list", "Marina mooring price list (June 2025)", False),
    # a numbered part of a document, not the document ("rule" is also a word of the title)
    ("the rule in section 5 of the Slipway and mooring rules", "Slipway and mooring rules", False),
    ("clause 3 of the mooring price list", "Mooring price list", False),
])
def test_a_phrase_names_a_title(phrase, title, named):
    assert names_title(phrase, title) is named


def test_the_enricher_keeps_title_phrases_and_the_date_fronting_the_replacement():
    d = enrich(doc("berthing-standard-2026", "# Berthing Standard BS-02\n\nWith effect from 2 March 2026 this "
                   "standard stands in for the Berthing Standard BS-01 issued in May 2025.\n\nBoats berth "
                   "stern first.", title="Berthing Standard BS-02", published_at=D(2026, 2, 10)))
    assert d.supersedes_titles == ("the Berthing Standard BS-01 issued in May 2025",)
    assert d.effective_from == D(2026, 3, 2)
    assert {"supersedes_titles", "effective_from"} <= set(d.extracted)
    partial = enrich(doc("mooring-memo", "# Memo\n\nFrom 2 March 2026 the daily charge is EUR 45. This takes the "
                         "place of the EUR 40 daily charge in the mooring price list.", doc_type="memo"))
    assert not any(names_title(t, "Mooring price list") for t in partial.supersedes_titles)


OLD = doc("mooring-prices-2025", "# Marina mooring price list (June 2025)\n\nA visitor berth costs EUR 40 a night.",
          title="Marina mooring price list (June 2025)", effective_from=D(2025, 6, 1))
NEW = doc("mooring-prices-2026", "# Marina mooring price list (March 2026)\n\nFrom 1 March 2026 this price list "
          "replaces the mooring price list issued in June 2025.\n\nA visitor berth costs EUR 46 a night.",
          title="Marina mooring price list (March 2026)", published_at=D(2026, 2, 9))


def test_the_resolver_reads_supersession_by_title():
    ps, _ = prepare([OLD, NEW])
    old = [p.passage_id for p in ps if p.doc_id == "mooring-prices-2025"]
    d = resolve(ps, P, D(2026, 3, 10), query="what does a visitor berth cost a night?")
    assert {r.passage_id: r.reason for r in d.rejected} == {pid: "superseded_by" for pid in old}
    assert {s.passage_id.split("@")[0] for s in d.governing} == {"mooring-prices-2026"}
    before = resolve(ps, P, D(2026, 2, 20), query="what does a visitor berth cost a night?")
    assert not before.rejected or all(r.reason == "not_yet_effective" for r in before.rejected)


def test_the_graph_links_a_document_named_by_title(tmp_path):
    build_corpus([OLD, NEW], str(tmp_path), HashingEmbedder(dim=64))
    g = graph_of(TenantIndex.load(str(tmp_path), "t"))
    assert g.link_kind[("mooring-prices-2026@1", "mooring-prices-2025@1")] == "supersession"
