"""The Kafka sink's producer on the real broker: every delivery report reaches its future, served
on the way while records are produced, and by a timer of its own only when none are."""

from __future__ import annotations

import asyncio

from knarr.sinks import producer as producing
from knarr.sinks.producer import AsyncProducer

from tests.services.kafka import consume_all, create_topic, unique_name


def _connected(kafka_bootstrap: str) -> AsyncProducer:
    producer = AsyncProducer({"bootstrap.servers": kafka_bootstrap})
    producer.connect()
    return producer


async def test_a_lone_records_delivery_is_confirmed_by_the_timer(kafka_bootstrap):
    topic = unique_name("producer-lone")
    create_topic(kafka_bootstrap, topic)
    producer = _connected(kafka_bootstrap)
    try:
        await asyncio.wait_for(producer.produce(topic, b"warm"), 10)  # the topic's leader known
        await asyncio.sleep(0.05)
        for value in (b"one", b"two"):  # nothing else produced meanwhile: the timer serves each report
            await asyncio.wait_for(producer.produce(topic, value), 5)
    finally:
        assert producer.close() == 0
    assert [m.value for m in consume_all(kafka_bootstrap, topic, 3)] == [b"warm", b"one", b"two"]


async def test_while_records_flow_their_reports_are_served_on_the_way_not_by_timer_wake_ups(kafka_bootstrap):
    topic = unique_name("producer-flow")
    create_topic(kafka_bootstrap, topic)
    producer = _connected(kafka_bootstrap)
    timer_polls = 0
    poll_on_loop = producer._poll_on_loop

    def counted(loop):
        nonlocal timer_polls
        timer_polls += 1
        poll_on_loop(loop)

    producer._poll_on_loop = counted
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(producer.produce(topic, b"warm"), 10)
        timer_polls, started, futures = 0, loop.time(), []
        for i in range(1000):  # a record every 0.5 ms for 0.5 s, as a busy worker's tasks end
            futures.append(producer.produce(topic, b"%d" % i))
            await asyncio.sleep(0.0005)
        elapsed = loop.time() - started
        await asyncio.wait_for(asyncio.gather(*futures), 10)
    finally:
        assert producer.close() == 0
    # A timer at the on-the-way interval would fire about elapsed / REPORT_POLL_SECONDS times (250+).
    assert timer_polls <= elapsed / producing.REPORT_WAIT_SECONDS + 5, (timer_polls, elapsed)
    assert len(consume_all(kafka_bootstrap, topic, 1001)) == 1001
