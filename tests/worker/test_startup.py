"""Startup fails fast, with a message for people, when a sink, the source or the probes port cannot be used."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Producer

from knarr.config.environment import TERMINATION_LOG_ENV
from knarr.errors import ExitCode
from knarr.observability.kafka_logs import ClientLog

from tests.worker.seccomp import refuse_pidfd_open

HANDLER = f"{Path(__file__).resolve().parents[2]}/examples/quickstart/handler.py:WordCounter"
INPUT = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "input.jsonl"


def run_worker(tmp_path: Path, config: str, env: dict[str, str] | None = None,
               preexec_fn: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "knarr.yaml"
    path.write_text(config)
    return subprocess.run([sys.executable, "-m", "knarr.cli", "run", "--config", str(path), "--handler", HANDLER],
                          capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})},
                          preexec_fn=preexec_fn)


def test_an_unreachable_kafka_sink_stops_startup_with_exit_code_3_naming_the_sink(tmp_path):
    proc = run_worker(tmp_path, "sinks: {kafka: {results: {topic: out, brokers: '127.0.0.1:1'}}}\n"
                                "kafka: {startup_timeout_seconds: 2}\nmetrics: {enabled: false}\n")
    assert proc.returncode == 3
    assert "kafka sink 'results' (topic 'out'): cannot reach Kafka at '127.0.0.1:1'" in proc.stderr


def test_an_unwritable_filesystem_sink_stops_startup_naming_its_base_path(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = run_worker(tmp_path, f"sinks: {{filesystem: {{out: {{base_path: '{blocker}/sub'}}}}}}\n"
                                "metrics: {enabled: false}\n")
    assert proc.returncode == 3
    assert f"filesystem sink 'out': base_path '{blocker}/sub' is not writable" in proc.stderr


def dead_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_postgres_sink_stops_startup_with_exit_code_3_naming_it_without_its_password(tmp_path):
    port = dead_port()
    proc = run_worker(tmp_path, f"sinks: {{postgres: {{main: {{dsn: 'postgresql://app:hunter2@127.0.0.1:{port}/app', "
                                "connect_timeout_seconds: 5}}}\nmetrics: {enabled: false}\n")
    assert proc.returncode == ExitCode.UNAVAILABLE
    assert f"postgres sink 'main' (postgresql://app:***@127.0.0.1:{port}/app): cannot connect: ConnectionRefusedError" in proc.stderr
    assert "check the dsn and that the server is up" in proc.stderr
    assert "hunter2" not in proc.stderr + proc.stdout


def test_an_unreachable_redis_sink_stops_startup_with_exit_code_3_naming_it_without_its_password(tmp_path):
    port = dead_port()
    proc = run_worker(tmp_path, f"sinks: {{redis: {{cache: {{url: 'redis://:hunter2@127.0.0.1:{port}/0', "
                                "socket_timeout_seconds: 5}}}\nmetrics: {enabled: false}\n")
    assert proc.returncode == ExitCode.UNAVAILABLE
    assert f"redis sink 'cache' (redis://:***@127.0.0.1:{port}/0): cannot connect: ConnectionError: Error 111" in proc.stderr
    assert "hunter2" not in proc.stderr + proc.stdout


def test_an_unreachable_broker_is_one_line_naming_it_and_the_last_error_then_exit_3_in_time(tmp_path):
    started = time.monotonic()
    proc = run_worker(tmp_path, "kafka: {brokers: '127.0.0.1:1', startup_timeout_seconds: 2}\n"
                                "sinks: {filesystem: {out: {base_path: out}}}\ndlq: {path: out/dlq.jsonl}\n"
                                "metrics: {enabled: false}\nlogging: {level: WARNING}\n")
    elapsed = time.monotonic() - started
    assert proc.returncode == ExitCode.UNAVAILABLE
    assert proc.stderr.splitlines() == [
        "knarr run: cannot reach Kafka at '127.0.0.1:1' within 2s: Connect to ipv4#127.0.0.1:1 failed: "
        "Connection refused; check the brokers' address and the network (TLS/SASL settings go in kafka.extra), "
        "or raise kafka.startup_timeout_seconds"
    ]
    assert elapsed < 10, f"took {elapsed:.1f}s for a 2 s startup timeout"


class Recorder:
    """Stands in for the structlog logger: keeps each line with its level."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict]] = []

    def __getattr__(self, level: str):
        return lambda event, **fields: self.lines.append((level, event, fields))


def test_librdkafka_lines_reach_the_log_once_per_distinct_message_as_warnings():
    recorder = Recorder()
    client_log = ClientLog("producer", log=recorder)
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "logger": client_log.logger,
                         "error_cb": client_log.error_cb, "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 50})
    watch_until = time.monotonic() + 2  # dozens of reconnect attempts, ~50 ms apart
    while time.monotonic() < watch_until:
        producer.poll(0.1)  # serves the queued log lines
    refused = [line for line in recorder.lines if "Connect to ipv4#127.0.0.1:1 failed: Connection refused" in line[1]]
    assert [level for level, _, _ in refused] == ["warning"], recorder.lines
    assert client_log.dedupe.seen(refused[0][1], time.monotonic())[0] is False  # the repeats were held back
    assert client_log.last_error.startswith("Connect to ipv4#127.0.0.1:1 failed: Connection refused")

