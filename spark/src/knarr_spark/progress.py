"""The driver's progress bar: completed chunks (Spark tasks) out of all, on stderr."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, TextIO

POLL_SECONDS = 1.0


def render(done: int, total: int, failed_attempts: int, elapsed: float, width: int = 30) -> str:
    """``[#########.............]  12/40 chunks  30%  1 retried  0:42`` (pure)."""
    fraction = done / total if total else 1.0
    filled = min(width, int(fraction * width))
    minutes, seconds = divmod(int(elapsed), 60)
    retried = f"  {failed_attempts} failed attempt(s) (retried)" if failed_attempts else ""
    return f"[{'#' * filled}{'.' * (width - filled)}] {done:>5}/{total} chunks {fraction:>4.0%}{retried}  {minutes}:{seconds:02d}"


class Progress:
    """Polls Spark's status tracker for the job group's tasks and redraws one line on stderr."""

    def __init__(self, spark_context: Any, group: str, total: int, out: TextIO = sys.stderr) -> None:
        self.sc, self.group, self.total, self.out = spark_context, group, total, out
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="knarr-backfill-progress", daemon=True)
        self._started = time.monotonic()
        self._interactive = hasattr(out, "isatty") and out.isatty()
        self._last = ""

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._draw(final=True)

    def counts(self) -> tuple[int, int]:
        """(completed tasks, failed task attempts) of the job group's stages so far."""
        tracker = self.sc.statusTracker()
        done = failed = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else []:
                stage = tracker.getStageInfo(stage_id)
                if stage is not None and stage.numTasks == self.total:  # the chunk stage, not the read/shuffle
                    done = max(done, stage.numCompletedTasks)
                    failed = max(failed, stage.numFailedTasks)
        return done, failed

    def _loop(self) -> None:
        while not self._stop.wait(POLL_SECONDS):  # the wait paces the redraws; stop() ends it at once
            self._draw()

    def _draw(self, final: bool = False) -> None:
        try:
            done, failed = self.counts()
        except Exception:  # the context is stopping; a missed redraw is harmless
            return
        line = render(done, self.total, failed, time.monotonic() - self._started)
        if self._interactive:
            self.out.write("\r" + line + ("\n" if final else ""))
        elif line[: line.rfind("  ")] != self._last or final:  # logs: only when the count changes
            self.out.write(line + "\n")
        self._last = line[: line.rfind("  ")]
        self.out.flush()
