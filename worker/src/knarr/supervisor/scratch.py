"""The supervisor's scratch directory, where its worker processes write their exit reasons.

A supervisor removes its directory when it ends; one killed by SIGKILL (the OOM killer, a node's
eviction) cannot, and a pod's ``/tmp`` is often an ``emptyDir`` that outlives the container, so
each such kill would leave a directory behind for good. A supervisor therefore holds an exclusive
``flock`` on its directory for as long as it runs (the kernel lets go of it when the process dies,
however it dies), and the next supervisor to start under the same temporary directory removes
every ``knarr-supervisor-*`` directory nobody holds. A directory younger than ``IN_THE_MAKING``
is left alone: its supervisor may be between making it and taking hold of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time

PREFIX = "knarr-supervisor-"
IN_THE_MAKING = 60.0  # seconds: a directory nobody holds yet, this young, may be a starting supervisor's


class ScratchDir:
    """This supervisor's directory: made and held at once, removed by ``release()``."""

    def __init__(self, parent: str | None = None) -> None:
        self.parent = parent or tempfile.gettempdir()
        self.path = tempfile.mkdtemp(prefix=PREFIX, dir=self.parent)
        self._fd: int | None = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)  # not inherited (O_CLOEXEC)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new directory: nobody else can hold it
        self.swept = sweep(self.parent, keep=self.path)

    def release(self) -> None:
        """Remove the directory and let go of it (safe to call twice)."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def sweep(parent: str, keep: str = "", now: float | None = None) -> list[str]:
    """Remove the supervisors' directories under ``parent`` that nobody holds and that are older than
    ``IN_THE_MAKING``, but ``keep``; return their paths. What cannot be looked at or removed is left."""
    now = time.time() if now is None else now
    removed = []
    with contextlib.suppress(OSError), os.scandir(parent) as entries:
        for entry in entries:
            if not entry.name.startswith(PREFIX) or entry.path == keep:
                continue
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False) and now - entry.stat(follow_symlinks=False).st_mtime > IN_THE_MAKING \
                        and _unheld(entry.path):
                    shutil.rmtree(entry.path)
                    removed.append(entry.path)
    return removed


def _unheld(path: str) -> bool:
    """True when no running process holds ``path`` (a supervisor killed without its clean-up)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # (closing lets go of the lock taken just now)
    return True
