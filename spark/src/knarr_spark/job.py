"""The driver: plan the chunks, run one Spark task per chunk, gather the report.

Read top to bottom: the request, the Spark session, planning (Kafka or files), running the
chunks (with the progress bar), and the report.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from knarr.config.root import KnarrConfig
from knarr_spark import file_input, kafka_input
from knarr_spark.planning import Chunk, ChunkIndex, PartitionRange, plan_chunks
from knarr_spark.processing import ChunkJob, run_chunk, task_config
from knarr_spark.progress import Progress
from knarr_spark.ranges import RangeError, ranges_from_offsets, ranges_from_times
from knarr_spark.report import BackfillReport, ChunkResult

JOB_GROUP = "knarr-backfill"
DEFAULT_CHUNK_SIZE = 10_000
DEFAULT_MAX_FAILURES = 4  # Spark's own default of spark.task.maxFailures on a cluster


@dataclass(frozen=True)
class KafkaSlice:
    """Offsets ``{partition: offset}`` or epoch-millisecond times (``to_time`` None: up to now)."""

    from_offsets: dict[int, int] | None = None
    to_offsets: dict[int, int] | None = None
    from_time: int | None = None
    to_time: int | None = None


@dataclass(frozen=True)
class FileInput:
    path: str
    format: str


@dataclass(frozen=True)
class BackfillRequest:
    config: KnarrConfig
    handler: str
    source: KafkaSlice | FileInput
    chunk_size: int = DEFAULT_CHUNK_SIZE
    master: str | None = None
    app_name: str = "knarr-backfill"
    spark_conf: dict[str, str] = field(default_factory=dict)


# --- the Spark session ---------------------------------------------------------------------
def spark_session(master: str | None, app_name: str, conf: dict[str, str]) -> tuple[Any, bool]:
    """The active session, or a new one; True if this call created it (and should stop it)."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:  # embedded (tests, notebooks): use theirs, leave it running
        return SparkSession.builder.getOrCreate(), False
    if master and master.startswith("local"):
        # Local executors are forked Python processes: make them this interpreter (this venv).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = {"spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "8", **conf}
    for key, value in settings.items():
        builder = builder.config(key, value)
    return builder.getOrCreate(), True


def task_attempts(master: str, max_failures: str | None) -> int:
    """How many times Spark runs a failing task. Local mode ignores spark.task.maxFailures and
    uses ``local[N,R]``'s R (1 for plain ``local[N]``)."""
    if master.startswith("local"):
        match = re.fullmatch(r"local\[\s*[^,\]]+\s*,\s*(\d+)\s*\]", master)
        return int(match.group(1)) if match else 1
    return int(max_failures) if max_failures else DEFAULT_MAX_FAILURES


# --- planning ------------------------------------------------------------------------------
def plan_kafka(config: KnarrConfig, slice_: KafkaSlice, chunk_size: int) -> tuple[list[Chunk], list[str]]:
    marks = kafka_input.watermarks(config.kafka)
    if slice_.from_offsets is not None:
        ranges, warnings = ranges_from_offsets(slice_.from_offsets, slice_.to_offsets or {}, marks)
    elif slice_.from_time is not None:
        if slice_.to_time is not None and slice_.to_time < slice_.from_time:
            raise RangeError("--to-timestamp is before --from-timestamp; the range would be empty")
        start, end = kafka_input.resolve_times(config.kafka, marks, slice_.from_time, slice_.to_time)
        ranges, warnings = ranges_from_times(start, end, marks), []
    else:
        raise RangeError("a Kafka backfill needs --from-offsets/--to-offsets or --from-timestamp/--to-timestamp")
    return plan_chunks(ranges, chunk_size), warnings


def _file_ranges(records: Any) -> list[PartitionRange]:
    extents = records.map(lambda r: (r[0], (r[1], r[1]))).reduceByKey(
        lambda a, b: (min(a[0], b[0]), max(a[1], b[1]))).collect()
    return [PartitionRange(p, lo, hi + 1) for p, (lo, hi) in extents]


# --- running the chunks ----------------------------------------------------------------------
def _attempt() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.attemptNumber() + 1 if context is not None else 1


