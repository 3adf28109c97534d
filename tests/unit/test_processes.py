"""Running one subprocess: output, stdin, exit codes, deadlines, and nothing left behind.

Every test runs twice: through the spawner thread and through the native runner (executor.spawner).
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

import pytest
from knarr.engine import native, processes
from knarr.engine.containment import seal_inherited_fds
from knarr.engine.processes import launch_problem

from tests.worker.harness import BEHAVE
from tests.worker.procs import alive_with, stdout_memfd_sizes

run_process = processes.run_process  # each test's spawner is chosen by the fixture below


@pytest.fixture(autouse=True, params=["thread", "native"])
def spawner_kind(request, monkeypatch):
    if request.param == "native":
        runner = native.runner()

        async def through_the_native_runner(*args, **kwargs):
            assert runner.claim(asyncio.get_running_loop()), "the native runner serves another open loop"
            return await processes.run_process(*args, runner=runner, **kwargs)

        monkeypatch.setitem(globals(), "run_process", through_the_native_runner)
    return request.param


async def test_stdout_stderr_and_the_exit_code_are_captured():
    out = await run_process([BEHAVE, "out=hello", "err=oops", "exit=7"], stdin=None, env=None, timeout=10)
    assert (out.exit_code, out.stdout, out.stderr) == (7, "hello\n", "oops\n")
    assert out.pid is not None and not out.timed_out


async def test_stdin_reaches_the_process_even_beyond_the_pipe_buffer():
    text = "line\n" * 100_000  # 500 kB: more than a pipe holds, so writing must not block the loop
    out = await run_process([BEHAVE, "stdin"], stdin=text, env=None, timeout=10)
    assert out.exit_code == 0 and out.stdout == text


async def test_large_output_is_read_completely():
    out = await run_process([BEHAVE, "bytes=300000"], stdin=None, env=None, timeout=10)
    assert out.stdout == "x" * 300000 + "\n"


async def test_the_environment_is_passed_as_given():
    out = await run_process([BEHAVE, "env=KNARR_TEST_VALUE"], stdin=None, env={"KNARR_TEST_VALUE": "42"}, timeout=10)
    assert out.stdout == "42\n"


async def test_a_task_without_stdin_data_reads_dev_null_read_only():
    script = "readlink /proc/self/fd/0; cat; echo x >&0 2>/dev/null || echo read-only"
    out = await run_process(["sh", "-c", script], stdin=None, env=None, timeout=10)
    assert (out.exit_code, out.stdout) == (0, "/dev/null\nread-only\n")


async def test_the_child_inherits_only_stdin_stdout_and_stderr():
    leaked_r, leaked_w = os.pipe()
    os.set_inheritable(leaked_w, True)  # as if inherited from whoever started the worker
    try:
        seal_inherited_fds()
        out = await run_process([BEHAVE, "fds"], stdin=None, env=None, timeout=10)
    finally:
        os.close(leaked_r)
        os.close(leaked_w)
    # 0-2, plus what the shell itself opens to read its script (dash uses fd 10) and ls's own
    assert set(out.stdout.split()) <= {"0", "1", "2", "3", "10"}


async def test_a_missing_binary_is_a_launch_error_naming_it():
    out = await run_process(["/no/such/tool"], stdin=None, env=None, timeout=10)
    assert out.exit_code == -1 and out.pid is None
    assert out.launch_error.startswith("cannot start '/no/such/tool': No such file or directory")


async def test_a_file_that_is_not_executable_is_a_launch_error(tmp_path):
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\necho hi\n")
    out = await run_process([str(script)], stdin=None, env=None, timeout=10)
    assert "Permission denied" in out.launch_error


async def test_a_bare_name_is_looked_up_on_the_workers_path_past_an_entry_it_may_not_run(tmp_path, monkeypatch):
    denied, allowed = tmp_path / "denied", tmp_path / "allowed"
    denied.mkdir()
    allowed.mkdir()
    (denied / "knarr-probe").write_text("#!/bin/sh\necho wrong\n")
    (allowed / "knarr-probe").write_text("#!/bin/sh\necho found\n")
    (allowed / "knarr-probe").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'none'}:{denied}:{allowed}")
    out = await run_process(["knarr-probe"], stdin=None, env={}, timeout=10)
    assert (out.exit_code, out.stdout) == (0, "found\n")


async def test_a_bare_name_found_only_where_it_may_not_run_is_permission_denied(tmp_path, monkeypatch):
    (tmp_path / "knarr-probe").write_text("#!/bin/sh\necho wrong\n")
    monkeypatch.setenv("PATH", f"{tmp_path / 'none'}:{tmp_path}")
    out = await run_process(["knarr-probe"], stdin=None, env=None, timeout=10)
    assert out.launch_error.startswith("cannot start 'knarr-probe': Permission denied")


async def test_a_bare_name_on_no_path_entry_is_no_such_file(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    out = await run_process(["knarr-no-such-probe"], stdin=None, env=None, timeout=10)
    assert out.launch_error.startswith("cannot start 'knarr-no-such-probe': No such file or directory")



def _condemned(pid: int) -> bool:
    """Gone, a zombie, or already sent SIGKILL: it will never run another instruction of its own."""
    try:
        with open(f"/proc/{pid}/stat") as st:
            if st.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                return True
        with open(f"/proc/{pid}/status") as status:
            pending = [int(line.split()[1], 16) for line in status if line.startswith(("SigPnd", "ShdPnd"))]
    except (OSError, IndexError):
        return True
    return any(mask & (1 << (signal.SIGKILL - 1)) for mask in pending)


async def _assert_nothing_survives(marker: str) -> None:
    """Stragglers are SIGKILLed before run_process returns; the kernel finishes them a moment later."""
    import asyncio

    assert all(_condemned(pid) for pid in alive_with(marker))
    for _ in range(200):
        if not alive_with(marker):
            return
        await asyncio.sleep(0.01)
    assert alive_with(marker) == []


async def test_the_deadline_kills_the_whole_process_group():
    marker = f"31.{uuid.uuid4().int % 10**6:06d}"
    out = await run_process([BEHAVE, f"spawn={marker}", f"sleep={marker}"], stdin=None, env=None, timeout=0.5)
    assert out.timed_out and out.exit_code == -1
    assert "timed out after 0.5s" in out.stderr
    await _assert_nothing_survives(marker)


async def test_background_children_do_not_outlive_a_task_that_exits_normally():
    marker = f"32.{uuid.uuid4().int % 10**6:06d}"
    out = await run_process([BEHAVE, f"spawn={marker}", "out=done"], stdin=None, env=None, timeout=5)
    assert out.exit_code == 0 and "done" in out.stdout
    await _assert_nothing_survives(marker)


async def test_cancelling_the_run_kills_the_process_group():
    import asyncio

    marker = f"33.{uuid.uuid4().int % 10**6:06d}"
    task = asyncio.create_task(run_process([BEHAVE, f"sleep={marker}"], stdin=None, env=None, timeout=60))
    for _ in range(100):
        if alive_with(marker):
            break
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):
        if not alive_with(marker):
            break
        await asyncio.sleep(0.02)
    assert alive_with(marker) == []


async def test_five_megabytes_of_stdout_are_read_completely():
    out = await run_process(["head", "-c", "5000000", "/dev/zero"], stdin=None, env=None, timeout=10)
    assert out.exit_code == 0
    assert len(out.stdout) == 5_000_000 and out.stdout == "\0" * 5_000_000


async def test_stdin_round_trips_through_cat_including_non_ascii_text():
    text = "héllo\nwörld ✓\n"
    out = await run_process(["cat"], stdin=text, env=None, timeout=10)
    assert (out.exit_code, out.stdout, out.stderr) == (0, text, "")


async def test_several_megabytes_of_stdin_reach_the_process_in_order():
    text = "".join(f"{i:07d}\n" for i in range(1_000_000))  # 8 MB, every line distinct
    out = await run_process(["cat"], stdin=text, env=None, timeout=20)
    assert out.exit_code == 0 and out.stdout == text


async def test_empty_stdin_reads_as_end_of_file():
    out = await run_process(["wc", "-c"], stdin="", env=None, timeout=10)
    assert out.stdout.strip() == "0"


async def test_without_stdin_the_process_reads_dev_null():
    out = await run_process(["wc", "-c"], stdin=None, env=None, timeout=10)
    assert out.exit_code == 0 and out.stdout.strip() == "0"


async def test_stderr_is_captured_separately_from_stdout():
    out = await run_process(["sh", "-c", "echo to-out; echo to-err >&2; echo more-out"], stdin=None, env=None, timeout=10)
    assert out.stdout == "to-out\nmore-out\n"
    assert out.stderr == "to-err\n"


async def test_output_that_is_not_utf8_is_decoded_with_replacement_characters():
    out = await run_process(["printf", "a\\377b"], stdin=None, env=None, timeout=10)
    assert out.stdout == "a\ufffdb"


async def test_the_deadline_kills_a_backgrounded_grandchild_and_leaves_no_process_behind():
    marker = f"34.{uuid.uuid4().int % 10**6:06d}"
    out = await run_process(["sh", "-c", f"sleep {marker} & sleep {marker}"], stdin=None, env=None, timeout=0.5)
    assert out.timed_out and out.exit_code == -1
    assert out.stderr == "task timed out after 0.5s; its process group was killed"
    assert out.duration_seconds < 5
    await _assert_nothing_survives(marker)
    with pytest.raises(ChildProcessError):  # the direct child was reaped, not left a zombie
        os.waitpid(out.pid, os.WNOHANG)


async def test_output_written_before_the_deadline_is_kept():
    out = await run_process(["sh", "-c", "echo partial; exec sleep 30"], stdin=None, env=None, timeout=0.5)
    assert out.timed_out and out.stdout == "partial\n"


async def _running(marker: str) -> list[int]:
    """The one process whose command line holds ``marker``, once it runs and its run has it.

    The process shows a moment before the spawner thread hands it over; a run given up in that
    moment leaves the process to the thread, which kills and reaps it as it finishes the spawn.
    These tests give up a run that has its process, so they wait for the hand-over too."""
    for _ in range(200):
        if pids := alive_with(marker):
            break
        await asyncio.sleep(0.01)
    assert len(pids) == 1
    await asyncio.sleep(0.1)
    return pids


async def test_cancelling_the_run_reaps_the_child_before_the_cancellation_returns():
    import asyncio

    marker = f"35.{uuid.uuid4().int % 10**6:06d}"
    task = asyncio.create_task(run_process(["sleep", marker], stdin=None, env=None, timeout=60))
    pids = await _running(marker)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(ChildProcessError):  # already reaped: no zombie waiting for a later callback
        os.waitpid(pids[0], os.WNOHANG)
    assert alive_with(marker) == []


async def test_a_run_dropped_unfinished_kills_and_reaps_its_task():
    """A coroutine closed mid-run (a loop torn down without cancelling it) still leaves nothing running."""
    marker = f"36.{uuid.uuid4().int % 10**6:06d}"
    run = run_process(["sleep", marker], stdin=None, env=None, timeout=60)
    run.send(None)  # submitted; now waiting
    pids = await _running(marker)
    run.close()
    assert alive_with(marker) == []
    with pytest.raises(ChildProcessError):  # reaped, not left for anyone
        os.waitpid(pids[0], os.WNOHANG)


def _open_fds() -> tuple[set[str], int]:
    """This process's descriptors other than task memfds, and how many task memfds are open: the
    native runner keeps up to FRESH_PAIRS pairs made ahead, and closes a task's on its own thread."""
    others, memfds = set(), 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the listing's own descriptor, or one the runner just closed
            continue
        if target.startswith(("/memfd:knarr-stdout", "/memfd:knarr-stderr", "/memfd:knarr-stdin")):
            memfds += 1
        else:
            others.add(fd)
    return others, memfds


