"""Statement vectors: each statement's masked clause (``Statement.clause``) under the
tenant's own embedder, encoded when the shard is built and stored beside
``evidence.jsonl`` as ``evidence_vectors.npy`` (float16, unit rows, in the flattened
statement order of the shard's rows). Resolution compares them with a dot product
(:func:`clause_similarity`); no model runs at query time. A shard without the file
resolves exactly as before (no similarity).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

__all__ = ["VECTORS_FILE", "Encode", "attach", "clause_similarity", "encode_facts", "known_vectors",
           "reusing", "statement_text"]

VECTORS_FILE = "evidence_vectors.npy"
Encode = Callable[[Sequence[str]], np.ndarray]


def statement_text(s) -> str:
    """What a statement's vector encodes: its masked clause (chosen over the subject phrase
    on the dev pairs' tune part; see docs)."""
    return s.clause


def encode_facts(facts: Sequence, encode: Encode) -> np.ndarray:
    """One unit float16 row per statement of ``facts`` (row order, then statement order);
    a statement without text gets a zero row. Each distinct text is encoded once, in
    sorted order, so the matrix is a pure function of the statements."""
    texts = [statement_text(s) for f in facts for s in f.statements]
    distinct = sorted({t for t in texts if t})
    if not texts:
        return np.zeros((0, 0), np.float16)
    vecs = np.asarray(encode(distinct), dtype=np.float32) if distinct else np.zeros((0, 0), np.float32)
    dim = vecs.shape[1] if vecs.ndim == 2 and vecs.size else 0
    norms = np.linalg.norm(vecs, axis=1, keepdims=True) if dim else np.zeros((0, 1))
    vecs = vecs / np.where(norms > 0, norms, 1.0) if dim else vecs
    row = dict(zip(distinct, vecs))
    out = np.zeros((len(texts), dim), np.float32)
    for i, t in enumerate(texts):
        if t and dim:
            out[i] = row[t]
    return out.astype(np.float16)


def attach(facts: Sequence, matrix: np.ndarray | None) -> list:
    """``facts`` with each row's slice of ``matrix`` as its ``vectors`` (unchanged when the
    matrix is missing or does not match the statements)."""
    n = sum(len(f.statements) for f in facts)
    if matrix is None or matrix.ndim != 2 or matrix.shape[0] != n or not matrix.shape[1]:
        return list(facts)
    out, i = [], 0
    for f in facts:
        k = len(f.statements)
        out.append(f.with_vectors(np.asarray(matrix[i:i + k], dtype=np.float32)))
        i += k
    return out


def known_vectors(facts: Iterable) -> dict[str, np.ndarray]:
    """text -> vector over facts that carry vectors (one tenant's rows)."""
    out: dict[str, np.ndarray] = {}
    for f in facts:
        vs = getattr(f, "vectors", None)
        if vs is None:
            continue
        for s, v in zip(f.statements, vs):
            t = statement_text(s)
            if t and t not in out and np.any(v):
                out[t] = np.asarray(v, np.float32)
    return out


def reusing(known: Mapping[str, np.ndarray], fallback: Callable[[], Encode] | None) -> Encode | None:
    """An encoder that takes texts' vectors from ``known`` (a delta's or compaction's
    earlier rows of the same tenant) and encodes only the rest with ``fallback()`` (built
    on first need). None when nothing is known and there is no fallback."""
    if not known and fallback is None:
        return None
    dim = next((v.shape[0] for v in known.values()), 0)
    made: list[Encode] = []

    def encode(texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in texts if t not in known]
        fresh = {}
        if missing:
            if fallback is None:
                raise LookupError("statement text without a stored vector and no embedder to encode it")
            if not made:
                made.append(fallback())
            fresh = dict(zip(missing, np.asarray(made[0](missing), np.float32)))
        rows = [known[t] if t in known else fresh[t] for t in texts]
        return np.stack(rows) if rows else np.zeros((0, dim), np.float32)

    return encode


def clause_similarity(facts: Iterable) -> Callable[[str, str], float] | None:
    """The ``similarity(a_clause, b_clause)`` of :func:`.subjects.same_subject` from the
    vectors the facts carry: a dot product of unit vectors; 0.0 for a text without one
    (a word pair, a clause of a shard built without vectors). None when no fact carries
    vectors: today's lexical rule."""
    row = known_vectors(facts)
    if not row:
        return None

    def similarity(a: str, b: str) -> float:
        va, vb = row.get(a), row.get(b)
        if va is None or vb is None:
            return 0.0
        return float(va @ vb)

    return similarity
