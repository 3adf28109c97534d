"""librdkafka clients against a slow broker: nothing knarr creates may take the process down.

The broker is this session's private one (tests.services.kafka.PrivateBroker), stopped with
SIGSTOP for 0.35 s and continued for 0.4 s, over and over: to a client it looks like a
broker under heavy load, requests timing out half-way. A client destroyed at the wrong
moment under such a broker aborts the process (knarr.kafka.clients says why), so the
clients run in a child process and the test reads how it ended.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.services.kafka import (
    PrivateBroker,
    committed_offsets,
    consume_all,
    create_topic,
    end_offsets,
    produce_json,
    unique_name,
)
from tests.worker.procs import WorkerFleet, WorkerSpec, caught_up, outputs_by_kind, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

LAG_STRESS = Path(__file__).resolve().parents[1] / "programs" / "lag_stress.py"
FLAP_SECONDS = 45


def _ended(code: int) -> str:
    return f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"


def test_the_operators_lag_readers_survive_a_slow_broker_under_concurrent_reads(private_kafka: PrivateBroker) -> None:
    bootstrap = private_kafka.bootstrap
    topic, group = unique_name("lag-stress"), unique_name("lag-stress-group")
    create_topic(bootstrap, topic, partitions=3)
    produce_json(bootstrap, topic, [{"i": i} for i in range(30)], key_fn=lambda r: str(r["i"]))

    with private_kafka.flapping():
        child = subprocess.run([sys.executable, "-X", "faulthandler", str(LAG_STRESS), bootstrap, group, topic,
                                str(FLAP_SECONDS)], capture_output=True, text=True, timeout=FLAP_SECONDS + 90)

    assert child.returncode == 0, f"lag readers {_ended(child.returncode)}:\n{child.stderr[-4000:]}"
    summary = json.loads(child.stdout.strip().splitlines()[-1])
    assert summary["unreachable"] > 0, f"the broker never looked slow to the readers: {summary}"
    assert summary["ok"] > 0, f"no read succeeded between the stops: {summary}"
    assert (summary["final_lag"], summary["partitions"]) == (30, 3)


@pytest.mark.parametrize("static", [False, True], ids=["dynamic member", "static member looking at its group"])
def test_a_worker_keeps_its_clients_through_a_slow_broker_and_loses_nothing(private_kafka: PrivateBroker, tmp_path: Path,
                                                                            static: bool) -> None:
    # A static member also looks at its group every second (admin requests to the group's coordinator,
    # answered late while the broker is stopped): nothing it leaves in flight may abort the process, and
    # no look may mistake the slow broker for partitions without an owner.
    bootstrap = private_kafka.bootstrap
    topic, output = unique_name("slow-in"), unique_name("slow-out")
    create_topic(bootstrap, topic, partitions=3)
    create_topic(bootstrap, output, partitions=1)
    requests = [{"request_id": f"r{i}", "fanout": 2 if i % 5 == 0 else 1, "sleep": 0.02} for i in range(600)]
    produce_json(bootstrap, topic, requests, key_fn=lambda r: r["request_id"])
    ends = end_offsets(bootstrap, topic)
    spec = WorkerSpec(bootstrap, topic, unique_name("slow-group"), output, max_executors=2, window_size=10,
                      max_poll_records=20, session_timeout_ms=30_000, heartbeat_interval_ms=3_000, log_level="INFO",
                      kafka_extra={"group.instance.id": unique_name("slow-static")} if static else {},
                      kafka_settings={"ownership_check_seconds": 1} if static else {})

    with WorkerFleet(spec, tmp_path, unique_name("knarrslow")) as fleet:
        worker = fleet.start("w1")
        worker.wait_consuming()
        with private_kafka.flapping():
            deadline_passed = _wait_or_die(worker, FLAP_SECONDS)
        assert deadline_passed, f"worker {_ended(worker.proc.returncode)} while the broker was slow:\n{worker.log_tail()}"
        wait_until(lambda: caught_up(committed_offsets(bootstrap, spec.group, topic), ends), 120,
                   "the group's commits to reach the end of the topic")
        assert worker.terminate() == 0
        assert worker.rejoins() == []

    summaries = outputs_by_kind(consume_all(bootstrap, output), "message")
    assert {s["request_id"] for s in summaries} == {r["request_id"] for r in requests}
    assert all(s["succeeded"] == s["tasks"] for s in summaries), "a task failed because the broker was slow"


def _wait_or_die(worker, seconds: float) -> bool:
    """True if the worker is still alive after ``seconds``; False as soon as it dies."""
    try:
        worker.proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return True
    return False