# Made ahead (two per pair), plus those of the last few tasks (the spawner thread's, closed as they end).
MEMFDS_AT_REST = 2 * native.FRESH_PAIRS + 3 * 4


async def test_no_descriptor_is_left_open_whatever_the_outcome(tmp_path):
    import asyncio

    await run_process(["true"], stdin=None, env=None, timeout=10)  # let the loop open whatever it keeps
    before, _ = _open_fds()
    await run_process(["cat"], stdin="some input\n", env=None, timeout=10)
    await run_process(["sh", "-c", "echo x >&2; exit 3"], stdin=None, env=None, timeout=10)
    await run_process(["sleep", "30"], stdin="unread", env=None, timeout=0.2)
    await run_process(["/no/such/tool"], stdin="unread", env=None, timeout=10)
    task = asyncio.create_task(run_process(["sleep", "30"], stdin="unread", env=None, timeout=60))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    others, memfds = _open_fds()
    assert others == before
    assert memfds <= MEMFDS_AT_REST


async def test_task_memfds_do_not_pile_up_over_many_tasks():
    async def one(i: int) -> None:
        ran = await run_process(["sh", "-c", "cat; echo err >&2"], stdin=f"task {i}\n", env=None, timeout=10)
        assert (ran.stdout, ran.stderr) == (f"task {i}\n", "err\n")

    for start in range(0, 400, 4):
        await asyncio.gather(*(one(i) for i in range(start, start + 4)))
    _, memfds = _open_fds()
    assert memfds <= MEMFDS_AT_REST


