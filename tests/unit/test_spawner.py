"""Task processes are started by the spawner thread, never by the event loop; its failures stay contained.
Arguments are encoded as exec takes them, one at a time or joined at once alike."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from knarr.engine import native, spawner
from knarr.engine.processes import run_process

from tests.worker.harness import BEHAVE, local_config
from tests.worker.procs import alive_with, signal_set



async def _until(predicate, timeout: float = 20.0, what: str = "condition"):
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := predicate()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.01)
    return value


class Gate:
    """Wraps libc's posix_spawnp: records the calling thread, and can hold calls until released."""

    def __init__(self, real, hold: bool = False) -> None:
        self.real = real
        self.threads: list[int] = []
        self.entered = threading.Event()
        self.returned = threading.Event()
        self.open = threading.Event()
        if not hold:
            self.open.set()

    def __call__(self, *args):
        self.threads.append(threading.get_ident())
        self.entered.set()
        self.open.wait(30)
        try:
            return self.real(*args)
        finally:
            self.returned.set()


@pytest.fixture
def gate(monkeypatch):
    def install(hold: bool = False) -> Gate:
        wrapper = Gate(spawner._posix_spawnp, hold)
        monkeypatch.setattr(spawner, "_posix_spawnp", wrapper)
        return wrapper

    return install


def _forbid_on_this_thread(monkeypatch) -> list[str]:
    """Make os.fork / os.posix_spawn(p) fail loudly if the calling (event loop) thread uses them."""
    loop_thread = threading.get_ident()
    called: list[str] = []
    for name in ("fork", "posix_spawn", "posix_spawnp"):
        real = getattr(os, name)

        def guarded(*args, _real=real, _name=name, **kwargs):
            if threading.get_ident() == loop_thread:
                called.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, guarded)
    return called


async def test_the_event_loop_thread_never_spawns_a_task_process(gate, monkeypatch):
    recorded = gate()
    forbidden = _forbid_on_this_thread(monkeypatch)
    outcomes = await asyncio.gather(*(run_process([BEHAVE, f"out={i}"], stdin="x" if i % 2 else None, env=None,
                                                  timeout=10) for i in range(20)))
    assert [o.stdout for o in outcomes] == [f"{i}\n" for i in range(20)]
    assert len(recorded.threads) == 20
    assert threading.get_ident() not in recorded.threads
    assert forbidden == []


async def test_a_worker_running_tasks_never_spawns_on_its_event_loop(gate, monkeypatch, tmp_path):
    import knarr
    from knarr.engine.worker import Worker
    from knarr.sources.memory import MemorySource

    class Echo(knarr.BaseHandler[None, None]):
        async def arrange(self, messages, pending):
            return [knarr.ExecutorTask(args=["out=ok"], source_offsets=[m.offset]) for m in messages]

    recorded = gate()
    forbidden = _forbid_on_this_thread(monkeypatch)
    config = local_config(tmp_path, binary_path=BEHAVE, max_executors=4, spawner="thread")
    msgs = [knarr.SourceMessage(topic="t", partition=0, offset=o, value=b"{}") for o in range(30)]
    worker = Worker(config, Echo(), source=MemorySource(msgs))
    assert await asyncio.wait_for(worker.run(), 60) == 0
    assert worker.stats.tasks == 30 and len(recorded.threads) == 30
    assert threading.get_ident() not in recorded.threads
    assert forbidden == []


async def test_a_task_cancelled_while_its_process_is_being_started_leaves_nothing_behind(gate, monkeypatch):
    held = gate(hold=True)
    discarded = threading.Event()
    real_discard = spawner.Spawned.discard

    def discard(self):
        real_discard(self)
        discarded.set()

    monkeypatch.setattr(spawner.Spawned, "discard", discard)
    marker = f"41.{uuid.uuid4().int % 10**6:06d}"
    task = asyncio.create_task(run_process(["sleep", marker], stdin=None, env=None, timeout=60))
    await _until(held.entered.is_set, what="the spawn to begin")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    held.open.set()  # the spawn completes after its task gave up: the spawner kills and reaps it
    await _until(discarded.is_set, what="the abandoned child to be killed and reaped")
    assert not spawner.leaders
    assert alive_with(marker) == []


