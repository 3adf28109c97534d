"""Persistent executors on the real broker: the same outcomes as spawn mode, and every failure contained.

The persistent program is tests/programs/behave_persistent.py: tests/programs/behave's arguments
answered by a long-lived Python program (knarr.task), plus what only such a program can do wrong
(hang, leak, write garbage, be killed mid-task). tests/programs/echo_task.c is a second program,
in C, written from the protocol's document alone.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import BaseModel

import knarr
from knarr.engine.persistent import ProgramsCannotStart
from knarr.engine.worker import Worker
from knarr.errors import ExitCode
from knarr.observability import metrics
from tests.services.kafka import committed_offsets, consume_all, create_topic, produce_json, unique_name
from tests.worker.harness import BEHAVE_PERSISTENT, PROGRAMS, kafka_config, running, topics, wait_until
from tests.worker.procs import WorkerFleet, WorkerSpec, processes_gone, processes_with, signal_set
from tests.worker.procs import wait_until as wait_for

pytestmark = pytest.mark.kafka



class Job(BaseModel):
    id: int
    args: list[str] = []
    fanout: int = 1
    stdin: str | None = None
    env: dict[str, str] = {}
    timeout: float | None = None
    precomputed: bool = False
    task_fields: dict = {}  # more ExecutorTask fields, for handlers that take them


class Jobs(knarr.BaseHandler[Job, None]):
    """``fanout`` tasks per job (task i gets ``out=i`` appended); records results, errors and groups.

    on_error replaces a task whose args hold ``replace-me`` with one printing ``replaced``; other
    failures get ``on_error`` (RETRY by default).
    """

    def __init__(self, on_error=knarr.ErrorAction.RETRY) -> None:
        self.on_error_action = on_error
        self.results: list[knarr.ExecutorResult] = []
        self.errors: list[knarr.ExecutorError] = []
        self.groups: list[knarr.MessageGroup] = []

    async def arrange(self, messages, pending):
        tasks = []
        for msg in messages:
            job = msg.payload
            for index in range(job.fanout):
                task_id = knarr.make_stable_task_id("job", str(job.id), str(index))
                if job.precomputed:
                    tasks.append(knarr.ExecutorTask(task_id=task_id, source_offsets=[msg.offset],
                                                    precomputed=knarr.PrecomputedResult(stdout=f"pre{job.id}\n")))
                    continue
                args = [*job.args, f"out={index}"] if job.fanout > 1 else job.args
                tasks.append(knarr.ExecutorTask(task_id=task_id, args=args, stdin=job.stdin, env=job.env,
                                                timeout_seconds=job.timeout, source_offsets=[msg.offset]))
        return tasks

    async def on_task_complete(self, result):
        self.results.append(result)

    async def on_error(self, task, error):
        self.errors.append(error)
        if "replace-me" in task.args:
            return [knarr.ExecutorTask(task_id=task.task_id + "-r", args=["out=replaced"], source_offsets=task.source_offsets)]
        return self.on_error_action

    async def on_message_complete(self, group):
        self.groups.append(group)
        return knarr.CollectResult(kafka=[knarr.KafkaPayload(data={
            "id": group.source_message.payload.id, "total": group.total, "succeeded": group.succeeded,
            "failed": group.failed, "stdout": sorted(r.stdout for r in group.results),
        })])


async def run_jobs(bootstrap: str, jobs: list[dict], handler: Jobs | None = None, **executor) -> tuple[Jobs, str, str]:
    """Run ``jobs`` through a worker on fresh topics until every offset is committed; (handler, input, output topic)."""
    handler = handler or Jobs()
    src, out = topics(bootstrap)
    produce_json(bootstrap, src, jobs, partition=0)
    cfg = kafka_config(bootstrap, src, out_topic=out, executor=executor)
    async with running(Worker(cfg, handler)) as worker:
        await wait_until(lambda: committed_offsets(bootstrap, cfg.kafka.consumer_group, src) == {0: len(jobs)},
                         timeout=90, what="every job's offset to be committed")
    assert worker.exit_code == 0
    return handler, src, out


def persistent(**settings) -> dict:
    return {"persistent": {"command": BEHAVE_PERSISTENT, **settings}}


async def _proc_file_of_a_program(tmp_path, name: str) -> str:
    """/proc/<pid>/<name> of a persistent program as it starts (through the trampoline), after it answered a task."""
    from knarr.config.loading import config_from_dict
    from knarr.engine.persistent import ProgramPool

    copy = tmp_path / name
    command = ["sh", "-c", f"cat /proc/$$/{name} > {copy}; exec {shlex.join(BEHAVE_PERSISTENT)}"]
    config = config_from_dict({"executor": {"persistent": {"command": command}},
                               "sinks": {"filesystem": {"out": {"base_path": str(tmp_path)}}}})
    pool = ProgramPool(config.executor, {})
    try:
        outcome = await pool.run(tuple(command), knarr.ExecutorTask(args=["out=ok"]), 30)
    finally:
        await pool.close()
    assert (outcome.exit_code, outcome.stdout) == (0, "ok\n")
    return copy.read_text()


async def test_a_program_starts_with_sigpipe_and_sigxfsz_at_their_defaults(tmp_path):
    """The trampoline is a Python, which ignores both at start-up; the program it becomes must not inherit that."""
    status = await _proc_file_of_a_program(tmp_path, "status")
    assert not signal_set(status, "SigIgn") & {13, 25}  # SIGPIPE, SIGXFSZ


async def test_a_program_runs_under_sched_batch_so_its_wake_ups_never_preempt_the_event_loop(tmp_path):
    stat = await _proc_file_of_a_program(tmp_path, "stat")
    policy = int(stat.rpartition(")")[2].split()[38])  # field 41 of proc(5)'s stat
    assert policy == os.SCHED_BATCH
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the worker itself keeps the default policy


# --- parity with spawn mode -----------------------------------------------------------------------
PARITY_JOBS = [
    {"id": 0, "args": ["out=hello", "err=note"]},
    {"id": 1, "args": ["out=partial", "err=still broken", "exit=4"]},  # retried, then dead-lettered
    {"id": 2, "args": ["out=a"], "fanout": 3},
    {"id": 3, "args": ["stdin"], "stdin": "from stdin\nü\n"},
    {"id": 4, "args": ["env=FROM_CONFIG", "env=FROM_TASK", "env=KNARR_TEST_SECRET"], "env": {"FROM_TASK": "t"}},
    {"id": 5, "args": ["exit=2", "replace-me"]},  # replaced by on_error
    {"id": 6, "precomputed": True},
    {"id": 7, "args": ["bytes=5000"]},  # cut at max_output_bytes
    {"id": 8, "args": ["out=x", "exit=1"], "fanout": 2},  # a fan-out whose tasks fail
]


def outcomes(handler: Jobs) -> dict:
    return {
        "results": sorted((r.task.task_id, r.exit_code, r.stdout, r.stderr, r.attempt, r.stdout_truncated)
                          for r in handler.results),
        "errors": sorted((e.task.task_id, e.reason, e.kind, e.exit_code, e.stderr, e.attempt) for e in handler.errors),
        "groups": sorted((g.source_message.offset, g.total, g.succeeded, g.failed,
                          tuple(sorted(r.stdout for r in g.results))) for g in handler.groups),
    }


def dead_letters(bootstrap: str, src: str, expected: int) -> list[dict]:
    records = [m.json() for m in consume_all(bootstrap, src + "_dlq", expected=expected)]
    for record in records:
        for key in ("id", "timestamp", "source_topic"):
            record.pop(key)
    return sorted(records, key=lambda r: (r["offsets"], r["task"]["task_id"]))


async def test_the_same_workload_gives_the_same_results_groups_and_dead_letters_in_both_modes(kafka_bootstrap, monkeypatch):
    monkeypatch.setenv("KNARR_TEST_SECRET", "s3cret")  # not in env_inherit: neither mode may pass it on
    common = {"max_retries": 2, "max_output_bytes": 1024, "env": {"FROM_CONFIG": "c"}}
    spawned, spawn_src, spawn_out = await run_jobs(kafka_bootstrap, PARITY_JOBS, **common)
    kept, kept_src, kept_out = await run_jobs(kafka_bootstrap, PARITY_JOBS, **common, **persistent())
    # The same programs looking for their next request before they block (knarr.task's poll_seconds).
    polling = {"persistent": {"command": [*BEHAVE_PERSISTENT, "--poll-seconds", "0.002"]}}
    polled, polled_src, _ = await run_jobs(kafka_bootstrap, PARITY_JOBS, **common, **polling)

    assert outcomes(kept) == outcomes(spawned) == outcomes(polled)
    assert len({r.pid for r in kept.results if r.pid}) <= 4  # max_executors programs ran every task
    env_result = next(r for r in kept.results if r.task.args[:1] == ["env=FROM_CONFIG"])
    assert env_result.stdout == "c\nt\n\n"
    summaries = [sorted((m.json() for m in consume_all(kafka_bootstrap, out, expected=len(PARITY_JOBS))),
                        key=lambda s: s["id"]) for out in (spawn_out, kept_out)]
    assert summaries[0] == summaries[1] and len(summaries[0]) == len(PARITY_JOBS)
    spawn_dead = dead_letters(kafka_bootstrap, spawn_src, expected=3)
    assert dead_letters(kafka_bootstrap, kept_src, expected=3) == spawn_dead
    assert dead_letters(kafka_bootstrap, polled_src, expected=3) == spawn_dead
    assert [(r["offsets"], r["task"]["reason"], r["task"]["exit_code"]) for r in spawn_dead] == [
        ([1], "failed", 4), ([8], "failed", 1), ([8], "failed", 1)]


# --- what a program can do wrong ------------------------------------------------------------------
async def test_a_program_killed_mid_task_fails_that_task_as_a_crash_and_the_retry_runs_in_a_new_one(kafka_bootstrap, tmp_path):
    pidfile = tmp_path / "pid"
    jobs = [{"id": 0, "args": [f"hold={pidfile}", "out=after the crash"]}, {"id": 1, "args": ["out=next"]}]
    handler = Jobs()
    src, out = topics(kafka_bootstrap)
    cfg = kafka_config(kafka_bootstrap, src, out_topic=out, executor={"max_executors": 1, "max_retries": 1, **persistent()})
    async with running(Worker(cfg, handler)):
        produce_json(kafka_bootstrap, src, jobs, partition=0)
        killed = int(await wait_until(lambda: pidfile.exists() and pidfile.read_text(), what="the task to start"))
        os.kill(killed, signal.SIGKILL)
        await wait_until(lambda: committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, src) == {0: 2},
                         timeout=60, what="both offsets to be committed")

    [error] = handler.errors
    assert (error.reason, error.kind, error.exit_code, error.pid) == ("crash", "nonzero_exit", -9, killed)
    assert f"(pid {killed}) was killed by signal 9 (SIGKILL) while running the task" in error.stderr
    assert sorted((r.stdout, r.attempt) for r in handler.results) == [("after the crash\n", 2), ("next\n", 1)]
    assert killed not in {r.pid for r in handler.results}
    assert [(g.succeeded, g.failed) for g in handler.groups] == [(1, 0), (1, 0)]


async def test_a_program_that_exits_with_code_0_mid_task_has_not_answered_its_task_crashed(kafka_bootstrap):
    jobs = [{"id": 0, "args": ["quit"]}, {"id": 1, "args": ["out=next"]}]
    handler, _, _ = await run_jobs(kafka_bootstrap, jobs, Jobs(on_error=knarr.ErrorAction.SKIP), max_executors=1,
                                   **persistent())
    [error] = handler.errors
    assert (error.reason, error.exit_code) == ("crash", 0)
    assert "exited with code 0 while running the task" in error.stderr
    assert [r.stdout for r in handler.results] == ["next\n"]


async def test_a_task_past_its_deadline_kills_its_program_and_fails_alone(kafka_bootstrap):
    jobs = [{"id": 0, "args": ["out=before", "count"]}, {"id": 1, "args": ["sleep=60"], "timeout": 1},
            {"id": 2, "args": ["out=after", "count"]}]
    handler, _, _ = await run_jobs(kafka_bootstrap, jobs, Jobs(on_error=knarr.ErrorAction.SKIP), max_executors=1,
                                   **persistent())
    [error] = handler.errors
    assert (error.reason, error.kind, error.exit_code) == ("timeout", "timeout", None)
    assert "timed out after 1s; the program's process group was killed" in error.stderr
    assert not Path(f"/proc/{error.pid}").exists()
    before, after = sorted(handler.results, key=lambda r: r.task.source_offsets)
    assert (before.stdout, after.stdout) == ("before\n1\n", "after\n1\n")  # a new program after the timeout
    assert before.pid == error.pid != after.pid


async def test_a_program_that_writes_no_frame_is_replaced_and_only_its_task_fails(kafka_bootstrap):
    jobs = [{"id": 0, "args": ["garbage"]}, {"id": 1, "args": ["out=fine"]}]
    handler, src, _ = await run_jobs(kafka_bootstrap, jobs, Jobs(on_error=knarr.ErrorAction.SKIP), max_executors=1,
                                     **persistent())
    [error] = handler.errors
    assert (error.reason, error.kind) == ("protocol", "internal")
    assert "malformed frame: expected a frame starting with b'KNRF', got b'this is no f'" in error.stderr
    [result] = handler.results
    assert result.stdout == "fine\n" and result.pid != error.pid


async def test_a_program_past_max_rss_mb_is_replaced_after_the_task_that_grew_it(kafka_bootstrap):
    # behave_persistent.py itself is ~35 MB resident; each leak=100 task takes it past 80.
    jobs = [{"id": i, "args": ["leak=100", "count"] if i < 2 else ["count"]} for i in range(4)]
    handler, _, _ = await run_jobs(kafka_bootstrap, jobs, max_executors=1, **persistent(max_rss_mb=80))
    assert handler.errors == []
    results = sorted(handler.results, key=lambda r: r.task.source_offsets)
    assert [r.stdout for r in results] == ["1\n", "1\n", "1\n", "2\n"]
    assert len({results[0].pid, results[1].pid, results[2].pid}) == 3 and results[2].pid == results[3].pid


async def test_a_program_runs_max_tasks_per_process_then_makes_way_for_a_new_one(kafka_bootstrap):
    jobs = [{"id": i, "args": ["count"]} for i in range(5)]
    handler, _, _ = await run_jobs(kafka_bootstrap, jobs, max_executors=1, **persistent(max_tasks_per_process=2))
    results = sorted(handler.results, key=lambda r: r.task.source_offsets)
    assert [r.stdout for r in results] == ["1\n", "2\n", "1\n", "2\n", "1\n"]
    assert len({r.pid for r in results}) == 3


async def test_an_idle_program_is_stopped_after_max_idle_seconds(kafka_bootstrap):
    handler = Jobs()
    src, out = topics(kafka_bootstrap)
    cfg = kafka_config(kafka_bootstrap, src, out_topic=out, executor=persistent(max_idle_seconds=0.5))
    async with running(Worker(cfg, handler)):
        produce_json(kafka_bootstrap, src, [{"id": 0, "args": ["out=x"]}], partition=0)
        await wait_until(lambda: handler.results, what="the task to finish")
        pid = handler.results[0].pid
        await wait_until(lambda: not Path(f"/proc/{pid}").exists(), timeout=20, what="the idle program to stop")


@pytest.mark.parametrize("prestart", [True, False])
async def test_the_programs_start_with_the_worker_unless_prestart_is_off(kafka_bootstrap, prestart):
    tag = unique_name("prestart")
    handler = Jobs()
    src, out = topics(kafka_bootstrap)
    cfg = kafka_config(kafka_bootstrap, src, out_topic=out,
                       executor={"max_executors": 2, **persistent(prestart=prestart)})
    cfg.executor.persistent.command = [*BEHAVE_PERSISTENT, f"tag={tag}"]
    async with running(Worker(cfg, handler)):
        before_any_message = {pid for pid, _ in processes_with(tag)}
        produce_json(kafka_bootstrap, src, [{"id": 0, "args": ["out=x"]}], partition=0)
        await wait_until(lambda: handler.results, what="the task to finish")
    [result] = handler.results
    if prestart:  # one per slot, up and answering before the worker took a message; the task ran in one
        assert len(before_any_message) == 2 and result.pid in before_any_message
    else:
        assert before_any_message == set()
    assert result.stdout == "x\n"
    assert not processes_gone(tag, 10)


async def test_a_worker_whose_programs_cannot_start_does_not_start_and_takes_no_message(kafka_bootstrap):
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": 0, "args": ["out=x"]}], partition=0)
    handler = Jobs(on_error=knarr.ErrorAction.SKIP)
    cfg = kafka_config(kafka_bootstrap, src, out_topic=out,
                       executor={"persistent": {"command": ["/no/such/program", "--flag"]}})
    with pytest.raises(ProgramsCannotStart) as raised:
        await asyncio.wait_for(Worker(cfg, handler).run(), 60)
    message = str(raised.value)
    assert message.startswith("executor.persistent.command ['/no/such/program', '--flag'] cannot start: no hello frame: ")
    assert "cannot exec '/no/such/program': No such file or directory" in message
    assert "The worker took no message" in message and "executor.persistent.prestart: false" in message
    assert raised.value.exit_code == ExitCode.USAGE
    assert handler.errors == [] and handler.results == []
    assert committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, src) == {}


async def test_a_worker_starts_when_only_some_of_its_programs_can(kafka_bootstrap, tmp_path):
    # The first start takes the lock and runs the program; the one beside it finds the lock and exits.
    lock = tmp_path / "lock"
    command = ["sh", "-c", f"mkdir {lock} 2>/dev/null || exit 3; exec {shlex.join(BEHAVE_PERSISTENT)}"]
    jobs = [{"id": i, "args": [f"out={i}"]} for i in range(6)]
    handler, _, _ = await run_jobs(kafka_bootstrap, jobs, max_executors=2, persistent={"command": command})
    assert sorted(r.stdout for r in handler.results) == [f"{i}\n" for i in range(6)]


async def test_tasks_wait_while_the_configured_program_cannot_start_and_go_on_once_it_can(kafka_bootstrap, tmp_path):
    # The program needs a file that is not there yet (a model still being copied, say).
    flag = tmp_path / "model"
    command = ["sh", "-c", f"[ -f {flag} ] || {{ echo 'no model yet' >&2; exit 3; }}; exec {shlex.join(BEHAVE_PERSISTENT)}"]
    handler = Jobs(on_error=knarr.ErrorAction.SKIP)
    src, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, src, [{"id": i, "args": [f"out={i}"]} for i in range(5)], partition=0)
    cfg = kafka_config(kafka_bootstrap, src, out_topic=out, executor={"max_executors": 2, "persistent": {
        "command": command, "prestart": False, "restart_backoff_base_seconds": 0.05,
        "restart_backoff_max_seconds": 0.3}})
    committed = lambda: committed_offsets(kafka_bootstrap, cfg.kafka.consumer_group, src)  # noqa: E731
    async with running(Worker(cfg, handler)) as worker:
        pool = worker.executor.programs
        await wait_until(lambda: pool.stall is not None, 30, "the tasks to wait for a program")
        failures = metrics.persistent_start_failures._value.get()
        await asyncio.sleep(1.5)  # starts go on being tried meanwhile, and nothing fails or is committed
        assert metrics.persistent_start_failures._value.get() > failures
        ready, why = worker._readiness()
        assert not ready and why.startswith(f"executor.persistent.command {command} cannot start, tasks wait for it: ")
        assert "no model yet" in why and metrics.persistent_stalled._value.get() == 1
        assert handler.errors == [] and handler.results == [] and committed() == {}
        flag.touch()
        await wait_until(lambda: committed() == {0: 5}, 60, "every job done once the program can start")
        assert pool.stall is None and worker._readiness()[0] and metrics.persistent_stalled._value.get() == 0
    assert handler.errors == []
    assert sorted(r.stdout for r in handler.results) == [f"{i}\n" for i in range(5)]


@pytest.mark.parametrize("backoff", [0.05, 20], ids=["short restart backoff", "a backoff longer than the wait"])
async def test_a_task_waiting_for_a_program_that_cannot_start_expires_unrun_at_its_expires_at(tmp_path, backoff):
    # With the long backoff, the wait between two starts (10-20 s) outlasts the task's expires_at (1 s): it
    # still expires then, not a backoff later.
    from knarr.config.loading import config_from_dict
    from knarr.engine.persistent import ProgramPool

    command = ["sh", "-c", "exit 3"]
    config = config_from_dict({"executor": {"persistent": {"command": command, "prestart": False,
                                                           "restart_backoff_base_seconds": backoff,
                                                           "restart_backoff_max_seconds": backoff * 4}},
                               "sinks": {"filesystem": {"out": {"base_path": str(tmp_path)}}}})
    pool = ProgramPool(config.executor, {})
    try:
        started = time.monotonic()
        task = knarr.ExecutorTask(args=["out=x"], expires_at=time.time() + 1.0)
        running = asyncio.create_task(pool.run(tuple(command), task, 30))
        await wait_until(lambda: pool.stall is not None, 10, "the task to wait for a program")
        assert "exited with code 3 while waiting for its hello frame" in pool.stall
        outcome = await running
        waited = time.monotonic() - started
    finally:
        await pool.close()
    assert outcome.expired and outcome.pid is None and 0.9 <= waited < 5, f"expired after {waited:.1f} s"
    assert pool.stall is None  # no task waits any more


async def test_a_task_whose_own_program_cannot_start_is_a_launch_error_naming_the_command(kafka_bootstrap):
    # A task's persistent_command is the task's own doing: its failing to start is that task's failure.
    class OwnProgram(Jobs):
        async def arrange(self, messages, pending):
            return [knarr.ExecutorTask(args=["out=x"], source_offsets=[m.offset],
                                       persistent_command=["/no/such/program", "--flag"]) for m in messages]

    handler, _, _ = await run_jobs(kafka_bootstrap, [{"id": 0}], OwnProgram(on_error=knarr.ErrorAction.SKIP),
                                   **persistent())
    [error] = handler.errors
    assert (error.reason, error.kind, error.pid) == ("launch", "launch_failure", None)
    assert error.exception.startswith("cannot start persistent program ['/no/such/program', '--flag']: ")
    assert "cannot exec '/no/such/program': No such file or directory" in error.exception


async def test_a_task_can_opt_out_of_persistent_mode_or_name_its_own_program(kafka_bootstrap, tmp_path):
    class Mixed(Jobs):
        async def arrange(self, messages, pending):
            return [knarr.ExecutorTask(args=["count"], source_offsets=[m.offset], **m.payload.task_fields)
                    for m in messages]

    jobs = [{"id": 0}, {"id": 1, "task_fields": {"persistent": False}}]
    handler = Mixed()
    await run_jobs(kafka_bootstrap, jobs, handler, binary_path="/bin/echo", **persistent())
    results = sorted(handler.results, key=lambda r: r.task.source_offsets)
    assert [r.stdout for r in results] == ["1\n", "count\n"]  # the program counted; /bin/echo echoed


async def test_a_program_in_c_written_from_the_protocol_document_runs_tasks(kafka_bootstrap, tmp_path):
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "a C compiler (cc or gcc) is needed to build tests/programs/echo_task.c"
    program = tmp_path / "echo_task"
    subprocess.run([compiler, "-O2", "-Wall", "-Werror", "-o", str(program), str(PROGRAMS / "echo_task.c")], check=True)
    jobs = [{"id": 0, "stdin": "hello"}, {"id": 1, "stdin": "fail"}, {"id": 2, "stdin": "crash"},
            {"id": 3, "stdin": "after"}]
    handler, _, _ = await run_jobs(kafka_bootstrap, jobs, Jobs(on_error=knarr.ErrorAction.SKIP), max_executors=1,
                                   persistent={"command": [str(program)]})
    results = sorted(handler.results, key=lambda r: r.task.source_offsets)
    assert [r.stdout for r in results] == [f"{results[0].task.task_id}:hello", f"{results[1].task.task_id}:after"]
    failed, crashed = sorted(handler.errors, key=lambda e: e.task.source_offsets)
    assert (failed.reason, failed.exit_code, failed.stderr) == ("failed", 5, "failed\n")
    assert (crashed.reason, crashed.exit_code) == ("crash", -signal.SIGABRT)
    assert results[0].pid == failed.pid == crashed.pid != results[1].pid


def test_a_task_cannot_both_opt_out_and_name_a_program():
    with pytest.raises(ValueError, match="persistent is False but persistent_command is set"):
        knarr.ExecutorTask(persistent=False, persistent_command=["prog"])


async def test_a_task_asking_for_persistent_mode_with_no_program_set_is_a_launch_error(kafka_bootstrap):
    class Asks(Jobs):
        async def arrange(self, messages, pending):
            return [knarr.ExecutorTask(persistent=True, source_offsets=[m.offset]) for m in messages]

    handler, _, _ = await run_jobs(kafka_bootstrap, [{"id": 0}], Asks(on_error=knarr.ErrorAction.SKIP))
    [error] = handler.errors
    assert error.reason == "launch" and "set executor.persistent.command" in error.exception


async def test_many_tasks_share_few_programs(kafka_bootstrap):
    jobs = [{"id": i, "args": [f"out={i}"]} for i in range(200)]
    started = time.monotonic()
    handler, _, _ = await run_jobs(kafka_bootstrap, jobs, max_executors=4, **persistent())
    assert sorted(int(r.stdout) for r in handler.results) == list(range(200))
    pids = {r.pid for r in handler.results}
    print(f"\n200 tasks on {len(pids)} programs in {time.monotonic() - started:.1f}s")
    assert 1 <= len(pids) <= 4


# --- no program outlives the worker -------------------------------------------------------------
@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_no_program_outlives_a_worker_stopped_or_killed_mid_task(kafka_bootstrap, tmp_path, stop):
    topic, out = unique_name("prog-in"), unique_name("prog-out")
    create_topic(kafka_bootstrap, topic, 1)
    create_topic(kafka_bootstrap, out, 1)
    tag = unique_name("knarrprogram")  # in the programs' command line only
    spec = WorkerSpec(kafka_bootstrap, topic, unique_name("prog-g"), out, drain_timeout_seconds=2,
                      executor_extra={"persistent": {"command": [*BEHAVE_PERSISTENT, f"tag={tag}"]}})
    with WorkerFleet(spec, tmp_path, unique_name("knarrworker")) as fleet:
        worker = fleet.start("w")
        worker.wait_consuming()
        produce_json(kafka_bootstrap, topic, [{"request_id": "busy", "sleep": 60}]
                     + [{"request_id": f"quick{i}"} for i in range(6)], partition=0)
        assert len(processes_with(tag)) == 4  # started with the worker, one per slot (persistent.prestart)
        wait_for(lambda: consume_all(kafka_bootstrap, out, 1, timeout=1), 60,
                 "a quick request's output: the busy one, polled before it, runs")
        if stop == "sigterm":
            assert worker.terminate() == ExitCode.DRAIN_INCOMPLETE  # the busy task outlived the drain
        else:
            worker.kill()
        assert processes_gone(tag, timeout=15) == []


def test_a_program_dies_with_an_embedded_worker_killed_by_sigkill_even_without_containment(tmp_path):
    """No subreaper, cgroup or guard here (an embedded Worker sets none up): the parent-death signal alone.

    The program is mid-task (a long sleep), so the end of its stdin alone would not stop it.
    """
    program = f"""
