"""Per-tenant shard indexes: bm25s, FAISS, passages, filter columns, and their layout on any fsspec root."""
