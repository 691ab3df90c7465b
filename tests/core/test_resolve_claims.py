"""Session 25: a question quoting a lower source's value is checked against a higher
authority (:func:`quarry.core.evidence.question.checked_claims`; invented: a heating-repair
firm's call-out promise, stated by its service policy and, in other words and another value,
by its help page), a passage whose title or headings name an entity the question asks
about is about it (invented: a climbing wall's fee schedule), and an answer echoes another
only in what it states on the question (invented: a bike-share scheme), and two formal
documents dispute a question only in what both state on it (invented: a makerspace)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from quarry.core.evidence.graph import PassageFacts
from quarry.core.evidence.question import CLAIM_SIMILARITY
from quarry.core.evidence.subjects import DEFAULT_THRESHOLDS
from quarry.core.evidence.resolve import resolve
from quarry.core.evidence.statements import statements_batch
from quarry.core.ingest.pipeline import prepare
from quarry.core.records import Principal, SourceDocument

pytestmark = pytest.mark.unit

DAY = dt.date(2026, 3, 10)
STAFF = Principal(tenant="warmly", subject="u1", groups=frozenset({"all-staff"}))
POLICY = "# Attendance targets\n\nEmergency call-outs (no heating at all in winter) are attended within 6 hours."
HELP = "# Help: it's cold in here\n\nIf you have no heating at all, someone from our team will be at your door within 12 hours."
CLAIM = "the help page says someone is at the door within 12 hours when there is no heating, still right?"


def doc(doc_id: str, text: str, **kw) -> SourceDocument:
    base = dict(doc_id=doc_id, tenant="warmly", acl=("all-staff",), doc_type="page", text=text)
    base.update(kw)
    return SourceDocument(**base)


def _decide(policy: str, helper: str, query: str, cosine: float, **help_kw):
    ps, _ = prepare([doc("warmly-callout-policy", policy, doc_type="policy"),
                     doc("warmly-help-boiler", helper, doc_type="help", **help_kw)])
    stated = statements_batch([p.text for p in ps], [p.envelope.entities for p in ps], tenant="warmly")
    # every clause at ``cosine`` to every other: unit vectors at that angle in the plane
    by_doc = {p.doc_id: i for i, p in enumerate(ps)}
    facts = {}
    for p, ss in zip(ps, stated):
        angle = np.arccos(cosine) if by_doc[p.doc_id] else 0.0
        vs = np.array([[np.cos(angle), np.sin(angle)] for _ in ss], np.float32).reshape(len(ss), 2)
        facts[p.passage_id] = PassageFacts(p.passage_id, tuple(ss), False, vs)
    d = resolve(ps, STAFF, DAY, query=query, facts=facts)
    ids = {p.doc_id: p.passage_id for p in ps}
    return d, ids


def test_a_quoted_lower_claim_gives_way_to_the_higher_authority_nearest_it():
    d, ids = _decide(POLICY, HELP, CLAIM, CLAIM_SIMILARITY + 0.05)
    rejected = {r.passage_id: (r.reason, r.by) for r in d.rejected}
    assert rejected[ids["warmly-help-boiler"]] == ("subordinate_to", ids["warmly-callout-policy"])
    assert [g.passage_id for g in d.governing] == [ids["warmly-callout-policy"]]
    detail = next(r.detail for r in d.rejected if r.passage_id == ids["warmly-help-boiler"])
    assert "within" not in detail and "heating" not in detail  # ids and codes only, never text


def test_a_claim_is_kept_when_the_clauses_are_unlike_or_nothing_is_quoted():
    # the policy's clause far from the claim's: no higher statement is checked against it
    d, ids = _decide(POLICY, HELP, CLAIM, CLAIM_SIMILARITY - 0.1)
    assert ids["warmly-help-boiler"] not in {r.passage_id for r in d.rejected}
    # a question quoting no value asks, it claims nothing
    d, ids = _decide(POLICY, HELP, "how soon is someone at the door when there is no heating?",
                     CLAIM_SIMILARITY + 0.05)
    assert not any(r.passage_id == ids["warmly-help-boiler"] and "quotes" in r.detail for r in d.rejected)


def test_a_claim_the_higher_authority_repeats_stands_and_an_exception_is_never_checked():
    same = POLICY.replace("6 hours", "12 hours")
    d, ids = _decide(same, HELP, CLAIM, CLAIM_SIMILARITY + 0.05)
    assert ids["warmly-help-boiler"] not in {r.passage_id for r in d.rejected}
    # a help page in force only until a date is an exception, not a claim to check
    d, ids = _decide(POLICY, HELP, CLAIM, CLAIM_SIMILARITY + 0.05, effective_to=dt.date(2026, 3, 31))
    assert not any(r.passage_id == ids["warmly-help-boiler"] and "quotes" in r.detail for r in d.rejected)


# ----------------------------------------------------------------------------- headings

def test_a_section_whose_heading_names_the_entity_asked_about_answers():
    # invented: a climbing wall. The question names "chalk bags", a topic only the kit page
    # lists; the fee schedule's section headed "Chalk bags" states the price under it
    fees = doc("crag-fees", "# Fees and charges 2026\n\n## Day passes\n\nAn adult day pass costs GBP 14.\n\n"
               "## Chalk bags\n\nHire costs GBP 3 per visit.", doc_type="pricing", title="Fees and charges 2026",
               entities=("crag-climbing", "north-wall"), tenant="warmly")
    kit = doc("crag-kit", "# Kit at the desk\n\nChalk bags and harnesses are kept behind the front desk; ask a member "
              "of staff.", entities=("chalk-bags", "harnesses"), tenant="warmly")
    ps, _ = prepare([fees, kit])
    d = resolve(ps, STAFF, DAY, query="how much is chalk bag hire?")
    chalk = next(p.passage_id for p in ps if p.doc_id == "crag-fees" and "Chalk bags" in p.heading_path)
    assert chalk in {g.passage_id for g in d.governing}
    passes = next(p.passage_id for p in ps if p.doc_id == "crag-fees" and "Day passes" in p.heading_path)
    assert passes not in {g.passage_id for g in d.governing}  # the day-pass section names no chalk bags


# ----------------------------------------------------------------------------- echoes

def test_an_answer_echoes_another_only_in_what_it_states_on_the_question():
    from quarry.core.evidence.graph import facts_of
    from quarry.core.evidence.question import without_echoes
    from quarry.core.evidence.rules import ResolutionState, rank_of

    # invented: a bike-share scheme. The Harbour Road page answers a question about card
    # changes; its dock codes repeat the go-live record's, which says nothing on card changes
    page = doc("bikes-harbour-road", "# Docks\n\nA change of payment card must reach the Harbour Road "
               "desk at least 10 working days before the billing date.\n\nDock release codes have 4 digits.")
    record = doc("bikes-golive", "# Docks\n\nDock release codes have 4 digits from now on.", doc_type="deployment")
    ps, _ = prepare([page, record])
    by_id = {p.passage_id: p for p in ps}
    st = ResolutionState(day=DAY, rank={k: rank_of(p.envelope, None) for k, p in by_id.items()}, by_id=by_id)
    facts = {k: facts_of(p) for k, p in by_id.items()}
    ids = {p.doc_id: p.passage_id for p in ps}
    both = {ids["bikes-harbour-road"], ids["bikes-golive"]}
    assert st.rank[ids["bikes-harbour-road"]] < st.rank[ids["bikes-golive"]]
    kept = without_echoes(both, st, facts, query="payment card change notice at Harbour Road")
    assert ids["bikes-harbour-road"] in kept
    # asked about the codes, the page only repeats the record
    kept = without_echoes(both, st, facts, query="how many digits do dock release codes have?")
    assert kept == {ids["bikes-golive"]}


# ----------------------------------------------------------------------------- formal conflicts

def test_two_formal_documents_dispute_a_question_only_in_what_both_state_on_it():
    # invented: a makerspace. The workshop rules' booking notice and a later memo's dust
    # extractor, "booked a day ahead", share words but only the rules speak of sessions there
    rules = doc("make-rules", "# Workshop rules\n\nBook every laser-cutter session with the workshop office at "
                "least 5 working days before the day you want.", doc_type="policy",
                effective_from=dt.date(2025, 9, 1), tenant="warmly")
    memo = doc("make-memo", "# Memo: extraction\n\nThe workshop office lends a dust extractor free of charge, "
               "booked a day ahead. Laser-cutter sessions are charged GBP 12 per hour.", doc_type="policy",
               effective_from=dt.date(2026, 2, 16), tenant="warmly")
    ps, _ = prepare([rules, memo])
    ids = {p.doc_id: p.passage_id for p in ps}
    d = resolve(ps, STAFF, DAY, query="how much notice does a laser-cutter session need?")
    assert ids["make-rules"] not in {r.passage_id for r in d.rejected}
    assert ids["make-rules"] in {g.passage_id for g in d.governing}


def test_a_claim_is_checked_on_other_words_of_the_question_in_a_clause_like_it():
    # the help page's claim shares "engineer" with the question, the policy's sentence only
    # "emergency": checked against it only where the two clauses are as alike as one subject's
    helper = "# Help: it's cold in here\n\nAn engineer will be at your door within 12 hours."
    claim = "help page says an engineer comes within 12 hours in an emergency, still right?"
    d, ids = _decide(POLICY, helper, claim, DEFAULT_THRESHOLDS.similarity + 0.05)
    rejected = {r.passage_id: (r.reason, r.by) for r in d.rejected}
    assert rejected[ids["warmly-help-boiler"]] == ("subordinate_to", ids["warmly-callout-policy"])
    assert [g.passage_id for g in d.governing] == [ids["warmly-callout-policy"]]
    # nearer than a claim's floor but not as alike as one subject's sentences: the claim stays
    d, ids = _decide(POLICY, helper, claim, (CLAIM_SIMILARITY + DEFAULT_THRESHOLDS.similarity) / 2)
    assert ids["warmly-help-boiler"] not in {r.passage_id for r in d.rejected}
