"""Conflict decisions by class (issue 20): words of the value's own phrase never make two
statements one subject, and the same fact stated in other words still conflicts. Every
sentence here is invented for the test (no corpus wording)."""

from __future__ import annotations

from functools import partial

import pytest

from quarry.core.evidence.conflict import conflict
from quarry.core.evidence.statements import statements as statements_of

pytestmark = pytest.mark.unit

statements = partial(statements_of, tenant="conflict-classes")


def clash(a: str, b: str) -> bool:
    return conflict(statements(a), statements(b)) is not None


def test_day_count_words_and_a_rate_are_part_of_the_value_not_its_subject():
    # "working days", "business days", "a year" say how the value is counted, not what it is of
    s, = statements("Volunteering is capped at 3 working days a year.")
    assert "working" not in s.context and "year" not in s.context and "working" not in s.subject
    assert not clash("Volunteering is capped at 3 working days a year.",
                     "Lost library cards are replaced within 5 working days.")
    assert not clash("Grant payments are released within 10 business days of signature.",
                     "Membership cards are posted within 4 business days.")
    # the same subject still conflicts
    assert clash("Library cards are replaced within 5 working days.",
                 "Replacement of a library card takes 8 working days.")


def test_a_clock_time_is_a_start_or_an_end():
    # a range's ends and a start or end verb or preposition give the time its role
    assert clash("The museum is open from 10:00 to 18:00 on Sundays.", "The museum closes at 17:00 on Sundays.")
    assert clash("Boarding for the ferry begins at 14:00.", "Ferry passengers can board from 13:00.")
    assert not clash("The museum is open from 10:00 to 18:00 on Sundays.", "The museum closes at 18:00 on Sundays.")
    # an opening time never conflicts with a closing time
    assert not clash("Lending desk hours are between 08:30 and 16:00.", "The lending desk shuts at 4 pm.")
    assert not clash("The pool opens at 07:00.", "The pool closes at 21:00.")
    # the end of a span is no cutoff
    assert not clash("The cutoff for lab bookings is 16:00.", "The lab test ran from 09:00 to 11:00.")


def test_a_day_count_word_between_number_and_unit_keeps_the_span():
    # in a table cell the parser may attach the number to the bar; the span is still read
    values = [s.value for s in statements("| Garden sheds (one- and two-storey) | 12 business days |")]
    assert "12 day" in values


def test_an_answer_is_about_what_its_question_asks():
    # an FAQ answer names no subject: the question before it (own line or same paragraph) does
    faq = "# Help desk\n\n**How long does a visa renewal take?**\nAllow 12 working days from the interview."
    assert clash(faq, "Visa renewals are completed within 8 working days.")
    assert not clash(faq, "Passport photos are printed within 8 working days.")
    inline = "- **How long is the warranty on a kettle?** Two years from delivery."
    assert clash(inline, "Kettles carry a warranty of three years.")
    assert not clash(inline, "Toasters carry a warranty of three years.")
    # each answer belongs to the question right before it
    two = ("**How long does a visa renewal take?** Allow 12 working days.\n\n"
           "**How long is a passport photo valid?** Six months from the shoot.")
    s1, s2 = statements(two)
    assert "visa" in s1.subject and "visa" not in s2.subject and "photo" in s2.subject
    # a question in the middle of a paragraph that is not an answer's question keeps no topic across lines
    assert "parcel" not in statements("Did the parcel arrive? We hope so.\n\nRefunds take 5 days.")[0].subject


def test_an_agent_noun_and_an_irregular_participle_share_their_verb_key():
    from quarry.core.evidence.subjects import concept
    # the verb an agent noun or an irregular form derives from, from the lemmatizer's tables
    assert concept("visitor") == concept("visit") and concept("approver") == concept("approve")
    assert concept("claimant") == concept("claim") and concept("lost") == concept("lose")
    assert concept("kept") == concept("keep")  # an irregular form takes its lemma's synonym group
    # words that are verbs or nouns of their own keep their own key
    assert concept("order") != concept("ord") and concept("number") != concept("numb")
    assert concept("ground") != concept("grind") and concept("member") == concept("members")
    # an agent noun is no synonym of what its verb is grouped with ("holder" is not "retain")
    assert concept("holder") != concept("retain")
    assert clash("Each exhibition visitor may stay for 3 hours.", "An exhibition visit lasts 2 hours.")
    assert clash("Each museum visitor may stay for 3 hours.", "Museum visits are limited to 2 hours.")
    assert not clash("Museum visits are limited to 2 hours.", "Museum staff shifts are limited to 8 hours.")


