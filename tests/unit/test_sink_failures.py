"""A sink that is down makes the delivery wait; a sink that refuses a batch asks the handler."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from knarr import BaseHandler, CollectResult, FilePayload
from knarr.api.payloads import DeliveryAction
from knarr.sinks.base import PermanentSinkError, TransientSinkError
from knarr.sinks.delivery import DeliveryFailedError, Origin, SinkManager
from knarr.sinks.dlq import FileDeadLetterQueue


class FlakySink:
    """A sink whose server fails the first ``failures`` deliveries with ``error``, then takes everything."""

    sink_type = "filesystem"
    name = "out"

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0
        self.delivered: list = []

    async def connect(self) -> None: ...

    async def close(self) -> None: ...

    async def deliver(self, payloads: list) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        self.delivered.extend(payloads)


class Asking(BaseHandler):
    def __init__(self, answer: DeliveryAction) -> None:
        self.answer = answer
        self.asked: list = []

    async def on_delivery_error(self, error):
        self.asked.append(error)
        return self.answer


def _outputs(n: int) -> CollectResult:
    return CollectResult(files=[FilePayload(path="x.jsonl", data={"i": i}) for i in range(n)])


async def test_an_outage_waits_and_retries_without_asking_the_handler_or_dead_lettering(tmp_path):
    sink = FlakySink(3, TransientSinkError("connection refused"))
    handler = Asking(DeliveryAction.DLQ)
    dlq = FileDeadLetterQueue(str(tmp_path / "dlq.jsonl"), "input")
    manager = SinkManager([sink], dlq, handler, backoff_base=0.01, backoff_max=0.05)
    await manager.connect_all()

    delivery = asyncio.create_task(manager.deliver(_outputs(4), Origin(partition=2, offsets=(7,))))
    while sink.calls < 2:
        await asyncio.sleep(0.005)
    assert "filesystem sink 'out' is unavailable: connection refused" in manager.stalled[2]

    assert await delivery == 4
    assert [p.data for p in sink.delivered] == [{"i": i} for i in range(4)]
    assert handler.asked == []
    assert manager.dead_lettered == 0 and manager.stalled == {}


async def test_the_servers_retry_after_is_honoured_up_to_the_backoff_cap():
    sink = FlakySink(1, TransientSinkError("429 Too Many Requests", retry_after=0.3))
    manager = SinkManager([sink], None, Asking(DeliveryAction.DLQ), backoff_base=0.01, backoff_max=5)
    started = time.monotonic()
    await manager.deliver(_outputs(1), Origin(partition=0))
    assert time.monotonic() - started >= 0.3 - 0.002  # uvloop's timers run on a whole-millisecond clock


async def test_a_refused_batch_asks_the_handler_and_is_dead_lettered_with_the_reason(tmp_path):
    sink = FlakySink(99, PermanentSinkError('column "colour" of relation "results" does not exist'))
    handler = Asking(DeliveryAction.DLQ)
    dlq = FileDeadLetterQueue(str(tmp_path / "dlq.jsonl"), "input")
    manager = SinkManager([sink], dlq, handler)
    await manager.connect_all()

    await manager.deliver(_outputs(2), Origin(partition=1, offsets=(10, 11)))

    assert len(handler.asked) == 1 and sink.calls == 1
    [record] = [json.loads(line) for line in (tmp_path / "dlq.jsonl").read_text().splitlines()]
    assert record["error"] == 'PermanentSinkError: column "colour" of relation "results" does not exist'
    assert manager.dead_lettered == 2


async def test_many_deliveries_waiting_for_one_sink_log_one_outage_and_leave_no_trace_when_cancelled():
    import logging

    import structlog
    from structlog.testing import capture_logs

    from knarr.observability import metrics

    sink = FlakySink(10_000, TransientSinkError("connection refused"))
    manager = SinkManager([sink], None, Asking(DeliveryAction.DLQ), backoff_base=0.01, backoff_max=0.02)
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))  # whatever ran before
    with capture_logs() as logged:
        waiting = [asyncio.create_task(manager.deliver(_outputs(1), Origin(partition=p % 3))) for p in range(12)]
        while sink.calls < 60:
            await asyncio.sleep(0.01)
    structlog.configure(**saved)
    assert sorted(manager.stalled) == [0, 1, 2]
    assert metrics.sink_waiting.labels("out", "filesystem")._value.get() == 12

    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)

    assert manager.stalled == {}
    assert metrics.sink_waiting.labels("out", "filesystem")._value.get() == 0
    assert [e["event"] for e in logged if "unavailable" in e["event"]] == [
        "sink unavailable; deliveries wait and retry (nothing is dead-lettered for an outage)"]


class SentLikeRedisPy(FlakySink):
    """A server that takes the request and never answers, written to as redis-py writes: the send in
    asyncio.wait_for, the reply read in asyncio.timeout. On Python 3.11 a cancel that arrives in
    the loop iteration where the send completes is dropped by wait_for (it returns the send's
    result), so the read's timeout, seeing the task's cancel count already raised, expires as a
    plain TimeoutError: the sink reports a transient error, not a cancel."""

    def __init__(self) -> None:
        super().__init__(0, TransientSinkError(""))

    async def deliver(self, payloads: list) -> None:
        self.calls += 1

        async def send() -> None:
            return None

        await asyncio.wait_for(send(), 5)
        try:
            async with asyncio.timeout(0.05):
                await asyncio.sleep(3600)
        except TimeoutError:
            raise TransientSinkError("no answer in time") from None


async def test_a_cancelled_delivery_stops_retrying_even_when_the_client_drops_the_cancel():
    sink = SentLikeRedisPy()
    manager = SinkManager([sink], None, Asking(DeliveryAction.DLQ), backoff_base=0.01, backoff_max=0.02)
    delivery = asyncio.create_task(manager.deliver(_outputs(1), Origin(partition=0)))
    await asyncio.sleep(0)  # the delivery now waits in wait_for, its send scheduled to complete next

    delivery.cancel()  # the worker's stop, in that very iteration
    await asyncio.wait([delivery], timeout=5)
    if not delivery.done():  # still retrying: a second cancel ends it, and the test fails
        delivery.cancel()
    with pytest.raises(asyncio.CancelledError):
        await delivery
    assert sink.calls == 1  # no retry after the cancel
    assert manager.stalled == {}


class HalfRefusingSink(FlakySink):
    """A server that stores the even payloads and refuses the odd ones, naming them."""

    def __init__(self) -> None:
        super().__init__(0, PermanentSinkError(""))
        self.batches: list[list] = []

    async def deliver(self, payloads: list) -> None:
        self.batches.append([p.data["i"] for p in payloads])
        self.delivered.extend(p for p in payloads if p.data["i"] % 2 == 0)
        refused = [p for p in payloads if p.data["i"] % 2]
        if refused:
            raise PermanentSinkError(f"{len(refused)} refused", payloads=refused)


async def test_only_the_payloads_a_sink_names_as_refused_are_dead_lettered(tmp_path):
    sink = HalfRefusingSink()
    dlq = FileDeadLetterQueue(str(tmp_path / "dlq.jsonl"), "input")
    manager = SinkManager([sink], dlq, Asking(DeliveryAction.DLQ))
    await manager.connect_all()

    await manager.deliver(_outputs(4), Origin(partition=0, offsets=(5,)))

    [record] = [json.loads(line) for line in (tmp_path / "dlq.jsonl").read_text().splitlines()]
    assert record["original_payloads"] == ['{"i":1}', '{"i":3}']
    assert record["error"] == "PermanentSinkError: 2 refused"
    assert [p.data["i"] for p in sink.delivered] == [0, 2]
    assert manager.dead_lettered == 2


async def test_a_retry_asked_by_the_handler_sends_only_the_refused_payloads_again():
    sink = HalfRefusingSink()
    handler = Asking(DeliveryAction.RETRY)
    manager = SinkManager([sink], None, handler, max_retries=1, backoff_base=0.001, backoff_max=0.001)

    with pytest.raises(DeliveryFailedError):
        await manager.deliver(_outputs(4), Origin(partition=0))

    assert sink.batches == [[0, 1, 2, 3], [1, 3]]
    assert [[p.data["i"] for p in e.payloads] for e in handler.asked] == [[1, 3], [1, 3]]
