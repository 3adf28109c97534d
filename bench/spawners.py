"""Ways to start task processes without the event loop running posix_spawn, side by side in one run.

Every option runs the same task life as the engine — stdout/stderr memfds, /dev/null stdin, a
new session, a pidfd the loop waits on, the group swept and the leader reaped — for ``--spawns``
runs of /bin/true, ``--concurrency`` at a time, while a probe measures the event loop's lag:

  loop            os.posix_spawnp on the event loop thread (knarr before this change)
  thread-os       os.posix_spawnp in a one-thread pool (run_in_executor). CPython holds the
                  GIL through the whole call (py_posix_spawn in Modules/posixmodule.c has no
                  Py_BEGIN_ALLOW_THREADS around posix_spawn), so the loop still stalls
  thread-ctypes   libc's posix_spawnp through ctypes on one spawner thread, GIL released
                  during the call: knarr.engine.spawner, through run_process (executor.spawner: thread)
  helper          a spawner helper process (Python) taking requests over a Unix socket, the
                  memfds passed with SCM_RIGHTS; it spawns, sweeps and reaps, and reports exits
  native          knarr's native runner (knarr.engine.native, worker/native/runner.c), through
                  run_process (executor.spawner: native, the default where it is built): a C thread
                  spawns, waits on the pidfds with one epoll, sweeps and reaps; the loop submits each
                  task with one ctypes call and is woken once per batch of ended tasks
  C floor         the same spawns from C (bench/spawn_floor.c), one process, no event loop

For each: tasks/s, the worker's CPU per task (this process, every thread; for the helper also
the helper's CPU, which a worker would pay too), the loop lag p99 and the ratio to the C floor.

    uv run python bench/spawners.py [--spawns 5000] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pickle
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from knarr.engine import event_loop, native
from knarr.engine.capture import CapturedStream
from knarr.engine.processes import run_process
from knarr.observability.loop_lag import LoopLagProbe

from clocks import cpu_self, stat_cpu_seconds  # make bench's clocks
from spawn_floor import spawn_floor_c  # and its C floor

BINARY = "/bin/true"
ENV = {"PATH": "/usr/bin:/bin"}  # every option's children get this environment, the C floor's included
CAP = 8 * 1024 * 1024
_DEVNULL = (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)


@dataclass
class Row:
    name: str
    count: int
    seconds: float
    cpu_seconds: float
    lag_p99: float | None = None
    extra_cpu_seconds: float = 0.0  # a helper process's CPU, paid beside the worker's

    @property
    def rate(self) -> float:
        return self.count / self.seconds


# --- the task life every in-process option shares ------------------------------------------
def _spawn_os(argv: list[str]) -> tuple[int, CapturedStream, CapturedStream]:
    out, err = CapturedStream("knarr-stdout", CAP), CapturedStream("knarr-stderr", CAP)
    actions = (_DEVNULL, (os.POSIX_SPAWN_DUP2, out.fd, 1), (os.POSIX_SPAWN_DUP2, err.fd, 2))
    pid = os.posix_spawnp(argv[0], argv, ENV, file_actions=actions, setsid=True)
    return pid, out, err


async def _life(spawn: Callable[[], Awaitable[tuple[int, CapturedStream, CapturedStream]]]) -> int:
    loop = asyncio.get_running_loop()
    pid, out, err = await spawn()
    pidfd = os.pidfd_open(pid)
    exited = loop.create_future()
    loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))
    try:
        await exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(pid, 0)
        out.read(), err.read()
        out.close(), err.close()
    return os.waitstatus_to_exitcode(status)


async def _timed(name: str, count: int, concurrency: int, one: Callable[[], Awaitable[int]],
                 extra_cpu: Callable[[], float] | None = None) -> Row:
    async def lanes(n: int) -> None:
        remaining = n

        async def lane() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                code = await one()
                assert code == 0, code

        await asyncio.gather(*(lane() for _ in range(concurrency)))

    await lanes(min(200, count))  # warm-up
    probe = LoopLagProbe(interval=0.005, stall_seconds=float("inf"))
    probe.samples = []
    watching = asyncio.create_task(probe.run())
    started, cpu, extra = time.perf_counter(), cpu_self(), extra_cpu() if extra_cpu else 0.0
    await lanes(count)
    row = Row(name, count, time.perf_counter() - started, cpu_self() - cpu,
              extra_cpu_seconds=(extra_cpu() - extra) if extra_cpu else 0.0)
    watching.cancel()
    samples = sorted(probe.samples)
    row.lag_p99 = samples[int(len(samples) * 0.99)] if samples else None
    return row


# --- the options ----------------------------------------------------------------------------
async def on_loop(count: int, concurrency: int) -> Row:
    async def spawn():
        return _spawn_os([BINARY])

    return await _timed("loop: os.posix_spawnp on the event loop", count, concurrency, lambda: _life(spawn))


async def thread_os(count: int, concurrency: int) -> Row:
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(1, thread_name_prefix="spawn") as pool:
        async def spawn():
            return await loop.run_in_executor(pool, _spawn_os, [BINARY])

        return await _timed("thread-os: os.posix_spawnp in a thread", count, concurrency, lambda: _life(spawn))


async def thread_ctypes(count: int, concurrency: int) -> Row:

    async def one() -> int:
        outcome = await run_process([BINARY], stdin=None, env=ENV, timeout=30)
        return outcome.exit_code

    return await _timed("thread-ctypes: knarr's spawner thread (run_process)", count, concurrency, one)


_HELPER = r'''
import os, pickle, selectors, signal, socket, sys
sock = socket.socket(fileno=int(sys.argv[1]))
sel = selectors.DefaultSelector()
sel.register(sock, selectors.EVENT_READ)
devnull = (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)
running = {}
while True:
    for key, _ in sel.select():
        if key.fileobj is sock:
            data, fds, _, _ = socket.recv_fds(sock, 65536, 4)
            if not data:
                sys.exit(0)
            ident, argv, env = pickle.loads(data)
            actions = (devnull, (os.POSIX_SPAWN_DUP2, fds[0], 1), (os.POSIX_SPAWN_DUP2, fds[1], 2))
            try:
                pid = os.posix_spawnp(argv[0], argv, env, file_actions=actions, setsid=True)
            except OSError as exc:
                sock.send(pickle.dumps((ident, None, exc.errno)))
                continue
            finally:
                for fd in fds:
                    os.close(fd)
            pidfd = os.pidfd_open(pid)
            running[pidfd] = (ident, pid)
            sel.register(pidfd, selectors.EVENT_READ)
        else:
            pidfd = key.fd
            ident, pid = running.pop(pidfd)
            sel.unregister(pidfd)
            os.close(pidfd)
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _, status = os.waitpid(pid, 0)
            sock.send(pickle.dumps((ident, pid, status)))
'''


async def helper_process(count: int, concurrency: int) -> Row:
    loop = asyncio.get_running_loop()
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    helper = subprocess.Popen([sys.executable, "-c", _HELPER, str(theirs.fileno())], pass_fds=[theirs.fileno()])
    theirs.close()
    mine.setblocking(False)
    waiting: dict[int, asyncio.Future] = {}
    counter = 0

    def on_message() -> None:
        while True:
            try:
                data = mine.recv(4096)
            except BlockingIOError:
                return
            ident, pid, status = pickle.loads(data)
            future = waiting.pop(ident)
            future.set_result((pid, status))

    loop.add_reader(mine.fileno(), on_message)

    async def one() -> int:
        nonlocal counter
        counter += 1
        ident = counter
        out, err = CapturedStream("knarr-stdout", CAP), CapturedStream("knarr-stderr", CAP)
        try:
            future = waiting[ident] = loop.create_future()
            socket.send_fds(mine, [pickle.dumps((ident, [BINARY], ENV))], [out.fd, err.fd])
            pid, status = await future
            out.read(), err.read()
        finally:
            out.close(), err.close()
        return os.waitstatus_to_exitcode(status) if pid else -1

    try:
        return await _timed("helper: a spawner process, fds over SCM_RIGHTS", count, concurrency, one,
                            extra_cpu=lambda: stat_cpu_seconds(Path(f"/proc/{helper.pid}/stat")))
    finally:
        loop.remove_reader(mine.fileno())
        mine.close()
        helper.wait(10)


async def native_runner(count: int, concurrency: int) -> Row | None:
    """knarr's native runner (knarr.engine.native) through run_process; None where it is not built."""
    try:
        runner = native.runner()
    except native.NativeRunnerMissing as exc:
        print(f"native: skipped ({exc})", file=sys.stderr)
        return None

    async def one() -> int:
        outcome = await run_process([BINARY], stdin=None, env=ENV, timeout=30, runner=runner)
        return outcome.exit_code

    return await _timed("native: knarr's native runner (run_process)", count, concurrency, one)


