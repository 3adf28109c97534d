"""The Kafka source's look at its consumer group, for partitions no member owns (knarr.kafka.ownership says why).

Used from the source's consumer thread, between polls, and never waits there: a look is two
admin requests (the group's description, the topic's partitions) sent on the process's shared
admin client, and read at a later poll once both have answered. One look at a time; a look
that fails is logged once (until one succeeds again) and changes nothing.
"""

from __future__ import annotations

import random
from concurrent.futures import Future, wait

from confluent_kafka import ConsumerGroupState, KafkaException, TopicCollection

from knarr.kafka.clients import shared_admin
from knarr.kafka.ownership import GroupLook, StrandWatch, assigned_partitions, unowned
from knarr.kafka.settings import Settings
from knarr.observability import metrics
from knarr.observability.logging import get_logger

log = get_logger(component="kafka-source")

REQUEST_TIMEOUT_SECONDS = 30.0  # a look's requests; a slow broker only delays the next look
# Each wait between looks is the interval times a random factor in this range, so the members of a group
# (the processes of a pod start together) do not look in step and rejoin together for the same partitions:
# the first one's rejoin starts a rebalance, which the others' next look sees.
JITTER = (0.75, 1.25)


class GroupCheck:
    """Looks at the group every ``interval`` seconds and says which partitions are stranded."""

    def __init__(self, connection: Settings, group: str, topic: str, interval: float, grace: float) -> None:
        self.group, self.topic, self.interval = group, topic, interval
        self._connection = connection
        self._watch = StrandWatch(grace)
        self._pending: tuple[Future, Future] | None = None
        self._next_at: float | None = None  # when the next look is due
        self._failing = False

    def stranded(self, now: float) -> frozenset[int]:
        """Read a look that has come, ask for the next one when due; the partitions to hand out now (mostly none)."""
        found: frozenset[int] = frozenset()
        if self._pending is not None and all(f.done() for f in self._pending):
            look, self._pending = self._read(*self._pending), None
            if look is not None:
                unowned_now = unowned(look)
                metrics.unowned_partitions.set(len(unowned_now))
                found = self._watch.observe(now, unowned_now)
        if self._pending is None and (self._next_at is None or now >= self._next_at):
            self._ask()
            self._next_at = now + self.interval * random.uniform(*JITTER)
        return found

    def rejoined(self) -> None:
        """The source rejoined the group: start counting afresh."""
        self._watch.reset()

    def settle(self, timeout: float) -> None:
        """Wait (bounded) for a look in flight, so no request is left inside the client at exit."""
        if self._pending is not None:
            wait(self._pending, timeout)

    def _ask(self) -> None:
        admin = shared_admin(self._connection)
        try:
            groups = admin.describe_consumer_groups([self.group], request_timeout=REQUEST_TIMEOUT_SECONDS)
            topics = admin.describe_topics(TopicCollection([self.topic]), request_timeout=REQUEST_TIMEOUT_SECONDS)
        except KafkaException as exc:  # refused before it was sent (the client's queue is full, say)
            self._failed(str(exc))
            return
        self._pending = (groups[self.group], topics[self.topic])

    def _read(self, group: Future, topic: Future) -> GroupLook | None:
        try:
            description, partitions = group.result(), len(topic.result().partitions)
        except KafkaException as exc:
            self._failed(str(exc))
            return None
        if self._failing:
            log.info("looking at the consumer group works again", group=self.group)
            self._failing = False
        pairs = ((tp.topic, tp.partition) for m in description.members for tp in m.assignment.topic_partitions)
        return GroupLook(description.state == ConsumerGroupState.STABLE, partitions,
                         assigned_partitions(self.topic, pairs))

    def _failed(self, error: str) -> None:
        if not self._failing:
            log.warning("could not look at the consumer group for partitions without an owner; will try again",
                        group=self.group, every_seconds=self.interval, error=error)
            self._failing = True
