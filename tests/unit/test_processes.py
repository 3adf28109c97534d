"""Running one subprocess: output, stdin, exit codes, deadlines, and nothing left behind."""

from __future__ import annotations

import os
import uuid

import pytest

from knarr.engine.processes import seal_inherited_fds, run_process
from tests.worker.harness import BEHAVE


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


def _alive_with(marker: str) -> list[int]:
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if marker.encode() in fh.read():
                    with open(f"/proc/{pid}/stat") as st:
                        if st.read().split(")")[-1].split()[0] != "Z":
                            pids.append(int(pid))
        except OSError:
            pass
    return pids


async def test_the_deadline_kills_the_whole_process_group():
    marker = f"31.{uuid.uuid4().int % 10**6:06d}"
    out = await run_process([BEHAVE, f"spawn={marker}", f"sleep={marker}"], stdin=None, env=None, timeout=0.5)
    assert out.timed_out and out.exit_code == -1
    assert "timed out after 0.5s" in out.stderr
    assert _alive_with(marker) == []


async def test_background_children_do_not_outlive_a_task_that_exits_normally():
    marker = f"32.{uuid.uuid4().int % 10**6:06d}"
    out = await run_process([BEHAVE, f"spawn={marker}", "out=done"], stdin=None, env=None, timeout=5)
    assert out.exit_code == 0 and "done" in out.stdout
    assert _alive_with(marker) == []


async def test_cancelling_the_run_kills_the_process_group():
    import asyncio

    marker = f"33.{uuid.uuid4().int % 10**6:06d}"
    task = asyncio.create_task(run_process([BEHAVE, f"sleep={marker}"], stdin=None, env=None, timeout=60))
    for _ in range(100):
        if _alive_with(marker):
            break
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(100):
        if not _alive_with(marker):
            break
        await asyncio.sleep(0.02)
    assert _alive_with(marker) == []
