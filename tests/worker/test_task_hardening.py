"""Hostile task input and failing tasks: they fail their own task, never the worker or the partition.

A NUL byte in an argument (exec refuses it), retries that run out, and a worker environment that
holds credentials. The broker test shows the partition going on; the others run the real engine
on a bounded in-memory source.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from pydantic import BaseModel

import knarr
from knarr.config.loading import config_from_dict
from knarr.engine.worker import Worker
from knarr.sources.memory import MemorySource
from tests.services.kafka import committed_offsets, consume_all, produce_json
from tests.worker.harness import BEHAVE, kafka_config, running, topics, wait_until


class Search(BaseModel):
    id: int
    pattern: str


class SearchHandler(knarr.BaseHandler[Search, None]):
    """One task per message, its argument taken from the message: `behave out=<pattern>`."""

    def __init__(self, on_error=knarr.ErrorAction.RETRY) -> None:
        self.error_action = on_error
        self.errors: list[knarr.ExecutorError] = []

    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=[f"out={m.payload.pattern}"], source_offsets=[m.offset],
                                   metadata={"id": m.payload.id}) for m in messages if m.payload is not None]

    async def on_error(self, task, error):
        self.errors.append(error)
        return self.error_action

    async def on_message_complete(self, group):
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(data={
            "id": group.source_message.payload.id, "succeeded": group.succeeded, "failed": group.failed,
            "stdout": [r.stdout.strip() for r in group.results],
        })])


@pytest.mark.kafka
async def test_a_nul_byte_in_a_tasks_argument_dead_letters_that_task_and_the_partition_goes_on(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 0, "pattern": "before"}, {"id": 1, "pattern": "bad\u0000byte"},
                                        {"id": 2, "pattern": "after"}, {"id": 3, "pattern": "later"}])
    handler = SearchHandler(on_error=knarr.ErrorAction.RETRY)
    cfg = kafka_config(kafka_bootstrap, src, out_topic=out, executor={"max_retries": 2})
    async with running(Worker(cfg, handler)) as worker:
        await wait_until(lambda: committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, src) == {0: 4},
                         what="every offset, the bad one included, to be committed")
    assert worker.exit_code == 0

    assert [e.reason for e in handler.errors] == ["launch"] * 3  # through on_error, attempt after attempt
    assert "argument 1 ('out=bad\\x00byte') contains a NUL byte at position 7" in handler.errors[0].exception
    summaries = sorted((m.json() for m in consume_all(kafka_bootstrap, out, expected=4)), key=lambda s: s["id"])
    assert [(s["id"], s["succeeded"], s["failed"], s["stdout"]) for s in summaries] == [
        (0, 1, 0, ["before"]), (1, 0, 1, []), (2, 1, 0, ["after"]), (3, 1, 0, ["later"]),
    ]
    [dead] = consume_all(kafka_bootstrap, src + "_dlq", expected=1)
    envelope = dead.json()
    assert (envelope["sink_name"], envelope["sink_type"], envelope["partition"], envelope["offsets"]) == ("task", "executor", 0, [1])
    assert "retries exhausted after 3 attempt(s): launch" in envelope["error"]
    assert json.loads(envelope["original_payloads"][0]) == {"id": 1, "pattern": "bad\u0000byte"}
    task = envelope["task"]
    assert task["args"] == ["out=bad\u0000byte"] and task["source_offsets"] == [1] and task["attempts"] == 3


# --- retries that run out, on the in-memory source -------------------------------------------------
def memory_config(tmp_path: Path, **executor) -> knarr.KnarrConfig:
    return config_from_dict({
        "executor": {"binary_path": BEHAVE, "max_executors": 2, "task_timeout_seconds": 20, "max_retries": 1,
                     "retry_backoff_base_seconds": 0.01, "retry_backoff_max_seconds": 0.05, **executor},
        "sinks": {"filesystem": {"out": {"base_path": str(tmp_path / "out")}}},
        "dlq": {"path": str(tmp_path / "dlq.jsonl")},
        "metrics": {"enabled": False},
        "logging": {"level": "WARNING", "format": "console"},
    })


class Scripted(knarr.BaseHandler[None, None]):
    """Runs one task per message with the given args (and env); records results, errors and groups."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, on_error=knarr.ErrorAction.RETRY) -> None:
        self.args = list(args)
        self.env = env or {}
        self.error_action = on_error
        self.results: list[knarr.ExecutorResult] = []
        self.groups: list[knarr.MessageGroup] = []

    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(task_id=f"t{m.offset}", args=self.args, env=self.env, source_offsets=[m.offset])
                for m in messages]

    async def on_task_complete(self, result):
        self.results.append(result)

    async def on_error(self, task, error):
        return self.error_action

    async def on_message_complete(self, group):
        self.groups.append(group)


