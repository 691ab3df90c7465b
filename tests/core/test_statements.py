"""core.statements: value statements from a parse, and the conflict rule over them.

Loads the spaCy pipeline once per session (a few seconds); everything else is pure."""

from functools import partial
from pathlib import Path

import pytest

from quarry.core.evidence.conflict import conflict, conflicts
from quarry.core.evidence.statement import Statement
from quarry.core.evidence.statements import statements as statements_of
from quarry.core.evidence.subjects import subject_keys

pytestmark = pytest.mark.unit

statements = partial(statements_of, tenant="acme")  # the memo is per tenant

CORPUS = Path(__file__).resolve().parents[2] / "quarry" / "sample_corpus" / "acme"


def clash(a: str, b: str, ea=(), eb=()) -> bool:
    return conflict(statements(a, ea), statements(b, eb)) is not None


def body(path: Path) -> str:
    return path.read_text().split("---", 2)[2]


def test_brief_examples():
    assert clash("Passwords expire after 90 days.", "We rotate passwords every 180 days.")
    assert not clash("Refunds are issued within 5 business days.",
                     "Support tickets are answered within 2 business days.")


def test_a_statement_names_its_subject_predicate_and_value():
    (s,) = statements("Passwords expire after 90 days.")
    assert (s.subject, s.predicate, s.value, s.unit, s.magnitude) == (("password",), "expire", "90 day", "duration", 90.0)
    assert "password" in subject_keys(s) or "expire" in subject_keys(s)


def test_units_are_normalised():
    assert not clash("The free trial lasts 2 weeks.", "The free trial lasts 14 days.")
    assert clash("The free trial lasts 3 weeks.", "The free trial lasts 30 days.")
    assert not clash("Access tokens expire after 24 hours.", "Access tokens expire after 1 day.")
    assert not clash("Each chargeback costs €15.", "We charge EUR 15 for each chargeback.")
    assert clash("Each chargeback costs €15.", "We charge EUR 20 for each chargeback.")


@pytest.mark.parametrize("text, value, magnitude", [
    ("Contractors carry public liability cover of GBP 10m.", "GBP 1e+07", 1e7),
    ("Contractors carry public liability cover of £2.5 million.", "GBP 2.5e+06", 2.5e6),
    ("Contractors carry public liability cover of five million pounds.", "GBP 5e+06", 5e6),
    ("The security deposit is USD 40k.", "USD 40000", 4e4),
    ("The security deposit is twenty-five euros.", "EUR 25", 25.0),
])
def test_an_amount_and_its_scale(text, value, magnitude):
    (s,) = statements(text)
    assert (s.value, s.magnitude) == (value, magnitude) and s.unit.startswith("currency:")


def test_a_number_word_after_a_currency_code_is_no_amount():
    assert statements("Did the GBP cutoff change as well, or only the EUR one?") == ()


def test_scaled_amounts_compare_across_notations():
    assert not clash("Public liability cover is at least GBP 10m.", "Public liability cover is at least ten million "
                     "pounds.")
    assert clash("Public liability cover is at least GBP 10m.", "Public liability cover is at least five million "
                 "pounds.")


def test_a_price_per_measured_quantity_is_no_flat_charge():
    # a flat fee and a price per kWh (or per kg) never state one value; a count left unsaid may
    assert not clash("A replacement access card costs GBP 15.", "Charging costs GBP 0.40 per kWh.")
    assert not clash("Excess baggage costs EUR 20.", "Excess baggage costs EUR 12 per kg.")
    assert clash("The licence costs EUR 50,000 per tenant.", "The licence costs EUR 20,000.")


def test_clock_times():
    assert clash("The settlement cutoff is 15:00.", "The settlement cutoff is 16:00.")
    assert not clash("Phone support closes at 17:00.", "Phone support closes at 5 p.m.")
    assert clash("Phone support closes at 17:00.", "Phone support closes at 6 pm.")
    (s,) = statements("The EUR cutoff is 15:00 CET.")
    assert (s.unit, s.value, s.magnitude) == ("time_of_day", "15:00", 900.0)
    assert statements("Phone support is closed on Monday.") == ()
    assert not clash("The EUR cutoff is 15:00 CET.", "The EUR cutoff moves on Monday.")