def c_floor(count: int, concurrency: int) -> Row | None:
    measured = spawn_floor_c(BINARY, count, concurrency, ENV)
    if measured is None:
        return None
    cpu_us, rate, _children_us = measured
    return Row("C floor: bench/spawn_floor.c", count, count / rate, cpu_us * count / 1e6)


OPTIONS = {"loop": on_loop, "thread-os": thread_os, "thread-ctypes": thread_ctypes, "helper": helper_process,
           "native": native_runner}


def report(rows: list[Row], floor: Row | None, concurrency: int) -> None:
    print(f"\nspawners: {os.cpu_count()} cores, {concurrency} at a time, {BINARY}, python {sys.version.split()[0]}, "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"  {'option':50}{'tasks/s':>9}{'x C floor':>11}{'CPU/task':>10}{'+helper':>9}{'lag p99':>10}")
    for row in rows:
        ratio = f"{row.rate / floor.rate:.2f}" if floor else "-"
        helper = f"{row.extra_cpu_seconds / row.count * 1e6:.0f} us" if row.extra_cpu_seconds else ""
        lag = f"{row.lag_p99 * 1e3:.1f} ms" if row.lag_p99 is not None else "-"
        print(f"  {row.name:50}{row.rate:>9.0f}{ratio:>11}{row.cpu_seconds / row.count * 1e6:>7.0f} us{helper:>9}{lag:>10}")
    if floor:
        print(f"  {floor.name:50}{floor.rate:>9.0f}{1:>11.2f}{floor.cpu_seconds / floor.count * 1e6:>7.0f} us")


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spawns", type=int, default=5_000)
    parser.add_argument("--concurrency", type=int, default=2 * (os.cpu_count() or 1))
    parser.add_argument("--rounds", type=int, default=2, help="runs per option, interleaved; the best is kept")
    parser.add_argument("--only", nargs="*", choices=sorted(OPTIONS), default=sorted(OPTIONS))
    args = parser.parse_args()
    best: dict[str, Row] = {}
    floors = []
    for _ in range(args.rounds):  # interleaved, so a burst of load elsewhere does not hit one option only
        for name in args.only:
            print(f"  {name} ...", file=sys.stderr)
            row = await OPTIONS[name](args.spawns, args.concurrency)
            if row is None:
                print(f"  {name}: skipped, no C compiler at hand", file=sys.stderr)
                continue
            if name not in best or row.rate > best[name].rate:
                best[name] = row
        floor = c_floor(args.spawns, args.concurrency)
        if floor:
            floors.append(floor)
    floor = max(floors, key=lambda r: r.rate) if floors else None
    report([best[name] for name in args.only if name in best], floor, args.concurrency)
    if floors:
        print(f"  (C floor runs: {', '.join(f'{r.rate:.0f}' for r in floors)}/s; "
              f"median {statistics.median(r.rate for r in floors):.0f}/s)")
    return 0


if __name__ == "__main__":
    sys.exit(event_loop.run(main()))  # the loop `knarr run` gives a worker
