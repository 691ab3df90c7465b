"""The envelope enricher: each extraction, source metadata winning, the Spark chunk stage
running the same function, and the acceptance: resolution over the Acme documents stripped
of condition, events and supersedes gives the same decision."""

from __future__ import annotations

import datetime as dt
from functools import partial

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quarry.core.ingest.enrich import FIELDS, enrich
from quarry.core.ingest.pipeline import prepare
from quarry.core.records import Event, Principal, SourceDocument
from quarry.core.evidence.resolve import resolve
from quarry.core.text import nlp

pytestmark = pytest.mark.unit

parse_date = partial(nlp.parse_date, tenant="acme")  # the memo is per tenant

D = dt.date


def doc(text: str, **kw) -> SourceDocument:
    base = dict(doc_id="d1", tenant="acme", acl=("all-staff",), text=text)
    base.update(kw)
    return SourceDocument(**base)


@pytest.mark.parametrize("text, expected", [
    ("Acme remains on the 16:00 cutoff until cutover. We pinned it.", "until cutover"),
    ("The fee is EUR 10 instead of EUR 20 until the Q2 2026 contract\nrenewal. At renewal it ends.",
     "until the Q2 2026 contract renewal"),
    ("Acme stays on the old job until the `payout_batch_v2` migration completes, unless told otherwise.",
     "until the payout_batch_v2 migration completes"),
    ("**Acme** keeps the **legacy** cutoff until cutover.", "until cutover"),
    # invented: a marina; a lead-in whose "until" clause ends at the colon opening the list of rules
    ("The harbour master and I have agreed how we work until Quayside has moved over to Tidemark:\n\n"
     "- Berths are booked by phone.", "until Quayside has moved over to Tidemark"),
])
def test_stopping_condition_extracted(text, expected):
    e = enrich(doc(text))
    assert e.condition == expected and e.extracted == ("condition",)


@pytest.mark.parametrize("text", [
    "Watch the settlement status until every payout shows `sent`.",  # an instruction, not a validity condition
    "Retry until the webhook succeeds.",
    "Nothing conditional here at all.",
])
def test_no_condition_without_a_stated_state(text):
    e = enrich(doc(text))
    assert e.condition is None and e.extracted == ()


def test_completed_events_only_in_deployment_records():
    text = "# Rollout record\n\nCutover completed successfully on 2026-01-15 at 19:42 CET.\n\n" \
           "The payout_batch_v2 migration was completed on 3 February 2026."
    e = enrich(doc(text, doc_type="deployment", entities=("acme",)))
    assert e.events == (Event(what="cutover completed", on=D(2026, 1, 15)),
                        Event(what="payout_batch_v2 migration completed", on=D(2026, 2, 3)))
    assert e.extracted == ("events",)
    # The same prose in a ticket proves nothing: only deployment/rollout records record events.
    assert enrich(doc("We hope the cutover completed on 2026-01-15.", doc_type="ticket")).events == ()
    # The record's entity is never prefixed to another entity's event; no date, no event.
    named = enrich(doc("Globex cutover completed on 2026-03-01. Runs completed without errors.",
                       doc_type="deployment", entities=("acme",)))
    assert named.events == (Event(what="globex cutover completed", on=D(2026, 3, 1)),)


def test_explicit_supersession_needs_a_doc_id():
    e = enrich(doc("It replaces the cutoff table in the settlement runbook (`settlement-runbook`, v2)."))
    assert e.supersedes == ("settlement-runbook",) and e.extracted == ("supersedes",)
    by = enrich(doc("This page is superseded by refund-policy@2 from January."))
    assert by.superseded_by == ("refund-policy@2",) and by.supersedes == ()
    # No id after the verb: no id is guessed from a description; a phrase with a document
    # noun is kept as a title to match when resolved (core.evidence.titles)
    assert enrich(doc("It replaces the old table.")).extracted == ()
    described = enrich(doc("It replaces the old table in the runbook."))
    assert described.supersedes == () and described.supersedes_titles == ("the old table in the runbook",)
    # A document never supersedes itself.
    assert enrich(doc("This version supersedes `d1` v1.")).supersedes == ()


@pytest.mark.parametrize("text, title", [
    # a quoted title is kept whole, colon and year included, with or without a document noun
    ('From 1 May 2026 this list takes over from "Boat hire: prices and deposits (2025)". Older bookings keep '
     'their price.', "Boat hire: prices and deposits (2025)"),
    ("This sheet replaces \u2018Harbour moorings 2025\u2019 for every berth.", "Harbour moorings 2025"),
    # a code in the title is no conjunction "so": the phrase runs on to the aside
    ("This standard takes over from the Marina Safety Standard SO-2 (May 2024) on 1 March 2026.",
     "the Marina Safety Standard SO-2"),
    # a year in brackets right after the title is the title's own (the older schedule's title holds it)
    ("This standard replaces the Berth Retention Schedule BR-3 (2024), which is withdrawn on 2 February 2026.",
     "the Berth Retention Schedule BR-3 (2024)"),
])
def test_supersession_by_a_quoted_or_coded_title(text, title):
    assert enrich(doc(text)).supersedes_titles == (title,)


@pytest.mark.parametrize("title, text, named", [
    # invented: a marina; the subject is the document in the plural, or its title's own code,
    # and a weekday date after the title ends the phrase
    ("Mooring charges (2026)", 'From 1 April these charges take over from "Mooring charges (2025)".',
     "Mooring charges (2025)"),
    ("Slipway Procedure SP-4", "SP-4 takes over from Slipway Procedure SP-3 on Monday 2 March 2026. Crews bin "
     "the old cards.", "Slipway Procedure SP-3"),
])
def test_supersession_by_this_document_in_the_plural_or_by_its_code(title, text, named):
    assert enrich(doc(text, title=title)).supersedes_titles == (named,)
    # another document's code as the subject is a link between two others, not this one's
    assert enrich(doc(text.replace("SP-4 takes", "SP-9 takes"), title=title)).supersedes_titles == (
        () if "SP-4" in title else (named,))


def test_effective_dates_stated_about_this_document():
    e = enrich(doc("This policy is effective from 1 January 2026 and is in force until 2026-12-31."))
    assert (e.effective_from, e.effective_to) == (D(2026, 1, 1), D(2026, 12, 31))
    assert e.extracted == ("effective_from", "effective_to")
    assert enrich(doc("**Effective from:** January 5, 2026")).effective_from == D(2026, 1, 5)
    # About another document, or without a year: not extracted.
    assert enrich(doc("The new settlement policy took effect on 1 January.")).extracted == ()
    assert enrich(doc("We noted the other policy is effective from 2026-01-01.")).extracted == ()
    # Extracted dates contradicting the source's own are dropped, not half-applied.
    bad = enrich(doc("This policy is in force until 2025-01-01.", effective_from=D(2026, 1, 1)))
    assert bad.effective_to is None and bad.extracted == ()


