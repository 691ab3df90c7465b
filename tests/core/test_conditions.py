"""Condition -> event matching (core.conditions): identifiers whole, stemmed content words,
completion filler dropped, entities agreeing, and near misses (another environment, site,
system, entity, identifier) never ending a condition. Conditions and events are written
as the enricher writes them, and each pair is also run through the enricher from prose."""

from __future__ import annotations

import datetime as dt

import pytest

from quarry.core.evidence.conditions import condition_met, entity_stems, terms
from quarry.core.ingest.enrich import enrich
from quarry.core.records import SourceDocument

pytestmark = pytest.mark.unit

KNOWN = entity_stems(["acme", "globex", "initech", "northwind"])


def met(cond: str, event: str, cond_scope=("acme",), event_scope=("acme",)) -> bool:
    return condition_met(terms(cond, KNOWN), cond_scope, terms(event, KNOWN), event_scope)


@pytest.mark.parametrize("cond, event", [
    ("until cutover", "acme cutover completed"),
    ("until cutover", "cutover completed"),
    ("until the payout_batch_v2 migration completes", "payout_batch_v2 migration completed"),
    ("until the ehr migration completes", "ehr migration completed"),
    ("until the EHR migration completes", "the ehr migration was finished"),
    ("until the warehouse relocation completes", "leeds warehouse relocation completed"),  # site in scope below
    ("until the new payroll system completes", "new payroll system completed"),
    ("until the security review", "security review completed"),
    ("until the hiring freeze ends", "hiring freeze lifted completed"),
    ("until the production migration completes", "production migration completed"),
    ("until the migration completes", "production migration completed"),
    ("until the Q2 2026 contract renewal", "q2 2026 contract renewal completed"),
    ("until the billing-v2 rollout completes", "billing-v2 rollout completed"),
    # changeover nouns stand for one another when the condition names what changes over
    ("until the switch of library loans", "library loans cutover completed"),
    ("until the move of the ticket desk completes", "ticket desk migration completed"),
    # the condition's framing verb says it is under way, not what it waits for
    ("while the east wing refurbishment continues", "east wing refurbishment completed"),
    ("as long as the ledger migration lasts", "ledger migration completed"),
    # "cut over" is the cutover, written apart or hyphenated, on either side
    ("until the depot has cut over to FlowStock", "depot to flowstock cutover completed"),
    ("until the east-wing refurbishment completes", "east wing refurbishment completed"),
    ("until Elmfield has switched to ClinixPro", "elmfield to clinixpro in production cutover completed"),
    ("until the east wing refurbishment completes", "east-wing refurbishment completed"),
    ("until the payroll team cuts over to Ledgerly", "payroll team to ledgerly cut-over completed"),
    # a closure or an outage waits for what is back in service (the enricher's restoration event)
    ("while the ferry is off the road", "ferry reopened, back in service"),
    ("as long as the goods lift is out of service", "goods lift reopened, back in service"),
    ("while the pier is shut", "pier reopened, back in service"),
])
def test_condition_met(cond, event):
    scope = ("acme", "leeds") if "leeds" in event else ("acme",)
    assert met(cond, event, cond_scope=scope)


@pytest.mark.parametrize("cond, event, why", [
    ("until the payout_batch_v2 migration completes", "payout_batch_v3 migration completed", "another identifier"),
    ("until the INC-2291 fix completes", "INC-2292 fix completed", "another identifier"),
    ("until the production migration completes", "staging migration completed", "another environment"),
    ("until the migration completes", "staging migration completed", "another environment"),
    ("until the migration completes", "uat migration completed", "another environment"),
    ("until the ehr migration completes", "billing migration completed", "another system"),
    ("until the ehr migration completes", "northside clinic ehr migration completed", "another clinic"),
    ("until the Leeds depot relocation completes", "bristol depot relocation completed", "another site"),
    ("until the warehouse relocation completes", "leeds warehouse relocation completed", "a site not in scope"),
    ("until the erp migration completes", "erp migration planning completed", "part of it, not it"),
    ("until further notice", "further notice completed", "open-ended"),
    ("until otherwise notified", "notification completed", "open-ended"),
    ("until the switch of library loans", "museum tickets cutover completed", "another thing changed over"),
    ("until the migration completes", "cutover completed", "a changeover of nothing named"),
    ("until the switch of library loans", "staging library loans cutover completed", "another environment"),
    ("while the east wing refurbishment continues", "west wing refurbishment completed", "another part"),
    ("until the depot has cut over to FlowStock", "depot to ledgerbin cutover completed", "another system"),
    ("until the surgery wing works completes", "surgery wing works theatre 1 handed back completed", "a numbered part"),
    ("while the east wing refurbishment continues", "east wing floors 4 and 5 reopened completed", "a numbered part"),
    ("until the east-wing refurbishment completes", "west wing refurbishment completed", "another part"),
    ("until the Acme cutover completes", "acme ledger migration completed", "another changeover of the entity"),
    ("until Elmfield has switched to ClinixPro", "elmfield to vetledger cutover completed", "another system"),
    ("while the goods lift is out of service", "passenger lift reopened, back in service", "another lift"),
    ("while the ferry is off the road", "harbour office reopened, back in service", "something else back"),
])
def test_near_misses_never_end_a_condition(cond, event, why):
    assert not met(cond, event), why


