"""A backfill delivers to the database and HTTP sinks exactly as the streaming worker does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from knarr_spark.cli import main as backfill
from tests.services.mongo import documents
from tests.services.postgres import fresh_table, query
from tests.services.redis import fresh_prefix, read_keys
from tests.spark.workload import write_config

pytestmark = pytest.mark.spark

HANDLERS_FILE = Path(__file__).parent / "handlers.py"
MESSAGES = 40


def test_a_backfill_writes_every_message_to_postgres_redis_mongo_and_http_once(
        spark, postgres_dsn, redis_url, mongo_uri, mongo_database, http_server, tmp_path):
    table = fresh_table(postgres_dsn, "id bigint PRIMARY KEY, body text")
    prefix = fresh_prefix("backfill")
    source = tmp_path / "history.jsonl"
    source.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(MESSAGES)))
    config = write_config(tmp_path / "config.yaml", {
        "kafka": {"brokers": "127.0.0.1:1", "source_topic": "history", "consumer_group": "backfill-sinks"},
        "executor": {"binary_path": shutil.which("echo"), "max_executors": 2, "window_size": 5,
                     "env": {"PG_TABLE": table, "MONGO_COLLECTION": "items"}},
        "sinks": {
            "postgres": {"main": {"dsn": postgres_dsn}},
            "redis": {"cache": {"url": redis_url, "key_prefix": prefix}},
            "mongo": {"docs": {"uri": mongo_uri, "database": mongo_database}},
            "http": {"hook": {"url": http_server.url()}},
        },
        "dlq": {"path": str(tmp_path / "dlq.jsonl")},
        "metrics": {"enabled": False},
        "logging": {"level": "WARNING", "format": "console"},
    })

    code = backfill(["--config", str(config), "--handler", f"{HANDLERS_FILE}:EverySink", "--chunk-size", "9",
                     "--input", str(source), "--report", str(tmp_path / "report.json")])

    assert code == 0
    expected = [{"id": i, "body": f"echo {i}"} for i in range(MESSAGES)]
    assert query(postgres_dsn, f'SELECT id, body FROM "{table}" ORDER BY id') == expected
    assert {key: json.loads(value) for key, (value, _ttl) in read_keys(redis_url, prefix).items()} == {
        f"{prefix}{row['id']}": row for row in expected}
    assert sorted(({k: d[k] for k in ("id", "body")} for d in documents(mongo_uri, mongo_database, "items")),
                  key=lambda d: d["id"]) == expected
    assert sorted(http_server.accepted(), key=lambda d: d["id"]) == expected
    assert not (tmp_path / "dlq.jsonl").exists() or (tmp_path / "dlq.jsonl").read_text() == ""
