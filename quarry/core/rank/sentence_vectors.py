"""Sentence vectors per passage for the learned ranker's sentence features
(``sent_max_sim``, ``sent_max_sim_rel``, ``title_sim``; :mod:`quarry.core.rank.features`).

Embedding every sentence is the expensive part of those features, so :class:`SentenceVectors`
caches them by passage id, in memory and in an ``.npz`` file persisted beside the model
(one generation's passages, one embedder).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from quarry.core.records import Passage
from quarry.core.text.units import heading_text, split_sentences

if TYPE_CHECKING:  # pragma: no cover
    from quarry.core.embed.embedders import Embedder

__all__ = ["SENTENCE_CAP", "SentenceVectors"]

SENTENCE_CAP = 64  # sentences per passage embedded for the sentence feature


class SentenceVectors:
    """Sentence vectors per passage, cached by passage id.

    For each passage the units are its title + heading path (unit 0, possibly empty) and
    up to :data:`SENTENCE_CAP` sentences of its text. Vectors are L2-normalised, so a dot
    product is a cosine. ``save``/``load`` persist the cache as one ``.npz`` (ids, offsets,
    a title flag and the stacked vectors); a cache belongs to one generation's passages and
    one embedder (its name is stored and checked on load).
    """

    def __init__(self, embedder: "Embedder", max_queries: int = 4096, max_passages: int | None = None):
        self.embedder = embedder
        self._vecs: dict[str, tuple[np.ndarray | None, np.ndarray]] = {}  # id -> (title vec, sentence vecs)
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._max_queries = max_queries
        self._max_passages = max_passages  # None: unbounded (training); serving bounds it
        self._lock = threading.Lock()
        self.encoded_units = 0  # units embedded by this object (cache misses), for reports

    def __len__(self) -> int:
        return len(self._vecs)

    def __contains__(self, passage_id: str) -> bool:
        return passage_id in self._vecs

    @staticmethod
    def units(p: Passage) -> tuple[str, list[str]]:
        sents = [s for s in split_sentences(p.text) if s.strip()][:SENTENCE_CAP]
        if not sents:
            sents = [p.text.strip() or p.passage_id]
        return heading_text(p.envelope.title, p.heading_path), sents

    def ensure(self, passages: Iterable[Passage], batch: int = 4096) -> None:
        """Embed every passage not in the cache (in batches of units)."""
        todo: dict[str, Passage] = {}
        for p in passages:
            if p.passage_id not in self._vecs and p.passage_id not in todo:
                todo[p.passage_id] = p
        if not todo:
            return
        items = list(todo.values())
        for start in range(0, len(items), max(1, batch // 10)):
            chunk = items[start : start + max(1, batch // 10)]
            texts: list[str] = []
            spans = []
            for p in chunk:
                head, sents = self.units(p)
                t0 = len(texts)
                if head:
                    texts.append(head)
                texts.extend(sents)
                spans.append((p.passage_id, bool(head), t0, len(texts)))
            vecs = np.asarray(self.embedder.encode(texts), dtype=np.float32)
            self.encoded_units += len(texts)
            with self._lock:
                for pid, has_head, a, b in spans:
                    tv = vecs[a] if has_head else None
                    self._vecs[pid] = (tv, vecs[a + 1 if has_head else a : b])
                self._evict()

    def _evict(self) -> None:
        if self._max_passages is not None:
            while len(self._vecs) > self._max_passages:  # oldest inserted first
                self._vecs.pop(next(iter(self._vecs)))

    def query(self, query: str) -> np.ndarray:
        v = self._queries.get(query)
        if v is None:
            v = np.asarray(self.embedder.encode([query])[0], dtype=np.float32)
            with self._lock:
                self._queries[query] = v
                while len(self._queries) > self._max_queries:
                    self._queries.popitem(last=False)
        return v

    def set_query_vectors(self, queries: Mapping[str, np.ndarray]) -> None:
        """Seed query vectors computed elsewhere (e.g. in one batch)."""
        for q, v in queries.items():
            self._queries[q] = np.asarray(v, dtype=np.float32)

    def similarities(self, query: str, passages: Sequence[Passage]) -> tuple[list[float], list[float]]:
        """(max sentence cosine, title cosine) per passage; title cosine 0 without a title."""
        self.ensure(passages)
        qv = self.query(query)
        smax, tsim = [], []
        got = {p.passage_id: self._vecs.get(p.passage_id) for p in passages}
        if any(v is None for v in got.values()):  # evicted by a concurrent call: embed again
            missing = [p for p in passages if got[p.passage_id] is None]
            self.ensure(missing)
            got.update({p.passage_id: self._vecs.get(p.passage_id) for p in missing})
        for p in passages:
            tv, sv = got[p.passage_id]
            smax.append(float((sv @ qv).max()) if len(sv) else 0.0)
            tsim.append(float(tv @ qv) if tv is not None else 0.0)
        return smax, tsim

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        ids = sorted(self._vecs)
        dim = int(getattr(self.embedder, "dim", 0))
        for tv, sv in self._vecs.values():
            dim = sv.shape[1]
            break
        titles, sents, offsets, has_title = [], [], [0], []
        for pid in ids:
            tv, sv = self._vecs[pid]
            has_title.append(tv is not None)
            titles.append(tv if tv is not None else np.zeros(dim, np.float32))
            sents.append(sv)
            offsets.append(offsets[-1] + len(sv))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp.npz")
        np.savez(
            tmp,
            ids=np.array(ids, dtype=object).astype(str),
            offsets=np.array(offsets, dtype=np.int64),
            has_title=np.array(has_title, dtype=bool),
            titles=np.stack(titles) if titles else np.zeros((0, dim), np.float32),
            sentences=np.concatenate(sents) if sents else np.zeros((0, dim), np.float32),
            embedder=np.array(getattr(self.embedder, "name", "unknown")),
        )
        tmp.replace(path)
        return path

    def load(self, path: str | Path) -> int:
        """Merge a saved cache; returns how many passages it added. A cache written by a
        different embedder is ignored (returns 0)."""
        path = Path(path)
        if not path.is_file():
            return 0
        with np.load(path, allow_pickle=False) as z:
            if str(z["embedder"]) != getattr(self.embedder, "name", "unknown"):
                return 0
            ids, offsets, has_title = z["ids"], z["offsets"], z["has_title"]
            titles, sents = z["titles"], z["sentences"]
        n = 0
        with self._lock:
            for i, pid in enumerate(ids.tolist()):
                if pid in self._vecs:
                    continue
                self._vecs[pid] = (titles[i] if has_title[i] else None, sents[offsets[i] : offsets[i + 1]])
                n += 1
            self._evict()
        return n
