"""Session 26: a memo withdrawing one rule of a document it names supersedes the passage
stating that rule, for a question about it, and nothing else of the document
(:func:`quarry.core.evidence.disputes.withdrawn_rules`; invented: an allotment society's
plot handbook and its committee's memo on bonfires)."""

from __future__ import annotations

import datetime as dt

import pytest

from quarry.core.evidence.resolve import resolve
from quarry.core.ingest.pipeline import prepare
from quarry.core.records import Principal, SourceDocument

pytestmark = pytest.mark.unit

STAFF = Principal(tenant="plotters", subject="u1", groups=frozenset({"all-staff"}))
RULES = ("# Allotment plot handbook\n\n## 1. Keeping a plot\n\nEach plot is worked and kept clear of litter all year.\n\n"
         "## 2. Fires and water\n\nPlot holders may light a bonfire of dry garden waste on weekday evenings. "
         "Hosepipes are never used on the site; plot holders water from the butts.\n")
MEMO = ("# Committee memo: bonfires\n\nNeighbours have complained about smoke. The rule in section {n} of the "
        "allotment plot handbook that lets plot holders light a bonfire of dry garden waste is withdrawn with effect "
        "from 2 March 2026. From that date garden waste goes in the green skip by the gate. Nothing else in the "
        "allotment plot handbook changes.\n")
BONFIRE = "can plot holders light a bonfire on their plot?"
HOSE = "can plot holders use a hosepipe on the site?"


def _decide(query: str, day: dt.date, section: int = 2, memo_type: str = "memo"):
    docs = [SourceDocument(doc_id="plotters-plot-rules", tenant="plotters", acl=("all-staff",), doc_type="policy",
                           title="Allotment plot handbook", text=RULES, effective_from=dt.date(2025, 4, 1)),
            SourceDocument(doc_id="plotters-memo-bonfires", tenant="plotters", acl=("all-staff",), doc_type=memo_type,
                           authority="policy" if memo_type == "memo" else None, title="Committee memo: bonfires",
                           text=MEMO.format(n=section), effective_from=dt.date(2026, 3, 2))]
    ps, _ = prepare(docs)
    d = resolve(ps, STAFF, day, query=query)
    rules = next(p.passage_id for p in ps if p.doc_id == "plotters-plot-rules" and "fires" in p.passage_id)
    memo = next(p.passage_id for p in ps if p.doc_id == "plotters-memo-bonfires")
    return d, rules, memo


def test_a_memo_withdrawing_the_rule_asked_about_supersedes_it_and_answers():
    d, rules, memo = _decide(BONFIRE, dt.date(2026, 3, 10))
    rejected = {r.passage_id: (r.reason, r.by) for r in d.rejected}
    assert rejected.get(rules) == ("superseded_by", memo)
    assert memo in {g.passage_id for g in d.governing}
    detail = next(r.detail for r in d.rejected if r.passage_id == rules)
    assert "garden" not in detail and "light" not in detail  # ids and codes only, never text


def test_the_rest_of_the_document_stands():
    # asked about another rule of the same section, the rules answer
    d, rules, memo = _decide(HOSE, dt.date(2026, 3, 10))
    assert rules not in {r.passage_id for r in d.rejected}
    assert rules in {g.passage_id for g in d.governing}


def test_nothing_is_withdrawn_before_the_memo_another_section_or_from_a_lower_authority():
    for kw in ({"day": dt.date(2026, 2, 10)}, {"day": dt.date(2026, 3, 10), "section": 1},
               {"day": dt.date(2026, 3, 10), "memo_type": "page"}):
        d, rules, memo = _decide(BONFIRE, **kw)
        assert rules not in {r.passage_id for r in d.rejected if r.reason == "superseded_by"}, kw


