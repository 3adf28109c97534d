"""What the PostgreSQL sink writes, against the real server: one delivery straight to the sink."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from pydantic import BaseModel

from knarr import PostgresPayload
from knarr.config.models import PostgresSinkConfig
from knarr.sinks.base import PermanentSinkError
from knarr.sinks.postgres import PostgresSink
from tests.services.postgres import execute, fresh_table, query


class Reading(BaseModel):
    id: int
    at: dt.datetime
    attrs: dict


@pytest.fixture
async def sink(postgres_dsn):
    sink = PostgresSink("main", PostgresSinkConfig(dsn=postgres_dsn, pool_min=1, pool_max=2))
    await sink.connect()
    yield sink
    await sink.close()


async def test_a_delivery_with_one_refused_row_writes_none_of_its_rows(sink, postgres_dsn):
    table = fresh_table(postgres_dsn, "id bigint PRIMARY KEY, body text NOT NULL")
    other = fresh_table(postgres_dsn)
    payloads = [PostgresPayload(table=other, data={"id": 1, "body": "fine"}),
                PostgresPayload(table=table, data={"id": 1, "body": "fine"}),
                PostgresPayload(table=table, data={"id": 2, "body": None})]
    with pytest.raises(PermanentSinkError, match=f'table {table!r}: null value in column "body" of relation "{table}" '
                                                 "violates not-null constraint"):
        await sink.deliver(payloads)
    assert query(postgres_dsn, f"SELECT * FROM {table}") == [] and query(postgres_dsn, f"SELECT * FROM {other}") == []

    await sink.deliver(payloads[:2])  # the connection is fine afterwards
    assert query(postgres_dsn, f"SELECT id, body FROM {table}") == [{"id": 1, "body": "fine"}]


async def test_a_model_goes_to_a_schema_qualified_table_with_its_timestamp_and_json(sink, postgres_dsn):
    schema = fresh_table(postgres_dsn, "x int", prefix="s")  # a unique name, reused for a schema
    execute(postgres_dsn, f"DROP TABLE {schema}; CREATE SCHEMA {schema}; "
                          f"CREATE TABLE {schema}.readings (id int, at timestamptz, attrs jsonb)")
    at = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    await sink.deliver([PostgresPayload(table=f"{schema}.readings", data=Reading(id=i, at=at, attrs={"n": i, "tags": ["a"]}))
                        for i in range(3)])
    rows = query(postgres_dsn, f"SELECT id, at, attrs FROM {schema}.readings ORDER BY id")
    assert [(r["id"], r["at"], json.loads(r["attrs"])) for r in rows] == [(i, at, {"n": i, "tags": ["a"]}) for i in range(3)]


async def test_an_upsert_whose_columns_are_all_keys_keeps_the_row_there_is(sink, postgres_dsn):
    table = fresh_table(postgres_dsn, "id bigint PRIMARY KEY, day int NOT NULL DEFAULT 7")
    execute(postgres_dsn, f"INSERT INTO {table} VALUES (1, 1)")
    await sink.deliver([PostgresPayload(table=table, data={"id": i}, on_conflict=["id"]) for i in (1, 2, 2)])
    assert query(postgres_dsn, f"SELECT id, day FROM {table} ORDER BY id") == [{"id": 1, "day": 1}, {"id": 2, "day": 7}]


async def test_a_repeated_key_within_one_upsert_delivery_ends_with_its_last_row(sink, postgres_dsn):
    table = fresh_table(postgres_dsn)
    await sink.deliver([PostgresPayload(table=table, data={"id": 1, "body": b}, on_conflict=["id"]) for b in ("a", "b", "c")])
    assert query(postgres_dsn, f"SELECT id, body FROM {table}") == [{"id": 1, "body": "c"}]


async def test_a_value_of_the_wrong_type_is_refused_naming_the_table_and_its_columns(sink, postgres_dsn):
    table = fresh_table(postgres_dsn)
    with pytest.raises(PermanentSinkError, match=rf"table {table!r}: .*a value does not fit its column's type; columns: id, body"):
        await sink.deliver([PostgresPayload(table=table, data={"id": "one", "body": "x"})])
