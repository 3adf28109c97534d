"""Offset commits from the poll loop: sent asynchronously, acknowledged when the broker answers.

The Kafka source sends what became committable with a poll and does not wait for the group
coordinator: the broker's answer is handed back with a later poll, and only then does the
engine count the offsets as committed. One commit is in flight at a time. The broker here is
this session's private one, SIGSTOPped to hold an answer back.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from knarr.sources.kafka import KafkaSource
from tests.services.kafka import PrivateBroker, committed_offsets, create_topic, produce_json, unique_name
from tests.worker.harness import kafka_config

pytestmark = [pytest.mark.kafka]

POLL_LIMIT_SECONDS = 20  # a poll that waited for the stopped broker's answer would block far longer


async def _started(bootstrap: str, topic: str) -> tuple[KafkaSource, str]:
    config = kafka_config(bootstrap, topic, out_topic="unused")
    source = KafkaSource(config.kafka, config.executor, client_id="commit-test")

    async def assigned(partitions: list[int]) -> None:
        return None

    async def revoked(partitions: list[int], lost: bool) -> dict[int, int]:
        return {}

    await source.start(assigned, revoked)
    return source, config.kafka.consumer_group


@asynccontextmanager
async def _caught_up(bootstrap: str, name: str, count: int) -> AsyncIterator[tuple[KafkaSource, str, str]]:
    """A source that has consumed all ``count`` messages of a new one-partition topic: (source, group, topic)."""
    topic = unique_name(name)
    create_topic(bootstrap, topic, partitions=1)
    produce_json(bootstrap, topic, [{"i": i} for i in range(count)])
    source, group = await _started(bootstrap, topic)
    try:
        await _consume(source, count)
        yield source, group, topic
    finally:
        await source.close()


async def _poll(source: KafkaSource, commits: dict[int, int]) -> tuple[list, dict[int, int]]:
    return await asyncio.wait_for(source.poll(100, commits), POLL_LIMIT_SECONDS)


async def _consume(source: KafkaSource, count: int) -> None:
    taken = 0
    for _ in range(200):
        messages, _ = await _poll(source, {})
        taken += len(messages)
        if taken >= count:
            return
    raise AssertionError(f"took {taken} of {count} messages")


async def _acknowledged(source: KafkaSource, commits: dict[int, int] | None = None) -> dict[int, int]:
    """Poll with ``commits``, as the engine polls with what is committable, until a poll hands
    back the broker's answer to a commit."""
    for _ in range(200):
        _, done = await _poll(source, commits or {})
        if done:
            return done
    raise AssertionError("no commit was acknowledged within 200 polls")


async def test_polls_go_on_while_the_coordinator_does_not_answer_and_offsets_count_as_committed_only_once_it_has(
    private_kafka: PrivateBroker,
) -> None:
    bootstrap = private_kafka.bootstrap
    async with _caught_up(bootstrap, "commits", 10) as (source, group, topic):
        private_kafka.pause()
        try:
            _, done = await _poll(source, {0: 5})  # sent; the stopped broker cannot answer
            assert done == {}
            for _ in range(3):  # polls return meanwhile, and 8 waits for 5's answer
                _, done = await _poll(source, {0: 8})
                assert done == {}
        finally:
            private_kafka.resume()

        assert await _acknowledged(source) == {0: 5}
        assert committed_offsets(bootstrap, group, topic) == {0: 5}  # 8 was never sent while 5 was in flight
        assert await _acknowledged(source, {0: 8}) == {0: 8}
        assert committed_offsets(bootstrap, group, topic) == {0: 8}
        assert source.committed_offsets == {0: 8}


async def test_a_commit_made_now_is_confirmed_before_it_returns(private_kafka: PrivateBroker) -> None:
    """The final commit, a revocation's and a hold's cannot wait for a later poll."""
    bootstrap = private_kafka.bootstrap
    async with _caught_up(bootstrap, "commit-now", 4) as (source, group, topic):
        assert await source.commit_now({0: 4}) == {0: 4}
        assert committed_offsets(bootstrap, group, topic) == {0: 4}


async def test_the_answer_to_a_commit_overtaken_by_a_commit_made_now_is_not_handed_back(private_kafka: PrivateBroker) -> None:
    """A hold commits synchronously while an asynchronous commit may still await its answer:
    what the engine is told was committed never moves back."""
    bootstrap = private_kafka.bootstrap
    async with _caught_up(bootstrap, "overtaken", 10) as (source, group, topic):
        private_kafka.pause()
        try:
            _, done = await _poll(source, {0: 5})  # in flight until the broker runs again
            assert done == {}
        finally:
            private_kafka.resume()
        assert await asyncio.wait_for(source.commit_now({0: 8}), POLL_LIMIT_SECONDS) == {0: 8}

        # 5's answer is served by the next poll and dropped (9 waits for it); then 9 is sent, and is
        # the first offset handed back.
        assert await _acknowledged(source, {0: 9}) == {0: 9}
        assert committed_offsets(bootstrap, group, topic) == {0: 9}
        assert source.committed_offsets == {0: 9}
