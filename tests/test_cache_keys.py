"""Every cache in quarry/ is listed here with why its key cannot leak across tenants or
groups (DESIGN: every cache key includes the tenant). The list is checked against a scan of
the source, so a cache added later without an entry here fails this test."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest

from quarry.core.records import Principal
from quarry.core.search.query_cache import QueryVectorCache

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1] / "quarry"
# A cache: an LRU(...) construction, functools.lru_cache / cache decorators.
_CACHE = re.compile(r"(?:^\s*@(?:functools\.)?(?:lru_cache|cache)\b.*\n\s*def\s+(\w+)"
                    r"|^\s*(?:self\.)?(\w+)\s*:\s*LRU\[.*=\s*LRU\()", re.M)

TENANT = "key includes the tenant"
INSTANCE = "held by one tenant's object (per-tenant instance)"
WORD = "pure function of one word or a setting: no tenant content"
SINGLETON = "process singleton (a loaded library/actor handle), no key content"

REGISTRY: dict[str, str] = {
    "core/search/query_cache.py:_items": TENANT,  # (tenant, groups, model, text); tested below
    "serve/http/auth.py:_verified": TENANT,  # the whole signed token, which carries tenant+groups
    "serve/http/agent_tools.py:_known": TENANT,  # run_id -> principal key, compared before use
    "serve/deployments/reranker.py:_stages": TENANT,  # (tenant, generation)
    "serve/deployments/retriever.py:_cache": TENANT,  # tenant -> index
    "serve/deployments/retriever.py:_other_lags": TENANT,  # tenant -> its last change lags (numbers, no text)
    "serve/deployments/generations.py:_lru": TENANT,  # (tenant, generation)
    "serve/deployments/handles.py:_stage_infos": TENANT,  # (tenant, generation)
    "serve/deployments/handles.py:_last_generation": TENANT,  # tenant
    "core/index/shards.py:_masks": TENANT,  # (tenant, generation, delta, principal tenant, groups, ...)
    "serve/stores/runstore_actor.py:_ray_actor": SINGLETON,
    "core/text/tokenizer.py:stem": WORD,
    "core/text/nlp.py:pipeline": SINGLETON,
    "core/text/nlp.py:_dateparser": SINGLETON,
    "core/text/nlp.py:parse_date": TENANT,  # (text, ..., tenant); tested below
    "core/evidence/subjects.py:concept": WORD,
    "core/evidence/predicates.py:_subject_stem": WORD,
    "core/evidence/quantities.py:_ureg": SINGLETON,
    "core/evidence/quantities.py:_pint_base": WORD,
    "core/evidence/quantities.py:_pint_name": WORD,
    "core/evidence/quantities.py:_pint_known": WORD,  # one unit word -> pint knows it
    "core/evidence/quantities.py:_measured": SINGLETON,  # no key: the fixed dimension whitelist
    "core/text/morphology.py:_tables": WORD,  # the spaCy pipeline's lemma tables, by pipeline name
    "core/evidence/question.py:_measures": WORD,
    "core/evidence/question.py:_function_stems": SINGLETON,  # no key: spaCy's fixed stop-word list, stemmed
    "core/evidence/quantities.py:_clock": TENANT,  # (text, ..., tenant); tested below
    "core/evidence/statements.py:_statements_cached": TENANT,  # (text, ..., tenant); tested below
    "core/evidence/sentences.py:passage_sentences": TENANT,  # (text, ..., tenant); tested below
    "core/evidence/predicates.py:predicates": TENANT,  # (text, ..., tenant); tested below
    "core/text/rule_dates.py:sentence_starts": TENANT,  # (text, ..., tenant); tested below
    "core/rank/features.py:_TERMS": TENANT,  # (tenant, passage id, heading, text); tested below
}

# Plain-dict memos the scan does not find, checked by hand (grep for `dict[` and `= {}` in
# quarry/): file -> name -> why its key cannot leak. The test below keeps the names current.
DICT_MEMOS: dict[str, dict[str, str]] = {
    "serve/http/auth.py": {"_JWKS": SINGLETON},  # one PyJWKClient per JWKS source: public keys
    "jobs/stages.py": {"_CONTEXTUALIZERS": SINGLETON, "_EMBEDDERS": SINGLETON},  # per configuration
    "serve/deployments/retriever.py": {"_embedders": SINGLETON},  # (model, dim) -> loaded encoder
    "core/index/shards.py": {"_words": INSTANCE, "_lists": INSTANCE, "_parent_rows": INSTANCE},  # one shard
    "core/rank/sentence_vectors.py": {"_vecs": INSTANCE, "_queries": INSTANCE},  # one (tenant, generation) stage
    "core/search/in_process.py": {"_parsed": INSTANCE},  # one search's passages
}


def _scan(root: Path = ROOT) -> set[str]:
    found = set()
    for path in root.rglob("*.py"):
        if path.name == "lru.py":
            continue
        for m in _CACHE.finditer(path.read_text()):
            found.add(f"{path.relative_to(root).as_posix()}:{m.group(1) or m.group(2)}")
    return found


def test_every_cache_in_the_source_is_registered():
    found = _scan()
    assert found - REGISTRY.keys() == set(), "new cache(s): add them to REGISTRY with why they cannot leak"
    assert REGISTRY.keys() - found == set(), "registered cache(s) no longer in the source"


def test_scan_finds_an_unregistered_cache(tmp_path):
    (tmp_path / "x.py").write_text("from functools import lru_cache\n@lru_cache(maxsize=4)\ndef leak(text): ...\n"
                                   "class A:\n    def __init__(self):\n        self._c: LRU[str, int] = LRU(4)\n")
    assert _scan(tmp_path) == {"x.py:leak", "x.py:_c"}


def test_query_vector_cache_is_keyed_by_tenant_and_groups():
    cache = QueryVectorCache(capacity=8)
    acme = Principal(tenant="acme", subject="a", groups=frozenset({"all-staff"}))
    acme_hr = Principal(tenant="acme", subject="b", groups=frozenset({"hr"}))
    globex = Principal(tenant="globex", subject="a", groups=frozenset({"all-staff"}))
    acme_again = Principal(tenant="acme", subject="c", groups=frozenset({"all-staff"}))
    v = np.ones(4, np.float32)
    cache.put(acme, "m", "salary bands", v)
    assert cache.get(globex, "m", "salary bands") is None  # another tenant: another entry
    assert cache.get(acme_hr, "m", "salary bands") is None  # other groups: another entry
    assert cache.get(acme_again, "m", " salary  bands") is not None  # same tenant and groups
    cache.put(globex, "m", "salary bands", v)
    assert cache.stats().size == 2


def test_verified_token_cache_holds_an_entry_at_most_token_cache_s():
    from quarry.serve.http.auth import AuthError, CachedVerifier, mint_token
    from quarry.serve.settings import AuthSettings

    secret = "s" * 40
    now = [1_000_000.0]
    settings = AuthSettings(hs256_secret=secret, token_cache_s=30)
    v = CachedVerifier(settings, clock=lambda: now[0])
    tok = mint_token("acme", "a", ["all-staff"], secret=secret, ttl_s=3600, now=int(time.time()))
    assert v.verify(tok).principal.tenant == "acme"
    # the key is removed from configuration: the cached entry still answers within the bound...
    v.settings = AuthSettings(hs256_secret="n" * 40, token_cache_s=30)
    now[0] += 29
    assert v.verify(tok).principal.tenant == "acme"
    # ...and not after it: the token is verified again and refused
    now[0] += 2
    with pytest.raises(AuthError):
        v.verify(tok)


def test_hand_checked_dict_memos_are_still_in_the_source():
    for rel, names in DICT_MEMOS.items():
        src = (ROOT / rel).read_text()
        for name in names:
            assert re.search(rf"\b{name}\b\s*(?::[^=\n]+)?=", src), f"{rel}:{name} no longer assigned there"


_A, _B = "acme", "globex"


def _lru_caches():
    """(name, the lru_cache'd function, a call of it for one tenant) for each text cache."""
    from quarry.core.evidence import predicates, quantities, sentences, statements
    from quarry.core.text import nlp, rule_dates

    marker = f"zq{time.monotonic_ns()}"  # a text no earlier test processed
    return [
        ("parse_date", nlp.parse_date, lambda t: nlp.parse_date("15 January 2026", tenant=t)),
        ("_clock", quantities._clock, lambda t: quantities._clock(f"3 pm {marker}", t)),
        ("passage_sentences", sentences.passage_sentences,
         lambda t: sentences.passage_sentences(f"The {marker} is owned by Ops. It is 3 pm.", tenant=t)),
        ("predicates", predicates.predicates, lambda t: predicates.predicates(f"The {marker} is owned by Ops.", tenant=t)),
        ("sentence_starts", rule_dates.sentence_starts,
         lambda t: rule_dates.sentence_starts(f"From 2 March 2026 the {marker} opens at 9.", tenant=t)),
        ("_statements_cached", statements._statements_cached,
         lambda t: statements.statements(f"The {marker} limit is 90 days.", tenant=t)),
    ]


@pytest.mark.parametrize("name", ["parse_date", "_clock", "passage_sentences", "predicates", "_statements_cached",
                                  "sentence_starts"])
def test_text_cache_entry_of_one_tenant_is_not_a_hit_for_another(name):
    (fn, call), = [(f, c) for n, f, c in _lru_caches() if n == name]
    call(_A)  # tenant A's entry (or a hit on A's own earlier one)
    before = fn.cache_info()
    got_b = call(_B)  # same text, tenant B
    after_b = fn.cache_info()
    assert after_b.hits == before.hits and after_b.misses == before.misses + 1  # not a hit: B's own entry
    assert call(_A) == got_b  # same text, same answer...
    assert fn.cache_info().hits == after_b.hits + 1  # ...and A's entry was there all along
    assert call(_B) == got_b and fn.cache_info().hits == after_b.hits + 2


def test_ranker_term_cache_is_keyed_by_tenant():
    from quarry.core.rank import features
    from quarry.core.records import Envelope, Passage

    def passage(tenant):
        env = Envelope(doc_id="d", version="1", tenant=tenant, title="Refunds", acl=("*",))
        return Passage(passage_id="d@1#a", anchor="a", parent_id="d@1#s", text=f"refunds zq{time.monotonic_ns()}",
                       chunker_version="v", token_count=2, envelope=env)

    a = passage(_A)
    b = a.model_copy(update={"envelope": a.envelope.model_copy(update={"tenant": _B})})

    def owners():  # tenants with an entry for this passage id and text
        return sorted(k[0] for k, _ in features._TERMS.items() if k[1:2] == (a.passage_id,) and k[-1] == a.text)

    features._passage_terms(a)
    assert owners() == [_A]
    assert features._passage_terms(b) == features._passage_terms(a)  # same id, heading and text...
    assert owners() == [_A, _B]  # ...but B missed A's entry and stored its own
    assert features.forget_terms(_B) >= 1
    assert owners() == [_A]  # a purge of B drops B's entries only
