"""Startup fails fast, with a message for people, when a sink or the source cannot be used."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HANDLER = f"{Path(__file__).resolve().parents[2]}/examples/quickstart/handler.py:WordCounter"


def run_worker(tmp_path: Path, config: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "knarr.yaml"
    path.write_text(config)
    return subprocess.run([sys.executable, "-m", "knarr.cli", "run", "--config", str(path), "--handler", HANDLER],
                          capture_output=True, text=True, timeout=120)


def test_an_unreachable_kafka_sink_stops_startup_with_exit_code_3_naming_the_sink(tmp_path):
    proc = run_worker(tmp_path, "sinks: {kafka: {results: {topic: out, brokers: '127.0.0.1:1'}}}\n"
                                "metrics: {enabled: false}\n")
    assert proc.returncode == 3
    assert "kafka sink 'results' (topic 'out'): cannot reach Kafka at '127.0.0.1:1'" in proc.stderr


def test_an_unwritable_filesystem_sink_stops_startup_naming_its_base_path(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = run_worker(tmp_path, f"sinks: {{filesystem: {{out: {{base_path: '{blocker}/sub'}}}}}}\n"
                                "metrics: {enabled: false}\n")
    assert proc.returncode == 3
    assert f"filesystem sink 'out': base_path '{blocker}/sub' is not writable" in proc.stderr


def test_a_sink_type_this_version_lacks_is_named_at_startup(tmp_path):
    proc = run_worker(tmp_path, "sinks: {redis: {cache: {url: 'redis://127.0.0.1:1/0'}}}\nmetrics: {enabled: false}\n")
    assert proc.returncode == 2
    assert "sinks.redis.cache: the redis sink is not available in this knarr version" in proc.stderr
