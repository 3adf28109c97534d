"""Benchmark: payloads per second through knarr's delivery path vs the raw client, per sink, in one run.

    make bench-sinks                      # or: uv run python bench/sinks.py --sinks postgres,redis
    make bench-sinks BENCH_ARGS='--deliveries 200 --batch 100 --rounds 5'

Per sink, the same deliveries (``--batch`` payloads each, ``--concurrency`` deliveries in flight)
go once through knarr — ``SinkManager.deliver`` with the hook's ``CollectResult``: sink
resolution, the sink's batching, failure classification and metrics — and once through the
sink's client library used directly, doing the same batched writes in the same process:

- postgres: one transaction per delivery, ``COPY`` of the rows (asyncpg ``copy_records_to_table``);
- redis: one pipeline of ``SET key value EX ttl`` per delivery;
- mongo: one ``insert_many(ordered=True)`` per delivery;
- http: one POST per payload, ``max_concurrency`` requests of the sink in flight.

The two sides alternate for ``--rounds`` rounds and each side's best round counts, so a slow
moment of the machine hurts neither side alone. Printed per sink: payloads/s of each and
knarr / raw (the target is ≥ 0.8). Every written row, key, document or request is counted
afterwards: a run that lost anything fails.

The servers are the test suite's (hack/services/*.sh, started if needed; the HTTP server is the
tests' recording server, which also works for both sides alike).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # the HTTP test server's helper lives in tests/services

from knarr import BaseHandler, CollectResult, HttpPayload, MongoPayload, PostgresPayload, RedisPayload  # noqa: E402
from knarr.config.loading import config_from_dict  # noqa: E402
from knarr.engine import event_loop  # noqa: E402
from knarr.sinks import build_sinks  # noqa: E402
from knarr.sinks.delivery import Origin, SinkManager  # noqa: E402


def service(name: str) -> dict[str, str]:
    """Start (or reuse) hack/services/<name>.sh; its NAME=value lines."""
    out = subprocess.run([str(REPO_ROOT / "hack" / "services" / f"{name}.sh"), "up"], check=True,
                         capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def row(i: int) -> dict[str, Any]:
    return {"id": i, "name": f"item-{i}", "score": i * 0.5, "tags": ["a", "b"], "payload": {"n": i, "ok": True}}


@dataclass
class Case:
    """One sink: its knarr config, the payloads a hook returns, and the raw client's same write."""

    sink_type: str
    config: dict[str, Any]
    collect: Callable[[int, list[dict[str, Any]]], CollectResult]
    raw_setup: Callable[[], Awaitable[Any]]
    raw_deliver: Callable[[Any, int, list[dict[str, Any]]], Awaitable[None]]
    raw_close: Callable[[Any], Awaitable[None]]
    count: Callable[[str], Awaitable[int]]  # what landed for one side ("knarr" / "raw")
    prepare: Callable[[], Awaitable[None]] = field(default=lambda: asyncio.sleep(0))


# ------------------------------------------------------------------ the cases


def postgres_case(run: str) -> Case:
    import asyncpg

    dsn = service("postgres")["KNARR_TEST_POSTGRES_DSN"]
    tables = {"knarr": f"bench_knarr_{run}", "raw": f"bench_raw_{run}"}
    columns = ["id", "name", "score", "tags", "payload"]

    async def prepare() -> None:
        conn = await asyncpg.connect(dsn)
        for table in tables.values():
            await conn.execute(f"CREATE TABLE {table} (id bigint, name text, score double precision, "
                               "tags text[], payload jsonb)")
        await conn.close()

    async def raw_setup() -> Any:
        async def init(conn: Any) -> None:
            await conn.set_type_codec("jsonb", schema="pg_catalog", format="binary",  # COPY needs binary
                                      encoder=lambda v: b"\x01" + json.dumps(v).encode(),
                                      decoder=lambda data: data[1:].decode())
        return await asyncpg.create_pool(dsn, min_size=2, max_size=10, init=init)

    async def raw_deliver(pool: Any, _n: int, rows: list[dict[str, Any]]) -> None:
        records = [tuple(r[c] for c in columns) for r in rows]
        async with pool.acquire() as conn, conn.transaction():
            await conn.copy_records_to_table(tables["raw"], columns=columns, records=records)

    async def count(side: str) -> int:
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetchval(f"SELECT count(*) FROM {tables[side]}")
        finally:
            await conn.close()

    return Case(
        "postgres", {"postgres": {"bench": {"dsn": dsn, "pool_min": 2, "pool_max": 10}}},
        lambda _n, rows: CollectResult(postgres=[PostgresPayload(table=tables["knarr"], data=r) for r in rows]),
        raw_setup, raw_deliver, lambda pool: pool.close(), count, prepare,
    )


