"""Real Redis for the test suite: the shared server, private servers for fault tests, fresh key prefixes.

The shared server is the one ``hack/services/redis.sh`` manages (state in ``<repo>/.cache/redis``),
or the one ``$KNARR_TEST_REDIS_URL`` names. There is no fake: if it cannot be started, the
``redis_url`` fixture fails with the server's log tail. Tests write under ``fresh_prefix()`` so
their keys never meet another test's; fault tests stop and freeze ``private_redis``.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest
import redis

from tests.services.servers import (
    ScriptedServer, ServiceUnavailable, kept_running, private_session_server, private_state_dir,
)


class RedisServer(ScriptedServer):
    name = "redis"
    variable = "KNARR_TEST_REDIS_URL"
    state_env = "KNARR_REDIS_STATE_DIR"
    log_name = "redis.log"

    def pids(self) -> list[int]:
        try:
            return [int((self.state_dir / "redis.pid").read_text().strip())]
        except (OSError, ValueError):
            return []


def fresh_prefix(name: str = "t") -> str:
    """A key prefix no other test uses."""
    return f"{name}-{secrets.token_hex(4)}:"


def read_keys(url: str, prefix: str) -> dict[str, tuple[str, int]]:
    """Every key under ``prefix``: value and TTL in seconds (-1: no expiry)."""
    with redis.Redis.from_url(url, socket_timeout=10, decode_responses=True) as client:
        keys = sorted(client.scan_iter(match=f"{prefix}*", count=1000))
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.get(key)
            pipe.ttl(key)
        replies = pipe.execute()
    return {key: (replies[2 * i], replies[2 * i + 1]) for i, key in enumerate(keys)}


def redis_address() -> str:
    """The shared server's URL: ``$KNARR_TEST_REDIS_URL``, or the local server (started if needed)."""
    return os.environ.get("KNARR_TEST_REDIS_URL") or RedisServer().start()


@pytest.fixture(scope="session")
def redis_url() -> str:
    """URL of the shared Redis server; left running afterwards (stop it with `make services-down`)."""
    try:
        return redis_address()
    except ServiceUnavailable as exc:
        pytest.fail(f"local Redis unavailable:\n{exc}", pytrace=False)


@pytest.fixture(scope="session")
def _private_redis_server() -> Iterator[RedisServer]:
    yield from private_session_server(RedisServer(private_state_dir("redis")), "Redis")


@pytest.fixture
def private_redis(_private_redis_server: RedisServer) -> Iterator[RedisServer]:
    """A Redis server of the fault tests' own, running and answering when the test starts and again
    after it (whatever the test did to it)."""
    yield from kept_running(_private_redis_server)
