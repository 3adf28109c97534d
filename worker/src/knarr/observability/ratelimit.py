"""Keeping log storms readable: a rate limiter and a deduplicator. Pure: the caller passes the time.

When every task fails, or a client reconnects in a loop, one line per event buries
everything else. Both helpers let the first lines through, count the rest, and say how many
were held back so nothing disappears silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RateLimiter:
    """At most ``burst`` events per ``per_seconds`` window; the rest are counted as suppressed.

    ``allow(now)`` says whether to log this event and how many were suppressed since the
    last event that was let through (log those as "N more suppressed" first). ``drain(now)``
    returns the suppressed count once its window is over, for a caller that reports it on a
    timer when the storm stops.
    """

    burst: int = 10
    per_seconds: float = 10.0
    _window_start: float | None = None
    _in_window: int = 0
    _suppressed: int = 0

    def allow(self, now: float) -> tuple[bool, int]:
        if self._window_start is None or now - self._window_start >= self.per_seconds:
            self._window_start, self._in_window = now, 0
        if self._in_window < self.burst:
            self._in_window += 1
            suppressed, self._suppressed = self._suppressed, 0
            return True, suppressed
        self._suppressed += 1
        return False, 0

    @property
    def suppressed(self) -> int:
        return self._suppressed

    def window_ends(self) -> float | None:
        """When the current window closes (None before the first event)."""
        return None if self._window_start is None else self._window_start + self.per_seconds

    def drain(self, now: float) -> int:
        """The suppressed count, reset, once the window it belongs to has closed (else 0)."""
        ends = self.window_ends()
        if ends is None or now < ends or not self._suppressed:
            return 0
        suppressed, self._suppressed = self._suppressed, 0
        return suppressed


@dataclass
class Deduplicator:
    """The same message (by key) at most once per ``window_seconds``; repeats are counted.

    ``seen(key, now)`` returns ``(emit, repeats)``: emit the message if ``emit``, and
    mention ``repeats`` (how often it came again since it was last emitted).
    """

    window_seconds: float = 60.0
    max_keys: int = 1024
    _last: dict[str, float] = field(default_factory=dict)
    _repeats: dict[str, int] = field(default_factory=dict)

    def seen(self, key: str, now: float) -> tuple[bool, int]:
        last = self._last.get(key)
        if last is not None and now - last < self.window_seconds:
            self._repeats[key] = self._repeats.get(key, 0) + 1
            return False, 0
        if last is None and len(self._last) >= self.max_keys:  # bounded memory: forget the oldest
            oldest = min(self._last, key=self._last.__getitem__)
            self._last.pop(oldest)
            self._repeats.pop(oldest, None)
        self._last[key] = now
        return True, self._repeats.pop(key, 0)
