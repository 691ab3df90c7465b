"""Resolution rules read off blind dev suites in session 24, each in an invented domain:
one part of a kind named by a letter or number, passages about two different places,
records published after valid_at, a value replaced in part, a higher authority's
override of a document it does not name, a help page restating a rule in other words,
a ticket's stopgap, and a recall or an incident closed."""

from __future__ import annotations

import datetime as dt

import pytest

from quarry.core.evidence.conditions import condition_met, entity_stems, event_terms, named_entities, other_parts, terms
from quarry.core.evidence.graph import facts_of
from quarry.core.evidence.resolve import resolve
from quarry.core.evidence.rules import ResolutionState, rank_of
from quarry.core.ingest.enrich import enrich
from quarry.core.ingest.pipeline import prepare
from quarry.core.records import Principal, SourceDocument

pytestmark = pytest.mark.unit

D = dt.date
ORG = Principal(tenant="acme", subject="u1", groups=frozenset({"all-staff"}))


def doc(doc_id: str, text: str, **kw) -> SourceDocument:
    base = dict(doc_id=doc_id, tenant="acme", acl=("all-staff",), doc_type="page", text=text)
    base.update(kw)
    return SourceDocument(**base)


def passages(*docs: SourceDocument):
    ps, _ = prepare(list(docs))
    return ps


def pid(ps, doc_id: str) -> str:
    (one,) = [p.passage_id for p in ps if p.doc_id == doc_id]
    return one


def rejected(decision) -> dict[str, tuple[str, str | None]]:
    return {r.passage_id: (r.reason, r.by) for r in decision.rejected}


def state(ps, day=D(2026, 3, 10)) -> ResolutionState:
    by_id = {p.passage_id: p for p in ps}
    return ResolutionState(day=day, rank={k: rank_of(p.envelope, None) for k, p in by_id.items()}, by_id=by_id)


# ----------------------------------------------------------------------------- parts

def test_an_entity_of_one_part_is_named_only_with_its_letter_or_number():
    # invented: a ferry terminal's berths and a bakery's lines
    assert named_entities("loading at Berth 2", ["berth-2"]) == {"berth-2"}
    assert named_entities("loading at berth-2 today", ["berth-2"]) == {"berth-2"}
    assert named_entities("loading at Berth 1", ["berth-2"]) == frozenset()
    assert other_parts("loading at Berth 1", ["berth-2", "harbour"]) == {"berth-2"}
    assert other_parts("is oven line 3 cleaned nightly?", ["line-4"]) == {"line-4"}
    # the kind without a part, the part itself, or a lower-case letter name no other part
    assert other_parts("all the berths", ["berth-2"]) == frozenset()
    assert other_parts("Berth 2 or Berth 3", ["berth-2"]) == frozenset()
    assert other_parts("walk along the berth a little", ["berth-2"]) == frozenset()


def test_an_exception_for_one_part_does_not_answer_a_question_about_another():
    # invented: a ferry terminal; Berth 2's works page moves its cut-off, the standard is for every berth
    standard = doc("loading-standard", "Vehicle check-in closes 30 minutes before sailing.", doc_type="policy",
                   title="Loading standard")
    works = doc("berth-2-works", "While Berth 2 is resurfaced, vehicle check-in closes 45 minutes before sailing.",
                title="Berth 2 resurfacing", entities=["harbour", "berth-2"], effective_to=D(2026, 6, 30))
    ps = passages(standard, works)
    there = resolve(ps, ORG, D(2026, 3, 10), query="when does vehicle check-in close for a Harbour sailing from Berth 2?")
    assert rejected(there) == {pid(ps, "loading-standard"): ("subordinate_to", pid(ps, "berth-2-works"))}
    other = resolve(ps, ORG, D(2026, 3, 10), query="when does vehicle check-in close for a Harbour sailing from Berth 1?")
    assert pid(ps, "loading-standard") not in rejected(other)
    assert pid(ps, "loading-standard") in {s.passage_id for s in other.governing}


# ----------------------------------------------------------------------------- places

