"""No task process outlives the worker: what `knarr run` sets up so that holds.

Each task runs in its own session, and its process group is killed when the task ends
(processes.py). A process that leaves that session (``setsid``, a double fork) escapes the
group kill. For those, the process that runs the worker (``knarr run``) sets up, before its
event loop starts:

- **Child subreaper** (``PR_SET_CHILD_SUBREAPER``): a detached process whose parent exits is
  re-parented to the worker instead of to init. While the worker runs, the ones that exit are
  reaped (no zombies pile up); when it stops, every one still alive is killed.
- **A cgroup v2 of its own**, where the hierarchy is writable (root, or a delegated cgroup):
  the worker moves itself into ``<its cgroup>/knarr-<pid>``; every task and everything they
  start is born inside it, and ``cgroup.kill`` ends them all at once, detached or not.
- **A guard**: a tiny shell process that holds the read end of a pipe whose write end only
  the worker holds. When the worker process ends — a clean exit, a crash, SIGKILL — the pipe
  reads end-of-file, and the guard kills the cgroup (if there is one) and then every
  process whose environment carries this worker's task tag (``KNARR_TASK_TAG``, which every
  task gets and its children inherit), then exits. The guard ignores SIGTERM/SIGINT/SIGHUP,
  so a signal sent to the worker's whole process group (tini ``-g``) leaves it to finish.

``PR_SET_PDEATHSIG`` is not used for tasks: it has to be set in the child between fork and
exec, which ``posix_spawn`` (vfork) does not allow, and going through a trampoline such as
``setpriv --pdeathsig`` measured +1 ms of CPU and +5 ms of latency per task. The guard
covers the same case (the worker dies first) and, unlike a parent-death signal, reaches
grandchildren too.

A worker embedded in another program (tests, ``Worker(...).run()``) does none of this: these
are process-wide settings that belong to whoever owns the process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
from collections.abc import Iterator
from dataclasses import dataclass

from knarr.observability.logging import get_logger

TASK_TAG_ENV = "KNARR_TASK_TAG"
_PR_SET_CHILD_SUBREAPER = 36
_SWEEP_ROUNDS = 50

log = get_logger(component="containment")

# Runs in /bin/sh. $1: the cgroup directory or "", $2: "KNARR_TASK_TAG=<tag>".
_GUARD_SCRIPT = r"""
trap '' HUP INT TERM QUIT
read -r _ || :
if [ -n "$1" ]; then
  echo 1 > "$1/cgroup.kill" 2>/dev/null
  n=0
  while ! rmdir "$1" 2>/dev/null && [ $n -lt 200 ]; do sleep 0.05; n=$((n + 1)); done
fi
n=0
while [ $n -lt 20 ]; do
  pids=$(grep -lsxzF -e "$2" /proc/[0-9]*/environ | cut -d/ -f3)
  [ -z "$pids" ] && break
  kill -KILL $pids 2>/dev/null
  n=$((n + 1))
  sleep 0.05
done
"""


@dataclass(slots=True)
class Containment:
    """What this process set up; ``active()`` returns it while ``contain_tasks`` runs."""

    tag: str
    subreaper: bool
    cgroup: str | None
    cgroup_note: str
    guard_pid: int | None

    @property
    def task_env(self) -> dict[str, str]:
        return {TASK_TAG_ENV: self.tag}

    def describe(self) -> dict[str, object]:
        return {"subreaper": self.subreaper, "cgroup": self.cgroup or self.cgroup_note, "guard": self.guard_pid is not None}


_active: Containment | None = None


def active() -> Containment | None:
    return _active


# --- pure parts ----------------------------------------------------------------------------------
def cgroup_dir(proc_cgroup: str, mountinfo: str) -> str | None:
    """This process's cgroup v2 directory, from /proc/self/cgroup and /proc/self/mountinfo; None if not on v2."""
    path = next((line[3:] for line in proc_cgroup.splitlines() if line.startswith("0::")), None)
    if path is None:
        return None
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if fields[dash + 1] != "cgroup2":
            continue
        root, mountpoint = fields[3], fields[4]
        if path == root or path.startswith(root.rstrip("/") + "/"):
            inner = path[len(root.rstrip("/")):]
            return mountpoint.rstrip("/") + inner if inner != "/" else mountpoint
    return None


def stat_fields(stat: str) -> tuple[str, int, int]:
    """(state, ppid, session) from a /proc/<pid>/stat line (the command may contain spaces and parentheses)."""
    rest = stat.rsplit(")", 1)[1].split()
    return rest[0], int(rest[1]), int(rest[3])


# --- the process-wide set-up ----------------------------------------------------------------------
def seal_inherited_fds() -> None:
    """Prepare this process for spawning tasks: children must inherit only stdin/out/err.

    posix_spawn does not close descriptors the way ``close_fds=True`` does, and everything
    this process opens is close-on-exec already (Python and librdkafka both ask for it) —
    but descriptors inherited from whoever started the worker are not. Mark them once.
    """
    try:
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd > 2:
            try:
                os.set_inheritable(fd, False)
            except OSError:
                pass  # the listing's own descriptor, already closed


