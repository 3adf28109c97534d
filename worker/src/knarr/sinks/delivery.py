"""Delivering a hook's CollectResult: resolve sinks, deliver per sink, and handle failures.

A failed delivery asks the handler's ``on_delivery_error``: RETRY (bounded, with backoff),
SKIP (drop), or DLQ (the default). Returning from :meth:`SinkManager.deliver` means every
payload is either confirmed by its sink or handled — only then may the offset complete.

A *transient* failure (:class:`~knarr.sinks.base.TransientSinkError`: the server is down or
overloaded) asks nobody: the delivery waits and retries with backoff (the server's Retry-After
when it gives one) until the sink takes the batch. The partition waits with it, readiness and
``knarr_sink_waiting`` name the sink, nothing is dead-lettered for an outage.

A dead letter the DLQ itself refuses follows ``dlq.on_send_failure``: ``stall`` keeps
retrying with backoff (the partition waits, readiness says why, nothing is lost) and
``drop`` counts, logs and gives up on it (the offset completes). The worker never exits for it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from knarr.api.handler import BaseHandler
from knarr.api.messages import SourceMessage
from knarr.api.payloads import SINK_TYPES, CollectResult, DeliveryAction, DeliveryError
from knarr.api.tasks import ExecutorError, ExecutorTask
from knarr.errors import FatalError
from knarr.observability import metrics
from knarr.observability.logging import get_logger
from knarr.runtime.backoff import retry_delay
from knarr.runtime.hooks import call_hook
from knarr.runtime.stats import RunStats
from knarr.runtime.stopping import cancel_requested
from knarr.sinks.base import PermanentSinkError, Sink, TransientSinkError
from knarr.sinks.dlq import stage_of, task_record
from knarr.sinks.resolution import resolve_sink

log = get_logger(component="sinks")

DLQ_SEND_ATTEMPTS = 5  # before dlq.on_send_failure applies
DLQ_STALL_MAX_DELAY = 30.0
OUTAGE_REMINDER_SECONDS = 30.0


class DeliveryFailedError(FatalError):
    """Payloads could be neither delivered nor dead-lettered: the worker must stop without committing."""


class Origin(NamedTuple):
    """Where outputs come from: the partition and the source messages they derive from (DLQ records name them).

    Immutable, and made for every delivery of a message's or a window's outputs (and a task's when
    the flight recorder is on): a named tuple is made in a third of a frozen dataclass's bytecodes."""

    partition: int | None
    offsets: tuple[int, ...] = ()
    keys: tuple[bytes | None, ...] = ()
    stage: str = ""  # the hook whose outputs these are: task | message | window (the flight recorder says so)
    task_id: str | None = None

    @classmethod
    def of(cls, partition: int | None, messages: list[SourceMessage], stage: str = "",
           task_id: str | None = None) -> Origin:
        if len(messages) == 1:  # most tasks come from one message
            message = messages[0]
            return cls(partition, (message.offset,), (message.key,), stage, task_id)
        return cls(partition, tuple(m.offset for m in messages), tuple(m.key for m in messages), stage, task_id)


@dataclass(slots=True)
class _Outage:
    """A sink that deliveries are waiting for."""

    since: float
    reminded: float
    deliveries: int = 1


