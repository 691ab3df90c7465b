"""core.lru.LRU: the bounded mapping behind every per-replica cache."""

import threading

import pytest

from quarry.core.lru import LRU

pytestmark = pytest.mark.unit


def test_evicts_least_recently_used_and_reports_it():
    c: LRU[str, int] = LRU(2)
    assert c.put("a", 1) == [] and c.put("b", 2) == []
    assert c.get("a") == 1  # "a" is now the most recent: "b" goes first
    assert c.put("c", 3) == [("b", 2)]
    assert "b" not in c and c.get("b") is None
    assert [k for k, _ in c.items()] == ["a", "c"]


def test_peek_does_not_change_the_order():
    c: LRU[str, int] = LRU(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.peek("a") == 1
    assert c.put("c", 3) == [("a", 1)]


def test_put_replaces_and_refreshes():
    c: LRU[str, int] = LRU(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.put("a", 10) == []
    assert c.put("c", 3) == [("b", 2)]
    assert c.get("a") == 10 and len(c) == 2


def test_zero_capacity_keeps_nothing_and_negative_is_an_error():
    c: LRU[str, int] = LRU(0)
    assert c.put("a", 1) == [("a", 1)] and len(c) == 0
    with pytest.raises(ValueError, match="capacity"):
        LRU(-1)


def test_pop_and_default():
    c: LRU[str, int] = LRU(3)
    c.put("a", 1)
    assert c.pop("a") == 1 and c.pop("a", -1) == -1 and c.get("x", 7) == 7


def test_concurrent_puts_never_exceed_capacity():
    c: LRU[int, int] = LRU(50)
    evicted: list[int] = []

    def work(base: int) -> None:
        for i in range(500):
            evicted.extend(k for k, _ in c.put(base + i, i))
            c.get(base + i // 2)

    threads = [threading.Thread(target=work, args=(n * 1000,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(c) == 50
    assert len(evicted) + len(c) == 2000 and not set(evicted) & {k for k, _ in c.items()}


def test_byte_budget_evicts_least_recently_used_by_size():
    c: LRU[str, bytes] = LRU(100, max_bytes=10, size_of=len)
    c.put("a", b"xxxx")
    c.put("b", b"yyyy")
    assert c.total_bytes == 8
    c.get("a")  # "b" is now the oldest
    assert c.put("c", b"zzzz") == [("b", b"yyyy")]
    assert c.total_bytes == 8 and c.size("c") == 4
    assert c.put("big", b"q" * 50) == [("a", b"xxxx"), ("c", b"zzzz")]  # the newest stays, alone
    assert [k for k, _ in c.items()] == ["big"] and c.total_bytes == 50
    c.pop("big")
    assert c.total_bytes == 0


def test_byte_budget_needs_a_size_function():
    with pytest.raises(ValueError):
        LRU(3, max_bytes=10)
