"""Turning PostgreSQL payloads into batched statements, and naming what a server error means. Pure.

A delivery's payloads are grouped by (table, set of columns, upsert keys): each group is one
statement of many rows, and the groups run in the order their first payload came, so rows for a
parent table written first stay first. Names are checked before anything is sent, because they
end up inside SQL text: a table or column must be a plain identifier (optionally
``schema.table``), and it is double-quoted, so it is matched exactly as written (case included).
"""

from __future__ import annotations

import re
from functools import lru_cache
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from knarr.sinks.base import PermanentSinkError

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_IDENTIFIER = 63  # PostgreSQL's NAMEDATALEN - 1; longer names are silently truncated by the server


@dataclass(frozen=True, slots=True)
class Table:
    schema: str | None
    name: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name

    @property
    def sql(self) -> str:
        return f"{quote(self.schema)}.{quote(self.name)}" if self.schema else quote(self.name)


def quote(identifier: str) -> str:
    """A checked identifier as SQL (it holds no quote to escape)."""
    return f'"{identifier}"'


def _identifier(value: str, what: str) -> str:
    if not isinstance(value, str) or not IDENTIFIER.match(value) or len(value) > MAX_IDENTIFIER:
        raise PermanentSinkError(
            f"{what} {value!r} is not a plain identifier: use letters, digits and _, not starting with a digit, "
            f"at most {MAX_IDENTIFIER} characters"
        )
    return value


def parse_table(value: str) -> Table:
    """``table`` or ``schema.table``; anything else is a PermanentSinkError naming it."""
    if not isinstance(value, str):
        raise PermanentSinkError(f"table {value!r} is not a string")
    schema, dot, name = value.rpartition(".")
    if dot and schema:
        return Table(_identifier(schema, f"schema of table {value!r}:"), _identifier(name, f"table {value!r}: name"))
    return Table(None, _identifier(value, "table"))


def row_of(data: Any, table: str) -> Mapping[str, Any]:
    """A payload's data as columns -> values: a pydantic model's fields, or a dict as is."""
    if isinstance(data, BaseModel):
        data = data.model_dump()
    if not isinstance(data, Mapping):
        raise PermanentSinkError(
            f"table {table!r}: data must be a dict or a pydantic model (columns to values), not {type(data).__name__}"
        )
    if not data:
        raise PermanentSinkError(f"table {table!r}: data has no columns")
    return data


@dataclass(slots=True)
class Batch:
    """Rows for one table with the same columns: one statement."""

    table: Table
    columns: tuple[str, ...]
    conflict: tuple[str, ...] = ()  # the unique key of an upsert; empty: a plain insert
    rows: list[tuple[Any, ...]] = field(default_factory=list)

    @property
    def upsert(self) -> bool:
        return bool(self.conflict)

    def insert_sql(self) -> str:
        """``INSERT ... VALUES ($1, ...)`` run once per row, with ``ON CONFLICT`` for an upsert."""
        columns = ", ".join(map(quote, self.columns))
        values = ", ".join(f"${i}" for i in range(1, len(self.columns) + 1))
        sql = f"INSERT INTO {self.table.sql} ({columns}) VALUES ({values})"
        if not self.conflict:
            return sql
        keys = ", ".join(map(quote, self.conflict))
        updates = [c for c in self.columns if c not in self.conflict]
        if not updates:
            return f"{sql} ON CONFLICT ({keys}) DO NOTHING"
        return f"{sql} ON CONFLICT ({keys}) DO UPDATE SET " + ", ".join(f"{quote(c)} = EXCLUDED.{quote(c)}" for c in updates)


@lru_cache(maxsize=4096)
def _statement(table: str, columns: tuple[str, ...], conflict: tuple[str, ...]) -> tuple[Table, frozenset[str]]:
    """The checked table and column set of a (table, columns, upsert keys) shape; checked once per shape,
    not once per row (a delivery's rows nearly always share one)."""
    for column in columns:
        _identifier(column, f"table {table!r}: column")
    for column in conflict:
        _identifier(column, f"table {table!r}: on_conflict column")
    return parse_table(table), frozenset(columns)


def batches(payloads: Iterable[Any]) -> list[Batch]:
    """Group payloads (anything with ``table``, ``data`` and ``on_conflict``) into statements.

    Raises PermanentSinkError for the first bad name or data, before anything is written.
    """
    grouped: dict[tuple[Table, frozenset[str], tuple[str, ...]], Batch] = {}
    for payload in payloads:
        data = payload.data
        row = data if type(data) is dict and data else row_of(data, payload.table)
        conflict = tuple(payload.on_conflict)
        table, column_set = _statement(payload.table, tuple(row), conflict)
        key = (table, column_set, conflict)
        batch = grouped.get(key)
        if batch is None:
            batch = grouped[key] = Batch(table, tuple(row), conflict)
        batch.rows.append(tuple(row[c] for c in batch.columns))
    return list(grouped.values())


# SQLSTATE codes of a server that cannot take the batch now, rather than one refusing it.
_TRANSIENT_CLASSES = ("08", "53")  # connection exception, insufficient resources (too many connections, disk full)
_TRANSIENT_CODES = frozenset({
    "40001",  # serialization_failure
    "40P01",  # deadlock_detected
    "57P01", "57P02", "57P03", "57P04", "57P05",  # admin/crash shutdown, cannot connect now, ...
})


def transient_sqlstate(sqlstate: str | None) -> bool:
    """True for an error the same batch will get past later (the server is away, overloaded, or chose a
    victim); data (22), integrity (23) and syntax/undefined-object (42) errors, like the rest, are refusals."""
    code = sqlstate or ""
    return code[:2] in _TRANSIENT_CLASSES or code in _TRANSIENT_CODES


def server_reason(message: str, detail: str | None = None, hint: str | None = None) -> str:
    """The server's words for an error, with its detail and hint when it gave them."""
    extra = "; ".join(part for part in (detail, hint) if part)
    return f"{message} ({extra})" if extra else message