async def run_messages(cfg: knarr.KnarrConfig, handler: knarr.BaseHandler, count: int = 1) -> None:
    msgs = [knarr.SourceMessage(topic="t", partition=0, offset=o, value=b"{}") for o in range(count)]
    code = await asyncio.wait_for(Worker(cfg, handler, source=MemorySource(msgs)).run(), 60)
    assert code == 0


def dead_letters(tmp_path: Path) -> list[dict]:
    path = tmp_path / "dlq.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_a_task_that_exhausts_its_retries_is_dead_lettered_by_default(tmp_path):
    handler = Scripted("err=still broken", "exit=4")
    await run_messages(memory_config(tmp_path), handler)
    [envelope] = dead_letters(tmp_path)
    assert (envelope["sink_name"], envelope["sink_type"], envelope["attempt_count"]) == ("task", "executor", 2)
    task = envelope["task"]
    assert (task["task_id"], task["reason"], task["exit_code"], task["stderr"]) == ("t0", "failed", 4, "still broken\n")
    assert "env" not in task and "stdin" not in task
    assert [g.failed for g in handler.groups] == [1]


async def test_with_the_discard_policy_exhausted_retries_only_fail_the_task(tmp_path):
    handler = Scripted("exit=4")
    await run_messages(memory_config(tmp_path, on_retries_exhausted="discard"), handler)
    assert dead_letters(tmp_path) == []
    assert [g.failed for g in handler.groups] == [1]


async def test_a_task_skipped_by_on_error_is_not_dead_lettered(tmp_path):
    handler = Scripted("exit=4", on_error=knarr.ErrorAction.SKIP)
    await run_messages(memory_config(tmp_path), handler)
    assert dead_letters(tmp_path) == []


# --- the environment a task sees --------------------------------------------------------------------
async def test_a_task_sees_path_but_not_the_workers_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("KNARR_SINKS__POSTGRES__MAIN__DSN", "postgresql://u:s3cret@db/x")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "s3cret")
    handler = Scripted("env=PATH", "env=KNARR_SINKS__POSTGRES__MAIN__DSN", "env=KAFKA_SASL_PASSWORD", "env=FROM_TASK")
    handler.env = {"FROM_TASK": "task-value"}
    await run_messages(memory_config(tmp_path), handler)
    [result] = handler.results
    path, dsn, password, from_task = result.stdout.split("\n")[:4]
    assert path and path == os.environ["PATH"]
    assert (dsn, password, from_task) == ("", "", "task-value")


async def test_a_variable_named_in_env_inherit_reaches_the_task(tmp_path, monkeypatch):
    monkeypatch.setenv("KNARR_TEST_SHARED", "shared-value")
    handler = Scripted("env=KNARR_TEST_SHARED")
    await run_messages(memory_config(tmp_path, env_inherit=["PATH", "KNARR_TEST_*"]), handler)
    assert handler.results[0].stdout == "shared-value\n"


# --- output kept to the cap -------------------------------------------------------------------------
async def test_a_result_says_when_its_output_was_cut_at_max_output_bytes(tmp_path):
    handler = Scripted("bytes=5000", "out=tail")
    await run_messages(memory_config(tmp_path, max_output_bytes=1024), handler)
    [result] = handler.results
    assert len(result.stdout) == 1024 and result.stdout == "x" * 1024
    assert result.stdout_truncated and not result.stderr_truncated
