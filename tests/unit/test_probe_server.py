"""The probe/metrics server on real sockets: bounded requests, bounded connections, probes always answered."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time

import pytest

from knarr.observability.health import MAX_HEAD_BYTES, HealthServer, ProbeServerError


@contextlib.asynccontextmanager
async def serving(**kwargs):
    server = HealthServer(0, lambda: (True, "idle, waiting for partitions"), host="127.0.0.1", **kwargs)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def exchange(port: int, request: bytes, timeout: float = 2.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout)
    finally:
        writer.close()


def status(answer: bytes) -> str:
    return answer.split(b"\r\n", 1)[0].decode()


async def test_healthz_and_readyz_answer_a_get():
    async with serving() as server:
        health = await exchange(server.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        ready = await exchange(server.port, b"GET /readyz HTTP/1.1\r\n\r\n")
    assert status(health) == "HTTP/1.1 200 OK" and json.loads(health.split(b"\r\n\r\n")[1])["alive"] is True
    assert json.loads(ready.split(b"\r\n\r\n")[1]) == {"ready": True, "reason": "idle, waiting for partitions"}


async def test_a_request_head_over_the_limit_is_refused_with_431():
    async with serving() as server:
        headers = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"a" * 200) for i in range(MAX_HEAD_BYTES // 200 + 1))
        answer = await exchange(server.port, b"GET /healthz HTTP/1.1\r\n" + headers + b"\r\n")
    assert status(answer) == "HTTP/1.1 431 Request Header Fields Too Large"


async def test_a_request_line_over_the_limit_is_refused_with_414():
    async with serving() as server:
        answer = await exchange(server.port, b"GET /" + b"a" * (MAX_HEAD_BYTES + 10) + b" HTTP/1.1\r\n\r\n")
    assert status(answer) == "HTTP/1.1 414 URI Too Long"


async def test_a_request_with_a_body_is_refused_with_413_without_reading_it():
    async with serving() as server:
        answer = await exchange(server.port, b"GET /healthz HTTP/1.1\r\nContent-Length: 50000000\r\n\r\n")
    assert status(answer) == "HTTP/1.1 413 Content Too Large"


async def test_a_method_other_than_get_is_refused_with_405():
    async with serving() as server:
        answer = await exchange(server.port, b"DELETE /healthz HTTP/1.1\r\n\r\n")
    assert status(answer) == "HTTP/1.1 405 Method Not Allowed" and b"Allow: GET, HEAD" in answer


async def test_many_idle_connections_do_not_stop_healthz_answering():
    async with serving(max_connections=16) as server:
        idle = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(200)]
        try:
            started = time.monotonic()
            answer = await exchange(server.port, b"GET /healthz HTTP/1.1\r\n\r\n", timeout=1.0)
            seconds = time.monotonic() - started
            assert status(answer) == "HTTP/1.1 200 OK"
            assert seconds < 1.0
            assert server.open_connections <= 16
        finally:
            for _, writer in idle:
                writer.close()


async def test_connections_evicted_to_make_room_are_closed():
    async with serving(max_connections=4) as server:
        first_reader, first_writer = await asyncio.open_connection("127.0.0.1", server.port)
        first_writer.write(b"GET /hea")  # a request begun and never finished
        others = [await asyncio.open_connection("127.0.0.1", server.port) for _ in range(4)]
        try:
            assert await asyncio.wait_for(first_reader.read(), 2.0) == b""  # closed by the server
        finally:
            first_writer.close()
            for _, writer in others:
                writer.close()


async def test_a_client_trickling_its_request_is_answered_408_at_the_head_deadline():
    async with serving(head_timeout=0.5) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)

        async def trickle() -> None:  # a header line every 0.1 s: each line is quick, the whole head never ends
            writer.write(b"GET /healthz HTTP/1.1\r\n")
            with contextlib.suppress(ConnectionError):
                for _ in range(30):
                    writer.write(b"X-Slow: 1\r\n")
                    await writer.drain()
                    await asyncio.sleep(0.1)  # the trickle itself, not synchronisation

        started = time.monotonic()
        sender = asyncio.create_task(trickle())
        try:
            answer = await asyncio.wait_for(reader.read(), 2.0)
        finally:
            sender.cancel()
            writer.close()
    assert status(answer) == "HTTP/1.1 408 Request Timeout"
    assert time.monotonic() - started < 1.5


async def test_stopping_closes_idle_connections_at_once():
    async with serving() as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        await server.stop()
        assert await asyncio.wait_for(reader.read(), 1.0) == b""
        writer.close()


async def test_a_taken_port_is_an_error_naming_it_and_what_to_do():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = HealthServer(port, lambda: (True, ""), host="127.0.0.1")
        with pytest.raises(ProbeServerError) as err:
            await server.start()
    assert str(err.value) == (
        f"metrics.port {port} is already in use on 127.0.0.1 (another worker or program on this host listens there); "
        "stop it, set metrics.port to a free port (0 picks one), or set metrics.enabled: false"
    )


async def test_a_host_that_is_not_this_machines_is_an_error_naming_metrics_host():
    server = HealthServer(0, lambda: (True, ""), host="192.0.2.1")  # TEST-NET-1: never local
    with pytest.raises(ProbeServerError, match=r"metrics.host '192.0.2.1' is not an address of this machine"):
        await server.start()


async def test_healthz_fails_naming_the_reason_when_the_worker_cannot_recover_by_itself():
    failure = {"reason": None}
    server = HealthServer(0, lambda: (True, "ok"), host="127.0.0.1", failure=lambda: failure["reason"])
    assert server._route("/healthz")[0] == "200 OK"
    failure["reason"] = "partition 3 failed twice: boom"
    status, body = server._route("/healthz")
    assert status.startswith("503") and body["failed"] == "partition 3 failed twice: boom"