def test_parse_date_forms():
    assert parse_date("2026-01-15") == parse_date("15 January 2026") == parse_date("January 15, 2026") == D(2026, 1, 15)
    assert parse_date("15 Januar 2026") is None and parse_date("2026-02-30") is None


def test_source_metadata_always_wins():
    src = doc("Acme remains on 16:00 until cutover. It replaces `old-runbook`.", condition="until the audit",
              supersedes=("other-doc",), events=(Event(what="x happened", on=D(2026, 1, 1)),), doc_type="deployment")
    assert enrich(src) == src  # nothing empty to fill
    e = enrich(src.model_copy(update={"supersedes": ()}))
    assert e.condition == "until the audit" and e.supersedes == ("old-runbook",) and e.extracted == ("supersedes",)


def test_enriched_fields_reach_every_passage_envelope():
    text = "# Note\n\n## One\n\nAcme remains on the 16:00 cutoff until cutover.\n\n## Two\n\nMore text here."
    ps, parents = prepare([doc(text)])
    assert len(ps) == 2
    assert {(p.envelope.condition, p.envelope.extracted) for p in ps + parents} == {("until cutover", ("condition",))}
    # Opting out keeps the source envelope.
    raw, _ = prepare([doc(text)], enrich_envelopes=False)
    assert {p.envelope.condition for p in raw} == {None}


def test_spark_chunk_stage_runs_the_same_enricher(sample_docs):
    # The executor-side stage function of the build job, fed as Spark's mapInPandas feeds it.
    from quarry.jobs.stages import chunk_docs

    docs = [d for d in sample_docs if d.tenant == "acme"]
    stripped = [_strip(d) for d in docs]
    pdf = pd.DataFrame({"tenant": [d.tenant for d in stripped], "doc_id": [d.doc_id for d in stripped],
                        "doc_json": [d.model_dump_json() for d in stripped]})
    (out,) = list(chunk_docs(iter([pdf]), n_shards={"acme": 1}))
    from quarry.core.records import Passage

    staged = sorted((Passage.model_validate_json(p) for ps in out["passages"] for p in ps), key=lambda p: p.passage_id)
    ref, _ = prepare(stripped)
    assert staged == sorted(ref, key=lambda p: p.passage_id)
    comment = next(p for p in staged if p.doc_id == "ticket-482-comment-17")
    assert comment.envelope.condition == "until cutover" and comment.envelope.extracted == ("condition",)
    assert SourceDocument.model_validate_json(out["doc_json"][list(out["doc_id"]).index("deploy-acme-cutover")]).events


# ----------------------------------------------------------------------------- acceptance

ACME = Principal(tenant="acme", subject="u1", groups=frozenset({"all-staff"}))
ACME_DOCS = ("settlement-policy", "settlement-runbook", "ticket-482-comment-17", "deploy-acme-cutover")


def _strip(d: SourceDocument) -> SourceDocument:
    return d.model_copy(update={"condition": None, "events": (), "supersedes": ()})


@pytest.mark.parametrize("day", [D(2026, 2, 1), D(2026, 1, 10)])
def test_acme_resolution_from_text_alone_matches_front_matter(sample_docs, day):
    docs = [d for d in sample_docs if d.doc_id in ACME_DOCS]
    assert any(d.condition for d in docs) and any(d.events for d in docs) and any(d.supersedes for d in docs)
    stripped = [_strip(d) for d in docs]
    assert not any(d.condition or d.events or d.supersedes for d in stripped)

    from_meta = resolve(prepare(docs)[0], ACME, day)
    from_text_ps, _ = prepare(stripped)
    assert resolve(from_text_ps, ACME, day) == from_meta
    extracted = {p.doc_id: p.envelope.extracted for p in from_text_ps}
    assert extracted == {"settlement-policy": ("supersedes",), "settlement-runbook": (),
                         "ticket-482-comment-17": ("condition",), "deploy-acme-cutover": ("events",)}
    # Without the enricher the stripped corpus resolves differently: it is the enricher's doing.
    unenriched = resolve(prepare(stripped, enrich_envelopes=False)[0], ACME, day)
    assert unenriched != from_meta


_PIECES = list("abcEUR 0123456789:.,-_@`|#*\n%€$") + [
    "until ", "remains ", "completed on ", "2026-01-15", " per ", "replaces ", "superseded by ",
    "effective from ", "15 January 2026", "owner ", "status "]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=60).map("".join).filter(str.strip))
def test_enrich_never_raises_and_is_idempotent(text):
    d = SourceDocument(doc_id="d", tenant="acme", acl=("*",), text=text, doc_type="deployment", entities=("acme",))
    e = enrich(d)
    assert enrich(e) == e
    assert set(e.extracted) <= set(FIELDS)


# ----------------------------------------------------------------------------- other words
# Each phrasing class in several domains (HR, logistics, software operations, finance,
# healthcare), with negatives next to it.

def _cond(text: str) -> str | None:
    return enrich(doc(text)).condition