# --- arguments exec cannot take --------------------------------------------------------------------
async def test_a_nul_byte_in_an_argument_is_a_launch_error_naming_the_argument():
    out = await run_process(["echo", "fine", "grep\0pattern"], stdin=None, env=None, timeout=10)
    assert out.exit_code == -1 and out.pid is None
    assert out.launch_error.startswith("cannot start 'echo': argument 2 ('grep\\x00pattern') contains a NUL byte at position 4")


async def test_an_environment_name_with_an_equals_sign_is_a_launch_error_that_does_not_show_values():
    out = await run_process(["true"], stdin=None, env={"PATH": os.environ["PATH"], "A=B": "s3cret"}, timeout=10)
    assert "environment variable name 'A=B' is empty or contains '='" in out.launch_error
    assert "s3cret" not in out.launch_error


async def test_a_nul_byte_in_an_environment_value_is_a_launch_error_naming_the_variable_only():
    out = await run_process(["true"], stdin=None, env={"TOKEN": "s3c\0ret"}, timeout=10)
    assert "environment variable TOKEN contains a NUL byte" in out.launch_error
    assert "s3c" not in out.launch_error


async def test_stdin_that_cannot_be_encoded_is_a_launch_error():
    out = await run_process(["cat"], stdin="lone \ud800 surrogate", env=None, timeout=10)
    assert "stdin holds a character that cannot be encoded" in out.launch_error


