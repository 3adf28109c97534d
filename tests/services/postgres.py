"""Real PostgreSQL for the test suite: the shared server, private servers for fault tests, fresh tables.

The shared server is the one ``hack/services/postgres.sh`` manages (state in
``<repo>/.cache/postgres``), or the one ``$KNARR_TEST_POSTGRES_DSN`` names. There is no fake: if
it cannot be started, the ``postgres_dsn`` fixture fails with the server's log tail. Tests use
``fresh_table`` (or ``fresh_database``) for names nobody else uses; fault tests stop and freeze
``private_postgres``, a server of their own.

The helpers are synchronous (each runs its own event loop in a thread), so they work from sync
tests, async tests and ``wait_until`` predicates alike.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any

import asyncpg
import pytest

from tests.services.servers import (
    ScriptedServer, ServiceUnavailable, children_of, kept_running, private_session_server, private_state_dir,
)


class PostgresServer(ScriptedServer):
    name = "postgres"
    variable = "KNARR_TEST_POSTGRES_DSN"
    state_env = "KNARR_POSTGRES_STATE_DIR"
    log_name = "postgres.log"

    def pids(self) -> list[int]:
        """The postmaster and every process it started (each backend is a session of its own)."""
        try:
            postmaster = int((self.state_dir / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return []
        return [postmaster, *children_of(postmaster)]


def _blocking(work: Callable[[], Any]) -> Any:
    """Run ``work()`` (a coroutine factory) to completion on a loop of its own, in a thread."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = asyncio.run(work())
        except BaseException as exc:  # handed to the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=run, name="postgres-helper")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def query(dsn: str, sql: str, *args: Any, timeout: float = 15) -> list[dict[str, Any]]:
    """The rows of one statement, as dicts."""

    async def work() -> list[dict[str, Any]]:
        conn = await asyncpg.connect(dsn, timeout=timeout, command_timeout=timeout)
        try:
            return [dict(r) for r in await conn.fetch(sql, *args)]
        finally:
            await conn.close(timeout=timeout)

    return _blocking(work)


def execute(dsn: str, sql: str, timeout: float = 15) -> None:
    """Run SQL (several statements allowed)."""

    async def work() -> None:
        conn = await asyncpg.connect(dsn, timeout=timeout, command_timeout=timeout)
        try:
            await conn.execute(sql)
        finally:
            await conn.close(timeout=timeout)

    _blocking(work)


def fresh_table(dsn: str, columns: str = "id bigint PRIMARY KEY, body text", prefix: str = "t") -> str:
    """Create a table no other test uses, with ``columns`` (SQL), and return its name."""
    name = f"{prefix}_{secrets.token_hex(4)}"
    execute(dsn, f"CREATE TABLE {name} ({columns})")
    return name


def fresh_database(dsn: str) -> str:
    """Create a database no other test uses; returns the DSN that reaches it."""
    name = f"db_{secrets.token_hex(4)}"
    execute(dsn, f"CREATE DATABASE {name}")
    return f"{dsn.rpartition('/')[0]}/{name}"


def postgres_address() -> str:
    """The shared server's DSN: ``$KNARR_TEST_POSTGRES_DSN``, or the local server (started if needed)."""
    return os.environ.get("KNARR_TEST_POSTGRES_DSN") or PostgresServer().start()


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    """DSN of the shared PostgreSQL server; left running afterwards (stop it with `make services-down`)."""
    try:
        return postgres_address()
    except ServiceUnavailable as exc:
        pytest.fail(f"local PostgreSQL unavailable:\n{exc}", pytrace=False)


@pytest.fixture(scope="session")
def _private_postgres_server() -> Iterator[PostgresServer]:
    yield from private_session_server(PostgresServer(private_state_dir("postgres")), "PostgreSQL")


@pytest.fixture
def private_postgres(_private_postgres_server: PostgresServer) -> Iterator[PostgresServer]:
    """A PostgreSQL server of the fault tests' own, running and answering when the test starts and
    again after it (whatever the test did to it)."""
    yield from kept_running(_private_postgres_server)
