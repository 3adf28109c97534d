"""How PostgreSQL payloads become statements, and which server errors mean "later" rather than "never"."""

from __future__ import annotations

import asyncio
import re

import asyncpg
import pytest
from pydantic import BaseModel

from knarr import PostgresPayload
from knarr.sinks.base import PermanentSinkError
from knarr.sinks.postgres import is_transient
from knarr.sinks.postgres_batches import Table, batches, parse_table, transient_sqlstate


class Result(BaseModel):
    id: int
    score: float


def test_payloads_are_grouped_per_table_and_column_set_in_the_order_they_first_came():
    planned = batches([
        PostgresPayload(table="parents", data={"id": 1}),
        PostgresPayload(table="children", data={"id": 10, "parent": 1}),
        PostgresPayload(table="parents", data={"id": 2}),
        PostgresPayload(table="children", data={"parent": 2, "id": 11}),  # same columns, other order
        PostgresPayload(table="children", data={"id": 12}),
    ])
    assert [(str(b.table), b.columns, b.rows) for b in planned] == [
        ("parents", ("id",), [(1,), (2,)]),
        ("children", ("id", "parent"), [(10, 1), (11, 2)]),
        ("children", ("id",), [(12,)]),
    ]


def test_a_pydantic_model_is_written_as_its_fields():
    [batch] = batches([PostgresPayload(table="results", data=Result(id=1, score=0.5))])
    assert batch.columns == ("id", "score") and batch.rows == [(1, 0.5)]


def test_a_plain_insert_names_every_identifier_quoted():
    [batch] = batches([PostgresPayload(table="app.results", data={"id": 1, "Score": 2})])
    assert batch.insert_sql() == 'INSERT INTO "app"."results" ("id", "Score") VALUES ($1, $2)'
    assert not batch.upsert


def test_an_upsert_updates_every_column_that_is_not_part_of_the_key():
    [batch] = batches([PostgresPayload(table="t", data={"id": 1, "day": 2, "n": 3}, on_conflict=["id", "day"])])
    assert batch.insert_sql() == ('INSERT INTO "t" ("id", "day", "n") VALUES ($1, $2, $3) '
                                  'ON CONFLICT ("id", "day") DO UPDATE SET "n" = EXCLUDED."n"')


def test_an_upsert_whose_columns_are_all_keys_does_nothing_on_conflict():
    [batch] = batches([PostgresPayload(table="seen", data={"id": 1}, on_conflict=["id"])])
    assert batch.insert_sql() == 'INSERT INTO "seen" ("id") VALUES ($1) ON CONFLICT ("id") DO NOTHING'


def test_upserts_and_plain_inserts_into_one_table_are_separate_statements():
    planned = batches([PostgresPayload(table="t", data={"id": 1}), PostgresPayload(table="t", data={"id": 1}, on_conflict=["id"])])
    assert [b.conflict for b in planned] == [(), ("id",)]


@pytest.mark.parametrize(("table", "expected"), [("results", Table(None, "results")), ("app.results", Table("app", "results")),
                                                 ("_x9", Table(None, "_x9"))])
def test_a_table_may_be_schema_qualified(table, expected):
    assert parse_table(table) == expected


@pytest.mark.parametrize(("table", "message"), [
    ('results"; DROP TABLE x; --', "table 'results\"; DROP TABLE x; --' is not a plain identifier"),
    ("9lives", "table '9lives' is not a plain identifier"),
    ("a.b.c", "schema of table 'a.b.c': 'a.b' is not a plain identifier"),
    ("app.", "table 'app.': name '' is not a plain identifier"),
    ("x" * 64, "is not a plain identifier: use letters, digits and _, not starting with a digit, at most 63 characters"),
])
def test_a_table_name_that_is_not_an_identifier_is_refused_naming_it(table, message):
    with pytest.raises(PermanentSinkError, match=re.escape(message)):
        batches([PostgresPayload(table=table, data={"id": 1})])


def test_a_column_name_that_is_not_an_identifier_is_refused_naming_it_and_the_table():
    with pytest.raises(PermanentSinkError, match=r"table 'results': column 'score\) VALUES \(1\); --' is not a plain identifier"):
        batches([PostgresPayload(table="results", data={"score) VALUES (1); --": 1})])


def test_an_upsert_key_that_is_not_an_identifier_is_refused():
    with pytest.raises(PermanentSinkError, match="table 't': on_conflict column 'id, x' is not a plain identifier"):
        batches([PostgresPayload(table="t", data={"id": 1}, on_conflict=["id, x"])])


@pytest.mark.parametrize(("data", "message"), [([1, 2], "data must be a dict or a pydantic model .columns to values., not list"),
                                               ({}, "data has no columns")])
def test_data_that_is_not_columns_is_refused(data, message):
    with pytest.raises(PermanentSinkError, match=f"table 't': {message}"):
        batches([PostgresPayload(table="t", data=data)])


@pytest.mark.parametrize("sqlstate", ["08006", "08001", "53300", "53100", "40001", "40P01", "57P01", "57P03"])
def test_a_server_that_is_away_overloaded_or_picked_a_victim_is_transient(sqlstate):
    assert transient_sqlstate(sqlstate)


@pytest.mark.parametrize("sqlstate", ["22P02", "23505", "23502", "42703", "42P01", "42601", "25P02", None])
def test_data_integrity_and_undefined_object_errors_are_refusals(sqlstate):
    assert not transient_sqlstate(sqlstate)


@pytest.mark.parametrize(("error", "transient"), [
    (asyncpg.exceptions.CannotConnectNowError("the database system is starting up"), True),
    (asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation"), True),
    (asyncpg.exceptions.TooManyConnectionsError("sorry, too many clients already"), True),
    (asyncpg.exceptions.DeadlockDetectedError("deadlock detected"), True),
    (asyncpg.exceptions.InterfaceError("cannot perform operation: connection is closed"), True),
    (ConnectionRefusedError(111, "Connection refused"), True),
    (asyncio.TimeoutError(), True),
    (asyncpg.exceptions.UndefinedColumnError('column "colour" does not exist'), False),
    (asyncpg.exceptions.UniqueViolationError("duplicate key value violates unique constraint"), False),
    (asyncpg.exceptions.DataError("invalid input for query argument $1"), False),
    (TypeError("'str' object cannot be interpreted as an integer"), False),
])
def test_client_side_failures_are_classified_by_what_they_say_about_the_server(error, transient):
    assert is_transient(error) is transient
