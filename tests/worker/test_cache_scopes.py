"""The shared tier's scopes on a real Redis: who sees an entry, for how long, and what delete removes."""

from __future__ import annotations

import asyncio


from knarr.cache.handler_cache import HandlerCache
from knarr.config.cache import CacheConfig
from tests.services.redis import fresh_prefix, read_keys


def config(url: str, prefix: str) -> CacheConfig:
    return CacheConfig(enabled=True, shared={"url": url, "key_prefix": prefix})


async def opened(url: str, prefix: str, worker: str, cluster: str) -> HandlerCache:
    cache = HandlerCache(config(url, prefix), worker, cluster)
    await cache.open()
    return cache


async def settled(cache: HandlerCache) -> None:
    """Wait until the writer task has sent what is queued."""
    for _ in range(200):
        if not cache.shared._pending:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)


async def test_cluster_entries_reach_the_same_cluster_global_ones_everyone_and_local_ones_nobody(redis_url):
    prefix = fresh_prefix("scope")
    writer = await opened(redis_url, prefix, "w1", "blue")
    writer.set("c", "cluster-value", scope="cluster")
    writer.set("g", "global-value", scope="global")
    writer.set("l", "local-value")
    await settled(writer)
    same = await opened(redis_url, prefix, "w2", "blue")
    other = await opened(redis_url, prefix, "w3", "green")
    try:
        assert [await same.get(k) for k in ("c", "g", "l")] == ["cluster-value", "global-value", None]
        assert [await other.get(k) for k in ("c", "g", "l")] == [None, "global-value", None]
        assert sorted(read_keys(redis_url, prefix)) == [f"{prefix}c:blue:c", f"{prefix}g:g"]
    finally:
        for cache in (writer, same, other):
            await cache.close()


async def test_a_shared_entry_keeps_its_ttl_in_redis_and_in_the_reader_memory(redis_url):
    prefix = fresh_prefix("ttl")
    writer = await opened(redis_url, prefix, "w1", "blue")
    writer.set("k", {"n": 1}, ttl=120, scope="cluster")
    await settled(writer)
    reader = await opened(redis_url, prefix, "w2", "blue")
    try:
        [(value, ttl)] = read_keys(redis_url, prefix).values()
        assert value == '{"n":1}' and 110 <= ttl <= 120
        assert await reader.get("k") == {"n": 1}
        expires = reader.memory.get("k", 0.0).expires_at
        assert expires is not None and 110 <= expires - writer.clock() <= 121
    finally:
        await writer.close()
        await reader.close()


async def test_delete_removes_the_entry_from_the_shared_tier(redis_url):
    prefix = fresh_prefix("del")
    cache = await opened(redis_url, prefix, "w1", "blue")
    cache.set("k", "v", scope="global")
    await settled(cache)
    assert read_keys(redis_url, prefix)
    assert cache.delete("k") is True
    await settled(cache)
    assert read_keys(redis_url, prefix) == {}
    await cache.close()


async def test_writes_queued_at_shutdown_are_sent_before_the_cache_closes(redis_url):
    prefix = fresh_prefix("close")
    cache = await opened(redis_url, prefix, "w1", "blue")
    for i in range(50):
        cache.set(f"k{i}", i, scope="cluster")
    await cache.close()
    assert len(read_keys(redis_url, prefix)) == 50


async def test_an_unreachable_shared_tier_at_startup_is_an_outage_not_a_failure():
    cache = HandlerCache(CacheConfig(enabled=True, shared={"url": "redis://127.0.0.1:1/0", "socket_timeout_seconds": 0.5}),
                         "w1", "blue")
    await cache.open()
    try:
        assert cache.shared.outage.down_since is not None
        cache.set("k", "v", scope="cluster")  # kept locally; the shared write is counted as dropped later
        assert await cache.get("k") == "v"
        assert await cache.get("missing") is None  # no wait: the tier is skipped during the outage
    finally:
        await cache.close()


async def test_closing_the_cache_while_the_shared_tier_is_frozen_ends_within_its_bound(private_redis):
    import time

    cache = HandlerCache(CacheConfig(enabled=True, shared={"url": private_redis.address, "socket_timeout_seconds": 5}),
                         "w1", "blue")
    await cache.open()
    with private_redis.frozen():
        for i in range(20):
            cache.set(f"k{i}", i, scope="cluster")
        await asyncio.sleep(0.1)  # the writer is now waiting for an answer that does not come
        started = time.monotonic()
        await cache.close()
        took = time.monotonic() - started
    assert took < 2.5, f"closing took {took:.1f}s; the worker gives the cache 3 s"
