"""An asyncio face on confluent-kafka's Producer: produce() returns a future resolved on delivery."""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from knarr.kafka.clients import close_producer, open_producer
from knarr.observability.kafka_logs import ClientLog

# One record: value, key, headers.
Record = tuple[bytes, bytes | None, dict[str, str] | None]


# Delivery reports are served on the event loop while records are outstanding: on the way, when
# records are produced and REPORT_POLL_SECONDS have passed since the reports were last served, and
# otherwise by a timer, REPORT_WAIT_SECONDS after the last time at the latest. A timer of its own
# at the shorter interval woke an otherwise sleeping loop about once every eight tasks in spawn mode.
# While somebody waits on the reports (hurry(): the worker holds with a slot idle), the timer runs at
# the shorter interval for REPORT_WAIT_SECONDS after each call.
REPORT_POLL_SECONDS = 0.002
REPORT_WAIT_SECONDS = 0.01


class AsyncProducer:
    """One librdkafka producer whose delivery reports are served on the event loop.

    librdkafka batches messages from concurrent produce() calls on its own (linger.ms), so
    many tasks delivering at once share network round trips. While records are outstanding
    the loop polls the producer (without blocking): when it produces, at most every
    REPORT_POLL_SECONDS, and from a timer when it has not for REPORT_WAIT_SECONDS. A thread
    serving the reports instead had to take the GIL from the busy loop for every single
    report, and wake the loop for every batch.
    """

    def __init__(self, conf: dict[str, Any]) -> None:
        self._conf = {"linger.ms": 5, "enable.idempotence": True, "acks": "all", **conf}
        self._producer: Producer | None = None
        self._polling: asyncio.AbstractEventLoop | None = None  # the loop a report poll is scheduled on
        self._timer: asyncio.Handle | None = None  # that poll (uvloop gives a plain Handle for one due at once)
        self._timer_due = 0.0  # when it is due (the loop's clock)
        self._polled_at = 0.0  # when the reports were last served (the loop's clock)
        self._hurried_until = 0.0  # until then (the loop's clock) the timer runs every REPORT_POLL_SECONDS
        self._reports: deque[tuple[_Batch, KafkaError | Exception | None]] = deque()  # delivery callbacks append (close(): refusals too)
        self._pending: list[tuple[str, list[Record], _Batch]] = []  # taken by produce_all(), produced after the round

    def connect(self, check_timeout: float = 10.0) -> None:
        client_log = ClientLog("producer")
        client_log.quiet = True  # until the brokers answer: a failure is reported in one line
        producer = open_producer(self._conf, client_log)
        try:
            producer.list_topics(timeout=check_timeout)
        except KafkaException as exc:
            producer.poll(0)  # serve the queued log lines, so the last error can be named
            close_producer(producer, flush_timeout=0)
            raise ConnectionError(
                client_log.unreachable(str(self._conf.get("bootstrap.servers")), check_timeout, str(exc))
            ) from None
        client_log.quiet = False
        self._producer = producer

    def _poll_soon(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._polling is not loop:  # (a poll left on a loop that has closed since never runs)
            self._polling = loop
            wait = REPORT_POLL_SECONDS if loop.time() < self._hurried_until else REPORT_WAIT_SECONDS
            self._timer_due = self._polled_at + wait
            self._timer = loop.call_at(self._timer_due, self._poll_on_loop, loop)

    def hurry(self) -> None:
        """Somebody is waiting for the outstanding records' reports (the worker holds, a slot idle, until
        the broker's confirmations bring its load down): serve them every REPORT_POLL_SECONDS instead of
        REPORT_WAIT_SECONDS for the next REPORT_WAIT_SECONDS. A timer at the shorter interval all the time
        would wake a loop that has other things to wait for (docs/performance.md, "The reports a hold
        waits for")."""
        producer = self._producer
        if producer is None or not len(producer):
            return
        loop = asyncio.get_running_loop()
        self._hurried_until = loop.time() + REPORT_WAIT_SECONDS
        if self._polling is loop and self._timer is not None:
            if self._timer_due <= self._polled_at + REPORT_POLL_SECONDS:
                return
            self._timer.cancel()
        self._polling = None
        self._poll_soon(loop)

    def _poll_on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the event loop, from the timer: serve the delivery reports that are ready, and come back
        while any are due (at REPORT_WAIT_SECONDS after they were last served, which may be sooner;
        REPORT_POLL_SECONDS while hurried)."""
        self._polling = self._timer = None
        producer = self._producer
        if producer is None:
            return  # closed
        now = loop.time()
        if now - self._polled_at >= REPORT_POLL_SECONDS:
            self._serve(producer, now)
        if len(producer):
            self._poll_soon(loop)

    def _serve(self, producer: Producer, now: float) -> None:
        """Serve the delivery reports that are ready (their futures settle)."""
        self._polled_at = now
        producer.poll(0)
        _settle(self._take_reports())

    def _take_reports(self) -> list[tuple[_Batch, KafkaError | Exception | None]]:
        reports = []
        while True:
            try:
                reports.append(self._reports.popleft())
            except IndexError:
                return reports

    def _hand_over(self) -> None:
        """Pass reports served off the loop (by close()'s flush, in a worker thread) to their loops."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Batch, KafkaError | Exception | None]]] = {}
        for report in self._take_reports():
            by_loop.setdefault(report[0].future.get_loop(), []).append(report)
        for loop, reports in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, reports)
            except RuntimeError:
                pass  # the loop is closed: nobody is waiting any more

    def produce(self, topic: str, value: bytes, key: bytes | None = None, headers: dict[str, str] | None = None) -> asyncio.Future:
        return self.produce_all(topic, [(value, key, headers)])

    def produce_all(self, topic: str, records: list[Record]) -> asyncio.Future:
        """Produce every record; the future resolves once all are delivered, or fails with the first error
        (an error librdkafka raises at once included).

        The records go to librdkafka when the loop's current round is done, with those of every other
        call made in it: produced one after another, a record costs librdkafka a third to a half less
        than produced between two tasks' work (docs/performance.md, "Once per round, not once per task")."""
        assert self._producer is not None, "connect() first"
        loop = asyncio.get_running_loop()
        batch = _Batch(loop.create_future(), len(records), self._reports)
        if not records:
            batch.future.set_result(None)
            return batch.future
        if not self._pending:
            loop.call_soon(self._produce_pending, loop)
        self._pending.append((topic, records, batch))
        return batch.future

    def _produce_pending(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop, after the round that asked: produce what produce_all() took, then serve reports."""
        producer = self._producer
        _settle(self._produce_now(self._take_pending()))
        if producer is None:
            return  # closed meanwhile (close() produced what was pending)
        now = loop.time()
        if now - self._polled_at >= REPORT_POLL_SECONDS:  # reports served on the way, no wake-up of their own
            self._serve(producer, now)
        self._poll_soon(loop)

    def _take_pending(self) -> list[tuple[str, list[Record], _Batch]]:
        pending, self._pending = self._pending, []
        return pending

    def _produce_now(self, pending: list[tuple[str, list[Record], _Batch]]) -> list[tuple[_Batch, Exception]]:
        """Produce the records; returns, as reports, the batches librdkafka refused a record of at once
        (a record too large, say), with why."""
        refused = []
        for topic, records, batch in pending:
            try:
                for value, key, headers in records:
                    self._produce(topic, value, key, headers, batch.report)
            except Exception as exc:
                refused.append((batch, exc))
        return refused

    def _produce(self, topic: str, value: bytes, key: bytes | None, headers: dict[str, str] | None, on_delivery: Any) -> None:
        if self._producer is None:
            raise KafkaException(KafkaError(KafkaError._DESTROY, "the producer is closed"))
        while True:
            try:
                self._producer.produce(
                    topic, value=value, key=key, headers=list(headers.items()) if headers else None, on_delivery=on_delivery
                )
                return
            except BufferError:
                self._producer.poll(0.1)  # local queue full: let deliveries drain, then try again

    def close(self, timeout: float = 10.0) -> int:
        """Flush (bounded) and destroy the producer; returns how many messages were still undelivered."""
        refused = self._produce_now(self._take_pending())  # what a round asked for before the close
        producer, self._producer = self._producer, None
        remaining = close_producer(producer, timeout)
        self._reports.extend(refused)
        self._hand_over()
        return remaining


class _Batch:
    """The records of one produce_all() call, and the future that settles when all are delivered."""

    __slots__ = ("future", "remaining", "_reports")

    def __init__(self, future: asyncio.Future, count: int, reports: deque) -> None:
        self.future = future
        self.remaining = count
        self._reports = reports

    def report(self, err: KafkaError | None, msg: Any) -> None:
        """librdkafka's delivery callback, on whichever thread serves it: queue the report for the loop."""
        self._reports.append((self, err))

    def settle(self, err: KafkaError | Exception | None) -> None:
        """On the event loop: count one delivery; the first error (a delivery's, or what librdkafka
        refused at once) fails the whole batch."""
        if self.future.done():
            return
        if err is not None:
            self.future.set_exception(err if isinstance(err, Exception) else KafkaException(err))
            return
        self.remaining -= 1
        if self.remaining == 0:
            self.future.set_result(None)


def _settle(reports: list[tuple[_Batch, KafkaError | Exception | None]]) -> None:
    for batch, err in reports:
        batch.settle(err)