@pytest.mark.parametrize("text, expected", [
    # until (a state word in the sentence)
    ("New hires stay on the probation pay scale until the works council approves the new grid.",
     "until the works council approves the new grid"),
    ("Pallets remain in bay 4 until the racking inspection.", "until the racking inspection"),
    ("The EUR cutoff remains 16:00 until the ehr migration is complete.", "until the ehr migration completes"),
    ("Deploys to eu-west keep the canary gate until the `billing-v2` rollout has finished.",
     "until the billing-v2 rollout completes"),
    ("The card fee is waived until the new pricing goes live.", "until the new pricing completes"),
    # remains in effect / in force / valid until
    ("The temporary shipping surcharge remains in effect until the port strike ends.", "until the port strike ends"),
    ("The remote-work allowance stays in force until the office refurbishment.", "until the office refurbishment"),
    ("The manual approval rule is valid until the payments audit closes.", "until the payments audit closes"),
    ("The interim triage protocol remains in place until the new ward opens.", "until the new ward opens"),
    ("This freeze continues to be in effect until the Q3 close is signed off.", "until the Q3 close is signed off"),
    # while ... under way / in progress / ongoing
    ("While the EHR migration is under way, clinicians record allergies on paper.",
     "until the EHR migration completes"),
    ("Orders ship from the Leeds depot while the warehouse relocation is in progress.",
     "until the warehouse relocation completes"),
    ("While the payroll system upgrade is ongoing, overtime is paid a month late.",
     "until the payroll system upgrade completes"),
    # fronted: the condition scopes the instruction itself
    ("While the ledger migration is in progress, route refund requests to the finance desk.",
     "until the ledger migration completes"),
    ("The help desk answers in English only whilst the Lisbon office move is underway.",
     "until the Lisbon office move completes"),
    # as long as
    ("Expense claims above EUR 500 need CFO sign-off as long as the hiring freeze is in place.",
     "until the hiring freeze ends"),
    ("As long as the carrier embargo is active, parcels to Norway go by road.", "until the carrier embargo ends"),
    ("Every shift swap needs two approvals so long as the staffing review is ongoing.",
     "until the staffing review completes"),
    ("The legacy API stays enabled as long as the mobile app migration is under way.",
     "until the mobile app migration completes"),
    ("Interest accrues at 2% as long as the rate review is open.", "until the rate review ends"),
    ("For as long as the east-wing refurbishment is going on, stayover rooms are serviced every second day.",
     "until the east-wing refurbishment completes"),
    ("While the depot move is happening, orders ship from Leeds.", "until the depot move completes"),
    ("Parcels go by road as long as the bridge closure is continuing.", "until the bridge closure completes"),
    # the verb itself says it goes on
    ("For as long as the surgery wing works continue, Quayside cannot take any X-rays.",
     "until the surgery wing works completes"),
    ("While the ward refurbishment continues, visiting is limited to two people.",
     "until the ward refurbishment completes"),
    ("Parcels go by road as long as the strike lasts.", "until the strike completes"),
    # for the duration of
    ("For the duration of the ERP migration, invoices are approved manually.", "until the ERP migration completes"),
    ("Night shifts pay a 20% premium for the duration of the flu season.", "until the flu season completes"),
    ("The depot runs a single loading dock for the duration of the roof repair.", "until the roof repair completes"),
    ("Paging goes to the platform team for the duration of the Kafka upgrade.", "until the Kafka upgrade completes"),
    ("During the course of the audit, card limits are halved.", "until the audit completes"),
    # pending
    ("Refunds above EUR 500 are held pending the security review.", "until the security review"),
    ("Pending the audit, payouts to new merchants are capped at EUR 1,000.", "until the audit"),
    ("Bonus payments are suspended pending the board's remuneration decision.",
     "until the board's remuneration decision"),
    ("Pending the customs ruling, shipments of lithium cells stay in Rotterdam.", "until the customs ruling"),
    ("The deploy freeze applies pending sign-off from the release manager.", "until sign-off from the release manager"),
    # once ... applies again / resumes
    ("Once the EHR migration is finished, the standard triage rota applies again.",
     "until the EHR migration completes"),
    ("Once the strike is over, next-day delivery resumes.", "until the strike completes"),
    ("Weekly payroll resumes once the bank integration is complete.", "until the bank integration completes"),
    ("Once the cutover is done, the 15:00 cutoff applies again.", "until the cutover completes"),
    ("The normal leave policy applies again once the peak season ends.", "until the peak season ends"),
    # ceases to apply / no longer applies / lapses when
    ("This exception ceases to apply when the new contract is signed.", "until the new contract is signed"),
    ("The relocation allowance no longer applies once the employee moves into company housing.",
     "until the employee moves into company housing"),
    ("The discount lapses when the customer migrates to the annual plan.",
     "until the customer migrates to the annual plan"),
    ("The waiver stops applying after the fraud rule is retrained.", "until the fraud rule is retrained"),
    ("The surcharge ceases to apply upon completion of the bridge repair.", "until the bridge repair"),
    ("It stops applying on the day Harbourside goes live on Tessera.", "until Harbourside goes live on Tessera"),
    # until further notice: kept, it never ends (core.conditions)
    ("The on-call rota is suspended until further notice.", "until further notice"),
    ("Remote onboarding remains the default until further notice.", "until further notice"),
    ("Shipments to Kyiv stay paused until otherwise notified.", "until further notice"),
    ("Card limits remain halved until further notice.", "until further notice"),
    ("The hiring freeze stays in effect until further notice.", "until further notice"),
])
def test_conditions_in_other_words(text, expected):
    assert _cond(text) == expected


@pytest.mark.parametrize("text", [
    "Keep retrying as long as the webhook is running.",  # instructions: the duration of an action
    "Hold the elevator button until the doors close.",
    "Press and hold reset until the LED blinks.",
    "Escalate to the on-call while the incident is in progress.",
    "Watch the queue for the duration of the import.",
    "The payout status is pending review.",  # adjectival "pending"
    "Pending payouts appear in grey.",
    "The incident commander owns customer communication until the incident is resolved.",  # no state word
    "Once the job finishes, restart the consumer.",  # no "again": a procedure step
    "The contract is valid until 31 December 2026.",  # a date is validity, not an event
    "The offer remains open until the end of the quarter.",
    "While revenue grew, margins are thin.",  # contrastive "while"
    "Patients were followed for the duration of the day.",
])
def test_no_condition_in_instructions_and_near_phrasings(text):
    assert _cond(text) is None


def _events(text: str, **kw) -> tuple[Event, ...]:
    return enrich(doc(text, **{"doc_type": "deployment", **kw})).events


@pytest.mark.parametrize("text", [
    "Until then we work on paper.",
    "Until the audit closes all orders go through the duty manager.",  # no subject marks where it ends
])
def test_a_fronted_until_without_a_comma_or_a_subject_after_it_is_no_condition(text):
    from quarry.core.ingest.enrich_conditions import find_condition

    assert find_condition([text]) is None


