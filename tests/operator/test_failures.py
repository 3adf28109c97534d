"""Why workers fail, read from their pods the way the kubelet reports it."""

from __future__ import annotations

from typing import Any

from knarr_operator.failures import Failure, worker_failure


def pod(*statuses: dict[str, Any], deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "search-abc"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-23T12:00:00Z"
    return {"metadata": meta, "status": {"containerStatuses": list(statuses)}}


def crash_looping(message: str, exit_code: int = 2, finished: str = "2026-11-23T12:00:00Z", reason: str = "Error") -> dict[str, Any]:
    return {
        "name": "worker",
        "ready": False,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting failed container"}},
        "lastState": {"terminated": {"exitCode": exit_code, "reason": reason, "message": message, "finishedAt": finished}},
    }


def test_the_workers_termination_line_becomes_the_reason_and_message():
    found = worker_failure([pod(crash_looping("ConfigRejected: sinks.kafka.results.topic: required key is missing\n"))])
    assert found == Failure("ConfigRejected", "sinks.kafka.results.topic: required key is missing")


def test_the_latest_failure_among_the_pods_wins():
    older = pod(crash_looping("ServiceUnavailable: cannot reach Kafka at 'kafka:9092'", 3, "2026-11-23T12:00:00Z"))
    newer = pod(crash_looping("HandlerRejected: handler 'h:H': cannot import module 'h'", 2, "2026-11-23T12:05:00Z"))
    assert worker_failure([older, newer]).reason == "HandlerRejected"


def test_a_ready_worker_is_healthy_whatever_its_last_exit():
    status = crash_looping("Fatal: boom") | {"ready": True, "state": {"running": {"startedAt": "2026-11-23T12:01:00Z"}}}
    assert worker_failure([pod(status)]) is None


def test_a_pod_being_deleted_says_nothing_about_the_spec():
    assert worker_failure([pod(crash_looping("DrainIncomplete: in-flight work did not finish"), deleting=True)]) is None


def test_without_a_reason_line_the_exit_code_and_the_logs_last_line_are_shown():
    found = worker_failure([pod(crash_looping("Traceback (most recent call last):\n  ...\nSystemError: bad", exit_code=1))])
    assert found == Failure("CrashLoopBackOff", "the worker exited with code 1: SystemError: bad")


def test_a_worker_killed_for_memory_says_so():
    found = worker_failure([pod(crash_looping("", exit_code=137, reason="OOMKilled"))])
    assert found.reason == "OOMKilled" and "spec.resources.limits.memory" in found.message


def test_a_container_that_cannot_start_reports_the_kubelets_reason():
    status = {"name": "worker", "ready": False,
              "state": {"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "pg" not found'}}}
    assert worker_failure([pod(status)]) == Failure("CreateContainerConfigError", 'secret "pg" not found')


def test_a_clean_exit_and_other_containers_are_not_failures():
    clean = crash_looping("", exit_code=0)
    sidecar = crash_looping("Fatal: not ours") | {"name": "sidecar"}
    assert worker_failure([pod(clean, sidecar)]) is None


def test_every_reason_a_pipeline_can_show_is_in_the_readmes_troubleshooting_table():
    from pathlib import Path

    from knarr.observability.termination import Reason

    from knarr_operator import failures

    readme = (Path(__file__).resolve().parents[2] / "operator" / "README.md").read_text()
    table = readme.split("## Troubleshooting", 1)[1].split("\n## ", 1)[0]
    reasons = {str(r) for r in Reason} | set(failures.STARTUP_FAILURES) | {
        failures.CRASH_LOOP, failures.EXITED, "OOMKilled", "KafkaUnreachable", "WorkersNotReady", "Suspended",
        "RolledBack", "ReadyDeadlineExceeded", "ConfigRejected"}
    missing = sorted(r for r in reasons if f"`{r}`" not in table)
    assert missing == []
