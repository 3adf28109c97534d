"""The at-least-once promise under SIGKILL: a worker killed at random moments loses nothing.

One scenario runs once for the module (it takes about a minute): a `knarr run` process on a
3-partition topic is SIGKILLed 20 times at seeded random moments while it works and is
restarted each time (before each start the topic is topped up so that BACKLOG messages wait
uncommitted, more than the worker gets through before its kill, so every kill lands mid-work);
then it is left to finish and stopped with SIGTERM once the group's committed offsets reach the
end of the topic. The tests below each check one consequence of that run.

The scenario runs twice: with a process spawned per task, and with persistent executors
(tests/programs/behave_persistent.py, a long-lived program per pool slot that the kills take
down mid-task along with the worker).

The worker uses static group membership (``group.instance.id``), as a StatefulSet pod
would: the restarted process takes over its dead predecessor's partitions at once instead
of waiting out the session timeout, so twenty restarts fit in a test run.
"""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
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
from tests.worker.procs import WorkerFleet, WorkerSpec, caught_up, outputs_by_kind, processes_gone, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SEED = 20240611
CYCLES = 20
MIN_PER_CYCLE = 250  # produced before each start, at least ...
# ... and enough to leave this many uncommitted: more than one worker gets through before its kill
# (a persistent program runs tiny tasks several times faster than spawning them, so it gets more).
# A clean-clone run drained 2,000 in spawn mode before one kill (0 uncommitted at it, 650-1,573 at the others).
BACKLOG = {"spawn": 6_000, "persistent": 40_000}
KILL_DELAY_S = (0.3, 1.5)  # after the worker reports its partitions assigned
FANOUT_EVERY = 10  # every 10th request fans out to 3 tasks
PARTITIONS = 3
BEHAVE_PERSISTENT = Path(__file__).resolve().parents[1] / "programs" / "behave_persistent.py"


@dataclass
class CrashRun:
    spec: WorkerSpec
    inputs: dict[tuple[int, int], dict] = field(default_factory=dict)  # (partition, offset) -> request
    kill_delays: list[float] = field(default_factory=list)
    uncommitted_at_kill: list[int] = field(default_factory=list)  # produced minus committed, right after each kill
    final_exit: int | None = None
    committed: dict[int, int] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)
    outputs: list[Message] = field(default_factory=list)
    marker: str = ""

    @property
    def duplicate_bound_per_kill(self) -> int:
        """What one kill can replay: the in-flight work backpressure allows, plus one poll batch, and the
        tasks awaiting the sink's confirmation."""
        return self.spec.backpressure_high + self.spec.max_poll_records + self.spec.delivery_high



def _requests(start: int, count: int) -> list[dict]:
    return [{"request_id": f"r{i}", "fanout": 3 if i % FANOUT_EVERY == 0 else 1} for i in range(start, start + count)]


