"""`knarr run --processes N`: one supervisor, N worker processes of one consumer group, one pod's face.

One scenario runs once for the module: a supervisor of two processes consumes a 4-partition
topic; midway one process is killed with SIGKILL (as the OOM killer would) and is started again
while the other goes on; then the supervisor gets SIGTERM. The tests check one consequence each.
Faults that end the whole run (the supervisor killed, a process that cannot start, a process
that stops answering) have their own runs.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from knarr.supervisor import scratch
from tests.services.kafka import (
    Message,
    committed_offsets,
    consume_all,
    create_topic,
    end_offsets,
    produce_json,
    unique_name,
)
from tests.worker.procs import (
    WorkerFleet,
    WorkerProcess,
    WorkerSpec,
    alive,
    caught_up,
    free_port,
    outputs_by_kind,
    wait_until,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 4
MESSAGES = 800
TASK_SLEEP_S = 0.02
TWO = ("--processes", "2")


def started(worker: WorkerProcess) -> list[dict]:
    """The supervisor's "worker process started" records, in order."""
    return [e for e in worker.log_events() if e.get("event") == "worker process started"]


def pids_of(worker: WorkerProcess) -> dict[int, int]:
    """The current pid of each worker process, by index."""
    return {e["process"]: e["pid"] for e in started(worker)}


def all_consuming(worker: WorkerProcess) -> str | None:
    reason = worker.readiness()
    return reason if reason and "0: consuming" in reason and "1: consuming" in reason else None


@dataclass
class SupervisedRun:
    inputs: dict[tuple[int, int], dict] = field(default_factory=dict)
    ready_before: str = ""
    pids_before: dict[int, int] = field(default_factory=dict)
    pids_after: dict[int, int] = field(default_factory=dict)
    killed_record: dict = field(default_factory=dict)
    ready_after: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    exit_code: int | None = None
    left_alive: list[int] = field(default_factory=list)
    outputs: list[Message] = field(default_factory=list)


