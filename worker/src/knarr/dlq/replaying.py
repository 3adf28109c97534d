"""Carrying out a replay plan: re-delivery through the sinks' own delivery path, re-queueing to the source.

A sink-stage record goes to the sink instance that refused it, built from the config, through the
same :class:`~knarr.sinks.delivery.SinkManager` the worker uses: a sink that is down is waited for
(with backoff, as in the worker), a refusal is reported and the record stays where it is, unmarked,
instead of being dead-lettered a second time. A source-stage record's messages (value and key) go
back to the source, with headers that say they are a replay and of which record.

Each record done is written to the replay ledger at once, so a replay stopped half-way (Ctrl-C, a
crash) is resumed by running it again without doing anything twice.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from knarr.api.handler import BaseHandler
from knarr.api.payloads import DeliveryError
from knarr.config.root import KnarrConfig
from knarr.dlq.records import DlqRecord
from knarr.dlq.replay import Step, rebuild
from knarr.dlq.store import FileLedger, KafkaLedger, ledger_entry
from knarr.errors import KnarrError, UnavailableError
from knarr.kafka import settings
from knarr.sinks.base import Sink
from knarr.sinks.delivery import Origin, SinkManager
from knarr.sinks.producer import AsyncProducer
from knarr.sinks.registry import build_sinks

REPLAY_HEADER = "knarr-replay"  # "dlq": this message is a replay of a dead letter
RECORD_HEADER = "knarr-dlq-record"  # the DLQ record's id


@dataclass(slots=True)
class Outcome:
    delivered: Counter = field(default_factory=Counter)  # target -> records
    delivered_items: Counter = field(default_factory=Counter)  # target -> payloads / messages
    requeued: Counter = field(default_factory=Counter)
    requeued_items: Counter = field(default_factory=Counter)
    already_replayed: int = 0
    unreplayable: list[tuple[DlqRecord, str]] = field(default_factory=list)
    failed: list[tuple[DlqRecord, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.failed or self.unreplayable)


class _ReplayDelivery(SinkManager):
    """The worker's delivery path, but a refusal is remembered instead of dead-lettered again."""

    refused: DeliveryError | None = None

    async def dead_letter(self, error: DeliveryError) -> None:
        self.refused = error


class Replayer:
    def __init__(self, config: KnarrConfig, ledger: FileLedger | KafkaLedger, source_target: str) -> None:
        self.config = config
        self.ledger = ledger
        self.source_target = source_target
        self._delivery: _ReplayDelivery | None = None
        self._missing_sinks: set[tuple[str, str]] = set()
        self._producer: AsyncProducer | None = None
        self.outcome = Outcome()  # so far: what an interrupted replay had done

    async def run(self, steps: list[Step], on_step: Callable[[Step], None] = lambda step: None) -> Outcome:
        outcome = self.outcome = Outcome()
        await self._open(steps)
        try:
            for step in steps:
                await self._one(step, outcome)
                on_step(step)
        finally:
            await self._close()
        return outcome

    async def _open(self, steps: list[Step]) -> None:
        wanted = {(s.record.sink_type, s.record.sink_name) for s in steps if s.action == "sink"}
        if wanted:
            built: list[Sink] = [s for s in build_sinks(self.config) if (s.sink_type, s.name) in wanted]
            self._missing_sinks = wanted - {(s.sink_type, s.name) for s in built}
            cfg = self.config.executor
            self._delivery = _ReplayDelivery(built, None, BaseHandler(), cfg.max_retries,
                                             cfg.retry_backoff_base_seconds, cfg.retry_backoff_max_seconds)
            await self._delivery.connect_all()
        if any(s.action == "source" for s in steps) and self.config.source.type == "kafka":
            self._producer = AsyncProducer(settings.producer(self.config.kafka))
            try:
                await asyncio.to_thread(self._producer.connect, self.config.kafka.startup_timeout_seconds)
            except ConnectionError as exc:
                raise UnavailableError(f"the source topic's brokers: {exc}") from None
        await self.ledger.open()

    async def _close(self) -> None:
        if self._delivery is not None:
            await self._delivery.close_all()
        if self._producer is not None:
            await asyncio.to_thread(self._producer.close)
        await self.ledger.close()

    async def _one(self, step: Step, outcome: Outcome) -> None:
        if step.action == "already_replayed":
            outcome.already_replayed += 1
            return
        if step.action == "unreplayable":
            outcome.unreplayable.append((step.record, step.why))
            return
        why = await (self._to_sink(step) if step.action == "sink" else self._to_source(step))
        if why:
            outcome.failed.append((step.record, why))
            return
        await self.ledger.add(ledger_entry(step.record.id, step.action, step.target))
        if step.action == "sink":
            outcome.delivered[step.target] += 1
            outcome.delivered_items[step.target] += step.count
        else:
            outcome.requeued[step.target] += 1
            outcome.requeued_items[step.target] += step.count

    async def _to_sink(self, step: Step) -> str:
        """Empty when delivered; else why not."""
        record = step.record
        if (record.sink_type, record.sink_name) in self._missing_sinks:
            return (f"{record.sink_type} sink {record.sink_name!r} is not in the config (any more); add it back "
                    "or replay with a config that has it")
        assert self._delivery is not None
        self._delivery.refused = None
        origin = Origin(record.partition, record.offsets, tuple(record.key_bytes()))
        try:
            await self._delivery.deliver(rebuild(record), origin)
        except (KnarrError, ValueError) as exc:
            return str(exc)
        refused = self._delivery.refused
        return f"refused again: {refused.error}" if refused is not None else ""

    async def _to_source(self, step: Step) -> str:
        record = step.record
        values = record.source_values()
        keys = record.key_bytes() + [None] * (len(values) - len(record.keys))
        headers = {REPLAY_HEADER: "dlq", RECORD_HEADER: record.id}
        if self._producer is not None:
            try:
                await self._producer.produce_all(self.config.kafka.source_topic,
                                                 [(v, k, headers) for v, k in zip(values, keys, strict=False)])
            except KafkaException as exc:
                return f"re-queueing to {self.source_target} failed: {exc}"
            return ""
        return _append_lines(self.config, values)