def test_never_across_entities():
    assert not met("until cutover", "globex cutover completed")
    assert not met("until cutover", "cutover completed", cond_scope=("acme",), event_scope=("globex",))
    assert met("until cutover", "cutover completed", cond_scope=("acme",), event_scope=("acme", "globex"))
    assert not met("until acme's cutover", "cutover completed", cond_scope=(), event_scope=("globex",))


def test_terms_fields():
    t = terms("northside clinic staging ehr migration completed", KNOWN)
    assert t.qualifiers == frozenset({"northsid", "stage"}) and not t.open_ended
    assert terms("until further notice", KNOWN).open_ended


D = dt.date


def _doc(doc_id: str, text: str, **kw) -> SourceDocument:
    return enrich(SourceDocument(doc_id=doc_id, tenant="acme", acl=("*",), text=text, entities=("acme",), **kw))


@pytest.mark.parametrize("rule, record, ends", [
    ("While the EHR migration is under way, clinicians record allergies on paper.",
     "The EHR migration was finished on 15 January 2026.", True),
    ("Refunds above EUR 500 are held pending the security review.",
     "The security review was completed on 2 February 2026.", True),
    ("Once the ledger cutover is done, the 15:00 cutoff applies again.",
     "The ledger cutover went live on January 20, 2026.", True),
    ("The EUR cutoff remains 16:00 until the production migration is complete.",
     "The staging migration is complete as of 3 March 2026.", False),
    ("Orders ship from the Leeds depot while the warehouse relocation is in progress.",
     "The Bristol warehouse relocation concluded on 2026/01/15.", False),
    ("The on-call rota is suspended until further notice.", "The rota review was done on 15 Jan 2026.", False),
    # a long "pending" noun phrase is cut before where the changeover goes
    ("Pending the switch of ferry bookings to the new harbour reservation platform, online seat reservations "
     "are unavailable.", "Ferry bookings cut over on 3 March 2026 to the new platform.", True),
    ("Pending the switch of ferry bookings to the new harbour reservation platform, online seat reservations "
     "are unavailable.", "Cabin upgrades cut over on 3 March 2026 to the new platform.", False),
])
def test_from_prose_to_a_decision(rule, record, ends):
    cond_doc = _doc("rule", rule)
    ev_doc = _doc("rec", record, doc_type="deployment")
    assert cond_doc.condition and len(ev_doc.events) == 1
    ev = ev_doc.events[0]
    assert met(cond_doc.condition, ev.what) is ends


@pytest.mark.parametrize("cond, part, whole", [
    ("until the rollout completes", "phase 1 of the rollout completed", "rollout completed"),
    ("until the erp migration completes", "erp migration dry-run completed", "erp migration completed"),
    ("until the badge rollout completes", "badge rollout pilot completed", "badge rollout completed"),
])
def test_a_part_of_it_is_not_it(cond, part, whole):
    assert not met(cond, part) and met(cond, whole)


@pytest.mark.parametrize("cond,event,met", [
    ("while the austin office refurbishment is under way", "austin office refurbishment completed", True),
    ("while the ledger migration is in progress", "ledger migration completed", True),
    ("for the duration of the wms migration", "wms migration completed", True),
    ("while the austin office refurbishment is under way", "leeds office refurbishment completed", False),
])
def test_front_matter_conditions_in_other_words_match_their_event(cond, event, met):
    from quarry.core.evidence.conditions import condition_met, entity_stems, terms

    known = entity_stems(["austin", "leeds"])
    assert condition_met(terms(cond, known), (), terms(event, known), ()) is met


