"""The CPU clocks the benches read: this process's (all threads, its children, one thread, librdkafka's
threads) and the local broker's, when it was started from this checkout."""

from __future__ import annotations

import os
import resource
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def cpu_self() -> float:
    """CPU seconds (user + system) of this process, all threads, children excluded."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_children() -> float:
    """CPU seconds of this process's children reaped so far (in spawn mode: the tasks' processes)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def stat_cpu_seconds(stat: Path) -> float:
    """utime + stime from a /proc stat file (a process's, or one thread's under task/); children not included."""
    return stat_cpu_and_reaped(stat)[0]


def stat_cpu_and_reaped(stat: Path) -> tuple[float, float]:
    """From a process's /proc stat file: its own CPU seconds (utime + stime), and its reaped children's
    (cutime + cstime: the children it has waited for, and theirs)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


def cpu_threads(prefix: str) -> float:
    """CPU seconds of this process's threads whose name (``/proc/self/task/*/comm``) starts with ``prefix``."""
    total = 0.0
    for task in Path("/proc/self/task").iterdir():
        try:
            if (task / "comm").read_text().startswith(prefix):
                total += stat_cpu_seconds(task / "stat")
        except OSError:
            continue  # the thread ended meanwhile
    return total


def cpu_librdkafka() -> float:
    """CPU seconds of this process's librdkafka threads (named rdk:main, rdk:broker..., rdk:queue)."""
    return cpu_threads("rdk:")


def cpu_runner() -> float:
    """CPU seconds of the native runner's thread (runner.c names it knarr-runner): spawning, capturing, reaping."""
    return cpu_threads("knarr-runner")


def cpu_thread() -> float:
    """CPU seconds of the calling thread only (here: the event loop's)."""
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def broker_cpu_seconds() -> float | None:
    """CPU seconds used so far by the local broker (the JVM), if it was started from this checkout."""
    try:
        pid = (REPO_ROOT / ".cache" / "kafka" / "broker.pid").read_text().strip()
        return stat_cpu_seconds(Path(f"/proc/{pid}/stat"))
    except (OSError, IndexError):
        return None


def broker_between(first: float | None, done: float | None) -> float | None:
    """The broker's CPU seconds between two readings of broker_cpu_seconds; None unless both were read."""
    return None if first is None or done is None else done - first
