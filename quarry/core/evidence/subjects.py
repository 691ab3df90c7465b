"""What a statement is about, as keys two statements can share.

Predicates and subject lemmas are mapped through :data:`SYNONYMS` ("expire"/"rotate",
"cost"/"charge"/"price" are one predicate), Snowball-stemmed and stripped of a
derivational suffix ("probation"/"probate", "baggage"/"bag"), generic head nouns
("period", "interval", "size", "rate") falling back to their modifiers. Two statements
are about one subject when those concept bags agree (:func:`same_subject`); an index
blocks statements by :func:`subject_keys`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from quarry.core.evidence.statement import Statement
from quarry.core.text.tokenizer import stem

__all__ = ["CANON", "GENERIC_WORDS", "SYNONYMS", "concept", "same_subject", "subject_keys"]

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
_GENERIC_HEADS = frozenset("period interval window time duration size rate amount value level term".split())


@lru_cache(maxsize=20_000)
def concept(word: str) -> str:
    """One key for a word and its derivations and synonyms: the synonym group's word,
    Snowball-stemmed, without a derivational suffix or a final e or doubled consonant."""
    w = stem(CANON.get(word, word))
    for suf in _DERIVATIONAL:
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            w = w[: -len(suf)]
            break
    w = w.removesuffix("e") if len(w) > 3 else w
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiou":
        w = w[:-1]
    return w


def _bag(s: Statement) -> frozenset[str]:
    """What a statement is about, as concept keys: its predicate and subject lemmas,
    without words that tell no two subjects apart (generic heads only when more is said)."""
    words = [w for w in (s.predicate, *s.subject) if w not in GENERIC_WORDS or w in CANON]  # "maximum": limit
    keys = {concept(w) for w in words}
    heads = {concept(w) for w in _GENERIC_HEADS}
    return frozenset(keys - heads) or frozenset(keys)


def subject_keys(s: Statement) -> frozenset[str]:
    """Keys an index can block statements by: the predicate, the subject lemmas and their
    concept keys. Two statements that :func:`.conflict.conflicts` can match share a concept key; a
    ``similarity`` callable may also match statements that share only a subject lemma."""
    return frozenset({s.predicate, *s.subject}) | _bag(s)


def same_subject(a: Statement, b: Statement, similarity: Callable[[str, str], float] | None = None,
                 threshold: float = 0.8) -> bool:
    """The statements are about one thing: their concept bags (predicate and subject, as
    :func:`concept` keys) overlap and one contains the other, so neither adds a word of its
    own ("password expire" and "rotate password"; "probation period" and "on probation").
    ``similarity`` (e.g. the tenant's sentence embedder) may accept paraphrased subjects."""
    ba, bb = _bag(a), _bag(b)
    if ba & bb and (ba <= bb or bb <= ba):
        big, small = (a, bb) if len(ba) > len(bb) else (b, ba)
        # the side that says more may add a subject word, not a verb of its own
        # ("orders below USD 20 are not accepted" says no more about the minimum order value)
        if ba == bb or big.predicate in big.subject or concept(big.predicate) in small:
            return True
    return similarity is not None and similarity(" ".join((*a.subject, a.predicate)),
                                                 " ".join((*b.subject, b.predicate))) >= threshold
