"""An ``s3://`` index root end to end, against a real S3 API (the session moto server,
reached through fsspec/s3fs exactly as on a cluster): ``quarry build`` on Spark ->
publish -> ``quarry apply-changes`` -> ``quarry compact`` -> ``quarry reconcile``; after
each step the tenant's view (what every principal can read and retrieve) equals a local
rebuild from the sources that step implies. Publishing opens no shard file on the driver
(each shard task verified its own upload); a missing or resized object still blocks it.
Serving from this kind of root (search, fetch, traces, across nodes) is
``tests/serve/test_multinode.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.freshness import BASE, EMB, assert_same_view, ch, doc, final_sources, rebuild

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1200)]


def _write_docs(path: Path, docs) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(d.model_dump_json() + "\n" for d in docs))
    return path


def _count_shard_opens(monkeypatch) -> list[str]:
    """Every path the driver opens through s3fs (or the local fs) that lies in a shard folder."""
    import s3fs
    from fsspec.implementations.local import LocalFileSystem

    opened: list[str] = []
    for cls in (s3fs.S3FileSystem, LocalFileSystem):
        orig = cls._open

        def spy(self, path, *a, _orig=orig, **kw):
            if "/shard-" in str(path):
                opened.append(str(path))
            return _orig(self, path, *a, **kw)

        monkeypatch.setattr(cls, "_open", spy)
    return opened


def test_s3_root_build_publish_apply_compact_reconcile(spark, s3_server, tmp_path, monkeypatch):
    from quarry.core.index import layout
    from quarry.core.index.manifest import publish, read_manifest
    from quarry.core.index.shards import TenantIndex
    from quarry.jobs.apply_changes import ApplySettings, run_apply
    from quarry.jobs.build import run_build
    from quarry.jobs.build_settings import BuildSettings
    from quarry.jobs.compact import compact_tenant
    from quarry.jobs.reconcile import reconcile

    root = s3_server.uri("e2e", "idx")
    fs = s3_server.fs()
    cache = str(tmp_path / "cache")
    src = _write_docs(tmp_path / "src" / "docs.jsonl", BASE)

    # build on Spark into the bucket, not published yet: publish is checked on its own below
    rep = run_build(BuildSettings(source=str(src.parent), index_root=root, embedder="hashing:32", contextualizer="none",
                                  shard_docs=3, partitions=2, quiet=True, publish=False), spark=spark)
    assert rep.tenants["t"].generation == 1 and not rep.published
    m = read_manifest(root, "t", 1)
    assert len(m.shards) >= 2 and all(s.sizes and set(s.sizes) == set(s.checksums) for s in m.shards)
    objs = {o: fs.info(o)["size"] for o in fs.find(f"{s3_server.bucket}/e2e/idx/t/gen-1")}
    for s in m.shards:  # what each shard task reported is what the object store holds
        for rel, size in s.sizes.items():
            assert objs[f"{s3_server.bucket}/e2e/idx/t/gen-1/shard-{s.shard}/{rel}"] == size
    assert layout.current_generation(root, "t") is None

    opened = _count_shard_opens(monkeypatch)
    publish(root, "t", 1)
    assert opened == [] and layout.current_generation(root, "t") == 1  # no shard byte through the driver
    monkeypatch.undo()
    assert_same_view(TenantIndex.load(root, "t", cache_dir=cache), rebuild(BASE))

    # apply-changes: the change log is a source (local, like --source); the delta goes to S3
    changes = [
        ch("acl", "d0", 1, acl=["b"]),
        ch("delete", "d1", 2),
        ch("upsert", "d9", 3, document=doc("d9", "1", ["quota", "ledger", "fresh", "marker"], ("a",)).model_dump()),
    ]
    log = tmp_path / "changes" / "part-0.jsonl"
    log.parent.mkdir()
    log.write_text("".join(c.model_dump_json(exclude_none=True) + "\n" for c in changes))
    arep = run_apply(ApplySettings(changes=str(log.parent), index_root=root, quiet=True, partitions=2), spark=spark)
    assert (arep.tenants["t"].applied, arep.tenants["t"].delta) == (3, 1)
    assert fs.exists(f"{s3_server.bucket}/e2e/idx/t/DELTA")
    after = final_sources(BASE, changes)
    assert_same_view(TenantIndex.load(root, "t", cache_dir=cache), rebuild(after))

    # compact: base + delta folded into gen-2 on S3, published
    out = compact_tenant(root, "t")
    assert layout.current_generation(root, "t") == 2, out
    assert_same_view(TenantIndex.load(root, "t", cache_dir=cache), rebuild(after))

    # reconcile: the source of truth drops d2 and adds d8; repaired through Spark on S3
    truth = [d for d in after if d.doc_id != "d2"] + [doc("d8", "1", ["invoice", "alpha", "truth"], ("*",))]
    truth_dir = _write_docs(tmp_path / "truth" / "docs.jsonl", truth).parent
    rrep = reconcile(str(truth_dir), root, apply="spark", spark=spark)
    assert rrep["repaired"] and rrep["tenants"]["t"]["repairs"] >= 2, json.dumps(rrep)[:2000]
    assert rrep["repair_log"].startswith("s3://")
    assert_same_view(TenantIndex.load(root, "t", cache_dir=str(tmp_path / "cache2")), rebuild(truth))
    again = reconcile(str(truth_dir), root, dry_run=True)
    assert again["tenants"]["t"]["repairs"] == 0


def test_publish_refuses_a_missing_or_resized_object(s3_server):
    from quarry.core.index import layout
    from quarry.core.index.manifest import publish, read_manifest, write_manifest
    from quarry.core.ingest.pipeline import build_corpus

    root = s3_server.uri("refuse", "idx")
    fs = s3_server.fs()
    build_corpus(BASE, root, EMB)  # gen-1, live
    m = read_manifest(root, "t", 1)
    base = f"{s3_server.bucket}/refuse/idx/t"
    fs.copy(f"{base}/gen-1/shard-0", f"{base}/gen-2/shard-0", recursive=True)  # an unpublished gen-2
    write_manifest(root, m.model_copy(update={"generation": 2}))
    victim = f"{base}/gen-2/shard-0/passages.parquet"
    data = fs.cat(victim)
    fs.rm(victim)
    with pytest.raises(RuntimeError, match="missing passages.parquet"):
        publish(root, "t", 2)
    fs.pipe(victim, data + b"x")
    with pytest.raises(RuntimeError, match="bytes"):
        publish(root, "t", 2)
    assert layout.current_generation(root, "t") == 1  # nothing served changed
    fs.pipe(victim, data)
    publish(root, "t", 2)
    assert layout.current_generation(root, "t") == 2 and m.shards[0].sizes["passages.parquet"] == len(data)
