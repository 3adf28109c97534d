"""`knarr probe` as people run it: a real process, a config with a Kafka and a PostgreSQL sink on the
real servers, and afterwards nothing delivered, nothing dead-lettered, no offset committed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from knarr.errors import ExitCode
from tests.services.kafka import committed_offsets, create_topic, end_offsets, produce_json, unique_name
from tests.services.postgres import fresh_table, query

pytestmark = pytest.mark.kafka

HANDLER = f"{Path(__file__).resolve().parents[1] / 'programs' / 'probe_handlers.py'}:FanOut"


@pytest.fixture
def pipeline(tmp_path, kafka_bootstrap, postgres_dsn):
    """A config whose source topic holds the message to be probed, with a Kafka sink, a PostgreSQL sink and a DLQ topic."""
    source, out, dlq = unique_name("probe-in"), unique_name("probe-out"), unique_name("probe-dlq")
    for topic in (source, out, dlq):
        create_topic(kafka_bootstrap, topic, 1)
    table = fresh_table(postgres_dsn, "id text, total int, succeeded int", prefix="probe")
    group = unique_name("probe-group")
    config = tmp_path / "knarr.yaml"
    config.write_text(json.dumps({
        "kafka": {"brokers": kafka_bootstrap, "source_topic": source, "consumer_group": group},
        "executor": {"max_executors": 2, "task_timeout_seconds": 30, "retry_backoff_base_seconds": 0.01,
                     "retry_backoff_max_seconds": 0.05},
        "sinks": {"kafka": {"out": {"topic": out}}, "postgres": {"db": {"dsn": postgres_dsn}}},
        "dlq": {"topic": dlq},
        "metrics": {"enabled": False},
    }))
    message = {"key": "j1", "value": {"id": "j1", "fanout": 3, "fail": [1]}}
    produce_json(kafka_bootstrap, source, [message["value"]], key_fn=lambda _: "j1")
    yield {"config": config, "message": message, "table": table, "source": source, "out": out, "dlq": dlq,
           "group": group, "bootstrap": kafka_bootstrap, "dsn": postgres_dsn, "seen": tmp_path / "seen.json"}
    # Whatever the probe printed, nothing may have left it.
    assert end_offsets(kafka_bootstrap, out) == {0: 0}, "the probe produced to the Kafka sink's topic"
    assert end_offsets(kafka_bootstrap, dlq) == {0: 0}, "the probe wrote a dead letter"
    assert query(postgres_dsn, f"SELECT count(*) AS n FROM {table}") == [{"n": 0}], "the probe inserted rows"
    assert committed_offsets(kafka_bootstrap, group, source) == {}, "the probe committed an offset"


def probe(p, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**__import__("os").environ, "PROBE_TABLE": p["table"], "PROBE_SEEN_FILE": str(p["seen"])}
    return subprocess.run([sys.executable, "-m", "knarr.cli", "probe", "--config", str(p["config"]),
                           "--handler", HANDLER, *args], input=stdin, capture_output=True, text=True,
                          timeout=120, env=env)


def test_the_readable_report_shows_the_tasks_and_what_each_sink_would_get(pipeline, tmp_path):
    path = tmp_path / "message.json"
    path.write_text(json.dumps(pipeline["message"]))

    proc = probe(pipeline, str(path))

    assert proc.returncode == ExitCode.OK, proc.stderr
    out = proc.stdout
    assert f"message   {pipeline['source']}[0]@0  key='j1'" in out
    assert "replaced (failed)" in out and "attempt 1: failed exit 3 -> replaced by" in out
    assert "group     total 4: succeeded 3, failed 0, replaced 1" in out
    assert "kafka.out: 3 payload(s)" in out and "postgres.db: 1 payload(s)" in out
    assert f"[on_message_complete] table='{pipeline['table']}'" in out
    assert "nothing was delivered or committed" in out and proc.stderr == ""


def test_the_json_report_from_stdin_matches_the_group_the_handler_saw(pipeline):
    proc = probe(pipeline, "--json", "-", stdin=json.dumps(pipeline["message"]))

    assert proc.returncode == ExitCode.OK, proc.stderr
    report = json.loads(proc.stdout)
    seen = json.loads(pipeline["seen"].read_text())
    assert {k: report["group"][k] for k in ("total", "succeeded", "failed", "replaced")} == \
        {k: seen[k] for k in ("total", "succeeded", "failed", "replaced")} == \
        {"total": 4, "succeeded": 3, "failed": 0, "replaced": 1}
    tree = {}
    stack = list(report["tasks"])
    while stack:
        node = stack.pop()
        tree[node["task_id"]] = node
        stack += node["children"]
    assert sorted(tree) == sorted(seen["tasks"])
    assert {task_id: tree[task_id]["stdout"] for task_id in seen["results"]} == seen["results"]
    assert len(report["would_deliver"]["kafka.out"]) == 3
    assert report["would_deliver"]["postgres.db"][0]["data"] == {"id": "j1", "total": 4, "succeeded": 3}


def test_a_task_out_of_retries_exits_4_and_shows_the_dead_letter_that_was_not_written(pipeline):
    message = {"key": "r", "value": {"id": "r", "fanout": 1, "fail": [0], "retry": True}}

    proc = probe(pipeline, "-", stdin=json.dumps(message))

    assert proc.returncode == ExitCode.WORK_FAILED, proc.stderr
    assert "would dead-letter  offsets [0] at task" in proc.stdout
    assert "attempt 2: failed exit 3 -> retry" in proc.stdout


@pytest.mark.parametrize(("stdin", "says"), [
    ("{\"key\": \"k\"", "knarr probe: stdin is not JSON: line 1 column 12"),
    ("{\"key\": \"k\"}", "'value' is missing"),
    ("[{\"value\": 1}]", "a message must be a JSON object"),
])
def test_a_message_that_is_no_message_exits_2_with_what_is_wrong_and_no_traceback(pipeline, stdin, says):
    proc = probe(pipeline, "-", stdin=stdin)

    assert proc.returncode == ExitCode.USAGE
    assert says in proc.stderr and "Traceback" not in proc.stderr and proc.stdout == ""
