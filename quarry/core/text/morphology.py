"""Derivational morphology from the spaCy pipeline's own lemma tables: the verb an agent
noun or a participle adjective derives from ("visitor"/"visit", "approver"/"approve",
"lost"/"lose"), so that keys built from lemmas agree across parts of speech.

The tables are those of the pipeline's rule lemmatizer (``lemma_index``: the known lemmas
of each part of speech; ``lemma_exc``: irregular forms), loaded with
:func:`quarry.core.text.nlp.pipeline` on first use. Without them every word is its own base.
"""

from __future__ import annotations

from functools import lru_cache

from quarry.core.text.nlp import DEFAULT_PIPELINE, pipeline

__all__ = ["agent_base", "form_base"]

# Suffixes that make an agent noun of a verb: "visit-or", "approv-er", "claim-ant".
_AGENT_SUFFIXES = ("er", "or", "ant")


@lru_cache(maxsize=4)
def _tables(name: str) -> tuple[frozenset[str], frozenset[str], dict[str, str]]:
    """(verb lemmas, nouns that are no adjective, irregular verb form -> lemma) of ``name``."""
    try:
        lookups = pipeline(name).get_pipe("lemmatizer").lookups
        index, exc = lookups.get_table("lemma_index"), lookups.get_table("lemma_exc")
    except (ImportError, ValueError, KeyError):
        return frozenset(), frozenset(), {}
    verbs = frozenset(index.get("verb", ()))
    nouns = frozenset(index.get("noun", ())) - frozenset(index.get("adj", ()))
    forms = {form: lemmas[0] for form, lemmas in exc.get("verb", {}).items() if lemmas}
    return verbs, nouns, forms


def form_base(word: str, name: str = DEFAULT_PIPELINE) -> str:
    """The lemma of an irregular verb form that is no verb lemma and no noun of its own
    unless a participle adjective ("lost" -> "lose", "paid" -> "pay", "kept" -> "keep"; not
    "ground", "saw" or "found"), else ``word``."""
    verbs, nouns, forms = _tables(name)
    if word in forms and word not in verbs and word not in nouns:
        return forms[word]
    return word


def agent_base(word: str, name: str = DEFAULT_PIPELINE) -> str:
    """The verb of an agent noun that is no verb itself, whose stem is a verb ("visitor" ->
    "visit", "approver" -> "approve", "claimant" -> "claim"; not "order" or "number", which
    are verbs, nor "member"), else ``word``."""
    verbs, _, _ = _tables(name)
    if not verbs or " " in word or word in verbs:
        return word
    for suf in _AGENT_SUFFIXES:
        stem = word[: -len(suf)]
        if not word.endswith(suf) or len(stem) < 3:
            continue
        for cand in (stem, stem + "e", stem[:-1] if len(stem) > 3 and stem[-1] == stem[-2] else ""):
            if cand and cand in verbs:
                return cand
    return word
