import pytest

from quarry.core.text.tokenizer import tokenize

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("ident,parts", [
    ("E-4471", ["4471"]),
    ("acme-9", ["acm"]),
    ("reconcile_settlement", ["reconcil", "settlement"]),
    ("ord_4821", ["ord", "4821"]),
    ("v2.3.1", ["v2"]),
])
def test_identifiers_kept_whole_and_split(ident, parts):
    toks = tokenize(f"see {ident} now")
    assert ident.lower() in toks
    for p in parts:
        assert p in toks


def test_words_are_lowercased_stemmed_and_stopwords_dropped():
    assert tokenize("The Settlements were Reconciled") == ["settlement", "were", "reconcil"]
    assert "the" not in tokenize("the and of")


def test_trailing_punctuation_does_not_glue_to_identifiers():
    assert "v2.3.1" in tokenize("upgraded to v2.3.1.")
    assert "e-4471" in tokenize("(E-4471)")


def test_query_identifier_matches_document_identifier():
    assert set(tokenize("error E-4471")) & set(tokenize("Payout failed with E-4471 at 16:00"))
