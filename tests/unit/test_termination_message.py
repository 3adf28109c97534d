"""A worker that exits with an error leaves one line, `<Reason>: <what went wrong>`, for Kubernetes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from knarr.config.loading import load_config
from knarr.errors import ConfigError, ExitCode, FatalError, HandlerError, UnavailableError, UsageError
from knarr.observability.termination import (
    MAX_BYTES,
    Reason,
    headline,
    reason_for_error,
    reason_for_exit_code,
    termination_log_path,
    termination_message,
    write_termination_message,
)

ROOT = Path(__file__).resolve().parents[2]
HANDLER = f"{ROOT / 'examples' / 'quickstart' / 'handler.py'}:WordCounter"


def knarr_run(tmp_path: Path, config: str, handler: str = HANDLER, **env: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    path = tmp_path / "knarr.yaml"
    path.write_text(config)
    log = tmp_path / "termination-log"
    proc = subprocess.run(
        [sys.executable, "-m", "knarr.cli", "run", "--config", str(path), "--handler", handler],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "KNARR_TERMINATION_LOG": str(log), **env},
    )
    return proc, log


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_knarr_run_with_a_bad_config_writes_config_rejected_naming_the_key(tmp_path):
    proc, log = knarr_run(tmp_path, "kafka: {brokers: 'localhost:1', source_topic: t, consumer_group: g}\n"
                                    "sinks: {kafka: {results: {}}}\n")
    assert proc.returncode == ExitCode.USAGE
    assert log.read_text() == ("ConfigRejected: sinks.kafka.results.topic: required key is missing "
                               "[env: KNARR_SINKS__KAFKA__results__TOPIC]\n")


def test_knarr_run_with_a_handler_that_cannot_be_imported_writes_handler_rejected(tmp_path):
    proc, log = knarr_run(tmp_path, "sinks: {filesystem: {out: {base_path: out}}}\n", handler="no_such_module:Handler")
    assert proc.returncode == ExitCode.USAGE
    assert log.read_text() == ("HandlerRejected: handler 'no_such_module:Handler': cannot import module 'no_such_module' "
                               "(No module named 'no_such_module'); is it on PYTHONPATH?\n")


def test_knarr_run_that_cannot_reach_the_broker_writes_service_unavailable_naming_it(tmp_path):
    port = closed_port()
    proc, log = knarr_run(tmp_path, f"kafka: {{brokers: '127.0.0.1:{port}', source_topic: t, consumer_group: g, "
                                    f"startup_timeout_seconds: 1}}\n"
                                    "sinks: {filesystem: {out: {base_path: out}}}\nmetrics: {enabled: false}\n")
    assert proc.returncode == ExitCode.UNAVAILABLE
    message = log.read_text()
    assert message.startswith("ServiceUnavailable: ") and message.endswith("\n") and message.count("\n") == 1
    assert f"cannot reach Kafka at '127.0.0.1:{port}' within 1s" in message


def test_a_termination_log_that_cannot_be_written_changes_nothing_about_the_exit(tmp_path):
    proc, _ = knarr_run(tmp_path, "sinks: {kafka: {results: {}}}\n",
                        KNARR_TERMINATION_LOG=str(tmp_path / "no-such-dir" / "termination-log"))
    assert proc.returncode == ExitCode.USAGE
    assert "sinks.kafka.results.topic: required key is missing" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_termination_log_variable_is_not_taken_for_a_config_override(tmp_path):
    (tmp_path / "knarr.yaml").write_text("sinks: {filesystem: {out: {base_path: out}}}\n")
    config = load_config(tmp_path / "knarr.yaml", env={"KNARR_TERMINATION_LOG": "/dev/termination-log"})
    assert set(config.sinks.filesystem) == {"out"}


def test_without_the_variable_only_a_writable_default_path_is_used(tmp_path):
    expected = "/dev/termination-log" if os.access("/dev/termination-log", os.W_OK) else None
    assert termination_log_path({}) == expected
    assert termination_log_path({"KNARR_TERMINATION_LOG": str(tmp_path / "x")}) == str(tmp_path / "x")


@pytest.mark.parametrize(("error", "reason"), [
    (ConfigError("x"), Reason.CONFIG_REJECTED),
    (HandlerError("x"), Reason.HANDLER_REJECTED),
    (UsageError("x"), Reason.ARGUMENTS_REJECTED),
    (UnavailableError("x"), Reason.SERVICE_UNAVAILABLE),
    (FatalError("x"), Reason.FATAL),
    (RuntimeError("x"), Reason.FATAL),
])
def test_each_error_class_has_its_reason(error, reason):
    assert reason_for_error(error) == reason


@pytest.mark.parametrize(("code", "reason"), [
    (ExitCode.FATAL, Reason.FATAL), (ExitCode.UNAVAILABLE, Reason.SERVICE_UNAVAILABLE),
    (ExitCode.WORK_FAILED, Reason.WORK_FAILED), (ExitCode.DRAIN_INCOMPLETE, Reason.DRAIN_INCOMPLETE), (137, Reason.FATAL),
])
def test_each_exit_code_without_an_error_has_its_reason(code, reason):
    assert reason_for_exit_code(code) == reason


def test_a_listing_error_keeps_its_first_problem_and_counts_the_rest():
    text = "invalid configuration in 'x.yaml':\n  a.b: bad\n  c.d: worse\n  e: worst"
    assert headline(text) == "a.b: bad (and 2 more)"
    assert headline("handler 'h:H' is not usable:\n  on_ready takes no pool") == "handler 'h:H' is not usable: on_ready takes no pool"
    assert headline("one line only") == "one line only"


def test_a_long_message_is_cut_to_the_bound_on_a_character_boundary():
    message = termination_message(Reason.FATAL, "ø" * 5000)
    assert len(message.encode()) <= MAX_BYTES
    assert message.startswith("Fatal: øø") and message.endswith("…")


def test_writing_replaces_an_earlier_message(tmp_path):
    env = {"KNARR_TERMINATION_LOG": str(tmp_path / "log")}
    assert write_termination_message(Reason.FATAL, "first", env)
    assert write_termination_message(Reason.DRAIN_INCOMPLETE, "second", env)
    assert (tmp_path / "log").read_text() == "DrainIncomplete: second\n"
