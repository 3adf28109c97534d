"""How late the event loop runs what is due: a cheap periodic probe, a histogram, a stall warning.

Everything in the worker — polling, windows, tasks' exits, deliveries, probes — waits its
turn on one event loop. Code that blocks it (a synchronous call in a hook, a long pure-Python
loop) delays all of them at once. The probe asks to wake up every ``interval`` seconds and
records how much later than asked it actually ran: ``knarr_event_loop_lag_seconds``. A lag
past ``stall_seconds`` is logged as a warning naming it, at most once per ``warn_every``
seconds (with how many more there were), since a blocking hook would otherwise log on every
probe.

A loop is also late when it is starved: ready to run, its thread waits for a CPU (a node busy
with other work, a pod at its CPU limit, the worker's own task processes filling every core).
The probe reads how long its thread waited (cpu_wait.py), counts it in
``knarr_event_loop_cpu_wait_seconds_total``, and a stall mostly spent waiting is reported as
such, with what to change, instead of as a blocking hook.

The threshold is a constant, not a setting: a healthy loop lags well under 5 ms even when
the machine is saturated, and a quarter of a second is far past anything scheduling noise
explains while short enough to catch a hook that blocks on I/O. Nothing depends on it but
a log line, so it is not worth a knob.
"""

from __future__ import annotations

import asyncio
import time

from knarr.observability import metrics
from knarr.observability.cpu_wait import ThreadCpuWait, starved_part
from knarr.observability.logging import get_logger
from knarr.observability.ratelimit import RateLimiter

PROBE_INTERVAL_SECONDS = 0.1
STALL_WARNING_SECONDS = 0.25
STALL_WARNING_EVERY_SECONDS = 30.0

log = get_logger(component="event-loop")


class LoopLagProbe:
    """``run()`` measures until cancelled; ``samples`` keeps every lag when set to a list (benchmarks), and
    ``starved``, set to a list too, each lag's part spent waiting for a CPU (at most; None: not measured)."""

    def __init__(self, interval: float = PROBE_INTERVAL_SECONDS, stall_seconds: float = STALL_WARNING_SECONDS,
                 warn_every: float = STALL_WARNING_EVERY_SECONDS) -> None:
        self.interval = interval
        self.stall_seconds = stall_seconds
        self.samples: list[float] | None = None
        self.starved: list[float | None] | None = None  # with samples: each lag's part waiting for a CPU, at most
        self._warnings = RateLimiter(burst=1, per_seconds=warn_every)

    def observe(self, lag: float, starved: float | None = None) -> None:
        """One probe's ``lag``, and how much of it (at most) its thread waited for a CPU (None: not measured)."""
        metrics.event_loop_lag.observe(lag)
        if self.samples is not None:
            self.samples.append(lag)
            if self.starved is not None:
                self.starved.append(starved)
        if lag < self.stall_seconds:
            return
        allowed, suppressed = self._warnings.allow(time.monotonic())
        if allowed:
            log.warning(stall_message(lag, starved), lag_seconds=round(lag, 3),
                        cpu_wait_seconds=None if starved is None else round(starved, 3),
                        threshold_seconds=self.stall_seconds, more_stalls_suppressed=suppressed)

    async def run(self) -> None:
        cpu_wait = ThreadCpuWait()  # opened here, on the loop's thread: the one it measures
        try:
            before = cpu_wait.read()
            while True:
                # The monotonic clock, not loop.time(): uvloop's is in whole milliseconds, read once per turn.
                due = time.monotonic() + self.interval
                await asyncio.sleep(self.interval)
                lag = max(0.0, time.monotonic() - due)
                after = cpu_wait.read()
                waited = None if before is None or after is None else after - before
                if waited:
                    metrics.event_loop_cpu_wait.inc(waited)
                before = after
                self.observe(lag, starved_part(lag, waited))
        finally:
            cpu_wait.close()


def stall_message(lag: float, starved: float | None) -> str:
    """The stall warning: starved (waiting for a CPU for at least half of it) or blocked, and what to do."""
    if starved is not None and starved >= lag / 2:
        return (f"event loop stalled for {lag:.3f}s, {starved:.3f}s of it waiting for a CPU: the node is busy or "
                "the pod is at its CPU limit (give the pod more CPU, or lower executor.max_executors so that "
                "its task processes leave the worker a core)")
    return (f"event loop stalled for {lag:.3f}s: something blocked it (a synchronous call in a hook? "
            "run blocking work with asyncio.to_thread)")
