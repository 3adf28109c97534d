"""The Kafka source: a confluent-kafka consumer driven from one dedicated thread.

Every consumer call (poll, commit, pause) runs on that one thread, so the consumer is
never used concurrently. Rebalance callbacks run there too, inside consume(): assignment
hands new partitions to the event loop; revocation waits (bounded) for the event loop to
drain those partitions and commits their final offsets *before* the partitions move on.

Commits: what became committable is sent with the next poll, asynchronously, one commit in
flight at a time; the broker's answer comes back through ``on_commit`` inside a later
consume(), and only then are the offsets acknowledged to the engine (a failed commit is
simply sent again, with the same or a higher offset, at a later poll). Consumption therefore
never waits for the group coordinator's round trip. The other commits are synchronous:
a partition's revocation and the final commit must be done before the worker moves on, and
while the worker holds (backpressure) no poll runs to serve an answer, so the hold commits
what finished every 50 ms itself. An answer to an asynchronous commit that a synchronous one
has overtaken is not handed back: acknowledged offsets only move forward.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

from knarr.kafka import settings
from knarr.kafka.clients import close_consumer, open_consumer
from knarr.kafka.ownership import grace_seconds

from knarr.api.messages import SourceMessage
from knarr.api.trusted import trusted_builder
from knarr.config.models import ExecutorConfig, KafkaConfig
from knarr.errors import UnavailableError
from knarr.observability import metrics
from knarr.observability.kafka_logs import ClientLog
from knarr.observability.logging import get_logger
from knarr.sources.base import AssignFn, RevokeFn
from knarr.sources.group_check import GroupCheck

log = get_logger(component="kafka-source")

POLL_TIMEOUT_SECONDS = 0.05  # consume() waits this long unless the batch fills: it bounds added latency
LAG_REFRESH_SECONDS = 5.0
GROUP_CHECK_SETTLE_SECONDS = 5.0  # on close, the longest wait for a look at the group still in flight
_message = trusted_builder(SourceMessage)  # every polled message's


class KafkaSource:
    def __init__(self, kafka: KafkaConfig, executor: ExecutorConfig, client_id: str = "knarr") -> None:
        self.topic = kafka.source_topic
        self._conf = settings.source_consumer(kafka, client_id)
        self._revoke_wait = executor.drain_timeout_seconds + 10
        self._startup_timeout = kafka.startup_timeout_seconds
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="knarr-kafka")
        self._consumer: Consumer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_assign: AssignFn | None = None
        self._on_revoke: RevokeFn | None = None
        self._want_paused: set[int] = set()
        self._paused_applied: set[int] = set()
        self._lag_at = 0.0
        self._committed: dict[int, int] = {}
        self._commit_in_flight = False  # consumer thread: an asynchronous commit awaits its answer
        self._acknowledged: dict[int, int] = {}  # consumer thread: answered commits not yet handed over
        self.high_watermarks: dict[int, int] = {}  # per partition, as of the last lag refresh
        self._group_check = _group_check(kafka, self._revoke_wait)

    @property
    def committed_offsets(self) -> dict[int, int]:
        return dict(self._committed)

    # --- lifecycle (event loop side) -------------------------------------------------------
    async def start(self, on_assign: AssignFn, on_revoke: RevokeFn) -> None:
        self._loop = asyncio.get_running_loop()
        self._on_assign, self._on_revoke = on_assign, on_revoke
        await self._loop.run_in_executor(self._thread, self._start_sync)

    def _start_sync(self) -> None:
        client_log = ClientLog("consumer")
        client_log.quiet = True  # until the brokers answer: a failure is reported in one line
        self._consumer = open_consumer({**self._conf, "on_commit": self._commit_answered}, client_log)
        try:
            self._consumer.list_topics(timeout=self._startup_timeout)
        except KafkaException as exc:
            self._consumer.poll(0)  # serve the queued log lines, so the last error can be named
            close_consumer(self._consumer)
            self._consumer = None
            raise UnavailableError(
                client_log.unreachable(self._conf["bootstrap.servers"], self._startup_timeout, str(exc))
            ) from None
        client_log.quiet = False
        self._subscribe()

    def _subscribe(self) -> None:
        assert self._consumer is not None
        self._consumer.subscribe([self.topic], on_assign=self._assigned, on_revoke=self._revoked, on_lost=self._lost)

    async def poll(self, max_records: int, commits: dict[int, int]) -> tuple[list[SourceMessage], dict[int, int]]:
        assert self._loop is not None
        return await self._loop.run_in_executor(self._thread, self._poll_sync, max_records, commits)

    async def commit_now(self, commits: dict[int, int]) -> dict[int, int]:
        assert self._loop is not None
        return await self._loop.run_in_executor(self._thread, self._commit_sync, commits)

    def set_paused(self, partitions: set[int]) -> None:
        self._want_paused = set(partitions)

    @property
    def finished(self) -> bool:
        return False

    async def close(self) -> None:
        if self._consumer is not None and self._loop is not None:
            await self._loop.run_in_executor(self._thread, self._close_sync)
        self._thread.shutdown(wait=True)
        self._on_assign = self._on_revoke = None

    # --- consumer thread -------------------------------------------------------------------
    def _poll_sync(self, max_records: int, commits: dict[int, int]) -> tuple[list[SourceMessage], dict[int, int]]:
        consumer = self._consumer
        assert consumer is not None
        self._commit_async(commits)
        self._apply_pause()
        raw = consumer.consume(max_records, POLL_TIMEOUT_SECONDS)  # serves on_commit too
        messages = []
        for m in raw:
            err = m.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    metrics.consumer_errors.inc()
                    log.warning("consumer error", error=str(err))
                continue
            _, ts = m.timestamp()
            messages.append(
                _message(topic=m.topic(), partition=m.partition(), offset=m.offset(), value=m.value() or b"",
                         key=m.key(), timestamp=ts, payload=None, parse_error=None)
            )
        now = time.monotonic()
        if now - self._lag_at > LAG_REFRESH_SECONDS:
            self._refresh_lag()
        if self._group_check is not None and (stranded := self._group_check.stranded(now)):
            self._rejoin(stranded)
        done, self._acknowledged = self._acknowledged, {}
        return messages, done

    def _commit_async(self, commits: dict[int, int]) -> None:
        """Send ``commits`` unless a commit is still awaiting its answer (then a later poll sends
        them, or higher offsets, once it has come)."""
        if not commits or self._commit_in_flight:
            return
        assert self._consumer is not None
        offsets = [TopicPartition(self.topic, p, o) for p, o in commits.items()]
        try:
            self._consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as exc:
            log.warning("offset commit failed; will retry", offsets=commits, error=str(exc))
            return
        self._commit_in_flight = True

    def _commit_answered(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """on_commit, called inside consume() when the group coordinator has answered an
        asynchronous commit (this source makes no other kind that reports here)."""
        self._commit_in_flight = False
        if err is not None:
            log.warning("offset commit failed; will retry", error=str(err))
            return
        # An answer to a commit older than one confirmed since (a synchronous one, sent after it)
        # adds nothing: what is handed back only ever moves forward.
        fresh = {p: o for p, o in self._accepted(partitions).items() if o > self._committed.get(p, -1)}
        self._took(fresh)
        self._acknowledged.update(fresh)  # fresh offsets only rise, so the newest is the highest

    def _commit_sync(self, commits: dict[int, int]) -> dict[int, int]:
        assert self._consumer is not None
        if not commits:
            return {}
        offsets = [TopicPartition(self.topic, p, o) for p, o in commits.items()]
        try:
            result = self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            log.warning("offset commit failed; will retry", offsets=commits, error=str(exc))
            return {}
        done = self._accepted(result or [])
        self._took(done)
        return done

    def _accepted(self, partitions: list[TopicPartition]) -> dict[int, int]:
        """The offsets a commit's answer accepted, per partition of this source's topic; the
        partitions it refused are logged (the next commit sends them again)."""
        done = {}
        for tp in partitions:
            if tp.topic != self.topic:
                continue
            if tp.error is None:
                done[tp.partition] = tp.offset
            else:
                log.warning("offset commit failed for partition", partition=tp.partition, error=str(tp.error))
        return done

    def _took(self, done: dict[int, int]) -> None:
        """The broker took these commits: count them and keep the newest offset per partition."""
        for p, o in done.items():
            self._committed[p] = max(o, self._committed.get(p, o))
            metrics.offsets_committed.labels(str(p)).inc()
            metrics.committed_offset.labels(str(p)).set(self._committed[p])

    def _apply_pause(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        want = self._want_paused
        if want == self._paused_applied:
            return
        assigned = {tp.partition for tp in consumer.assignment()}
        to_pause = (want - self._paused_applied) & assigned
        to_resume = (self._paused_applied - want) & assigned
        if to_pause:
            consumer.pause([TopicPartition(self.topic, p) for p in sorted(to_pause)])
        if to_resume:
            consumer.resume([TopicPartition(self.topic, p) for p in sorted(to_resume)])
        self._paused_applied = want & assigned

    def _refresh_lag(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        self._lag_at = time.monotonic()
        for tp in consumer.assignment():
            try:
                _, high = consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                continue
            if high is None or high < 0:
                continue
            self.high_watermarks[tp.partition] = high
            committed = self._committed.get(tp.partition)
            if committed is None or committed == OFFSET_INVALID:
                continue
            metrics.consumer_lag.labels(str(tp.partition)).set(max(0, high - committed))

    def _rejoin(self, stranded: frozenset[int]) -> None:
        """Leave the group and join it again: the rebalance that follows hands out what no member owned
        (this worker's own partitions are drained and committed first, as in any revocation)."""
        assert self._consumer is not None and self._group_check is not None
        log.warning("partitions have had no owner in the group for longer than a rebalance takes "
                    "(a static member killed mid-rebalance leaves them so); rejoining the group to hand them out",
                    partitions=sorted(stranded), group=self._group_check.group)
        metrics.group_rejoins.inc()
        self._consumer.unsubscribe()
        self._subscribe()
        self._group_check.rejoined()

    def _call_loop(self, coro, timeout: float) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        ids = [tp.partition for tp in partitions]
        log.info("partitions assigned", partitions=ids)
        assert self._on_assign is not None
        self._call_loop(self._on_assign(ids), 30)
        self._paused_applied -= set(ids)  # new assignments start unpaused; the next poll re-applies

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        ids = [tp.partition for tp in partitions]
        log.info("partitions revoked; draining", partitions=ids)
        assert self._on_revoke is not None
        try:
            offsets = self._call_loop(self._on_revoke(ids, False), self._revoke_wait)
        except Exception as exc:
            log.error("revoke drain failed; nothing committed for those partitions", partitions=ids, error=str(exc))
            return
        if offsets:
            self._commit_sync(offsets)
        self._paused_applied -= set(ids)

    def _lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        ids = [tp.partition for tp in partitions]
        log.warning("partitions lost (session expired); not committing", partitions=ids)
        assert self._on_revoke is not None
        try:
            self._call_loop(self._on_revoke(ids, True), self._revoke_wait)
        except Exception as exc:
            log.error("stopping lost partitions failed", partitions=ids, error=str(exc))

    def _close_sync(self) -> None:
        if self._group_check is not None:
            self._group_check.settle(GROUP_CHECK_SETTLE_SECONDS)
        consumer, self._consumer = self._consumer, None
        close_consumer(consumer, on_error=lambda error: log.warning("consumer close failed", error=error))


def _group_check(kafka: KafkaConfig, revoke_wait: float) -> GroupCheck | None:
    """The looks for stranded partitions, with static membership only (knarr.kafka.ownership)."""
    interval = kafka.ownership_check_seconds
    if settings.STATIC_MEMBER not in kafka.extra or interval == 0:
        return None
    grace = grace_seconds(kafka.session_timeout_ms / 1000, revoke_wait, interval)
    return GroupCheck(settings.connection(kafka.brokers, kafka.extra), kafka.consumer_group, kafka.source_topic,
                      interval, grace)