def test_passages_about_two_different_places_do_not_contradict_each_other():
    # invented: a garden centre chain; each branch's page states its own café hours, and the
    # Ashby page (a policy) would otherwise outrank the Corfe page on a "conflict"
    ashby = doc("ashby-cafe", "This page is for the garden centre at Ashby. The café closes at 16:00 on weekdays.",
                doc_type="policy", title="Ashby branch: café hours", entities=["ashby", "cafe", "opening-hours"])
    corfe = doc("corfe-cafe", "This page is for the garden centre at Corfe, during its extension works. The café "
                "closes at 15:00 on weekdays.", title="Corfe branch: café during the extension",
                entities=["corfe", "cafe", "opening-hours"])
    ps = passages(ashby, corfe)
    d = resolve(ps, ORG, D(2026, 3, 10), query="what time does the café close on weekdays?")
    assert not d.rejected and not d.unresolved
    # a page that names the other's place, or lists it, is not about another place
    corfe_named = doc("corfe-cafe", "This page is for the garden centre at Corfe, during its extension works; "
                      "Ashby is unchanged. The café closes at 15:00 on weekdays.",
                      title="Corfe branch: café during the extension", entities=["corfe", "cafe", "opening-hours"])
    ps = passages(ashby, corfe_named)
    d = resolve(ps, ORG, D(2026, 3, 10), query="what time does the café close on weekdays?")
    assert rejected(d) == {pid(ps, "corfe-cafe"): ("subordinate_to", pid(ps, "ashby-cafe"))}


# ----------------------------------------------------------------------------- replaced in part

def _outings():
    # invented: a scout group; the memo replaces one rule of section 4 of the activities policy
    policy = doc("activities-policy", "On a hike, leaders count the scouts every 30 minutes. There must be "
                 "at least 2 leaders on every hike.", doc_type="policy", title="Activities and hikes policy")
    memo = doc("memo-hike-counts", "From 1 March leaders count the scouts every 15 minutes on a hike, in place of "
               "the 30-minute count set in section 4 of the activities and hikes policy. The rest of the policy "
               "is unchanged.", doc_type="policy", title="Memo: counting scouts on hikes")
    return passages(policy, memo)


def _partial(ps, query, similarity):
    from quarry.core.evidence.disputes import partial_overrides
    from quarry.core.evidence.question import speaks_to, stated_stems
    from quarry.core.text.tokenizer import tokenize
    st = state(ps)
    facts = {p.passage_id: facts_of(p) for p in ps}
    q = frozenset(tokenize(query))
    partial_overrides(st, facts, speaks_to(query), lambda s: len(q & stated_stems(s)), similarity)
    return {k: (r.reason, r.by) for k, r in st.rejected.items()}


def test_a_rule_replaced_in_part_is_superseded_where_the_question_asks_about_it():
    ps = _outings()
    got = _partial(ps, "how often are scouts counted on a hike?", lambda a, b: 0.8)
    assert got == {pid(ps, "activities-policy"): ("superseded_by", pid(ps, "memo-hike-counts"))}
    # asked about the rule the memo leaves alone, the passage stands
    assert _partial(ps, "how many leaders must go on a hike?", lambda a, b: 0.8) == {}
    # sentences the embedder finds unlike, or no embedder: no override in part
    assert _partial(ps, "how often are scouts counted on a hike?", lambda a, b: 0.2) == {}
    assert _partial(ps, "how often are scouts counted on a hike?", None) == {}


def test_a_higher_authority_naming_a_value_supersedes_only_a_document_it_names():
    # invented: a print shop; the memo names the price list's value, the runbook repeats it
    prices = doc("price-list", "Binding costs EUR 4 per copy.", doc_type="pricing", title="Binding charges schedule")
    runbook = doc("counter-runbook", "Charge EUR 4 per copy for binding.", doc_type="runbook",
                  title="Counter runbook")
    memo = doc("memo-binding", "Binding now costs EUR 5 per copy, in place of the EUR 4 in the binding charges "
               "schedule.",
               doc_type="policy", title="Memo: binding")
    ps = passages(prices, runbook, memo)
    d = resolve(ps, ORG, D(2026, 3, 10), query="how much does binding cost per copy?")
    got = rejected(d)
    assert got[pid(ps, "price-list")] == ("superseded_by", pid(ps, "memo-binding"))
    assert got[pid(ps, "counter-runbook")] == ("subordinate_to", pid(ps, "memo-binding"))


# ----------------------------------------------------------------------------- restated

def test_the_rule_a_help_page_restates_in_other_words_answers_in_its_place():
    # invented: a dog groomer; the FAQ's "a quarter of an hour" is the policy's 15 minutes
    from quarry.core.evidence.question import without_echoes
    policy = doc("grooming-policy", "The owner arrives 15 minutes before the booked slot for the check-in "
                 "form.", doc_type="policy")
    faq = doc("client-faq", "How early should I come before my dog's grooming slot? Come a quarter of an hour "
              "before your slot.", doc_type="help")
    ps = passages(policy, faq)
    st = state(ps)
    facts = {p.passage_id: facts_of(p) for p in ps}
    q = "how early before the grooming slot should the owner come?"
    answers = {pid(ps, "client-faq")}
    assert without_echoes(answers, st, facts, list(st.by_id), lambda a, b: 0.6, q) == {
        pid(ps, "grooming-policy"), pid(ps, "client-faq")}
    assert without_echoes(answers, st, facts, list(st.by_id), lambda a, b: 0.3, q) == answers  # unlike sentences
    assert without_echoes(answers, st, facts, list(st.by_id), lambda a, b: 0.6) == answers  # no question


