"""The sink servers' scripts (hack/services/postgres.sh, redis.sh), each on a private state directory.

`up` prints exactly one NAME=value line and reuses a running server; `down` then `up` brings it back
on the same address with its data; a server that cannot start fails `up` with its log tail.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import redis

from tests.services.postgres import PostgresServer, execute, query
from tests.services.redis import RedisServer
from tests.services.servers import ScriptedServer, ServiceUnavailable, private_state_dir

SERVERS = {"postgres": PostgresServer, "redis": RedisServer}
ADDRESS = {
    "postgres": re.compile(r"^KNARR_TEST_POSTGRES_DSN=postgresql://knarr@127\.0\.0\.1:\d+/knarr$"),
    "redis": re.compile(r"^KNARR_TEST_REDIS_URL=redis://127\.0\.0\.1:\d+/0$"),
}


@pytest.fixture(params=sorted(SERVERS))
def server(request) -> Iterator[ScriptedServer]:
    instance = SERVERS[request.param](private_state_dir(request.param))
    try:
        yield instance
    finally:
        instance.remove()


def write_marker(server: ScriptedServer) -> None:
    if isinstance(server, PostgresServer):
        execute(server.address, "CREATE TABLE marker (x int); INSERT INTO marker VALUES (7)")
    else:
        with redis.Redis.from_url(server.address) as client:
            client.set("marker", "7")


def read_marker(server: ScriptedServer) -> str | None:
    if isinstance(server, PostgresServer):
        return str(query(server.address, "SELECT x FROM marker")[0]["x"])
    with redis.Redis.from_url(server.address, decode_responses=True) as client:
        return client.get("marker")


def test_up_prints_exactly_one_address_line_and_reuses_the_running_server(server):
    proc = server._run("up")
    assert proc.returncode == 0, proc.stderr
    assert ADDRESS[server.name].match(proc.stdout.strip()) and proc.stdout.count("\n") == 1, proc.stdout
    pids = server.pids()
    assert pids

    again = server._run("up")
    assert again.stdout == proc.stdout and "reusing running server" in again.stderr
    assert server.pids()[0] == pids[0]
    assert server._run("status").stdout == proc.stdout


def test_down_then_up_brings_the_server_back_on_the_same_address_with_its_data(server):
    address = server.start()
    write_marker(server)
    server.stop()
    assert server._run("status").returncode == 1

    assert server.start() == address
    assert read_marker(server) == "7"


def test_down_stops_a_frozen_server_too(server):
    server.start()
    server.freeze()
    proc = server._run("down")
    assert proc.returncode == 0, proc.stderr
    assert server._run("status").returncode == 1


def test_a_server_that_cannot_start_fails_up_with_its_log_tail(server):
    server.start()
    server.stop()
    if isinstance(server, PostgresServer):
        with (server.state_dir / "data" / "postgresql.conf").open("a") as conf:
            conf.write("this is = not a setting\n")
        expected = "syntax error in file"
    else:
        (server.state_dir / "dump.rdb").write_bytes(b"REDIS0011 this is no snapshot")
        expected = "Fatal error loading the DB"
    with pytest.raises(ServiceUnavailable) as failed:
        server.start()
    report = str(failed.value)
    assert "did not start" in report and f"last 40 lines of {server.state_dir / server.log_name}" in report
    assert expected in report