@pytest.mark.parametrize("text, what, on", [
    ("The EHR migration was finished on 15 January 2026.", "ehr migration completed", D(2026, 1, 15)),
    ("The new payroll system went live on January 15, 2026.", "new payroll system completed", D(2026, 1, 15)),
    ("Database failover drill was done on 15 Jan 2026.", "database failover drill completed", D(2026, 1, 15)),
    ("The Leeds depot relocation concluded on 2026/01/15.", "leeds depot relocation completed", D(2026, 1, 15)),
    ("Acme was cut over on 2026-01-15.", "acme cutover completed", D(2026, 1, 15)),
    ("The staging migration is complete as of 3 March 2026.", "staging migration completed", D(2026, 3, 3)),
    ("We successfully completed the ERP migration on 4 February 2026.", "erp migration completed", D(2026, 2, 4)),
    ("Phase 2 of the badge rollout finished on Monday, 2 March 2026.", "phase 2 of the badge rollout completed",
     D(2026, 3, 2)),
    ("The ledger backfill has been completed on 15th of January 2026.", "ledger backfill completed", D(2026, 1, 15)),
    ("The `payout_batch_v3` migration completed on Jan. 20, 2026.", "payout_batch_v3 migration completed",
     D(2026, 1, 20)),
    ("The clinic heating and ventilation refit was signed off by the fire officer on 3 March 2026.",
     "clinic heating and ventilation refit completed", D(2026, 3, 3)),
    ("Roof repairs at the Elm Street depot were closed out on 2 February 2026.",
     "roof repairs at the elm street depot completed", D(2026, 2, 2)),
    # what it went live on or cut over to, between the verb and the date
    ("Marlow Harbourside went live on Tessera in production on 9 March 2026.",
     "marlow harbourside on tessera in production completed", D(2026, 3, 9)),
    ("Northgate cut over to FlowStock on 16 March 2026.", "northgate to flowstock cutover completed",
     D(2026, 3, 16)),
    # a changeover verb: the thing's cutover
    ("The Leeds clinic was moved onto the new EHR on 4 May 2026.", "leeds clinic onto the new ehr cutover completed",
     D(2026, 5, 4)),
    ("Elmfield switched over to ClinixPro in production on Monday 9 March 2026.",
     "elmfield to clinixpro in production cutover completed", D(2026, 3, 9)),
    ("The Bristol depot migrated to Ledgerly on 2 March 2026.", "bristol depot to ledgerly cutover completed",
     D(2026, 3, 2)),
    ("Payroll went live on Ledgerly on Monday, 2 March 2026.", "payroll on ledgerly completed", D(2026, 3, 2)),
    # a state reached on a date: the subject's cutover to the system it has been on since
    ("The Dunmore depot has been picking and packing on Stockwise since its first shift on Monday 6 April 2026.",
     "dunmore depot to stockwise cutover completed", D(2026, 4, 6)),
    ("Evening classes have been run in Tutora since 18:00 on 12 January 2026.",
     "evening classes to tutora cutover completed", D(2026, 1, 12)),
    ("The depot has been busy since 6 April 2026.", None, None),  # no system it is on: no event
    # the system named with its article and what it is ("the Fernly app")
    ("Kestrel families have been using the Bookwell app since 07:30 on Monday 9 March 2026.",
     "kestrel families to bookwell cutover completed", D(2026, 3, 9)),
])
def test_events_in_other_words(text, what, on):
    assert _events(text) == ((Event(what=what, on=on),) if what else ())


def test_events_from_a_completion_date_column():
    text = ("# Change record\n\n| Step | Owner | Completed on |\n|---|---|---|\n| EHR migration | ops | 2026-01-15 |\n"
            "| Badge rollout | hr | 3 Feb 2026 |\n| Archive purge | ops | pending |\n| Label printers | x | 4 March |")
    assert _events(text, doc_type="page") == (Event(what="ehr migration completed", on=D(2026, 1, 15)),
                                                Event(what="badge rollout completed", on=D(2026, 2, 3)))


@pytest.mark.parametrize("text", [
    "The billing upgrade completed on 15 January.",  # no year and no publication date: never guessed
    "The billing upgrade completed on 03/04/2026.",  # March or April: refused
    "The billing upgrade is scheduled for 15 January 2026.",
    "We expect the migration to be finished by next week.",
])
def test_no_event_without_a_full_completed_date(text):
    assert _events(text) == ()


def test_events_only_in_change_records():
    assert _events("The EHR migration was finished on 15 January 2026.", doc_type="ticket") == ()
    assert _events("# Migration log\n\nThe EHR migration was finished on 15 January 2026.", doc_type="page")
    for t in ("change", "migration", "rollout", "release"):
        assert _events("Cutover completed on 2026-01-15.", doc_type=t)


@pytest.mark.parametrize("text, sup, by", [
    ("This policy replaces `travel-policy-2024`.", ("travel-policy-2024",), ()),
    ("This SOP supersedes SOP-114.", ("SOP-114",), ()),
    ("This handbook rescinds `leave-policy@3` in full.", ("leave-policy@3",), ()),
    ("It retires the old rate card (rate-card-2025).", ("rate-card-2025",), ()),
    ("`expenses-faq` is withdrawn.", ("expenses-faq",), ()),
    ("The old picking guide (picking-guide@2) is no longer in force.", ("picking-guide@2",), ()),
    ("This runbook is retired in favour of `payments-runbook-v2`.", (), ("payments-runbook-v2",)),
    ("This page was deprecated in favor of onboarding-guide.", (), ("onboarding-guide",)),
    ("This guide is superseded by `ops-guide@4`.", (), ("ops-guide@4",)),
    ("From March this policy is replaced by hr-policy_2026.", (), ("hr-policy_2026",)),
    ("This schedule takes over from the 2025 fee schedule (`pawsworth-fees-2025`).", ("pawsworth-fees-2025",), ()),
    ("The new rota takes the place of `ward-rota-2025`.", ("ward-rota-2025",), ()),
    ("This edition succeeds `staff-handbook@6`.", ("staff-handbook@6",), ()),
])
def test_supersession_in_other_words(text, sup, by):
    e = enrich(doc(text))
    assert (e.supersedes, e.superseded_by) == (sup, by)


@pytest.mark.parametrize("text", [
    "`a-doc` is superseded by `b-doc`.",  # a link between two other documents
    "The full-length protein is replaced by a truncated form.",  # a hyphenated word is no doc id
    "This policy was withdrawn.",  # itself, without a date: nothing to fill
    "The old table is retired.",
])
def test_no_supersession_without_another_doc_id(text):
    e = enrich(doc(text))
    assert e.supersedes == () and e.superseded_by == ()


@pytest.mark.parametrize("text, start, end", [
    ("This policy is rescinded as of 1 March 2026.", None, D(2026, 2, 28)),  # not in force on 1 March
    ("This notice was withdrawn on 2026-04-01.", None, D(2026, 3, 31)),
    ("This runbook is retired with effect from 15 January 2026.", None, D(2026, 1, 14)),
    ("This runbook is no longer in force after 31 March 2026.", None, D(2026, 3, 31)),
    ("This rate card is no longer valid from January 1, 2027.", None, D(2026, 12, 31)),
    ("This policy is valid through 31 December 2026.", None, D(2026, 12, 31)),
    ("This agreement expires on 30 June 2027.", None, D(2027, 6, 30)),
    ("This waiver is valid until 15 May 2026.", None, D(2026, 5, 15)),
    ("Effective 1 March 2026, the per diem is EUR 60.", D(2026, 3, 1), None),
    ("This procedure applies from 2 February 2026.", D(2026, 2, 2), None),
    ("This policy is effective as of 5 Jan 2026.", D(2026, 1, 5), None),
    ("This rate card is in force from 1 January 2026 until 31 March 2026.", D(2026, 1, 1), D(2026, 3, 31)),
    ("Effective from: 2026/02/01", D(2026, 2, 1), None),
    ("This standard is in effect from 3 August 2026.", D(2026, 8, 3), None),
    ("This notice comes into force on 1 April 2026.", D(2026, 4, 1), None),
    ("This offer is good through 30 April 2026.", None, D(2026, 4, 30)),
    ("This local rule changes the group policy for Quayside only, and applies from 1 December 2025.",
     D(2025, 12, 1), None),
    ("This interim pricing policy is valid until 30 June 2026.", None, D(2026, 6, 30)),
    ("This arrangement lapses on 31 May 2026.", None, D(2026, 5, 31)),
])
def test_validity_in_other_words(text, start, end):
    e = enrich(doc(text))
    assert (e.effective_from, e.effective_to) == (start, end)


