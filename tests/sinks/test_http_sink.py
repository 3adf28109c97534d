"""The http sink against a real HTTP server process: what it sends, what it retries, what it refuses."""

from __future__ import annotations

import asyncio
import email.utils
import json
import time

import pytest

from knarr.api.payloads import HttpPayload
from knarr.config.models import HttpSinkConfig
from knarr.sinks.base import PermanentSinkError, SinkConnectError, TransientSinkError
from knarr.sinks.http import HttpSink
from tests.services.http_server import HttpSinkServer


def make_sink(server: HttpSinkServer, **config) -> HttpSink:
    return HttpSink("hook", HttpSinkConfig(url=server.url(), **{"timeout_seconds": 5, **config}))


@pytest.fixture
async def connected():
    sinks: list[HttpSink] = []

    async def connect(sink: HttpSink) -> HttpSink:
        sinks.append(sink)
        await sink.connect()
        return sink

    yield connect
    for sink in sinks:
        await sink.close()


async def test_each_payload_is_one_request_with_its_json_body_and_the_configured_headers(http_server, connected):
    sink = await connected(make_sink(http_server, headers={"X-Team": "search"}))
    await sink.deliver([HttpPayload(data={"i": i}) for i in range(5)])

    sent = http_server.requests()
    assert sorted(json.loads(r["body"])["i"] for r in sent) == [0, 1, 2, 3, 4]
    assert {(r["path"], r["headers"]["Content-Type"], r["headers"]["X-Team"]) for r in sent} == {
        ("/ingest", "application/json", "search")}
    assert [r["method"] for r in http_server.requests(None)][0] == "OPTIONS"  # the check at connect


async def test_a_configured_content_type_replaces_the_json_one(http_server, connected):
    sink = await connected(make_sink(http_server, headers={"content-type": "application/x-ndjson"}))
    await sink.deliver([HttpPayload(data={"i": 0})])
    [sent] = http_server.requests()
    assert [v for k, v in sent["headers"].items() if k.lower() == "content-type"] == ["application/x-ndjson"]


async def test_the_configured_method_is_used(http_server, connected):
    sink = await connected(make_sink(http_server, method="PUT"))
    await sink.deliver([HttpPayload(data={"i": 0})])
    assert [r["method"] for r in http_server.requests(None)] == ["OPTIONS", "PUT"]


async def test_a_429_is_retried_after_the_servers_retry_after_within_the_same_delivery(http_server, connected):
    sink = await connected(make_sink(http_server, max_retries=2))
    http_server.fail(429, 1, retry_after=1)
    started = time.monotonic()
    await sink.deliver([HttpPayload(data={"i": 0})])

    assert time.monotonic() - started >= 1
    assert [r["status"] for r in http_server.requests()] == [429, 200]


async def test_a_retry_after_given_as_an_http_date_is_honoured(http_server, connected):
    sink = await connected(make_sink(http_server, max_retries=1))
    retry_at = time.time() + 2
    http_server.fail(503, 1, retry_after=email.utils.formatdate(retry_at, usegmt=True))
    await sink.deliver([HttpPayload(data={"i": 0})])
    first, second = http_server.requests()
    assert (first["status"], second["status"]) == (503, 200)
    # The date has second precision: it names the start of retry_at's second, 1 to 2 s after the failure
    # was set up, so the retry waits at least until then, which can be less than 1 s after the answer.
    assert second["received"] >= int(retry_at) - 0.01, (second["received"], int(retry_at))
    assert second["received"] - first["answered"] >= 0.5


async def test_a_server_still_failing_after_the_retries_is_an_outage_carrying_its_retry_after(http_server, connected):
    sink = await connected(make_sink(http_server, max_retries=1))
    http_server.fail(503, 2, retry_after=1, match='"i":1')
    with pytest.raises(TransientSinkError) as raised:
        await sink.deliver([HttpPayload(data={"i": i}) for i in range(3)])

    assert raised.value.retry_after == 1
    assert str(raised.value).startswith(f"{http_server.url()}: 1 of 3 request(s) failed: HTTP 503 Service Unavailable")


