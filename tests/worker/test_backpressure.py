"""Backpressure with a 100,000-message backlog: the worker pauses, resumes, and its memory stays flat.

One scenario runs once for the module: 100k requests are in a 3-partition topic before a
`knarr run` process starts (max_executors 4, window 100: partitions carrying their share
of the load pause once 128 messages are queued or in flight, or 256 tasks await the sink,
and resume as it drains).
While it works through the backlog the test samples the worker's RSS (/proc/<pid>/status
VmRSS) and its /metrics; knarr_backpressure_changes_total counts every hold and release,
and the INFO lines ("backpressure on"/"off", at most one of each per 30 s) give the load.

To get through 100k messages in about a minute on two cores, 99 of every 100 requests are
answered with a PrecomputedResult (no subprocess) and every 100th runs the behave program for
0.2 s; every request still goes through windows, groups, the watermark and the Kafka sink. The
sleeping tasks make the pool the bottleneck (4 slots at 0.2 s run 20 tasks/s, fewer than the
backlog brings), so backpressure has to engage however fast the engine handles the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.services.kafka import (
    committed_offsets,
    consume_all,
    create_topic,
    end_offsets,
    produce_json,
    unique_name,
)
from tests.worker.procs import WorkerFleet, WorkerSpec, outputs_by_kind, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MESSAGES = 100_000
PARTITIONS = 3
SUBPROCESS_EVERY = 100
SUBPROCESS_SLEEP_S = 0.2
SAMPLE_EVERY_S = 0.25
EARLY, LATE = 20_000, 80_000  # RSS is compared after this many messages completed
RSS_CEILING_KB = 300 * 1024
RSS_GROWTH_MARGIN_KB = 40 * 1024


@dataclass
class Sample:
    seconds: float
    completed: int
    rss_kb: int
    paused: float | None


@dataclass
class BacklogRun:
    spec: WorkerSpec
    backlog_at_start: int = 0
    samples: list[Sample] = field(default_factory=list)
    pauses: list[int] = field(default_factory=list)  # total load at each logged "backpressure on"
    resumes: list[int] = field(default_factory=list)  # total load at each logged "backpressure off"
    pause_deliveries: list[int] = field(default_factory=list)  # tasks awaiting the sink at each "backpressure on"
    deliveries: list[int] = field(default_factory=list)  # ... at each logged change
    holds: float = 0  # knarr_backpressure_changes_total{change="hold"} at the end
    releases: float = 0
    exit_code: int | None = None
    committed: dict[int, int] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)
    distinct_outputs: int = 0
    final_backpressure: float | None = None  # the gauge once every offset was committed

    def rss_after(self, completed: int) -> int:
        return next(s.rss_kb for s in self.samples if s.completed >= completed)

    def peak_rss_between(self, start: int, end: int) -> int:
        return max(s.rss_kb for s in self.samples if start <= s.completed < end)


def _completed(metrics: dict[str, float]) -> int:
    return int(sum(v for k, v in metrics.items() if k.startswith("knarr_messages_completed_total{")))


@pytest.fixture(scope="module")
def backlog_run(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> BacklogRun:
    topic, output, group = unique_name("backlog-in"), unique_name("backlog-out"), unique_name("backlog-group")
    create_topic(kafka_bootstrap, topic, PARTITIONS)
    create_topic(kafka_bootstrap, output, 1)
    records = ({"request_id": f"r{i}", "precomputed": i % SUBPROCESS_EVERY != 0, "sleep": SUBPROCESS_SLEEP_S}
               for i in range(MESSAGES))
    produce_json(kafka_bootstrap, topic, records, key_fn=lambda r: r["request_id"])
    spec = WorkerSpec(kafka_bootstrap, topic, group, output, max_executors=4, window_size=100,
                      max_poll_records=100, log_level="INFO")
    run = BacklogRun(spec=spec)
    run.ends = end_offsets(kafka_bootstrap, topic)
    run.backlog_at_start = sum(run.ends.values()) - sum(committed_offsets(kafka_bootstrap, group, topic).values())
    workdir: Path = tmp_path_factory.mktemp("backlog")

    with WorkerFleet(spec, workdir, unique_name("knarrbacklog")) as fleet:
        worker = fleet.start("worker")
        started = time.monotonic()
        deadline = started + 240
        while True:
            rss, metrics = worker.rss_kb(), worker.metrics()
            assert rss is not None and worker.alive(), f"worker exited:\n{worker.log_tail()}"
            if metrics:
                sample = Sample(time.monotonic() - started, _completed(metrics), rss,
                                metrics.get("knarr_backpressure_active"))
                run.samples.append(sample)
                if sample.completed >= MESSAGES:
                    break
            assert time.monotonic() < deadline, f"backlog not done in 240s: {run.samples[-1:]}"
            time.sleep(SAMPLE_EVERY_S)  # sampling period, bounded by the deadline

        run.committed = wait_until(
            lambda: (c := committed_offsets(kafka_bootstrap, group, topic)) and c == run.ends and c,
            60, "the worker to commit the end of every partition",
        )
        final = worker.metrics()
        run.final_backpressure = final.get("knarr_backpressure_active")
        run.holds = final.get('knarr_backpressure_changes_total{change="hold"}', 0)
        run.releases = final.get('knarr_backpressure_changes_total{change="release"}', 0)
        run.exit_code = worker.terminate()
        for event in worker.log_events():
            if event.get("event", "").startswith("backpressure on"):
                run.pauses.append(event["load"])
                run.pause_deliveries.append(event["delivering"])
                run.deliveries.append(event["delivering"])
            elif event.get("event", "").startswith("backpressure off"):
                run.resumes.append(event["load"])
                run.deliveries.append(event["delivering"])

    summaries = outputs_by_kind(consume_all(kafka_bootstrap, output, timeout=120), "message")
    run.distinct_outputs = len({(s["partition"], s["offset"]) for s in summaries})
    print(f"\nbacklog {run.backlog_at_start} done in {run.samples[-1].seconds:.1f}s; "
          f"RSS when /metrics first answered {run.samples[0].rss_kb} kB; "
          f"{run.holds:.0f} holds, {run.releases:.0f} releases ({len(run.pauses)} + {len(run.resumes)} logged); RSS max {max(s.rss_kb for s in run.samples)} kB, "
          f"after {EARLY}: {run.rss_after(EARLY)} kB, after {LATE}: {run.rss_after(LATE)} kB")
    print("RSS MB by 10k completed: " + " ".join(
        f"{k // 1000}k:{run.rss_after(k) // 1024}/{run.peak_rss_between(k, k + 10_000) // 1024}"
        for k in range(0, MESSAGES, 10_000)))
    return run


def test_the_worker_starts_behind_a_full_backlog(backlog_run: BacklogRun) -> None:
    assert backlog_run.backlog_at_start == MESSAGES


def test_consumption_pauses_and_resumes_again_and_again(backlog_run: BacklogRun) -> None:
    assert backlog_run.holds >= 10
    assert backlog_run.releases >= 10
    # Holds last ~100 ms here, shorter than the sampling period, so the counter counts the
    # toggles; the gauge must be off once the backlog is done (tests/worker/
    # test_flow_control.py watches it switch on during a long fan-out flood).
    assert backlog_run.final_backpressure == 0.0, "knarr_backpressure_active stayed on after the backlog"


def test_the_toggles_do_not_flood_the_info_log(backlog_run: BacklogRun) -> None:
    seconds = backlog_run.samples[-1].seconds
    allowed = 1 + int(seconds // 30)  # one line per kind per 30 s
    assert len(backlog_run.pauses) <= allowed + 1 and len(backlog_run.resumes) <= allowed + 1
    assert backlog_run.holds > len(backlog_run.pauses)


def test_pausing_starts_only_at_a_high_watermark(backlog_run: BacklogRun) -> None:
    # The work's (queued + in flight), or the deliveries' (tasks whose outputs await the sink).
    spec = backlog_run.spec
    for load, delivering in zip(backlog_run.pauses, backlog_run.pause_deliveries, strict=True):
        assert load >= spec.backpressure_high or delivering >= spec.delivery_high, (load, delivering)


def test_held_messages_stay_within_a_bound_set_by_the_config_not_the_backlog(backlog_run: BacklogRun) -> None:
    # Partitions below their share keep flowing while others are paused, so each may add up
    # to one poll batch past the high watermark before it is paused too.
    spec = backlog_run.spec
    bound = spec.backpressure_high + PARTITIONS * spec.max_poll_records
    assert max(backlog_run.pauses + backlog_run.resumes) <= bound
    # What awaits the sink stays under its own high watermark, plus the work that was in flight then.
    assert max(backlog_run.deliveries) <= spec.delivery_high + bound


def test_rss_stays_under_a_fixed_ceiling(backlog_run: BacklogRun) -> None:
    assert max(s.rss_kb for s in backlog_run.samples) < RSS_CEILING_KB


def test_rss_does_not_grow_with_the_messages_processed(backlog_run: BacklogRun) -> None:
    # The worker's footprint climbs while it warms up (allocator arenas, client buffers) and
    # then levels off; memory that scaled with the backlog would keep climbing through the
    # second half. Peaks, not single samples, because RSS moves by tens of MB between samples.
    first = backlog_run.peak_rss_between(0, MESSAGES // 2)
    second = backlog_run.peak_rss_between(MESSAGES // 2, MESSAGES + 1)
    assert second - first < RSS_GROWTH_MARGIN_KB, (
        f"peak RSS {first} kB in the first half, {second} kB in the second; "
        f"after {EARLY}: {backlog_run.rss_after(EARLY)} kB, after {LATE}: {backlog_run.rss_after(LATE)} kB"
    )


def test_the_whole_backlog_is_delivered_and_committed(backlog_run: BacklogRun) -> None:
    assert backlog_run.exit_code == 0
    assert backlog_run.committed == backlog_run.ends
    assert backlog_run.distinct_outputs == MESSAGES
