"""No task process outlives a real `knarr run` worker, and big task output does not grow it.

Each test runs the worker as its own OS process (tests/worker/procs.py) with the ScriptHandler:
every message is one `/bin/sh -c SCRIPT` task. The detaching script daemonizes a `sleep` the
classic way — a subshell starts `setsid sleep` in the background and exits — so the sleep is in
a session of its own (out of reach of the task's process-group kill) and orphaned at once.
The sleep's duration is a number unique to the test, so its command line finds it in /proc.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from knarr.errors import ExitCode

from tests.services.kafka import committed_offsets, consume_all, create_topic, produce_json, unique_name
from tests.worker.procs import SCRIPT_HANDLER, WorkerFleet, WorkerSpec, processes_gone, processes_with, wait_until

pytestmark = pytest.mark.kafka

REPO_ROOT = Path(__file__).resolve().parents[2]
MIB = 1024 * 1024


def _sleep_marker() -> str:
    return f"{600 + uuid.uuid4().int % 300}.{uuid.uuid4().int % 10**6:06d}"


def _detaching_script(marker: str, started: Path) -> str:
    """Leave a setsid'd, double-forked sleep behind; once it is detached (``started`` exists), go on."""
    return (f"(setsid sh -c 'touch {started}; exec sleep {marker}' &); "
            f"while [ ! -e {started} ]; do sleep 0.01; done")


def cgroup_v2_writable() -> bool:
    """Whether this machine lets this user create a cgroup v2 (as `knarr run` will try to)."""
    from knarr.engine.containment import cgroup_dir

    parent = cgroup_dir(Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text())
    if parent is None:
        return False
    probe = Path(parent) / f"knarr-probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return False
    probe.rmdir()
    return True


def _containment_log(worker) -> dict:
    return wait_until(
        lambda: next((e for e in worker.log_events() if e.get("event") == "task processes contained"), None),
        30, "the worker to log how its tasks are contained",
    )


@pytest.fixture
def fleet_for(kafka_bootstrap: str, tmp_path: Path):
    """A function making (fleet, spec, topic) for one worker with the given executor settings."""
    fleets: list[WorkerFleet] = []

    def make(**executor):
        topic, out = unique_name("contain-in"), unique_name("contain-out")
        create_topic(kafka_bootstrap, topic, 1)
        create_topic(kafka_bootstrap, out, 1)
        spec = WorkerSpec(kafka_bootstrap, topic, unique_name("contain-g"), out, drain_timeout_seconds=2,
                          log_level="INFO", executor_extra=executor)
        fleet = WorkerFleet(spec, tmp_path, unique_name("knarrcontain"))
        fleets.append(fleet)
        return fleet.__enter__(), spec

    yield make
    for fleet in fleets:
        fleet.__exit__(None, None, None)


def _start_detaching_task(fleet: WorkerFleet, spec: WorkerSpec, marker: str):
    worker = fleet.start("w", handler=SCRIPT_HANDLER)
    worker.wait_consuming()
    started = fleet.workdir / f"detached-{marker}"
    script = f"{_detaching_script(marker, started)}; sleep {marker}"  # the task itself runs on too
    produce_json(spec.brokers, spec.topic, [{"request_id": "detach", "script": script}])
    wait_until(started.exists, 30, "the task to detach its sleep")
    assert len(processes_with(marker)) >= 2
    return worker


def test_sigterm_leaves_no_task_process_behind_not_even_a_detached_one(fleet_for):
    fleet, spec = fleet_for()
    marker = _sleep_marker()
    worker = _start_detaching_task(fleet, spec, marker)
    assert worker.terminate() == ExitCode.DRAIN_INCOMPLETE  # the task still ran when the drain timed out
    assert processes_gone(marker, timeout=10) == []


@pytest.mark.parametrize("task_cgroup", [True, False], ids=["cgroup-if-writable", "no-cgroup"])
def test_sigkill_of_the_worker_leaves_no_task_process_behind(fleet_for, task_cgroup):
    fleet, spec = fleet_for(task_cgroup=task_cgroup)
    marker = _sleep_marker()
    worker = _start_detaching_task(fleet, spec, marker)
    contained = _containment_log(worker)
    expect_cgroup = task_cgroup and cgroup_v2_writable()
    assert contained["subreaper"] is True and contained["guard"] is True
    assert contained["cgroup"].endswith(f"/knarr-{worker.pid}") == expect_cgroup, contained
    worker.kill()
    survivors = processes_gone(marker, timeout=10)
    print(f"survivors after SIGKILL of the worker (task_cgroup={task_cgroup}, cgroup used={expect_cgroup}): {len(survivors)}")
    assert survivors == []
    if expect_cgroup:
        wait_until(lambda: not Path(contained["cgroup"]).exists(), 10, "the guard to remove the worker's cgroup")


