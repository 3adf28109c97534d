"""How long a thread has waited for a CPU: the kernel's run-queue delay, read from procfs.

A late event loop is either busy (its own callbacks ran long: a synchronous call in a hook) or
starved: ready to run, it waited for a core that other processes held, or for its cgroup's CPU
quota to come round again (a pod at its CPU limit). Only the first is the handler's to fix; the
second is the pod's resources or the node's load. Linux counts the second for every thread:
``/proc/thread-self/schedstat`` holds the time the thread ran, the time it waited on a run queue
while runnable, and how many times it ran. That middle figure, read before and after a probe's
sleep, says how much of the probe's lag was waiting for a CPU. A cgroup's throttled time counts in
it too: a throttled thread stays queued (docs/performance.md has the measurement).

The file is opened on the thread to measure (``thread-self`` names the opener) and re-read with
``pread`` at offset 0, about a microsecond. Where it cannot be opened (not Linux, a kernel
without scheduler statistics), ``read`` gives None and the lag goes unexplained, as before.
"""

from __future__ import annotations

import os

SCHEDSTAT = "/proc/thread-self/schedstat"


class ThreadCpuWait:
    """The calling thread's total time runnable but not running, in seconds (None: not measurable here)."""

    __slots__ = ("_fd",)

    def __init__(self, path: str = SCHEDSTAT) -> None:
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = None
        if self._fd is not None and self.read() is None:  # there, but not the three numbers it should hold
            self.close()

    def read(self) -> float | None:
        if self._fd is None:
            return None
        try:
            fields = os.pread(self._fd, 128, 0).split()
            return int(fields[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def starved_part(lag: float, waited: float | None) -> float | None:
    """How much of a probe's ``lag`` was waiting for a CPU, at most: ``waited`` is the thread's run-queue
    delay from before the probe's sleep to its wake-up. The loop runs other callbacks while the probe
    sleeps, and a wait during one of them early on may have delayed nothing the probe waited for, so
    this bounds the starved part from above; the rest of the lag the loop was busy or blocked.
    None: not measured."""
    if waited is None:
        return None
    return min(lag, max(0.0, waited))
