"""The PostgreSQL sink end to end: a real worker in-process, the real broker, the real server.

Every message becomes one row; the run is over when every offset is committed, and the table
then holds exactly the expected rows.
"""

from __future__ import annotations

import pytest

from knarr.engine.worker import Worker
from tests.services.kafka import committed_offsets, consume_all, create_topic, end_offsets, produce_json, unique_name
from tests.services.postgres import fresh_table, query
from tests.sinks.handlers import ToPostgres
from tests.worker.harness import kafka_config, running, wait_until

pytestmark = pytest.mark.kafka


def source(bootstrap: str, records: list[dict], partitions: int = 1) -> str:
    topic = unique_name("pg-in")
    create_topic(bootstrap, topic, partitions)
    produce_json(bootstrap, topic, records, key_fn=lambda r: str(r["id"]))
    return topic


def postgres_config(bootstrap: str, topic: str, dsn: str, **postgres):
    return kafka_config(bootstrap, topic, sinks={"postgres": {"main": {"dsn": dsn, "pool_min": 1, "pool_max": 4, **postgres}}})


def all_committed(bootstrap: str, cfg) -> bool:
    return committed_offsets(bootstrap, cfg.kafka.consumer_group, cfg.kafka.source_topic) == end_offsets(bootstrap, cfg.kafka.source_topic)


def rows(dsn: str, table: str) -> list[tuple]:
    return [(r["id"], r["body"]) for r in query(dsn, f"SELECT id, body FROM {table} ORDER BY id, body")]


async def test_every_message_becomes_exactly_one_row_and_every_offset_is_committed(kafka_bootstrap, postgres_dsn):
    table = fresh_table(postgres_dsn)
    topic = source(kafka_bootstrap, [{"id": i} for i in range(200)], partitions=3)
    cfg = postgres_config(kafka_bootstrap, topic, postgres_dsn)
    worker = Worker(cfg, ToPostgres(table))
    async with running(worker):
        await wait_until(lambda: all_committed(kafka_bootstrap, cfg), 60, "every offset committed")

    assert rows(postgres_dsn, table) == [(i, f"row-{i}") for i in range(200)]
    assert worker.sinks.dead_lettered == 0 and worker.exit_code == 0


async def test_an_upsert_makes_a_redelivered_row_update_the_row_instead_of_adding_another(kafka_bootstrap, postgres_dsn):
    table = fresh_table(postgres_dsn)  # id is the primary key: a plain insert of the same id is refused
    topic = source(kafka_bootstrap, [{"id": i, "text": f"first-{i}"} for i in range(20)])
    first = postgres_config(kafka_bootstrap, topic, postgres_dsn)
    async with running(Worker(first, ToPostgres(table, upsert=True))):
        await wait_until(lambda: all_committed(kafka_bootstrap, first), 60, "the first run to commit")
    assert rows(postgres_dsn, table) == [(i, f"first-{i}") for i in range(20)]

    # Half of the ids again, with new values (a replay, or new versions of the rows): each updates its row.
    replay = source(kafka_bootstrap, [{"id": i, "text": f"second-{i}"} for i in range(10, 30)])
    again = postgres_config(kafka_bootstrap, replay, postgres_dsn)
    worker = Worker(again, ToPostgres(table, upsert=True))
    async with running(worker):
        await wait_until(lambda: all_committed(kafka_bootstrap, again), 60, "the second run to commit")

    assert rows(postgres_dsn, table) == [(i, f"first-{i}") for i in range(10)] + [(i, f"second-{i}") for i in range(10, 30)]
    assert worker.sinks.dead_lettered == 0


async def test_on_ready_gets_the_sinks_working_pool(kafka_bootstrap, postgres_dsn):
    table = unique_name("made_in_on_ready").replace("-", "_")
    topic = source(kafka_bootstrap, [{"id": i} for i in range(5)])
    cfg = postgres_config(kafka_bootstrap, topic, postgres_dsn)
    handler = ToPostgres(table, create=f"CREATE TABLE {table} (id bigint PRIMARY KEY, body text)")
    async with running(Worker(cfg, handler)):
        await wait_until(lambda: all_committed(kafka_bootstrap, cfg), 60, "every offset committed")

    assert handler.ready_answer == 42
    assert rows(postgres_dsn, table) == [(i, f"row-{i}") for i in range(5)]


async def test_a_row_naming_a_column_that_does_not_exist_is_dead_lettered_with_the_servers_reason_and_the_run_goes_on(
    kafka_bootstrap, postgres_dsn
):
    table = fresh_table(postgres_dsn)
    topic = source(kafka_bootstrap, [{"id": i, "column": "colour" if i == 4 else "body"} for i in range(10)])
    cfg = postgres_config(kafka_bootstrap, topic, postgres_dsn)
    worker = Worker(cfg, ToPostgres(table))
    async with running(worker):
        await wait_until(lambda: all_committed(kafka_bootstrap, cfg), 60, "every offset committed")

    assert rows(postgres_dsn, table) == [(i, f"row-{i}") for i in range(10) if i != 4]
    [record] = [m.json() for m in consume_all(kafka_bootstrap, cfg.dlq_topic, expected=1, timeout=15)]
    assert record["offsets"] == [4]
    assert record["sink_name"] == "main" and record["sink_type"] == "postgres"
    assert record["error"] == f'PermanentSinkError: table {table!r}: column "colour" does not exist'
    assert worker.sinks.dead_lettered == 1
