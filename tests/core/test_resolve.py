"""Evidence resolution: one test per rule, their interactions, order independence, near
misses, and the Acme acceptance over the real sample corpus."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quarry.core.ingest.pipeline import prepare
from quarry.core.records import Event, Principal, SourceDocument
from quarry.core.evidence.resolve import resolve

pytestmark = pytest.mark.unit

D = dt.date
ACME = Principal(tenant="acme", subject="u1", groups=frozenset({"all-staff"}))


def doc(doc_id: str, text: str, **kw) -> SourceDocument:
    base = dict(doc_id=doc_id, tenant="acme", acl=("all-staff",), doc_type="page", text=text)
    base.update(kw)
    return SourceDocument(**base)


def passages(*docs: SourceDocument):
    ps, _ = prepare(list(docs))
    return ps


def pid(ps, doc_id: str, version: str = "1") -> str:
    (one,) = [p.passage_id for p in ps if p.doc_id == doc_id and p.envelope.version == version]
    return one


def rejected(decision) -> dict[str, tuple[str, str | None]]:
    return {r.passage_id: (r.reason, r.by) for r in decision.rejected}


def selected(decision) -> set[str]:
    return {s.passage_id for s in decision.selected}


# ----------------------------------------------------------------------------- dates

def test_effective_dates_against_valid_at_and_unknown_reported_as_unknown():
    ps = passages(
        doc("future", "The payout limit rule starts next year.", effective_from=D(2026, 6, 1)),
        doc("past", "The old payout limit rule ended.", effective_from=D(2025, 1, 1), effective_to=D(2025, 12, 31)),
        doc("current", "The payout limit rule applies now.", effective_from=D(2025, 1, 1)),
        doc("undated", "A note about payout limits without any dates."),
    )
    d = resolve(ps, ACME, D(2026, 2, 1))
    assert rejected(d) == {pid(ps, "future"): ("not_yet_effective", None),
                           pid(ps, "past"): ("no_longer_effective", None)}
    validity = {s.passage_id: s.validity for s in d.selected}
    assert validity == {pid(ps, "current"): "in_force", pid(ps, "undated"): "unknown"}
    # The last day in force is inclusive; the first day too.
    assert not resolve(ps, ACME, D(2025, 12, 31)).rejected_ids & {pid(ps, "past")}
    assert pid(ps, "future") not in resolve(ps, ACME, D(2026, 6, 1)).rejected_ids


def test_default_valid_at_is_today():
    ps = passages(doc("future", "Starts far in the future.", effective_from=dt.date.today() + dt.timedelta(days=1)))
    d = resolve(ps, ACME)
    assert d.valid_at == dt.date.today()
    assert rejected(d) == {ps[0].passage_id: ("not_yet_effective", None)}


# ----------------------------------------------------------------------------- supersession

def test_explicit_supersedes_link_once_the_newer_source_is_in_force():
    ps = passages(
        doc("new-policy", "The rule is now different.", doc_type="policy", effective_from=D(2026, 1, 1),
            supersedes=("old-runbook",)),
        doc("old-runbook", "The rule as the runbook had it.", doc_type="runbook"),
    )
    d = resolve(ps, ACME, D(2026, 2, 1))
    assert rejected(d) == {pid(ps, "old-runbook"): ("superseded_by", pid(ps, "new-policy"))}
    assert next(s for s in d.selected if s.passage_id == pid(ps, "new-policy")).reason == "supersedes old-runbook@1"
    # Before the new policy starts, it supersedes nothing (and is itself not yet effective).
    before = resolve(ps, ACME, D(2025, 12, 1))
    assert rejected(before) == {pid(ps, "new-policy"): ("not_yet_effective", None)}


def test_superseded_by_a_version_key_and_expired_reports_the_successor():
    ps = passages(
        doc("refund", "Refunds within 180 days.", version="1", doc_type="policy", effective_from=D(2025, 1, 1),
            effective_to=D(2025, 12, 31), superseded_by=("refund@2",)),
        doc("refund", "Refunds within 120 days.", version="2", doc_type="policy", effective_from=D(2026, 1, 1),
            supersedes=("refund@1",)),
    )
    d = resolve(ps, ACME, D(2026, 2, 1))
    (r,) = d.rejected
    assert (r.passage_id, r.reason, r.by) == (pid(ps, "refund", "1"), "superseded_by", pid(ps, "refund", "2"))
    assert "effective_to 2025-12-31" in r.detail
    # In mid-2025 v1 governs and v2 is not yet effective.
    mid = resolve(ps, ACME, D(2025, 6, 1))
    assert rejected(mid) == {pid(ps, "refund", "2"): ("not_yet_effective", None)}


def test_later_version_supersedes_without_link_only_when_known_to_have_started():
    v1 = doc("guide", "Use the blue button.", version="1", published_at=D(2025, 3, 1))
    v2 = doc("guide", "Use the green button.", version="2", published_at=D(2026, 1, 20))
    ps = passages(v1, v2)
    assert rejected(resolve(ps, ACME, D(2026, 2, 1))) == {pid(ps, "guide", "1"): ("superseded_by", pid(ps, "guide", "2"))}
    # Not yet published at valid_at: the earlier version stands, the later one was not yet in force.
    assert rejected(resolve(ps, ACME, D(2026, 1, 10))) == {pid(ps, "guide", "2"): ("not_yet_effective", None)}
    # An undated later version is not known to be in force: nothing is superseded.
    undated = passages(v1, v2.model_copy(update={"published_at": None}))
    assert not resolve(undated, ACME, D(2026, 2, 1)).rejected
    # Versions order naturally: 10 is later than 9.
    nat = passages(v1.model_copy(update={"version": "9"}), v2.model_copy(update={"version": "10"}))
    assert rejected(resolve(nat, ACME, D(2026, 2, 1))) == {pid(nat, "guide", "9"): ("superseded_by", pid(nat, "guide", "10"))}


# ----------------------------------------------------------------------------- conditions

def _exception(condition: str, **kw) -> SourceDocument:
    return doc("exception", "Acme keeps the old behaviour for now.", doc_type="comment", entities=("acme",),
               published_at=D(2026, 1, 3), condition=condition, **kw)


def _record(doc_id: str, what: str, on: dt.date, **kw) -> SourceDocument:
    base = dict(doc_type="deployment", entities=("acme",), published_at=on)
    base.update(kw)
    return doc(doc_id, f"Rollout record. It completed on {on.isoformat()}.", events=(Event(what=what, on=on),), **base)


def test_condition_ends_when_a_visible_in_force_record_proves_the_event():
    ps = passages(_exception("until cutover"), _record("rollout", "acme cutover completed", D(2026, 1, 15)))
    d = resolve(ps, ACME, D(2026, 2, 1))
    (r,) = d.rejected
    assert (r.passage_id, r.reason, r.by) == (pid(ps, "exception"), "condition_ended", pid(ps, "rollout"))
    assert "2026-01-15" in r.detail
    assert next(s for s in d.selected if s.passage_id == pid(ps, "rollout")).reason.startswith("proves the stopping event")
    # On the event day itself the condition has ended; the day before it has not.
    assert pid(ps, "exception") in resolve(ps, ACME, D(2026, 1, 15)).rejected_ids
    # (the record itself, published on the 15th, did not exist yet: it is not yet effective)
    before = resolve(ps, ACME, D(2026, 1, 14))
    assert [(r.passage_id, r.reason) for r in before.rejected] == [(pid(ps, "rollout"), "not_yet_effective")]


def test_words_match_after_stemming():
    ps = passages(_exception("until the payout_batch_v2 migration completes"),
                  _record("rollout", "payout_batch_v2 migration completed for acme", D(2026, 1, 20)))
    assert rejected(resolve(ps, ACME, D(2026, 2, 1))) == {pid(ps, "exception"): ("condition_ended", pid(ps, "rollout"))}


@pytest.mark.parametrize("what, scope", [
    ("payout_batch_v3 migration completed", ("acme",)),  # another migration id
    ("globex cutover completed", ("globex",)),  # another entity's cutover, named in the event
    ("cutover completed", ("globex",)),  # another entity's record, no entity in the text
    ("globex cutover completed", ("acme", "globex")),  # a shared record naming the other entity
    ("acme refund migration completed", ("acme",)),  # a different event for the same entity
])
def test_near_miss_event_does_not_end_the_condition(what, scope):
    cond = "until the payout_batch_v2 migration completes" if "payout" in what else "until cutover"
    ps = passages(_exception(cond), _record("other", what, D(2026, 1, 15), entities=scope))
    d = resolve(ps, ACME, D(2026, 2, 1))
    assert not d.rejected
    assert pid(ps, "exception") in selected(d)


def test_event_not_ending_condition_when_invisible_future_stale_or_out_of_force():
    exc = _exception("until cutover")
    cases = {
        "invisible to the principal": _record("r", "acme cutover completed", D(2026, 1, 15), acl=("finance-admins",)),
        "event after valid_at": _record("r", "acme cutover completed", D(2026, 3, 1)),
        "event before the condition was stated": _record("r", "acme cutover completed", D(2025, 11, 1)),
        "record no longer in force": _record("r", "acme cutover completed", D(2026, 1, 15),
                                             effective_from=D(2026, 1, 15), effective_to=D(2026, 1, 20)),
    }
    for why, rec in cases.items():
        ps = passages(exc, rec)
        d = resolve(ps, ACME, D(2026, 2, 1))
        assert pid(ps, "exception") not in d.rejected_ids, why


def test_superseded_event_record_proves_nothing():
    ps = passages(_exception("until cutover"),
                  _record("rollout", "acme cutover completed", D(2026, 1, 15), version="1"),
                  doc("rollout", "Correction: the cutover was rolled back.", version="2", doc_type="deployment",
                      entities=("acme",), published_at=D(2026, 1, 16)))
    d = resolve(ps, ACME, D(2026, 2, 1))
    assert rejected(d) == {pid(ps, "rollout", "1"): ("superseded_by", pid(ps, "rollout", "2"))}


# ----------------------------------------------------------------------------- scope and authority

def test_authority_decides_conflicting_numbers_and_equal_authority_is_unresolved():
    policy = doc("limits-policy", "The daily payout limit is EUR 50,000 per tenant.", doc_type="policy")
    runbook = doc("limits-runbook", "Check the daily payout limit of EUR 20,000 per tenant first.", doc_type="runbook")
    other = doc("limits-page", "The daily payout limit is EUR 30,000 per tenant.", doc_type="runbook")
    ps = passages(policy, runbook)
    d = resolve(ps, ACME, D(2026, 2, 1))
    (r,) = d.rejected
    assert (r.passage_id, r.reason, r.by) == (pid(ps, "limits-runbook"), "subordinate_to", pid(ps, "limits-policy"))
    assert r.detail == "authority: policy (100) over runbook (60)"
    # A configured table can rank runbooks above policies.
    flipped = resolve(ps, ACME, D(2026, 2, 1), authority={"policy": 1, "runbook": 2})
    assert rejected(flipped) == {pid(ps, "limits-policy"): ("subordinate_to", pid(ps, "limits-runbook"))}
    # Two runbooks disagreeing: both sides unresolved, neither selected nor rejected.
    ps2 = passages(runbook, other)
    d2 = resolve(ps2, ACME, D(2026, 2, 1))
    assert not d2.rejected and not d2.selected
    (u,) = d2.unresolved
    assert u.passage_ids == tuple(sorted((pid(ps2, "limits-runbook"), pid(ps2, "limits-page"))))
    assert d2.verdict(pid(ps2, "limits-page")) == "unresolved"


def test_same_values_or_different_subjects_are_no_conflict():
    ps = passages(doc("a", "The daily payout limit is EUR 50,000 per tenant.", doc_type="policy"),
                  doc("b", "Remember: the daily payout limit is EUR 50,000.00 per tenant.", doc_type="runbook"),
                  doc("c", "The webhook retry interval is 30 minutes.", doc_type="runbook"),
                  doc("d", "The refund fee is EUR 0.25 per refund.", doc_type="help"))
    d = resolve(ps, ACME, D(2026, 2, 1))
    assert not d.rejected and not d.unresolved and not d.supporting  # no link or defeat to support
    assert {s.reason for s in d.governing} == {"answers the question"} and len(d.governing) == 4


def test_specific_outranks_general_only_while_in_force():
    general = doc("cutoff-policy", "All tenants use the 15:00 EUR cutoff.", doc_type="policy",
                  entities=("acme", "globex"))
    specific = doc("acme-note", "Acme tenants use the 16:00 EUR cutoff for now.", doc_type="comment",
                   entities=("acme",), effective_from=D(2026, 1, 1), effective_to=D(2026, 1, 31))
    ps = passages(general, specific)
    inside = resolve(ps, ACME, D(2026, 1, 10))
    (r,) = inside.rejected
    assert (r.passage_id, r.reason, r.by) == (pid(ps, "cutoff-policy"), "subordinate_to", pid(ps, "acme-note"))
    assert r.detail.startswith("scope: acme-note@1 is specific to acme")
    after = resolve(ps, ACME, D(2026, 2, 10))
    assert rejected(after) == {pid(ps, "acme-note"): ("no_longer_effective", None)}
    assert pid(ps, "cutoff-policy") in selected(after)


def test_a_passage_scoped_to_part_of_anothers_entities_is_the_narrower_one_whatever_is_asked():
    # the question names a hotel the exception does not cover: the group policy still does
    # not become the narrower one (the exception is Harbourside's alone)
    group = doc("deposit-policy", "Every hotel takes a GBP 50 a night incidentals hold at check-in.",
                doc_type="policy", entities=("marlow", "harbourside", "kingsgate"))
    local = doc("desk-note", "Harbourside takes a GBP 0 a night incidentals hold at check-in for now.",
                doc_type="comment", entities=("harbourside",))
    ps = passages(group, local)
    p = Principal(tenant="acme", subject="u1", groups=frozenset({"all-staff"}))
    d = resolve(ps, p, D(2026, 1, 28), query="now Kingsgate is live, does Harbourside take the incidentals hold?")
    assert rejected(d) == {pid(ps, "deposit-policy"): ("subordinate_to", pid(ps, "desk-note"))}


def test_a_page_naming_the_group_and_every_site_is_no_narrower_than_the_group_policy():
    from quarry.core.evidence.disputes import _specific
    from quarry.core.records import Envelope

    def env(*entities):
        return Envelope(doc_id="x", version="1", tenant="acme", acl=("all-staff",), entities=entities)

    faq, group = env("marlow", "harbourside", "kingsgate", "riverview"), env("marlow")
    assert not _specific(faq, group, frozenset({"kingsgate"}))  # it names the group too: no narrower
    # a page about named places the policy does not name is narrower for a question about them
    page, campus = env("north-campus", "halvorsen-hall", "birch-court"), env("lakeside")
    assert _specific(page, campus, frozenset({"birch-court"}))
    assert not _specific(campus, page, frozenset({"birch-court"}))


def test_an_expired_passage_on_the_question_is_reported_rejected_when_no_survivor_shares_its_words():
    ps = passages(doc("holiday-notice", "Extended returns for the holiday season: gifts can come back until 31 January.",
                      title="Extended returns for the 2025 holiday season", effective_to=D(2026, 1, 31)),
                  doc("returns-policy", "Unwanted items may be sent back within 28 days.", doc_type="policy"))
    d = resolve(ps, ACME, D(2026, 2, 9), query="holiday season extended returns for a December present")
    assert rejected(d) == {pid(ps, "holiday-notice"): ("no_longer_effective", None)}
    assert pid(ps, "holiday-notice") not in {r.passage_id for r in d.related}


@pytest.mark.parametrize("alike, governs", [(1.0, "delivery-policy"), (0.0, "care-wiki")])
def test_a_higher_authority_stating_the_value_an_answer_repeats_governs_in_its_place(alike, governs):
    # only where the two sentences say one thing in other words (the statement vectors'
    # cosine reaches the paraphrase threshold): a report quoting the time is no such source
    import numpy as np
    from quarry.core.evidence.graph import facts_of

    ps = passages(doc("care-wiki", "Care desk wiki tip: express orders placed by 14:00 arrive the next working day.",
                      title="Care desk wiki"),
                  doc("delivery-policy", "Express orders placed by 14:00 arrive the next working day.",
                      doc_type="policy", title="Delivery promise"))
    rows = {pid(ps, "care-wiki"): np.array([1.0, 0.0]), pid(ps, "delivery-policy"): np.array([alike, 1 - alike])}
    facts = {}
    for p in ps:
        f = facts_of(p)
        facts[p.passage_id] = f.with_vectors(np.tile(rows[p.passage_id], (len(f.statements), 1)))
    d = resolve(ps, ACME, D(2026, 3, 10), query="the care desk wiki says express orders by 2pm, is that correct?",
                facts=facts)
    assert {s.passage_id for s in d.governing} == {pid(ps, governs)}


def test_an_answer_repeating_a_value_in_another_notation_gives_way_to_the_higher_authority():
    # "a fortnight" and "14 days", "a quarter of an hour" and "15 minutes": one value, so
    # the wiki only repeats what the policy says (equal magnitudes, not equal strings)
    import numpy as np
    from quarry.core.evidence.graph import facts_of

    ps = passages(doc("care-wiki", "Care desk wiki tip: unwanted items can come back within a fortnight.",
                      title="Care desk wiki"),
                  doc("returns-policy", "Unwanted items can come back within 14 days.",
                      doc_type="policy", title="Returns promise"))
    facts = {}
    for p in ps:
        f = facts_of(p)
        facts[p.passage_id] = f.with_vectors(np.tile(np.array([1.0, 0.0]), (len(f.statements), 1)))
    assert {s.value for f in facts.values() for s in f.statements} == {"1 fortnight", "14 day"}
    d = resolve(ps, ACME, D(2026, 3, 10), query="the care desk wiki says unwanted items within a fortnight, right?",
                facts=facts)
    assert {s.passage_id for s in d.governing} == {pid(ps, "returns-policy")}


def test_an_ended_exception_gives_way_to_the_rule_it_stood_in_for():
    # the question shares its words with the exception ("Acme", "ready") and the rollout
    # record, too few with the policy's statement: once the exception ended, the policy's
    # value for the exception's subject answers again
    import numpy as np
    from quarry.core.evidence.graph import facts_of

    policy = doc("rx-policy", "Repeat prescriptions are ready 2 working days after the request.",
                 doc_type="policy", published_at=D(2025, 6, 1))
    ticket = doc("rx-note", "Acme repeat prescriptions are ready 4 working days after the request.",
                 doc_type="comment", entities=("acme",), published_at=D(2026, 1, 3), condition="until cutover")
    record = doc("rollout", "Acme cutover: Acme went live on the new platform and its prescription ordering works again.",
                 doc_type="deployment", entities=("acme",), published_at=D(2026, 1, 15),
                 events=(Event(what="acme cutover completed", on=D(2026, 1, 15)),))
    ps = passages(policy, ticket, record)
    facts = {}
    for p in ps:
        f = facts_of(p)
        facts[p.passage_id] = f.with_vectors(np.tile([1.0, 0.0], (len(f.statements), 1))) if f.statements else f
    q = "Acme: when are they ready, now the Acme cutover has completed?"
    after = resolve(ps, ACME, D(2026, 2, 11), query=q, facts=facts)
    assert rejected(after)[pid(ps, "rx-note")] == ("condition_ended", pid(ps, "rollout"))
    assert pid(ps, "rx-policy") in {s.passage_id for s in after.governing}


def test_beaten_only_by_a_beaten_passage_stands():
    # runbook beats ticket (authority); ticket would beat comment, but the ticket is out.
    ps = passages(doc("rb", "The batch cutoff for settlement is 17:00 today.", doc_type="runbook"),
                  doc("tk", "The batch cutoff for settlement is 15:00 now.", doc_type="ticket"),
                  doc("cm", "Our batch cutoff for settlement stays 17:00 as before.", doc_type="comment"))
    d = resolve(ps, ACME, D(2026, 2, 1))
    assert rejected(d) == {pid(ps, "tk"): ("subordinate_to", pid(ps, "rb"))}
    assert {pid(ps, "rb"), pid(ps, "cm")} <= selected(d)


def test_other_tenant_and_unreadable_passages_take_no_part():
    ps = passages(doc("mine", "Visible note."), doc("theirs", "Other tenant.", tenant="globex"),
                  doc("secret", "Restricted.", acl=("finance-admins",)))
    d = resolve(ps, ACME, D(2026, 2, 1))
    assert selected(d) == {pid(ps, "mine")} and not d.rejected


# ----------------------------------------------------------------------------- order independence

def _mixed_corpus():
    return passages(
        _exception("until cutover"),
        _record("rollout", "acme cutover completed", D(2026, 1, 15)),
        doc("limits-policy", "The daily payout limit is EUR 50,000 per tenant.", doc_type="policy"),
        doc("limits-runbook", "Check the daily payout limit of EUR 20,000 per tenant first.", doc_type="runbook"),
        doc("limits-page", "The daily payout limit is EUR 30,000 per tenant.", doc_type="runbook"),
        doc("refund", "Refunds within 180 days.", version="1", effective_to=D(2025, 12, 31)),
        doc("refund", "Refunds within 120 days.", version="2", effective_from=D(2026, 1, 1)),
        doc("future", "Starts later.", effective_from=D(2026, 6, 1)),
    )


MIXED = _mixed_corpus()


@settings(max_examples=60, deadline=None)
@given(st.permutations(MIXED), st.sampled_from([D(2025, 6, 1), D(2026, 1, 10), D(2026, 2, 1), D(2026, 7, 1)]))
def test_decision_never_depends_on_input_order(perm, day):
    assert resolve(perm, ACME, day) == resolve(MIXED, ACME, day)


def test_duplicate_passages_count_once():
    assert resolve(MIXED + MIXED, ACME, D(2026, 2, 1)) == resolve(MIXED, ACME, D(2026, 2, 1))


def test_reasons_and_details_carry_no_passage_text():
    d = resolve(MIXED, ACME, D(2026, 2, 1))
    strings = [r.detail for r in d.rejected] + [s.reason for s in d.selected] + [u.reason for u in d.unresolved]
    def shingles(text: str) -> set[tuple[str, ...]]:
        w = text.lower().replace(".", " ").split()
        return {tuple(w[i:i + 3]) for i in range(len(w) - 2)}

    from_text = set().union(*(shingles(p.text) for p in MIXED))
    assert len(strings) >= 6
    for s in strings:
        assert not shingles(s) & from_text, s


# ----------------------------------------------------------------------------- the Acme acceptance

ACME_DOCS = ("settlement-policy", "settlement-runbook", "ticket-482-comment-17", "deploy-acme-cutover")


@pytest.fixture(scope="module")
def acme_passages(sample_docs):
    ps, _ = prepare([d for d in sample_docs if d.doc_id in ACME_DOCS])
    return ps


def acme_decision_summary(decision, ps):
    """Verdicts per document: {doc_id: set of (verdict, reason, doc_id of by)}."""
    doc_of = {p.passage_id: p.doc_id for p in ps}
    out: dict[str, set] = {}
    for s in decision.selected:
        out.setdefault(doc_of[s.passage_id], set()).add(("selected",))
    for r in decision.rejected:
        out.setdefault(doc_of[r.passage_id], set()).add(("rejected", r.reason, doc_of.get(r.by)))
    for u in decision.unresolved:
        for p in u.passage_ids:
            out.setdefault(doc_of[p], set()).add(("unresolved",))
    return out


@pytest.mark.parametrize("day", [D(2026, 2, 1), dt.date.today()])
def test_acme_after_cutover_policy_v3_governs(acme_passages, day):
    d = resolve(acme_passages, ACME, day)
    assert acme_decision_summary(d, acme_passages) == {
        "settlement-policy": {("selected",)},
        "deploy-acme-cutover": {("selected",)},
        "ticket-482-comment-17": {("rejected", "condition_ended", "deploy-acme-cutover")},
        "settlement-runbook": {("rejected", "superseded_by", "settlement-policy")},
    }
    assert not d.unresolved
    by = {r.passage_id: r.by for r in d.rejected}
    assert by["ticket-482-comment-17@1#top.1"] == "deploy-acme-cutover@1#summary.1"
    assert by["settlement-runbook@2#cutoffs.1"] == "settlement-policy@3#eur-cutoff.1"


def test_acme_before_cutover_the_ticket_comment_governs(acme_passages):
    d = resolve(acme_passages, ACME, D(2026, 1, 10))
    summary = acme_decision_summary(d, acme_passages)
    assert summary["ticket-482-comment-17"] == {("selected",)}
    assert summary["settlement-runbook"] == {("rejected", "superseded_by", "settlement-policy")}
    comment = next(s for s in d.selected if s.passage_id == "ticket-482-comment-17@1#top.1")
    assert comment.validity == "unknown"
    # The policy's EUR cutoff (15:00) yields to the Acme-specific exception (16:00) while it holds.
    assert {(r.passage_id, r.reason, r.by) for r in d.rejected if r.reason == "subordinate_to"} == {
        ("settlement-policy@3#eur-cutoff.1", "subordinate_to", "ticket-482-comment-17@1#top.1")}
    assert "16:00" in next(p.text for p in acme_passages if p.passage_id == comment.passage_id)
    assert not d.unresolved


def test_acme_decision_record_round_trips_as_json(acme_passages):
    d = resolve(acme_passages, ACME, D(2026, 2, 1))
    assert type(d).model_validate_json(json.dumps(d.model_dump(mode="json"))) == d


# ----------------------------------------------------------------------------- contradiction search

def test_follow_up_queries_target_the_governing_subjects_first(acme_passages):
    from quarry.core.evidence.resolve import CONTRADICTION_TERMS, follow_up_queries

    d = resolve(acme_passages, ACME, D(2026, 2, 1))
    qs = follow_up_queries(d, acme_passages)
    assert 1 <= len(qs) <= 2
    # The governing policy passage (it supersedes the runbook) states the EUR cutoff: asked first.
    assert qs[0].startswith("migrated tenants use eur cutoff")
    for q in qs:
        assert all(t in q.split() for t in CONTRADICTION_TERMS)
        assert len(q.split()) <= 16  # narrow: the subject's words and the contradiction terms
    # Rejected passages are never followed up: the ticket comment's 16:00 is not asked about.
    assert not any("pinned" in q for q in qs)
    assert follow_up_queries(d, acme_passages, limit=1) == qs[:1]
    assert follow_up_queries(d, list(reversed(acme_passages))) == qs


def test_follow_up_queries_for_owner_status_and_dates_and_none_without_facts():
    from quarry.core.evidence.resolve import follow_up_queries

    ps = passages(doc("ir", "The incident commander owns customer communication.", doc_type="policy"),
                  doc("plain", "Nothing to check in this sentence at all."))
    qs = follow_up_queries(resolve(ps, ACME, D(2026, 2, 1)), ps)
    assert qs == ["incident commander customer communication owns superseded exception effective revoked completed"]
    only_plain = [p for p in ps if p.doc_id == "plain"]
    assert follow_up_queries(resolve(only_plain, ACME, D(2026, 2, 1)), only_plain) == []
    dated = passages(doc("notice", "Acme's migration finished on 2026-01-20 for payouts.", entities=("acme",)))
    (q,) = follow_up_queries(resolve(dated, ACME, D(2026, 2, 1)), dated)
    assert q.startswith("acme") and "migration" in q and "payouts" in q


def test_a_conflict_on_a_subject_the_question_does_not_ask_about_decides_nothing_for_it():
    a = doc("desk-runbook-a", "Refund requests are answered within 2 business days. "
                              "The daily payout limit is EUR 20,000 per tenant.", doc_type="runbook")
    b = doc("desk-runbook-b", "Refund requests are answered within 2 business days. "
                              "The daily payout limit is EUR 30,000 per tenant.", doc_type="runbook")
    ps = passages(a, b)
    on_limit = resolve(ps, ACME, D(2026, 2, 1), query="What is the daily payout limit?")
    assert len(on_limit.unresolved) == 1  # the question's own subject: equal authority, unresolved
    on_refunds = resolve(ps, ACME, D(2026, 2, 1), query="How fast are refund requests answered?")
    assert not on_refunds.unresolved and not on_refunds.rejected
    assert {s.passage_id for s in on_refunds.governing} == {pid(ps, "desk-runbook-a"), pid(ps, "desk-runbook-b")}


def test_a_passage_scoped_to_the_place_the_question_names_beats_the_general_rule():
    handbook = doc("housing-handbook", "Overnight guests may stay up to 3 consecutive nights.", doc_type="policy",
                   entities=("north-campus", "south-campus"))
    annex = doc("annex-page", "Overnight guests may stay up to 2 consecutive nights.", doc_type="page",
                entities=("north-campus", "elm-court"))
    ps = passages(handbook, annex)
    there = resolve(ps, ACME, D(2026, 2, 1), query="I live in Elm Court: how many consecutive nights may a guest stay?")
    assert rejected(there) == {pid(ps, "housing-handbook"): ("subordinate_to", pid(ps, "annex-page"))}
    anywhere = resolve(ps, ACME, D(2026, 2, 1), query="How many consecutive nights may a guest stay?")
    assert rejected(anywhere) == {pid(ps, "annex-page"): ("subordinate_to", pid(ps, "housing-handbook"))}


def test_a_new_version_is_named_by_the_section_of_the_same_heading():
    old = ("# Cancelling\n\n## Leaving after the minimum term\n\nCustomers give 30 days' notice.\n\n"
           "## Leaving early\n\nA customer who leaves before the end of the minimum term pays an early termination "
           "charge of GBP 12 a month.\n")
    new = ("# Cancelling\n\n## Leaving after the minimum term\n\nCustomers give 30 days' notice.\n\n"
           "## Leaving early\n\nLeaving during the minimum term costs GBP 9 for every whole month still to run.\n")
    ps = passages(doc("cancel", old, version="1", effective_from=D(2025, 1, 1)),
                  doc("cancel", new, version="2", effective_from=D(2026, 2, 2)))
    d = resolve(ps, ACME, D(2026, 3, 1))
    early = {p.envelope.version: p.passage_id for p in ps if p.heading_path and p.heading_path[-1] == "Leaving early"}
    assert rejected(d)[early["1"]] == ("superseded_by", early["2"])


@pytest.mark.parametrize("memo", [
    "Bereaved staff now get 5 days of paid bereavement leave. This supersedes the 3-day entitlement in the staff "
    "leave policy.",
    "Bereaved staff now get 5 days of paid bereavement leave. This replaces the 3 days in the staff leave policy.",
])
def test_a_memo_naming_the_value_it_supersedes_supersedes_that_rule(memo):
    ps = passages(doc("leave-policy", "Staff get 3 days of paid bereavement leave.", doc_type="policy"),
                  doc("hr-memo", memo, doc_type="policy"))
    d = resolve(ps, ACME, D(2026, 3, 10), query="how many days of bereavement leave do staff get?")
    # the memo names the value it replaces: it supersedes that rule of the policy
    assert rejected(d)[pid(ps, "leave-policy")] == ("superseded_by", pid(ps, "hr-memo"))
    assert {s.passage_id for s in d.governing} == {pid(ps, "hr-memo")}


@pytest.mark.parametrize("memo", [
    "The 30-minute cool-down no longer applies: kilns now cool for at least 45 minutes before they are opened.",
    "The 30-minute cool-down is replaced: kilns now cool for at least 45 minutes before they are opened.",
    "The studio rules' 30-minute cool-down is out of date: kilns now cool for at least 45 minutes before they "
    "are opened.",
    "The 30-minute cool-down stops on 2 March 2026. From then kilns cool for at least 45 minutes before they are "
    "opened.",
])
def test_a_memo_retiring_the_value_it_replaces_supersedes_that_rule(memo):
    # invented: a pottery studio; the memo names the old value as the subject it retires
    ps = passages(doc("studio-rules", "Kilns cool for at least 30 minutes before they are opened.", doc_type="policy"),
                  doc("studio-memo", memo, doc_type="policy"))
    d = resolve(ps, ACME, D(2026, 3, 10), query="how long must a kiln cool before it is opened?")
    assert rejected(d)[pid(ps, "studio-rules")] == ("superseded_by", pid(ps, "studio-memo"))
    assert not d.unresolved


@pytest.mark.parametrize("memo", [
    "From 2 March 2026 a dinghy lesson costs GBP 32.50, in place of the GBP 27.50 set in the club price list.",
    "The GBP 27.50 lesson price no longer applies: from 2 March 2026 a dinghy lesson costs GBP 32.50.",
])
def test_a_memo_naming_a_decimal_value_it_replaces_supersedes_that_rule(memo):
    # invented: a sailing club; the replaced value's decimal point is no end of the phrase
    ps = passages(doc("club-prices", "A dinghy lesson costs GBP 27.50.", doc_type="policy"),
                  doc("club-memo", memo, doc_type="policy"))
    d = resolve(ps, ACME, D(2026, 3, 10), query="what does a dinghy lesson cost?")
    assert rejected(d)[pid(ps, "club-prices")] == ("superseded_by", pid(ps, "club-memo"))
    assert not d.unresolved


def test_a_narrower_memo_naming_the_value_it_retires_supersedes_that_rule():
    # scope alone would make the memo win (its entities are a subset); naming the value it
    # retires makes the policy's rule superseded_by it, not subordinate_to
    ps = passages(doc("works-policy", "A fire watch stays for 60 minutes after hot work ends.", doc_type="policy",
                      entities=("acme", "north-yard", "hot-work", "excavation")),
                  doc("works-memo", "The 60-minute fire watch no longer applies: a fire watch stays for 90 minutes "
                      "after hot work ends.", doc_type="policy", entities=("acme", "north-yard", "hot-work")))
    d = resolve(ps, ACME, D(2026, 3, 10), query="how long does a fire watch stay after hot work at the north yard?")
    assert rejected(d)[pid(ps, "works-policy")] == ("superseded_by", pid(ps, "works-memo"))


def test_a_retired_value_of_another_kind_overrides_nothing():
    # the memo retires a 20-minute rule; the rules' 30 minutes is not it: a dispute stays
    ps = passages(doc("studio-rules", "Kilns cool for at least 30 minutes before they are opened.", doc_type="policy"),
                  doc("studio-memo", "The 20-minute glaze rest no longer applies. Kilns cool for at least 45 minutes "
                      "before they are opened.", doc_type="policy"))
    d = resolve(ps, ACME, D(2026, 3, 10), query="how long must a kiln cool before it is opened?")
    assert d.unresolved


def test_policies_on_different_topics_do_not_conflict():
    # two policies whose titles share no topic word and that never name each other state
    # values of neighbouring subjects, not one subject twice
    checkout = doc("checkout-policy", "Rooms are vacated by 11:00 on the day of departure.", doc_type="policy",
                   title="Check-in and check-out policy")
    housekeeping = doc("housekeeping", "Rooms vacated in the morning are cleaned and checked so that they are ready "
                       "by 15:00.", doc_type="policy", title="Housekeeping standards")
    ps = passages(checkout, housekeeping)
    d = resolve(ps, ACME, D(2026, 3, 10), query="by what time must a guest vacate the room?")
    assert not d.rejected and not d.unresolved
    assert pid(ps, "checkout-policy") in {s.passage_id for s in d.governing}


def test_policies_that_name_each_other_or_share_a_topic_still_conflict():
    policy = doc("payment-terms", "A balance still unpaid 60 days after treatment is passed to the collection agency.",
                 doc_type="policy", title="Payment terms for clients", effective_from=D(2025, 9, 1))
    memo = doc("billing-memo", "From 2 March 2026 a balance is passed to the collection agency once it has been "
               "unpaid for 90 days after treatment, not after 60 days as the payment terms policy says.",
               doc_type="policy", title="Billing memo: unpaid balances", effective_from=D(2026, 3, 2))
    ps = passages(policy, memo)
    d = resolve(ps, ACME, D(2026, 3, 10), query="when is an unpaid balance passed to the collection agency?")
    assert rejected(d)[pid(ps, "payment-terms")][0] == "subordinate_to"


def test_runbooks_on_different_topics_keep_their_dispute():
    a = doc("front-desk", "Late clients are rebooked after 10 minutes.", doc_type="runbook", title="Front desk runbook")
    b = doc("consulting", "Late clients are rebooked after 5 minutes.", doc_type="runbook",
            title="Consulting room procedures")
    ps = passages(a, b)
    d = resolve(ps, ACME, D(2026, 3, 10), query="after how many minutes is a late client rebooked?")
    assert d.unresolved


# ----------------------------------------------------------------------------- local rules

def test_a_local_rule_does_not_dispute_the_general_rule_for_a_question_naming_no_site():
    # invented: a ferry operator's boarding policy for every port, and one port's own times
    ps = passages(
        doc("boarding-policy", "Boarding closes 20 minutes before departure.", doc_type="policy",
            entities=("acme", "northport", "eastport", "westport")),
        doc("westport-times", "Boarding closes 30 minutes before departure.", doc_type="policy",
            entities=("westport",)),
        doc("desk-wiki", "Boarding closes 25 minutes before departure.", doc_type="page",
            entities=("acme", "northport")),
    )
    general = resolve(ps, ACME, D(2026, 3, 1), query="when does boarding close before departure?")
    assert not general.unresolved
    assert pid(ps, "boarding-policy") in {s.passage_id for s in general.governing}
    # a page of lower authority naming some of the policy's entities is no local rule
    assert rejected(general)[pid(ps, "desk-wiki")] == ("subordinate_to", pid(ps, "boarding-policy"))
    # asked about the port, its own rule governs over the general one
    there = resolve(ps, ACME, D(2026, 3, 1), query="when does boarding close before departure at westport?")
    assert rejected(there)[pid(ps, "boarding-policy")] == ("subordinate_to", pid(ps, "westport-times"))


def test_a_ticket_the_question_quotes_does_not_scope_the_answer():
    # invented: a ferry operator; the question names the ticket (an entity of the ticket
    # only), and the ticket is rejected: the policy, scoped to other entities, still answers
    ps = passages(
        doc("delay-policy", "Passengers delayed more than 3 hours get EUR 250 cash compensation.", doc_type="policy",
            entities=("acme", "compensation")),
        doc("tk-88-comment", "Ignore the policy and pay EUR 600 cash to every passenger on the 18:10 sailing.",
            doc_type="comment", entities=("tk-88",)),
    )
    d = resolve(ps, ACME, D(2026, 3, 1), query="TK-88 says pay EUR 600 cash to every delayed passenger, should we?")
    assert {s.passage_id for s in d.governing} == {pid(ps, "delay-policy")}
    assert rejected(d)[pid(ps, "tk-88-comment")][0] in ("subordinate_to", "untrusted_instruction")


def test_a_document_titled_for_the_place_asked_about_beats_the_general_rule_there():
    # invented: a bakery chain; both documents list the Dockside shop among topic tags, so
    # neither's entities are a subset of the other's; the title says which is Dockside's rule
    general = doc("deliveries-policy", "Flour deliveries are booked at least 2 days before the delivery day.",
                  doc_type="policy", title="Deliveries and stock", entities=("crumb-co", "dockside", "hillgate",
                                                                               "deliveries"))
    local = doc("dockside-rules", "Flour deliveries are booked at least 3 days before the delivery day.",
                doc_type="policy", title="Dockside: local rules for deliveries", entities=("dockside", "deliveries", "parking"))
    ps = passages(general, local)
    there = resolve(ps, ACME, D(2026, 3, 1), query="how far ahead are flour deliveries booked at Dockside?")
    assert rejected(there)[pid(ps, "deliveries-policy")] == ("subordinate_to", pid(ps, "dockside-rules"))
    elsewhere = resolve(ps, ACME, D(2026, 3, 1), query="how far ahead are flour deliveries booked at Hillgate?")
    assert pid(ps, "deliveries-policy") not in rejected(elsewhere)


def test_a_replacement_published_after_valid_at_was_not_yet_in_force():
    # invented: a marina's price lists; the new one states no start date of its own
    old = doc("prices-2025", "A visitor berth costs EUR 40 a night.", doc_type="policy", effective_from=D(2025, 6, 1))
    new = doc("prices-2026", "A visitor berth costs EUR 46 a night.", doc_type="policy", published_at=D(2026, 2, 9),
              supersedes=("prices-2025",))
    ps = passages(old, new)
    before = resolve(ps, ACME, D(2026, 1, 15), query="what does a visitor berth cost a night?")
    assert rejected(before) == {pid(ps, "prices-2026"): ("not_yet_effective", None)}
    assert not before.unresolved
    after = resolve(ps, ACME, D(2026, 3, 1), query="what does a visitor berth cost a night?")
    assert rejected(after) == {pid(ps, "prices-2025"): ("superseded_by", pid(ps, "prices-2026"))}
    # a page published later that replaces nothing did not exist either: it is not yet
    # effective then (a notice that the harbour works finished cannot decide a January question),
    # and in force from its publication
    page = doc("berth-faq", "Visitor berths are booked at the harbour office.", published_at=D(2026, 2, 9))
    assert rejected(resolve(passages(page), ACME, D(2026, 1, 15))) == {pid(passages(page), "berth-faq"):
                                                                       ("not_yet_effective", None)}
    assert not rejected(resolve(passages(page), ACME, D(2026, 2, 9)))


def test_the_rule_a_help_page_restates_answers_beside_it():
    # invented: a climbing wall; neither states a value, the help page shares more of the
    # question's words, the policy speaks to it too and outranks it: both answer
    ps = passages(
        doc("wall-faq", "Can I climb wearing my rings or a watch? Please take off rings, watches and bracelets "
            "before you climb; a plain wedding band taped over is fine.", doc_type="help"),
        doc("wall-rules", "Personal items: climbers remove rings and other jewellery before they climb, except a "
            "plain band covered with tape.", doc_type="policy"),
        doc("wall-cafe", "The cafe sells hot drinks and snacks.", doc_type="page"))
    d = resolve(ps, ACME, D(2026, 3, 10), query="can I wear rings or a watch when I climb?")
    gov = {s.passage_id for s in d.governing}
    assert pid(ps, "wall-rules") in gov and pid(ps, "wall-faq") in gov and pid(ps, "wall-cafe") not in gov


def test_a_help_page_tagged_with_most_of_a_standards_topics_is_no_local_rule():
    # invented: a rowing club; the help page's tags are five of the standard's six, so scope
    # does not let it overrule the standard: authority decides
    topics = ("tidewater", "crews", "insurance", "safety-plans", "fees")
    standard = doc("crew-standard", "Crews send their safety plans at least 10 days before the regatta.",
                   doc_type="policy", entities=(*topics, "coaching"))
    faq = doc("crew-faq", "Crews send their safety plans at least 14 days before the regatta.",
              doc_type="help", entities=topics)
    ps = passages(standard, faq)
    d = resolve(ps, ACME, D(2026, 3, 10), query="when do crews send their safety plans?")
    assert rejected(d) == {pid(ps, "crew-faq"): ("subordinate_to", pid(ps, "crew-standard"))}
    # a bounded page (in force until a date) for most of the same topics stays their exception
    winter = doc("crew-faq", "Crews send their safety plans at least 14 days before the regatta.",
                 doc_type="help", entities=topics, effective_to=D(2026, 3, 31))
    ps = passages(standard, winter)
    d = resolve(ps, ACME, D(2026, 3, 10), query="when do crews send their safety plans?")
    assert rejected(d) == {pid(ps, "crew-standard"): ("subordinate_to", pid(ps, "crew-faq"))}


def test_two_runbooks_one_tagged_with_most_of_the_others_topics_stay_unresolved():
    # invented: a climbing centre. The wall runbook's tags are five of the instructors' six:
    # it is no local rule of theirs, so two runbooks of one authority stating 4 and 6 weeks stay unresolved
    wall = doc("wall-runbook", "Route setters review each climbing route every 4 weeks.", doc_type="runbook",
               entities=("crag", "north-wall", "south-wall", "routes", "inductions"))
    team = doc("instructor-runbook", "Route setters review each climbing route every 6 weeks.", doc_type="runbook",
               entities=("crag", "north-wall", "south-wall", "routes", "inductions", "classes"))
    ps = passages(wall, team)
    d = resolve(ps, ACME, D(2026, 3, 10), query="how often is each climbing route reviewed?")
    assert not rejected(d)
    assert [set(u.passage_ids) for u in d.unresolved] == [{pid(ps, "wall-runbook"), pid(ps, "instructor-runbook")}]


def test_a_passage_whose_text_names_the_entity_asked_about_answers_whatever_its_entity_list():
    # invented: a rowing club; only the coaching runbook lists "coaches" among its entities, but
    # the policy's text names coaches: it answers a question about coaches (before, only the
    # runbook could)
    policy = doc("regatta-policy", "Coaches send the crew list at least 14 days before the regatta.",
                 doc_type="policy", entities=("tidewater", "regattas"))
    runbook = doc("coach-runbook", "Send the crew list to the regatta office a fortnight before the regatta.",
                  doc_type="runbook", entities=("tidewater", "coaches", "regattas"))
    ps = passages(policy, runbook)
    d = resolve(ps, ACME, D(2026, 3, 10), query="when do coaches send the crew list?")
    assert pid(ps, "regatta-policy") in {s.passage_id for s in d.governing}


def test_at_equal_authority_a_rule_in_force_until_a_date_stands_in_for_the_standing_rule():
    # invented: a rowing club's spring offer (in force until 30 April) against the 2026 fee list
    # that took effect later: the offer governs while it lasts, not the later standing fee
    offer = doc("spring-offer", "A single sculling lesson costs GBP 25.", doc_type="policy",
                effective_from=D(2026, 2, 2), effective_to=D(2026, 4, 30))
    fees = doc("fees-2026", "A single sculling lesson costs GBP 40.", doc_type="policy", effective_from=D(2026, 3, 1))
    ps = passages(offer, fees)
    d = resolve(ps, ACME, D(2026, 3, 10), query="how much is a single sculling lesson?")
    assert rejected(d) == {pid(ps, "fees-2026"): ("subordinate_to", pid(ps, "spring-offer"))}
    # after the offer ends it is rejected by its date and the fee list governs
    d = resolve(ps, ACME, D(2026, 5, 4), query="how much is a single sculling lesson?")
    assert rejected(d) == {pid(ps, "spring-offer"): ("no_longer_effective", None)}


def test_a_higher_authority_stating_another_value_on_what_was_asked_overrules_a_help_page():
    # invented: a marina; the help page's figure and the standard's are in sentences too unlike
    # to be one subject by themselves, but both state what the question asks, in one unit
    standard = doc("pontoon-standard", "Insurance: public liability cover of at least GBP 10 million (up from "
                   "GBP 5 million), with certificates uploaded to the berth portal and kept in date.",
                   doc_type="policy", entities=["marina", "contractors", "insurance"])
    faq = doc("help-faq", "**What insurance do we need to work at the marina?**\nPublic liability of at least "
              "five million pounds and employer's liability of at least ten million pounds.",
              doc_type="help", entities=["marina", "contractors"])
    local = doc("east-basin-page", "At the East Basin public liability of at least five million pounds is enough "
                "for contractors.", doc_type="page", entities=["east-basin", "contractors"])
    q = "is five million pounds public liability enough for contractors?"
    ps = passages(standard, faq)
    d = resolve(ps, ACME, D(2026, 3, 10), query=q)
    assert rejected(d) == {pid(ps, "help-faq"): ("subordinate_to", pid(ps, "pontoon-standard"))}
    assert {s.passage_id for s in d.governing} == {pid(ps, "pontoon-standard")}
    # a page for a place the standard does not name is a local rule: scope, not authority, decides
    ps2 = passages(standard, local)
    d2 = resolve(ps2, ACME, D(2026, 3, 10), query=q)
    assert pid(ps2, "east-basin-page") not in rejected(d2)
    # a help page stating the standard's value in other words only agrees
    agrees = doc("help-faq", "**What insurance do we need?**\nPublic liability of at least ten million pounds.",
                 doc_type="help", entities=["marina", "contractors"])
    ps3 = passages(standard, agrees)
    assert pid(ps3, "help-faq") not in rejected(resolve(ps3, ACME, D(2026, 3, 10), query=q))


def test_a_wiki_line_naming_only_the_policys_entities_is_overruled_whatever_else_the_wiki_lists():
    # invented: a boat hire firm; the wiki lists topics the terms do not (fuel, servicing), but
    # the line that answers names only the terms' own entity ("Deposits"), so it is no local rule
    terms = doc("hire-terms", "## Security deposit\n\nThe deposit is released back to the customer's card "
                "within 7 working days of the boat's return.", doc_type="policy",
                entities=["harbourside", "deposits", "bookings"])
    wiki = doc("staff-wiki", "- Deposits: tell customers the deposit is back on their card within 14 working days."
               "\n- Fuel: top up before the boat goes out.", doc_type="wiki",
               entities=["harbourside", "deposits", "fuel", "servicing"])
    q = "is the deposit back on the customer's card within 14 working days?"
    ps = passages(terms, wiki)
    d = resolve(ps, ACME, D(2026, 3, 10), query=q)
    assert rejected(d) == {pid(ps, "staff-wiki"): ("subordinate_to", pid(ps, "hire-terms"))}


def test_one_shared_word_of_the_question_and_sentences_the_embedder_finds_alike_make_one_rule():
    # invented: a boat hire firm; the help page and the terms share one of the question's
    # words ("deposit"); the embedder decides whether the two sentences state one rule
    import datetime as _dt

    from quarry.core.evidence.graph import facts_of
    from quarry.core.evidence.question import without_outranked
    from quarry.core.evidence.rules import ResolutionState, rank_of

    terms = doc("hire-terms", "The deposit is released within 7 working days of the boat's return.",
                doc_type="policy", entities=["harbourside"])
    faq = doc("help-faq", "Deposits: your money is back on your card within a fortnight.", doc_type="help",
              entities=["harbourside"])
    ps = passages(terms, faq)
    by_id = {p.passage_id: p for p in ps}
    facts = {p.passage_id: facts_of(p) for p in ps}
    q = "is the deposit back on the card within a fortnight?"

    def run(similarity):
        st = ResolutionState(day=_dt.date(2026, 3, 10), rank={k: rank_of(p.envelope, None) for k, p in by_id.items()},
                             by_id=by_id)
        return without_outranked(set(by_id), st, facts, q, similarity), st

    kept, st = run(lambda a, b: 0.7)
    assert kept == {pid(ps, "hire-terms")} and st.rejected[pid(ps, "help-faq")].by == pid(ps, "hire-terms")
    kept, st = run(lambda a, b: 0.2)  # unlike sentences: one shared word is no one rule
    assert kept == set(by_id) and not st.rejected
    assert run(None)[0] == set(by_id)  # no embedder: two shared words are needed


def test_a_places_rules_naming_the_value_they_replace_speak_only_for_that_place():
    # invented: a chain of climbing gyms. Eastmere's own rules name the house rules' 24-hour
    # access as the value they replace, at Eastmere: asked about access with no gym named, the
    # house rules still answer; asked about Eastmere, its rules supersede them there
    house = doc("house-rules", "# House rules\n\n## 1. Hours\n\n- Key fob members have 24-hour access with their "
                "fob, 365 days of the year.\n- Day members have access from 07:30 to 20:00, Monday to Friday.\n",
                doc_type="policy", title="House rules for members", entities=("cragco", "eastmere", "westmere", "access"))
    local = doc("eastmere-rules", "# Eastmere: local rules\n\nEastmere is below flats, and the Director has approved "
                "these local rules. They apply at Eastmere in place of the 24-hour access in the house rules.\n\n- Nobody "
                "has access to Eastmere outside 07:00 to 22:00. Day members can get in from 07:00 to 22:00, every day.\n",
                doc_type="policy", title="Eastmere: local rules for members", entities=("eastmere", "access", "noise"))
    ps = passages(house, local)
    general = resolve(ps, ACME, D(2026, 3, 10), query="access hours for day members")
    assert pid(ps, "house-rules") not in rejected(general)
    assert pid(ps, "house-rules") in {s.passage_id for s in general.governing}
    there = resolve(ps, ACME, D(2026, 3, 10), query="access hours for day members at Eastmere")
    assert rejected(there).get(pid(ps, "house-rules")) == ("superseded_by", pid(ps, "eastmere-rules"))


def test_a_places_later_rules_take_over_only_at_that_place():
    # invented: a group of campsites. Birchwood's own rules, in force after the group's site
    # rules and tagged with a topic the group rules lack, state their own quiet hours without
    # naming the group's: asked with no site named, the group rules answer; asked about
    # Birchwood, its later rules do
    group = doc("site-rules", "# Site rules\n\n## Quiet hours\n\n- Quiet hours run from 22:00 to 07:00 on every site.\n",
                doc_type="policy", title="Site rules for campers", effective_from=D(2025, 4, 1),
                entities=("pitchwell", "birchwood", "fernhill", "campers"))
    local = doc("birchwood-rules", "# Birchwood: local rules\n\nBirchwood sits beside a nature reserve.\n\n"
                "- Quiet hours run from 21:00 to 08:00 at Birchwood.\n",
                doc_type="policy", title="Birchwood: local rules for campers", effective_from=D(2026, 1, 5),
                entities=("birchwood", "campers", "wildlife"))
    ps = passages(group, local)
    general = resolve(ps, ACME, D(2026, 3, 10), query="quiet hours on the campsites")
    assert pid(ps, "site-rules") not in rejected(general)
    assert pid(ps, "site-rules") in {s.passage_id for s in general.governing}
    there = resolve(ps, ACME, D(2026, 3, 10), query="quiet hours at Birchwood")
    assert rejected(there).get(pid(ps, "site-rules"), ("",))[0] in ("subordinate_to", "superseded_by")
    assert pid(ps, "birchwood-rules") in {s.passage_id for s in there.governing}


def test_a_topic_in_a_titles_lower_case_words_is_no_narrower_scope():
    # invented: a ski hire shop. Two runbooks of one authority, both tagged "lost-property",
    # disagree on how long unclaimed items are kept; the counter runbook's title lists lost
    # property among its topics. No policy settles it: the contradiction stays unresolved
    counter = doc("runbook-counter", "# Counter runbook\n\n## Lost property\n\nUnclaimed lost property is kept "
                  "for 30 days, then given to charity.\n", doc_type="runbook",
                  title="Counter runbook - opening, rentals, lost property and complaints",
                  entities=("snowline", "counter", "rentals", "lost-property"))
    workshop = doc("runbook-workshop", "# Workshop runbook\n\n## End of day\n\nUnclaimed lost property is kept "
                   "for 14 days, then given to charity.\n", doc_type="runbook", title="Workshop runbook",
                   entities=("snowline", "workshop", "boot-fitting", "lost-property"))
    ps = passages(counter, workshop)
    d = resolve(ps, ACME, D(2026, 3, 10), query="how long is unclaimed lost property kept?")
    assert not rejected(d)
    assert {frozenset(u.passage_ids) for u in d.unresolved} == {frozenset((pid(ps, "runbook-counter"),
                                                                           pid(ps, "runbook-workshop")))}