async def test_a_nul_byte_on_stdin_is_data_and_reaches_the_process():
    out = await run_process(["wc", "-c"], stdin="a\0b", env=None, timeout=10)
    assert out.exit_code == 0 and out.stdout.strip() == "3"


def test_launch_problem_names_a_non_text_argument_by_its_position():
    assert launch_problem(["tool", "ok", 3], None).startswith("argument 2 ('3') is a int, not text")


def test_launch_problem_finds_nothing_wrong_with_ordinary_arguments():
    assert launch_problem(["tool", "héllo", ""], {"PATH": "/bin"}, "data\0more") is None


# --- output kept to max_output_bytes ---------------------------------------------------------------
async def test_stdout_beyond_the_cap_is_cut_to_its_head_and_flagged():
    out = await run_process(["sh", "-c", "printf start; head -c 5000000 /dev/zero"], stdin=None, env=None,
                            timeout=10, max_output_bytes=1000)
    assert out.exit_code == 0
    assert out.stdout_truncated and not out.stderr_truncated
    assert len(out.stdout) == 1000 and out.stdout.startswith("start\0")


async def test_output_of_exactly_the_cap_is_not_flagged_as_truncated():
    out = await run_process(["head", "-c", "1000", "/dev/zero"], stdin=None, env=None, timeout=10, max_output_bytes=1000)
    assert len(out.stdout) == 1000 and not out.stdout_truncated


async def test_stderr_is_capped_on_its_own():
    out = await run_process(["sh", "-c", "echo short; head -c 3000 /dev/zero >&2"], stdin=None, env=None,
                            timeout=10, max_output_bytes=1024)
    assert (out.stdout, out.stdout_truncated) == ("short\n", False)
    assert len(out.stderr) == 1024 and out.stderr_truncated


async def test_a_task_that_keeps_printing_never_grows_its_output_file_far_past_the_cap():
    import asyncio

    # 40 MiB in 1 MiB bursts, 20 ms apart: unchecked, the memfd would end at 40 MiB.
    script = "for i in $(seq 40); do head -c 1048576 /dev/zero; sleep 0.02; done"
    run = asyncio.create_task(run_process(["sh", "-c", script], stdin=None, env=None, timeout=30, max_output_bytes=65536))
    largest = 0
    while not run.done():
        largest = max([largest, *stdout_memfd_sizes()])
        await asyncio.sleep(0.005)  # sampling pace, not synchronisation: the loop ends when the run does
    out = run.result()
    assert out.exit_code == 0 and out.stdout_truncated and len(out.stdout) == 65536
    assert 0 < largest <= 65536 + 8 * 1048576


async def test_arguments_over_the_kernels_limit_are_a_launch_error_that_says_what_to_do():
    out = await run_process(["echo", "x" * 200_000] * 20, stdin=None, env=None, timeout=10)
    assert "Argument list too long" in out.launch_error and "pass bulk data on stdin" in out.launch_error
