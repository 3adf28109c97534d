"""Log storms stay readable: the first lines of a window are logged, the rest counted and reported."""

from __future__ import annotations

from knarr.api.tasks import ExecutorError, ExecutorTask
from knarr.observability.ratelimit import Deduplicator, RateLimiter
from knarr.observability.task_failures import TaskFailureLog, stderr_tail


def test_the_limiter_lets_a_burst_through_per_window_and_counts_the_rest():
    limiter = RateLimiter(burst=3, per_seconds=10)
    decisions = [limiter.allow(now=1.0 + i * 0.01) for i in range(5)]
    assert [allowed for allowed, _ in decisions] == [True, True, True, False, False]
    assert limiter.suppressed == 2


def test_the_first_line_of_the_next_window_carries_the_suppressed_count():
    limiter = RateLimiter(burst=1, per_seconds=10)
    limiter.allow(0.0)
    limiter.allow(1.0)
    limiter.allow(2.0)
    assert limiter.allow(10.5) == (True, 2)
    assert limiter.allow(10.6) == (False, 0)


def test_a_storm_that_stops_is_reported_once_its_window_closes():
    limiter = RateLimiter(burst=1, per_seconds=10)
    limiter.allow(0.0)
    limiter.allow(0.5)
    assert limiter.drain(now=5.0) == 0  # the window is still open
    assert limiter.drain(now=10.0) == 1
    assert limiter.drain(now=20.0) == 0  # reported once


def test_the_deduplicator_emits_a_message_once_per_window_and_counts_repeats():
    dedupe = Deduplicator(window_seconds=60)
    assert dedupe.seen("refused", 0.0) == (True, 0)
    assert dedupe.seen("refused", 1.0) == (False, 0)
    assert dedupe.seen("other", 2.0) == (True, 0)
    assert dedupe.seen("refused", 3.0) == (False, 0)
    assert dedupe.seen("refused", 61.0) == (True, 2)


def test_the_deduplicator_forgets_the_oldest_key_when_full():
    dedupe = Deduplicator(window_seconds=60, max_keys=2)
    dedupe.seen("a", 0.0)
    dedupe.seen("b", 1.0)
    dedupe.seen("c", 2.0)
    assert dedupe.seen("a", 3.0) == (True, 0)  # forgotten, so emitted again


def test_the_stderr_tail_keeps_the_last_non_empty_lines_within_a_size():
    text = "\n".join(f"line {i}" for i in range(20)) + "\n\n"
    assert stderr_tail(text, lines=3) == "line 17\nline 18\nline 19"
    assert stderr_tail("x" * 1000, chars=10) == "…xxxxxxxxx"
    assert stderr_tail("") == ""


def _failure(index: int) -> tuple[ExecutorTask, ExecutorError]:
    task = ExecutorTask(task_id=f"t-{index}", args=["x"], source_offsets=[index])
    error = ExecutorError.model_construct(task=task, exit_code=3, stderr=f"boom {index}\n", exception=None, pid=1,
                                          reason="failed", attempt=1, result=None)
    return task, error


class Recorder:
    """A logger that keeps what it is given (whatever the global structlog configuration filters)."""

    def __init__(self) -> None:
        self.entries: list[dict] = []

    def warning(self, event: str, **fields: object) -> None:
        self.entries.append({"event": event, "level": "warning", **fields})


def test_a_failed_task_is_logged_at_warning_with_what_a_person_needs():
    recorder = Recorder()
    TaskFailureLog(RateLimiter(burst=5, per_seconds=10), log=recorder).failed(*_failure(7), partition=2, action="skipped")
    assert recorder.entries == [{"event": "task failed", "level": "warning", "task_id": "t-7", "partition": 2,
                                 "source_offsets": [7], "reason": "failed", "exit_code": 3, "attempt": 1,
                                 "action": "skipped", "stderr": "boom 7"}]


def test_a_storm_of_failures_logs_a_burst_then_says_how_many_more_failed():
    recorder = Recorder()
    log = TaskFailureLog(RateLimiter(burst=3, per_seconds=10), log=recorder)
    for i in range(50):
        log.failed(*_failure(i), partition=0, action="skipped")
    log.flush(now=float("inf"))  # the window has closed
    assert [entry["event"] for entry in recorder.entries] == ["task failed"] * 3 + ["47 more task failures not logged"]
    assert recorder.entries[-1]["suppressed"] == 47