def redis_case(run: str) -> Case:
    import redis.asyncio as aioredis

    url = service("redis")["KNARR_TEST_REDIS_URL"]
    prefixes = {"knarr": f"bench:{run}:knarr:", "raw": f"bench:{run}:raw:"}

    async def raw_setup() -> Any:
        return aioredis.Redis.from_url(url)

    async def raw_deliver(client: Any, _n: int, rows: list[dict[str, Any]]) -> None:
        pipe = client.pipeline(transaction=False)
        for r in rows:
            pipe.set(f"{prefixes['raw']}{r['id']}", json.dumps(r, separators=(",", ":")), ex=3600)
        await pipe.execute()

    async def count(side: str) -> int:
        client = aioredis.Redis.from_url(url)
        try:
            return sum([1 async for _ in client.scan_iter(match=prefixes[side] + "*", count=1000)])
        finally:
            await client.aclose()

    return Case(
        "redis", {"redis": {"bench": {"url": url, "key_prefix": prefixes["knarr"]}}},
        lambda _n, rows: CollectResult(redis=[RedisPayload(key=str(r["id"]), data=r, ttl=3600) for r in rows]),
        raw_setup, raw_deliver, lambda client: client.aclose(), count,
    )


def mongo_case(run: str) -> Case:
    from pymongo import AsyncMongoClient

    uri = service("mongo")["KNARR_TEST_MONGO_URI"]
    database = f"bench_{run}"
    collections = {"knarr": "knarr", "raw": "raw"}

    async def raw_setup() -> Any:
        return AsyncMongoClient(uri)

    async def raw_deliver(client: Any, _n: int, rows: list[dict[str, Any]]) -> None:
        await client[database][collections["raw"]].insert_many([dict(r) for r in rows], ordered=True)

    async def count(side: str) -> int:
        client = AsyncMongoClient(uri)
        try:
            return await client[database][collections[side]].count_documents({})
        finally:
            await client.close()

    return Case(
        "mongo", {"mongo": {"bench": {"uri": uri, "database": database}}},
        lambda _n, rows: CollectResult(mongo=[MongoPayload(collection=collections["knarr"], data=r) for r in rows]),
        raw_setup, raw_deliver, lambda client: client.close(), count,
    )


def http_case(run: str, concurrency: int) -> Case:
    import httpx

    from tests.services.http_server import HttpSinkServer

    server = HttpSinkServer(Path(tempfile.mkdtemp(prefix="knarr-bench-http-"))).start()
    paths = {"knarr": f"/knarr/{run}", "raw": f"/raw/{run}"}

    gates: dict[Any, asyncio.Semaphore] = {}

    async def raw_setup() -> Any:
        client = httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=concurrency))
        gates[client] = asyncio.Semaphore(concurrency)  # per sink, across deliveries: as knarr's max_concurrency
        return client

    async def raw_deliver(client: Any, _n: int, rows: list[dict[str, Any]]) -> None:
        gate = gates[client]

        async def one(r: dict[str, Any]) -> None:
            async with gate:
                response = await client.post(server.url(paths["raw"]), content=json.dumps(r, separators=(",", ":")),
                                             headers={"Content-Type": "application/json"})
                response.raise_for_status()

        await asyncio.gather(*(one(r) for r in rows))

    async def count(side: str) -> int:
        return sum(1 for r in server.requests() if r.get("path") == paths[side] and r.get("method") == "POST")

    return Case(
        "http", {"http": {"bench": {"url": server.url(paths["knarr"]), "max_concurrency": concurrency}}},
        lambda _n, rows: CollectResult(http=[HttpPayload(data=r) for r in rows]),
        raw_setup, raw_deliver, lambda client: client.aclose(), count,
    )


