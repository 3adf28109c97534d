"""A plain static member of a consumer group, for tests/worker/test_static_membership.py.

    static_member.py BOOTSTRAP GROUP TOPIC INSTANCE_ID EVENTS_FILE [--block-on-revoke]

Subscribes with cooperative-sticky under ``INSTANCE_ID`` (group.instance.id), polls and
commits nothing, and appends one JSON line per rebalance callback to EVENTS_FILE
({"assigned": [...]} or {"revoked": [...]}). With --block-on-revoke it stops inside the first
revocation that takes something, after writing its line, as a member would that is killed in
the middle of a cooperative rebalance: the partitions it gave up wait for a second rebalance
that only it would ask for.
"""

from __future__ import annotations

import json
import sys
import time

from confluent_kafka import Consumer

SESSION_TIMEOUT_MS = 6_000


def main() -> None:
    bootstrap, group, topic, instance, events = sys.argv[1:6]
    block = "--block-on-revoke" in sys.argv[6:]

    def note(kind: str, partitions: list) -> None:
        with open(events, "a") as fh:
            fh.write(json.dumps({kind: sorted(tp.partition for tp in partitions)}) + "\n")

    def revoked(consumer: Consumer, partitions: list) -> None:
        note("revoked", partitions)
        if block and partitions:
            time.sleep(3600)  # killed here by the test

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
        "partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": 1_000, "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })
    consumer.subscribe([topic], on_assign=lambda c, ps: note("assigned", ps), on_revoke=revoked)
    try:
        while True:
            consumer.poll(0.2)
    finally:
        consumer.close()


if __name__ == "__main__":
    main()
