"""What a write costs the writer when it wakes a program asleep on its stdin.

In persistent mode the event loop writes each task's request into a program that sleeps on its
stdin between tasks. The write itself copies a few hundred bytes; waking the reader is what costs,
and on a virtual machine that depends on whether the core the reader is woken onto is idle (the
hypervisor has to bring a halted virtual CPU back) or busy. This measures it outside the engine:
one writer process and ``--programs`` readers under SCHED_BATCH (as the worker's programs run),
each reader spinning ``--work-us`` per request before it answers, the writer spinning ``--gap-us``
between requests (as the event loop does its other work). It prints the writer's mean time inside
``write()`` for each gap.

    uv run python bench/wake_cost.py --gap-us 0 20 60 120
"""

from __future__ import annotations

import argparse
import os
import time

_clock = time.perf_counter_ns


def _spin(ns: int) -> None:
    start = _clock()
    while _clock() - start < ns:
        pass


def _reader(requests: int, answers: int, work_ns: int) -> None:
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):
        pass
    while data := os.read(requests, 4096):
        _spin(work_ns)
        os.write(answers, data)


def write_cost(gap_us: int, work_us: int, programs: int, writes: int, together: int = 1) -> float:
    """Mean microseconds the writer spends in write() per request, over ``writes`` requests written
    ``together`` at a time (then ``together`` gaps of spinning)."""
    channels, children = [], []
    for _ in range(programs):
        req_r, req_w = os.pipe()
        ans_r, ans_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                for fd in (req_w, ans_r, *(fd for channel in channels for fd in channel)):
                    os.close(fd)  # the writer's ends of its pipes, and the other readers' pipes
                _reader(req_r, ans_w, work_us * 1000)
            finally:
                os._exit(0)
        os.close(req_r)
        os.close(ans_w)
        channels.append((req_w, ans_r))
        children.append(pid)
    request = b"r" * 200
    spent = 0
    try:
        for i in range(writes):
            req_w, ans_r = channels[i % programs]
            if i >= programs:
                os.read(ans_r, 4096)  # its previous answer
            start = _clock()
            os.write(req_w, request)
            spent += _clock() - start
            if (i + 1) % together == 0:
                _spin(gap_us * 1000 * together)
    finally:
        for req_w, _ in channels:
            os.close(req_w)  # end of requests: each reader answers what it has and exits
        for pid in children:
            os.waitpid(pid, 0)
        for _, ans_r in channels:
            os.close(ans_r)
    return spent / writes / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gap-us", type=int, nargs="+", default=[0, 20, 60, 120],
                        help="the writer's own work between two requests, in microseconds")
    parser.add_argument("--work-us", type=int, default=15, help="each reader's work per request")
    parser.add_argument("--programs", type=int, default=4)
    parser.add_argument("--writes", type=int, default=20_000)
    parser.add_argument("--together", type=int, default=1, help="requests written one after the other, then their gaps")
    args = parser.parse_args()
    print(f"{args.programs} programs under SCHED_BATCH, {args.work_us} us of work per request, "
          f"{args.together} written at a time, {os.cpu_count()} CPUs")
    for gap in args.gap_us:
        print(f"writer's gap {gap:4d} us: {write_cost(gap, args.work_us, args.programs, args.writes, args.together):6.2f} us per write")


if __name__ == "__main__":
    main()