# ------------------------------------------------------------------ the race


async def through_knarr(case: Case, deliveries: list[CollectResult], concurrency: int) -> float:
    config = config_from_dict({"sinks": case.config, "metrics": {"enabled": False},
                               "logging": {"level": "ERROR", "format": "console"}})
    manager = SinkManager(build_sinks(config), None, BaseHandler())
    await manager.connect_all()
    try:
        return await _timed(deliveries, concurrency, lambda i, collect: manager.deliver(collect, Origin(0, (i,))))
    finally:
        await manager.close_all()


async def through_raw(case: Case, batches: list[list[dict[str, Any]]], concurrency: int) -> float:
    client = await case.raw_setup()
    try:
        return await _timed(batches, concurrency, lambda i, rows: case.raw_deliver(client, i, rows))
    finally:
        await case.raw_close(client)


async def _timed(items: list[Any], concurrency: int, deliver: Callable[[int, Any], Awaitable[Any]]) -> float:
    queue = list(enumerate(items))[::-1]

    async def lane() -> None:
        while queue:
            i, item = queue.pop()
            await deliver(i, item)

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return time.perf_counter() - started


async def race(case: Case, deliveries: int, batch: int, rounds: int, concurrency: int) -> dict[str, Any]:
    await case.prepare()
    seconds: dict[str, list[float]] = {"knarr": [], "raw": []}
    for r in range(rounds):
        first = r * deliveries * batch
        batches = [[row(first + d * batch + i) for i in range(batch)] for d in range(deliveries)]
        collects = [case.collect(d, rows) for d, rows in enumerate(batches)]  # what the hooks return
        order = ("knarr", "raw") if r % 2 == 0 else ("raw", "knarr")
        for side in order:
            if side == "knarr":
                seconds["knarr"].append(await through_knarr(case, collects, concurrency))
            else:
                seconds["raw"].append(await through_raw(case, batches, concurrency))
    expected = rounds * deliveries * batch
    landed = {side: await case.count(side) for side in ("knarr", "raw")}
    if landed != {"knarr": expected, "raw": expected}:
        raise SystemExit(f"{case.sink_type}: expected {expected} per side, found {landed}")
    per_round = deliveries * batch
    best = {side: per_round / min(values) for side, values in seconds.items()}
    median = {side: per_round / statistics.median(values) for side, values in seconds.items()}
    return {"sink": case.sink_type, "payloads_per_round": per_round, "rounds": rounds,
            "knarr_per_s": round(best["knarr"]), "raw_per_s": round(best["raw"]),
            "ratio": round(best["knarr"] / best["raw"], 2),
            "median_ratio": round(median["knarr"] / median["raw"], 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sinks", default="postgres,redis,mongo,http")
    ap.add_argument("--deliveries", type=int, default=100, help="deliveries per round and side")
    ap.add_argument("--batch", type=int, default=100, help="payloads per delivery")
    ap.add_argument("--http-deliveries", type=int, default=40, help="deliveries per round for http (a request per payload)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=4, help="deliveries in flight (partitions delivering at once)")
    args = ap.parse_args()

    run = time.strftime("%H%M%S")
    builders = {"postgres": postgres_case, "redis": redis_case, "mongo": mongo_case,
                "http": lambda r: http_case(r, 8)}
    results = []
    print(f"{'sink':<9} {'payloads':>9} {'knarr/s':>9} {'raw/s':>9} {'knarr/raw':>9} {'(median)':>9}")
    for name in args.sinks.split(","):
        case = builders[name](run)
        deliveries = args.http_deliveries if name == "http" else args.deliveries
        result = event_loop.run(race(case, deliveries, args.batch, args.rounds, args.concurrency))
        results.append(result)
        print(f"{name:<9} {result['payloads_per_round']:>9} {result['knarr_per_s']:>9} {result['raw_per_s']:>9} "
              f"{result['ratio']:>9.2f} {result['median_ratio']:>9.2f}", flush=True)
    print(json.dumps({"target_ratio": 0.8, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