@pytest.mark.parametrize("text", [
    "The invoice was issued on 12 March 2025.",
    "Parental leave was extended in 2024.",
    "We support SAML 2.0 for single sign-on.",
    "Version 2.3.1 fixes the export bug.",
    "Batch E-4471 was re-settled.",
    "Host acme-9 was drained.",
    "1. Stop the reconciliation job.",
    "The maintenance window is on 2026-01-15.",
    "Ticket 482 was escalated to tier 2.",
    # a period after "of each / every" says which day, not how long
    "Salaries are paid on the last working day of each month.",
    "Rotas are published on the first Monday of every week.",
])
def test_dates_years_versions_and_ids_are_not_statements(text):
    assert statements(text) == ()


def test_scope():
    assert not clash("Acme uses a 16:00 settlement cutoff.", "Globex uses a 17:00 settlement cutoff.",
                     ("acme",), ("globex",))
    assert not clash("Acme uses a 16:00 settlement cutoff.", "Globex uses a 17:00 settlement cutoff.")
    assert clash("All tenants use the 15:00 settlement cutoff.", "Acme uses a 16:00 settlement cutoff.",
                 (), ("acme",))
    (s,) = statements("Acme's cutoff is 16:00.", ["Acme"])
    assert s.scope == ("acme",)


def test_sample_corpus_acme_cutoff():
    policy = statements(body(CORPUS / "policies" / "settlement-policy-v3.md"), ["acme", "globex", "initech"])
    ticket = statements(body(CORPUS / "tickets" / "ticket-482-comment-17.md"), ["acme"])
    runbook = statements(body(CORPUS / "runbooks" / "settlement-runbook-v2.md"), ["acme"])
    got = conflict(policy, ticket)
    assert got is not None and {got[0].value, got[1].value} == {"15:00", "16:00"}
    got = conflict(policy, runbook)
    assert got is not None and {got[0].value, got[1].value} == {"15:00", "16:00"}


def test_json_round_trip():
    for s in statements("Acme tenants use the 16:00 EUR cutoff; the Pro plan costs €40 per month.", ["acme"]):
        assert Statement.from_json(s.to_json()) == s
    with pytest.raises(ValueError):
        Statement.from_json('{"subject": []}')


def test_conflicts_needs_compatible_units():
    a, = statements("The Team plan includes 10 seats.")
    b, = statements("The Team plan includes 10 projects.")
    assert a.unit == "count:seat" and not conflicts(a, b)