async def test_a_task_cancelled_while_queued_is_never_started(gate):
    held = gate(hold=True)
    first = asyncio.create_task(run_process(["true"], stdin=None, env=None, timeout=10))
    await _until(held.entered.is_set, what="the first spawn to begin")
    marker = f"42.{uuid.uuid4().int % 10**6:06d}"
    queued = asyncio.create_task(run_process(["sleep", marker], stdin=None, env=None, timeout=60))
    await asyncio.sleep(0.05)  # let it reach the queue behind the held spawn
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued
    held.open.set()
    assert (await first).exit_code == 0
    assert (await run_process(["true"], stdin=None, env=None, timeout=10)).exit_code == 0
    assert len(held.threads) == 2  # the first and the last: the cancelled one never reached posix_spawnp
    assert alive_with(marker) == []


async def test_a_timed_out_task_started_by_the_spawner_still_loses_its_whole_group():
    marker = f"43.{uuid.uuid4().int % 10**6:06d}"
    out = await run_process([BEHAVE, f"spawn={marker}", f"sleep={marker}"], stdin=None, env=None, timeout=0.5)
    assert out.timed_out
    await _until(lambda: not alive_with(marker), what="the group to be gone")


async def test_an_unexpected_error_while_starting_one_task_fails_that_task_only(monkeypatch):
    real = spawner._posix_spawnp
    calls = 0

    def once_broken(*args):
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("out of spawn slots")
        return real(*args)

    monkeypatch.setattr(spawner, "_posix_spawnp", once_broken)
    broken = await run_process(["true"], stdin=None, env=None, timeout=10)
    assert broken.exit_code == -1 and broken.pid is None
    assert broken.launch_error == "cannot start 'true': the spawner failed on this task (RuntimeError: out of spawn slots)"
    fine = await run_process([BEHAVE, "out=after"], stdin=None, env=None, timeout=10)
    assert (fine.exit_code, fine.stdout) == (0, "after\n")


class ThreadKilled(BaseException):
    """Something no per-task handler catches: the spawner thread itself dies."""


async def test_a_spawner_thread_that_dies_fails_the_tasks_it_held_and_the_next_task_starts_a_new_one(monkeypatch):
    real = spawner._posix_spawnp
    entered, release = threading.Event(), threading.Event()
    calls = 0

    def dying(*args):
        nonlocal calls
        calls += 1
        if calls == 1:
            entered.set()
            release.wait(30)
            raise ThreadKilled("gone")
        return real(*args)

    monkeypatch.setattr(spawner, "_posix_spawnp", dying)
    first = asyncio.create_task(run_process(["true"], stdin=None, env=None, timeout=10))
    await _until(entered.is_set, what="the first spawn to begin")
    queued = asyncio.create_task(run_process(["true"], stdin=None, env=None, timeout=10))
    await asyncio.sleep(0.05)
    old_thread = spawner.spawner()._thread
    release.set()
    for outcome in (await first, await queued):
        assert outcome.exit_code == -1
        assert "the spawner thread failed (ThreadKilled: gone); the next task starts a new one" in outcome.launch_error
    after = await run_process([BEHAVE, "out=recovered"], stdin=None, env=None, timeout=10)
    assert (after.exit_code, after.stdout) == (0, "recovered\n")
    assert spawner.spawner()._thread is not old_thread
    assert not old_thread.is_alive()


async def test_an_environment_changed_after_an_earlier_task_used_it_reaches_the_next_task_as_changed():
    env = {"KNARR_TEST_VALUE": "first"}
    first = await run_process([BEHAVE, "env=KNARR_TEST_VALUE"], stdin=None, env=env, timeout=10)
    env["KNARR_TEST_VALUE"] = "second"  # same dict, same size, new value
    second = await run_process([BEHAVE, "env=KNARR_TEST_VALUE"], stdin=None, env=env, timeout=10)
    assert (first.stdout, second.stdout) == ("first\n", "second\n")