class SinkManager:
    def __init__(
        self,
        sinks: list[Sink],
        dlq: Any,
        handler: BaseHandler,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        stats: RunStats | None = None,
        on_send_failure: str = "stall",
    ) -> None:
        # Keyed by kind: a payload list of CollectResult goes to one kind (every plug-in is of kind "plugin");
        # metrics and DLQ records name the sink's own type.
        self.sinks: dict[tuple[str, str], Sink] = {(getattr(s, "kind", s.sink_type), s.name): s for s in sinks}
        self._names: dict[str, list[str]] = {}
        for sink_type, name in self.sinks:
            self._names.setdefault(sink_type, []).append(name)
        self._resolved: dict[tuple[str, str], tuple[str, str]] = {}
        self._delivery_metrics: dict[int, tuple[Any, Any, Any]] = {}  # id(sink) -> its children of delivered()'s
        self.dlq = dlq
        self.handler = handler
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.connected = False
        self.stats = stats or RunStats()
        self.on_send_failure = on_send_failure
        self.dlq_stalled: dict[int | None, str] = {}  # partitions waiting for the DLQ to accept a record
        self.waiting: dict[int | None, str] = {}  # partitions waiting for a sink that is down to come back
        self._waiters: dict[int | None, int] = {}  # deliveries waiting, per partition
        self._outages: dict[tuple[str, str], _Outage] = {}  # sinks some delivery is waiting for
        self.recorder: Any = None  # the flight recorder, or None (debug off)
        # The sinks that can hear of their confirmations sooner when asked (hurry).
        self._hurriers = [s.hurry for s in [*self.sinks.values(), dlq] if callable(getattr(s, "hurry", None))]

    @property
    def stalled(self) -> dict[int | None, str]:
        """Every partition held up by delivery, and why (a sink that is down, a DLQ that refuses)."""
        return {**self.waiting, **self.dlq_stalled}

    @property
    def dead_lettered(self) -> int:
        return self.stats.dead_lettered

    def hurry(self) -> None:
        """The worker waits for deliveries to be confirmed (it holds, a slot idle): every sink that
        batches its confirmations serves them sooner for a short while."""
        for hurry in self._hurriers:
            hurry()

    async def connect_all(self) -> None:
        """Connect every sink and the DLQ, in order; the first failure stops startup."""
        for sink in self.sinks.values():
            await sink.connect()
        if self.dlq is not None:
            await self.dlq.connect()
        self.connected = True

    async def close_all(self) -> None:
        for sink in [*self.sinks.values(), self.dlq]:
            if sink is None:
                continue
            try:
                await sink.close()
            except Exception as exc:  # closing must never stop the rest of shutdown
                log.warning("sink close failed", sink=getattr(sink, "name", "dlq"), error=str(exc))
        self.connected = False

    def plan(self, collect: CollectResult) -> list[tuple[Sink, list[Any]]]:
        """Resolve every payload to its sink, grouped per sink. Raises SinkResolutionError."""
        grouped: dict[tuple[str, str], list[Any]] = {}
        resolved = self._resolved
        for name, payloads in collect.__dict__.items():  # its fields as they are (by_sink_type's, empty ones skipped)
            if not payloads or (sink_type := SINK_TYPES.get(name)) is None:  # (None: a subclass's own field)
                continue
            for payload in payloads:
                key = resolved.get((sink_type, payload.sink)) or self._resolve(sink_type, payload.sink)
                grouped.setdefault(key, []).append(payload)
        return [(self.sinks[key], payloads) for key, payloads in grouped.items()]

    def _resolve(self, sink_type: str, requested: str) -> tuple[str, str]:
        """The configured sink a payload names, the first time it is asked for: the sinks never change, so
        ``plan`` reads the resolution from ``_resolved`` after that (resolve_sink sorts the names on every
        call, a few us per payload)."""
        found = self._resolved[(sink_type, requested)] = (
            sink_type, resolve_sink(sink_type, requested, self._names.get(sink_type, ())))
        return found

    async def deliver(self, collect: CollectResult | None, origin: Origin) -> int:
        """Deliver everything in ``collect``; returns how many payloads went out (to sinks or DLQ)."""
        if collect is None or not collect.has_outputs:
            return 0
        return await self.deliver_plan(self.plan(collect), origin)

    async def deliver_plan(self, plan: list[tuple[Sink, list[Any]]], origin: Origin) -> int:
        """Deliver what ``plan`` resolved; returns how many payloads went out (to sinks or DLQ)."""
        if len(plan) == 1:
            sink, payloads = plan[0]
            await self.deliver_to(sink, payloads, origin)
        else:
            await asyncio.gather(*(self.deliver_to(sink, payloads, origin) for sink, payloads in plan))
        return sum(len(p) for _, p in plan)

    async def deliver_to(self, sink: Sink, payloads: list[Any], origin: Origin,
                         failed: Exception | None = None) -> None:
        """Deliver ``payloads`` to ``sink`` until it takes them or they are handled (skipped, dead-lettered).
        ``failed``: the first try's error, when that try was made elsewhere (direct.py's)."""
        labels = (sink.name, sink.sink_type)
        attempt = 1
        outage = 0  # transient failures in a row
        try:
            while True:
                if (attempt > 1 or outage) and cancel_requested():  # a client may have turned the cancel
                    raise asyncio.CancelledError  # into the error that brought us round again
                started = time.monotonic()
                try:
                    if failed is not None:
                        failed, first = None, failed
                        raise first
                    await sink.deliver(payloads)
                except TransientSinkError as exc:
                    outage += 1
                    await self._wait_for(sink, exc, outage, origin.partition)
                    continue
                except Exception as exc:
                    metrics.sink_errors.labels(*labels).inc()
                    if isinstance(exc, PermanentSinkError) and exc.payloads:
                        payloads = exc.payloads  # the sink took the others: only the refused ones go on
                    error = DeliveryError(
                        sink_name=sink.name, sink_type=sink.sink_type, error=f"{type(exc).__name__}: {exc}",
                        payloads=payloads, attempt=attempt, partition=origin.partition,
                        offsets=list(origin.offsets), keys=list(origin.keys),
                    )
                    action = await self._ask_handler(error)
                    if action is DeliveryAction.RETRY and attempt <= self.max_retries:
                        metrics.sink_retries.labels(*labels).inc()
                        log.warning("sink delivery failed; retrying", sink=sink.name, attempt=attempt, error=error.error)
                        await asyncio.sleep(retry_delay(attempt, self.backoff_base, self.backoff_max))
                        attempt += 1
                        continue
                    if action is DeliveryAction.SKIP:
                        metrics.sink_skipped.labels(*labels).inc()
                        log.warning("sink delivery failed; payloads skipped", sink=sink.name, count=len(payloads), error=error.error)
                        return
                    if action is DeliveryAction.RETRY:
                        log.warning("sink delivery retries exhausted; dead-lettering", sink=sink.name, attempts=attempt)
                    await self.dead_letter(error)
                    return
                self.delivered(sink, payloads, origin, started)
                return
        finally:
            if outage:  # this delivery waited for its sink
                self._settled_wait(sink, origin.partition)

    def delivered(self, sink: Sink, payloads: list[Any], origin: Origin | None, started: float) -> None:
        """The sink confirmed ``payloads``, handed to it at ``started``: count it, and record it (``origin``,
        where they came from, is for the flight recorder: None when there is none)."""
        children = self._delivery_metrics.get(id(sink))  # (the sinks live as long as this manager)
        if children is None:
            labels = (sink.name, sink.sink_type)
            children = self._delivery_metrics[id(sink)] = (
                metrics.labelled(metrics.sink_deliveries, *labels), metrics.labelled(metrics.sink_payloads, *labels),
                metrics.labelled(metrics.sink_duration, *labels))
        deliveries, delivered_payloads, duration = children
        deliveries.inc()
        delivered_payloads.inc(len(payloads))
        duration.observe(time.monotonic() - started)
        if self.recorder is not None and origin is not None:
            self.recorder.record("delivered", origin.partition, origin.offsets[0] if origin.offsets else None,
                                 origin.task_id, None, (time.monotonic() - started) * 1000, {
                                     "sink": f"{sink.sink_type}.{sink.name}", "count": len(payloads),
                                     "stage": origin.stage, "offsets": list(origin.offsets)})

    async def _wait_for(self, sink: Sink, exc: TransientSinkError, outage: int, partition: int | None) -> None:
        """A sink that is down: wait (backoff, or the server's Retry-After) before trying the same batch again.

        One warning when a sink's first delivery starts waiting and one line when its last one is
        through, however many deliveries wait meanwhile; a reminder at most every OUTAGE_REMINDER_SECONDS."""
        key = (sink.sink_type, sink.name)
        labels = (sink.name, sink.sink_type)
        metrics.labelled(metrics.sink_transient_errors, *labels).inc()
        now = time.monotonic()
        if outage == 1:
            metrics.labelled(metrics.sink_waiting, *labels).inc()
            self._waiters[partition] = self._waiters.get(partition, 0) + 1
            outage_state = self._outages.get(key)
            if outage_state is None:
                self._outages[key] = _Outage(since=now, reminded=now)
                log.warning("sink unavailable; deliveries wait and retry (nothing is dead-lettered for an outage)",
                            sink=sink.name, type=sink.sink_type, partition=partition, error=str(exc))
            else:
                outage_state.deliveries += 1
        state = self._outages[key]
        if now - state.reminded >= OUTAGE_REMINDER_SECONDS:
            state.reminded = now
            log.warning("sink still unavailable; deliveries keep waiting", sink=sink.name, type=sink.sink_type,
                        waiting_deliveries=state.deliveries, seconds=round(now - state.since), error=str(exc))
        self.waiting[partition] = f"{sink.sink_type} sink {sink.name!r} is unavailable: {exc}"
        delay = retry_delay(min(outage, 30), self.backoff_base, self.backoff_max)
        if exc.retry_after is not None:
            delay = min(max(exc.retry_after, delay), self.backoff_max)
        await asyncio.sleep(delay)

    def _settled_wait(self, sink: Sink, partition: int | None) -> None:
        """A delivery that waited for its sink is over (delivered, refused or cancelled)."""
        key = (sink.sink_type, sink.name)
        state = self._outages[key]
        metrics.labelled(metrics.sink_waiting, sink.name, sink.sink_type).dec()
        self._waiters[partition] -= 1
        if self._waiters[partition] == 0:
            del self._waiters[partition]
            self.waiting.pop(partition, None)
        state.deliveries -= 1
        if state.deliveries == 0:
            del self._outages[key]
            log.info("sink available again; deliveries resumed", sink=sink.name, type=sink.sink_type,
                     seconds=round(time.monotonic() - state.since, 1))

    async def _ask_handler(self, error: DeliveryError) -> DeliveryAction:
        called = await call_hook("on_delivery_error", self.handler.on_delivery_error, error, log=log,
                                 sink=error.sink_name)
        if called.raised:
            return DeliveryAction.DLQ
        action = called.value
        if isinstance(action, DeliveryAction):
            return action
        try:
            return DeliveryAction(action)
        except ValueError:
            log.error("on_delivery_error returned an unknown action; dead-lettering", returned=repr(action)[:200])
            return DeliveryAction.DLQ

    async def dead_letter_messages(self, stage: str, reason: str, messages: list[SourceMessage],
                                   partition: int | None, task: ExecutorTask | None = None,
                                   error: ExecutorError | None = None) -> None:
        """Dead-letter source messages that could not be processed (``stage`` says where it stopped);
        for a task that failed for good, the record also says what the task was and how it failed."""
        origin = Origin.of(partition, messages)
        error = DeliveryError(
            sink_name=stage, sink_type="executor" if task is not None else "handler",
            error=reason if task is None else f"task {task.task_id}: {reason}",
            payloads=[m.value for m in messages], attempt=error.attempt if error is not None else 1,
            partition=partition, offsets=list(origin.offsets), keys=list(origin.keys),
            task=task_record(task, error) if task is not None and error is not None else None,
        )
        await self.dead_letter(error)

    async def dead_letter(self, error: DeliveryError) -> None:
        """Send to the DLQ. If the DLQ refuses it, ``dlq.on_send_failure`` decides: stall (retry until it
        takes the record) or drop (count, log, go on). Never raises for a refusing DLQ."""
        if self.dlq is None:
            raise DeliveryFailedError(f"delivery to {error.sink_type} sink {error.sink_name!r} failed and no DLQ is configured: {error.error}")
        partition = error.partition
        attempt = 0
        while True:
            if cancel_requested():
                raise asyncio.CancelledError
            attempt += 1
            try:
                await self.dlq.send(error, partition)
            except Exception as exc:
                refused = f"{type(exc).__name__}: {exc}"
                log.error("DLQ send failed", dlq=self.dlq.topic, attempt=attempt, partition=partition, error=refused)
                if attempt >= DLQ_SEND_ATTEMPTS:
                    if self.on_send_failure == "drop":
                        metrics.dlq_dropped.inc(len(error.payloads))
                        log.error("the DLQ refused a dead letter; dropped (dlq.on_send_failure: drop), offsets complete",
                                  dlq=self.dlq.topic, partition=partition, offsets=error.offsets,
                                  count=len(error.payloads), reason=error.error[:500], error=refused)
                        return
                    if partition not in self.dlq_stalled:
                        metrics.dlq_stalls.inc()
                        log.error("the DLQ refuses dead letters; partition stalled, retrying with backoff "
                                  "(dlq.on_send_failure: stall)", dlq=self.dlq.topic, partition=partition, error=refused)
                    self.dlq_stalled[partition] = f"DLQ {self.dlq.topic!r} refuses dead letters: {refused}"
                await asyncio.sleep(retry_delay(attempt, self.backoff_base, DLQ_STALL_MAX_DELAY))
                continue
            if self.dlq_stalled.pop(partition, None) is not None:
                log.warning("the DLQ accepts dead letters again; partition resumes", dlq=self.dlq.topic, partition=partition)
            metrics.sink_dlq.labels(error.sink_name, error.sink_type).inc()
            if self.recorder is not None:
                self.recorder.record("dead_lettered", partition, error.offsets[0] if error.offsets else None,
                                     (error.task or {}).get("task_id"), None, None, {
                                         "reason": error.error[:4000], "stage": stage_of(error.sink_type, error.sink_name),
                                         "sink": error.sink_name, "count": len(error.payloads),
                                         "offsets": list(error.offsets)})
            self.stats.dead_lettered += len(error.payloads)
            log.warning("payloads dead-lettered", sink=error.sink_name, dlq=self.dlq.topic, count=len(error.payloads),
                        partition=partition, offsets=error.offsets[:20], error=error.error[:500])
            return