@pytest.mark.parametrize("text", [
    "The per diem applies from 1 March.",  # no year
    "The old guide was rescinded on 1 March 2026.",  # another document, no id
    "Our vendor's contract expires soon.",
    "The discount is valid until 03/04/2026.",  # ambiguous day and month
])
def test_no_validity_without_a_full_date_about_this_document(text):
    e = enrich(doc(text))
    assert (e.effective_from, e.effective_to) == (None, None)


def test_parse_date_common_forms():
    for s in ("2026-01-15", "2026/01/15", "15 January 2026", "January 15, 2026", "15 Jan 2026", "Jan. 15, 2026",
              "15th of January 2026", "15/01/2026", "01/15/2026"):
        assert parse_date(s) == D(2026, 1, 15), s
    for s in ("15 January", "January 2026", "03/04/2026", "2026-13-01", "tomorrow", "may"):
        assert parse_date(s) is None, s


def test_import_of_core_stays_light():
    import subprocess
    import sys

    code = "import sys, quarry.core.ingest.enrich, quarry.core.evidence.conditions, quarry.core.evidence.injection; " \
           "print(any(m in sys.modules for m in ('spacy', 'dateparser', 'thinc', 'torch')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("text", [
    "The travel policy (`acme-travel-policy`) is rescinded with effect from 1 February 2026.",
    "`fleet-sop-v2` was withdrawn as of 2026-02-01; drivers follow this procedure instead.",
    "The old rota (`ward-rota-2025`) will be replaced from 1 February 2026.",
    # an id in backticks need not look like one ("...-choice" is no document noun)
    "The reward on the Green Choice page (`marlow-page-green-choice`) is withdrawn with effect from 1 February 2026.",
    # the active voice: this document replaces another from a date
    "This schedule takes over from `fees-2025` for every appointment from Monday 1 February 2026.",
    "This policy replaces `travel-policy-2024` with effect from 1 February 2026.",
])
def test_a_document_ending_another_from_a_date_is_in_force_from_then(text):
    from quarry.core.ingest.enrich import enrich

    d = enrich(SourceDocument(doc_id="new-rule", tenant="t", acl=("all-staff",), doc_type="policy", text=text))
    assert d.effective_from == dt.date(2026, 2, 1) and "effective_from" in d.extracted


@pytest.mark.parametrize("title,text,field,day", [
    ("Wellbeing allowance 2025", "The allowance is a pilot and is valid through 31 December 2025.", "effective_to",
     dt.date(2025, 12, 31)),
    ("Winter fuel surcharge", "The surcharge is valid from 1 November 2025 for all depots.", "effective_from",
     dt.date(2025, 11, 1)),
    ("Night shift rota", "Our night shift rota remains valid until 2026-03-31.", "effective_to", dt.date(2026, 3, 31)),
    ("Spring parking discount", "The discount is good through 30 April 2026.", "effective_to", dt.date(2026, 4, 30)),
    ("Clean air month: permit fees waived", "The waiver sunsets on 31 October 2025.", "effective_to",
     dt.date(2025, 10, 31)),
    # a verb of being in force straight after the subject, and a second clause ending it
    ("Spring Sundays - relaxed departures", "The offer applies from 1 March 2026 and is valid through 30 April 2026.",
     "effective_from", dt.date(2026, 3, 1)),
    ("Spring Sundays - relaxed departures", "The offer applies from 1 March 2026 and is valid through 30 April 2026.",
     "effective_to", dt.date(2026, 4, 30)),
    ("Winter fuel surcharge", "The surcharge runs until 31 March 2026.", "effective_to", dt.date(2026, 3, 31)),
])
def test_validity_stated_of_what_the_title_names(title, text, field, day):
    d = enrich(SourceDocument(doc_id="x", tenant="t", acl=("all-staff",), title=title, text=text))
    assert getattr(d, field) == day


@pytest.mark.parametrize("text", [
    # invented: a marina's price list; one line's end is not the list's
    "The discount expires after 28 February 2026; every other line of this price list carries on as written.",
    "The waiver sunsets on 31 March 2026, and the rest of the schedule stays as it is.",
])
def test_one_part_ending_while_the_rest_goes_on_ends_no_document(text):
    d = enrich(SourceDocument(doc_id="x", tenant="t", acl=("all-staff",), title="Berth prices 2025-26", text=text))
    assert d.effective_to is None


def test_what_an_offer_is_valid_for_may_stand_before_its_dates():
    # invented: a chandlery's offer "valid for collections from ... up to and including ..."
    text = ("Any dinghy hired for a weekend is charged GBP 30 a day. The offer is valid for collections from "
            "Saturday 7 March 2026 up to and including Sunday 26 April 2026.")
    d = enrich(SourceDocument(doc_id="x", tenant="t", acl=("all-staff",), title="Memo: spring dinghy offer", text=text))
    assert (d.effective_from, d.effective_to) == (dt.date(2026, 3, 7), dt.date(2026, 4, 26))


def test_validity_of_something_else_is_not_this_documents():
    d = enrich(SourceDocument(doc_id="x", tenant="t", acl=("all-staff",), title="Wellbeing allowance 2025",
                              text="The parking permit is valid through 31 December 2025."))
    assert d.effective_to is None


@pytest.mark.parametrize("text,cond", [
    ("Until the Acme cutover completes, the settlement batch for Acme runs daily at 16:00 UTC.",
     "until the Acme cutover completes"),
    ("Until the new scanner is installed, goods-in counts pallets by hand.", "until the new scanner is installed"),
    # after a connective, closed by a colon
    ("So, until the Harbourside hotel has moved to the new PMS: take the pre-authorisation only.",
     "until the Harbourside hotel has moved to the new PMS"),
    ("And until the audit closes, refunds wait for a second approval.", "until the audit closes"),
    ("Till the ward refurbishment ends, visiting is limited to two people.", "until the ward refurbishment ends"),
    # no comma: the clause ends where the main clause's subject, a pronoun or "staff", starts
    ("Until the marina has moved to the new booking system we are taking berths by phone.",
     "until the marina has moved to the new booking system"),
    ("Until the new crane is in service staff use the old hoist.", "until the new crane is in service"),
])
def test_a_fronted_until_clause_limits_the_rule_that_follows(text, cond):
    from quarry.core.ingest.enrich_conditions import find_condition

    assert find_condition([text]) == cond