def test_who_receives_a_counted_entitlement_is_part_of_its_subject():
    # "N days of X" hangs off the verb's object: the verb's subject (or give's dative) holds it
    s, = statements("Volunteers receive 3 days of paid training leave.")
    assert "volunteer" in s.subject
    s, = statements("The charity gives apprentices 10 days of paid leave.")
    assert "apprentice" in s.subject
    assert not clash("Volunteers receive 3 days of paid leave.", "Permanent staff receive 5 days of paid leave.")
    assert not clash("Trainees receive 2 weeks of study leave.", "| Study leave | 6 weeks for senior engineers |")
    # the same holder, or no holder on one side, still conflicts
    assert clash("Volunteers receive 3 days of paid leave.", "Volunteers get 5 days of paid leave.")
    assert clash("Trainees receive 2 weeks of study leave.", "Study leave is 6 weeks.")


def test_the_heading_a_passage_sits_under_names_its_subject():
    from quarry.core.evidence.statements import statements_batch
    texts = ["The office issues the permit within 3 days and posts it to you.",
             "Parking permits are issued within 5 days.", "Allow 6 days from the booking."]
    under = statements_batch(texts, tenant="conflict-classes",
                             headings=["Resident parking permits", "", "How long does a ferry refund take?"])
    bare = statements_batch(texts, tenant="conflict-classes")
    assert conflict(under[0], under[1]) is not None and conflict(bare[0], bare[1]) is None
    # a question heading is what its answer is about
    assert "ferry" in under[2][0].subject and conflict(under[2], statements("Ferry refunds take 2 days.")) is not None
    # a heading that does not name the statement's subject adds nothing
    (other,), = statements_batch(["Refunds take 5 days."], tenant="conflict-classes", headings=["Parking permits"])
    assert "parking" not in other.subject


def test_a_heading_names_a_subject_only_by_the_phrase_that_holds_it():
    # "Memo: group deposit and balance terms": the deposit is the group deposit; the memo and
    # the balance terms are other things the heading names, not words of the deposit's subject
    from quarry.core.evidence.statements import statements_batch
    memo = "For contracts signed from 2 March 2026, the deposit is 40% of the estimated room revenue."
    policy = "A deposit of 25% of the estimated room revenue is paid when the group contract is signed."
    under, plain = statements_batch([memo, policy], tenant="conflict-classes",
                                            headings=["Memo: group deposit and balance terms from 2 March 2026",
                                                      "Deposit and payment"])
    assert "group" in under[0].subject and not {"memo", "balance", "term"} & set(under[0].subject)
    assert conflict(under, plain) is not None


def _fee(subject, predicate, value, context, clause):
    from quarry.core.evidence.statement import Statement
    return Statement(subject=subject, predicate=predicate, value=f"USD {value}", unit="currency:USD",
                     magnitude=float(value), context=context, clause=clause)


def test_a_bare_cost_is_not_every_fee():
    # a parse that found no subject but the predicate ("costs") still says in its context what
    # the value is of: it is not the other fee's subject unless the contexts meet
    from quarry.core.evidence.conflict import conflicts
    boat = _fee(("cost",), "cost", 12, ("rowing", "boat", "hire", "cost"), "Rowing boat hire costs # .")
    parking = _fee(("fee", "parking", "lakeside"), "cost", 4, ("lakeside", "parking", "fee"),
                   "The lakeside parking fee is # .")
    assert not conflicts(boat, parking)
    # the same subject in the contexts still conflicts, and a bare cost with nothing else said
    # is decided by the bags as before
    hire = _fee(("fee", "hire", "boat"), "cost", 15, ("boat", "hire", "fee"), "The boat hire fee is # .")
    assert conflicts(boat, hire)
    bare = _fee(("cost",), "cost", 9, ("cost",), "It costs # .")
    assert conflicts(bare, parking)


