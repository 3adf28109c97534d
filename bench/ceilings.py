"""What the cores allow a mode at best, and a ratio of two rates taken apart (busy cores over CPU per
task), from the CPU measured in a run: the lines under make bench's and make bench-persistent's ratios."""

from __future__ import annotations

import os

from workload import Figure


def ceiling(floor: Figure | None, b: Figure) -> dict:
    """What this machine's cores allow spawn mode at best, from CPU measured in this run.

    The C floor spawns with nothing else running; in spawn mode every task also costs the
    worker's CPU and the local broker's. With all cores busy, tasks/s can be at most
    cores / (child + worker + broker CPU per task): the floor ratio cannot pass that share.
    The child is the C floor's at first; then as it cost in (b), where the same binary, with the
    same environment, shares the cores with the worker and the broker. Returns the ceilings as multiples
    of the floor and the taking apart (empty where the CPU needed was not measured).
    """
    found: dict = {}
    if floor is None or not floor.children_cpu_seconds or b.broker_cpu_seconds is None:
        return found
    cores = os.cpu_count() or 1
    child_us = floor.children_us
    spawn_us = floor.cpu_us + child_us
    broker_us = b.broker_us
    print(f"  {'    the C floor: CPU per spawn, parent + child':58}{spawn_us:>10.0f} us  "
          f"(busy cores: {floor.rate * spawn_us / 1e6:.2f} of {cores})")
    found["ceilings"] = print_ceilings("child", child_us, b.cpu_us, broker_us, floor.rate, "{:.2f} x the floor")
    if b.children_cpu_seconds:
        in_b = b.children_us
        print(f"  {'    a task process in (b): its CPU (from C: the child above)':58}{in_b:>10.0f} us  "
              f"({child_us:.0f} us)")
        found["ceilings_child_in_b"] = print_ceilings("child in (b)", in_b, b.cpu_us, broker_us, floor.rate,
                                                      "{:.2f} x the floor")
        found["apart"] = taken_apart(b, floor, "spawn mode", "the floor")
    loop_ceiling(b, floor.rate, "{:.2f} x the floor")
    return found


def persistent_ceiling(kept: Figure, b: Figure) -> dict:
    """What this machine's cores allow persistent mode at best, as a multiple of spawn mode's rate (b).

    The same reckoning as ``ceiling``: every task costs the program's CPU (bench/echo_task.py,
    a Python program; its start included), the worker's and the local broker's, all on these cores.
    Returns the ceilings as multiples of spawn mode and the taking apart (empty where not measured).
    """
    found: dict = {}
    if not kept.children_cpu_seconds or kept.broker_cpu_seconds is None:
        return found
    program_us = kept.children_us
    broker_us = kept.broker_us
    print(f"  {'    CPU per task: the program, the local broker':58}{program_us:>7.0f}, {broker_us:.0f} us")
    found["ceilings"] = print_ceilings("program", program_us, kept.cpu_us, broker_us, b.rate, "{:.1f} x spawn mode")
    if b.children_cpu_seconds and b.broker_cpu_seconds is not None:
        found["apart"] = taken_apart(kept, b, "persistent", "spawn mode")
    loop_ceiling(kept, b.rate, "{:.1f} x spawn mode")
    return found


def task_cpu_us(figure: Figure) -> float:
    """All the CPU one task cost on these cores: its process (or its share of a program's), the worker
    (or the C floor's parent) and the local broker, when it was measured."""
    return figure.children_us + figure.cpu_us + (figure.broker_us or 0.0)


def busy_cores(figure: Figure) -> float:
    """How many cores a run kept busy on average: its tasks/s times all the CPU one task cost (task_cpu_us)."""
    return figure.rate * task_cpu_us(figure) / 1e6


def apart(fast: Figure, slow: Figure) -> dict:
    """A ratio of two rates taken apart, exactly: tasks/s = busy cores / CPU per task, so
    fast / slow = (slow's CPU per task / fast's) x (fast's busy cores / slow's). The first says
    what cheaper tasks would give, the second whether the cores were kept as busy (one event loop
    cannot fill two cores; a spawn's waits leave them idle)."""
    fast_us, slow_us = task_cpu_us(fast), task_cpu_us(slow)
    fast_busy, slow_busy = busy_cores(fast), busy_cores(slow)
    return {"cpu": slow_us / fast_us, "busy": fast_busy / slow_busy, "fast_us": fast_us, "slow_us": slow_us,
            "fast_busy": fast_busy, "slow_busy": slow_busy}


def taken_apart(fast: Figure, slow: Figure, name: str, other: str) -> dict:
    """``apart``, printed under a ratio; returns it."""
    found = apart(fast, slow)
    print(f"  {f'    {name} / {other}, taken apart: CPU per task, then busy cores':58}"
          f"{found['cpu']:>10.2f} x {found['busy']:.2f}  ({found['slow_us']:.0f} / {found['fast_us']:.0f} us; "
          f"{found['fast_busy']:.2f} / {found['slow_busy']:.2f} of {os.cpu_count() or 1} cores)")
    return found


def loop_ceiling(figure: Figure, reference: float, against: str) -> None:
    """The other bound: one event loop runs every task's bookkeeping, so tasks/s cannot pass
    1 / (its CPU per task) even with cores to spare; and how busy it was over the run."""
    if not figure.loop_cpu_seconds:
        return
    loop_us = figure.loop_us
    best = 1e6 / loop_us
    print(f"  {'    ceiling, one event loop: 1 / its CPU per task':58}{best:>10.0f} /s  = "
          + against.format(best / reference) + f"  (busy {figure.loop_cpu_seconds / figure.seconds:.0%} of the run)")


def print_ceilings(what: str, task_us: float, worker_us: float, broker_us: float, reference: float,
                   against: str) -> dict:
    """The two ceilings: cores / (what + worker + broker CPU per task), and with a worker costing nothing;
    ``against`` formats each as a multiple of ``reference`` tasks/s. Returns them as such multiples
    (``this_worker``, ``worker_free``)."""
    cores = os.cpu_count() or 1
    found = {}
    for key, label, worker in (
            ("this_worker", f"    ceiling, this worker: cores / ({what} + worker + broker)", worker_us),
            ("worker_free", f"    ceiling, a worker costing nothing: cores / ({what} + broker)", 0.0)):
        best = cores * 1e6 / (task_us + worker + broker_us)
        print(f"  {label:58}{best:>10.0f} /s  = " + against.format(best / reference))
        found[key] = best / reference
    return found