@pytest.mark.parametrize("text, what, on", [
    # what went live "for" someone; a change done over a span of days ends on its last day
    ("Arclight went live for the North West on Monday 16 March 2026 at 07:00.", "arclight for the north west completed",
     D(2026, 3, 16)),
    ("The Leeds accounts were moved to Ledgerly over the weekend of 14 and 15 March 2026.",
     "leeds accounts to ledgerly cutover completed", D(2026, 3, 15)),
    ("The depot stock was migrated to FlowStock during the night of 3 to 4 May 2026.",
     "depot stock to flowstock cutover completed", D(2026, 5, 4)),
])
def test_events_for_someone_and_over_a_span_of_days(text, what, on):
    assert (what, on) in {(e.what, e.on) for e in _events(text)}


@pytest.mark.parametrize("text, expected", [
    ("As long as the Vale exchanges are out of service, customers there can leave without a charge.",
     "until the Vale exchanges ends"),
    ("As long as the east lift is down, porters carry luggage up.", "until the east lift ends"),
    ("So long as the car park is closed, staff may claim taxi fares.", "until the car park ends"),
])
def test_a_disruption_that_lasts_is_a_condition(text, expected):
    assert _cond(text) == expected


@pytest.mark.parametrize("text", [
    "We are closing the Refer a Friend scheme on the referral page (`acme-page-referral`). It is withdrawn with "
    "effect from 16 February 2026, and its credits stop.",
    "We are discontinuing the old guide (`acme-old-guide`). It is retired from 16 February 2026.",
])
def test_a_pronoun_after_the_sentence_naming_another_document(text):
    d = enrich(doc(text, doc_id="acme-memo"))
    assert d.supersedes and d.supersedes[0].startswith("acme-") and d.effective_from == D(2026, 2, 16)


@pytest.mark.parametrize("text, day", [
    ("From 2 March 2026 the most you can offer is 20% off. This replaces the 15% ceiling in the playbook.",
     D(2026, 3, 2)),
    ("As of 1 April 2026 refunds are paid within 5 days; this replaces the 10-day rule.", D(2026, 4, 1)),
])
def test_a_rule_fronted_by_its_date_that_replaces_another(text, day):
    assert enrich(doc(text)).effective_from == day


def test_a_fronted_date_without_a_replacement_is_not_the_documents_start():
    assert enrich(doc("From 2 March 2026 the canteen opens at 08:00. Parking is free.")).effective_from is None


@pytest.mark.parametrize("text, start, end", [
    ("The offer runs from 2 February 2026 to 31 March 2026; the order has to be placed within those dates.",
     D(2026, 2, 2), D(2026, 3, 31)),
    ("The promotion applies from 1 May 2026 until 30 June 2026.", D(2026, 5, 1), D(2026, 6, 30)),
])
def test_a_titled_range_gives_both_dates(text, start, end):
    d = enrich(doc(text, title="Spring offer and promotion"))
    assert (d.effective_from, d.effective_to) == (start, end)


@pytest.mark.parametrize("text, title, start, end", [
    ("This policy takes effect in place of the 2024 Chromebook loan agreement on 5 January 2026, the first school "
     "day after the break.", "Chromebook loans", D(2026, 1, 5), None),
    ("The principal agreed a local rule. It applies from the first day of term 3 on 23 March 2026, in place of the "
     "district arrival times.", "Local rule: arrival", D(2026, 3, 23), None),
    ("The winter timetable no longer applies after 27 February 2026.", "Winter bus timetable", None, D(2026, 2, 27)),
    ("The winter timetable no longer applies from 2 March 2026.", "Winter bus timetable", None, D(2026, 3, 1)),
    ("The arrangement runs until the end of the spring term on 12 June 2026.", "Free breakfast", None,
     D(2026, 6, 12)),
])
def test_validity_in_other_words(text, title, start, end):
    d = enrich(doc(text, title=title))
    assert (d.effective_from, d.effective_to) == (start, end)


def test_no_longer_applies_speaks_of_this_document_only():
    # the subject names nothing of the title and is no bare document noun: another thing
    d = enrich(doc("The parking permit no longer applies after 27 February 2026.", title="Winter bus timetable"))
    assert d.effective_to is None


def test_validity_of_plural_arrangements_stated_in_the_text():
    # invented: a marina's summer arrangements, named by the title's words
    e = enrich(doc("These summer arrangements run from 1 May 2026 and lapse at the end of 30 September 2026.",
                   title="Summer 2026: visitor berths and fuel dock"))
    assert (e.effective_from, e.effective_to) == (D(2026, 5, 1), D(2026, 9, 30))
    assert enrich(doc("These arrangements lapse on 30 September 2026.", title="Fuel dock hours")).effective_to is None


@pytest.mark.parametrize("text, title, start, end", [
    # invented: a rowing club; a weekday before a date says nothing the date does not
    ("These winter sessions run from Monday 2 November 2026 until Saturday 27 February 2027 and lapse after "
     "that date.", "Memo: winter sessions on the lake", D(2026, 11, 2), D(2027, 2, 27)),
    ("The club rules are in effect through Friday 13 March 2026.", "Club rules for juniors", None, D(2026, 3, 13)),
])
def test_validity_with_a_weekday_before_the_date(text, title, start, end):
    d = enrich(doc(text, title=title))
    assert (d.effective_from, d.effective_to) == (start, end)


@pytest.mark.parametrize("text", [
    # another document's rule retired from a date, named by title or by section: this memo's
    # rule, which takes its place, starts that day
    'The rule in section 3 of the "Boathouse safety standard" that juniors may row alone is retired with effect '
    "from Monday 2 March 2026. From that day juniors row in pairs.",
    "From Monday 2 March 2026 the monthly launch check in section 4 of the safety policy no longer applies. "
    "Instead, the launch is checked every week.",
])
def test_a_memo_retiring_another_rule_from_a_date_starts_then(text):
    assert enrich(doc(text, title="Memo: juniors and the launch")).effective_from == D(2026, 3, 2)


@pytest.mark.parametrize("text", [
    # invented: a memo changing or amending another document's rules from a date starts then
    "Two rules in the mooring section of the marina handbook change because of last week's storm, from Monday "
    "2 March 2026:\n\n1. Boats are double-tied.\n2. The pontoon gate is locked at dusk.",
    "The fuelling rules in section 5 of the berth holders' policy are amended with effect from 2 March 2026.",
    # a year wrapped to the start of a line continues the sentence (it is no list item "2026.")
    "The rule that a berth must be booked before 17:00 on the day before is withdrawn as from Monday 2 March\n"
    "2026.\n\nFrom then on a berth may be booked on arrival.",
])
def test_a_memo_changing_another_documents_rules_from_a_date_starts_then(text):
    assert enrich(doc(text, title="Harbour master's memo: moorings")).effective_from == D(2026, 3, 2)


