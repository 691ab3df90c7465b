"""Shared oracle helpers for the freshness tests: the final sources a change log implies
(written independently of ``core.changes.fold``), a full rebuild from them, and everything a
principal can see through an index's lookups and legs."""

from __future__ import annotations

import datetime as dt
import tempfile

from quarry.core.changes.log import Change, validate_change
from quarry.core.embed.embedders import HashingEmbedder
from quarry.core.index.shards import TenantIndex
from quarry.core.ingest.pipeline import build_corpus
from quarry.core.records import Principal, SourceDocument
from quarry.core.search.retrieval import dense_leg, lexical_leg

EMB = HashingEmbedder(dim=32)
WORDS = ["settlement", "refund", "cutover", "window", "approval", "ledger", "invoice", "quota", "alpha", "beta"]
GROUPS = ["a", "b", "c"]
PRINCIPALS = [Principal(tenant="t", subject="u", groups=frozenset(g)) for g in
              [(), ("a",), ("b",), ("c",), ("a", "b"), ("a", "b", "c")]]
QUERIES = ["settlement refund", "cutover window approval", "ledger invoice", "quota alpha beta"]


def doc(doc_id: str, version: str, words: list[str], acl: tuple[str, ...], sections: int = 1) -> SourceDocument:
    body = "\n\n".join(f"## Part {i}\n\n" + " ".join(words[i:] + words[:i]) + f" {doc_id} part {i}."
                       for i in range(sections))
    return SourceDocument(doc_id=doc_id, version=version, tenant="t", title=f"Doc {doc_id}", text=body, acl=acl)


def final_sources(base: list[SourceDocument], changes: list[Change]) -> list[SourceDocument]:
    """The oracle's semantics, written independently of the fold: apply every change in
    (at, change_id) order to a dict of source documents."""
    src = {(d.doc_id, d.version): d for d in base}
    for c in sorted(changes, key=lambda c: (c.at, c.change_id)):
        keys = [k for k in src if k[0] == c.doc_id and (c.version is None or k[1] == c.version)]
        if c.op == "upsert":
            src[(c.doc_id, c.version)] = c.document
        elif c.op == "delete":
            for k in keys:
                del src[k]
        else:
            for k in keys:
                src[k] = src[k].model_copy(update={"acl": c.acl})
    return list(src.values())


def view(index: TenantIndex, p: Principal, ids: set[str], parent_ids: set[str], doc_ids: set[str]):
    """Everything ``p`` can read through the index's lookups and legs."""
    passages = {pid: (x.text, x.context) for pid in ids if (x := index.passage(pid, p)) is not None}
    parents = {pid: s.text for pid in parent_ids if (s := index.parent(pid, p)) is not None}
    docs = {d: sorted(x.passage_id for x in index.document(d, p)) for d in doc_ids}
    masks = index.masks(p)
    pid_of = lambda gid: index.shards[gid >> 32].passage_ids[gid & 0xFFFFFFFF]  # noqa: E731
    legs = []
    for q in QUERIES:
        lex = lexical_leg(index, masks, q, 1000, 0.0)
        den = dense_leg(index, masks, EMB.encode([q])[0], 1000, -1.0)
        legs.append((sorted(map(pid_of, lex.rows)), sorted(map(pid_of, den.rows))))
    return passages, parents, docs, legs


def all_ids(*indexes: TenantIndex):
    ids, parents, docs = set(), set(), set()
    for ix in indexes:
        for sh in ix.shards:
            ids.update(sh.passage_ids)
            parents.update(sh.parent_ids())
            docs.update(sh.doc_ids)
    return ids, parents, docs


def assert_same_view(got: TenantIndex, want: TenantIndex):
    ids, parents, docs = all_ids(got, want)
    for p in PRINCIPALS:
        assert view(got, p, ids, parents, docs) == view(want, p, ids, parents, docs), p.groups


def rebuild(docs: list[SourceDocument]) -> TenantIndex:
    root = tempfile.mkdtemp(prefix="quarry-oracle-")
    if not docs:
        docs = [doc("placeholder", "1", ["zzz"], ("nobody",))]  # an empty tenant cannot be built
    build_corpus(docs, root, EMB)
    return TenantIndex.load(root, "t")


BASE = [doc(f"d{i}", "1", WORDS[i:] + WORDS[:i], acl, sections=1 + i % 2)
        for i, acl in enumerate([("a",), ("b",), ("*",), ("a", "c"), ("c",), ("b",)])]


def ch(op, doc_id, at, **kw) -> Change:
    return validate_change({"op": op, "tenant": "t", "doc_id": doc_id,
                            "at": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=at), **kw})
