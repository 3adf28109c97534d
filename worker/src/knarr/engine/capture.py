"""A task's stdout or stderr: an in-memory file the child writes to, kept to a byte cap.

The child writes into a memfd (see processes.py for why not a pipe). A memfd grows without
bound, and reading it whole put a task's entire output into the worker's memory: four tasks
printing 50 MB each took the worker to 310 MB. Two bounds now hold:

- **The worker reads at most the cap** (the head of the stream), into one buffer of the
  kept size; nothing past the cap ever enters the worker's memory.
- **The memfd itself stops growing** while the task runs: the child's descriptor shares its
  file offset with ours, so when the file has passed the cap we move that shared offset back
  to the cap and cut the file there. The child's later writes land just past the cap and are
  cut again at the next check; the child never sees an error, so a task that prints too much
  still runs to its own end. Between checks the file can overshoot by what the child writes
  in that interval: the first check comes after 5 ms, checks stay that frequent while the
  output grows by a megabyte or more between them, and back off to once a second otherwise
  (a task logging a line now and then costs a few wake-ups, not hundreds).

This module does both for tasks the spawner thread starts; the native runner's thread does the
same in C (worker/native/runner.c), with the timings below, which it is given when it starts.
"""

from __future__ import annotations

import codecs
import ctypes
import os

FIRST_CHECK_SECONDS = 0.005
LAST_CHECK_SECONDS = 1.0
FAST_GROWTH_BYTES = 1024 * 1024


def next_check_delay(previous: float, grown: int) -> float:
    """How long until the next size check: soon while the output floods in, backing off otherwise."""
    if grown >= FAST_GROWTH_BYTES:
        return FIRST_CHECK_SECONDS
    return min(LAST_CHECK_SECONDS, previous * 2)


def decode_head(data: bytes | bytearray | memoryview | ctypes.Array, truncated: bool) -> str:
    """Decode kept output (any buffer). A cut can split a UTF-8 sequence: the partial character is
    dropped, not replaced."""
    if not truncated:
        return str(data, "utf-8", "replace")
    return codecs.getincrementaldecoder("utf-8")(errors="replace").decode(data, final=False)


class CapturedStream:
    """One output stream of one task. ``truncated`` says whether anything past the cap was dropped."""

    __slots__ = ("fd", "cap", "truncated", "_seen")

    def __init__(self, name: str, cap: int) -> None:
        self.fd = os.memfd_create(name, os.MFD_CLOEXEC)
        self.cap = cap
        self.truncated = False
        self._seen = 0

    @classmethod
    def adopt(cls, fd: int, cap: int) -> CapturedStream:
        """A stream over a memfd made elsewhere (the spawner thread's, or the native runner's made ahead)."""
        stream = cls.__new__(cls)
        stream.fd, stream.cap, stream.truncated, stream._seen = fd, cap, False, 0
        return stream

    def limit(self) -> int:
        """Cut the file back to the cap if the child wrote past it; returns how much it grew since the last call."""
        size = os.fstat(self.fd).st_size
        grown = max(0, size - self._seen)
        if size > self.cap:
            # Offset first: a write racing with the cut then lands past the cap and is cut too.
            os.lseek(self.fd, self.cap, os.SEEK_SET)
            os.ftruncate(self.fd, self.cap)
            self.truncated = True
            size = self.cap
        self._seen = size
        return grown

    def read(self) -> str:
        """The kept head of the stream, decoded; call once the task (and its group) has ended."""
        size = os.fstat(self.fd).st_size
        if size > self.cap:
            self.truncated = True
        keep = min(size, self.cap)
        if not keep:
            return ""
        buffer = bytearray(keep)
        view = memoryview(buffer)
        filled = 0
        while filled < keep:
            got = os.preadv(self.fd, [view[filled:]], filled)
            if not got:
                break  # shrunk under us: a descendant that left the group truncated it
            filled += got
        view.release()
        if filled < keep:
            del buffer[filled:]
        return decode_head(buffer, self.truncated)

    def close(self) -> None:
        os.close(self.fd)