# ----------------------------------------------------------------------------- interim

def test_a_tickets_stopgap_stands_in_for_the_policy_while_its_condition_lasts():
    # invented: a bike hire firm; until Denby moves to the new till, refunds there are by cheque
    # (entity lists mixing places with topics: neither passage is narrower by scope)
    policy = doc("refund-policy", "Refunds are paid within 5 working days.", doc_type="policy",
                 entities=["pedalo-bikes", "denby", "refunds-desk"])
    ticket = doc("ticket-den-77", "Denby is still on the old till. Until it has moved to CycleTill, refunds are "
                 "paid within 10 working days.", doc_type="ticket",
                 entities=["denby", "cycletill", "refunds-desk", "tills"], condition="until Denby has moved to CycleTill")
    ps = passages(policy, ticket)
    d = resolve(ps, ORG, D(2026, 3, 10), query="how long does a refund at Denby take?")
    assert rejected(d) == {pid(ps, "refund-policy"): ("subordinate_to", pid(ps, "ticket-den-77"))}
    # the record goes into traces: ids and codes, never the ticket's words
    assert d.rejected[0].detail.startswith("interim: ticket-den-77@1") and "CycleTill" not in d.rejected[0].detail
    # asked about no branch, the company's policy governs and the stopgap loses by authority
    d = resolve(ps, ORG, D(2026, 3, 10), query="how long does a refund take?")
    assert rejected(d) == {pid(ps, "ticket-den-77"): ("subordinate_to", pid(ps, "refund-policy"))}


# ----------------------------------------------------------------------------- closed

def test_a_recall_closed_is_an_event_in_the_text_or_the_title():
    notice = doc("recall-closed", "The maker fitted new valves to the last two urns on Tuesday 17 March 2026, "
                 "and Brewline has closed recall BR-0412 for our cafés.", doc_type="deployment",
                 title="Brewline U-3 recall closed: all urns back in use", published_at=D(2026, 3, 18))
    whats = {(e.what, e.on) for e in enrich(notice).events}
    assert ("recall br-0412 closed", D(2026, 3, 17)) in whats
    assert ("brewline u-3 recall closed", D(2026, 3, 17)) in whats
    said = doc("recall-over", "The U-3 recall is closed for our cafés from Friday 20 March 2026.",
               doc_type="deployment", title="Urns", published_at=D(2026, 3, 20))
    assert [(e.what, e.on) for e in enrich(said).events] == [("u-3 recall closed", D(2026, 3, 20))]
    # "closed out" is a completion; and only a record of events is read for them
    out = doc("x", "The snagging list was closed out on 2 March 2026.", doc_type="deployment", title="Snagging")
    assert [e.what for e in enrich(out).events] == ["snagging list completed"]
    assert enrich(doc("y", "Brewline has closed recall BR-0412 on 17 March 2026.", doc_type="page")).events == ()


def test_a_condition_on_a_recall_is_ended_by_an_event_naming_its_identifier():
    known = entity_stems(["brewline", "cafes", "recalls"])
    cond = terms("while the brewline water urn recall is open in our cafes", known)
    assert "open" not in cond.words  # the state it waits in, not what ends it
    closed = event_terms("recall br-0412 closed", "Recall BR-0412 closed", True, known)
    # the condition's words (urn, water) are not the event's; the recall's number in the
    # conditioned record's text says which recall it is
    assert not condition_met(cond, ["brewline", "cafes"], closed, ["brewline", "cafes"])
    assert condition_met(cond, ["brewline", "cafes"], closed, ["brewline", "cafes"], frozenset({"br-0412"}))
    other = event_terms("recall br-0999 closed", "Recall BR-0999 closed", True, known)
    assert not condition_met(cond, ["brewline", "cafes"], other, ["brewline", "cafes"], frozenset({"br-0412"}))


def test_a_document_saying_in_four_words_when_it_runs_is_dated():
    page = doc("p", "The Hats for Winter appeal runs from Monday 1 December 2025 until Saturday 28 February "
               "2026 and lapses at the end of that day.", title="Hats for Winter appeal")
    e = enrich(page)
    assert (e.effective_from, e.effective_to) == (D(2025, 12, 1), D(2026, 2, 28))
