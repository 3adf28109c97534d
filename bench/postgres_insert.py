"""How the PostgreSQL sink should write a delivery: executemany, COPY, or one INSERT of unnest()ed arrays.

Every method writes the same rows in one transaction per batch (as the sink does), through one
asyncpg connection to the local server (hack/services/postgres.sh, or $KNARR_TEST_POSTGRES_DSN),
into a table with a primary key, a text, a float, a timestamp and a jsonb column. For each batch
size it prints the median time of one batch and the rows per second; then the same for upserts
(ON CONFLICT DO UPDATE over rows that all exist), which COPY cannot do.

    uv run python bench/postgres_insert.py [--sizes 1,10,100,1000,10000] [--rows 20000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import asyncpg

from knarr.engine import event_loop

REPO_ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ("id", "name", "score", "at", "attrs")
TYPES = ("bigint", "text", "float8", "timestamptz", "jsonb")


def dsn() -> str:
    if os.environ.get("KNARR_TEST_POSTGRES_DSN"):
        return os.environ["KNARR_TEST_POSTGRES_DSN"]
    out = subprocess.run([str(REPO_ROOT / "hack/services/postgres.sh"), "up"], capture_output=True, text=True, check=True)
    return out.stdout.strip().partition("=")[2]


def rows(start: int, count: int) -> list[tuple]:
    now = dt.datetime.now(dt.timezone.utc)
    return [(i, f"name-{i}", i / 7, now, {"i": i, "tags": ["a", "b"]}) for i in range(start, start + count)]


async def init(conn: asyncpg.Connection) -> None:
    # As the sink does: dicts and lists go to json/jsonb columns, in the binary format COPY needs.
    await conn.set_type_codec("jsonb", encoder=lambda v: b"\x01" + json.dumps(v).encode(),
                              decoder=lambda b: b[1:].decode(), schema="pg_catalog", format="binary")


COLS = ", ".join(COLUMNS)
UPSERT = " ON CONFLICT (id) DO UPDATE SET " + ", ".join(f"{c} = EXCLUDED.{c}" for c in COLUMNS[1:])
VALUES = f"INSERT INTO bench ({COLS}) VALUES ({', '.join(f'${i + 1}' for i in range(len(COLUMNS)))})"
UNNEST = f"INSERT INTO bench ({COLS}) SELECT * FROM unnest({', '.join(f'${i + 1}::{t}[]' for i, t in enumerate(TYPES))})"


async def executemany(conn, batch, upsert=False):
    await conn.executemany(VALUES + (UPSERT if upsert else ""), batch)


async def copy(conn, batch, upsert=False):
    await conn.copy_records_to_table("bench", records=batch, columns=COLUMNS)


async def unnest(conn, batch, upsert=False):
    await conn.execute(UNNEST + (UPSERT if upsert else ""), *map(list, zip(*batch)))


async def measure(conn, method, size: int, total: int, upsert: bool) -> float:
    """Median seconds per batch of ``size`` rows."""
    if not upsert:
        await conn.execute("TRUNCATE bench")
    times = []
    for start in range(0, max(total, size * 5), size):
        batch = rows(start % total if upsert else start, size)
        began = time.perf_counter()
        async with conn.transaction():
            await method(conn, batch, upsert)
        times.append(time.perf_counter() - began)
    return statistics.median(times)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,100,1000,10000")
    parser.add_argument("--rows", type=int, default=20_000, help="rows written per method and size (at least 5 batches)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    conn = await asyncpg.connect(dsn())
    await init(conn)
    await conn.execute("DROP TABLE IF EXISTS bench")
    await conn.execute("CREATE TABLE bench (id bigint PRIMARY KEY, name text, score float8, at timestamptz, attrs jsonb)")
    print(f"PostgreSQL {conn.get_server_version().major}, asyncpg {asyncpg.__version__}; median per batch, rows/s")
    for upsert, methods in ((False, (executemany, copy, unnest)), (True, (executemany, unnest))):
        if upsert:
            await conn.execute("TRUNCATE bench")
            await conn.copy_records_to_table("bench", records=rows(0, args.rows), columns=COLUMNS)
        print("upsert (every row exists)" if upsert else "insert")
        print(f"{'rows/batch':>10} " + " ".join(f"{m.__name__:>24}" for m in methods))
        for size in sizes:
            cells = []
            for method in methods:
                took = await measure(conn, method, size, args.rows, upsert)
                cells.append(f"{took * 1000:9.2f} ms {size / took:9.0f}/s")
            print(f"{size:>10} " + " ".join(f"{c:>24}" for c in cells))
    await conn.execute("DROP TABLE bench")
    await conn.close()


if __name__ == "__main__":
    sys.exit(event_loop.run(main()))  # the loop `knarr run` gives a worker
