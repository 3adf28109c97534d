"""Starting task processes off the event loop: one spawner thread calling libc's posix_spawnp.

The engine's default is the native runner (native.py), which does this and the reaping in C;
this thread serves ``executor.spawner: thread``, and every task where the runner is not built.

The event loop never runs fork, exec or posix_spawn itself. ``os.posix_spawnp`` holds the GIL
for the whole call (CPython's ``py_posix_spawn`` in Modules/posixmodule.c calls posix_spawn
without ``Py_BEGIN_ALLOW_THREADS``), and the calling thread sits in it until the child has
exec'd (vfork semantics): run on the loop, that stalled every coroutine for each spawn; run in
another thread, it stalls them just the same through the GIL. libc's ``posix_spawnp`` called
through ctypes releases the GIL for the call, so the loop keeps running while the child
starts. bench/spawners.py measures this beside the other ways (the loop itself, a thread
calling os.posix_spawnp, a helper process) and the same spawns from C.

What a spawn does, all of it on the spawner thread: the memfds for stdout and stderr (and
stdin, written and rewound), the spawn in a new session with SIGPIPE and SIGXFSZ back at
their defaults, and a pidfd for the child. The loop puts a request on a queue and awaits a
future; results come back in batches, one wake-up of the loop for however many spawns
finished meanwhile.

Launch failures keep their meaning: exec's errno comes back as the ``OSError`` os.posix_spawnp
would raise, and arguments exec cannot take (a NUL byte, a name with '=') as the ``ValueError``
or ``TypeError``. A request abandoned by its task (cancelled while queued or spawning) is
cleaned up by whichever side sees it last: its process group is killed and reaped, its
descriptors closed. An unexpected error while starting one task fails that task only, with
the reason; if the thread itself dies, the requests it holds fail with that reason and the
next spawn starts a new thread.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import queue
import signal
import sys
import threading
from collections import deque
from dataclasses import dataclass

from knarr.engine.capture import CapturedStream
from knarr.observability.logging import get_logger

_POSIX_SPAWN_SETSIGDEF = 0x04  # glibc's values (spawn.h); os exposes them only as keyword arguments
_POSIX_SPAWN_SETSID = 0x80
_SIGSET_BYTES = 128  # sizeof(sigset_t) on glibc
_ATTR_BYTES = 512  # sizeof(posix_spawnattr_t) is 336 on glibc x86-64/arm64; room to spare
_ACTIONS_BYTES = 256  # sizeof(posix_spawn_file_actions_t) is 80

# Two views of libc. The spawn itself goes through CDLL, which releases the GIL for the call;
# the cheap calls around it go through PyDLL, which keeps it: each release is a point where
# the loop may take the GIL and the spawner then waits for the loop's next release.
_LIBC_PATH = ctypes.util.find_library("c")
_libc = ctypes.CDLL(_LIBC_PATH, use_errno=True)
_libc_held = ctypes.PyDLL(_LIBC_PATH, use_errno=True)
_posix_spawnp = _libc.posix_spawnp
_posix_spawnp.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                          ctypes.c_void_p, ctypes.c_void_p]
_posix_spawnp.restype = ctypes.c_int
_actions_init = _libc_held.posix_spawn_file_actions_init
_actions_init.argtypes = [ctypes.c_void_p]
_actions_destroy = _libc_held.posix_spawn_file_actions_destroy
_actions_destroy.argtypes = [ctypes.c_void_p]
_actions_dup2 = _libc_held.posix_spawn_file_actions_adddup2
_actions_dup2.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
_actions_open = _libc_held.posix_spawn_file_actions_addopen
_actions_open.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
_memfd_create = _libc_held.memfd_create
_memfd_create.argtypes = [ctypes.c_char_p, ctypes.c_uint]
_environ = ctypes.c_void_p.in_dll(_libc, "environ")

# Python ignores these at start-up and an ignored signal stays ignored across exec: without the
# reset, `yes | head -1` in a task's shell prints "Broken pipe" and a file past RLIMIT_FSIZE gives
# EFBIG instead of the signal. subprocess (restore_signals=True) resets the same two.
RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)


def _memfd(name: bytes) -> int:
    fd = _memfd_create(name, os.MFD_CLOEXEC)
    if fd < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return fd


log = get_logger(component="spawner")
_DEVNULL = os.fsencode(os.devnull)
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()
_WAKE_EVERY = 8

# Task processes started and not yet reaped by their runner (detached orphans are not here).
leaders: set[int] = set()
# Held from just before a spawn until its child is in ``leaders``. Containment's sweep of exited
# detached processes (children in other sessions that are not leaders) runs only when it can
# take this lock, so it can never reap a task's process that exists but is not listed yet.
listing = threading.Lock()


@dataclass(slots=True)
class Spawned:
    """A started child, its pidfd, and the memfds its stdout and stderr go to."""

    pid: int
    pidfd: int
    out: CapturedStream
    err: CapturedStream

    def discard(self) -> None:
        """Kill the group, reap the leader, close every descriptor (an abandoned spawn)."""
        _kill_and_reap(self.pid)
        os.close(self.pidfd)
        self.out.close()
        self.err.close()


def _kill_and_reap(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    leaders.discard(pid)


class SpawnerFailed(Exception):
    """The spawner thread failed while holding this request; ``str()`` says how."""


class _Request:
    __slots__ = ("argv", "env", "stdin", "cap", "loop", "future", "result", "abandoned")

    def __init__(self, argv, env, stdin, cap, loop, future) -> None:
        self.argv = argv
        self.env = env
        self.stdin = stdin
        self.cap = cap
        self.loop = loop
        self.future = future
        self.result: Spawned | BaseException | None = None
        self.abandoned = False


# --- building what posix_spawnp takes ----------------------------------------------------------
def c_strings(items: list[bytes]) -> ctypes.Array:
    array = (ctypes.c_char_p * (len(items) + 1))()
    array[:-1] = items
    return array


def exec_arg(value: object) -> bytes:
    if not isinstance(value, str | bytes | os.PathLike):
        raise TypeError(f"expected str, bytes or os.PathLike object, not {type(value).__name__}")
    encoded = os.fsencode(value)
    if b"\0" in encoded:
        raise ValueError("embedded null byte")
    return encoded


def exec_block(argv: list[object]) -> bytes:
    """``argv`` as exec takes it, in one bytes: each argument ended by a NUL (the bytes object's own
    ends the last). Raises what exec_arg does. Joined and encoded at once when every argument is a
    str: a tenth of the time of encoding them one by one into a ctypes array."""
    if not argv:
        raise ValueError("argv is empty: the first item is the program to run")
    try:
        joined = "\0".join(argv)
    except TypeError:  # bytes or paths among them: one at a time
        return b"\0".join(exec_arg(a) for a in argv)
    if joined.count("\0") != len(argv) - 1:
        raise ValueError("embedded null byte")
    return joined.encode(_FS_ENCODING, _FS_ERRORS)  # as os.fsencode does, without its Python frame


def _env_entries(env: dict[str, str]) -> list[bytes]:
    entries = []
    for name, value in env.items():
        key = exec_arg(name)
        if not key or b"=" in key:
            raise ValueError("illegal environment variable name")
        entries.append(key + b"=" + exec_arg(value))
    return entries


class EnvCache:
    """The encoded form of the last few environments seen (the executor passes the same one to most tasks).

    Keyed by the dict's identity, checked against a copy: a dict changed since it was encoded is
    encoded again, never sent stale.
    """

    def __init__(self, size: int = 4) -> None:
        self._entries: deque[tuple[dict, dict, ctypes.Array]] = deque(maxlen=size)

    def encoded(self, env: dict[str, str]) -> ctypes.Array:
        for cached, snapshot, array in self._entries:
            if cached is env and snapshot == env:
                return array
        array = c_strings(_env_entries(env))
        self._entries.append((env, dict(env), array))
        return array


def _stdin_memfd(stdin: str) -> int:
    fd = os.memfd_create("knarr-stdin", os.MFD_CLOEXEC)
    try:
        data = memoryview(stdin.encode())
        while data:
            data = data[os.write(fd, data):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd


class Spawner:
    """One thread that starts every task process of this worker; submit() from any event loop."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._lock = threading.Lock()  # a request's result vs. its abandonment; the completion batches
        self._done: dict[asyncio.AbstractEventLoop, list[_Request]] = {}
        self._env = EnvCache()
        self._attr = ctypes.create_string_buffer(_ATTR_BYTES)
        self._defaults = ctypes.create_string_buffer(_SIGSET_BYTES)
        _libc.sigemptyset(self._defaults)
        for number in RESET_SIGNALS:
            _libc.sigaddset(self._defaults, int(number))
        _libc.posix_spawnattr_init(self._attr)
        _libc.posix_spawnattr_setsigdefault(self._attr, self._defaults)
        _libc.posix_spawnattr_setflags(self._attr, ctypes.c_short(_POSIX_SPAWN_SETSID | _POSIX_SPAWN_SETSIGDEF))

    # --- the loop's side ---------------------------------------------------------------------
    async def spawn(self, argv: list[str], stdin: str | None, env: dict[str, str] | None, cap: int) -> Spawned:
        """Start ``argv``; raises what os.posix_spawnp would (OSError, ValueError, TypeError) or SpawnerFailed."""
        loop = asyncio.get_running_loop()
        request = _Request(argv, env, stdin, cap, loop, loop.create_future())
        with self._start_lock:  # a thread that failed drains the queue under this lock: no request is stranded
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="knarr-spawner", daemon=True)
                self._thread.start()
            self._requests.put(request)
        try:
            return await request.future
        except BaseException:  # cancelled, or its coroutine closed unfinished: whoever sees the result last discards it
            with self._lock:
                request.abandoned = True
                result = request.result
            if isinstance(result, Spawned):
                result.discard()
            raise

    def _deliver(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            batch = self._done.pop(loop, [])
        for request in batch:
            future = request.future
            if future.done():
                continue  # cancelled: spawn() saw the result and discarded it
            if isinstance(request.result, BaseException):
                future.set_exception(request.result)
            else:
                future.set_result(request.result)

    # --- the spawner thread --------------------------------------------------------------------
    def _serve(self) -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, [])  # children start with no signal blocked
        held: _Request | None = None
        unwoken: set[asyncio.AbstractEventLoop] = set()  # loops with results they have not been told of
        finished = 0
        try:
            while True:
                # One wake-up per loop for a run of spawns: when nothing else is queued, or every few.
                if unwoken and (finished >= _WAKE_EVERY or self._requests.empty()):
                    self._wake(unwoken)
                    finished = 0
                held = self._requests.get()
                if held is None:
                    return
                if held.abandoned:
                    held = None
                    continue
                try:
                    result: Spawned | BaseException = self._start(held)
                except (OSError, ValueError, TypeError) as exc:
                    result = exc
                except Exception as exc:  # a bug or an exhausted resource: this task fails, the thread goes on
                    result = SpawnerFailed(f"the spawner failed on this task ({type(exc).__name__}: {exc})")
                if self._finish(held, result):
                    unwoken.add(held.loop)
                    finished += 1
                held = None
        except BaseException as exc:
            failure = SpawnerFailed(f"the spawner thread failed ({type(exc).__name__}: {exc}); "
                                    "the next task starts a new one")
            if held is not None and self._finish(held, failure):
                unwoken.add(held.loop)
            with self._start_lock:
                self._thread = None
                unwoken.update(self._fail_queued(failure))
            self._wake(unwoken)
            log.error("the spawner thread failed; the tasks it held fail, the next task starts a new one",
                      error=f"{type(exc).__name__}: {exc}")

    def _fail_queued(self, failure: SpawnerFailed) -> set[asyncio.AbstractEventLoop]:
        loops = set()
        while True:
            try:
                request = self._requests.get_nowait()
            except queue.Empty:
                return loops
            if request is not None and self._finish(request, failure):
                loops.add(request.loop)

    def _finish(self, request: _Request, result: Spawned | BaseException) -> bool:
        """Hand ``result`` to its loop's next batch; False if its task gave up on it (then it is discarded)."""
        with self._lock:
            if not request.abandoned:
                request.result = result
                self._done.setdefault(request.loop, []).append(request)
                return True
        if isinstance(result, Spawned):
            result.discard()
        return False

    def _wake(self, loops: set[asyncio.AbstractEventLoop]) -> None:
        for loop in loops:
            try:
                loop.call_soon_threadsafe(self._deliver, loop)
            except RuntimeError:  # that loop is closed: nobody awaits these any more
                with self._lock:
                    orphans = self._done.pop(loop, [])
                for orphan in orphans:
                    if isinstance(orphan.result, Spawned):
                        orphan.result.discard()
        loops.clear()

    def _start(self, request: _Request) -> Spawned:
        argv = c_strings([exec_arg(a) for a in request.argv])
        envp = _environ.value if request.env is None else ctypes.addressof(self._env.encoded(request.env))
        out = CapturedStream.adopt(_memfd(b"knarr-stdout"), request.cap)
        err = inp = None
        actions = ctypes.create_string_buffer(_ACTIONS_BYTES)
        _actions_init(actions)
        try:
            err = CapturedStream.adopt(_memfd(b"knarr-stderr"), request.cap)
            if request.stdin is None:
                _actions_open(actions, 0, _DEVNULL, os.O_RDONLY, 0)
            else:
                inp = _stdin_memfd(request.stdin)
                _actions_dup2(actions, inp, 0)
            _actions_dup2(actions, out.fd, 1)
            _actions_dup2(actions, err.fd, 2)
            pid = ctypes.c_int()
            with listing:
                code = _posix_spawnp(ctypes.byref(pid), argv[0], actions, self._attr, argv, envp)  # GIL released
                if code:
                    raise OSError(code, os.strerror(code), request.argv[0])
                leaders.add(pid.value)
            try:
                pidfd = os.pidfd_open(pid.value)
            except OSError:
                _kill_and_reap(pid.value)
                raise
            return Spawned(pid.value, pidfd, out, err)
        except BaseException:
            for stream in (out, err):
                if stream is not None:
                    stream.close()
            raise
        finally:
            _actions_destroy(actions)
            if inp is not None:
                os.close(inp)  # the child has its own descriptor for it


_spawner: Spawner | None = None


def spawner() -> Spawner:
    """This process's spawner, started on first use."""
    global _spawner
    if _spawner is None:
        _spawner = Spawner()
    return _spawner


def _forget_in_child() -> None:
    """A forked child has none of its parent's threads: it starts its own spawner when it needs one."""
    global _spawner
    _spawner = None


os.register_at_fork(after_in_child=_forget_in_child)
