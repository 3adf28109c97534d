"""The native task runner: a C thread (worker/native/runner.c) that spawns, waits for and reaps tasks.

The spawner thread (spawner.py) keeps fork and exec off the event loop, but still pays for
Python on every task: its own bytecode and ctypes calls under the GIL, and, on the loop, a
pidfd to register and unregister, a waitpid, a group kill and a close. The native runner does
all of that in C: the loop submits argv, environment, stdin data, timeout and output cap in one call
and gets one event per ended task, in batches, through a single eventfd that stays registered
with the loop. The event carries the task's output: the thread owns each task's stdout/stderr
memfds (made ahead, a few pairs at a time) and writes its stdin data into one more, keeps the
outputs to the cap while the task runs (capture.py's checks), kills the task's group at its
deadline, and reads the kept heads once it has ended. So a task costs the loop no descriptor or
timer, and no system call but the write that wakes the thread (none for a held task).
And it holds tasks ready (``executor.spawn_ahead``): a task submitted with ``hold`` starts the
moment a running task ends, on the thread, and each task's event says what became of its slot,
which the pool scheduler mirrors (scheduling.py).
bench/spawners.py measured the difference (docs/performance.md).

It is built into the wheel when a C compiler is there at install time (worker/hatch_build.py).
``executor.spawner`` chooses: ``auto`` (the default) uses it when it is built and falls back to
the spawner thread, saying so once; ``native`` refuses to start without it; ``thread`` never
uses it.

One runner serves the process, and it answers one event loop at a time: the first loop that
uses it keeps it until that loop closes (a worker runs on one loop; a test suite's loops come
one after another). A task on another loop meanwhile goes through the spawner thread.
"""

from __future__ import annotations

import asyncio
import ctypes
import importlib.util
import itertools
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

from knarr.engine.capture import FAST_GROWTH_BYTES, FIRST_CHECK_SECONDS, LAST_CHECK_SECONDS, decode_head
from knarr.engine.spawner import RESET_SIGNALS, EnvCache, exec_block
from knarr.errors import ConfigError
from knarr.observability.logging import get_logger

ABI = 10  # runner.c's KR_ABI
FRESH_PAIRS = 8  # runner.c's: stdout/stderr memfd pairs its thread keeps made ahead
LIBRARY = "_knarr_runner"  # site-packages/_knarr_runner.so, put there by the wheel
# Most ended tasks the loop takes in one callback: the rest stay signalled on the eventfd and come
# in the next round of the loop, so a large batch never keeps timers and other I/O waiting behind it.
COLLECT_CHUNK = 16
FREE_NOW_BYTES = 1 << 16  # decoded heads of more than this (a batch's) are freed at once
KILL_WAIT_SECONDS = 5.0  # a cancelled task's group got SIGKILL: this long at most for the kernel to end it
# What became of the slot a task had, in its event (runner.c's SLOT_*): free again, taken by the
# next held task, or none (it left the held queue unstarted).
SLOT_FREED, SLOT_PASSED, SLOT_NONE = 0, 1, 2
# An event's flags (runner.c's): its deadline killed it; stdout, stderr went past the cap.
TIMED_OUT, OUT_CUT, ERR_CUT = 1, 2, 4

log = get_logger(component="native-runner")


class _Event(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int64), ("pid", ctypes.c_int32), ("status", ctypes.c_int32),
                ("started_ns", ctypes.c_int64), ("ended_ns", ctypes.c_int64), ("slot", ctypes.c_int32),
                ("flags", ctypes.c_int32),
                ("out", ctypes.c_void_p), ("err", ctypes.c_void_p),
                ("out_len", ctypes.c_int64), ("err_len", ctypes.c_int64)]


@dataclass(slots=True)
class Ended:
    """What the runner says of a task's end: ``status`` a wait status, or -errno when it never ran;
    ``started_ns``, ``ended_ns`` the CLOCK_MONOTONIC times of its spawn and of its reaping (0: it never
    started; the loop may hear of its end later, while tasks are held); ``flags`` TIMED_OUT, OUT_CUT,
    ERR_CUT; ``stdout``/``stderr`` the kept heads of its streams, decoded."""

    pid: int
    status: int
    started_ns: int
    ended_ns: int
    flags: int
    stdout: str
    stderr: str


# An event's fields as struct reads them: one unpack per event gives them all, where reading them
# through the Structure's fields is a descriptor call each (about a third of the time _collect takes).
# (tests/unit/test_native_runner.py checks it against _Event field by field.)
_EVENT = struct.Struct("qiiqqiiPPqq")


def _text(address: int | None, size: int, cut: int) -> str:
    """A head the runner read, decoded in place (no copy of the bytes)."""
    return decode_head((ctypes.c_char * size).from_address(address), bool(cut)) if size else ""


class NativeRunnerMissing(RuntimeError):
    """The native runner is not built or cannot start; ``str()`` says why and what to do."""