@pytest.fixture(scope="module")
def supervised(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> SupervisedRun:
    topic, output, group = unique_name("procs-in"), unique_name("procs-out"), unique_name("procs-group")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    create_topic(kafka_bootstrap, output, 1)
    spec = WorkerSpec(kafka_bootstrap, topic, group, output, max_executors=4, window_size=20, max_poll_records=50,
                      log_level="INFO")
    run = SupervisedRun()

    def committed() -> int:
        return sum(committed_offsets(kafka_bootstrap, group, topic).values())

    with WorkerFleet(spec, tmp_path_factory.mktemp("procs"), unique_name("knarrprocs")) as fleet:
        pod = fleet.start("pod", args=TWO)
        run.ready_before = wait_until(lambda: all_consuming(pod), 60, "both worker processes to consume")
        run.pids_before = pids_of(pod)
        records = [{"request_id": f"r{i}", "sleep": TASK_SLEEP_S} for i in range(MESSAGES)]
        placed = produce_json(kafka_bootstrap, topic, records, key_fn=lambda r: r["request_id"])
        run.inputs = dict(zip(placed, records))
        wait_until(lambda: committed() >= 150, 60, "the first 150 messages to be committed")

        os.kill(run.pids_before[0], signal.SIGKILL)
        run.killed_record = wait_until(
            lambda: next((e for e in pod.log_events() if e.get("event", "").startswith("worker process killed")), None),
            30, "the supervisor to see process 0 killed")
        wait_until(lambda: len(started(pod)) == 3, 30, "process 0 to be started again")
        run.pids_after = pids_of(pod)
        run.ready_after = wait_until(lambda: all_consuming(pod), 60, "both processes to consume again")

        ends = end_offsets(kafka_bootstrap, topic)
        wait_until(lambda: caught_up(committed_offsets(kafka_bootstrap, group, topic), ends), 90,
                   "every partition to be committed to its end")
        run.metrics = pod.metrics()
        run.exit_code = pod.terminate()
        time.sleep(0.5)
        run.left_alive = [pid for pid in run.pids_after.values() if alive(pid)]

    run.outputs = consume_all(kafka_bootstrap, output)
    return run


def test_the_processes_share_the_partitions(supervised: SupervisedRun) -> None:
    assert "2 worker processes" in supervised.ready_before
    assert "0: consuming 2 partition(s)" in supervised.ready_before
    assert "1: consuming 2 partition(s)" in supervised.ready_before


def test_every_input_offset_produces_output_across_the_kill(supervised: SupervisedRun) -> None:
    seen = {(s["partition"], s["offset"]): s for s in outputs_by_kind(supervised.outputs, "message")}
    missing = sorted(set(supervised.inputs) - set(seen))
    assert not missing, f"{len(missing)} input offsets have no output, e.g. {missing[:10]}"
    workers = {s["worker"] for s in seen.values()}
    assert {supervised.pids_before[1], supervised.pids_after[0]} <= workers


def test_a_killed_process_is_started_again_and_the_other_goes_on(supervised: SupervisedRun) -> None:
    assert supervised.killed_record["process"] == 0
    assert supervised.killed_record["signal"] == "SIGKILL"
    assert supervised.pids_after[0] != supervised.pids_before[0]
    assert supervised.pids_after[1] == supervised.pids_before[1]
    assert supervised.metrics['knarr_worker_process_restarts_total{process="0"}'] == 1
    assert supervised.metrics['knarr_worker_process_restarts_total{process="1"}'] == 0


def test_metrics_are_one_scrape_labelled_by_process(supervised: SupervisedRun) -> None:
    m = supervised.metrics
    assert m['knarr_worker_processes{process="supervisor"}'] == 2
    assert m['knarr_worker_process_up{process="0"}'] == 1 and m['knarr_worker_process_up{process="1"}'] == 1
    completed = {p: m.get(f'knarr_tasks_total{{process="{p}",status="completed"}}', 0) for p in ("0", "1")}
    assert completed["0"] > 0 and completed["1"] > 0
    assert 'process_resident_memory_bytes{process="supervisor"}' in m
    assert 'process_resident_memory_bytes{process="1"}' in m


def test_sigterm_drains_every_process_and_exits_clean(supervised: SupervisedRun) -> None:
    assert supervised.exit_code == 0
    assert supervised.left_alive == []


# --- faults, again and again -----------------------------------------------------------------

KILLS = 10


@pytest.mark.slow
def test_worker_processes_killed_again_and_again_lose_nothing(kafka_bootstrap: str, tmp_path: Path) -> None:
    """SIGKILL a worker process KILLS times (the two in turn, at random moments, each time with work uncommitted,
    a rebalance under way or not); the supervisor starts each again; every input offset still ends with a complete
    summary.

    A static member killed in the middle of a cooperative rebalance can leave partitions with no owner (the follow-up
    rebalance is the dead member's to ask for, and its static successor rejoins without one; seen once in CI,
    partitions 0 and 1 never consumed again): the processes' looks at their group hand them out again (every
    second here, so the grace is 16 s: the revoke wait, 15 s, and one look)."""
    topic, output, group = unique_name("procs-kills-in"), unique_name("procs-kills-out"), unique_name("procs-kills")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    create_topic(kafka_bootstrap, output, 1)
    # Static membership (as a StatefulSet's pods have it): a process started again takes its partitions back at
    # once instead of after the session timeout; the supervisor makes the id one per process.
    spec = WorkerSpec(kafka_bootstrap, topic, group, output, max_executors=4, window_size=20, max_poll_records=50,
                      log_level="INFO", session_timeout_ms=6_000, drain_timeout_seconds=5,
                      kafka_extra={"group.instance.id": unique_name("pod")}, kafka_settings={"ownership_check_seconds": 1})
    records = [{"request_id": f"k{i}", "sleep": 0.02} for i in range(6_000)]
    pick = random.Random(20261129)
    uncommitted_at_kills = []

    def uncommitted() -> int:
        return len(records) - sum(committed_offsets(kafka_bootstrap, group, topic).values())

    with WorkerFleet(spec, tmp_path, unique_name("knarrkills")) as fleet:
        pod = fleet.start("pod", args=TWO)
        wait_until(lambda: all_consuming(pod), 60, "both worker processes to consume")
        placed = produce_json(kafka_bootstrap, topic, records, key_fn=lambda r: r["request_id"])
        for kill in range(KILLS):
            index = kill % 2
            wait_until(lambda: (r := pod.readiness()) and f"{index}: consuming" in r, 90,
                       f"process {index} to consume before kill {kill + 1}")
            time.sleep(pick.uniform(0.3, 1.0))
            uncommitted_at_kills.append(uncommitted())
            starts = len(started(pod))
            os.kill(pids_of(pod)[index], signal.SIGKILL)
            wait_until(lambda: len(started(pod)) > starts, 60, f"process {index} to be started again")
        ends = end_offsets(kafka_bootstrap, topic)
        wait_until(lambda: caught_up(committed_offsets(kafka_bootstrap, group, topic), ends), 180,
                   "every partition to be committed to its end")
        restarts = sum(v for k, v in pod.metrics().items() if k.startswith("knarr_worker_process_restarts_total"))
        children = list(pids_of(pod).values())
        assert pod.terminate() == 0
    assert all(n > 0 for n in uncommitted_at_kills), uncommitted_at_kills  # every kill landed mid-work
    assert restarts == KILLS
    assert not any(alive(pid) for pid in children)
    summaries = {(s["partition"], s["offset"]): s for s in outputs_by_kind(consume_all(kafka_bootstrap, output), "message")}
    missing = sorted(set(placed) - set(summaries))
    assert not missing, f"{len(missing)} of {len(placed)} input offsets have no summary, e.g. {missing[:10]}"
    assert all(summaries[key]["succeeded"] == 1 for key in placed)


# --- faults that end the run ------------------------------------------------------------------

def test_a_killed_supervisor_takes_its_processes_with_it(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic, output = unique_name("procs-orphan-in"), unique_name("procs-orphan-out")
    create_topic(kafka_bootstrap, topic, 2)
    create_topic(kafka_bootstrap, output, 1)
    spec = WorkerSpec(kafka_bootstrap, topic, unique_name("procs-orphan"), output, max_executors=2, log_level="INFO")
    with WorkerFleet(spec, tmp_path, unique_name("knarrorphan")) as fleet:
        pod = fleet.start("pod", args=TWO)
        wait_until(lambda: all_consuming(pod), 60, "both worker processes to consume")
        children = list(pids_of(pod).values())
        pod.kill()  # SIGKILL: the supervisor can pass nothing on
        wait_until(lambda: not any(alive(pid) for pid in children), 60, "the worker processes to stop")
        stopped = [e for e in pod.log_events() if e.get("event") == "worker stopped"]
        assert len(stopped) == 2 and all(e["clean"] for e in stopped)  # each drained on the kernel's SIGTERM
    # Its scratch directory is left, held by nobody: the next supervisor to start there removes it.
    left = [str(path) for path in tmp_path.glob(f"{scratch.PREFIX}*")]
    assert len(left) == 1
    assert scratch.sweep(str(tmp_path), now=time.time() + scratch.IN_THE_MAKING + 1) == left


def test_a_process_that_exits_by_itself_stops_the_pod_with_its_reason(kafka_bootstrap: str, tmp_path: Path) -> None:
    spec = WorkerSpec(f"127.0.0.1:{free_port()}", "nowhere", unique_name("procs-down"), "nowhere-out",
                      max_executors=2, kafka_settings={"startup_timeout_seconds": 2})
    termination = tmp_path / "termination-log"
    pod = WorkerProcess("pod", spec, tmp_path, unique_name("knarrdown"), args=TWO)
    pod.env["KNARR_TERMINATION_LOG"] = str(termination)
    with WorkerFleet(spec, tmp_path, "unused") as fleet:
        fleet.workers.append(pod.start())
        assert pod.proc.wait(timeout=60) == 3  # ExitCode.UNAVAILABLE, as one worker would
    message = termination.read_text().strip()
    assert message.startswith("ServiceUnavailable: worker process "), message
    assert "127.0.0.1" in message or "broker" in message.lower(), message


def test_a_stop_whose_drains_overrun_ends_the_pod_with_their_code_and_reason(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic, output = unique_name("procs-drain-in"), unique_name("procs-drain-out")
    create_topic(kafka_bootstrap, topic, 2)
    create_topic(kafka_bootstrap, output, 1)
    spec = WorkerSpec(kafka_bootstrap, topic, unique_name("procs-drain"), output, max_executors=2,
                      drain_timeout_seconds=1, log_level="INFO")
    termination = tmp_path / "termination-log"
    pod = WorkerProcess("pod", spec, tmp_path, unique_name("knarrdrain"), args=TWO)
    pod.env["KNARR_TERMINATION_LOG"] = str(termination)
    with WorkerFleet(spec, tmp_path, "unused") as fleet:
        fleet.workers.append(pod.start())
        wait_until(lambda: all_consuming(pod), 60, "both worker processes to consume")
        for partition in (0, 1):  # a long task on each process's partition
            produce_json(kafka_bootstrap, topic, [{"request_id": f"d{partition}", "sleep": 20}], partition=partition)
        wait_until(lambda: pod.metrics().get('knarr_pool_active{process="0"}', 0) > 0
                   and pod.metrics().get('knarr_pool_active{process="1"}', 0) > 0, 30, "a task running in each process")
        assert pod.terminate() == 5  # ExitCode.DRAIN_INCOMPLETE: both drains overran their second
    message = termination.read_text().strip()
    assert message.startswith("DrainIncomplete: worker process(es) 0, 1: in-flight work did not finish within"), message


def test_a_stopped_process_fails_the_pods_liveness_until_it_runs_again(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic, output = unique_name("procs-stop-in"), unique_name("procs-stop-out")
    create_topic(kafka_bootstrap, topic, 2)
    create_topic(kafka_bootstrap, output, 1)
    spec = WorkerSpec(kafka_bootstrap, topic, unique_name("procs-stop"), output, max_executors=2, log_level="INFO",
                      session_timeout_ms=60_000, heartbeat_interval_ms=1_000)
    with WorkerFleet(spec, tmp_path, unique_name("knarrstop")) as fleet:
        pod = fleet.start("pod", args=TWO)
        wait_until(lambda: all_consuming(pod), 60, "both worker processes to consume")
        assert pod._get("/healthz")[0] == 200
        frozen = pids_of(pod)[1]
        os.kill(frozen, signal.SIGSTOP)
        try:
            status, body = wait_until(lambda: (a := pod._get("/healthz")) and a[0] == 503 and a, 30,
                                      "the pod's /healthz to fail")
            assert json.loads(body)["failed"].startswith(f"worker process 1 (pid {frozen}): ")
        finally:
            os.kill(frozen, signal.SIGCONT)
        wait_until(lambda: (a := pod._get("/healthz")) and a[0] == 200, 30, "the pod's /healthz to pass again")
        assert pod.terminate() == 0
