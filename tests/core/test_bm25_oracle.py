"""Oracle: Quarry writes bm25s's score matrix itself (tenant-wide statistics), touching
bm25s's private layout. On one shard (shard statistics == tenant statistics) its scores
must equal what ``bm25s.BM25.index`` computes from the same token lists. This is what
protects a bm25s upgrade."""

from __future__ import annotations

import bm25s
import numpy as np
import pytest

from quarry.core.index.lexical import TermStats, bm25_with_stats
from quarry.core.index.manifest import BM25_B, BM25_K1
from quarry.core.text.tokenizer import tokenize

pytestmark = pytest.mark.unit

TEXTS = [
    "The EUR settlement cutoff is 16:00 CET for Acme until cutover.",
    "Migrated tenants use the 15:00 EUR cutoff after cutover completes.",
    "Incident E-4471: reconcile_settlement failed for acme-9 batches.",
    "Refunds above 2.5% need approval from finance; refunds below do not.",
    "SSO is part of the Security add-on; Globex has no SSO until it buys it.",
    "The cutoff cutoff cutoff appears three times in this noisy runbook line.",
]
QUERIES = ["EUR cutoff", "acme-9 reconcile_settlement", "refund approval finance", "sso security add-on",
           "cutoff", "nothing-matches-this"]


def test_tenant_wide_scores_equal_bm25s_index():
    tokens = [tokenize(t) for t in TEXTS]
    ours = bm25_with_stats(tokens, TermStats.from_tokens(tokens))
    ref = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
    ref.index(bm25s.tokenization.Tokenized(
        ids=[[ref_vocab(tokens)[t] for t in toks] for toks in tokens], vocab=ref_vocab(tokens)),
        show_progress=False)
    checked = 0
    for q in QUERIES:
        qt = [t for t in tokenize(q) if t in ours.vocab_dict]
        a = ours.get_scores_from_ids([ours.vocab_dict[t] for t in qt]) if qt else np.zeros(len(TEXTS))
        b = ref.get_scores_from_ids([ref_vocab(tokens)[t] for t in qt]) if qt else np.zeros(len(TEXTS))
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        checked += int(np.count_nonzero(a))
    assert checked >= 8  # the comparison covered real, non-zero scores


def ref_vocab(tokens):
    return {t: i for i, t in enumerate(sorted({t for toks in tokens for t in toks}))}


def test_weight_mask_zeroes_exactly_the_masked_rows():
    tokens = [tokenize(t) for t in TEXTS]
    bm = bm25_with_stats(tokens, TermStats.from_tokens(tokens))
    ids = [bm.vocab_dict[t] for t in tokenize("cutoff") if t in bm.vocab_dict]
    full = bm.get_scores_from_ids(ids)
    mask = np.array([1, 0, 1, 0, 1, 1], dtype=np.float32)
    masked = bm.get_scores_from_ids(ids, weight_mask=mask)
    np.testing.assert_allclose(masked, full * mask, rtol=1e-6)
    assert full[1] > 0 and masked[1] == 0


def test_sharded_scores_with_tenant_stats_equal_one_unsharded_bm25s_index():
    """Two shards built with the tenant-wide statistics score every row exactly as one
    bm25s index over the whole tenant: the merged top-k equals the unsharded top-k."""
    tokens = [tokenize(t) for t in TEXTS]
    stats = TermStats.from_tokens(tokens)
    shards = [bm25_with_stats(tokens[:3], stats), bm25_with_stats(tokens[3:], stats)]
    vocab = ref_vocab(tokens)
    ref = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
    ref.index(bm25s.tokenization.Tokenized(ids=[[vocab[t] for t in toks] for toks in tokens], vocab=vocab),
              show_progress=False)
    for q in QUERIES:
        qt = [t for t in tokenize(q) if t in vocab]
        want = ref.get_scores_from_ids([vocab[t] for t in qt]) if qt else np.zeros(len(TEXTS))
        got = np.concatenate([
            sh.get_scores_from_ids([sh.vocab_dict[t] for t in qt if t in sh.vocab_dict])
            if any(t in sh.vocab_dict for t in qt) else np.zeros(sh.scores["num_docs"])
            for sh in shards])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
