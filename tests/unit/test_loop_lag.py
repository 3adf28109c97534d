"""The event loop's lag: measured by a periodic probe, exported as a histogram, a stall logged as a warning."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import knarr
import structlog
from knarr.engine.worker import Worker
from knarr.observability.cpu_wait import ThreadCpuWait, starved_part
from knarr.observability.loop_lag import STALL_WARNING_SECONDS, LoopLagProbe, stall_message
from knarr.sources.memory import MemorySource
from prometheus_client import REGISTRY

from tests.worker.harness import BEHAVE, local_config


def _lag(sample: str) -> float:
    return REGISTRY.get_sample_value(f"knarr_event_loop_lag_seconds_{sample}") or 0.0


async def test_a_blocked_loop_shows_in_the_lag_histogram():
    probe = LoopLagProbe(interval=0.01, stall_seconds=10)
    probe.samples = []
    count, total, over_100ms = _lag("count"), _lag("sum"), _lag("count") - (
        REGISTRY.get_sample_value("knarr_event_loop_lag_seconds_bucket", {"le": "0.1"}) or 0.0)
    watching = asyncio.create_task(probe.run())
    await asyncio.sleep(0.05)
    time.sleep(0.3)  # block the loop, as a synchronous call in a hook would
    await asyncio.sleep(0.05)
    watching.cancel()
    assert _lag("count") > count + 3
    assert _lag("sum") - total >= 0.25
    assert max(probe.samples) >= 0.25
    over_now = _lag("count") - REGISTRY.get_sample_value("knarr_event_loop_lag_seconds_bucket", {"le": "0.1"})
    assert over_now >= over_100ms + 1  # the probe due during the block ran more than 100 ms late


async def test_an_idle_loop_lags_by_little():
    probe = LoopLagProbe(interval=0.01, stall_seconds=10)
    probe.samples = []
    watching = asyncio.create_task(probe.run())
    await asyncio.sleep(0.3)
    watching.cancel()
    assert len(probe.samples) >= 5
    assert sorted(probe.samples)[len(probe.samples) // 2] < 0.1  # generous: the test machine is shared


class BlockingArrange(knarr.BaseHandler[None, None]):
    """arrange() blocks the event loop with a synchronous sleep on its first window."""

    def __init__(self) -> None:
        self.blocked = False

    async def arrange(self, messages, pending):
        if not self.blocked:
            self.blocked = True
            time.sleep(0.6)
        return [knarr.ExecutorTask(args=["out=ok"], source_offsets=[m.offset]) for m in messages]


async def test_a_hook_that_blocks_the_loop_is_reported_once_as_a_stall_naming_the_lag(tmp_path, capsys):
    config = local_config(tmp_path, log_format="json", binary_path=BEHAVE, max_executors=2, window_size=5)
    handler = BlockingArrange()
    messages = [knarr.SourceMessage(topic="t", partition=0, offset=o, value=b"{}") for o in range(20)]
    worker = Worker(config, handler, source=MemorySource(messages))
    worker.loop_lag.interval = 0.02
    saved = structlog.get_config()  # the worker logs to this test's captured stderr: later tests must not
    try:
        assert await asyncio.wait_for(worker.run(), 60) == 0
    finally:
        structlog.configure(**saved)
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines() if line.startswith("{")]
    stalls = [line for line in lines if line["event"].startswith("event loop stalled")]
    assert len(stalls) == 1, stalls
    stall = stalls[0]
    assert stall["level"] == "warning"
    assert 0.5 <= stall["lag_seconds"] < 5 and stall["threshold_seconds"] == STALL_WARNING_SECONDS
    assert f"stalled for {stall['lag_seconds']:.3f}s" in stall["event"]
    assert "asyncio.to_thread" in stall["event"]


def test_stall_warnings_are_rate_limited_and_count_what_they_held_back():
    import logging

    from structlog.testing import capture_logs

    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
                        cache_logger_on_first_use=False)  # whatever an earlier test left
    try:
        probe = LoopLagProbe(stall_seconds=0.25, warn_every=0.2)
        with capture_logs() as logged:
            for lag in (0.3, 0.01, 0.4, 0.5):
                probe.observe(lag)
        assert [e["lag_seconds"] for e in logged] == [0.3]
        time.sleep(0.25)  # the next window
        with capture_logs() as logged:
            probe.observe(0.7)
        assert [(e["lag_seconds"], e["more_stalls_suppressed"]) for e in logged] == [(0.7, 2)]
    finally:
        structlog.configure(**saved)


def test_a_blocked_uvloop_shows_the_same_lag():
    """uvloop's loop.time() moves in whole milliseconds once per turn; the probe reads the monotonic clock."""
    import uvloop

    async def blocked() -> list[float]:
        probe = LoopLagProbe(interval=0.01, stall_seconds=10)
        probe.samples = []
        watching = asyncio.create_task(probe.run())
        await asyncio.sleep(0.05)
        time.sleep(0.3)
        await asyncio.sleep(0.05)
        watching.cancel()
        return probe.samples

    samples = uvloop.run(blocked())
    assert 0.25 <= max(samples) < 0.4
    assert sorted(samples)[len(samples) // 2] < 0.005  # unblocked turns: on time


# --- a starved loop: waiting for a CPU, told apart from a blocked one --------------------------------

STARVED_PROBE = r"""
import asyncio, json, os, sys, time
import structlog
from prometheus_client import REGISTRY
from knarr.observability.loop_lag import LoopLagProbe

options = json.loads(sys.argv[1])
if options.get("core") is not None:
    os.sched_setaffinity(0, {options["core"]})
    os.setpriority(os.PRIO_PROCESS, 0, 19)  # the hogs (nice 0) on the same core get it first
if options.get("cgroup"):
    with open(os.path.join(options["cgroup"], "cgroup.procs"), "w") as procs:
        procs.write(str(os.getpid()))
structlog.configure(processors=[structlog.processors.add_log_level, structlog.processors.JSONRenderer()],
                    logger_factory=structlog.PrintLoggerFactory(sys.stderr))

async def busy():  # the loop's own work, 2 ms at a time: what uses up a CPU quota
    while True:
        began = time.thread_time()
        while time.thread_time() - began < 0.002:
            pass
        await asyncio.sleep(0)

async def main():
    probe = LoopLagProbe(interval=0.01, stall_seconds=options["stall_seconds"], warn_every=60)
    probe.samples, probe.starved = [], []
    watching = asyncio.create_task(probe.run())
    working = asyncio.create_task(busy()) if options.get("busy") else None
    await asyncio.sleep(options["seconds"])
    watching.cancel()
    if working:
        working.cancel()
    waited = REGISTRY.get_sample_value("knarr_event_loop_cpu_wait_seconds_total")
    print(json.dumps({"samples": probe.samples, "starved": probe.starved, "cpu_wait_total": waited}))

asyncio.run(main())
"""

HOG = "import os, sys\nos.sched_setaffinity(0, {int(sys.argv[1])})\nwhile True: pass"


def _probe(**options: object) -> tuple[dict, list[dict]]:
    """Run a probe in a process of its own (``options``: see STARVED_PROBE); its figures and its log lines."""
    done = subprocess.run([sys.executable, "-c", STARVED_PROBE, json.dumps(options)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    logged = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    return json.loads(done.stdout.splitlines()[-1]), logged


def _starved_probe(seconds: float, stall_seconds: float) -> tuple[dict, list[dict]]:
    """A probe at nice 19 on one core, beside two busy processes at nice 0 on it."""
    core = min(os.sched_getaffinity(0))
    hogs = [subprocess.Popen([sys.executable, "-c", HOG, str(core)]) for _ in range(2)]
    try:
        return _probe(core=core, seconds=seconds, stall_seconds=stall_seconds)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def _cpu_quota_cgroup(name: str, percent: int) -> tuple[str, Callable[[], None]]:
    """A cgroup allowed ``percent`` of one CPU (cgroup v2's cpu.max, else v1's CFS quota), and its removal."""
    v2, v1 = Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/cpu")
    if (v2 / "cgroup.controllers").exists() and "cpu" in (v2 / "cgroup.subtree_control").read_text().split():
        group = v2 / name
        group.mkdir()
        (group / "cpu.max").write_text(f"{percent * 1000} 100000")
    elif (v1 / "cpu.cfs_quota_us").exists():
        group = v1 / name
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text(str(percent * 1000))
    else:
        raise AssertionError("no cgroup CPU controller to set a quota in (cgroup v2 with cpu in /sys/fs/cgroup/"
                             "cgroup.subtree_control, or v1's /sys/fs/cgroup/cpu): run the tests as root on Linux")
    return str(group), group.rmdir


def test_a_loop_starved_of_cpu_says_so_in_its_stall_warning_and_its_wait_counter():
    figures, logged = _starved_probe(seconds=1.5, stall_seconds=0.03)
    lags, starved = figures["samples"], figures["starved"]
    assert lags and len(starved) == len(lags) and None not in starved
    late = [(lag, part) for lag, part in zip(lags, starved) if lag >= 0.03]
    assert late, f"two busy processes on its core never delayed the probe 30 ms: {sorted(lags)[-5:]}"
    assert sum(part for _, part in late) >= 0.8 * sum(lag for lag, _ in late)  # the lag was the wait
    assert figures["cpu_wait_total"] >= sum(part for _, part in late)
    [stall] = [line for line in logged if line["event"].startswith("event loop stalled")]  # one per warn_every
    assert stall["level"] == "warning"
    assert "waiting for a CPU" in stall["event"] and "executor.max_executors" in stall["event"]
    assert stall["cpu_wait_seconds"] >= stall["lag_seconds"] / 2


def test_a_loop_throttled_by_its_cgroup_cpu_quota_says_it_waited_for_a_cpu():
    """A pod at its CPU limit: the kernel stops its cgroup for the rest of each period, which the thread's
    run-queue delay counts. A loop busy on its own work inside a 10 % quota stalls ~90 ms a period."""
    group, remove = _cpu_quota_cgroup(f"knarr-test-{os.getpid()}", percent=10)
    try:
        figures, logged = _probe(cgroup=group, busy=True, seconds=1.5, stall_seconds=0.05)
    finally:
        remove()
    late = [(lag, part) for lag, part in zip(figures["samples"], figures["starved"]) if lag >= 0.05]
    assert late, f"a 10 % quota never delayed the probe 50 ms: {sorted(figures['samples'])[-5:]}"
    assert sum(part for _, part in late) >= 0.8 * sum(lag for lag, _ in late)  # throttled, not busy
    [stall] = [line for line in logged if line["event"].startswith("event loop stalled")]
    assert "waiting for a CPU" in stall["event"] and "CPU limit" in stall["event"]


async def test_a_blocked_loop_is_not_mistaken_for_a_starved_one():
    probe = LoopLagProbe(interval=0.01, stall_seconds=10)
    probe.samples, probe.starved = [], []
    watching = asyncio.create_task(probe.run())
    await asyncio.sleep(0.05)
    time.sleep(0.3)  # blocked, not runnable: no wait for a CPU
    await asyncio.sleep(0.05)
    began = time.thread_time()
    while time.thread_time() - began < 0.3:  # 0.3 s of its own work (longer, if other processes hold the cores)
        pass
    await asyncio.sleep(0.05)
    watching.cancel()
    late = [(lag, part) for lag, part in zip(probe.samples, probe.starved) if lag >= 0.25]
    assert len(late) == 2, probe.samples
    (slept, slept_waiting), (worked, worked_waiting) = late
    assert slept_waiting is not None and slept_waiting < 0.1  # at most its wake-up's wait
    assert "something blocked it" in stall_message(slept, slept_waiting)
    # what is not waiting is the loop's own work: the 0.3 s of CPU it spent, less up to one probe interval
    assert worked_waiting is not None and 0.25 <= worked - worked_waiting <= 0.35, (worked, worked_waiting)


def test_the_stall_message_names_the_wait_for_a_cpu_only_when_it_was_most_of_the_stall():
    assert "waiting for a CPU" in stall_message(0.4, 0.3)
    assert "0.300s of it waiting" in stall_message(0.4, 0.3)
    assert "something blocked it" in stall_message(0.4, 0.1)
    assert "something blocked it" in stall_message(0.4, None)  # not measured here


def test_the_cpu_wait_is_the_part_of_the_lag_the_run_queue_explains():
    assert starved_part(0.2, 0.5) == 0.2  # waited longer than it lagged: the whole lag, no more
    assert starved_part(0.2, 0.05) == 0.05
    assert starved_part(0.2, None) is None


def test_a_thread_cpu_wait_that_cannot_be_read_measures_nothing(tmp_path):
    missing = ThreadCpuWait(str(tmp_path / "no-such-file"))
    assert missing.read() is None
    garbled = tmp_path / "schedstat"
    garbled.write_text("not numbers\n")
    assert ThreadCpuWait(str(garbled)).read() is None
    here = ThreadCpuWait()
    try:
        assert here.read() is not None and here.read() >= 0  # Linux with scheduler statistics, as CI runs
    finally:
        here.close()