def test_a_taken_metrics_port_stops_startup_with_exit_code_3_naming_the_port(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_worker(tmp_path, f"source: {{type: local, local: {{path: '{INPUT}'}}}}\n"
                                    f"sinks: {{filesystem: {{out: {{base_path: '{tmp_path}/out'}}}}}}\n"
                                    f"dlq: {{path: '{tmp_path}/dlq.jsonl'}}\n"
                                    f"metrics: {{host: 127.0.0.1, port: {port}}}\n")
    assert proc.returncode == 3
    assert proc.stderr.strip().splitlines()[-1] == (
        f"knarr run: metrics.port {port} is already in use on 127.0.0.1 (another worker or program on "
        "this host listens there); stop it, set metrics.port to a free port (0 picks one), or set metrics.enabled: false"
    )
    assert "Traceback" not in proc.stderr


def test_kafka_settings_the_client_refuses_stop_startup_with_exit_code_2_naming_the_key(tmp_path):
    proc = run_worker(tmp_path, "kafka: {brokers: '127.0.0.1:1', extra: {fetch.max.bytes: 1000, sasl.password: hunter2}}\n"
                                f"sinks: {{filesystem: {{out: {{base_path: '{tmp_path}/out'}}}}}}\n"
                                "metrics: {enabled: false}\n")
    assert proc.returncode == 2
    assert "kafka.extra.fetch.max.bytes, kafka.extra.message.max.bytes: the Kafka client (librdkafka) refuses" in proc.stderr
    assert "hunter2" not in proc.stderr and "Traceback" not in proc.stderr


def _local_run(tmp_path: Path, executor: str,
               preexec_fn: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    """A run on the local source, its termination message written to tmp_path/termination-log."""
    return run_worker(tmp_path, f"source: {{type: local, local: {{path: '{INPUT}', offsets_path: '{tmp_path}/offsets'}}}}\n"
                                f"sinks: {{filesystem: {{out: {{base_path: '{tmp_path}/out'}}}}}}\n"
                                f"dlq: {{path: '{tmp_path}/dlq.jsonl'}}\n"
                                f"executor: {executor}\nmetrics: {{enabled: false}}\n",
                      env={TERMINATION_LOG_ENV: str(tmp_path / "termination-log")}, preexec_fn=preexec_fn)


def _took_nothing(tmp_path: Path) -> bool:
    """No offset committed, nothing written to the sink or the DLQ."""
    out = tmp_path / "out"
    dlq = tmp_path / "dlq.jsonl"
    return (not (tmp_path / "offsets").exists() and (not dlq.exists() or dlq.stat().st_size == 0)
            and (not out.exists() or not any(out.iterdir())))


def test_an_executor_binary_that_cannot_run_stops_startup_with_exit_code_2_before_any_message(tmp_path):
    proc = _local_run(tmp_path, "{binary_path: /no/such/tool}")
    assert proc.returncode == ExitCode.USAGE
    assert proc.stderr.strip().splitlines()[-1] == (
        "knarr run: executor.binary_path '/no/such/tool' is not an executable file on this machine. The worker "
        "took no message. Fix the path, or the image it runs in, or unset it and give each task its own binary_path.")
    assert "Traceback" not in proc.stderr and _took_nothing(tmp_path)


def test_a_persistent_program_that_cannot_start_stops_startup_with_exit_code_2_before_any_message(tmp_path):
    proc = _local_run(tmp_path, "{persistent: {command: [/no/such/program]}}")
    assert proc.returncode == ExitCode.USAGE
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("knarr run: executor.persistent.command ['/no/such/program'] cannot start: no hello frame: ")
    assert "cannot exec '/no/such/program': No such file or directory" in last
    assert "The worker took no message" in last
    assert "Traceback" not in proc.stderr and _took_nothing(tmp_path)
    # What the operator shows as the Pipeline's condition.
    assert (tmp_path / "termination-log").read_text().startswith(
        "ConfigRejected: executor.persistent.command ['/no/such/program'] cannot start: ")


@pytest.mark.parametrize("executor", ["{persistent: {command: [/bin/cat]}}", "{spawner: thread}"])
def test_a_kernel_that_refuses_pidfds_stops_startup_with_exit_code_2_saying_what_it_needs(tmp_path, executor):
    # A real refusal: the worker runs under a seccomp filter that answers pidfd_open with ENOSYS, as an old
    # kernel or a strict container profile would. Persistent programs and the spawner thread need pidfds.
    proc = _local_run(tmp_path, executor, preexec_fn=refuse_pidfd_open)
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "knarr run: the kernel refused pidfd_open (Function not implemented): knarr watches each task's process "
        "through a pidfd, which needs Linux 5.3 or later and, in a container, a seccomp profile that allows "
        "pidfd_open. The worker took no message. Run it on a newer kernel, or allow pidfd_open in the container's "
        "seccomp profile.")
    assert "Traceback" not in proc.stderr and _took_nothing(tmp_path)
    assert (tmp_path / "termination-log").read_text().startswith("ConfigRejected: the kernel refused pidfd_open")


def test_the_native_runner_needs_no_pidfd_open_and_runs_where_the_kernel_refuses_it(tmp_path):
    # It takes each task's pidfd from clone() itself: the same filter leaves spawn mode working.
    proc = _local_run(tmp_path, "{spawner: native, binary_path: /usr/bin/wc}", preexec_fn=refuse_pidfd_open)
    assert proc.returncode == 0, proc.stderr
    assert any((tmp_path / "out").rglob("*")) and (tmp_path / "offsets").exists()
