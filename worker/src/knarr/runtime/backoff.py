"""Retry timing: exponential backoff with full jitter, and task start/expiry times."""

from __future__ import annotations

import random


def retry_delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Seconds to wait before attempt ``attempt + 1`` after ``attempt`` failed (attempt ≥ 1).

    Exponential (base · 2^(attempt-1), capped) with "equal jitter": half fixed, half random,
    so retries of many tasks that failed together spread out but never fire back-to-back.
    """
    if attempt < 1:
        raise ValueError("attempt counts from 1")
    ceiling = min(cap, base * (2 ** (attempt - 1)))
    r = (rng or random).random()
    return ceiling / 2 + r * ceiling / 2


def start_time(now: float, delay_seconds: float | None, not_before: float | None) -> float:
    """The earliest wall-clock time a task may start."""
    earliest = now
    if delay_seconds:
        earliest = now + delay_seconds
    if not_before is not None:
        earliest = max(earliest, not_before)
    return earliest


def is_expired(now: float, expires_at: float | None) -> bool:
    return expires_at is not None and now >= expires_at
