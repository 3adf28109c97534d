"""A plug-in sink (the test package's ``test-jsonl``, installed as a real entry point) behind a real worker
on the real broker: it gets exactly the payloads, an outage of it waits, a refusal is dead-lettered and
replayed to it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

import knarr
from knarr.config.root import dump_config
from knarr.engine.worker import Worker
from tests.services.kafka import committed_offsets, consume_all, produce_json
from tests.worker.harness import kafka_config, running, topics, wait_until

pytestmark = pytest.mark.kafka


class Item(BaseModel):
    id: int


class ToPlugin(knarr.BaseHandler[Item, None]):
    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=[f"out=task-{m.payload.id}"], source_offsets=[m.offset],
                                   metadata={"id": m.payload.id}) for m in messages if m.payload is not None]

    async def on_task_complete(self, result):
        meta = result.task.metadata
        return knarr.CollectResult(plugin=[knarr.PluginPayload(data={"id": meta["id"], "out": result.stdout.strip()},
                                                               meta={"offsets": result.task.source_offsets})])


def received(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def expected(ids) -> list[dict]:
    return [{"sink": "audit", "data": {"id": i, "out": f"task-{i}"}, "meta": {"offsets": [i]}} for i in ids]


def plugin_config(bootstrap: str, src: str, tmp_path: Path, **options):
    return kafka_config(bootstrap, src, sinks={"plugin": {"audit": {"type": "test-jsonl", "options": {
        "path": str(tmp_path / "audit.jsonl"), **options}}}})


async def test_a_plug_in_sink_receives_exactly_the_payloads_and_the_offsets_are_committed(kafka_bootstrap, tmp_path):
    src, _ = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": i} for i in range(20)])
    cfg = plugin_config(kafka_bootstrap, src, tmp_path)
    async with running(Worker(cfg, ToPlugin())):
        await wait_until(lambda: committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, src) == {0: 20}, 60,
                         "all 20 offsets committed")
    assert sorted(received(tmp_path / "audit.jsonl"), key=lambda r: r["data"]["id"]) == expected(range(20))
    assert consume_all(kafka_bootstrap, cfg.dlq_topic, timeout=1) == []


async def test_a_plug_in_that_is_unavailable_makes_the_partition_wait_instead_of_dead_lettering(kafka_bootstrap, tmp_path):
    src, _ = topics(kafka_bootstrap)
    switch = tmp_path / "down"
    switch.touch()
    produce_json(kafka_bootstrap, src, [{"id": i} for i in range(3)])
    cfg = plugin_config(kafka_bootstrap, src, tmp_path, unavailable_while=str(switch))
    async with running(Worker(cfg, ToPlugin())) as worker:
        await wait_until(lambda: worker.sinks.waiting, 30, "the delivery to wait for the plug-in")
        assert list(worker.sinks.waiting.values()) == [
            f"test-jsonl sink 'audit' is unavailable: {tmp_path / 'audit.jsonl'} is unavailable (switch file present)"]
        await asyncio.sleep(1.0)  # a while of outage: nothing is committed past the waiting payloads
        assert committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, src).get(0, 0) == 0
        assert received(tmp_path / "audit.jsonl") == []
        switch.unlink()  # the plug-in's server is back
        await wait_until(lambda: committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, src) == {0: 3}, 60,
                         "all 3 offsets committed once the plug-in is back")
    assert sorted(received(tmp_path / "audit.jsonl"), key=lambda r: r["data"]["id"]) == expected(range(3))
    assert consume_all(kafka_bootstrap, cfg.dlq_topic, timeout=1) == []


async def test_payloads_a_plug_in_refused_are_dead_lettered_and_replayed_to_it_once_it_takes_them(kafka_bootstrap, tmp_path):
    src, _ = topics(kafka_bootstrap)
    switch = tmp_path / "refusing"
    switch.touch()
    produce_json(kafka_bootstrap, src, [{"id": i} for i in range(4)])
    cfg = plugin_config(kafka_bootstrap, src, tmp_path, refuse_while=str(switch))
    async with running(Worker(cfg, ToPlugin())):
        await wait_until(lambda: committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, src) == {0: 4}, 60,
                         "all 4 offsets committed (their payloads dead-lettered)")
    records = [m.json() for m in consume_all(kafka_bootstrap, cfg.dlq_topic, expected=4, timeout=15)]
    assert sorted((r["sink_type"], r["sink_name"], r["payload_kind"]) for r in records) == [("test-jsonl", "audit", "plugin")] * 4
    assert received(tmp_path / "audit.jsonl") == []

    switch.unlink()
    path = tmp_path / "knarr.yaml"
    path.write_text(yaml.safe_dump(dump_config(cfg)))
    proc = subprocess.run([sys.executable, "-m", "knarr.cli", "dlq", "replay", "--config", str(path), "--sink-type", "test-jsonl"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "  re-delivered      4 records (4 payloads) to test-jsonl sink 'audit'" in proc.stdout
    assert sorted(received(tmp_path / "audit.jsonl"), key=lambda r: r["data"]["id"]) == expected(range(4))