def test_under_containment_no_fast_exiting_task_is_reaped_by_the_sweep_of_detached_processes():
    """The sweep reaps exited children of other sessions that are not listed tasks; a task's child exists
    for a moment before the spawner lists it, and must never be taken for a detached one."""
    import subprocess
    import sys

    script = """
import asyncio
from knarr.engine.containment import contain_tasks
from knarr.engine.processes import run_process

async def main():
    async def lane(n):
        return [await run_process(["true"], stdin=None, env=None, timeout=30) for _ in range(n)]
    lanes = await asyncio.gather(*(lane(100) for _ in range(4)))
    outcomes = [o for lane in lanes for o in lane]
    print(sum(o.exit_code == 0 for o in outcomes), [o.launch_error for o in outcomes if o.exit_code][:3])

with contain_tasks(use_cgroup=False):
    asyncio.run(main())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == "400 []"


def test_under_containment_an_orphan_that_exits_is_reaped_when_later_tasks_end():
    """A detached process re-parented to the worker (the subreaper) is reaped once it has exited: by the
    sweep of a later task's end (at most every SWEEP_EVERY_SECONDS, on either spawner)."""
    import subprocess
    import sys
    import tempfile

    script = """
import asyncio, os, sys
from knarr.engine import native
from knarr.engine.containment import contain_tasks, stat_fields
from knarr.engine.processes import SWEEP_EVERY_SECONDS, run_process

def state(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return stat_fields(fh.read())[0]
    except FileNotFoundError:
        return "gone"

async def main(path, kind):
    runner = native.runner() if kind == "native" else None
    if runner is not None:
        assert runner.claim(asyncio.get_running_loop())
    # the task ends once its orphan is detached (a new session), else its group's kill would reach it
    leave = f"setsid sh -c 'echo $$ > {path}; sleep 0.2' > /dev/null 2>&1 & while [ ! -s {path} ]; do sleep 0.01; done"
    await run_process(["sh", "-c", leave], stdin=None, env=None, timeout=30, runner=runner)
    while not os.path.exists(path) or not open(path).read().strip():
        await asyncio.sleep(0.01)
    pid = int(open(path).read())
    await asyncio.sleep(0.6)  # it has exited by now: a zombie, the worker's to reap
    before = state(pid)
    for _ in range(20):
        await run_process(["true"], stdin=None, env=None, timeout=30, runner=runner)
    await asyncio.sleep(3 * SWEEP_EVERY_SECONDS)
    print(before, state(pid))

with contain_tasks(use_cgroup=False):
    asyncio.run(main(sys.argv[1], sys.argv[2]))
"""
    for kind in ("native", "thread"):
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run([sys.executable, "-c", script, f"{tmp}/pid", kind], capture_output=True, text=True,
                                  timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split() == ["Z", "gone"], (kind, done.stdout)


async def test_a_sweep_skipped_for_coming_too_soon_is_made_up_once_a_moment_later(monkeypatch):
    from knarr.engine import processes

    swept = []
    monkeypatch.setattr(processes, "_sweep_now", lambda: swept.append(1))
    sweeps = processes._Sweeps()
    assert sweeps.due()  # the first task's end sweeps at once
    assert [sweeps.due() for _ in range(50)] == [False] * 50  # 50 more ends within the interval: none sweeps...
    await asyncio.sleep(processes.SWEEP_EVERY_SECONDS * 3)
    assert swept == [1]  # ...and one sweep is made up for them


@pytest.mark.parametrize("through", ["thread", "native"])
async def test_a_task_starts_with_sigpipe_and_sigxfsz_at_their_defaults_as_subprocess_would_give_them(through):
    """Python ignores both; left so, `yes | head -1` in a task's shell complains of a broken pipe."""
    runner = native.runner() if through == "native" else None
    status = await run_process(["cat", "/proc/self/status"], stdin=None, env=None, timeout=10, runner=runner)
    assert not signal_set(status.stdout, "SigIgn") & {13, 25}  # SIGPIPE, SIGXFSZ
    piped = await run_process(["sh", "-c", "yes | head -1"], stdin=None, env=None, timeout=10, runner=runner)
    assert (piped.exit_code, piped.stdout, piped.stderr) == (0, "y\n", "")


# --- argv in one block, as the native runner takes it ----------------------------------------------
@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\0")), min_size=1, max_size=6))
def test_argv_joined_at_once_is_what_encoding_each_argument_gives(argv):
    try:
        expected = b"\0".join(os.fsencode(a) for a in argv)
    except UnicodeEncodeError:  # a lone surrogate surrogateescape cannot give back: refused alike
        with pytest.raises(UnicodeEncodeError):
            spawner.exec_block(argv)
        return
    assert spawner.exec_block(argv) == expected


def test_argv_with_bytes_or_paths_is_encoded_argument_by_argument():
    assert spawner.exec_block(["tool", b"raw", Path("/tmp/x"), "caf\udce9"]) == b"tool\0raw\0/tmp/x\0caf\xe9"


@pytest.mark.parametrize(("argv", "error"), [
    (["tool", "grep\0pattern"], ValueError),
    (["tool", b"a\0b"], ValueError),
    (["tool", 3], TypeError),
    ([], ValueError),
])
def test_argv_exec_cannot_take_raises_as_posix_spawn_would(argv, error):
    with pytest.raises(error):
        spawner.exec_block(argv)
