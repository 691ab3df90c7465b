"""The lexical leg's index: tenant-wide BM25 statistics and the bm25s index scored with them.

Tenants never share an index (BM25 statistics would leak between them). Term statistics
are tenant-wide (:class:`TermStats`), so a tenant's merged top-k over shards equals its
unsharded top-k: each shard's bm25s matrix is scored with the tenant's df, N and avgdl
(:func:`bm25_with_stats`), not its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from quarry.core.embed.embedders import passage_text_for_embedding
from quarry.core.index.manifest import BM25_B, BM25_K1
from quarry.core.records import Passage
from quarry.core.text.tokenizer import tokenize


def lexical_text(p: Passage) -> str:
    """The lexical leg indexes what the dense leg embeds (title, headings, context, text)."""
    return passage_text_for_embedding(p)


@dataclass
class TermStats:
    """Tenant-wide BM25 statistics; mergeable across partitions and shards."""

    n_docs: int = 0
    total_len: int = 0
    df: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_tokens(cls, token_lists: Sequence[Sequence[str]]) -> "TermStats":
        s = cls()
        for toks in token_lists:
            s.add(toks)
        return s

    def add(self, toks: Sequence[str]) -> None:
        """Count one more document (its tokens) in place."""
        self.n_docs += 1
        self.total_len += len(toks)
        for t in set(toks):
            self.df[t] = self.df.get(t, 0) + 1

    def subtract(self, other: "TermStats") -> "TermStats":
        """These statistics without ``other``'s rows (rows a delta tombstones)."""
        df = dict(self.df)
        for t, c in other.df.items():
            left = df.get(t, 0) - c
            if left < 0:
                raise ValueError(f"cannot subtract statistics: term {t!r} would have df {left}")
            if left:
                df[t] = left
            else:
                df.pop(t, None)
        return TermStats(self.n_docs - other.n_docs, self.total_len - other.total_len, df)

    def merge(self, other: "TermStats") -> "TermStats":
        df = dict(self.df)
        for t, c in other.df.items():
            df[t] = df.get(t, 0) + c
        return TermStats(self.n_docs + other.n_docs, self.total_len + other.total_len, df)

    @property
    def avgdl(self) -> float:
        return self.total_len / self.n_docs if self.n_docs else 0.0

    def idf(self, term: str) -> float:
        """Lucene's idf, as bm25s's default 'lucene' method computes it."""
        df = self.df.get(term, 0)
        return math.log(1 + (self.n_docs - df + 0.5) / (df + 0.5))


def term_stats(passages: Sequence[Passage]) -> TermStats:
    return TermStats.from_tokens([tokenize(lexical_text(p)) for p in passages])


def bm25_with_stats(token_lists: Sequence[Sequence[str]], stats: TermStats):
    """A bm25s index whose scores use tenant-wide df/N/avgdl instead of the shard's own."""
    import bm25s

    vocab = sorted({t for toks in token_lists for t in toks})
    vid = {t: i for i, t in enumerate(vocab)}
    idf = np.array([stats.idf(t) for t in vocab], dtype=np.float64)
    rows, cols, tfs, lens = [], [], [], []
    for r, toks in enumerate(token_lists):
        ids, counts = np.unique(np.array([vid[t] for t in toks], dtype=np.int64), return_counts=True)
        rows.append(np.full(len(ids), r, dtype=np.int64))
        cols.append(ids)
        tfs.append(counts.astype(np.float64))
        lens.append(np.full(len(ids), len(toks), dtype=np.float64))
    n = len(token_lists)
    if rows:
        rows_a, cols_a, tf, dl = (np.concatenate(x) for x in (rows, cols, tfs, lens))
    else:
        rows_a = cols_a = np.zeros(0, dtype=np.int64)
        tf = dl = np.zeros(0)
    # Lucene BM25 term score: idf * tf / (tf + k1 * (1 - b + b * dl / avgdl)).
    denom = tf + BM25_K1 * (1 - BM25_B + BM25_B * dl / max(stats.avgdl, 1e-9))
    data = (idf[cols_a] * tf / denom).astype(np.float32)
    import scipy.sparse as sp

    csc = sp.csc_matrix((data, (rows_a, cols_a)), shape=(n, max(len(vocab), 1)), dtype=np.float32)
    bm = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
    bm.scores = {
        "data": csc.data.astype(np.float32),
        "indices": csc.indices.astype(np.int32),
        "indptr": csc.indptr.astype(np.int32),
        "num_docs": n,
    }
    bm.vocab_dict = vid if vocab else {"": 0}
    bm.nonoccurrence_array = None
    return bm
