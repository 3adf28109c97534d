"""The handler cache without a broker: the LRU and TTL core, the SQLite tier, the facade's rules and errors."""

from __future__ import annotations

import asyncio
import threading

import pytest
from prometheus_client import REGISTRY
from pydantic import BaseModel

import knarr
from knarr.cache import CacheDisabledError, CacheError
from knarr.cache.entries import Entry
from knarr.cache.handler_cache import HandlerCache
from knarr.cache.memory import MemoryTier
from knarr.cache.shared import Outage
from knarr.cache.store import SqliteStore, db_path
from knarr.config import ConfigError, config_from_dict
from knarr.config.cache import CacheConfig

SINK = {"filesystem": {"out": {"base_path": "/tmp/knarr-out"}}}


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def entry(value: str, expires_at: float | None = None) -> Entry:
    return Entry(value, f'"{value}"', expires_at)


# --- the memory tier ------------------------------------------------------------------------

def test_the_memory_tier_evicts_the_least_recently_used_entry_past_its_bound():
    memory = MemoryTier(2)
    memory.put("a", entry("1"))
    memory.put("b", entry("2"))
    memory.get("a", 0.0)  # a is now more recent than b
    assert memory.put("c", entry("3")) == ["b"]
    assert memory.get("b", 0.0) is None
    assert [memory.get(k, 0.0).value for k in ("a", "c")] == ["1", "3"]
    assert len(memory) == 2


def test_an_expired_entry_is_gone_from_memory_at_its_expiry_time():
    memory = MemoryTier(10)
    memory.put("a", entry("1", expires_at=100.0))
    assert memory.get("a", 99.9).value == "1"
    assert memory.get("a", 100.0) is None
    assert len(memory) == 0


def test_membership_does_not_make_an_entry_recently_used():
    memory = MemoryTier(2)
    memory.put("a", entry("1"))
    memory.put("b", entry("2"))
    assert memory.contains("a", 0.0)
    assert memory.put("c", entry("3")) == ["a"]


# --- the outage state -----------------------------------------------------------------------

def test_an_outage_opens_once_skips_the_tier_until_retry_and_closes_on_the_next_answer():
    outage = Outage(retry_after=5.0)
    assert outage.usable(0.0)
    assert outage.failed(10.0) is True
    assert outage.failed(11.0) is False  # the same outage: not logged again
    assert not outage.usable(15.9)
    assert outage.usable(16.0)
    assert outage.answered(17.0) == 7.0
    assert outage.answered(18.0) is None


# --- the SQLite tier ------------------------------------------------------------------------

def test_a_second_store_on_the_same_file_reads_what_the_first_wrote(tmp_path):
    path = db_path(str(tmp_path), "worker/0")
    assert path.name == "worker_0-cache.db"
    first = SqliteStore(path)
    first.open()
    first.write([("a", '"1"', None), ("b", '"2"', 50.0), ("c", '"3"', None)], now=10.0)
    first.write([("c", None, None)], now=11.0)
    first.close()
    second = SqliteStore(path)
    second.open()
    assert second.read("a", now=12.0) == ('"1"', None)
    assert second.read("b", now=60.0) is None  # expired
    assert second.read("c", now=12.0) is None  # deleted
    second.close()


def test_a_write_drops_the_rows_that_expired(tmp_path):
    store = SqliteStore(db_path(str(tmp_path), "w"))
    store.open()
    store.write([("old", '"x"', 5.0), ("new", '"y"', 500.0)], now=1.0)
    store.write([], now=10.0)
    assert store.count() == 1
    store.close()


# --- the facade -----------------------------------------------------------------------------

def cache_config(tmp_path=None, **fields) -> CacheConfig:
    return CacheConfig(enabled=True, db_dir=str(tmp_path) if tmp_path else "", **fields)


async def test_an_entry_expires_after_its_ttl_in_memory_and_in_sqlite(tmp_path):
    clock = Clock()
    cache = HandlerCache(cache_config(tmp_path), "w", clock=clock)
    await cache.open()
    cache.set("k", "v", ttl=10)
    await cache.flush()
    assert cache.peek("k") == "v"
    clock.now += 10
    assert cache.peek("k") is None
    assert await cache.get("k") is None  # SQLite does not answer with an expired row either
    await cache.close()


async def test_set_without_ttl_takes_the_configured_default(tmp_path):
    clock = Clock()
    cache = HandlerCache(cache_config(default_ttl_seconds=30), "w", clock=clock)
    await cache.open()
    cache.set("k", {"n": 1})
    clock.now += 29
    assert cache.peek("k") == {"n": 1}
    clock.now += 1
    assert cache.peek("k") is None
    await cache.close()


async def test_memory_holds_at_most_max_entries_and_counts_evictions_while_sqlite_keeps_them(tmp_path):
    cache = HandlerCache(cache_config(tmp_path, max_entries=3), "w")
    await cache.open()
    before = sample("knarr_cache_evictions_total")
    for i in range(5):
        cache.set(f"k{i}", i)
    assert len(cache.memory) == 3
    assert sample("knarr_cache_evictions_total") - before == 2
    assert cache.peek("k0") is None
    hits = sample("knarr_cache_hits_total", tier="memory")
    assert await cache.get("k0") == 0  # evicted before the flush: still pending, still there
    await cache.flush()
    assert await cache.get("k1") == 1  # evicted, flushed: SQLite answers
    assert sample("knarr_cache_hits_total", tier="sqlite") >= 1
    assert sample("knarr_cache_hits_total", tier="memory") - hits == 1
    await cache.close()


