"""A mongo or http sink whose server is not there stops `knarr run` at startup: exit 3, the sink named,
no credential printed."""

from __future__ import annotations

import time

from knarr.errors import ExitCode
from tests.worker.test_startup import run_worker


def test_a_dead_mongo_server_stops_startup_with_exit_code_3_naming_the_sink_and_hiding_the_password(tmp_path):
    started = time.monotonic()
    proc = run_worker(tmp_path, "sinks: {mongo: {docs: {uri: 'mongodb://knarr:s3cret-pw@127.0.0.1:1/?authSource=admin', "
                                "database: results, timeout_seconds: 2}}}\nmetrics: {enabled: false}\n")
    assert proc.returncode == ExitCode.UNAVAILABLE
    assert ("mongo sink 'docs' (mongodb://knarr:***@127.0.0.1:1/?authSource=admin, database 'results'): "
            "cannot reach the server within 2s: 127.0.0.1:1: [Errno 111] Connect call failed") in proc.stderr
    assert "s3cret-pw" not in proc.stderr + proc.stdout
    assert time.monotonic() - started < 30


def test_a_dead_http_server_stops_startup_with_exit_code_3_naming_the_sink_and_hiding_the_password(tmp_path):
    proc = run_worker(tmp_path, "sinks: {http: {hook: {url: 'http://knarr:s3cret-pw@127.0.0.1:1/ingest', "
                                "headers: {Authorization: 'Bearer t0ken'}, timeout_seconds: 2}}}\n"
                                "metrics: {enabled: false}\n")
    assert proc.returncode == ExitCode.UNAVAILABLE
    assert ("http sink 'hook' (http://knarr:***@127.0.0.1:1/ingest): cannot reach the server: ConnectError: "
            "All connection attempts failed") in proc.stderr
    assert "s3cret-pw" not in proc.stderr + proc.stdout and "t0ken" not in proc.stderr + proc.stdout


def test_an_http_server_that_answers_anything_lets_the_worker_start(tmp_path, http_server):
    """Reachable is enough at startup: here the OPTIONS check is answered 405 and the sink connects."""
    http_server.fail(405, 1, method="OPTIONS")
    proc = run_worker(tmp_path, f"sinks: {{http: {{hook: {{url: '{http_server.url()}'}}}}}}\n"
                                "kafka: {brokers: '127.0.0.1:1', startup_timeout_seconds: 1}\nmetrics: {enabled: false}\n")
    # The sink connected; startup went on to the (deliberately absent) broker.
    assert [r["status"] for r in http_server.requests("OPTIONS")] == [405]
    assert proc.returncode == ExitCode.UNAVAILABLE and "cannot reach Kafka at '127.0.0.1:1'" in proc.stderr
