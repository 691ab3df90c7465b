"""A loaded tenant index holds no per-row Python objects until a lookup by id needs them,
and reports its resident size (heap estimate + memory-mapped bytes)."""

import pytest

from quarry.core.embed.embedders import HashingEmbedder
from quarry.core.index.shards import TenantIndex
from quarry.core.ingest.pipeline import build_corpus
from quarry.core.records import Principal, SourceDocument

pytestmark = pytest.mark.unit


def test_lazy_id_maps_and_byte_estimate(tmp_path):
    docs = [SourceDocument(doc_id=f"d{i}", tenant="small", acl=("*",) if i % 2 else ("eng",), doc_type="note",
                           title=f"Doc {i}", text=f"Document {i} about topic{i} and widgets.") for i in range(10)]
    build_corpus(docs, str(tmp_path), HashingEmbedder(dim=64))
    idx = TenantIndex.load(str(tmp_path), "small")
    sh = idx.shards[0]
    assert idx._ids is None and sh._lists == {} and sh._parent_rows is None  # nothing per row yet
    before = idx.heap_bytes
    assert idx.mapped_bytes > 0 and idx.resident_bytes == before + idx.mapped_bytes
    pid = sh.passage_ids[0]
    p = Principal(tenant="small", subject="u", groups=frozenset({"eng"}))
    assert idx.passage(pid, p) is not None and idx._ids is not None
    assert idx.heap_bytes > before  # the id lists and maps, once built, are charged
    assert idx.passage(pid, Principal(tenant="other", subject="u", groups=frozenset({"eng"}))) is None