@pytest.mark.parametrize("text", [
    # invented: a sailing school. A rule taking another document's rule's place from a date
    # fronting the sentence, or the sentence before, starts that day
    "From Monday 2 March 2026 dinghies are checked every week, in place of the monthly check set in section 3 "
    "of the boat safety policy.",
    "The spring inspection found worn shackles. From Monday 2 March 2026 shackles are replaced every season. "
    "Seasonal replacement takes the place of the 2-yearly replacement in section 5 of the rigging procedure.",
    # a retired rule of another document "no longer applies from" the date
    "The requirement in section 4 of the boat safety policy that instructors swap boats every hour no longer "
    "applies from Monday 2 March 2026.",
    # these rates, the rules below: this document's own, fronted by its date (on or from)
    'From 2 March 2026 these rates take over from "Mooring rates (2025)".',
    'On Monday 2 March 2026 this code takes over from "Mooring code (2024)".',
    "From Monday 2 March 2026 the rules below are used at the north slipway.",
    # the replaced rule's value has a decimal point
    "From Monday 2 March 2026 diesel is charged at GBP 1.95 a litre, in place of the GBP 1.80 a litre set in "
    "section 4 of the fuel berth policy.",
])
def test_a_rule_fronted_by_its_date_starts_then(text):
    assert enrich(doc(text, title="Memo: boats", published_at=D(2026, 2, 16))).effective_from == D(2026, 3, 2)


def test_a_memo_acting_before_its_replacing_rules_date_is_not_dated_by_it():
    # the permits reopen on 16 March, before the new charge of 1 April: the date is that rule's
    text = ("- Applications reopen on Monday 16 March 2026.\n- From 1 April 2026 a mooring costs GBP 95 a month.\n"
            "- From that date this takes the place of the GBP 80 charge in the moorings policy.")
    assert enrich(doc(text, title="Memo: moorings", published_at=D(2026, 3, 11))).effective_from is None


def test_the_replaced_rule_of_this_document_does_not_date_it():
    text = "From 1 June 2026 the fee is GBP 5, in place of the GBP 4 in section 2 of this policy."
    assert enrich(doc(text, title="Mooring policy", published_at=D(2026, 1, 5))).effective_from is None


def test_a_document_saying_its_own_rules_will_change_does_not_start_then():
    d = enrich(doc("This policy will change from 1 May 2026 when the new pontoon opens.", title="Berth policy"))
    assert d.effective_from is None


def test_a_document_retiring_itself_from_a_fronted_date_does_not_start_then():
    assert enrich(doc("From 1 April 2026 this policy no longer applies.", title="Launch policy")).effective_from is None


def test_a_standard_replacing_one_withdrawn_on_a_date_starts_that_day():
    # invented: the withdrawn one is the other standard, not this one
    d = enrich(doc("This standard replaces the Pontoon Safety Standard PS-2 (May 2024), which is withdrawn on Monday "
                   "2 February 2026. From that day berths are inspected under PS-3.",
                   title="Pontoon Safety Standard PS-3", doc_type="policy", published_at=D(2026, 1, 12)))
    assert (d.effective_from, d.effective_to) == (D(2026, 2, 2), None)


@pytest.mark.parametrize("text, what, on", [
    # invented: back in use after a closure or an outage, in a record of the change
    ("The workshop fitted a new gearbox, and the ferry returned to service on Monday 2 March 2026.",
     "ferry reopened, back in service", D(2026, 3, 2)),
    ("The goods lift came back into service on 4 May 2026.", "goods lift reopened, back in service", D(2026, 5, 4)),
    ("Pier B reopened on 12 April 2026.", "pier b reopened, back in service", D(2026, 4, 12)),
])
def test_back_in_service_is_an_event(text, what, on):
    e = enrich(doc(text, doc_type="deployment", title="Notice", published_at=D(2026, 5, 5)))
    assert [(ev.what, ev.on) for ev in e.events] == [(what, on)]


@pytest.mark.parametrize("text, expected", [
    # invented: a ferry company. However long it lasts; off the road; what a site stays on
    ("For however long the Tern stays off the road:\n\n- No crossings go ahead.", "until the Tern ends"),
    ("So long as Pier 3 keeps running on HarbourDesk:\n\n- Tickets are sold at the kiosk.",
     "until Pier 3 on HarbourDesk ends"),
    ("For as long as Eastquay stays on HarbourDesk, refunds are made in cash.", "until Eastquay on HarbourDesk ends"),
])
def test_a_state_that_lasts_in_other_words_is_a_condition(text, expected):
    assert enrich(doc(text)).condition == expected


@pytest.mark.parametrize("text, published, on", [
    # invented: a marina's booking system; a day and month without a year are in the year
    # that puts them nearest the record's publication
    ("The Quayside berths were moved to Tidemark over the weekend of 7 and 8 March.", D(2026, 3, 9),
     D(2026, 3, 8)),
    ("The Quayside berths were moved to Tidemark on 29 December.", D(2026, 1, 4), D(2025, 12, 29)),
])
def test_a_yearless_completion_date_takes_the_records_year(text, published, on):
    (ev,) = _events(text, published_at=published)
    assert ev.on == on
    assert _events(text) == ()  # no publication date: never guessed


@pytest.mark.parametrize("text", [
    "Please retry the upload until it succeeds:\n\n- Check the cable.",  # how long to act, not a rule's end
    "Retry the upload until it succeeds:\n\n- Check the cable.",
])
def test_an_instruction_lead_in_is_no_condition(text):
    assert enrich(doc(text)).condition is None


@pytest.mark.parametrize("title, text, span", [
    # invented: a bakery's winter hours, a climbing wall's offer, a lido's amnesty
    ("Memo: winter baking rota", "These arrangements run from Monday 3 November 2025 until Sunday 1 March 2026 and "
     "lapse after that date:\n\n- The ovens start at 05:00.", (dt.date(2025, 11, 3), dt.date(2026, 3, 1))),
    ("Memo: spring bouldering offer", "Members pay no guest fee for friends on any visit from Monday 2 March 2026 up "
     "to and including Thursday 30 April 2026. The offer lapses after 30 April.", (dt.date(2026, 3, 2), dt.date(2026, 4, 30))),
    ("Memo: Eastmoor lido lost-key amnesty", "To clear the key box before the season, the Eastmoor lost-key amnesty "
     "runs from Monday 2 February 2026 until Saturday 28 February 2026.", (dt.date(2026, 2, 2), dt.date(2026, 2, 28))),
])
def test_a_dated_span_the_document_lapses_after_bounds_it(title, text, span):
    d = enrich(SourceDocument(doc_id="x", tenant="t", acl=("all-staff",), title=title, text=text, doc_type="memo"))
    assert (d.effective_from, d.effective_to) == span
    assert d.condition is None  # "until that date" is a date, not an event


