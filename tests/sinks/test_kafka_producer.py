"""The Kafka sink's producer on the real broker: every delivery report reaches its future, served
on the way while records are produced, and by a timer of its own only when none are; the records
asked for in one round of the event loop go to librdkafka together, after it."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaError, KafkaException
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


async def test_a_hurried_producer_serves_reports_at_the_short_interval_for_a_while(kafka_bootstrap, monkeypatch):
    monkeypatch.setattr(producing, "REPORT_WAIT_SECONDS", 1.0)  # the timer's pace, and how long a hurry lasts
    topic = unique_name("producer-hurry")
    create_topic(kafka_bootstrap, topic)
    producer = _connected(kafka_bootstrap)
    loop = asyncio.get_running_loop()

    async def confirmed(value: bytes, hurry: bool) -> float:
        started = loop.time()
        future = producer.produce(topic, value)
        await asyncio.sleep(0)  # the round is done: librdkafka has the record
        if hurry:
            producer.hurry()
        await asyncio.wait_for(future, 10)
        return loop.time() - started

    try:
        await asyncio.wait_for(producer.produce(topic, b"warm"), 10)
        await asyncio.sleep(0.01)
        left_to_the_timer = await confirmed(b"timer", hurry=False)
        await asyncio.sleep(0.01)
        hurried = await confirmed(b"hurried", hurry=True)
        producer.hurry()  # nothing outstanding: nothing to hurry, no timer
        assert producer._timer is None
    finally:
        assert producer.close() == 0
    assert left_to_the_timer > 0.5 and hurried < 0.5, (left_to_the_timer, hurried)
    assert [m.value for m in consume_all(kafka_bootstrap, topic, 3)] == [b"warm", b"timer", b"hurried"]


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


async def test_records_asked_for_in_one_round_go_to_librdkafka_after_it_together(kafka_bootstrap):
    topic = unique_name("producer-round")
    create_topic(kafka_bootstrap, topic)
    producer = _connected(kafka_bootstrap)
    try:
        await asyncio.wait_for(producer.produce(topic, b"warm"), 10)
        futures = [producer.produce_all(topic, [(b"a%d" % i, None, None), (b"b%d" % i, None, None)]) for i in range(3)]
        assert len(producer._producer) == 0  # nothing handed over while the round that asked goes on
        await asyncio.sleep(0)
        assert len(producer._producer) == 6  # all of it, one record after another, right after
        await asyncio.wait_for(asyncio.gather(*futures), 10)
    finally:
        assert producer.close() == 0
    values = [m.value for m in consume_all(kafka_bootstrap, topic, 7)]
    assert values[0] == b"warm" and sorted(values[1:]) == sorted(b"%s%d" % (s, i) for s in (b"a", b"b") for i in range(3))


async def test_a_record_librdkafka_refuses_at_once_fails_its_own_future_only(kafka_bootstrap):
    topic = unique_name("producer-refused")
    create_topic(kafka_bootstrap, topic)
    producer = AsyncProducer({"bootstrap.servers": kafka_bootstrap, "message.max.bytes": 2000})
    producer.connect()
    try:
        fine = producer.produce(topic, b"small")
        refused = producer.produce_all(topic, [(b"x" * 5000, None, None)])  # past message.max.bytes
        also_fine = producer.produce(topic, b"small too")
        with pytest.raises(KafkaException) as caught:
            await asyncio.wait_for(refused, 10)
        assert caught.value.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
        await asyncio.wait_for(asyncio.gather(fine, also_fine), 10)
    finally:
        assert producer.close() == 0
    assert sorted(m.value for m in consume_all(kafka_bootstrap, topic, 2)) == [b"small", b"small too"]


async def test_closing_produces_and_confirms_what_a_round_asked_for_before_the_close(kafka_bootstrap):
    topic = unique_name("producer-close")
    create_topic(kafka_bootstrap, topic)
    producer = _connected(kafka_bootstrap)
    await asyncio.wait_for(producer.produce(topic, b"warm"), 10)
    last = producer.produce(topic, b"last")
    assert producer.close() == 0  # in the same round, before librdkafka had the record
    await asyncio.wait_for(last, 5)
    assert [m.value for m in consume_all(kafka_bootstrap, topic, 2)] == [b"warm", b"last"]
