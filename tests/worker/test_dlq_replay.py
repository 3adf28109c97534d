"""`knarr dlq inspect` and `knarr dlq replay` on DLQs a real worker filled, on the real broker.

A worker whose filesystem sink meets a file where a directory should be (a real refusal: the
sink cannot create ``blocked/``) dead-letters those payloads, and tasks that fail for good
dead-letter their source messages. The commands run as a person runs them (`python -m knarr.cli`),
against the topic or the file the worker wrote.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from confluent_kafka import TopicPartition
from pydantic import BaseModel

import knarr
from knarr.config.root import KnarrConfig, dump_config
from knarr.engine.worker import Worker
from knarr.dlq.store import read_topic
from knarr.kafka import settings
from knarr.kafka.clients import close_consumer, open_consumer
from tests.services.kafka import committed_offsets, consume_all, end_offsets, produce_json, unique_name
from tests.worker.harness import kafka_config, running, topics, wait_until

pytestmark = pytest.mark.kafka

OK, BLOCKED, FAILING = [0, 1, 2, 3, 4, 5], [6, 7, 8, 9], [10, 11]


class Item(BaseModel):
    id: int
    path: str = ""
    fail: bool = False


class Routed(knarr.BaseHandler[Item, None]):
    """One task per message; its output goes to the file the message names. A message with fail=True
    runs a task that exits 3 while the switch file ``fail_while`` exists."""

    def __init__(self, fail_while: Path) -> None:
        self.fail_while = fail_while

    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=[f"out={m.payload.id}",
                                         *(["exit=3"] if m.payload.fail and self.fail_while.exists() else [])],
                                   source_offsets=[m.offset], metadata={"id": m.payload.id, "path": m.payload.path})
                for m in messages if m.payload is not None]

    async def on_error(self, task, error):
        return knarr.ErrorAction.RETRY  # retries exhausted: the source message is dead-lettered

    async def on_task_complete(self, result):
        meta = result.task.metadata
        return knarr.CollectResult(files=[knarr.FilePayload(path=meta["path"], data={"id": meta["id"], "out": result.stdout.strip()})])


def messages() -> list[dict]:
    return ([{"id": i, "path": f"ok/{i}.jsonl"} for i in OK] + [{"id": i, "path": f"blocked/{i}.jsonl"} for i in BLOCKED]
            + [{"id": i, "path": f"ok/{i}.jsonl", "fail": True} for i in FAILING])


async def fill(bootstrap: str, tmp_path: Path, dlq: dict | None = None) -> tuple[KnarrConfig, Path]:
    """Run a worker over the messages until all are committed; returns its config (also written as YAML)."""
    src, _ = topics(bootstrap)
    base = tmp_path / "out"
    base.mkdir()
    (base / "blocked").write_text("a file where the sink wants a directory\n")
    switch = tmp_path / "tasks-fail"
    switch.touch()
    produce_json(bootstrap, src, messages(), key_fn=lambda m: f"k{m['id']}")
    cfg = kafka_config(bootstrap, src, sinks={"filesystem": {"out": {"base_path": str(base)}}},
                       **({"dlq": dlq} if dlq else {}))
    async with running(Worker(cfg, Routed(switch))):
        await wait_until(lambda: committed_offsets(bootstrap, cfg.kafka.consumer_group, src) == {0: 12}, 60,
                         "every message committed")
    path = tmp_path / "knarr.yaml"
    path.write_text(yaml.safe_dump(dump_config(cfg)))
    return cfg, path


def numbers_blanked(path: Path) -> str:
    return re.sub(r"(?<![A-Za-z_])\d+", "N", str(path))  # pytest-12 -> pytest-N, as a reason shows it


def headers_at(bootstrap: str, topic: str, offsets: list[int]) -> list[list[tuple[str, bytes]]]:
    consumer = open_consumer({**settings.connection(bootstrap), "group.id": unique_name("headers"), "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, offsets[0])])
        found: list[list[tuple[str, bytes]]] = []
        deadline = time.monotonic() + 15
        while len(found) < len(offsets) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None and msg.offset() in offsets:
                found.append(list(msg.headers() or []))
        return found
    finally:
        close_consumer(consumer)


def knarr_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "knarr.cli", *args], capture_output=True, text=True, timeout=180)


def inspect(config: Path, *args: str) -> dict:
    proc = knarr_cli("dlq", "inspect", "--config", str(config), "--json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def outputs(base: Path, ids: list[int]) -> dict[int, list[dict]]:
    found = {}
    for i in ids:
        for folder in ("ok", "blocked"):
            path = base / folder / f"{i}.jsonl"
            if path.exists():
                found[i] = [json.loads(line) for line in path.read_text().splitlines()]
    return found


async def test_inspect_counts_a_kafka_dlq_by_sink_stage_reason_and_hour_and_filters_select_exactly(kafka_bootstrap, tmp_path):
    cfg, config = await fill(kafka_bootstrap, tmp_path)
    report = inspect(config)
    assert (report["read"], report["matched"], report["payloads"], report["unreadable"]) == (6, 6, 6, 0)
    assert report["by_sink"] == {"filesystem/out": 4, "executor/task": 2}
    assert report["by_stage"] == {"sink": 4, "task": 2}
    assert report["by_reason"] == [
        {"reason": "FileExistsError: [Errno N] File exists: '" + numbers_blanked(tmp_path / "out" / "blocked") + "'",
         "records": 4},
        {"reason": "task <id>: retries exhausted after N attempt(s): exit code N", "records": 2}]
    assert sum(report["by_hour"].values()) == 6 and report["already_replayed"] == 0
    assert report["location"] == f"topic {cfg.dlq_topic!r} at {kafka_bootstrap}"
    [sample] = report["samples"][:1]
    # (the four deliveries run side by side: any of them may be first)
    assert sample["sink"] == "filesystem/out" and sample["payload_fields"] in [[{"path": f"blocked/{i}.jsonl"}] for i in BLOCKED]

    assert inspect(config, "--sink-type", "filesystem")["matched"] == 4
    assert inspect(config, "--sink", "task")["by_sink"] == {"executor/task": 2}
    assert inspect(config, "--stage", "source")["matched"] == 2
    assert inspect(config, "--reason", "file EXISTS")["matched"] == 4
    assert inspect(config, "--reason", r"exit code \d+: $")["matched"] == 2
    assert inspect(config, "--since", "1h")["matched"] == 6
    assert inspect(config, "--until", "1h")["matched"] == 0
    assert inspect(config, "--limit", "3")["read"] == 3

    text = knarr_cli("dlq", "inspect", "--config", str(config), "--samples", "1")
    assert text.returncode == 0 and text.stdout.startswith(f"6 of 6 records match (6 payloads) in topic {cfg.dlq_topic!r}")
    print(text.stdout)


async def test_replay_after_the_cause_is_fixed_delivers_exactly_once_and_a_second_replay_reports_them_replayed(
        kafka_bootstrap, tmp_path):
    cfg, config = await fill(kafka_bootstrap, tmp_path)
    base = tmp_path / "out"
    source_end = end_offsets(kafka_bootstrap, cfg.kafka.source_topic)

    dry = knarr_cli("dlq", "replay", "--config", str(config), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        f"knarr dlq replay --dry-run: 6 of 6 records match in topic {cfg.dlq_topic!r} at {kafka_bootstrap}; nothing was sent",
        "  would re-deliver 4 records (4 payloads) to filesystem sink 'out'",
        f"  would re-queue 2 records (2 messages) to topic {cfg.kafka.source_topic!r}"]
    assert end_offsets(kafka_bootstrap, cfg.kafka.source_topic) == source_end
    assert consume_all(kafka_bootstrap, cfg.dlq_topic + ".replayed", timeout=2) == []

    # Still refused: reported, left in place, not marked.
    refused = knarr_cli("dlq", "replay", "--config", str(config), "--sink-type", "filesystem")
    assert refused.returncode == 4, refused.stderr
    assert "  failed            4 records (left in the DLQ, not marked)" in refused.stdout
    assert outputs(base, BLOCKED) == {}

    (base / "blocked").unlink()  # the cause, fixed
    done = knarr_cli("dlq", "replay", "--config", str(config), "--sink-type", "filesystem")
    assert done.returncode == 0, done.stderr + done.stdout
    assert "  re-delivered      4 records (4 payloads) to filesystem sink 'out'" in done.stdout
    assert outputs(base, BLOCKED) == {i: [{"id": i, "out": str(i)}] for i in BLOCKED}
    print(done.stdout)

    again = knarr_cli("dlq", "replay", "--config", str(config), "--sink-type", "filesystem")
    assert again.returncode == 0, again.stderr
    assert "  re-delivered      0 records" in again.stdout
    assert "  already replayed  4 records (use --again to replay them anyway)" in again.stdout
    assert outputs(base, BLOCKED) == {i: [{"id": i, "out": str(i)}] for i in BLOCKED}
    print(again.stdout)
    assert inspect(config)["already_replayed"] == 4


async def test_replay_re_queues_failed_tasks_source_messages_to_the_input_topic_and_a_worker_processes_them(
        kafka_bootstrap, tmp_path):
    cfg, config = await fill(kafka_bootstrap, tmp_path)
    base = tmp_path / "out"
    assert outputs(base, FAILING) == {}
    (tmp_path / "tasks-fail").unlink()  # the cause, fixed

    proc = knarr_cli("dlq", "replay", "--config", str(config), "--to-source", "--stage", "task")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert f"  re-queued         2 records (2 messages) to topic {cfg.kafka.source_topic!r}" in proc.stdout
    requeued = consume_all(kafka_bootstrap, cfg.kafka.source_topic)[12:]
    assert sorted((m.key, m.json()["id"]) for m in requeued) == [(b"k10", 10), (b"k11", 11)]
    task_records = [json.loads(v) for v, _ in read_topic(settings.connection(kafka_bootstrap), cfg.dlq_topic, None, 10)[0]
                    if json.loads(v)["stage"] == "task"]
    assert sorted(headers_at(kafka_bootstrap, cfg.kafka.source_topic, [12, 13])) == sorted(
        [("knarr-replay", b"dlq"), ("knarr-dlq-record", r["id"].encode())] for r in task_records)

    async with running(Worker(cfg, Routed(tmp_path / "tasks-fail"))):
        await wait_until(lambda: committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, cfg.kafka.source_topic)
                         == {0: 14}, 60, "the re-queued messages committed")
    assert outputs(base, FAILING) == {i: [{"id": i, "out": str(i)}] for i in FAILING}

    again = knarr_cli("dlq", "replay", "--config", str(config), "--stage", "task")
    assert "  already replayed  2 records" in again.stdout and again.returncode == 0
    assert len(consume_all(kafka_bootstrap, cfg.kafka.source_topic)) == 14


async def test_a_file_dlq_is_inspected_and_replayed_with_a_sidecar_ledger(kafka_bootstrap, tmp_path):
    dlq_file = tmp_path / "dlq.jsonl"
    cfg, config = await fill(kafka_bootstrap, tmp_path, dlq={"path": str(dlq_file)})
    base = tmp_path / "out"
    report = inspect(config)
    assert (report["matched"], report["by_sink"]) == (6, {"filesystem/out": 4, "executor/task": 2})
    assert report["location"] == f"file {str(dlq_file)!r}"
    assert inspect(config, "--file", str(dlq_file), "--sink", "out")["matched"] == 4

    (base / "blocked").unlink()
    before = dlq_file.read_bytes()
    proc = knarr_cli("dlq", "replay", "--config", str(config), "--sink", "out", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["delivered"] == [{"target": "filesystem sink 'out'", "records": 4, "payloads": 4}]
    assert (result["failed"], result["already_replayed"]) == ([], 0)
    assert outputs(base, BLOCKED) == {i: [{"id": i, "out": str(i)}] for i in BLOCKED}
    assert dlq_file.read_bytes() == before  # the DLQ itself is never rewritten
    ledger = [json.loads(line) for line in Path(str(dlq_file) + ".replayed").read_text().splitlines()]
    assert len({e["id"] for e in ledger}) == 4

    second = json.loads(knarr_cli("dlq", "replay", "--config", str(config), "--sink", "out", "--json").stdout)
    assert (second["delivered"], second["already_replayed"]) == ([], 4)
    forced = json.loads(knarr_cli("dlq", "replay", "--config", str(config), "--sink", "out", "--again", "--json").stdout)
    assert forced["delivered"] == [{"target": "filesystem sink 'out'", "records": 4, "payloads": 4}]
    assert outputs(base, BLOCKED) == {i: [{"id": i, "out": str(i)}] * 2 for i in BLOCKED}