def test_a_span_of_one_line_while_the_rest_goes_on_bounds_nothing():
    text = ("The joining fee is waived for any swimmer starting from Monday 5 January 2026 up to and including Friday "
            "27 February 2026. The waiver expires after 27 February 2026; every other line of this schedule carries "
            "on as written.")
    d = enrich(SourceDocument(doc_id="x", tenant="t", acl=("all-staff",), title="Lido fees 2025-26", text=text))
    assert d.effective_to is None


@pytest.mark.parametrize("text, what, on", [
    # invented: a water company and a ferry line. A notice or a ban lifted ends it; what was
    # suspended starts again from a date; a state reached "since" a date, said at length
    ("The water company lifted the boil water notice at Fernside on Friday 6 March 2026, after a clear sample.",
     "boil water notice at fernside ended", D(2026, 3, 6)),
    ("The hosepipe ban was withdrawn on 2 May 2026.", "hosepipe ban ended", D(2026, 5, 2)),
    ("Evening ferry crossings resume on both routes from Monday 16 March 2026.",
     "evening ferry crossings on both routes reopened, back in service", D(2026, 3, 16)),
    ("The Northpoint depot has been taking parcel returns and driver check-ins live in Routemap since 07:00 "
     "on Monday 9 March 2026.", "northpoint depot to routemap cutover completed", D(2026, 3, 9)),
    ("The Eastquay desk has been taking bookings, refunds and day tickets live in Tidemark since 07:30 on "
     "Tuesday 3 March 2026.", "eastquay desk to tidemark cutover completed", D(2026, 3, 3)),
])
def test_lifted_resumed_and_long_since_are_events(text, what, on):
    assert [(ev.what, ev.on) for ev in _events(text, published_at=D(2026, 3, 13))] == [(what, on)]


def test_a_notice_issued_or_a_lift_serviced_is_no_event():
    # invented: only lifting the notice ends it; a lift (the machine) serviced is not lifted
    assert _events("The water company issued a boil water notice at Fernside on 2 February 2026.") == ()
    assert _events("The goods lift was serviced on 4 May 2026.") == ()


def test_pending_a_named_places_switch_is_a_condition():
    # invented: a ferry line; the place's name is two words before its possessive
    d = enrich(doc("Pending Eastquay Pier's switch to HarbourDesk, refunds are made in cash at the kiosk."))
    assert d.condition == "until Eastquay Pier's switch to HarbourDesk"


@pytest.mark.parametrize("text, start", [
    # invented: a chain of lidos. "These ..." and "they" are this document's own rules; where
    # they apply may stand between the verb and the date
    ("From 1 March 2026 these charges take over from \"Lido charges (2025)\". Swim cards stay valid.",
     D(2026, 3, 1)),
    ("From Monday 2 March 2026 these terms replace the \"Lido terms (2025)\", which no longer apply from that day.",
     D(2026, 3, 2)),
    ("The pools manager approved these local rules. They apply at Eastmere Lido from Monday 5 January 2026, "
     "in place of the opening hours in the lido policy.", D(2026, 1, 5)),
    ("From Monday 1 December 2025 they apply at Eastmere, and at Eastmere they take over from the group-wide "
     "opening hours.", D(2025, 12, 1)),
])
def test_these_rules_and_they_apply_from_a_date_start_the_document(text, start):
    d = enrich(doc(text, title="Eastmere lido local rules", doc_type="policy", published_at=D(2025, 11, 10)))
    assert (d.effective_from, d.effective_to) == (start, None)


def test_they_that_no_longer_apply_from_a_date_start_nothing():
    # invented: "they" no longer applying is an end, not this document's start
    d = enrich(doc("From 1 March 2026 they no longer apply at Eastmere.", title="Eastmere lido local rules",
                   doc_type="policy", published_at=D(2025, 11, 10)))
    assert d.effective_from is None


def test_an_offer_open_between_two_dates_that_ends_then_is_bounded_by_them():
    # invented: a pottery studio's spring offer, open to courses starting between two dates
    from quarry.core.ingest.enrich_validity import find_effective

    sents = ["To fill the quiet weeks after New Year, a course of at least 6 sessions has its sixth session free.",
             "The offer is open to courses that start between Monday 12 January 2026 and Sunday 15 February 2026, "
             "both days included.", "Courses starting after 15 February do not qualify; the offer ends then."]
    assert find_effective(sents, "kiln-offer", "Spring offer: sixth session free", tenant="kiln") == (
        dt.date(2026, 1, 12), dt.date(2026, 2, 15))
    # a range between two dates that nothing says the document ends after bounds nothing
    assert find_effective(["The studio is closed between 22 December 2025 and 2 January 2026."], "kiln-terms",
                          "Studio terms", tenant="kiln") == (None, None)


def test_these_terms_taking_effect_start_the_document_and_they_replace_a_quoted_title():
    # invented: a dog groomer's terms. "These terms take effect on ...": the plural subject of
    # the document; "From that day they replace the "Grooming terms (2025)"": a title it ends
    from quarry.core.ingest.enrich_supersession import find_supersession
    from quarry.core.ingest.enrich_validity import find_effective

    sents = ["These terms take effect on Monday 12 January 2026.",
             "From that day they replace the \"Grooming terms (2025)\", which are withdrawn."]
    assert find_effective(sents, "snip-terms-2026", "Grooming terms 2026", tenant="snip") == (dt.date(2026, 1, 12), None)
    d = SourceDocument(doc_id="snip-terms-2026", tenant="snip", acl=("all-staff",), doc_type="policy",
                       text=" ".join(sents), title="Grooming terms 2026")
    assert find_supersession(d, sents)[2] == ("Grooming terms (2025)",)
    # another document's subject is no "they" of this one's
    assert find_supersession(d, ["Customers say they replace their dog's collar every year."]) == ((), (), ())


def test_a_range_between_two_dates_that_a_notice_outlives_does_not_bound_it():
    # invented: a pottery studio's holiday notice about courses starting between two dates;
    # the notice ends on a date of its own, so the range is the courses', not the notice's
    from quarry.core.ingest.enrich_validity import find_effective

    sents = ["For courses starting between 22 December 2025 and 1 January 2026, free cancellation ends 7 days "
             "before the first session.", "This notice expires on 2 January 2026."]
    assert find_effective(sents, "kiln-holiday-notice", "Holiday courses - cancellation", tenant="kiln") == (
        None, dt.date(2026, 1, 2))
