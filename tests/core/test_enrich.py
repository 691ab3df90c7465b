"""The envelope enricher: each extraction, source metadata winning, the Spark chunk stage
running the same function, and the acceptance: resolution over the Acme documents stripped
of condition, events and supersedes gives the same decision."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quarry.core.enrich import FIELDS, enrich, parse_date
from quarry.core.pipeline import prepare
from quarry.core.records import Event, Principal, SourceDocument
from quarry.core.resolve import resolve

pytestmark = pytest.mark.unit

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
    # No id after the verb: nothing is guessed from a description.
    assert enrich(doc("It replaces the old table in the runbook.")).extracted == ()
    # A document never supersedes itself.
    assert enrich(doc("This version supersedes `d1` v1.")).supersedes == ()


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
