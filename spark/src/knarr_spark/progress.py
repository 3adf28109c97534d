"""The driver's progress bar: completed chunks (Spark tasks) out of all, on stderr, on a terminal only.

The bar is tqdm's, like ``knarr run``'s (see knarr.observability.progress): off when stderr is
not a terminal (a SparkApplication's driver log, CI), where the summary at the end says it all.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, TextIO

from tqdm import tqdm

from knarr.observability.progress import wanted

POLL_SECONDS = 0.5


def retries_text(failed_attempts: int) -> str:
    """What the bar says after the count (pure)."""
    return f"{failed_attempts} failed attempt(s), retried" if failed_attempts else ""


class Progress:
    """Polls Spark's status tracker for the job group's tasks and advances a tqdm bar."""

    def __init__(self, spark_context: Any, group: str, total: int, out: TextIO | None = None) -> None:
        self.sc, self.group, self.total = spark_context, group, total
        self.out = sys.stderr if out is None else out
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="knarr-backfill-progress", daemon=True)
        self._bar: tqdm | None = None

    def __enter__(self) -> Progress:
        if wanted(self.out):
            self._bar = tqdm(total=self.total, desc="chunks", unit="chunk", file=self.out, dynamic_ncols=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is None:
            return
        self._stop.set()
        self._thread.join()
        self._draw()
        self._bar.close()

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
        while not self._stop.wait(POLL_SECONDS):  # the wait paces the redraws; __exit__ ends it at once
            self._draw()

    def _draw(self) -> None:
        assert self._bar is not None
        try:
            done, failed = self.counts()
        except Exception:  # the context is stopping; a missed redraw is harmless
            return
        self._bar.n = done
        self._bar.set_postfix_str(retries_text(failed), refresh=False)
        self._bar.refresh()
