"""Static membership: partitions a member killed mid-rebalance leaves without an owner are handed out again.

The fault, made on the real broker: a plain static member owns all four partitions; a knarr
worker (static too) joins, so the cooperative rebalance's first phase takes two partitions from
the member, which stops inside its revocation and is killed there with SIGKILL. Its static
successor rejoins within the session and gets the assignment the group kept for it: the group
is stable, and the two partitions given up have no owner, with nothing asking for the rebalance
that would hand them out. The worker sees them unowned in its looks at the group
(kafka.ownership_check_seconds) for longer than a rebalance takes, rejoins, and consumes them.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.services.jsonl import written_lines
from tests.services.kafka import (
    committed_offsets,
    consume_all,
    create_topic,
    end_offsets,
    group_assignment,
    produce_json,
    unique_name,
)
from tests.worker.procs import WorkerFleet, WorkerProcess, WorkerSpec, caught_up, outputs_by_kind, wait_until

pytestmark = pytest.mark.kafka

MEMBER_PROGRAM = Path(__file__).resolve().parents[1] / "programs" / "static_member.py"
PARTITIONS = 4
CHECK_SECONDS = 1.0
SESSION_MS = 6_000
DRAIN_SECONDS = 2.0  # the worker's revoke wait is this + 10 s, so the grace is 13 s
UNHEALED_WAIT_SECONDS = 26.0


class Member:
    """tests/programs/static_member.py as a process, and the rebalance callbacks it wrote down."""

    def __init__(self, bootstrap: str, group: str, topic: str, instance: str, events: Path, block: bool) -> None:
        self.events = events
        argv = [sys.executable, str(MEMBER_PROGRAM), bootstrap, group, topic, instance, str(events)]
        self.proc = subprocess.Popen([*argv, *(["--block-on-revoke"] if block else [])], stdin=subprocess.DEVNULL)

    def seen(self) -> list[dict[str, list[int]]]:
        return written_lines(self.events)  # (the member appends to it meanwhile)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@dataclass
class Stranded:
    """The fault, made: the worker, the partitions without an owner, and the messages produced on them since."""

    worker: WorkerProcess
    given_up: list[int]
    on_stranded: set[tuple[int, int]]  # (partition, offset)
    bootstrap: str
    group: str
    output: str

    def consumed(self) -> set[tuple[int, int]]:
        """The messages on the stranded partitions the worker has produced output for."""
        outputs = outputs_by_kind(consume_all(self.bootstrap, self.output, timeout=5), "message")
        return self.on_stranded & {(s["partition"], s["offset"]) for s in outputs}


@contextmanager
def stranded_partitions(bootstrap: str, tmp_path: Path, check_seconds: float) -> Iterator[Stranded]:
    topic, output, group = unique_name("static-in"), unique_name("static-out"), unique_name("static-group")
    create_topic(bootstrap, topic, PARTITIONS)
    create_topic(bootstrap, output, 1)
    member_id, worker_id = unique_name("member"), unique_name("worker")
    spec = WorkerSpec(bootstrap, topic, group, output, max_executors=2, window_size=10,
                      session_timeout_ms=SESSION_MS, drain_timeout_seconds=DRAIN_SECONDS, log_level="INFO",
                      kafka_extra={"group.instance.id": worker_id},
                      kafka_settings={"ownership_check_seconds": check_seconds})
    first = Member(bootstrap, group, topic, member_id, tmp_path / "first.jsonl", block=True)
    successor = None
    try:
        wait_until(lambda: {"assigned": list(range(PARTITIONS))} in first.seen(), 60, "the member to own every partition")
        with WorkerFleet(spec, tmp_path, unique_name("knarrstatic")) as fleet:
            worker = fleet.start("w")
            given_up = wait_until(lambda: next((e["revoked"] for e in first.seen() if e.get("revoked")), None), 60,
                                  "the worker's join to take partitions from the member")
            first.stop()  # SIGKILL inside the revocation, before it asks for the second phase
            successor = Member(bootstrap, group, topic, member_id, tmp_path / "successor.jsonl", block=False)
            kept = sorted(set(range(PARTITIONS)) - set(given_up))
            wait_until(lambda: {"assigned": kept} in successor.seen(), 30, "the successor to get the kept assignment")

            # The fault is there: a stable group in which the partitions given up have no owner.
            stable, owners = group_assignment(bootstrap, group)
            assert stable and owners == {member_id: kept, worker_id: []}, owners

            requests = [{"request_id": f"r{i}", "sleep": 0} for i in range(40)]
            placed = produce_json(bootstrap, topic, requests, key_fn=lambda r: r["request_id"])
            on_stranded = {at for at in placed if at[0] in given_up}
            assert on_stranded, "no message landed on the stranded partitions"
            yield Stranded(worker, given_up, on_stranded, bootstrap, group, output)
    finally:
        first.stop()
        if successor is not None:
            successor.stop()


def test_partitions_a_static_member_left_unowned_mid_rebalance_are_handed_out_again(kafka_bootstrap: str, tmp_path: Path) -> None:
    with stranded_partitions(kafka_bootstrap, tmp_path, CHECK_SECONDS) as stranded:
        wait_until(lambda: stranded.consumed() == stranded.on_stranded, 90,
                   "the worker to consume the partitions left without an owner", interval=2)
        stable, owners = group_assignment(kafka_bootstrap, stranded.group)
        assert sorted(p for ps in owners.values() for p in ps) == list(range(PARTITIONS)), owners

        rejoins = stranded.worker.rejoins()
        assert len(rejoins) == 1 and rejoins[0]["partitions"] == sorted(stranded.given_up), rejoins
        assert stranded.worker.metrics().get("knarr_group_rejoins_total") == 1.0
        assert stranded.worker.terminate() == 0


def test_without_the_looks_those_partitions_stay_unowned(kafka_bootstrap: str, tmp_path: Path) -> None:
    # What the looks are for: nothing else hands the partitions out, however long the group waits.
    with stranded_partitions(kafka_bootstrap, tmp_path, check_seconds=0) as stranded:
        time.sleep(UNHEALED_WAIT_SECONDS)  # twice the grace the looks would have given them
        stable, owners = group_assignment(kafka_bootstrap, stranded.group)
        assert stable and not set(stranded.given_up) & {p for ps in owners.values() for p in ps}, owners
        assert stranded.consumed() == set() and stranded.worker.rejoins() == []
        assert stranded.worker.terminate() == 0


def test_a_worker_killed_mid_rebalance_restarts_and_no_partition_is_left_without_an_owner(kafka_bootstrap: str, tmp_path: Path) -> None:
    # The same fault with two knarr workers, as in a pod of two whose process is killed: worker A drains the
    # partitions B's join took from it, A is killed mid-drain and started again under its static id.
    topic, output, group = unique_name("static-pair-in"), unique_name("static-pair-out"), unique_name("static-pair")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    create_topic(kafka_bootstrap, output, 1)

    def spec(static_id: str) -> WorkerSpec:
        return WorkerSpec(kafka_bootstrap, topic, group, output, max_executors=4, window_size=4, max_poll_records=8,
                          session_timeout_ms=SESSION_MS, drain_timeout_seconds=DRAIN_SECONDS, log_level="INFO",
                          kafka_extra={"group.instance.id": static_id},
                          kafka_settings={"ownership_check_seconds": CHECK_SECONDS})

    requests = [{"request_id": f"r{i}", "sleep": 1.0} for i in range(80)]
    placed = produce_json(kafka_bootstrap, topic, requests, key_fn=lambda r: r["request_id"])
    ends = end_offsets(kafka_bootstrap, topic)
    a_spec, b_spec = spec(unique_name("a")), spec(unique_name("b"))
    with WorkerFleet(a_spec, tmp_path, unique_name("knarrstaticpair")) as fleet:
        a = fleet.start("a")
        a.wait_consuming()
        wait_until(lambda: committed_offsets(kafka_bootstrap, group, topic), 60, "A to commit its first messages")
        b = fleet.start("b", b_spec)

        def draining() -> list[int] | None:
            return next((e["partitions"] for e in a.log_events() if e.get("event") == "partitions revoked; draining"), None)

        given_up = wait_until(draining, 60, "B's join to take partitions from A", interval=0.05)
        a.kill()  # mid-drain: the second phase was A's to ask for
        a2 = fleet.start("a2", a_spec)
        a2.wait_consuming()
        stable, owners = group_assignment(kafka_bootstrap, group)
        assert stable and not set(given_up) & {p for ps in owners.values() for p in ps}, (given_up, owners)

        wait_until(lambda: caught_up(committed_offsets(kafka_bootstrap, group, topic), ends), 120,
                   "the group to commit the end of every partition")
        rejoins = [e for w in fleet.workers for e in w.rejoins()]
        assert rejoins and all(set(e["partitions"]) == set(given_up) for e in rejoins), rejoins
        stable, owners = group_assignment(kafka_bootstrap, group)
        assert sorted(p for ps in owners.values() for p in ps) == list(range(PARTITIONS)), owners
        assert a2.terminate() == 0 and b.terminate() == 0

    summaries = outputs_by_kind(consume_all(kafka_bootstrap, output), "message")
    missing = set(placed) - {(s["partition"], s["offset"]) for s in summaries}
    assert not missing, f"{len(missing)} messages produced no output, e.g. {sorted(missing)[:5]}"
