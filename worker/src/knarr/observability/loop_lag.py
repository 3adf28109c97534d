"""How late the event loop runs what is due: a cheap periodic probe, a histogram, a stall warning.

Everything in the worker — polling, windows, tasks' exits, deliveries, probes — waits its
turn on one event loop. Code that blocks it (a synchronous call in a hook, a long pure-Python
loop) delays all of them at once. The probe asks to wake up every ``interval`` seconds and
records how much later than asked it actually ran: ``knarr_event_loop_lag_seconds``. A lag
past ``stall_seconds`` is logged as a warning naming it, at most once per ``warn_every``
seconds (with how many more there were), since a blocking hook would otherwise log on every
probe.

The threshold is a constant, not a setting: a healthy loop lags well under 5 ms even when
the machine is saturated, and a quarter of a second is far past anything scheduling noise
explains while short enough to catch a hook that blocks on I/O. Nothing depends on it but
a log line, so it is not worth a knob.
"""

from __future__ import annotations

import asyncio
import time

from knarr.observability import metrics
from knarr.observability.logging import get_logger
from knarr.observability.ratelimit import RateLimiter

PROBE_INTERVAL_SECONDS = 0.1
STALL_WARNING_SECONDS = 0.25
STALL_WARNING_EVERY_SECONDS = 30.0

log = get_logger(component="event-loop")


class LoopLagProbe:
    """``run()`` measures until cancelled; ``samples`` keeps every lag when set to a list (benchmarks)."""

    def __init__(self, interval: float = PROBE_INTERVAL_SECONDS, stall_seconds: float = STALL_WARNING_SECONDS,
                 warn_every: float = STALL_WARNING_EVERY_SECONDS) -> None:
        self.interval = interval
        self.stall_seconds = stall_seconds
        self.samples: list[float] | None = None
        self._warnings = RateLimiter(burst=1, per_seconds=warn_every)

    def observe(self, lag: float) -> None:
        metrics.event_loop_lag.observe(lag)
        if self.samples is not None:
            self.samples.append(lag)
        if lag < self.stall_seconds:
            return
        allowed, suppressed = self._warnings.allow(time.monotonic())
        if allowed:
            log.warning(f"event loop stalled for {lag:.3f}s: something blocked it (a synchronous call in a hook? "
                        "run blocking work with asyncio.to_thread)", lag_seconds=round(lag, 3),
                        threshold_seconds=self.stall_seconds, more_stalls_suppressed=suppressed)

    async def run(self) -> None:
        # The monotonic clock, not loop.time(): uvloop's is in whole milliseconds, read once per turn.
        while True:
            due = time.monotonic() + self.interval
            await asyncio.sleep(self.interval)
            self.observe(max(0.0, time.monotonic() - due))