def test_a_worker_that_crashes_leaves_no_task_process_behind(fleet_for):
    fleet, spec = fleet_for()
    marker = _sleep_marker()
    worker = fleet.start("w", handler=SCRIPT_HANDLER)
    worker.wait_consuming()
    started = fleet.workdir / f"detached-{marker}"
    produce_json(spec.brokers, spec.topic, [{"request_id": "crash", "crash": True,
                                             "script": _detaching_script(marker, started)}])
    assert worker.proc.wait(timeout=60) == 70  # the handler ended the process with no cleanup
    assert started.exists()
    assert processes_gone(marker, timeout=10) == []


def test_the_worker_itself_kills_detached_processes_when_it_stops(tmp_path):
    """Before the guard acts (the process is still alive), the subreaper's own sweep has killed them."""
    marker = _sleep_marker()
    program = f"""
import asyncio
from knarr.engine.containment import contain_tasks
from knarr.engine.processes import run_process
from tests.worker.procs import processes_with

with contain_tasks(use_cgroup=False):
    asyncio.run(run_process(["/bin/sh", "-c", {_detaching_script(marker, tmp_path / "started")!r}],
                            stdin=None, env=None, timeout=10))
    left_inside = processes_with({marker!r})
print(len(left_inside) > 0, len(processes_with({marker!r})))
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    had_detached, alive_after_stop = done.stdout.splitlines()[-1].split()
    assert had_detached == "True"  # the task's own exit left the detached sleep running...
    assert alive_after_stop == "0"  # ...and leaving contain_tasks killed it


def test_four_tasks_printing_50_mb_each_keep_the_workers_peak_memory_bounded(fleet_for, kafka_bootstrap):
    cap = 8 * MIB
    fleet, spec = fleet_for(max_output_bytes=cap)
    worker = fleet.start("w", handler=SCRIPT_HANDLER)
    worker.wait_consuming()
    small = [{"request_id": f"warm{i}", "script": "head -c 1000 /dev/zero"} for i in range(4)]
    big = [{"request_id": f"big{i}", "script": "head -c 50000000 /dev/zero"} for i in range(4)]

    def committed() -> int:
        return committed_offsets(kafka_bootstrap, spec.group, spec.topic).get(0, 0)

    produce_json(kafka_bootstrap, spec.topic, small, partition=0)
    wait_until(lambda: committed() >= 4, 60, "the warm-up tasks to be committed")
    before = worker.rss_kb("VmHWM")
    produce_json(kafka_bootstrap, spec.topic, big, partition=0)
    wait_until(lambda: committed() >= 8, 120, "the 50 MB tasks to be committed")
    after = worker.rss_kb("VmHWM")
    assert worker.terminate() == 0

    summaries = [m.json() for m in consume_all(kafka_bootstrap, spec.output_topic, expected=8)]
    big_ones = [s for s in summaries if s["request_id"].startswith("big")]
    assert [s["stdout_bytes"] for s in big_ones] == [[cap]] * 4
    assert [s["stdout_truncated"] for s in big_ones] == [[True]] * 4
    growth_mib = (after - before) / 1024
    print(f"peak RSS: {before / 1024:.0f} MiB after warm-up, {after / 1024:.0f} MiB after 4 x 50 MB outputs "
          f"(+{growth_mib:.0f} MiB)")
    # Each task holds at most its kept head as text, plus one read buffer of the same size.
    assert growth_mib < 4 * 2 * cap / MIB + 16


def test_a_guard_killed_from_outside_is_reaped_and_reported():
    program = """
import asyncio, os, signal, time
from knarr.engine.containment import contain_tasks
from knarr.engine.processes import run_process

with contain_tasks(use_cgroup=False) as contained:
    guard = contained.guard_pid
    os.kill(guard, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while open(f"/proc/{guard}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < deadline, "the guard did not die"
        time.sleep(0.01)  # pacing the /proc poll, bounded by the deadline
    asyncio.run(run_process(["true"], stdin=None, env=None, timeout=10))
    print(os.path.exists(f"/proc/{guard}"), contained.guard_pid)
"""
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    assert "the task guard exited" in done.stdout
    assert done.stdout.splitlines()[-1] == "False None"
