"""Identifier-aware tokenizer for the lexical leg.

Plain words are lower-cased, stop-word filtered and Snowball-stemmed (as bm25s does).
Joined identifiers — runs joined by ``-``, ``_``, ``.`` or ``/`` such as ``E-4471``,
``acme-9``, ``reconcile_settlement``, ``ord_4821`` or ``v2.3.1`` — are kept whole
(lower-cased, unstemmed) *and* emitted as their parts, so an exact identifier query matches
the literal string first while a query for one part still finds it. A single run mixing
letters and digits (``INC2291``) is one token already. What counts as an identifier is
:func:`quarry.core.text.units.is_identifier`, for both kinds.
"""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer
from bm25s.stopwords import STOPWORDS_EN

from quarry.core.text.units import JOINED_IDENTIFIER, is_identifier

STOPWORDS = frozenset(STOPWORDS_EN)
# A joined identifier, else one alphanumeric run (a word, a number or a mixed code).
_TOKEN = re.compile(rf"{JOINED_IDENTIFIER}|[^\W_]+", re.UNICODE)
_PART = re.compile(r"[^\W_]+", re.UNICODE)
_stemmer = Stemmer.Stemmer("english")


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    return _stemmer.stemWord(word)


def _word(w: str) -> str | None:
    # Single characters carry no signal as plain words (bm25s drops them too).
    if len(w) < 2 or w in STOPWORDS:
        return None
    return stem(w)


def tokenize(text: str) -> list[str]:
    """Tokens of ``text`` in order: identifiers whole then their parts, words stemmed."""
    out: list[str] = []
    for m in _TOKEN.finditer(text.lower()):
        tok = m.group(0)
        if _PART.fullmatch(tok):
            w = _word(tok)
            if w:
                out.append(w)
            continue
        out.append(tok.strip("."))
        for part in _PART.findall(tok):
            w = _word(part)
            if w:
                out.append(w)
    return out


def tokenize_many(texts: list[str]) -> list[list[str]]:
    return [tokenize(t) for t in texts]


def identifiers(tokens: list[str]) -> list[str]:
    """The identifier tokens among ``tokens`` (:func:`quarry.core.text.units.is_identifier`):
    joined ones (``e-4471``) and mixed letter-digit runs (``inc2291``)."""
    return [t for t in tokens if is_identifier(t)]


def is_lookup(tokens: list[str]) -> bool:
    """An identifier lookup: the query's identifiers are at least as many as its other
    words (e.g. "E-4471", "error E-4471 acme-9"), as opposed to prose that mentions one."""
    idents = identifiers(tokens)
    if not idents:
        return False
    parts = {p for i in idents for p in _PART.findall(i)} | {_word(p) for i in idents for p in _PART.findall(i)}
    words = [t for t in tokens if t not in idents and t not in parts]
    return len(idents) >= len(words)