@pytest.fixture(scope="module", params=["spawn", "persistent"])
def crash_run(request: pytest.FixtureRequest, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> CrashRun:
    topic, output = unique_name("crash-in"), unique_name("crash-out")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    create_topic(kafka_bootstrap, output, 1)
    marker = unique_name("knarrcrash")
    spec = WorkerSpec(
        kafka_bootstrap, topic, unique_name("crash-group"), output,
        max_executors=4, window_size=50, max_poll_records=50,
        backpressure_high_multiplier=16, backpressure_low_multiplier=4,
        kafka_extra={"group.instance.id": f"{marker}-worker"},
        # The marker in the program's command line: the last test finds leftovers by it.
        executor_extra={"persistent": {"command": [sys.executable, str(BEHAVE_PERSISTENT), f"tag={marker}"]}}
        if request.param == "persistent" else {},
    )
    run = CrashRun(spec=spec, marker=marker)
    rng = random.Random(SEED)
    workdir: Path = tmp_path_factory.mktemp("crash")

    def uncommitted() -> int:
        return len(run.inputs) - sum(committed_offsets(kafka_bootstrap, spec.group, topic).values())

    def top_up() -> None:
        records = _requests(len(run.inputs), max(MIN_PER_CYCLE, BACKLOG[request.param] - uncommitted()))
        placed = produce_json(kafka_bootstrap, topic, records, key_fn=lambda r: r["request_id"])
        run.inputs.update(zip(placed, records))

    with WorkerFleet(spec, workdir, marker) as fleet:
        for cycle in range(CYCLES):
            top_up()
            worker = fleet.start(f"cycle{cycle:02d}")
            worker.wait_consuming(timeout=60)
            delay = rng.uniform(*KILL_DELAY_S)
            run.kill_delays.append(delay)
            time.sleep(delay)  # the fault's timing, not synchronisation: kill whatever is in flight then
            assert worker.alive(), f"worker died before its kill:\n{worker.log_tail()}"
            worker.kill()
            run.uncommitted_at_kill.append(uncommitted())

        final = fleet.start("final")
        final.wait_consuming(timeout=60)
        run.ends = end_offsets(kafka_bootstrap, topic)
        run.committed = wait_until(
            lambda: (c := committed_offsets(kafka_bootstrap, spec.group, topic)) and caught_up(c, run.ends) and c,
            timeout=180, what="the final worker to commit the end of every partition",
        )
        run.final_exit = final.terminate()

    run.outputs = consume_all(kafka_bootstrap, output)
    return run


def test_every_kill_lands_while_work_is_uncommitted(crash_run: CrashRun) -> None:
    # Otherwise the scenario would prove nothing: a worker killed while idle loses nothing anyway.
    print(f"\nuncommitted messages at each kill: {crash_run.uncommitted_at_kill}")
    assert len(crash_run.uncommitted_at_kill) == CYCLES
    assert all(n > 0 for n in crash_run.uncommitted_at_kill)


def test_every_input_offset_produces_a_complete_summary(crash_run: CrashRun) -> None:
    summaries = outputs_by_kind(crash_run.outputs, "message")
    seen = {(s["partition"], s["offset"]): s for s in summaries}

    missing = sorted(set(crash_run.inputs) - set(seen))
    assert not missing, f"{len(missing)} input offsets have no output, e.g. {missing[:10]}"
    for (partition, offset), request in crash_run.inputs.items():
        summary = seen[(partition, offset)]
        assert summary["request_id"] == request["request_id"]
        assert summary["tasks"] == summary["succeeded"] == request["fanout"]
        expected = [f"{partition}:{offset}:{request['request_id']}:{i}" for i in range(request["fanout"])]
        assert summary["stdout"] == expected


def test_every_task_of_a_fanned_out_request_produces_output(crash_run: CrashRun) -> None:
    fanned = {key: r for key, r in crash_run.inputs.items() if r["fanout"] > 1}
    outputs = {(t["partition"], t["offset"], t["task"]) for t in outputs_by_kind(crash_run.outputs, "task")}

    wanted = {(p, o, i) for (p, o), r in fanned.items() for i in range(r["fanout"])}
    assert fanned, "the scenario should include fan-out requests"
    assert not wanted - outputs, f"fan-out tasks without output, e.g. {sorted(wanted - outputs)[:10]}"


def test_duplicates_stay_within_what_each_kill_had_in_flight(crash_run: CrashRun) -> None:
    summaries = outputs_by_kind(crash_run.outputs, "message")
    counts = Counter((s["partition"], s["offset"]) for s in summaries)
    duplicates = sum(n - 1 for n in counts.values())
    bound = CYCLES * crash_run.duplicate_bound_per_kill

    print(f"\n{CYCLES} SIGKILL cycles over {len(crash_run.inputs)} messages: {duplicates} duplicate summaries "
          f"({len(summaries)} outputs), bound {bound} ({crash_run.duplicate_bound_per_kill} per kill); "
          f"kill delays {min(crash_run.kill_delays):.2f}-{max(crash_run.kill_delays):.2f}s")
    assert duplicates <= bound


def test_the_final_worker_drains_commits_the_end_and_exits_zero(crash_run: CrashRun) -> None:
    assert crash_run.final_exit == 0
    assert caught_up(crash_run.committed, crash_run.ends)
    assert sum(crash_run.ends.values()) == len(crash_run.inputs) >= 5_000


def test_no_task_subprocess_outlives_the_run(crash_run: CrashRun) -> None:
    # Killed workers orphan their running tasks; those are short and must all be gone.
    assert processes_gone(crash_run.marker, timeout=15) == []