async def test_a_restarted_cache_finds_its_entries_in_sqlite_and_peek_hits_them_after_the_warm_start(tmp_path):
    first = HandlerCache(cache_config(tmp_path), "worker-1")
    await first.open()
    first.set("kept", "yes")
    first.set("gone", "no")
    first.delete("gone")
    await first.close()  # flushes

    second = HandlerCache(cache_config(tmp_path), "worker-1")
    await second.open()
    assert second.peek("kept") == "yes"
    assert await second.get("gone") is None
    await second.close()

    cold = HandlerCache(cache_config(tmp_path, warm_start=False), "worker-1")
    await cold.open()
    assert cold.peek("kept") is None
    assert await cold.get("kept") == "yes"
    assert cold.peek("kept") == "yes"  # the SQLite hit is kept in memory
    await cold.close()


async def test_sqlite_is_written_on_the_caches_own_thread_not_the_event_loop(tmp_path):
    cache = HandlerCache(cache_config(tmp_path), "w")
    await cache.open()
    threads = []
    write = cache.store.write
    cache.store.write = lambda *a: (threads.append(threading.current_thread()), write(*a))[1]
    cache.set("k", "v")
    await cache.flush()
    assert threads and threads[0] is not threading.main_thread()
    assert threads[0].name.startswith("knarr-cache")
    await cache.close()


async def test_the_flush_loop_writes_on_its_interval_without_being_asked(tmp_path):
    cache = HandlerCache(cache_config(tmp_path, flush_interval_seconds=0.05), "w")
    await cache.open()
    cache.set("k", "v")
    for _ in range(200):
        if not cache._dirty:
            break
        await asyncio.sleep(0.05)
    reader = SqliteStore(cache.store.path)
    reader.open()
    text, _expires = reader.read("k", now=0.0)
    assert text == '"v"'
    reader.close()
    await cache.close()


async def test_a_failed_flush_keeps_the_changes_and_counts_the_error(tmp_path):
    cache = HandlerCache(cache_config(tmp_path), "w")
    await cache.open()
    errors = sample("knarr_cache_flush_errors_total")
    real = cache.store.write

    def full(*args):
        raise OSError(28, "No space left on device")

    cache.store.write = full
    cache.set("k", "v")
    await cache.flush()
    assert sample("knarr_cache_flush_errors_total") - errors == 1
    assert "k" in cache._dirty
    cache.store.write = real
    await cache.flush()
    assert not cache._dirty
    await cache.close()


async def test_a_cached_value_becomes_a_precomputed_result():
    cache = HandlerCache(cache_config(), "w")
    await cache.open()
    cache.set("text", "out\n")
    cache.set("data", {"score": 3})
    assert await cache.precomputed("text") == knarr.PrecomputedResult(stdout="out\n")
    assert (await cache.precomputed("data")).stdout == '{"score":3}'
    assert await cache.precomputed("missing") is None
    await cache.close()


class Score(BaseModel):
    value: int


async def test_a_pydantic_model_is_stored_as_json_and_read_back_as_the_model():
    cache = HandlerCache(cache_config(), "w")
    await cache.open()
    cache.set("s", Score(value=7))
    assert cache.peek("s") == {"value": 7}
    assert await cache.get("s", as_type=Score) == Score(value=7)
    await cache.close()


@pytest.mark.parametrize(("call", "message"), [
    (lambda c: c.set("k", None), "None cannot be stored"),
    (lambda c: c.set("k", object()), "not JSON"),
    (lambda c: c.set("k", "x" * 100), "cache.max_value_bytes"),
    (lambda c: c.set("k", 1, ttl=0), "ttl must be a number of seconds above 0"),
    (lambda c: c.set("k", 1, scope="everywhere"), "scope must be one of local, cluster, global"),
    (lambda c: c.peek(""), "non-empty strings"),
], ids=["none", "not-json", "too-big", "ttl", "scope", "empty-key"])
def test_a_misuse_of_the_cache_raises_an_error_saying_what_to_do(call, message):
    cache = HandlerCache(cache_config(max_value_bytes=50), "w")
    with pytest.raises(CacheError, match=message):
        call(cache)


def test_a_handler_without_the_cache_enabled_is_told_how_to_enable_it():
    class Handler(knarr.BaseHandler):
        pass

    with pytest.raises(CacheDisabledError, match="cache.enabled: true"):
        Handler().cache.peek("k")
    with pytest.raises(CacheDisabledError, match="KNARR_CACHE__ENABLED=true"):
        Handler().cache.set("k", 1)


async def test_an_unwritable_db_dir_stops_startup_naming_the_key(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = HandlerCache(cache_config(blocker), "w")
    with pytest.raises(ConfigError, match="cache.db_dir: cannot open"):
        await cache.open()


@pytest.mark.parametrize(("key", "value", "bound"), [
    ("max_entries", 10_000_001, "10000000"),
    ("flush_interval_seconds", 3_601, "3600"),
    ("default_ttl_seconds", 365 * 86_400 + 1, "31536000"),
    ("max_value_bytes", 64 * 1024 * 1024 + 1, "67108864"),
])
def test_cache_numbers_past_their_bound_are_refused_naming_the_key(key, value, bound):
    with pytest.raises(ConfigError) as err:
        config_from_dict({"sinks": SINK, "cache": {key: value}})
    assert f"cache.{key}:" in str(err.value) and bound in str(err.value)


def test_a_shared_tier_without_a_url_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="cache.shared.url"):
        config_from_dict({"sinks": SINK, "cache": {"enabled": True, "shared": {}}})


async def test_a_shared_scope_without_a_shared_tier_keeps_the_entry_on_this_worker():
    cache = HandlerCache(cache_config(), "w")
    await cache.open()
    cache.set("k", 1, scope="cluster")
    cache.set("j", 2, scope="cluster")
    assert cache.peek("k") == 1 and cache._unshared == {knarr.CacheScope.CLUSTER}
    await cache.close()