def test_compound_entity_names_in_prose_and_signed_off_as_completion():
    from quarry.core.evidence.conditions import named_entities

    ents = ("elm-court", "north-campus", "acme")
    assert named_entities("I live in Elm Court on the north campus", ents) == {"elm-court", "north-campus"}
    assert named_entities("Acme's cutoff", ents) == {"acme"}
    assert named_entities("the court of appeal", ents) == frozenset()
    known = entity_stems(("elm-hall", "oak-hall"))
    cond = terms("until the Elm Hall refit is signed off", known)
    assert condition_met(cond, ("elm-hall",), terms("elm hall heating refit completed", known), ("elm-hall",))
    assert not condition_met(cond, ("elm-hall",), terms("oak hall refit completed", known), ("oak-hall",))


HOTELS = entity_stems(["harbourside", "kingsgate", "northgate"])


@pytest.mark.parametrize("cond, what, title, ends", [
    # the record's one event takes its title's words: it says what moved, and to what
    ("until the Harbourside hotel has moved to the new PMS", "harbourside on tessera in production completed",
     "Change PMS-047: Harbourside moved to Tessera", True),
    ("until Harbourside's move to the new PMS", "harbourside on tessera in production completed",
     "Change PMS-047: Harbourside moved to Tessera", True),
    # without the title the event names no PMS: not the stopping event
    ("until Harbourside's move to the new PMS", "harbourside on tessera in production completed", "", False),
    # another hotel's move, a rehearsal: near misses still
    ("until Harbourside's move to the new PMS", "kingsgate on tessera completed",
     "Change PMS-044: Kingsgate moved to Tessera", False),
    ("until Harbourside's move to the new PMS", "harbourside tessera training rehearsal completed",
     "Change PMS-046: Harbourside moved to Tessera (rehearsal)", False),
    # the title's site words are no qualifier of the event
    ("until Northgate has cut over to FlowStock", "northgate to flowstock cutover completed",
     "FlowStock WMS cutover, Northgate fulfilment centre", True),
])
def test_a_single_event_takes_its_records_title(cond, what, title, ends):
    from quarry.core.evidence.conditions import event_terms

    event = event_terms(what, title, True, HOTELS)
    scope = ("harbourside",) if "harbourside" in cond.lower() else ("northgate",)
    escope = ("kingsgate",) if "kingsgate" in what else scope
    assert condition_met(terms(cond, HOTELS), scope, event, escope) is ends


def test_a_record_of_several_events_keeps_each_to_its_own_words():
    from quarry.core.evidence.conditions import event_terms

    # "Q1 migrations" in the title must not make the badge rollout a migration
    assert not condition_met(terms("until the migration completes", KNOWN), ("acme",),
                             event_terms("badge rollout completed", "Change record: Q1 migrations", False, KNOWN),
                             ("acme",))
    assert condition_met(terms("until the migration completes", KNOWN), ("acme",),
                         event_terms("badge rollout completed", "Change record: Q1 migrations", True, KNOWN),
                         ("acme",))


def test_a_changeover_named_by_entities_is_ended_only_by_one_naming_them_all():
    known = entity_stems(["elmfield", "harwood", "clinixpro"])
    cond = terms("until Elmfield has switched to ClinixPro", known)
    mine = terms("elmfield to clinixpro in production cutover completed", known)
    other = terms("harwood to clinixpro cutover completed", known)
    assert condition_met(cond, ("elmfield", "clinixpro"), mine, ("elmfield", "clinixpro"))
    assert not condition_met(cond, ("elmfield", "clinixpro"), other, ("harwood", "clinixpro"))


def test_a_condition_naming_only_entities_is_ended_by_an_event_naming_them_all():
    known = entity_stems(["elmfield", "harwood", "clinixpro"])
    cond = terms("until clinixpro is live at harwood", known)
    assert condition_met(cond, ("harwood", "clinixpro"), terms("clinixpro went live at harwood", known),
                         ("harwood", "clinixpro"))
    assert not condition_met(cond, ("harwood", "clinixpro"), terms("clinixpro went live at elmfield", known),
                             ("elmfield", "clinixpro"))
    assert not condition_met(cond, ("harwood", "clinixpro"),
                             terms("clinixpro training rehearsal at harwood completed", known), ("harwood",))


