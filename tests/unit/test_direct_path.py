"""A task's usual life goes through callbacks, without an asyncio task of its own, whether a
persistent program or the native runner's spawn runs it, and every way off it goes on through the
engine's usual code, from where the task was.

A real partition processor, executor, program pool and native runner (tests/programs/behave and
behave_persistent.py, which read the same arguments; real processes), and a sink of the test's
own that confirms deliveries through futures, as the Kafka sink does, so each confirmation and
refusal can be made to happen. Every test runs in both modes.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import knarr
from knarr.api.messages import SourceMessage
from knarr.config.models import ExecutorConfig
from knarr.engine.execution import TaskExecutor
from knarr.engine.processor import PartitionProcessor
from knarr.engine.scheduling import SlotScheduler
from knarr.sinks.base import TransientSinkError
from knarr.sinks.delivery import SinkManager

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"
BEHAVE_PERSISTENT = [sys.executable, str(PROGRAMS / "behave_persistent.py")]
BEHAVE = str(PROGRAMS / "behave")


class ConfirmingSink:
    """A Kafka-like sink: ``begin`` hands back a future the test (or ``auto``) settles."""

    sink_type = kind = "kafka"
    name = "out"

    def __init__(self, auto: bool = True, refuse_first: bool = False) -> None:
        self.auto, self.refuse_first = auto, refuse_first
        self.begun: list[tuple[list[Any], asyncio.Future]] = []
        self.delivered: list[Any] = []

    async def connect(self) -> None: ...

    async def close(self) -> None: ...

    def begin(self, payloads: list[Any]) -> asyncio.Future:
        if self.refuse_first:
            self.refuse_first = False
            raise RuntimeError("refused at once")
        future = asyncio.get_running_loop().create_future()
        self.begun.append((payloads, future))
        if self.auto:
            self.delivered += payloads
            future.set_result(None)
        return future

    def failure(self, exc: BaseException) -> BaseException:
        return TransientSinkError(str(exc)) if isinstance(exc, RuntimeError) else exc

    async def deliver(self, payloads: list[Any]) -> None:  # the sink manager's retries come here
        self.delivered += payloads


class Echo(knarr.BaseHandler[None, None]):
    """One task per message, its args the message's text; its stdout goes to the sink."""

    def __init__(self, waits: bool = False, raises: bool = False) -> None:
        super().__init__()
        self.waits, self.raises = waits, raises
        self.errors: list[knarr.ExecutorError] = []
        self.results: list[knarr.ExecutorResult] = []

    async def arrange(self, messages, pending):
        return [knarr.ExecutorTask(args=m.value.decode().split(), source_offsets=[m.offset]) for m in messages]

    async def on_task_complete(self, result):
        self.results.append(result)
        if self.waits:
            await asyncio.sleep(0.01)
        if self.raises:
            raise ValueError("the hook's own bug")
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(data={"out": result.stdout})])

    async def on_error(self, task, error):
        self.errors.append(error)
        return knarr.ErrorAction.RETRY