import asyncio, sys, time
from knarr.api.tasks import ExecutorTask
from knarr.config.loading import config_from_dict
from knarr.engine.persistent import ProgramPool

config = config_from_dict({{"executor": {{"persistent": {{"command": {BEHAVE_PERSISTENT!r}}}}},
                           "sinks": {{"filesystem": {{"out": {{"base_path": {str(tmp_path)!r}}}}}}}}})

async def main():
    pool = ProgramPool(config.executor, {{}})
    command = tuple(config.executor.persistent.command)
    outcome = await pool.run(command, ExecutorTask(args=["count"]), 30)
    busy = asyncio.create_task(pool.run(command, ExecutorTask(args=["sleep=600"]), 900))
    await asyncio.sleep(0.5)  # the request is written: the program is mid-task, its stdin still open
    print("PROGRAM", outcome.pid, outcome.stdout.strip(), flush=True)
    time.sleep(600)

asyncio.run(main())
"""
    parent = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2])
    try:
        line = next(line for line in parent.stdout if line.startswith("PROGRAM "))  # past any log lines
        _, pid, count = line.split()
    finally:
        parent.kill()
        parent.wait(timeout=30)
    assert count == "1"

    def gone() -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    wait_for(gone, 15, "the program to die with its parent")


async def test_programs_of_different_commands_share_the_slots_an_idle_one_making_room(kafka_bootstrap):
    class Named(Jobs):
        async def arrange(self, messages, pending):
            return [knarr.ExecutorTask(args=["count"], source_offsets=[m.offset], **m.payload.task_fields)
                    for m in messages]

    first, second = [*BEHAVE_PERSISTENT, "tag=first"], [*BEHAVE_PERSISTENT, "tag=second"]
    jobs = [{"id": i, "task_fields": {"persistent_command": command}}
            for i, command in enumerate([first, first, second, first])]
    handler, _, _ = await run_jobs(kafka_bootstrap, jobs, Named(), max_executors=1)
    results = sorted(handler.results, key=lambda r: r.task.source_offsets)
    # One slot: starting `second` stopped the idle `first`, so `first` started afresh after it.
    assert [r.stdout for r in results] == ["1\n", "2\n", "1\n", "1\n"]
    assert len({r.pid for r in results}) == 3