def _load() -> tuple[ctypes.CDLL, ctypes.PyDLL]:
    spec = importlib.util.find_spec(LIBRARY)
    if spec is None or not spec.origin:
        raise NativeRunnerMissing(
            "knarr's native task runner is not installed: no C compiler was found when knarr was installed "
            "(install gcc or set $CC, then reinstall knarr; in a checkout: uv sync --reinstall-package knarr), "
            "or set executor.spawner: thread")
    try:
        # Two views, as spawner.py has: calls that may wait (kr_new, kr_kill) release the GIL;
        # the quick ones keep it, so the loop never waits on another thread to get it back.
        waiting, quick = ctypes.CDLL(spec.origin, use_errno=True), ctypes.PyDLL(spec.origin)
    except OSError as exc:
        raise NativeRunnerMissing(f"knarr's native task runner at {spec.origin} cannot be loaded ({exc}); "
                                  "reinstall knarr, or set executor.spawner: thread") from exc
    if quick.kr_abi() != ABI:
        raise NativeRunnerMissing(f"knarr's native task runner at {spec.origin} is from another knarr version "
                                  f"(ABI {quick.kr_abi()}, expected {ABI}); reinstall knarr")
    waiting.kr_new.restype = ctypes.c_void_p
    waiting.kr_new.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                               ctypes.c_int64]
    waiting.kr_kill.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_double]
    waiting.kr_clear_sighand.argtypes = [ctypes.c_void_p, ctypes.c_int]
    quick.kr_done_fd.argtypes = [ctypes.c_void_p]
    quick.kr_submit.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p,
                                ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int,
                                ctypes.c_int64, ctypes.c_int]
    quick.kr_pass.argtypes = [ctypes.c_void_p, ctypes.c_int]
    quick.kr_set_batch.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]
    quick.kr_set_batch.restype = None
    quick.kr_collect.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Event), ctypes.c_int]
    quick.kr_pause.argtypes = [ctypes.c_void_p]
    quick.kr_resume.argtypes = [ctypes.c_void_p]
    quick.kr_resume.restype = None
    quick.kr_owns.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return waiting, quick


@dataclass(slots=True)
class NativeJob:
    """A submitted task: ``ended`` gets its ``Ended``, or (submitted with ``on_end``) that is called
    with it, on the loop that submitted it. ``on_slot`` hears what became of its slot (SLOT_*),
    whether or not anyone still waits for the end."""

    id: int
    ended: asyncio.Future | None
    keep: tuple  # what the runner reads until the task has started: argv, the envp array, stdin data
    on_slot: Callable[[int], None] | None
    on_end: Callable[[Ended], None] | None = None
    loop: asyncio.AbstractEventLoop | None = None


