"""StorageCache's bookkeeping (shared/storage_cache.py): what memory may answer, and when a read
from storage may be kept."""

from __future__ import annotations

from types import SimpleNamespace

from shared.storage import Entry
from shared.storage_cache import MISS, OVERHEAD, StorageCache
from shared.storage_feed import standalone


class Link:
    """The connection token the cache checks on every hit: bump it to "reconnect"."""

    def __init__(self) -> None:
        self.token = 0
        self.lost = 0

    def __call__(self) -> int:
        return self.token

    def on_lost(self) -> None:
        self.lost += 1


def cache(**bounds: int) -> tuple[StorageCache, Link]:
    link = Link()
    c = StorageCache(link, link.on_lost, **bounds)
    c.activate(link.token)
    return c, link


def fill(c: StorageCache, key: str, entry: Entry | None) -> None:
    f = c.begin(key)
    assert f is not None
    c.end(f, entry)


def test_a_fill_answers_later_reads_and_an_invalidation_drops_it() -> None:
    c, _ = cache()
    e = Entry("a/b", b"v", 3)
    assert c.lookup("a.b") is MISS
    fill(c, "a.b", e)
    assert c.lookup("a.b") == e
    c.invalidate("a.b")
    assert c.lookup("a.b") is MISS


def test_absent_keys_are_cached_as_none() -> None:
    c, _ = cache()
    fill(c, "gone", None)
    assert c.lookup("gone") is None
    c.invalidate("gone")
    assert c.lookup("gone") is MISS


def test_a_fill_in_flight_across_an_invalidation_keeps_nothing() -> None:
    c, _ = cache()
    old = Entry("k", b"old", 1)
    racing = c.begin("k")
    other = c.begin("other")
    assert racing is not None and other is not None
    c.invalidate("k")  # a write of k landed while the read was in flight
    c.end(racing, old)
    assert c.lookup("k") is MISS
    c.end(other, Entry("other", b"x", 2))  # a write of another key does not matter
    assert c.lookup("other") == Entry("other", b"x", 2)
    fill(c, "k", Entry("k", b"new", 4))  # a read that started afterwards is kept
    assert c.lookup("k") == Entry("k", b"new", 4)


def test_overlapping_fills_of_one_key_each_see_the_invalidation() -> None:
    c, _ = cache()
    first, second = c.begin("k"), c.begin("k")
    assert first is not None and second is not None
    c.invalidate("k")
    third = c.begin("k")  # started after the write: may keep its answer
    assert third is not None
    c.end(first, Entry("k", b"old", 1))
    c.end(second, Entry("k", b"old", 1))
    assert c.lookup("k") is MISS
    c.end(third, Entry("k", b"new", 2))
    assert c.lookup("k") == Entry("k", b"new", 2)


def test_a_failed_read_keeps_nothing() -> None:
    c, _ = cache()
    f = c.begin("k")
    assert f is not None
    c.end(f, None, keep=False)
    assert c.lookup("k") is MISS


def test_turning_off_and_on_drops_everything_and_fills_in_flight() -> None:
    c, link = cache()
    fill(c, "a", Entry("a", b"1", 1))
    racing = c.begin("b")
    assert racing is not None
    c.deactivate()
    assert c.begin("c") is None and c.lookup("a") is MISS
    c.activate(link.token)
    c.end(racing, Entry("b", b"2", 2))
    assert c.lookup("a") is MISS and c.lookup("b") is MISS and len(c) == 0


def test_a_new_connection_turns_the_cache_off_until_it_is_checked_again() -> None:
    c, link = cache()
    fill(c, "a", Entry("a", b"1", 1))
    racing = c.begin("b")
    assert racing is not None
    link.token = 1  # reconnected: invalidations sent meanwhile were lost
    assert c.lookup("a") is MISS
    assert not c.active and link.lost == 1
    c.end(racing, Entry("b", b"2", 2))
    assert c.begin("b") is None and link.lost == 1
    c.activate(link.token)
    assert c.lookup("b") is MISS and len(c) == 0
    link.token = -1  # disconnected
    fill_attempt = c.begin("b")
    assert fill_attempt is None and link.lost == 2


def test_bounds_drop_the_oldest_entries() -> None:
    c, _ = cache(max_entries=3)
    for i in range(5):
        fill(c, f"k{i}", Entry(f"k{i}", b"v", i))
    assert [c.lookup(f"k{i}") is MISS for i in range(5)] == [True, True, False, False, False]

    c, _ = cache(max_bytes=640_000)
    for i in range(700):
        fill(c, f"k{i:03d}", Entry(f"k{i:03d}", b"v" * 1000, i))
    per = 4 + OVERHEAD + 1000
    assert c.nbytes <= 640_000 and len(c) == 640_000 // per
    assert c.lookup("k000") is MISS and c.lookup("k699") is not MISS


def test_a_value_too_big_for_its_share_is_not_kept() -> None:
    c, _ = cache(max_bytes=64 * 1024)
    fill(c, "big", Entry("big", b"x" * 2048, 1))
    fill(c, "small", Entry("small", b"x" * 100, 2))
    assert c.lookup("big") is MISS and c.lookup("small") is not MISS


def test_refilling_a_key_replaces_its_bytes() -> None:
    c, _ = cache()
    fill(c, "k", Entry("k", b"x" * 500, 1))
    fill(c, "k", Entry("k", b"y" * 10, 2))
    assert c.nbytes == len("k") + OVERHEAD + 10 and len(c) == 1


def test_only_a_lone_server_is_standalone() -> None:
    def nc(**info: object) -> SimpleNamespace:
        return SimpleNamespace(_server_info=info)

    assert standalone(nc(server_id="x", jetstream=True))
    assert not standalone(nc(cluster="c1"))
    assert not standalone(nc(connect_urls=["10.0.0.2:4222"]))
