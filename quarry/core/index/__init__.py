"""Per-tenant shard indexes: building shards and generations (``build``), the tenant-wide
BM25 leg (``lexical``), the typed manifest (``manifest``), loading and searching a live
generation (``shards``, ``rows``, ``filters``, ``dense_gpu``), and the layout on any fsspec
root (``layout``). Imports only ``quarry.core``."""
