"""What a statement is about, as keys two statements can share.

Predicates and subject lemmas are mapped through :data:`SYNONYMS` ("expire"/"rotate",
"cost"/"charge"/"price" are one predicate), Snowball-stemmed and stripped of a
derivational suffix ("probation"/"probate", "baggage"/"bag"), generic head nouns
("period", "interval", "size", "rate") falling back to their modifiers. Two statements
are about one subject when those concept bags agree (:func:`same_subject`); an index
blocks statements by :func:`subject_keys`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from quarry.core.evidence.statement import Statement
from quarry.core.text.morphology import agent_base, form_base
from quarry.core.text.tokenizer import stem

__all__ = ["CANON", "GENERIC_WORDS", "DEFAULT_THRESHOLDS", "SYNONYMS", "Thresholds", "concept",
           "context_keys", "context_overlap", "contrasting", "named_apart", "own_subject_words", "same_subject", "subject_keys"]

# Predicates that state the same thing, each mapped to the group's first word.
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("expire", "expiry", "expiration", "rotate", "rotation", "change", "reset", "valid", "validity",
     "lifetime", "timeout", "time out", "max age"),
    ("retain", "retention", "keep", "store", "storage_time", "hold", "delete", "purge"),
    ("respond", "answer", "reply", "response", "response time"),
    ("cost", "charge", "price", "fee", "bill"),
    ("issue", "process", "refund"),
    ("pay", "payable", "payment term", "due"),
    ("limit", "allow", "cap", "maximum", "max", "exceed", "allowance", "weigh", "up"),
    ("length", "long"),
    ("submit", "submission", "deadline", "cutoff", "cut-off", "close"),
    ("notify", "notification", "inform"),
    ("retry", "retry interval"),
    ("settle", "settlement"),
    ("last", "duration", "take"),
    ("lock", "lockout"),
    ("enrol", "enroll"),
    ("entitle", "get", "receive", "include", "give"),
    ("interest", "interest rate", "pay interest"),
    ("store", "stored"),
    ("package", "parcel", "carton", "box", "packet"),
    # a period and its adjective: "the daily charge" says what "a charge per day" says
    ("hour", "hourly"), ("day", "daily", "nightly"), ("week", "weekly"), ("fortnight", "fortnightly"),
    ("month", "monthly"), ("year", "yearly", "annual", "annually"),
)
CANON = {w: g[0] for g in SYNONYMS for w in g}

# Words that never tell two subjects apart (quantifiers, generic heads, time zones).
GENERIC_WORDS = frozenset("""
each every all any new current default minimum maximum max min total per our your their its
this that these those other same such only also least most more less first next last following
cet cest utc gmt et est edt pt pst uk local time timezone zone
""".split())

# Suffixes that derive one word from another, after the Snowball stem: "baggage"/"bag",
# "probation"/"probate", "storage"/"store", "payable"/"pay".
_DERIVATIONAL = ("ation", "ition", "ment", "abl", "ibl", "anc", "enc", "ag", "al", "ing", "ion")
# Head nouns that only say a value is a span, a size or a rate of what modifies them: "the
# probation period", "the retry interval", "the upload size", "the interest rate".
_GENERIC_HEADS = frozenset("period interval window time duration length size rate amount value level term".split())




@dataclass(frozen=True)
class Thresholds:
    """When two contexts make one subject (:func:`same_subject`); the defaults are chosen on
    the tuning part of the dev pairs (``python -m quarry.eval.statement_pairs --sweep``)."""

    overlap: float = 0.15  # context overlap that makes one subject without an embedder
    min_overlap: float = 0.1  # an embedder's similarity counts only for contexts this close
    similarity: float = 0.55  # cosine of the masked sentences under the tenant's embedder
    synonym: float = 0.70  # cosine of the masked clauses above which words of their own are one thing said otherwise
    min_shared: int = 2  # context keys two statements must share for the overlap rule
    # cosine of the masked sentences below which they are about different things whatever
    # words their contexts share ("expressed milk ... goes home with the parent" and "a letter
    # ... goes to parents before the trip": 0.21); no labelled pair moves below 0.45
    unrelated: float = 0.3


DEFAULT_THRESHOLDS = Thresholds()


@lru_cache(maxsize=20_000)
def concept(word: str) -> str:
    """One key for a word and its derivations and synonyms: the synonym group's word (of an
    irregular verb form's lemma: "kept" is "keep"), or the verb an agent noun derives from
    ("visitor" is "visit"; :mod:`quarry.core.text.morphology`), Snowball-stemmed, without a
    derivational suffix or a final e or doubled consonant."""
    if word in CANON:
        w = CANON[word]
    else:
        base = form_base(word)
        w = CANON.get(base, base) if base != word else agent_base(word)
    return _reduced(w)


def _reduced(w: str) -> str:
    """The Snowball stem of ``w`` without a derivational suffix, final e or doubled consonant."""
    w = stem(w)
    for suf in _DERIVATIONAL:
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            w = w[: -len(suf)]
            break
    w = w.removesuffix("e") if len(w) > 3 else w
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiou":
        w = w[:-1]
    return w


# The predicate words of :data:`SYNONYMS` other than the periods: what is said of a value
_SAID_KEYS = frozenset(_reduced(g[0]) for g in SYNONYMS if g[0] not in ("hour", "day", "week", "fortnight", "month",
                                                                     "year", "package")) | {_reduced("use")}
# (no generic head is an agent noun or an irregular verb form: the lemma tables stay unloaded at import)
_HEAD_KEYS = frozenset(_reduced(CANON.get(w, w)) for w in _GENERIC_HEADS)


def _bag(s: Statement) -> frozenset[str]:
    """What a statement is about, as concept keys: its predicate and subject lemmas,
    without words that tell no two subjects apart (generic heads only when more is said)."""
    words = [w for w in (s.predicate, *s.subject) if w not in GENERIC_WORDS or w in CANON]  # "maximum": limit
    keys = {concept(w) for w in words}
    return frozenset(keys - _HEAD_KEYS) or frozenset(keys)


def context_keys(s: Statement) -> frozenset[str]:
    """What the value's part of the sentence is about, as :func:`concept` keys: its content
    lemmas with the predicate and subject, without words that tell no two subjects apart."""
    words = {w for w in (s.predicate, *s.subject, *s.context) if w and (w not in GENERIC_WORDS or w in CANON)}
    return frozenset(concept(w) for w in words) - _HEAD_KEYS


def subject_keys(s: Statement) -> frozenset[str]:
    """Keys an index can block statements by: the predicate, the subject lemmas and their
    concept keys, and the context's concept keys. Two statements that
    :func:`.conflict.conflicts` can match share one of them."""
    return (frozenset({s.predicate, *s.subject}) | _bag(s) | context_keys(s)) - {""}


_HYPHENATED = re.compile(r"\b[A-Za-z]+(?:-[A-Za-z]+)+\b")


def _compounds(s: Statement) -> frozenset[tuple[str, ...]]:
    """The concept keys of each hyphenated word of the statement's clause ("high-risk":
    (high, risk))."""
    return frozenset(tuple(dict.fromkeys(concept(p.lower()) for p in w.split("-") if p))
                     for w in _HYPHENATED.findall(s.clause or ""))


def _shared(a: Statement, b: Statement) -> tuple[int, float]:
    """(how many :func:`context_keys` the statements share, their Jaccard overlap), a
    hyphenated modifier counted as one word however many parts it is written with: "high-risk
    area" and "high-risk materials" share one key, not two."""
    ka, kb = context_keys(a), context_keys(b)
    once = sum(n - 1 for n in (len([k for k in parts if k in ka and k in kb])
                               for parts in _compounds(a) | _compounds(b)) if n > 1)
    shared, union = len(ka & kb) - once, len(ka | kb) - once
    return shared, (shared / union if union > 0 else 0.0)