class Recorder:
    """A flight recorder that keeps its events in a list."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def record(self, kind: str, partition: int | None = None, offset: int | None = None, task_id: str | None = None,
               parent_task_id: str | None = None, duration_ms: float | None = None,
               data: dict[str, Any] | None = None) -> None:
        self.events.append({"kind": kind, "offset": offset, "task_id": task_id, "data": data or {}})

    def of(self, offset: int) -> list[tuple[str, dict[str, Any]]]:
        return [(e["kind"], e["data"]) for e in self.events if e["offset"] == offset and e["kind"].startswith("task")]


class Rig:
    def __init__(self, mode: str, handler: Echo, sink: ConfirmingSink, slots: int = 2,
                 max_output_bytes: int = 1024 * 1024) -> None:
        if mode == "persistent":
            config = ExecutorConfig(max_executors=slots, task_timeout_seconds=30, max_retries=2,
                                    retry_backoff_base_seconds=0.01, persistent={"command": BEHAVE_PERSISTENT},
                                    max_output_bytes=max_output_bytes)
        else:  # the native runner spawns each task, and holds up to two more ready
            config = ExecutorConfig(max_executors=slots, task_timeout_seconds=30, max_retries=2,
                                    retry_backoff_base_seconds=0.01, binary_path=BEHAVE, spawner="native",
                                    spawn_ahead=2, max_output_bytes=max_output_bytes)
        self.mode = mode
        self.scheduler = SlotScheduler(slots, held=config.held_tasks)
        self.executor = TaskExecutor(handler, self.scheduler, config)
        self.sink = sink
        self.fatal: list[BaseException] = []
        self.processor = PartitionProcessor("in", 0, handler, self.executor, SinkManager([sink], None, handler),
                                            config, on_fatal=self.fatal.append)
        self.processor.start()
        self.offset = 0

    def send(self, *texts: str) -> None:
        messages = []
        for text in texts:
            messages.append(SourceMessage(topic="in", partition=0, offset=self.offset, value=text.encode()))
            self.offset += 1
        self.processor.enqueue(messages)

    async def warm(self) -> None:
        """One task per slot, so every program has started (the first tasks start them on the asyncio path),
        and those tasks have ended: a task settles its messages a step before its asyncio task is done."""
        self.send(*(f"out=warm-{i}" for i in range(self.scheduler.slots)))
        await self.settled()
        deadline = time.monotonic() + 30
        while self.processor._children:
            assert time.monotonic() < deadline, "the warm-up tasks' asyncio tasks did not end"
            await asyncio.sleep(0.01)

    async def settled(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not (self.processor.is_settled and self.processor.watermark.committable() == self.offset):
            assert time.monotonic() < deadline, "the messages did not all complete"
            assert not self.fatal, self.fatal
            await asyncio.sleep(0.01)

    async def close(self) -> None:
        await self.processor.stop()
        await self.executor.close()


@pytest.fixture(params=["persistent", "spawned"])
async def rig_of(request):
    rigs: list[Rig] = []

    def make(handler: Echo | None = None, sink: ConfirmingSink | None = None, slots: int = 2,
             max_output_bytes: int = 1024 * 1024) -> Rig:
        rigs.append(Rig(request.param, handler or Echo(), sink or ConfirmingSink(), slots, max_output_bytes))
        return rigs[-1]

    yield make
    for rig in rigs:
        await rig.close()


async def test_the_usual_task_takes_no_asyncio_task_of_its_own_and_its_outputs_are_confirmed(rig_of):
    rig = rig_of()
    await rig.warm()
    rig.send(*(f"out=m{i}" for i in range(40)))
    tasks_seen = 0
    while not rig.processor.is_settled:
        tasks_seen = max(tasks_seen, len(rig.processor._children))
        await asyncio.sleep(0)
    await rig.settled()
    assert tasks_seen == 0
    assert sorted(p.data["out"] for p in rig.sink.delivered[2:]) == sorted(f"m{i}\n" for i in range(40))
    assert rig.scheduler.free == 2 and not rig.processor._direct.tasks
    assert rig.processor.stats.succeeded == 42 and rig.processor.stats.outputs == 42


async def test_each_result_says_what_its_process_did_whole_or_cut_at_the_output_cap(rig_of):
    handler = Echo()
    rig = rig_of(handler, max_output_bytes=1024)
    await rig.warm()
    rig.send("out=short err=note", "bytes=3000 err=careful")
    await rig.settled()
    whole, cut = sorted(handler.results[2:], key=lambda r: len(r.stdout))
    assert (whole.exit_code, whole.stdout, whole.stderr, whole.attempt) == (0, "short\n", "note\n", 1)
    assert not whole.stdout_truncated and not whole.stderr_truncated
    assert cut.exit_code == 0 and cut.stdout_truncated and len(cut.stdout) == 1024 and cut.stderr == "careful\n"
    for result in (whole, cut):
        assert isinstance(result.pid, int) and 0 <= result.duration_seconds < 30
    assert rig.processor.stats.succeeded == 4 and rig.processor.stats.outputs == 4


async def test_a_sink_that_refuses_at_once_gets_the_sink_managers_retry(rig_of):
    rig = rig_of()
    await rig.warm()
    rig.sink.refuse_first = True
    rig.send("out=once")
    await rig.settled()
    assert [p.data["out"] for p in rig.sink.delivered][-1] == "once\n"  # through deliver(), after the refusal
    assert not [b for b in rig.sink.begun if b[0][0].data["out"] == "once\n"]


async def test_a_confirmation_that_fails_gets_the_sink_managers_retry(rig_of):
    rig = rig_of()
    await rig.warm()
    rig.sink.auto = False
    before = len(rig.sink.begun)
    rig.send("out=late")
    while len(rig.sink.begun) == before:
        await asyncio.sleep(0.01)
    rig.sink.begun[-1][1].set_exception(RuntimeError("the broker went away"))
    await rig.settled()
    assert [p.data["out"] for p in rig.sink.delivered][-1] == "late\n"
    assert rig.processor.stats.outputs == 3


async def test_a_hook_that_waits_finishes_in_a_task_of_its_own(rig_of):
    rig = rig_of(Echo(waits=True))
    rig.send("out=a", "out=b", "out=c")
    await rig.settled()
    assert sorted(p.data["out"] for p in rig.sink.delivered) == ["a\n", "b\n", "c\n"]


async def test_a_hook_that_raises_fails_its_task_as_on_the_asyncio_path(rig_of):
    rig = rig_of(Echo(raises=True))
    rig.send("out=warm", "out=x")
    await rig.settled()
    assert rig.processor.stats.failed == 2 and not rig.sink.delivered


async def test_a_failed_attempt_goes_on_to_on_error_and_its_retry(rig_of, tmp_path):
    handler = Echo()
    rig = rig_of(handler)
    await rig.warm()
    failfile = tmp_path / "fails"
    failfile.write_text("1")  # the first run fails, the retry succeeds
    rig.send(f"failfile={failfile} out=second-time")
    await rig.settled()
    assert [e.attempt for e in handler.errors] == [1]
    assert rig.sink.delivered[-1].data["out"] == "second-time\n"


async def test_a_stop_takes_back_every_slot_and_kills_the_tasks_mid_run(rig_of):
    rig = rig_of(slots=2)
    await rig.warm()
    programs = set(rig.executor.programs._live)
    others = _processes()  # the session's own (services a fixture started, say), left alone
    # two run (spawned: each with a background sleep in its group), two wait in the runner's held
    # queue (spawned), the rest wait for a slot
    rig.send(*("spawn=30 sleep=30" for _ in range(6)))
    expected_held = 2 if rig.mode == "spawned" else 0
    while len(rig.processor._direct.tasks) < 6 or rig.scheduler.free or rig.scheduler.held < expected_held:
        await asyncio.sleep(0.01)
    running = _task_processes(rig, others)
    unhandled: list[dict] = []
    asyncio.get_running_loop().set_exception_handler(lambda loop, context: unhandled.append(context))
    await asyncio.wait_for(rig.processor.stop(), 10)
    assert rig.scheduler.waiting_count == 0
    assert not rig.processor._direct.tasks
    deadline = time.monotonic() + 10
    while rig.scheduler.free != 2 or rig.scheduler.held:  # (the runner's events give the held places back)
        assert time.monotonic() < deadline, (rig.scheduler.free, rig.scheduler.held)
        await asyncio.sleep(0.01)
    await asyncio.wait_for(asyncio.gather(*(p.exited for p in programs)), 10)  # killed, not left running
    deadline = time.monotonic() + 5  # killed (SIGKILL to each task's group): gone within moments
    while left := [pid for pid in running if _alive(pid)]:
        assert time.monotonic() < deadline, f"a task's process outlived the stop: {left}"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    gc.collect()  # an answer or end that failed with nobody to take it would be reported now
    assert unhandled == []


def _processes() -> dict[int, tuple[int, int]]:
    """Every process's parent and process group, by pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return found