def test_one_of_several_sites_is_a_part_of_them():
    known = entity_stems(["vale", "brackley", "elston", "wyle", "inc-7781"])
    scope = ("vale", "brackley", "elston", "wyle", "inc-7781")
    cond = terms("until the Vale exchanges ends", known)
    one = terms("brackley exchange service restored after the vale flooding", known)
    whole = terms("vale exchanges flood outage ended, all three exchanges back in service", known)
    assert not condition_met(cond, scope, one, scope)
    assert condition_met(cond, scope, whole, scope)
    # the same event names every site: the whole
    every = terms("brackley, elston and wyle exchanges back in service", known)
    assert condition_met(terms("until the exchanges ends", known), scope, every, scope)


def test_moved_across_is_a_move():
    known = entity_stems(["arclight", "carebill"])
    cond = terms("until the North West has been moved across to Arclight", known)
    ev = terms("north west residential accounts to arclight in production cutover completed", known)
    assert condition_met(cond, ("north-west", "arclight"), ev, ("north-west", "arclight"))


def test_a_move_between_named_places_is_ended_by_that_move_whatever_topics_it_mentions():
    # invented: two chandlery branches merging; the record's entity list mixes places with topics
    known = entity_stems(["quayside", "eastport", "berth-bookings", "moorings", "fuel-sales"])
    scope = ("quayside", "eastport", "berth-bookings", "moorings", "fuel-sales")
    cond = terms("while the Quayside branch is being merged into Eastport", known)
    done = terms("quayside merger into eastport completed; every quayside mooring and berth-bookings record moved",
                 known)
    assert condition_met(cond, scope, done, scope)  # "merger" is what "is being merged" waits for
    # another merger is not it
    assert not condition_met(cond, scope, terms("harbour office merger completed", known), scope)


@pytest.mark.parametrize("cond, event", [
    # invented: a water company, a ferry line, a lido. A notice in force waits for it to be
    # lifted; a suspension for what resumes; a closure for a reason waits for the reopening
    ("while the boil water notice at Fernside is in force", "boil water notice at fernside ended"),
    ("while evening ferry crossings are suspended", "evening ferry crossings on both routes reopened, back in service"),
    ("while the lido is closed for resurfacing", "lido reopened, back in service"),
])
def test_lifted_resumed_and_reopened_end_their_states(cond, event):
    assert met(cond, event)


@pytest.mark.parametrize("cond, event, why", [
    ("while the boil water notice at Fernside is in force", "boil water notice at dunmoor ended", "another place"),
    ("while evening ferry crossings are suspended", "evening cafe reopened, back in service", "something else back"),
    ("while the lido is closed for resurfacing", "pool resurfacing completed", "the works, no reopening"),
])
def test_lifted_resumed_and_reopened_near_misses(cond, event, why):
    assert not met(cond, event), why


def test_a_word_between_an_entity_and_its_place_noun_is_its_name():
    # invented: "Quayside Leisure Centre" is Quayside's name, not another site
    known = entity_stems(["quayside", "tidemark"])
    cond = terms("until Quayside has been moved over to Tidemark", known)
    event = terms("live cutover of quayside leisure centre completed", known)
    assert condition_met(cond, ("quayside", "tidemark"), event, ("quayside", "tidemark"))
    other = terms("live cutover of harbour leisure centre completed", known)
    assert not condition_met(cond, ("quayside", "tidemark"), other, ("quayside", "tidemark"))


def test_a_reason_tagged_as_an_entity_keeps_the_reopening_its_own():
    # invented: a lido tagged with its works; the reason it is closed is an entity of the page
    # and the notice, so the notice naming it is no part of the page's other topics
    known = entity_stems(["lido", "resurfacing", "cafe", "swim-school"])
    scope = ("lido", "resurfacing", "cafe", "swim-school")
    cond = terms("while the lido is closed for resurfacing", known)
    event = terms("lido resurfacing completed; lido reopened to swimmers", known)
    assert condition_met(cond, scope, event, scope)
