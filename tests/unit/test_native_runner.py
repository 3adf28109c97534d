"""The native runner (executor.spawner): built at install time, chosen by default, refused clearly when missing.

What a task run through it does (output, deadlines, cancellation, launch errors, nothing left
behind) is tested in test_processes.py, once per spawner.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import platform
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
import zipfile
from pathlib import Path

import knarr
import pytest
from knarr.engine import native, spawner
from knarr.engine.processes import run_process
from knarr.engine.worker import Worker
from knarr.errors import ConfigError
from knarr.sources.memory import MemorySource
from structlog.testing import capture_logs

from tests.worker.harness import BEHAVE, local_config
from tests.worker.procs import alive_with, signal_set, stdout_memfd_sizes


class Echo(knarr.BaseHandler[None, None]):
    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=[f"out={m.offset}"], source_offsets=[m.offset]) for m in messages]

    async def on_task_complete(self, result):
        self.seen = getattr(self, "seen", []) + [result.stdout]


def _config(tmp_path, **executor):
    return local_config(tmp_path, **{"binary_path": BEHAVE, "max_executors": 4, **executor})


def test_the_event_unpacking_reads_every_field_where_runner_c_puts_it():
    """_collect reads the runner's events with one struct unpack each: its layout must be the Structure's
    (kr_event_t's). A value of its own in every field, each as wide as its field allows, comes back whole."""
    assert native._EVENT.size == ctypes.sizeof(native._Event)
    values = {"id": -(2 ** 40), "pid": 77, "status": -2, "started_ns": 2 ** 50, "ended_ns": 2 ** 51 + 3, "slot": 2,
              "flags": 5, "out": 0x7F12_3456_7890, "err": 0x10, "out_len": 12, "err_len": 2 ** 33}
    assert [name for name, _ in native._Event._fields_] == list(values)
    assert native._EVENT.unpack(bytes(native._Event(**values))) == tuple(values.values())


@pytest.fixture
def thread_spawns(monkeypatch) -> list[int]:
    """Counts the spawner thread's spawns (the native runner spawns in C and never gets here)."""
    calls: list[int] = []
    real = spawner._posix_spawnp

    def counted(*args):
        calls.append(threading.get_ident())
        return real(*args)

    monkeypatch.setattr(spawner, "_posix_spawnp", counted)
    return calls


@pytest.fixture
def without_the_library(monkeypatch):
    """As if knarr had been installed where no C compiler was."""
    monkeypatch.setattr(native, "_runner", None)
    monkeypatch.setattr(native, "_missing", None)
    monkeypatch.setattr(native, "LIBRARY", "_knarr_runner_not_installed")


async def test_a_worker_on_defaults_starts_its_tasks_through_the_native_runner(tmp_path, thread_spawns):
    handler = Echo()
    messages = [knarr.SourceMessage(topic="t", partition=0, offset=o, value=b"{}") for o in range(30)]
    worker = Worker(_config(tmp_path), handler, source=MemorySource(messages))
    assert await asyncio.wait_for(worker.run(), 60) == 0
    assert sorted(handler.seen) == sorted(f"{o}\n" for o in range(30))
    assert thread_spawns == []
    assert native.started() is not None


async def test_executor_spawner_thread_keeps_every_task_on_the_spawner_thread(tmp_path, thread_spawns):
    handler = Echo()
    messages = [knarr.SourceMessage(topic="t", partition=0, offset=o, value=b"{}") for o in range(12)]
    worker = Worker(_config(tmp_path, spawner="thread"), handler, source=MemorySource(messages))
    assert await asyncio.wait_for(worker.run(), 60) == 0
    assert len(handler.seen) == 12 and len(thread_spawns) == 12


def test_executor_spawner_native_without_the_runner_is_refused_saying_what_to_do(without_the_library):
    with pytest.raises(ConfigError) as refused:
        native.for_config("native")
    said = str(refused.value)
    assert "executor.spawner is native" in said
    assert "C compiler" in said and "executor.spawner: thread" in said


def test_auto_without_the_runner_falls_back_to_the_spawner_thread_and_says_so(without_the_library):
    with capture_logs() as logged:
        assert native.for_config("auto") is None
    warnings = [entry for entry in logged if entry["log_level"] == "warning"]
    assert len(warnings) == 1 and "spawner thread" in warnings[0]["event"]
    assert "C compiler" in warnings[0]["why"]


def test_executor_spawner_takes_only_its_three_choices(tmp_path):
    with pytest.raises(ConfigError) as refused:
        _config(tmp_path, spawner="fork")
    assert "executor.spawner" in str(refused.value)
    for choice in ("auto", "native", "thread"):
        assert _config(tmp_path, spawner=choice).executor.spawner == choice


async def test_a_task_on_a_second_open_loop_goes_through_the_spawner_thread(thread_spawns):
    runner = native.runner()
    assert runner.claim(asyncio.get_running_loop())
    first = await run_process([BEHAVE, "out=here"], stdin=None, env=None, timeout=10, runner=runner)
    assert first.stdout == "here\n" and thread_spawns == []

    def elsewhere():
        return asyncio.run(run_process([BEHAVE, "out=there"], stdin=None, env=None, timeout=10, runner=runner))

    second = await asyncio.to_thread(elsewhere)
    assert second.stdout == "there\n" and len(thread_spawns) == 1
    third = await run_process([BEHAVE, "out=here again"], stdin=None, env=None, timeout=10, runner=runner)
    assert third.stdout == "here again\n" and len(thread_spawns) == 1


def test_a_forked_child_starts_a_runner_of_its_own():
    parent = native.runner()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's runner thread is not here, so it must not be used
        try:
            child = native.runner()
            outcome = asyncio.run(run_process([BEHAVE, "out=child"], stdin=None, env=None, timeout=10, runner=child))
            os.write(write, b"ok" if child is not parent and outcome.stdout == "child\n" else b"no")
        finally:
            os._exit(0)
    os.close(write)
    said = os.read(read, 16)
    os.close(read)
    os.waitpid(pid, 0)
    assert said == b"ok"



# --- the signal handlers a task starts with ------------------------------------------------------
_HANDLERS_SCRIPT = """
import asyncio, json, signal, sys
from knarr.engine import native
from knarr.engine.processes import run_process

signal.signal(signal.SIGUSR1, lambda *_: None)  # the worker's own handlers: the task must not keep them
signal.signal(signal.SIGHUP, signal.SIG_IGN)  # ignored in the worker: ignored in the task, as posix_spawn leaves it
runner = native.runner()
if sys.argv[1] == "ask":
    runner.clears_handlers(stop=True)

async def main():
    done = await run_process(["cat", "/proc/self/status"], stdin=None, env=None, timeout=10, runner=runner)
    with open("/proc/self/status") as own:
        worker = own.read()
    print(json.dumps({"task": done.stdout, "worker": worker, "cleared": runner.clears_handlers()}))

asyncio.run(main())
"""


def _kernel_at_least(major: int, minor: int) -> bool:
    release = tuple(int(part) for part in os.uname().release.split("-")[0].split(".")[:2])
    return release >= (major, minor)


@pytest.mark.parametrize("way", ["clear", "ask"])
def test_a_task_starts_with_no_handler_of_the_workers_whichever_way_the_runner_clones(way):
    """``clear``: clone3 with CLONE_CLEAR_SIGHAND, the kernel resetting the handlers at once (x86-64,
    Linux 5.5 or later); ``ask``: the child asking for each signal's, as posix_spawn's does (other
    machines, or clone3 filtered out). A task sees the same either way."""
    done = subprocess.run([sys.executable, "-c", _HANDLERS_SCRIPT, way], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout)
    worker_ignored, task = signal_set(seen["worker"], "SigIgn"), seen["task"]
    # what the worker ignores, its task ignores (SIGHUP here, and whatever the worker was started with
    # ignored), except SIGPIPE and SIGXFSZ, which Python ignores for itself
    assert signal.SIGHUP in worker_ignored and {signal.SIGPIPE, signal.SIGXFSZ} <= worker_ignored
    assert signal_set(task, "SigIgn") == worker_ignored - {signal.SIGPIPE, signal.SIGXFSZ}, task
    assert signal_set(task, "SigCgt") == set() and signal_set(task, "SigBlk") == set(), task
    fast_here = platform.machine() == "x86_64" and _kernel_at_least(5, 5)
    assert seen["cleared"] == (way == "clear" and fast_here), (platform.machine(), os.uname().release)


# --- the wheel ---------------------------------------------------------------------------------
WORKER = Path(__file__).resolve().parents[2] / "worker"


def _build_wheel(out: Path, env: dict[str, str]) -> tuple[Path, str]:
    uv = subprocess.run([str(WORKER.parent / "hack" / "uv.sh"), "--find"], capture_output=True, text=True, check=True)
    done = subprocess.run([uv.stdout.strip(), "build", "--wheel", "--out-dir", str(out), str(WORKER)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = out.glob("*.whl")
    return wheel, done.stderr


def test_the_wheel_carries_the_runner_and_is_tagged_for_any_python_3_on_its_platform(tmp_path):
    wheel, _ = _build_wheel(tmp_path, {**os.environ, "KNARR_NATIVE_RUNNER": "required"})
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert wheel.name == f"knarr-{knarr.__version__}-py3-none-{platform}.whl"  # no Python ABI in the library
    with zipfile.ZipFile(wheel) as archive:
        assert "_knarr_runner.so" in archive.namelist()


def test_without_a_compiler_the_wheel_is_pure_and_the_build_says_what_is_missing(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "KNARR_NATIVE_RUNNER")}
    wheel, said = _build_wheel(tmp_path, {**env, "PATH": str(tmp_path / "no-compiler-here")})
    assert wheel.name.endswith("-py3-none-any.whl")
    assert "native task runner not built (no C compiler" in said
    with zipfile.ZipFile(wheel) as archive:
        assert "_knarr_runner.so" not in archive.namelist()


async def test_the_runner_kills_a_task_at_its_deadline_and_cuts_its_output_while_the_loop_is_busy():
    """Deadlines and the output cap are the runner thread's: a loop that does not come round in time
    (a slow hook, a long collection) changes neither."""
    runner = native.runner()
    assert runner.claim(asyncio.get_running_loop())
    marker = f"37.{uuid.uuid4().int % 10**6:06d}"
    flood = "for i in $(seq 30); do head -c 1048576 /dev/zero; sleep 0.02; done"
    sleeper = asyncio.ensure_future(run_process([BEHAVE, f"sleep={marker}"], stdin=None, env=None, timeout=0.3,
                                                runner=runner))
    flooder = asyncio.ensure_future(run_process(["sh", "-c", flood], stdin=None, env=None, timeout=30,
                                                max_output_bytes=65536, runner=runner))
    await asyncio.sleep(0.05)  # both submitted and started
    largest, blocked_until = 0, time.monotonic() + 1.0
    while time.monotonic() < blocked_until:  # the loop is blocked: nothing of it runs meanwhile
        largest = max([largest, *stdout_memfd_sizes()])
        time.sleep(0.005)
    assert alive_with(marker) == []  # killed at 0.3 s by the runner, not when the loop came back
    assert 0 < largest <= 65536 + 8 * 1048576  # 20 MiB written meanwhile, cut back to the cap as it came
    out = await sleeper
    assert out.timed_out and "timed out after 0.3s" in out.stderr
    flooded = await flooder
    assert flooded.exit_code == 0 and flooded.stdout_truncated and len(flooded.stdout) == 65536


async def test_a_tasks_exit_does_not_wake_the_event_loops_thread():
    """A task's exit sends SIGCHLD to the runner's thread, which takes it (at its default, dropped as it is
    sent). Were it blocked there, the kernel would wake another thread for every exit, the loop's."""
    runner = native.runner()
    assert runner.claim(asyncio.get_running_loop())
    jobs = [runner.submit(["true"], None, None, 10, 4096) for _ in range(60)]
    before = _voluntary_switches()
    time.sleep(1.0)  # the loop's thread asleep (blocked, so it collects nothing) while the 60 tasks end
    woken = _voluntary_switches() - before
    ended = await asyncio.wait_for(asyncio.gather(*(job.ended for job in jobs)), 10)
    assert all(end.status == 0 for end in ended)
    assert woken <= 5, f"the loop's thread was woken {woken} times while 60 tasks ended"


def _voluntary_switches() -> int:
    for line in Path("/proc/thread-self/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches in /proc/thread-self/status")


async def test_the_loop_takes_a_long_run_of_ended_tasks_a_chunk_at_a_time():
    """However many tasks ended while the loop was away, one round of it takes COLLECT_CHUNK of them at
    most: its timers and other callbacks run between the chunks, not after the whole run."""
    runner = native.runner()
    loop = asyncio.get_running_loop()
    assert runner.claim(loop)
    rounds, heard = [0], []

    def tick() -> None:  # once per round of the loop
        rounds[0] += 1
        if len(heard) < 60:
            loop.call_soon(tick)

    for _ in range(60):
        runner.submit(["true"], None, None, 10, 4096, on_end=lambda end: heard.append((rounds[0], end.status)))
    time.sleep(1.0)  # the loop away while the 60 tasks end
    tick()
    for _ in range(500):
        if len(heard) == 60:
            break
        await asyncio.sleep(0.01)
    assert [status for _, status in heard] == [0] * 60
    per_round = [sum(1 for at, _ in heard if at == r) for r in sorted({at for at, _ in heard})]
    assert max(per_round) <= native.COLLECT_CHUNK < 60, per_round
