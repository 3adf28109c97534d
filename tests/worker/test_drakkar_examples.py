"""Handlers written for Drakkar run on knarr after `knarr migrate-config` and an import change.

The handlers and configs in drakkar_examples/ use Drakkar's API the way its integration
examples and docs do. Each test ports one as a user would: the same file with
``import drakkar as dk`` replaced by ``from knarr import drakkar as dk``, the Drakkar YAML and
its deployment's ``DK_*`` variables through ``knarr migrate-config``, then runs it on the real
broker and checks what Drakkar's docs say it produces.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

import knarr
from knarr.config.loading import load_config
from knarr.engine.worker import Worker
from knarr.loader import load_handler_class
from tests.services.kafka import committed_offsets, consume_all, create_topic, produce_json, unique_name
from tests.worker.harness import BEHAVE, running, wait_until

pytestmark = pytest.mark.kafka

EXAMPLES = Path(__file__).parent / "drakkar_examples"


@dataclass
class Ported:
    config: knarr.KnarrConfig
    handler_file: Path
    exit_code: int
    report: str

    def handler(self, name: str) -> knarr.BaseHandler:
        return load_handler_class(f"{self.handler_file}:{name}")()

    def committed(self, bootstrap: str, expected: dict[int, int]):
        cfg = self.config
        return lambda: committed_offsets(bootstrap, cfg.kafka.consumer_group, cfg.kafka.source_topic) == expected


def port(tmp_path: Path, handler: str, drakkar_yaml: str, dk_env: dict[str, str],
         knarr_env: dict[str, str] | None = None) -> Ported:
    """Port an example: change the import, migrate the YAML and the DK_* environment, load the result."""
    source = (EXAMPLES / handler).read_text()
    ported = source.replace("import drakkar as dk", "from knarr import drakkar as dk")
    changed = [(a, b) for a, b in zip(source.splitlines(), ported.splitlines(), strict=True) if a != b]
    assert changed == [("import drakkar as dk", "from knarr import drakkar as dk")]
    (tmp_path / handler).write_text(ported)
    (tmp_path / "deploy.env").write_text("".join(f"{k}={v}\n" for k, v in dk_env.items()))
    proc = subprocess.run(
        [sys.executable, "-m", "knarr.cli", "migrate-config", str(EXAMPLES / drakkar_yaml),
         "-o", str(tmp_path / "knarr.yaml"), "--env-file", str(tmp_path / "deploy.env"),
         "--env-out", str(tmp_path / "knarr.env")],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode in (0, 1), proc.stderr
    env = dict(line.split("=", 1) for line in (tmp_path / "knarr.env").read_text().splitlines())
    assert len(env) == len(dk_env), proc.stderr  # every DK_ variable of the deployment was renamed
    config = load_config(tmp_path / "knarr.yaml", env={**env, **(knarr_env or {})})
    return Ported(config, tmp_path / handler, proc.returncode, proc.stderr)


def deployment(bootstrap: str, source_topic_key: str, topic: str, **more: str) -> dict[str, str]:
    """The DK_* variables a deployment of the example would set (here: this test's broker and names)."""
    group_key = source_topic_key.replace("SOURCE_TOPIC", "CONSUMER_GROUP").replace("__TOPIC", "__CONSUMER_GROUP")
    timeout_key = group_key.replace("CONSUMER_GROUP", "SESSION_TIMEOUT_MS")
    return {"DK_KAFKA__BROKERS": bootstrap, source_topic_key: topic, group_key: unique_name("g"),
            timeout_key: "6000", timeout_key.replace("SESSION_TIMEOUT_MS", "HEARTBEAT_INTERVAL_MS"): "500",
            "DK_METRICS__ENABLED": "false", **more}


def new_topics(bootstrap: str, *prefixes: str) -> list[str]:
    names = [unique_name(p) for p in prefixes]
    for name in names:
        create_topic(bootstrap, name, 1)
    return names


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


# --- the fast-worker shape: one result per message, one summary per window ----------------------
async def test_the_char_counter_counts_each_file_and_summarises_each_window(kafka_bootstrap, tmp_path, capfd):
    src, counts, windows = new_topics(kafka_bootstrap, "req", "counts", "windows")
    counter = script(tmp_path, "count-chars",
                     '[ -f "$1" ] || { echo "no such file: $1" >&2; exit 1; }\n'
                     'printf \'{"chars": %d}\\n\' "$(wc -c < "$1")"\n')
    sizes = {f"r{i}": 10 * i + 3 for i in range(7)}
    for rid, size in sizes.items():
        (tmp_path / f"{rid}.txt").write_text("x" * size)
    requests = [{"request_id": rid, "file_path": str(tmp_path / f"{rid}.txt")} for rid in sizes]
    requests.append({"request_id": "gone", "file_path": str(tmp_path / "missing.txt")})
    produce_json(kafka_bootstrap, src, requests, partition=0)

    ported = port(tmp_path, "char_counter.py", "char_counter.yaml", deployment(
        kafka_bootstrap, "DK_KAFKA__SOURCE_TOPIC", src, DK_EXECUTOR__BINARY_PATH=counter,
        DK_SINKS__KAFKA__COUNTS__TOPIC=counts, DK_SINKS__KAFKA__WINDOWS__TOPIC=windows, DK_LOGGING__LEVEL="DEBUG"),
        knarr_env={"KNARR_DEBUG__PORT": "0", "KNARR_DEBUG__DB_DIR": str(tmp_path / "recorder")})
    # Links to a Kafka UI do not carry over (knarr's are debug.custom_links): listed, and exit 1.
    assert ported.exit_code == 1
    for key in ("kafka.ui_url", "kafka.ui_cluster_name"):
        assert f"    {key}: knarr's debug UI links to other tools through debug.custom_links" in ported.report
    # The older layout's recorder section carries over (its port and files moved by the test's env)
    assert (ported.config.debug.enabled, ported.config.debug.store_events) == (True, True)
    assert "\n    debug" not in ported.report.split("NOT carried over", 1)[1]
    assert (ported.config.executor.window_size, ported.config.executor.max_retries) == (5, 1)

    async with running(Worker(ported.config, ported.handler("CharCounter"))):
        await wait_until(ported.committed(kafka_bootstrap, {0: 8}), 60, "all eight requests committed")
        per_file = [m.json() for m in consume_all(kafka_bootstrap, counts, expected=7)]
        summaries = [m.json() for m in consume_all(kafka_bootstrap, windows, timeout=3)]

    assert {c["request_id"]: c["chars"] for c in per_file} == sizes  # the missing file was skipped
    assert all(s["files"] <= 5 and s["files"] == len(s["request_ids"]) for s in summaries)
    assert sorted(rid for s in summaries for rid in s["request_ids"]) == sorted(sizes)
    assert sum(s["total_chars"] for s in summaries) == sum(sizes.values())
    assert consume_all(kafka_bootstrap, ported.config.dlq_topic, timeout=1) == []
    # The task's labels are in its log lines.
    lines = [json.loads(line) for line in capfd.readouterr().err.splitlines() if line.startswith("{")]
    labelled = [e for e in lines if e.get("event") == "task_complete"]
    assert sorted(e["labels"]["request_id"] for e in labelled) == sorted(sizes)


# --- the fan-out guide: tasks per (pattern, file), one aggregate per request --------------------
async def test_the_fanout_search_aggregates_each_request_with_drakkars_error_kinds(kafka_bootstrap, tmp_path):
    src, matches, summaries = new_topics(kafka_bootstrap, "req", "matches", "summaries")
    search = script(tmp_path, "search", '[ -f "$2" ] || exit 2\n[ "$1" = SLOW ] && sleep 10\n'
                                        'grep -- "$1" "$2"\nexit 0\n')
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("alpha one\nbeta two\nalpha three\n")
    b.write_text("beta four\n")
    missing = str(tmp_path / "missing.txt")
    produce_json(kafka_bootstrap, src, [
        {"request_id": "r1", "tier": "gold", "patterns": ["alpha", "beta"], "files": [str(a), str(b)]},
        {"request_id": "r2", "patterns": ["alpha", "SLOW"], "files": [str(a), missing]},
    ], partition=0)
    produce_json(kafka_bootstrap, src, ["not a request"], partition=0)

    ported = port(tmp_path, "fanout_search.py", "fanout_search.yaml", deployment(
        kafka_bootstrap, "DK_SOURCES__KAFKA__TOPIC", src, DK_EXECUTOR__BINARY_PATH=search,
        DK_SINKS__KAFKA__MATCHES__TOPIC=matches, DK_SINKS__KAFKA__SUMMARIES__TOPIC=summaries),
        knarr_env={"KNARR_EXECUTOR__METRIC_LABELS": '["tier"]'})
    # Two settings do not carry over: knarr's environment allow-list and output cap are its own, and the
    # command says so with exit 1; everything else maps, or is already knarr's behaviour.
    assert ported.exit_code == 1, ported.report
    dropped = ported.report.split("NOT carried over", 1)[1]
    assert "executor.env_inherit_parent: a knarr task gets only" in dropped
    assert "executor.max_stdout_bytes: knarr keeps at most executor.max_output_bytes" in dropped
    assert dropped.count("\n    ") == 2
    assert "ignored ui: disabled" in ported.report
    assert (ported.config.source.on_parse_error, ported.config.dlq.on_send_failure) == ("dlq", "stall")
    assert ported.config.kafka.extra == {"client.id": "search-worker"}

    gold = lambda: REGISTRY.get_sample_value(  # noqa: E731
        "knarr_task_labels_total", {"status": "completed", "label": "tier", "value": "gold"}) or 0.0
    gold_before = gold()
    handler = ported.handler("FanoutSearch")
    async with running(Worker(ported.config, handler)):
        await wait_until(ported.committed(kafka_bootstrap, {0: 3}), 60, "all three messages committed")
        found = [m.json() for m in consume_all(kafka_bootstrap, matches, expected=5)]
        by_request = {m.json()["request_id"]: m.json() for m in consume_all(kafka_bootstrap, summaries, expected=2)}
        [parse_error] = [m.json() for m in consume_all(kafka_bootstrap, ported.config.dlq_topic, expected=1)]

    assert handler.ready_with == (3, None)  # on_ready(config, db_pool): no PostgreSQL sink, so None
    assert by_request["r1"] == {"request_id": "r1", "total": 4, "succeeded": 4, "failed": 0, "lines": 4,
                                "failure_kinds": []}
    # alpha/a.txt matches twice; the missing file exits 2 (nonzero_exit, skipped); SLOW times out,
    # is retried once (on_error asked for it on a timeout), times out again and is skipped.
    assert by_request["r2"] == {"request_id": "r2", "total": 4, "succeeded": 1, "failed": 3, "lines": 2,
                                "failure_kinds": ["nonzero_exit", "nonzero_exit", "timeout"]}
    assert handler.timeouts_seen == 1
    for m in found:  # stable ids: the same request, pattern and file give the same id anywhere
        assert m["task_id"] == knarr.make_stable_task_id("search", m["request_id"], m["pattern"], m["file"])
    assert parse_error["offsets"] == [2]  # sources.kafka.on_parse_error: dlq carried over
    assert gold() - gold_before == 4  # opt-in metric label: r1's four tasks


# --- a broken handler never silently diverts traffic (Drakkar-API variants) ---------------------
async def test_a_drakkar_handler_raising_in_arrange_on_every_message_stalls_and_commits_nothing(kafka_bootstrap,
                                                                                                tmp_path):
    src, done = new_topics(kafka_bootstrap, "jobs", "done")
    produce_json(kafka_bootstrap, src, [{"job_id": f"j{i}", "kind": "copy"} for i in range(4)], partition=0)
    ported = port(tmp_path, "broken.py", "jobs.yaml", deployment(
        kafka_bootstrap, "DK_SOURCES__KAFKA__TOPIC", src, DK_EXECUTOR__BINARY_PATH=BEHAVE,
        DK_SINKS__KAFKA__DONE__TOPIC=done), knarr_env={"KNARR_EXECUTOR__WINDOW_LINGER_MS": "300"})
    handler = ported.handler("EveryMessageFails")
    worker = Worker(ported.config, handler)
    async with running(worker):
        await wait_until(lambda: not worker._readiness()[0], 30, "readiness to report the stall")
        assert "arrange() fails on every message" in worker._readiness()[1]
        assert "KeyError" in worker._readiness()[1] and "copy" in worker._readiness()[1]
        assert committed_offsets(kafka_bootstrap, ported.config.kafka.consumer_group, src) == {}
        assert consume_all(kafka_bootstrap, ported.config.dlq_topic, timeout=1) == []
        handler.programs["copy"] = "copied"  # the fix reaches the worker
        await wait_until(ported.committed(kafka_bootstrap, {0: 4}), 60, "the partition to resume by itself")
        assert worker._readiness()[0]
    assert sorted(m.json()["job_id"] for m in consume_all(kafka_bootstrap, done, expected=4)) == ["j0", "j1", "j2",
                                                                                                   "j3"]
    assert consume_all(kafka_bootstrap, ported.config.dlq_topic, timeout=1) == []


async def test_a_drakkar_handler_raising_on_one_message_dead_letters_that_message_only(kafka_bootstrap, tmp_path):
    src, done = new_topics(kafka_bootstrap, "jobs", "done")
    jobs = [{"job_id": f"j{i}", "kind": "copy", "copies": "two" if i == 3 else str(i)} for i in range(6)]
    produce_json(kafka_bootstrap, src, jobs, partition=0)
    ported = port(tmp_path, "broken.py", "jobs.yaml", deployment(
        kafka_bootstrap, "DK_SOURCES__KAFKA__TOPIC", src, DK_EXECUTOR__BINARY_PATH=BEHAVE,
        DK_SINKS__KAFKA__DONE__TOPIC=done), knarr_env={"KNARR_EXECUTOR__WINDOW_LINGER_MS": "500"})
    async with running(Worker(ported.config, ported.handler("OneMessageFails"))):
        await wait_until(ported.committed(kafka_bootstrap, {0: 6}), 60, "all six committed")
        [record] = [m.json() for m in consume_all(kafka_bootstrap, ported.config.dlq_topic, expected=1)]
    assert (record["sink_name"], record["offsets"]) == ("arrange", [3])
    assert "invalid literal for int()" in record["error"] and "'two'" in record["error"]
    outputs = {m.json()["job_id"]: m.json()["out"] for m in consume_all(kafka_bootstrap, done, expected=5)}
    assert outputs == {f"j{i}": f"copiedx{i}" for i in (0, 1, 2, 4, 5)}
