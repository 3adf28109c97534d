"""Benchmark: the same workload through the streaming worker and through a backfill on local Spark.

    make bench-backfill            # or: uv run python bench/backfill.py --messages 2000 --master 'local[2]'

Both read the same messages from the same Kafka topic (the local test broker), run the demo
fan-out search handler (grep subprocesses) with the same executor settings, and write to a
filesystem sink. Printed: messages per second of each, and backfill / streaming.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # the Kafka test-broker helpers live in tests/services

from knarr.config.loading import config_from_dict  # noqa: E402
from knarr.demo.data import write_corpus  # noqa: E402
from knarr.demo.handler import SearchHandler  # noqa: E402
from knarr.engine import event_loop  # noqa: E402
from knarr.engine.worker import Worker  # noqa: E402
from knarr_spark.job import BackfillRequest, KafkaSlice, run_backfill, spark_session  # noqa: E402
from tests.services.kafka import create_topic, end_offsets, ensure_kafka, produce_json, unique_name  # noqa: E402
from tests.spark.workload import requests  # noqa: E402


def config(out: Path, brokers: str, topic: str, max_executors: int) -> dict:
    return {
        "kafka": {"brokers": brokers, "source_topic": topic, "consumer_group": unique_name("bench")},
        "executor": {"binary_path": shutil.which("grep"), "max_executors": max_executors, "window_size": 50,
                     "task_timeout_seconds": 60},
        "sinks": {"filesystem": {"results": {"base_path": str(out)}}},
        "dlq": {"path": str(out / "dlq.jsonl")},
        "metrics": {"enabled": False},
        "logging": {"level": "ERROR", "format": "console"},
    }


def count_lines(path: Path) -> int:
    if not path.exists():
        return 0
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


async def streaming(data: dict, out: Path, expected: int) -> float:
    worker = Worker(config_from_dict(data), SearchHandler())
    started = time.monotonic()
    running = asyncio.create_task(worker.run())
    while count_lines(out / "summaries.jsonl") < expected:
        if running.done():
            raise SystemExit(f"streaming worker stopped early: {running.result()}")
        await asyncio.sleep(0.05)  # polling the output, the bench's only way to see completion
    elapsed = time.monotonic() - started
    worker.stop()
    await running
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--max-executors", type=int, default=2, help="subprocess pool per worker (streaming) and per Spark task")
    ap.add_argument("--chunk-size", type=int, default=400)
    args = ap.parse_args()

    brokers = ensure_kafka()
    work = Path(tempfile.mkdtemp(prefix="knarr-bench-backfill-"))
    corpus = write_corpus(work / "corpus", files=6, lines=2000)
    topic = unique_name("bench-backfill")
    create_topic(brokers, topic, partitions=args.partitions)
    produce_json(brokers, topic, requests(corpus, args.messages, prefix="bench"), key_fn=lambda r: r["request_id"])
    ends = end_offsets(brokers, topic)
    n = sum(ends.values())
    cpus = os.cpu_count()
    print(f"workload: {n} messages (demo fan-out search: grep subprocesses) on {args.partitions} partitions; "
          f"max_executors={args.max_executors}; {cpus} CPUs")

    s_out = work / "streaming"
    s_seconds = event_loop.run(streaming(config(s_out, brokers, topic, args.max_executors), s_out, n))
    s_rate = n / s_seconds
    print(f"streaming worker (1 process):        {s_seconds:7.2f}s  {s_rate:8.1f} msg/s  (incl. group join)")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    t0 = time.monotonic()
    spark, _ = spark_session(args.master, "knarr-bench", {"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.monotonic() - t0
    b_out = work / "backfill"
    request = BackfillRequest(
        config_from_dict(config(b_out, brokers, topic, args.max_executors)), "knarr.demo.handler:SearchHandler",
        KafkaSlice(from_offsets=dict.fromkeys(ends, 0), to_offsets=ends), args.chunk_size,
    )
    report = run_backfill(request)
    spark.stop()
    assert report.ok, report.as_dict()
    assert count_lines(b_out / "summaries.jsonl") == n
    b_rate = n / report.duration_seconds
    print(f"backfill on {args.master:<10} ({len(report.chunks)} chunks): {report.duration_seconds:7.2f}s  {b_rate:8.1f} msg/s  "
          f"(+{startup:.1f}s Spark startup, not counted)")
    totals = report.totals()
    chunk_seconds = sorted((round(c.read_seconds, 1), round(c.duration_seconds, 1)) for c in report.chunks)
    print(f"  {totals['tasks']} subprocess tasks ({totals['tasks'] / n:.1f}/message); (read, process) seconds per chunk: {chunk_seconds}; planning {report.planning_seconds:.1f}s")
    print(f"ratio backfill/streaming: {b_rate / s_rate:.2f}x")
    print(json.dumps({"messages": n, "streaming_msg_per_s": round(s_rate, 1), "backfill_msg_per_s": round(b_rate, 1),
                      "ratio": round(b_rate / s_rate, 2), "master": args.master, "max_executors": args.max_executors,
                      "chunk_size": args.chunk_size, "spark_startup_s": round(startup, 1)}))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