def context_overlap(a: Statement, b: Statement) -> float:
    """Jaccard overlap of the two statements' :func:`context_keys` (:func:`_shared`)."""
    return _shared(a, b)[1]


def _mentions(s: Statement) -> frozenset[str]:
    return frozenset({*s.context, *s.subject, *s.scope, *s.qualifiers, *(w.lower() for w in s.words)})


def named_apart(a: Statement, b: Statement) -> bool:
    """Each statement names a place, party or label the other never mentions ("in Leeds" and
    "in York", "line 3" and "line 7", "the Acme MSA" and "the Globex MSA")."""
    own_a = set(a.qualifiers) - _mentions(b)
    own_b = set(b.qualifiers) - _mentions(a)
    return bool(own_a and own_b)


def _rate_keys(s: Statement) -> frozenset[str]:
    """The concept keys of what a rate's unit is per ("currency:USD/visit": visit), not a period."""
    per = s.unit.split("/")[1:]
    return frozenset(concept(w) for w in per if w and w != "duration")


def own_subject_words(a: Statement, b: Statement) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The subject words each statement has and the other never says (what a rate is per
    is said: "USD 95 per further visit" says "visit")."""
    ka, kb = context_keys(a) | _rate_keys(a), context_keys(b) | _rate_keys(b)
    own_a = tuple(w for w in a.subject if w not in GENERIC_WORDS and concept(w) not in _HEAD_KEYS | kb)
    own_b = tuple(w for w in b.subject if w not in GENERIC_WORDS and concept(w) not in _HEAD_KEYS | ka)
    return own_a, own_b


def contrasting(a: Statement, b: Statement, similarity: Callable[[str, str], float] | None = None,
                thresholds: Thresholds = None) -> bool:
    """Two things of one kind, not one thing in two wordings: the statements are
    :func:`named_apart`, or each subject names something the other statement never says
    ("audit logs" and "application logs", "Sev-1 incidents" and "Sev-2 incidents") unless
    ``similarity`` finds those words synonyms ("obligations" and "duty")."""
    if named_apart(a, b):
        return True
    th = thresholds or DEFAULT_THRESHOLDS
    pa, pb = _verb_predicate(a), _verb_predicate(b)
    own_pa = bool(pa) and concept(pa) not in context_keys(b)
    own_pb = bool(pb) and concept(pb) not in context_keys(a)
    if pa and pb and concept(pa) != concept(pb) and own_pa and own_pb:
        # two verbs of their own ("raised within 24 hours", "closed within 30 days"), unless
        # the sentences say one thing in other verbs ("faults are repaired", "we fix faults")
        if _opposites(pa, pb) or not _paraphrased(a, b, similarity, th):
            return True
    for x, y, own in ((a, b, own_pb), (b, a, own_pa)):
        if own and x.predicate in x.subject and concept(x.predicate) not in context_keys(y) | _HEAD_KEYS \
                and not _paraphrased(a, b, similarity, th):
            return True  # a verb of its own beside a noun the other never names: "batches submitted after 15:00"
            # and "| Replay open batches onto the new platform | 18:51 |"
    if a.clause and b.clause and _threshold(a) != _threshold(b):
        return True  # "orders below USD 20 are not accepted" sets a condition, "the minimum order value is $25" a value
    own_a, own_b = own_subject_words(a, b)
    return bool(own_a and own_b)


# Verbs for the two ends of one thing's life: whatever the embedder finds, "opens at 08:00"
# and "closes at 18:00" state two values, not one in other words.
_OPPOSITES: tuple[tuple[frozenset[str], frozenset[str]], ...] = tuple(
    (frozenset(x.split()), frozenset(y.split())) for x, y in (
        ("start begin open commence raise log lodge file submit report acknowledge arrive rise increase",
         "end finish close stop cease resolve settle decide complete depart leave fall drop decrease"),
    ))


def _opposites(pa: str, pb: str) -> bool:
    return any((pa in x and pb in y) or (pb in x and pa in y) for x, y in _OPPOSITES)


def _paraphrased(a: Statement, b: Statement, similarity: Callable[[str, str], float] | None,
                 th: Thresholds) -> bool:
    """The two masked clauses are close enough under the tenant's embedder that what each
    says of its own is the same thing in other words ("the deductible" and "an excess")."""
    return similarity is not None and bool(a.clause and b.clause) and similarity(a.clause, b.clause) >= th.synonym


_THRESHOLD_WORDS = frozenset({"over", "above", "below", "under"})
# "sold for less than GBP 25" is a threshold as "priced under GBP 40" is; "no more than
# once", "no later than 60 days" state a limit or a deadline
_COMPARATIVES = frozenset({"less", "more", "fewer", "greater", "lower", "higher", "cheaper", "longer", "shorter"})


def _threshold(s: Statement) -> bool:
    """A value stated as a threshold on what the clause is about: "orders over EUR 50"."""
    words = s.clause.lower().split()
    return any(w in _THRESHOLD_WORDS and nxt.startswith("#") for w, nxt in zip(words, words[1:])) or any(
        w in _COMPARATIVES and t == "than" and nxt.startswith("#") and neg not in ("no", "not")
        for neg, w, t, nxt in zip(["", *words], words, words[1:], words[2:]))


def _verb_predicate(s: Statement) -> str:
    """The predicate when it is a verb of the clause (a relational noun is in the subject)."""
    return s.predicate if s.predicate and s.predicate not in s.subject else ""


def _of_something_else(s: Statement, other: Statement) -> bool:
    """The statement's bag holds nothing but its predicate (a parse that found no subject:
    "rowing boat hire *costs* USD 12"), yet its context names what the value is of,
    and none of it is mentioned by ``other``: the bag says what is stated, not of what, so
    it cannot make one subject with another's fee."""
    if not s.predicate or not set(s.subject) - GENERIC_WORDS <= {s.predicate}:
        return False
    own = context_keys(s) - {concept(s.predicate)}
    return bool(own) and not own & context_keys(other)


