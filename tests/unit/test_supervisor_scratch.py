"""The supervisor's scratch directory: held while its supervisor runs, swept once a killed one left it.

The supervisors here are real processes holding a real directory; the kill is SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from knarr.supervisor.scratch import IN_THE_MAKING, PREFIX, ScratchDir, sweep

HOLDER = ("import sys, time\n"
          "from knarr.supervisor.scratch import ScratchDir\n"
          "print(ScratchDir(sys.argv[1]).path, flush=True)\n"
          "time.sleep(120)\n")


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, Path]]:
    """Another supervisor's scratch directory under tmp_path, held by a running process."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        path = Path(proc.stdout.readline().strip())
        assert path.is_dir(), f"the holder made no directory (exit {proc.poll()})"
        yield proc, path
    finally:
        proc.kill()
        proc.wait()


def aged(path: Path, seconds: float = IN_THE_MAKING + 60) -> Path:
    then = time.time() - seconds
    os.utime(path, (then, then))
    return path


def test_a_killed_supervisors_directory_is_removed_by_the_next_one_to_start(holder, tmp_path):
    proc, left = holder
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (left / "process-0.termination").write_text("exit reason")  # what it held is no obstacle
    aged(left)
    mine = ScratchDir(str(tmp_path))
    try:
        assert mine.swept == [str(left)]
        assert not left.exists() and Path(mine.path).is_dir()
    finally:
        mine.release()


def test_a_running_supervisors_directory_is_kept_however_old(holder, tmp_path):
    _, held = holder
    aged(held, 86_400)
    assert sweep(str(tmp_path)) == []
    assert held.is_dir()


def test_a_directory_nobody_holds_yet_is_kept_while_young_it_may_be_a_supervisor_starting(tmp_path):
    young = tmp_path / f"{PREFIX}starting"
    young.mkdir()
    assert sweep(str(tmp_path)) == []
    assert sweep(str(tmp_path), now=time.time() + IN_THE_MAKING + 1) == [str(young)]


def test_other_entries_in_the_temporary_directory_are_left_alone(tmp_path):
    (tmp_path / "knarr-recorder").mkdir()
    (tmp_path / f"{PREFIX}a-file").write_text("not a directory")
    (tmp_path / f"{PREFIX}mine").mkdir()
    for entry in tmp_path.iterdir():
        aged(entry)
    assert sweep(str(tmp_path), keep=str(tmp_path / f"{PREFIX}mine")) == []
    assert sorted(entry.name for entry in tmp_path.iterdir()) == sorted([f"{PREFIX}a-file", f"{PREFIX}mine", "knarr-recorder"])


def test_release_removes_the_directory_and_may_be_called_again(tmp_path):
    mine = ScratchDir(str(tmp_path))
    (Path(mine.path) / "process-1.termination").write_text("reason")
    mine.release()
    mine.release()
    assert not Path(mine.path).exists()
