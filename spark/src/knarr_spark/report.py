"""What a backfill did: per-chunk results, their totals per partition, the report and summary. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from knarr.runtime.stats import RunStats

# What a chunk reports is what its worker counted.
COUNTS = tuple(RunStats.__dataclass_fields__)


@dataclass(kw_only=True)
class ChunkResult(RunStats):
    """One chunk's outcome, sent from its Spark task back to the driver (as a dict): where it
    was, how it went, and the worker's own counts (the RunStats fields it inherits)."""

    index: int
    partition: int
    start: int
    end: int
    ok: bool = True
    error: str = ""
    attempt: int = 1  # which Spark attempt produced this result (1: first try)
    duration_seconds: float = 0.0  # the in-task worker's run
    read_seconds: float = 0.0  # reading the chunk (Kafka) before it

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChunkResult:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass
class BackfillReport:
    source: dict[str, Any]
    chunk_size: int
    planned_chunks: int
    chunks: list[ChunkResult]
    duration_seconds: float = 0.0
    planning_seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)
    aborted: str = ""  # set when the Spark job itself failed (a chunk crashed on every attempt)

    @property
    def failed_chunks(self) -> list[ChunkResult]:
        return [c for c in self.chunks if not c.ok]

    @property
    def ok(self) -> bool:
        """Every planned chunk was processed (whatever happened to single tasks inside)."""
        return not self.aborted and not self.failed_chunks and len(self.chunks) == self.planned_chunks

    @property
    def work_failed(self) -> bool:
        """Tasks failed for good or payloads were dead-lettered: the history was not fully reprocessed."""
        totals = self.totals()
        return bool(totals["failed"] or totals["dead_lettered"])

    @property
    def status(self) -> str:
        if not self.ok:
            return "failed"
        return "finished with failed work" if self.work_failed else "succeeded"

    def totals(self) -> dict[str, int]:
        return _sum(self.chunks)

    def per_partition(self) -> dict[int, dict[str, int]]:
        by: dict[int, list[ChunkResult]] = {}
        for c in self.chunks:
            by.setdefault(c.partition, []).append(c)
        return {p: {**_sum(cs), "chunks": len(cs), "failed_chunks": sum(not c.ok for c in cs)} for p, cs in sorted(by.items())}

    def as_dict(self) -> dict[str, Any]:
        totals = self.totals()
        return {
            "status": self.status,
            "source": self.source,
            "chunk_size": self.chunk_size,
            "planned_chunks": self.planned_chunks,
            "completed_chunks": sum(c.ok for c in self.chunks),
            "failed_chunks": [c.as_dict() for c in self.failed_chunks],
            "retried_chunks": sum(c.attempt > 1 for c in self.chunks),
            "aborted": self.aborted,
            "warnings": self.warnings,
            "duration_seconds": round(self.duration_seconds, 3),
            "planning_seconds": round(self.planning_seconds, 3),
            "messages_per_second": round(totals["messages"] / self.duration_seconds, 1) if self.duration_seconds else None,
            "totals": totals,
            "partitions": {str(p): v for p, v in self.per_partition().items()},
            "chunks": [c.as_dict() for c in sorted(self.chunks, key=lambda c: c.index)],
        }


def _sum(chunks: Iterable[ChunkResult]) -> dict[str, int]:
    out = dict.fromkeys(COUNTS, 0)
    for c in chunks:
        for k in COUNTS:
            out[k] += getattr(c, k)
    return out


def summary_text(report: BackfillReport) -> str:
    """The human summary printed at the end: one line per partition, then the total."""
    data = report.as_dict()
    header = (f"{'partition':>9}  {'chunks':>6}  {'messages':>9}  {'tasks':>7}  {'succeeded':>9}  {'failed':>6}  "
              f"{'replaced':>8}  {'dead-lettered':>13}")
    lines = [f"knarr backfill {data['status']}: {data['completed_chunks']}/{data['planned_chunks']} chunks in "
             f"{data['duration_seconds']}s", header]

    def row(name: str, v: Mapping[str, int], chunks: int) -> str:
        return (f"{name:>9}  {chunks:>6}  {v['messages']:>9}  {v['tasks']:>7}  {v['succeeded']:>9}  {v['failed']:>6}  "
                f"{v['replaced']:>8}  {v['dead_lettered']:>13}")

    for p, v in report.per_partition().items():
        lines.append(row(str(p), v, v["chunks"]))
    lines.append(row("total", data["totals"], len(report.chunks)))
    totals = data["totals"]
    if report.work_failed:
        lines.append(f"{totals['failed']} task(s) failed for good and {totals['dead_lettered']} payload(s) went to the DLQ: "
                     "the failed tasks are logged at WARNING by the executors, the dead letters are in the DLQ")
    for w in report.warnings:
        lines.append(f"warning: {w}")
    for c in report.failed_chunks:
        lines.append(f"FAILED chunk {c.index} (partition {c.partition} [{c.start}, {c.end})) after {c.attempt} attempt(s): {c.error}")
    if report.aborted:
        lines.append(f"ABORTED: {report.aborted}")
    return "\n".join(lines)