def _same_bag(a: Statement, b: Statement) -> bool:
    ba, bb = _bag(a), _bag(b)
    if ba & bb and (ba <= bb or bb <= ba):
        big, small = (a, bb) if len(ba) > len(bb) else (b, ba)
        if ba != bb and _of_something_else(b if big is a else a, big):
            return False  # "(boat hire) costs USD 12" is in every bag with a fee: the contexts decide
        # the side that says more may add a subject word, not a verb of its own
        # ("orders below USD 20 are not accepted" says no more about the minimum order value)
        if ba == bb or big.predicate in big.subject or concept(big.predicate) in small:
            return True
    return False


def _share_a_head(a: Statement, b: Statement) -> bool:
    """What the overlap rule may match on: the two statements' subject and predicate keys
    (:func:`_bag`) share one, or a side has no subject of its own and its predicate or
    context key is the other's subject or predicate. Context words alone (a clause after
    the value, "paid into the salary account outside the payroll run") make no subject."""
    ba, bb = _bag(a), _bag(b)
    if ba & bb:
        return True
    # (what is said of any value of a kind, "charged", "paid", "used", names no subject: a
    # roaming day pass and a theft liability cap are both "charged" for "use")
    return (not a.subject and bool(context_keys(a) & bb - _SAID_KEYS)) or (
        not b.subject and bool(context_keys(b) & ba - _SAID_KEYS))