async def test_the_next_attempt_sends_only_the_payloads_the_server_has_not_taken(http_server, connected):
    sink = await connected(make_sink(http_server, max_retries=0))
    payloads = [HttpPayload(data={"i": i}) for i in range(4)]
    http_server.fail(503, 1, match='"i":2')
    with pytest.raises(TransientSinkError):
        await sink.deliver(payloads)

    await sink.deliver(payloads)

    assert sorted(b["i"] for b in http_server.accepted()) == [0, 1, 2, 3]
    assert [json.loads(r["body"])["i"] for r in http_server.requests()].count(2) == 2


async def test_a_400_refuses_only_its_payload_with_the_status_and_the_head_of_the_body(http_server, connected):
    sink = await connected(make_sink(http_server))
    http_server.fail(400, -1, match='"bad":true', body='{"error": "field \'colour\' is unknown"}')
    bad = HttpPayload(data={"i": 1, "bad": True})
    with pytest.raises(PermanentSinkError) as raised:
        await sink.deliver([HttpPayload(data={"i": 0}), bad, HttpPayload(data={"i": 2})])

    assert raised.value.payloads == [bad]
    assert str(raised.value) == (f"{http_server.url()} refused 1 of 3 request(s): HTTP 400 Bad Request: "
                                 "{\"error\": \"field 'colour' is unknown\"}")
    assert sorted(b["i"] for b in http_server.accepted()) == [0, 2]
    assert len(http_server.requests()) == 3  # a refusal is not retried


async def test_a_server_that_does_not_answer_in_time_is_an_outage(http_server, connected):
    sink = await connected(make_sink(http_server, timeout_seconds=0.5, max_retries=0))
    http_server.fail(200, 1, hang=2)
    started = time.monotonic()
    with pytest.raises(TransientSinkError, match=r"1 of 1 request\(s\) failed: no answer within 0.5s"):
        await sink.deliver([HttpPayload(data={"i": 0})])
    assert time.monotonic() - started < 2


async def test_a_stopped_server_is_an_outage_until_it_is_back_on_its_port(http_server, connected):
    sink = await connected(make_sink(http_server, max_retries=0))
    http_server.stop()
    with pytest.raises(TransientSinkError, match="ConnectError"):
        await sink.deliver([HttpPayload(data={"i": 0})])
    http_server.start()
    await sink.deliver([HttpPayload(data={"i": 0})])
    assert http_server.accepted() == [{"i": 0}]


async def test_no_more_than_max_concurrency_requests_are_in_flight_at_once(http_server, connected):
    sink = await connected(make_sink(http_server, max_concurrency=2))
    http_server.fail(200, -1, hang=0.3)
    await sink.deliver([HttpPayload(data={"i": i}) for i in range(6)])

    spans = [(r["received"], r["answered"]) for r in http_server.requests()]
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert len(spans) == 6 and most == 2


async def test_connect_counts_any_http_answer_as_reachable(http_server, connected):
    http_server.fail(405, 1, method="OPTIONS")
    await connected(make_sink(http_server))
    assert [r["status"] for r in http_server.requests("OPTIONS")] == [405]


async def test_connect_to_a_dead_server_fails_naming_the_sink_without_the_password():
    sink = HttpSink("hook", HttpSinkConfig(url="http://knarr:s3cret@127.0.0.1:1/ingest", timeout_seconds=2))
    with pytest.raises(SinkConnectError) as raised:
        await sink.connect()
    await sink.close()
    assert str(raised.value).startswith("http sink 'hook' (http://knarr:***@127.0.0.1:1/ingest): cannot reach the server: ")
    assert "s3cret" not in str(raised.value)
    assert str(raised.value).endswith("; check the URL and that the server is up")
