"""Two `knarr run` processes in one consumer group: partitions move while work is in flight.

One scenario runs once for the module: worker A consumes a 4-partition topic alone; worker B
joins midway (a cooperative rebalance takes two partitions from A, which drains them first);
later A gets SIGTERM, drains the rest and leaves, and B takes over everything. Tasks sleep
50 ms, so every handoff happens with tasks running. The tests check one consequence each.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.services.kafka import (
    Message,
    committed_offsets,
    consume_all,
    create_topic,
    end_offsets,
    produce_json,
    unique_name,
)
from tests.worker.procs import WorkerFleet, WorkerSpec, caught_up, outputs_by_kind, wait_until

pytestmark = pytest.mark.kafka

PARTITIONS = 4
MESSAGES = 1200
TASK_SLEEP_S = 0.05


@dataclass
class RebalanceRun:
    inputs: dict[tuple[int, int], dict] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    exits: dict[str, int] = field(default_factory=dict)
    uncommitted_when_b_joined: int = 0
    uncommitted_when_a_stopped: int = 0
    a_partitions_after_b_joined: str = ""
    committed: dict[int, int] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)
    outputs: list[Message] = field(default_factory=list)

    def summaries_by_worker(self) -> dict[str, list[dict]]:
        names = {pid: name for name, pid in self.pids.items()}
        out: dict[str, list[dict]] = defaultdict(list)
        for summary in outputs_by_kind(self.outputs, "message"):
            out[names[summary["worker"]]].append(summary)
        return out



@pytest.fixture(scope="module")
def rebalance_run(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> RebalanceRun:
    topic, output, group = unique_name("rebalance-in"), unique_name("rebalance-out"), unique_name("rebalance-group")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    create_topic(kafka_bootstrap, output, 1)
    spec = WorkerSpec(kafka_bootstrap, topic, group, output, max_executors=4, window_size=20, max_poll_records=50)
    run = RebalanceRun()
    workdir: Path = tmp_path_factory.mktemp("rebalance")

    def uncommitted() -> int:
        return len(run.inputs) - sum(committed_offsets(kafka_bootstrap, group, topic).values())

    with WorkerFleet(spec, workdir, unique_name("knarrrebalance")) as fleet:
        a = fleet.start("a")
        run.pids["a"] = a.pid
        a.wait_consuming()
        records = [{"request_id": f"r{i}", "sleep": TASK_SLEEP_S} for i in range(MESSAGES)]
        placed = produce_json(kafka_bootstrap, topic, records, key_fn=lambda r: r["request_id"])
        run.inputs = dict(zip(placed, records))
        wait_until(lambda: uncommitted() <= MESSAGES - 150, 60, "worker A to commit its first 150 messages")

        b = fleet.start("b")
        run.pids["b"] = b.pid
        b.wait_consuming()
        run.uncommitted_when_b_joined = uncommitted()
        run.a_partitions_after_b_joined = wait_until(
            lambda: (r := a.readiness()) and r == "consuming 2 partition(s)" and r, 30, "A to hand two partitions to B",
        )
        wait_until(lambda: uncommitted() <= MESSAGES // 2, 60, "half of the messages to be committed")

        run.uncommitted_when_a_stopped = uncommitted()
        run.exits["a"] = a.terminate()
        wait_until(lambda: b.readiness() == "consuming 4 partition(s)", 60, "B to take over all four partitions")
        run.ends = end_offsets(kafka_bootstrap, topic)
        run.committed = wait_until(
            lambda: (c := committed_offsets(kafka_bootstrap, group, topic)) and caught_up(c, run.ends) and c,
            90, "B to commit the end of every partition",
        )
        run.exits["b"] = b.terminate()

    run.outputs = consume_all(kafka_bootstrap, output)
    return run


def test_partitions_move_while_tasks_are_in_flight(rebalance_run: RebalanceRun) -> None:
    assert rebalance_run.a_partitions_after_b_joined == "consuming 2 partition(s)"
    assert rebalance_run.uncommitted_when_b_joined > 0
    assert rebalance_run.uncommitted_when_a_stopped > 0
    by_worker = rebalance_run.summaries_by_worker()
    assert by_worker["a"] and by_worker["b"]


def test_every_input_offset_produces_output_across_both_handoffs(rebalance_run: RebalanceRun) -> None:
    seen = {(s["partition"], s["offset"]): s for s in outputs_by_kind(rebalance_run.outputs, "message")}

    missing = sorted(set(rebalance_run.inputs) - set(seen))
    assert not missing, f"{len(missing)} input offsets have no output, e.g. {missing[:10]}"
    for key, request in rebalance_run.inputs.items():
        assert seen[key]["request_id"] == request["request_id"]
        assert seen[key]["succeeded"] == 1


def test_a_drained_handoff_replays_nothing(rebalance_run: RebalanceRun) -> None:
    # A revoked partition is drained and committed before it moves, so its new owner starts
    # exactly where the old one stopped: no offset is processed twice.
    counts = Counter((s["partition"], s["offset"]) for s in outputs_by_kind(rebalance_run.outputs, "message"))
    duplicates = {key: n for key, n in counts.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} offsets processed more than once, e.g. {sorted(duplicates)[:10]}"

    by_worker = rebalance_run.summaries_by_worker()
    for partition in range(PARTITIONS):
        a_offsets = [s["offset"] for s in by_worker["a"] if s["partition"] == partition]
        b_offsets = [s["offset"] for s in by_worker["b"] if s["partition"] == partition]
        if a_offsets and b_offsets:
            assert max(a_offsets) < min(b_offsets), f"partition {partition}: A and B overlap"


def test_both_workers_drain_on_sigterm_and_exit_zero(rebalance_run: RebalanceRun) -> None:
    assert rebalance_run.exits == {"a": 0, "b": 0}
    assert caught_up(rebalance_run.committed, rebalance_run.ends)
    assert sum(rebalance_run.ends.values()) == MESSAGES