@contextlib.contextmanager
def contain_tasks(use_cgroup: bool = True) -> Iterator[Containment]:
    """Set up the subreaper, the cgroup and the guard for this process; on the way out, kill what tasks left."""
    global _active
    tag = secrets.token_hex(12)
    subreaper = _become_subreaper()
    cgroup, note = _make_own_cgroup() if use_cgroup else (None, "off (executor.task_cgroup)")
    seal_inherited_fds()  # nothing this process inherited may reach the guard (or, later, a task)
    guard_pid = _start_guard(cgroup, tag)  # before moving in: the guard must stay out of the cgroup it kills
    if cgroup is not None:
        cgroup, note = _move_into(cgroup)
    _active = Containment(tag, subreaper, cgroup, note, guard_pid)
    try:
        yield _active
    finally:
        _active = None
        if subreaper:
            kill_detached(guard_pid)
        # The guard does the rest when this process ends and its pipe reads end-of-file: the
        # cgroup cannot be killed from inside (this process is in it), so the pipe stays open.


def _become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _make_own_cgroup() -> tuple[str | None, str]:
    try:
        with open("/proc/self/cgroup") as fh, open("/proc/self/mountinfo") as mi:
            parent = cgroup_dir(fh.read(), mi.read())
    except OSError as exc:
        return None, f"unavailable ({exc.strerror})"
    if parent is None:
        return None, "unavailable (no cgroup v2 hierarchy)"
    own = os.path.join(parent, f"knarr-{os.getpid()}")
    try:
        os.mkdir(own)
    except OSError as exc:
        return None, f"unavailable ({parent} is not writable: {exc.strerror})"
    if not os.path.exists(os.path.join(own, "cgroup.kill")):
        os.rmdir(own)
        return None, "unavailable (the kernel has no cgroup.kill: Linux < 5.14)"
    return own, "own"


def _move_into(own: str) -> tuple[str | None, str]:
    try:
        with open(os.path.join(own, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.rmdir(own)
        return None, f"unavailable (cannot move into {own}: {exc.strerror})"
    return own, "own"


def _start_guard(cgroup: str | None, tag: str) -> int | None:
    """Start the guard; the pipe's write end stays open, unused, until this process ends."""
    read_end, write_end = os.pipe()  # both close-on-exec: no task inherits the write end
    try:
        argv = ["/bin/sh", "-c", _GUARD_SCRIPT, "knarr-task-guard", cgroup or "", f"{TASK_TAG_ENV}={tag}"]
        return os.posix_spawn(
            argv[0], argv, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            file_actions=[(os.POSIX_SPAWN_DUP2, read_end, 0),
                          (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)],
        )
    except OSError as exc:
        os.close(write_end)
        log.warning("task guard not started; a task that detached survives a worker killed by SIGKILL",
                    error=exc.strerror)
        return None
    finally:
        os.close(read_end)


# --- detached processes -------------------------------------------------------------------------
def _children_in_other_sessions(exclude: set[int]) -> list[int]:
    me, session = os.getpid(), os.getsid(0)
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in exclude:
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                _, ppid, sid = stat_fields(fh.read())
        except (OSError, IndexError, ValueError):
            continue
        if ppid == me and sid != session:
            found.append(int(entry))
    return found


def kill_detached(guard_pid: int | None) -> int:
    """Kill every process that left a task's session and was re-parented here; returns how many.

    Tasks run in sessions of their own, so a child of this process in another session came from
    a task (hooks' own subprocesses share the worker's session and are left alone). Killing one
    re-parents its children here, so this repeats until none is left.
    """
    exclude = {guard_pid} if guard_pid else set()
    killed = 0
    for _ in range(_SWEEP_ROUNDS):
        pids = _children_in_other_sessions(exclude)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            killed += 1
    if killed:
        log.info("killed processes that tasks left running detached", count=killed)
    return killed


def reap_detached(leaders: set[int] | dict[int, object]) -> None:
    """Reap detached processes (re-parented here) that have exited; leave every other child alone.

    ``leaders`` are the task processes whose runners will reap them; other children in the
    worker's own session belong to someone else (a hook's subprocess) and are theirs to reap.
    A hook's subprocess started in a new session looks detached and may be reaped here; its
    owner then sees no exit status (subprocess reports 0).
    """
    session = os.getsid(0)
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None or info.si_pid == 0 or info.si_pid in leaders:
            return
        if _active is not None and info.si_pid == _active.guard_pid:
            os.waitpid(info.si_pid, os.WNOHANG)  # killed by someone: reaped, or it would hide the others
            _active.guard_pid = None
            log.warning("the task guard exited; a task that detached survives a worker killed by SIGKILL")
            continue
        try:
            with open(f"/proc/{info.si_pid}/stat") as fh:
                _, _, sid = stat_fields(fh.read())
        except (OSError, IndexError, ValueError):
            return
        if sid == session:
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(info.si_pid, os.WNOHANG)