class NativeRunner:
    """This process's native runner; ``claim(loop)`` before ``submit`` on that loop."""

    def __init__(self) -> None:
        self._waiting, self._lib = _load()
        reset = (ctypes.c_int * len(RESET_SIGNALS))(*RESET_SIGNALS)
        handle = self._waiting.kr_new(reset, len(RESET_SIGNALS), int(FIRST_CHECK_SECONDS * 1e9),
                                      int(LAST_CHECK_SECONDS * 1e9), FAST_GROWTH_BYTES)
        if not handle:
            code = ctypes.get_errno()
            raise NativeRunnerMissing(f"knarr's native task runner cannot start its thread ({os.strerror(code)})")
        self._handle = ctypes.c_void_p(handle)
        self._fd = self._lib.kr_done_fd(self._handle)
        self._events = (_Event * COLLECT_CHUNK)()
        self._event_bytes = memoryview(self._events).cast("B")
        self._jobs: dict[int, NativeJob] = {}
        self._ids = itertools.count(1)
        self._owners = itertools.count(1)
        self._env = EnvCache()
        self._loop: asyncio.AbstractEventLoop | None = None

    def claim(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Serve ``loop`` (True), unless another loop that is still open has the runner (False)."""
        if self._loop is loop:
            return True
        if self._loop is not None and not self._loop.is_closed():
            return False
        # A closed loop's tasks stay listed until their events come: the runner may still read their arguments.
        loop.add_reader(self._fd, self._collect)
        self._loop = loop
        return True

    def submit(self, argv: list[str], env: dict[str, str] | None, stdin: bytes | None, timeout: float, cap: int, *,
               hold: bool = False, expires_at: float | None = None,
               on_slot: Callable[[int], None] | None = None, owner: int = 0,
               on_end: Callable[[Ended], None] | None = None) -> NativeJob:
        """Queue ``argv``; raises what os.posix_spawnp would for arguments exec cannot take (ValueError, TypeError).

        ``stdin``: the data the task reads (None: /dev/null). The task's group is killed if it still
        runs ``timeout`` seconds after its start, and ``cap`` bytes of each of its streams are kept.
        ``hold``: the task has no slot yet; it starts when a running task of the same ``owner`` (a
        pool scheduler, see ``new_owner``) ends and passes it its slot (or ``pass_slot`` does), unless
        ``expires_at`` (Unix time) has passed by then (status -ETIME). ``on_end``: called with the
        task's ``Ended`` as the loop takes the runner's events (no future: ``ended`` is None); it must
        not raise, and a ``kill`` after its call is too late to matter.
        """
        block = exec_block(argv)
        envp = None if env is None else self._env.encoded(env)
        loop = self._loop
        job = NativeJob(next(self._ids), None if on_end else loop.create_future(), (block, envp, stdin),
                        on_slot, on_end, loop)
        expires_ns = int(expires_at * 1e9) if hold and expires_at is not None else 0
        code = self._lib.kr_submit(self._handle, job.id, block, len(argv), envp, stdin, len(stdin or b""),
                                   int(timeout * 1e9), cap, hold, expires_ns, owner)
        if code:
            raise OSError(-code, os.strerror(-code))
        self._jobs[job.id] = job
        return job

    def new_owner(self) -> int:
        """A number for one pool scheduler's tasks: slots pass only between tasks of one owner."""
        return next(self._owners)

    def pass_slot(self, owner: int) -> bool:
        """A slot of ``owner``'s freed elsewhere goes to its first held task, which starts; False if none is held."""
        return bool(self._lib.kr_pass(self._handle, owner))

    def set_batch(self, batch: int, hold_seconds: float) -> None:
        """How many ended tasks the loop's wake-up may wait for while tasks are held (1: none), and
        ``hold_seconds`` at most."""
        self._lib.kr_set_batch(self._handle, batch, int(hold_seconds * 1e9))

    def kill(self, job: NativeJob, wait: bool = False) -> None:
        """SIGKILL the task's group (or make sure it never starts); ``wait``: until it is reaped.

        Its event still comes (and tells ``on_slot`` what became of its slot)."""
        self._waiting.kr_kill(self._handle, job.id, KILL_WAIT_SECONDS if wait else 0.0)

    def _collect(self) -> None:
        """Take up to COLLECT_CHUNK waiting events (the eventfd stays readable while more wait)."""
        jobs, events = self._jobs, self._events
        count = self._lib.kr_collect(self._handle, events, COLLECT_CHUNK)
        heads = 0
        for (id_, pid, status, started_ns, ended_ns, slot, flags, out, err, out_len,
             err_len) in _EVENT.iter_unpack(self._event_bytes[:count * _EVENT.size]):
            job = jobs.pop(id_, None)
            if job is None:
                continue
            if job.on_slot is not None:
                job.on_slot(slot)
            ended = job.ended
            if job.loop is self._loop and (ended is None or not ended.done()):
                # (the heads at out and err are valid until the next kr_collect)
                end = Ended(pid, status, started_ns, ended_ns, flags,
                            _text(out, out_len, flags & OUT_CUT), _text(err, err_len, flags & ERR_CUT))
                if ended is None:
                    job.on_end(end)
                else:
                    ended.set_result(end)
                heads += out_len + err_len
        if heads > FREE_NOW_BYTES:  # big heads go now, not at the next wake-up (kr_collect frees them)
            self._lib.kr_collect(self._handle, events, 0)

    def clears_handlers(self, stop: bool = False) -> bool:
        """Whether tasks are cloned with CLONE_CLEAR_SIGHAND (x86-64, Linux 5.5 or later, clone3 allowed):
        the kernel resets the interpreter's signal handlers in the child, where posix_spawn's child
        asks for each signal's in a system call of its own. True before the first spawn means it will
        be tried. ``stop``: clone the other way from now on (what a kernel without it gets)."""
        return bool(self._waiting.kr_clear_sighand(self._handle, int(stop)))

    # --- containment's sweep ---------------------------------------------------------------
    def pause(self) -> bool:
        """Hold off spawns and reaps, so every task process of this runner is listed; False if one is under way."""
        return bool(self._lib.kr_pause(self._handle))

    def resume(self) -> None:
        self._lib.kr_resume(self._handle)

    def owns(self, pid: int) -> bool:
        """Whether ``pid`` is one of this runner's task processes (only while paused)."""
        return bool(self._lib.kr_owns(self._handle, pid))


_runner: NativeRunner | None = None
_missing: NativeRunnerMissing | None = None


def runner() -> NativeRunner:
    """This process's native runner, started on first use; raises NativeRunnerMissing (every time) if it cannot be."""
    global _runner, _missing
    if _runner is None:
        if _missing is not None:
            raise _missing
        try:
            _runner = NativeRunner()
        except NativeRunnerMissing as exc:
            _missing = exc
            raise
    return _runner


def _forget_in_child() -> None:
    """A forked child has none of its parent's threads: it starts its own runner when it needs one."""
    global _runner, _missing
    _runner = _missing = None


os.register_at_fork(after_in_child=_forget_in_child)


def started() -> NativeRunner | None:
    """The native runner if something started it (containment's sweep must then ask it), else None."""
    return _runner


def for_config(spawner: str) -> NativeRunner | None:
    """The runner ``executor.spawner`` asks for, or None for the spawner thread; ConfigError if ``native`` cannot be."""
    if spawner == "thread":
        return None
    try:
        return runner()
    except NativeRunnerMissing as exc:
        if spawner == "native":
            raise ConfigError(f"executor.spawner is native, but {exc}") from None
        log.warning("tasks start through the spawner thread: the native runner is missing (executor.spawner: auto)",
                    why=str(exc))
        return None