def same_subject(a: Statement, b: Statement, similarity: Callable[[str, str], float] | None = None,
                 thresholds: Thresholds = DEFAULT_THRESHOLDS) -> bool:
    """The statements are about one thing: their concept bags (predicate and subject, as
    :func:`concept` keys) overlap and one contains the other, so neither adds a word of its
    own ("password expire" and "rotate password"; "probation period" and "on probation");
    or, unless their subjects contrast (:func:`contrasting`), their contexts overlap by
    :class:`Thresholds` (:func:`context_overlap`) and the embedder does not find their masked
    sentences unrelated (below ``unrelated``), or overlap a little and their masked
    sentences are similar enough under ``similarity`` (the tenant's embedder) and their values
    are within two orders of magnitude (:func:`_orders_apart`)."""
    if named_apart(a, b):
        return False
    if a.subject and b.subject and _same_bag(a, b):
        return True
    if contrasting(a, b, similarity, thresholds):
        return False
    shared, overlap = _shared(a, b)
    if overlap >= thresholds.overlap and shared >= thresholds.min_shared and (
            shared > thresholds.min_shared or _share_a_head(a, b)):
        # the embedder can veto what the shared words suggest: sentences it finds unrelated
        return similarity is None or not (a.clause and b.clause) or \
            similarity(a.clause, b.clause) >= thresholds.unrelated
    if similarity is None or overlap < thresholds.min_overlap or not (a.clause and b.clause):
        return False
    # similar sentences share more than what is stated of them: "the kiosk licence costs
    # USD 30" and "garden shed base fee USD 80" share only "cost"
    said = {concept(x.predicate) for x in (a, b) if x.predicate in CANON}
    if not (context_keys(a) & context_keys(b)) - said:
        return False
    return not _orders_apart(a, b) and similarity(a.clause, b.clause) >= thresholds.similarity


def _orders_apart(a: Statement, b: Statement) -> bool:
    """Values of one kind two orders of magnitude apart ("renewed every 2 years", "move
    every 20 minutes"): no one rule's old and new value, so similar sentences alone do not
    make them one subject."""
    if a.magnitude is None or b.magnitude is None or a.unit.split("/")[0] != b.unit.split("/")[0]:
        return False
    lo, hi = sorted((abs(a.magnitude), abs(b.magnitude)))
    return lo > 0 and hi / lo > 100
