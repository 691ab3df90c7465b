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
TEXT = "OPEN: keyed by passage text only (a hit reveals an identical text was processed); not yet tenant-keyed"

# Not found by the scan (plain dicts), checked by hand: serve/http/auth.py _JWKS (one
# PyJWKClient per configured JWKS source: public keys, no tenant content).
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
    "core/text/nlp.py:parse_date": TEXT,
    "core/evidence/subjects.py:concept": WORD,
    "core/evidence/predicates.py:_subject_stem": WORD,
    "core/evidence/quantities.py:_ureg": SINGLETON,
    "core/evidence/quantities.py:_pint_base": WORD,
    "core/evidence/quantities.py:_pint_name": WORD,
    "core/evidence/quantities.py:_clock": TEXT,
    "core/evidence/statements.py:_statements_cached": TEXT,
    "core/evidence/sentences.py:passage_sentences": TEXT,
    "core/evidence/predicates.py:predicates": TEXT,
    "core/rank/features.py:_TERMS": TEXT,  # (passage id, heading, text)
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
