"""A figure read from several rounds on a shared machine: the median, and where it lies with 95 % confidence.

On a busy 2-core machine two runs of the same thing spread by 10-40 %, far more than most effects a
bench looks for, but that drift is slow next to a run: the runs of one round, back to back, see
nearly the same machine. So a bench measures in rounds, each giving one figure (a ratio, a cost),
and reads the verdict from the median of the rounds' figures, with a bootstrap interval beside it
that says how far that median could be off.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence

PACE_ITERATIONS = 500_000  # one sample of the host's pace: 15-35 ms of a plain loop on the development VMs


def median_interval(values: Sequence[float], draws: int = 10_000) -> tuple[float, float]:
    """Where the median of ``values`` lies with 95 % confidence: a bootstrap over them (seeded, so repeatable)."""
    if len(values) < 2:
        return (values[0], values[0]) if values else (float("nan"), float("nan"))
    pick = random.Random(0)
    medians = sorted(statistics.median(pick.choices(values, k=len(values))) for _ in range(draws))
    return medians[int(draws * 0.025)], medians[int(draws * 0.975) - 1]


def nearest_median(values: Sequence[float]) -> int:
    """The index of the value nearest the median (the round a report shows in detail)."""
    middle = statistics.median(values)
    return min(range(len(values)), key=lambda i: abs(values[i] - middle))


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def places(value: float, target: float, fewest: int, most: int = 4) -> int:
    """Decimal places to print ``value`` with beside its verdict: ``fewest``, or more while it would
    read as the target itself without being it (a cost of 5.04 % printed "5.0" beside a MISS of
    its 5 % target, a ratio of 0.897 printed "0.90" beside a MISS of 0.9)."""
    while fewest < most and value != target and round(value, fewest) == round(target, fewest):
        fewest += 1
    return fewest


def judgement(values: Sequence[float], target: float) -> dict:
    """A ratio's verdict from its rounds, as data (a bench's --json): the rounds' values sorted, their
    median, where it lies with 95 % confidence, and whether it meets ``target`` (at least)."""
    middle = statistics.median(values)
    low, high = median_interval(values)
    return {"values": sorted(values), "median": middle, "low": low, "high": high, "target": target,
            "met": middle >= target}


def judged(label: str, values: Sequence[float], target: float, decimals: int, unit: str, target_text: str,
           width: int = 58) -> dict:
    """A ratio's verdict from its rounds, printed: the median against ``target`` (at least), then the
    rounds' values sorted and where the median lies with 95 % confidence; each value with ``decimals``
    places (the median with more when it would read as the target: ``places``) and ``unit``. Returns
    the ``judgement`` it printed."""
    found = judgement(values, target)
    middle, low, high = found["median"], found["low"], found["high"]

    def shown(value: float, decimals: int = decimals) -> str:
        return f"{value:.{decimals}f}{unit}"

    print(f"  {label:{width}}{shown(middle, places(middle, target, decimals)):>14}  {'>= ' + target_text:>10}  "
          f"{verdict(found['met'])}")
    print(f"  {'    the rounds, sorted (the median: 95 % between)':{width}}"
          f"{', '.join(shown(v) for v in sorted(values))}  ({shown(low)} to {shown(high)})")
    return found


def host_pace(samples: int = 5) -> list[float]:
    """The host's pace for interpreted code right now: ns per iteration of a plain Python loop, ``samples`` times.

    A shared VM's host can run the same bytecode up to twice as slowly from one second to the next (a busy
    sibling of the core, another guest), while the kernel's part of a spawn does not move: the engine is
    mostly interpreted code and a spawn mostly kernel, so the ratios shift with it. A bench prints this
    beside its figures so that runs on different hosts, or different hours, can be told apart."""
    paces = []
    for _ in range(samples):
        started = time.perf_counter()
        total = 0
        for number in range(PACE_ITERATIONS):
            total += number
        paces.append((time.perf_counter() - started) / PACE_ITERATIONS * 1e9)
    return paces


def pace_text(paces: Sequence[float]) -> str:
    """``host_pace``'s samples for a report: their range and median."""
    return (f"a plain Python loop {min(paces):.0f}-{max(paces):.0f} ns per iteration "
            f"(median {statistics.median(paces):.0f} of {len(paces)} samples)")