def test_similar_sentences_must_share_more_than_the_predicate():
    # two fee lines share only "cost": a similar sentence shape is not one subject
    from quarry.core.evidence.conflict import conflicts
    kiosk = _fee(("cost",), "cost", 30, ("kiosk", "licence", "cost"), "The kiosk licence costs # .")
    row = _fee((), "", 80, ("garden", "shed", "base", "fee"), "Garden shed base fee # .")
    assert not conflicts(kiosk, row, similarity=lambda a, b: 0.9)
    # sharing a word of their own, the similarity still counts
    kiosk_fee = _fee((), "", 45, ("kiosk", "licence", "fee"), "Kiosk licence fee # .")
    assert conflicts(kiosk, kiosk_fee, similarity=lambda a, b: 0.9)


def test_what_a_rate_is_per_is_said_and_a_date_is_not_a_subject():
    # "USD 80 per further visit" says "visit" (the unit holds it); "from 1 October 2027" says when,
    # never what: the same fee restated at a new amount conflicts with the one it replaces
    assert clash("A site revisit fee of USD 60 is charged for each further visit.",
                 "From 1 October 2027 the site revisit fee is USD 80 per further visit.")
    s, = statements("From 1 October 2027 the site revisit fee is USD 80 per further visit.")
    assert "october" not in s.subject
    # a month named alone still tells two subjects apart
    assert "june" in statements("The June payroll batch is due by 12:00.")[0].subject
    # a rate per another thing is still another subject
    assert not clash("A site revisit fee of USD 60 is charged for each further visit.",
                     "The parking permit costs USD 80 per vehicle.")


def test_two_verbs_for_one_act_conflict_when_the_sentences_mean_the_same():
    from quarry.core.evidence.conflict import conflicts

    a, = statements("Burst water pipes are repaired within 6 hours.")
    b, = statements("Our plumbers fix burst water pipes within 12 hours.")
    assert not conflicts(a, b)  # the lexical rule alone: two verbs of their own contrast
    assert conflicts(a, b, similarity=lambda x, y: 0.9)  # the embedder finds one act in other verbs
    assert not conflicts(a, b, similarity=lambda x, y: 0.5)  # not close enough
    # the two ends of one thing's life stay apart, however close the sentences are
    c, = statements("Warranty claims must be lodged within 14 days of delivery.")
    d, = statements("Warranty claims are resolved within 30 days.")
    assert not conflicts(c, d, similarity=lambda x, y: 0.99)
    # words of their own in the subjects still contrast: the paraphrase is for verbs only
    e, = statements("Audit logs are retained for 1 year.")
    f, = statements("Application logs are retained for 30 days.")
    assert not conflicts(e, f, similarity=lambda x, y: 0.99)


def test_pint_units_documents_do_not_use_are_no_units():
    # "units" is no micronit and "5G" no gauss (nor, lower-cased, a gram)
    s, = statements("Inspectors sample 5 units from every pallet.")
    assert s.unit == "count:unit" and s.magnitude == 5.0
    assert all("gram" not in s.value and "gauss" not in s.value for s in statements("5G reaches 95% of homes."))
    # measured units still parse
    t, = statements("The crate weighs 12 kg.")
    assert t.unit == "[mass]"


def values(text):
    return [(s.value, s.unit) for s in statements(text)]


def test_values_written_in_words_and_symbols_documents_use():
    assert ("12:00", "time_of_day") in values("Entries are accepted until noon on the closing day.")
    assert ("00:30", "time_of_day") in values("The night tariff starts at half past midnight.")
    assert ("3 month", "duration") in values("Fire doors are inspected every quarter.")
    assert ("0.25 hour", "duration") in values("Allow a quarter of an hour for check-in.")  # a fraction, not a period
    assert any(v.startswith("GBP 0.53") and u.startswith("currency:GBP") for v, u in values("The standing charge is 53p a day."))
    assert not any(u.startswith("currency:") for _, u in values("Streams play at 1080p on every plan."))  # no price
    assert ("1.8 meter", "[length]") in values("Hedges over 1.8 m need the council's consent.")
    # one value in other words is one value; another is a conflict
    assert not clash("Bookings close at 12:00 on Fridays.", "Bookings are taken until noon on Fridays.")
    assert clash("Bookings close at 17:00 on Fridays.", "Bookings are taken until noon on Fridays.")


