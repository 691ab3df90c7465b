"""Tenant-wide row ids: one integer names a (shard, row) of a tenant's live generation, the
delta's shard included. Searches, the evidence graph and second stages pass rows around
by these ids and read passages back with ``TenantIndex.passage_at``."""

from __future__ import annotations

ROW_BITS = 32  # a tenant-wide row id packs (shard << ROW_BITS) | local row


def pack_row(shard: int, row: int) -> int:
    return (shard << ROW_BITS) | row


def unpack_row(gid: int) -> tuple[int, int]:
    return gid >> ROW_BITS, gid & ((1 << ROW_BITS) - 1)