def _task_processes(rig: Rig, others: dict[int, tuple[int, int]]) -> list[int]:
    """The processes running the rig's tasks, none of ``others`` (spawned mode: the behave scripts and
    the sleeps they started in their groups; persistent mode: none beyond the programs, which the test
    watches)."""
    if rig.mode != "spawned":
        return []
    stats = {pid: ids for pid, ids in _processes().items() if pid not in others}
    leaders = {pid for pid, (parent, _) in stats.items() if parent == os.getpid()}
    found = [pid for pid, (_, group) in stats.items() if pid in leaders or group in leaders]
    assert len(found) >= 4, f"the two running tasks and their background sleeps were not all found: {found}"
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def test_with_the_flight_recorder_on_each_attempt_is_recorded_once_on_either_path(rig_of, tmp_path):
    rig = rig_of()
    await rig.warm()
    recorder = Recorder()
    rig.executor.recorder = rig.processor.recorder = rig.processor.sinks.recorder = recorder
    failfile = tmp_path / "fails"
    failfile.write_text("1")  # its first attempt fails, the retry succeeds
    first = rig.offset
    rig.send("out=fine", f"failfile={failfile} out=later")
    await rig.settled()
    assert [kind for kind, _ in recorder.of(first)] == ["task_queued", "task_started", "task_finished", "task_complete"]
    started, finished = recorder.of(first)[1][1], recorder.of(first)[2][1]
    assert started["attempt"] == 1 and started["args"] == ["out=fine"] and started["slot_wait_ms"] >= 0
    assert (finished["exit_code"], finished["stdout"]) == (0, "fine\n")
    kinds = [kind for kind, _ in recorder.of(first + 1)]
    assert kinds == ["task_queued", "task_started", "task_failed", "task_started", "task_finished", "task_complete"]
    assert [data["attempt"] for kind, data in recorder.of(first + 1) if kind == "task_started"] == [1, 2]
    delivered = sorted((e for e in recorder.events if e["kind"] == "delivered"), key=lambda e: e["offset"])
    assert [(e["offset"], e["data"]["offsets"], e["data"]["stage"], e["data"]["count"]) for e in delivered] == [
        (first, [first], "task", 1), (first + 1, [first + 1], "task", 1)]
    assert all(e["task_id"] for e in delivered)