def _append_lines(config: KnarrConfig, values: list[bytes]) -> str:
    """The local source: the messages become new lines of its input file (processed by the next run)."""
    assert config.source.local is not None
    path = Path(config.source.local.path)
    if any(b"\n" in v for v in values):
        return "a message holds a line break, so it cannot be a line of the local source's file"
    try:
        with path.open("ab") as fh:
            fh.write(b"".join(v + b"\n" for v in values))
    except OSError as exc:
        return f"cannot append to {str(path)!r}: {exc.strerror}"
    return ""


def source_target(config: KnarrConfig) -> str:
    if config.source.type == "local" and config.source.local is not None:
        return f"the local source file {str(config.source.local.path)!r}"
    return f"topic {config.kafka.source_topic!r}"


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    return {
        "delivered": [{"target": t, "records": n, "payloads": outcome.delivered_items[t]} for t, n in sorted(outcome.delivered.items())],
        "requeued": [{"target": t, "records": n, "messages": outcome.requeued_items[t]} for t, n in sorted(outcome.requeued.items())],
        "already_replayed": outcome.already_replayed,
        "failed": [{"id": r.id, "position": r.position, "why": why} for r, why in outcome.failed],
        "unreplayable": [{"id": r.id, "position": r.position, "why": why} for r, why in outcome.unreplayable],
    }


def render_outcome(outcome: Outcome, shown: int = 10) -> str:
    lines = []
    for target, n in sorted(outcome.delivered.items()):
        lines.append(f"  re-delivered      {n} records ({outcome.delivered_items[target]} payloads) to {target}")
    for target, n in sorted(outcome.requeued.items()):
        lines.append(f"  re-queued         {n} records ({outcome.requeued_items[target]} messages) to {target}")
    if not outcome.delivered and not outcome.requeued:
        lines.append("  re-delivered      0 records")
    lines.append(f"  already replayed  {outcome.already_replayed} records"
                 + (" (use --again to replay them anyway)" if outcome.already_replayed else ""))
    lines.append(f"  failed            {len(outcome.failed)} records" + (" (left in the DLQ, not marked)" if outcome.failed else ""))
    for record, why in outcome.failed[:shown]:
        lines.append(f"    {record.id} at {record.position}: {why[:300]}")
    if len(outcome.failed) > shown:
        lines.append(f"    … and {len(outcome.failed) - shown} more")
    lines.append(f"  not replayable    {len(outcome.unreplayable)} records")
    for reason, n in Counter(why for _, why in outcome.unreplayable).most_common(shown):
        lines.append(f"    {n}: {reason[:300]}")
    return "\n".join(lines)