def test_import_of_core_does_not_load_spacy():
    import subprocess
    import sys

    code = ("import sys, quarry.core, quarry.core.evidence.statements, quarry.core.evidence.resolve\n"
            "print(','.join(m for m in ('spacy', 'thinc', 'torch', 'quantulum3', 'pint', 'dateparser') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_units_come_from_pint_for_the_word_after_the_number():
    (s,) = statements("Each workspace gets 1 TB of storage.")
    assert (s.unit, s.magnitude) == ("[information]", 1e12)
    assert not clash("Each workspace gets 1 TB of storage.", "Workspaces get 1000 GB of storage.")
    assert clash("Each workspace gets 100 GB of storage.", "Workspaces are limited to 50 GB of storage.")
    assert not clash("Requests time out after 30 seconds.", "Requests time out after half a minute.")
    assert clash("Samples are stored at -80 °C.", "Samples are stored at -20 °C.")


def test_noun_and_verb_forms_of_one_predicate():
    assert clash("The probation period is 6 months.", "New hires are on probation for 3 months.")
    assert clash("The webhook retry interval is 30 minutes.", "Webhooks are retried every 10 minutes.")
    assert clash("The maximum upload size is 25 MB.", "Uploads are limited to 100 MB.")
    assert clash("Invoices are payable within 30 days.", "Invoices must be paid within 45 days of receipt.")
    assert clash("Card payments settle within 2 business days.", "Card payments take 3 business days to settle.")


def test_a_verb_of_its_own_or_a_qualifier_of_its_own_is_another_subject():
    assert not clash("Backups run every 6 hours.", "Backups are retained for 90 days.")
    assert not clash("The minimum order value is $25.", "Orders below USD 20 are not accepted.")
    assert clash("Orders over €50 ship for free.", "Free shipping applies to orders over EUR 60.")
    assert not clash("Employees get 25 vacation days per year.", "Employees get 10 sick days per year.")
    assert not clash("Standard shipping takes 3-5 business days.", "Express shipping takes 1 business day.")


def test_capitalised_plural_subject_is_not_a_party():
    (s,) = statements("Webhooks are retried every 10 minutes.")
    assert s.scope == () and s.subject == ("webhooks",)


def test_sentences_without_a_free_standing_number_are_not_parsed():
    from quarry.core.evidence.sentences import may_state_value

    assert not may_state_value("Expression of p53 and IL-23 in PC12 cells rose [9].")
    assert may_state_value("New accounts get a 30-day free trial.")
    assert may_state_value("Each chargeback costs €15.")
    assert statements("Expression of p53 and IL-23 in PC12 cells rose [9].") == ()


# ----------------------------------------------------------------------------- rules of statements3

def test_a_qualifier_after_the_unit_keeps_the_statement():
    (s,) = statements("Packages may weigh at most 30 kg gross per package.")
    assert (s.predicate, s.unit, s.magnitude) == ("limit", "[mass]/package", 30.0)
    assert statements("Each pallet may weigh at most 800 kg net.")


def test_up_to_and_at_most_are_a_limit():
    (s,) = statements("Cartons of lithium batteries can go up to 35 kg each.")
    assert s.predicate == "limit"
    assert clash("Cartons of lithium batteries can go up to 35 kg each.",
                 "Packages may weigh at most 30 kg gross per package.")
    assert clash("Failed webhooks are retried up to 5 times.", "Failed webhooks are retried at most 8 times.")
    assert clash("Uploaded files can reach up to 50 MB.", "Uploaded files are limited to 20 MB.")


def test_a_discourse_adverb_is_not_the_predicate():
    (s,) = statements("The meal limit is actually GBP 80 per day.")
    assert s.predicate == "limit" and "meal" in s.subject
    assert clash("The download limit is actually 5 GB per day.", "The download limit is 2 GB per day.")


def test_an_imperative_object_is_the_subject_and_a_before_clause_a_reference_point():
    (a,) = statements("Book the slot in the customer portal at least 24 hours before arrival.")
    (b,) = statements("Book your slot at least 48 hours before the vehicle arrives.")
    assert "slot" in a.subject and b.subject == ("slot",) and b.predicate == "book"
    assert conflicts(a, b)
    assert clash("Cancel your appointment at least 24 hours before the clinic opens.",
                 "Cancel your appointment at least 48 hours before it starts.")


def test_table_rows_read_their_label_and_header():
    table = "| Item | Limit |\n| --- | --- |\n| Meals while travelling | GBP 35 per day |\n| Hotel, London | GBP 210 per night |\n"
    got = statements(table)
    assert [(s.predicate, s.value.split("/")[0]) for s in got] == [("limit", "GBP 35"), ("limit", "GBP 210")]
    assert "meal" in got[0].subject and "hotel" in got[1].subject
    assert clash("The meal limit is GBP 80 per day for everyone.", table)
    benefits = "| Benefit | What you get |\n| --- | --- |\n| Parental leave | 18 weeks at full pay |\n"
    assert clash("Staff get 16 weeks of fully paid parental leave.", benefits)
    plans = "| Plan | Price |\n| --- | --- |\n| Team plan | EUR 12 per seat |\n| Business plan | EUR 20 per seat |\n"
    assert not clash("The Team plan costs EUR 12 per seat.", plans) or conflict(
        statements("The Team plan costs EUR 12 per seat."), statements(plans))[1].value != "EUR 12/seat"


def test_parenthetical_equivalents_and_distinct_allowances_do_not_conflict():
    policy = "| Item | Limit |\n| --- | --- |\n| Meals while travelling | GBP 35 per day (EUR 40, USD 45) |\n"
    assert [s.value for s in statements(policy)] == ["GBP 35/day"]
    assert conflict(statements(policy), statements(policy)) is None
    reloc = "Relocation support is capped at GBP 5,000 per move (EUR 5,800 in Porto, USD 6,300 in Austin)."
    got = statements(reloc, ["porto", "austin"])
    assert [(s.value, s.scope) for s in got] == [("GBP 5000/move", ()), ("EUR 5800", ("porto",)),
                                                 ("USD 6300", ("austin",))]
    assert conflict(got, got) is None
    wellbeing = "Every employee may claim a wellbeing allowance of GBP 150 (EUR 175, USD 190) for gym memberships."
    assert [s.value for s in statements(wellbeing)] == ["GBP 150"]
    assert not clash(wellbeing, reloc, (), ["porto", "austin"])
    assert not clash(wellbeing, policy)
    assert not clash("Each lab may order reagents up to USD 500 (EUR 460) per month.",
                     "The conference allowance is USD 1,200 (EUR 1,100) per year.")
    assert not clash("Samples are shipped at most 200 miles (320 km).", "Samples are shipped at most 200 miles.")


def test_a_day_of_the_month_is_a_deadline_value():
    policy = ("Sites on the unified payroll platform close monthly payroll inputs (new starters, leavers, overtime) "
              "on the 18th of the month at 17:00 site time.")
    ticket = "Porto keeps the 22nd of the month as its payroll input cutoff until the migration is finished."
    assert clash(policy, ticket, (), ["porto"])
    assert clash("Timesheets must be submitted by the 5th of each month.",
                 "The timesheet submission deadline is the 3rd of the month.")
    assert not clash("Salaries are paid on the 25th of each month.", "Salaries are paid on the 28th of each month.")


def test_a_plural_noun_tagged_as_a_verb_and_for_the_duration_of():
    a = "Returns are inspected within 3 working days of receipt."
    b = "For the duration of the WMS migration, Rotterdam inspects returns within 7 working days of receipt."
    assert clash(a, b, (), ["rotterdam"])


def test_dev_corpus_pairs_conflict():
    from quarry.core.ingest.sources import load_documents

    root = Path(__file__).resolve().parents[2]
    docs = {}
    for c in ("eval/corpora/hr", "eval/corpora/logistics"):
        if (root / c).is_dir():
            docs.update({d.doc_id: d for d in load_documents(str(root / c))[0]})
    if not docs:
        pytest.skip("dev corpora not present")

    def st(n):
        return statements(docs[n].text, docs[n].entities)

    for a, b in [("brightpath-help-parental-leave", "brightpath-help-benefits-overview"),
                 ("brightpath-ticket-hr-377-comment-2", "brightpath-expenses-policy"),
                 ("brightpath-payroll-calendar-policy", "brightpath-ticket-hr-311-comment-4"),
                 ("tidewater-ticket-ops-915-comment-1", "tidewater-dangerous-goods-policy"),
                 ("tidewater-wiki-packing-tips", "tidewater-dangerous-goods-policy"),
                 ("tidewater-returns-policy", "tidewater-ticket-ops-902-comment-3"),
                 ("tidewater-help-booking-slots", "tidewater-help-inbound-faq")]:
        assert conflict(st(a), st(b)) is not None, (a, b)
    names = ["brightpath-expenses-policy", "brightpath-relocation-policy", "brightpath-wellbeing-allowance-2025"]
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert conflict(st(a), st(b)) is None, (a, b)


def test_number_words_periods_and_how_often():
    (s,) = statements("Claims must be filed within ninety days.")
    assert (s.unit, s.magnitude) == ("duration", 90.0)
    (s,) = statements("Staff get one hundred and twenty hours of leave.")
    assert s.magnitude == 5.0
    (s,) = statements("Sessions expire after an hour.")
    assert s.magnitude * 24 == 1.0
    (s,) = statements("Calls are returned within a quarter of an hour.")
    assert abs(s.magnitude * 24 * 60 - 15) < 1e-9
    (s,) = statements("Desks close three quarters of an hour before departure.")  # not 3 "quarter" (a mass)
    assert s.unit == "duration" and abs(s.magnitude * 24 * 60 - 45) < 1e-9
    (s,) = statements("Passwords rotate twice a year.")
    assert s.unit == "duration" and abs(s.magnitude - 365.25 / 2) < 1e-9
    assert not clash("Passwords rotate twice a year.", "Passwords rotate every 6 months.")
    assert clash("Passwords rotate twice a year.", "Passwords rotate every 3 months.")
    (s,) = statements("Sidewalk café licences cost USD 425 annually.")
    assert s.unit == "currency:USD/duration"
    assert statements("The daily payout limit is EUR 50,000.")[0].unit == "currency:EUR"  # "daily" qualifies


def test_a_value_without_an_anchor_still_states_something():
    (s,) = statements("Up to 5 unused vacation days carry over.")
    assert s.subject == () and s.predicate == "" and "vacation" in s.context and "#" in s.clause


def test_context_overlap_and_what_tells_subjects_apart():
    assert clash("Line faults are repaired within 24 hours.", "Line faults are repaired within 48 hours by engineers.")
    assert not clash("In the Old Town conservation area, signs may not exceed 0.5 square metres.",
                     "In the Harbour district, signs may not exceed 2 square metres.")
    assert not clash("The maximum acceptable defect rate on line 3 is 0.5%.",
                     "The maximum acceptable defect rate on line 7 is 1.2%.")
    assert not clash("Non-conformance reports must be raised within 24 hours of detection.",
                     "Non-conformance reports must be closed within 30 days.")


def test_an_embedder_similarity_is_optional_and_bounded_by_contrasts():
    a, = statements("Audit logs are retained for 1 year.")
    b, = statements("Application logs are retained for 30 days.")
    assert not conflicts(a, b, similarity=lambda x, y: 1.0)  # their subjects contrast, whatever the embedder says
    c, = statements("Check-in at the hotel begins at 15:00.")
    d, = statements("Guests can check in from 2 pm.")
    # both times are starts ("begins at", "from"): one subject without the embedder's help, and
    # with it (the packaged model puts these sentences at 0.73); an embedder finding them
    # unrelated (below Thresholds.unrelated) vetoes what the words suggest
    assert conflicts(c, d) and conflicts(c, d, similarity=lambda x, y: 0.5)
    assert not conflicts(c, d, similarity=lambda x, y: 0.1)


ADD_ON_TABLE = ("Table: Security add-on price\n\n| Plan | Price |\n| --- | --- |\n"
                "| Pro | EUR 6 per seat per month |\n| Business | included |\n")
MSA_FEES = ("Table: Fees under this agreement\n\n| Item | Fee |\n| --- | --- |\n"
            "| Pro plan | EUR 42 per seat per month |\n| Security add-on | EUR 6 per seat per month |\n")


def test_a_table_caption_names_what_its_rows_are_values_of():
    """"Table: Security add-on price" over "| Pro | EUR 6 |": the add-on's price for Pro,
    not the Pro plan's price, so it conflicts with no other price of the Pro plan; a
    caption that only names the predicate ("Fees"), a tail after "by", an entity and a cell
    that names its own subject take nothing from it."""
    (row,) = statements(ADD_ON_TABLE)
    assert "security" in row.subject and "pro" in row.subject
    assert not clash(ADD_ON_TABLE, MSA_FEES)
    assert clash(ADD_ON_TABLE, ADD_ON_TABLE.replace("EUR 6", "EUR 9"))  # the same table, another price
    plan, _ = statements(MSA_FEES)
    assert plan.subject == ("pro", "plan")  # "fees" names the predicate (a cost): no subject word
    (window,) = statements("Table: Filing windows by claim type\n\n| Claim type | Window |\n| --- | --- |\n"
                           "| Professional | 90 days from the date of service |\n")
    assert "claim" not in window.subject and "type" not in window.subject  # the tail after "by"
    cutoff, note = statements("Table: Initech settlement cutoffs\n\n| Currency | Settlement cutoff | Notes |\n"
                              "| --- | --- | --- |\n| EUR | 14:30 CET | payroll runs need the batch by 12:00 CET |\n",
                              ["initech"])
    assert "settlement" in cutoff.subject and "initech" not in cutoff.subject  # an entity is scope
    assert "settlement" not in note.subject  # a cell that says what its value is of keeps its own subject


def test_a_period_without_a_number_is_still_a_value():
    (s,) = statements("Backups run every month.")
    assert (s.value, s.unit) == ("1 month", "duration")


@pytest.mark.parametrize("text, words", [
    # the small model reads the "before" clause as a conjunct of the main verb
    ("The practice-management system sends every client a booster reminder by text message and by email "
     "14 days before the booster falls due.", {"booster", "reminder"}),
    ("The office mails each tenant a renewal notice by post and by email 60 days before the lease ends.",
     {"renewal", "notice"}),
])
def test_a_reference_clause_read_as_a_conjunct_is_still_the_reference_point(text, words):
    (s,) = statements(text)
    assert words <= {w.lower() for w in s.words}


def test_a_bound_after_a_plural_noun_counts_it_and_a_cadence_is_no_rate():
    (s,) = statements("The overdue amount is split into equal monthly instalments, at most 6, on top of the bill.")
    assert (s.value, s.unit) == ("6 instalment", "count:instalment")
    (t,) = statements("A customer can be offered at most 3 monthly instalments.")
    assert (t.value, t.unit) == ("3 instalment", "count:instalment")
    assert statements("We charge GBP 10 monthly.")[0].unit == "currency:GBP/duration"
    assert not statements("A customer who cannot pay in one go can ask for a plan.")


def test_the_first_months_of_a_price_are_a_portion_not_a_value():
    got = statements("New customers pay GBP 29 a month for the first 18 months instead of the normal price.")
    assert [s.unit for s in got] == ["currency:GBP/duration"]
    (s,) = statements("Probation lasts for the first 6 months.")  # the only value: it is the value
    assert s.value == "6 month"


def test_a_charge_for_use_is_no_subject_of_its_own():
    # an unanchored liability cap shares only "charge" and "use" with a roaming pass: no one subject
    assert not clash("| Europe roaming day pass (charged on each day the phone is used abroad) | GBP 2.50 |",
                     "Reassure the customer: the most they can be charged for use by someone else before they "
                     "told us about the theft is GBP 50.")


def test_a_hyphenated_modifier_counts_once():
    # invented: a boatyard; "high-risk" is one word of two parts: sharing it alone makes no
    # subject, and a real conflict that carries it still is one
    assert not clash("Instead, the high-risk paint shed is inspected twice a week, on Mondays and Thursdays.",
                     "If you supply high-risk solvents, we will audit you every 2 years.")
    assert clash("The high-risk paint shed is inspected twice a week.",
                 "The high-risk paint shed is inspected once a week.")


@pytest.mark.parametrize("text", [
    "On the river, 1 instructor to 6 paddlers.",
    "On the river the ratio is 1:6.",
    "| Open water | 1 : 6 |",
    "On the river, one instructor for every six paddlers.",
    "On the river, 2 instructors to 12 paddlers.",
])
def test_a_ratio_is_one_value(text):
    # invented: a canoe club; a ratio written as two counts, a colon or in words is one value
    got = [s for s in statements(text) if s.unit == "ratio"]
    assert [s.value for s in got] == ["1:6"]
    assert not [s for s in statements(text) if s.unit.startswith("count:")]


def test_a_ratio_and_a_cap_on_the_same_noun_do_not_conflict():
    # a cap of 24 paddlers is no ratio of 1 instructor to 8 paddlers; two ratios conflict
    assert not clash("At most 24 paddlers on the river at once.", "On the river, 1 instructor to 8 paddlers.")
    assert clash("On the river, 1 instructor to 8 paddlers.", "On the river, 1 instructor for every 6 paddlers.")


def test_a_clock_time_is_no_ratio():
    (s,) = statements("The boathouse opens at 1:30 pm.")
    assert s.unit == "time_of_day"


def test_a_charge_for_each_period_is_a_rate():
    # invented: a boat store; "for each stored week" is the rate of the charge, not a value of its own
    got = statements("Winter storage: GBP 9 for each stored week.")
    assert [(s.value, s.unit) for s in got] == [("GBP 9/week", "currency:GBP/duration")]
    # and a rate does not conflict with a flat price of another subject that shares the period word
    assert not clash("Winter storage: GBP 9 for each stored week.", "Week pass for the slipway: GBP 30.")
    assert statements("Hire of the trailer is GBP 40 for a day.")[0].unit == "currency:GBP"


def test_a_table_rule_is_no_counted_noun():
    assert not [s for s in statements("| Dinghy | 2 | 4 |") if s.unit.startswith("count:|")]


def test_a_two_word_predicate_column_names_what_its_values_are_of():
    # invented: a bike shop's delivery prices; the "Delivery" of a "Delivery charge" column is
    # what each row's price is of (a one-word "Price" column adds nothing)
    table = "| Distance | Delivery charge |\n| --- | --- |\n| up to 5 miles | GBP 30 |\n| up to 10 miles | GBP 40 |\n"
    got = [s for s in statements(table) if s.unit.startswith("currency")]
    assert [s.value for s in got] == ["GBP 30", "GBP 40"] and all("delivery" in s.subject for s in got)
    plans = "| Plan | Price |\n| --- | --- |\n| Team plan | EUR 12 per seat |\n"
    assert "price" not in statements(plans)[0].subject