def test_compound_units_fractions_and_rounded_conversions():
    # a unit per another is one compound unit; a degree sign the parser calls punctuation
    assert ("30 milligram/liter", "[mass] / [length] ** 3") in values("The discharge limit for suspended solids is 30 mg/L.")
    assert ("20 kilometer/hour", "[length] / [time]") in values("The limit is 20 km/h on site.")
    assert ("21 degree_Celsius", "[temperature]") in values("Office temperature is kept at 21 °C during working hours.")
    # "and a half" belongs to the number or the unit before it
    assert ("1.5 hour", "duration") in values("Single tickets can be used for an hour and a half.")
    assert ("2.5 day", "duration") in values("Refunds take two and a half days.")
    assert values("We refund 5 and a half percent of the fare.") == [("5.5%", "percent")]
    # a value converted into another unit and rounded as written is the same value ...
    assert not clash("The speed limit for vehicles on site is 10 mph.", "Site vehicles must not exceed 16 km/h.")
    assert not clash("Main landing gear tyres are inflated to 200 psi.", "Inflate the main gear tyres to 13.8 bar.")
    # ... but the finer unit's rounding decides, and calendar spans keep their own tolerance
    assert clash("The adult dose is 500 mg twice daily.", "The adult dose is 1 g twice daily.")
    assert clash("The speed limit for vehicles on site is 10 mph.", "Site vehicles must not exceed 20 km/h.")
    assert clash("Notice is 4 weeks.", "Notice is 1 month.")
    assert clash("The discharge limit for suspended solids is 30 mg/L.", "Effluent may contain no more than 50 mg/L of suspended solids.")


def test_a_generic_head_is_no_noun_of_its_own():
    # "at intervals of" names no subject: the A-check is what both sentences time
    assert clash("The A-check is performed every 600 flight hours.",
                 "Aircraft undergo an A-check at intervals of 500 flight hours.")


def test_a_pronoun_subject_stands_for_the_clause_it_depends_on():
    s, = statements("Rooms vacated in the morning are cleaned and checked by a supervisor so that they are ready by 15:00.")
    assert s.subject == ("room",) and s.predicate == "ready"


def test_a_comparative_threshold_is_a_threshold_and_a_negated_one_a_limit():
    # "sold for less than EUR 25" sets a condition just as "priced under EUR 40" does
    assert clash("If a damaged lamp sold for less than EUR 25, the customer keeps it.",
                 "Damaged lamps priced under EUR 40 are kept by the customer.")
    # "no more than" states the value itself
    assert clash("Members may bring no more than 2 guests per visit.", "Members may bring 4 guests per visit.")


def test_the_point_a_span_runs_from_is_not_its_subject():
    s, = statements("The trial period lasts six months from the first day of employment.")
    assert "employment" not in s.subject
    assert clash("The trial period lasts six months from the first day of employment.",
                 "New starters are on trial for 3 months.")
    # a "Length of ..." heading says the value is a span, not what it is of
    assert clash("# Trial\n\n## Length of trial\n\nThe trial period lasts six months from the first day of employment.",
                 "New starters are on trial for 3 months.")


def test_similar_sentences_with_values_orders_of_magnitude_apart_are_not_one_subject():
    from quarry.core.evidence.conflict import conflicts

    # invented: a climbing wall. Two rules of one staff member's day, sharing one word: close
    # in meaning, but 2 years and 20 minutes are no old and new value of one rule
    a, = statements("Every wall instructor holds a supervisor certificate, renewed every 2 years.")
    b, = statements("From that day staff move to the next wall every 20 minutes.")
    assert not conflicts(a, b, similarity=lambda x, y: 0.9)
    # within two orders the similar sentences still conflict ("6 hours" and "12 hours" above;
    # here 30 minutes and 20 minutes)
    c, = statements("Staff move to the next wall every 30 minutes.")
    assert conflicts(c, b, similarity=lambda x, y: 0.9)


def test_shared_words_make_no_subject_of_sentences_the_embedder_finds_unrelated():
    from quarry.core.evidence.conflict import conflicts

    # invented: a kennels. Two rules sharing "owner", "use" and "go" in their contexts: one
    # subject by the words alone, but the embedder finds the sentences unrelated
    a, = statements("- Raw food kept in the kennel fridge is used within 24 hours of arriving at the kennels; after "
                    "that it goes home with the owner.")
    b, = statements("- For a trip that uses transport (van or trailer), a letter and consent slip go to owners at "
                    "least 7 days before the trip.")
    assert conflicts(a, b)  # without an embedder the shared words decide
    assert not conflicts(a, b, similarity=lambda x, y: 0.2)
    assert conflicts(a, b, similarity=lambda x, y: 0.4)  # not unrelated: the words still decide
