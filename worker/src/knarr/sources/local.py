"""The embedded source: a JSONL file read as a partitioned log, with offsets kept in a local file.

Line ``i`` is offset ``i // partitions`` of partition ``i % partitions``. It feeds the very
same processors and watermarks as Kafka, so the embedded demo exercises the real engine; a
rerun resumes after the last committed offsets.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from knarr.api.messages import SourceMessage
from knarr.config.models import LocalSourceConfig
from knarr.errors import UnavailableError
from knarr.observability import metrics
from knarr.sources.base import AssignFn, RevokeFn

IDLE_SECONDS = 0.05


class LocalSource:
    """``topic`` names the source in messages, logs and dead letters: by default, the file."""

    def __init__(self, config: LocalSourceConfig, topic: str | None = None) -> None:
        self.topic = topic or config.path
        self.path = Path(config.path)
        self.partitions = config.partitions
        self.offsets_path = Path(config.offsets_path or f"{config.path}.offsets.json")
        self.exit_when_done = config.exit_when_done
        self._committed: dict[int, int] = {}
        self._ends: dict[int, int] = {}
        self._file = None
        self._line = 0
        self._eof = False
        self._paused = False
        self._on_revoke: RevokeFn | None = None
        self.total: int | None = None  # lines this run has to process, known once started

    @property
    def committed_offsets(self) -> dict[int, int]:
        return dict(self._committed)

    @property
    def high_watermarks(self) -> dict[int, int]:
        return dict(self._ends)

    async def start(self, on_assign: AssignFn, on_revoke: RevokeFn) -> None:
        if not self.path.is_file():
            raise UnavailableError(f"source.local.path {str(self.path)!r} does not exist; point it at a JSONL file")
        self._on_revoke = on_revoke
        try:
            self.offsets_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UnavailableError(f"source.local.offsets_path {str(self.offsets_path)!r}: its directory cannot be "
                                   f"created ({exc.strerror}); point it at a writable place") from None
        if self.offsets_path.is_file():
            self._committed = {int(k): v for k, v in json.loads(self.offsets_path.read_text()).items()}
        total = sum(1 for _ in self.path.open("rb"))
        for p in range(self.partitions):
            self._ends[p] = len(range(p, total, self.partitions))
        self.total = sum(max(0, end - self._committed.get(p, 0)) for p, end in self._ends.items())
        self._publish_offsets(self._committed)
        # Resume at the first line any partition still needs.
        starts = [self._committed.get(p, 0) * self.partitions + p for p in range(self.partitions)]
        self._line = min(starts) if starts else 0
        self._file = self.path.open("rb")
        for _ in range(self._line):
            self._file.readline()
        await on_assign(list(range(self.partitions)))

    async def poll(self, max_records: int, commits: dict[int, int]) -> tuple[list[SourceMessage], dict[int, int]]:
        done = await self.commit_now(commits)
        if self._paused or self._eof:
            await asyncio.sleep(IDLE_SECONDS)
            return [], done
        messages = []
        assert self._file is not None
        while len(messages) < max_records:
            raw = self._file.readline()
            if not raw:
                self._eof = True
                break
            partition, offset = self._line % self.partitions, self._line // self.partitions
            self._line += 1
            if offset < self._committed.get(partition, 0):
                continue  # already done in an earlier run
            messages.append(
                SourceMessage.model_construct(
                    topic=self.topic, partition=partition, offset=offset, value=raw.rstrip(b"\r\n"),
                    key=None, timestamp=None, payload=None, parse_error=None,
                )
            )
        if not messages:
            await asyncio.sleep(IDLE_SECONDS)
        return messages, done

    async def commit_now(self, commits: dict[int, int]) -> dict[int, int]:
        if not commits:
            return {}
        self._committed.update(commits)
        tmp = self.offsets_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({str(k): v for k, v in sorted(self._committed.items())}))
        os.replace(tmp, self.offsets_path)  # atomic: a crash leaves the old or the new file, never half
        self._publish_offsets(commits)
        for partition in commits:
            metrics.labelled(metrics.offsets_committed, str(partition)).inc()
        return dict(commits)

    def _publish_offsets(self, offsets: dict[int, int]) -> None:
        """The same committed-offset and lag metrics as the Kafka source reports."""
        for partition, offset in offsets.items():
            metrics.labelled(metrics.committed_offset, str(partition)).set(offset)
            end = self._ends.get(partition)
            if end is not None:
                metrics.labelled(metrics.consumer_lag, str(partition)).set(max(0, end - offset))

    def set_paused(self, partitions: set[int]) -> None:
        # One reader feeds every partition, so pausing any one pauses the read.
        self._paused = bool(partitions)

    @property
    def finished(self) -> bool:
        return self.exit_when_done and self._eof and all(self._committed.get(p, 0) >= end for p, end in self._ends.items())

    async def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