def test_a_places_local_rules_quoting_the_handbooks_title_withdraw_nothing_elsewhere():
    # invented: the Eastfield site's own rules replace the handbook's bonfire rule there only;
    # their title names a topic tag, "plots", and they quote the handbook's title ("the Plots and
    # bonfires handbook"), which capitalises it: a question about plots asks about no place of theirs
    rules = RULES.replace("# Allotment plot handbook", "# Plots and bonfires handbook")
    local = ("# Eastfield site: local rules for plots\n\nEastfield backs onto houses. These local rules apply at Eastfield "
             "from 2 March 2026, in place of the bonfire rule in the Plots and bonfires handbook: plot holders "
             "do not light a bonfire of dry garden waste at Eastfield, and the rule that lets them is withdrawn "
             "at Eastfield.\n")
    docs = [SourceDocument(doc_id="plotters-plot-rules", tenant="plotters", acl=("all-staff",), doc_type="policy",
                           title="Plots and bonfires handbook", text=rules, entities=("plotters", "eastfield", "plots"),
                           effective_from=dt.date(2025, 4, 1)),
            SourceDocument(doc_id="plotters-eastfield-rules", tenant="plotters", acl=("all-staff",),
                           doc_type="policy", title="Eastfield site: local rules for plots", text=local,
                           entities=("eastfield", "plots"), effective_from=dt.date(2026, 3, 2))]
    ps, _ = prepare(docs)
    handbook = next(p.passage_id for p in ps if p.doc_id == "plotters-plot-rules" and "fires" in p.passage_id)
    d = resolve(ps, STAFF, dt.date(2026, 3, 10), query="can plot holders light a bonfire on their plot?")
    assert handbook not in {r.passage_id for r in d.rejected if r.reason == "superseded_by"}
    there = resolve(ps, STAFF, dt.date(2026, 3, 10), query="can plot holders light a bonfire on their plot at Eastfield?")
    assert handbook in {r.passage_id for r in there.rejected}


FAQ = ("# Plot holders' questions\n\nCan I have a bonfire? Yes, plot holders can light a bonfire of dry garden waste "
       "on weekday evenings.\n\nCan I bring my dog? Yes, on a lead.\n")


def _with_faq(query: str, day: dt.date):
    docs = [SourceDocument(doc_id="plotters-plot-rules", tenant="plotters", acl=("all-staff",), doc_type="policy",
                           title="Allotment plot handbook", text=RULES, effective_from=dt.date(2025, 4, 1)),
            SourceDocument(doc_id="plotters-memo-bonfires", tenant="plotters", acl=("all-staff",), doc_type="memo",
                           authority="policy", title="Committee memo: bonfires", text=MEMO.format(n=2),
                           effective_from=dt.date(2026, 3, 2)),
            SourceDocument(doc_id="plotters-help-faq", tenant="plotters", acl=("all-staff",), doc_type="help",
                           title="Plot holders' questions", text=FAQ)]
    ps, _ = prepare(docs)
    d = resolve(ps, STAFF, day, query=query)
    faq = next(p.passage_id for p in ps if p.doc_id == "plotters-help-faq")
    memo = next(p.passage_id for p in ps if p.doc_id == "plotters-memo-bonfires")
    return {r.passage_id: (r.reason, r.by) for r in d.rejected}, faq, memo


def test_a_help_page_still_saying_the_withdrawn_rule_is_outranked_by_the_memo():
    rejected, faq, memo = _with_faq(BONFIRE, dt.date(2026, 3, 10))
    assert rejected.get(faq) == ("subordinate_to", memo)
    # before the memo, or asked about something else, the help page stands
    for query, day in ((BONFIRE, dt.date(2026, 2, 10)), ("can I bring my dog to the plot?", dt.date(2026, 3, 10))):
        rejected, faq, _ = _with_faq(query, day)
        assert faq not in rejected


def test_a_sentence_sharing_only_a_number_and_a_period_with_the_withdrawn_rule_stands():
    # invented: a swim school withdraws "lessons are booked 48 hours ahead"; a help page's
    # "stay out of the pool until 48 hours have passed since a stomach bug" is another rule
    rules = "# Swim school terms\n\n## 2. Booking\n\nParents book each lesson at least 48 hours ahead at reception.\n"
    memo = ("# Memo: booking\n\nThe rule in section 2 of the swim school terms that parents book each lesson at least "
            "48 hours ahead is withdrawn with effect from 2 March 2026. Lessons can be booked up to the day before.\n")
    help_ = "# Parents' questions\n\nMy child was sick. Keep them out of the pool until 48 hours have passed since the bug.\n"
    docs = [SourceDocument(doc_id="plotters-swim-terms", tenant="plotters", acl=("all-staff",), doc_type="policy",
                           title="Swim school terms", text=rules, effective_from=dt.date(2025, 4, 1)),
            SourceDocument(doc_id="plotters-memo-booking", tenant="plotters", acl=("all-staff",), doc_type="memo",
                           authority="policy", title="Memo: booking", text=memo, effective_from=dt.date(2026, 3, 2)),
            SourceDocument(doc_id="plotters-help-parents", tenant="plotters", acl=("all-staff",), doc_type="help",
                           title="Parents' questions", text=help_)]
    ps, _ = prepare(docs)
    d = resolve(ps, STAFF, dt.date(2026, 3, 10), query="how long after a stomach bug can my child swim, 48 hours?")
    assert next(p.passage_id for p in ps if p.doc_id == "plotters-help-parents") not in {r.passage_id for r in d.rejected}