def _kafka_tasks(job: ChunkJob) -> Any:
    def run(chunks: Any) -> Any:
        from knarr.config.loading import config_from_dict

        kafka = config_from_dict(job.config).kafka
        for chunk in chunks:
            started = time.monotonic()
            messages = kafka_input.read_chunk(kafka, chunk)
            read = time.monotonic() - started
            result = run_chunk(chunk, messages, job, _attempt())
            result.read_seconds = read
            yield result.as_dict()

    return run


def _file_tasks(job: ChunkJob, chunks: list[Chunk], topic: str) -> Any:
    by_index = {c.index: c for c in chunks}

    def run(index: int, keyed: Any) -> Any:
        from knarr.api.messages import SourceMessage

        records = sorted((r for _, r in keyed), key=lambda r: r[1])  # offset order inside the chunk
        messages = [SourceMessage.model_construct(topic=topic, partition=p, offset=o, value=v, key=k, timestamp=t,
                                                  payload=None, parse_error=None) for p, o, v, k, t in records]
        if index in by_index:
            yield run_chunk(by_index[index], messages, job, _attempt()).as_dict()

    return run


def run_backfill(request: BackfillRequest) -> BackfillReport:
    """Run the whole backfill and say what happened. Raises RangeError/InputError/KafkaReadError
    for a request that cannot start; a chunk that fails for good is in the report, not raised."""
    started = time.monotonic()
    spark, created = spark_session(request.master, request.app_name, request.spark_conf)
    sc = spark.sparkContext
    try:
        job = ChunkJob(task_config(request.config), request.handler,
                       task_attempts(sc.master, sc.getConf().get("spark.task.maxFailures")))
        topic = request.config.kafka.source_topic
        if isinstance(request.source, FileInput):
            from pyspark import StorageLevel

            # Read once: the ranges and the chunks both come from it, and offsets must not move between.
            records = file_input.read_records(spark, request.source.path, request.source.format)
            records.persist(StorageLevel.MEMORY_AND_DISK)
            chunks, warnings = plan_chunks(_file_ranges(records), request.chunk_size), []
            source = {"type": "files", "path": request.source.path, "format": request.source.format}
        else:
            chunks, warnings = plan_kafka(request.config, request.source, request.chunk_size)
            source = {"type": "kafka", "topic": topic, "brokers": request.config.kafka.brokers,
                      "ranges": {str(c.partition): [c.start, c.end] for c in _merged(chunks)}}
        report = BackfillReport(source, request.chunk_size, len(chunks), [], warnings=warnings,
                                planning_seconds=time.monotonic() - started)
        if chunks:
            if isinstance(request.source, FileInput):
                index = ChunkIndex(chunks)
                keyed = records.map(lambda r: (_chunk_of(index, r), r)).partitionBy(len(chunks), lambda k: k)
                results = keyed.mapPartitionsWithIndex(_file_tasks(job, chunks, topic))
            else:
                results = sc.parallelize(chunks, len(chunks)).mapPartitions(_kafka_tasks(job))
            sc.setJobGroup(JOB_GROUP, f"knarr backfill of {topic}: {len(chunks)} chunk(s)")
            with Progress(sc, JOB_GROUP, len(chunks)):
                try:
                    report.chunks = [ChunkResult.from_dict(d) for d in results.collect()]
                except Exception as exc:  # the job was aborted: a task crashed on every attempt
                    report.aborted = _spark_failure(exc)
        report.duration_seconds = time.monotonic() - started
        return report
    finally:
        if created:
            spark.stop()


def _chunk_of(index: ChunkIndex, record: Any) -> int:
    chunk = index.locate(record[0], record[1])
    assert chunk is not None, f"record at partition {record[0]} offset {record[1]} is outside the plan"
    return chunk.index


def _merged(chunks: list[Chunk]) -> list[Chunk]:
    """One span per partition, for the report."""
    spans: dict[int, Chunk] = {}
    for c in chunks:
        first = spans.get(c.partition, c)
        spans[c.partition] = Chunk(c.partition, min(first.start, c.start), max(first.end, c.end))
    return list(spans.values())


def _spark_failure(exc: BaseException) -> str:
    """The useful line of a Py4J/Spark stack trace: the cause Spark reports for the job."""
    text = str(exc)
    for line in text.splitlines():
        if "Job aborted due to stage failure" in line or "Error" in line:
            return line.strip().lstrip(": ")[:2000]
    return text.strip().splitlines()[0][:2000] if text.strip() else type(exc).__name__
