"""Fairness under a flood: does a trickling partition keep its latency while another partition floods?

Two runs against the local Kafka broker, in one invocation, side by side:

* unloaded — partition 1 trickles single-task messages and nothing else runs;
* loaded   — partition 0 first receives a flood (one message fanning out to N short tasks, or
  N single-task messages), then partition 1 trickles exactly as before.

Every task is a real subprocess (tests/programs/behave sleep=S) and the pool has
2 x cores slots. For each trickle task two latencies are taken:

* end-to-end: the message's Kafka timestamp (producer CreateTime) -> on_task_complete
  — what a user of the trickling partition sees;
* in-engine:  arrange() of its window -> on_task_complete — the slot scheduler alone.

The verdict compares loaded to unloaded p50 and p95 end-to-end latency (target: at most 2x).

    uv run python bench/fairness.py [--flood fanout|messages] [--flood-tasks 10000] [--trickle 60]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # for tests.services.kafka (broker start and topic helpers)

import knarr  # noqa: E402
from knarr.config.loading import config_from_dict  # noqa: E402
from knarr.engine import event_loop  # noqa: E402
from knarr.engine.worker import Worker  # noqa: E402
from knarr.kafka.clients import close_producer, open_producer  # noqa: E402
from rounds import verdict  # noqa: E402

from tests.services.kafka import create_topic, ensure_kafka, produce_json, unique_name  # noqa: E402

BEHAVE = str(REPO_ROOT / "tests" / "programs" / "behave")
FLOOD, TRICKLE = 0, 1  # partitions
TARGET_RATIO = 2.0


@dataclass
class Sample:
    end_to_end: float
    in_engine: float
    flood_waiting: int  # flood tasks still waiting for a slot when this trickle task completed


@dataclass
class FairnessHandler(knarr.BaseHandler[None, None]):
    """Flood messages fan out to ``flood_fanout`` tasks each; trickle messages to one task."""

    flood_fanout: int
    task_sleep: float
    samples: list[Sample] = field(default_factory=list)
    flood_done: int = 0
    worker: Worker | None = None

    async def arrange(self, messages, pending):
        arranged_at = time.time()
        tasks = []
        for msg in messages:
            count = self.flood_fanout if msg.partition == FLOOD else 1
            for _ in range(count):
                tasks.append(knarr.ExecutorTask(
                    args=[f"sleep={self.task_sleep}"], source_offsets=[msg.offset],
                    metadata={"partition": msg.partition, "produced_at": (msg.timestamp or 0) / 1000,
                              "arranged_at": arranged_at},
                ))
        return tasks

    async def on_task_complete(self, result):
        meta = result.task.metadata
        if meta["partition"] == FLOOD:
            self.flood_done += 1
            return None
        now = time.time()
        waiting = self.worker.scheduler.waiting_count if self.worker else 0
        self.samples.append(Sample(now - meta["produced_at"], now - meta["arranged_at"], waiting))
        return None


def worker_config(bootstrap: str, topic: str, max_executors: int, tmp: Path, executor: dict) -> knarr.KnarrConfig:
    return config_from_dict({
        "kafka": {"brokers": bootstrap, "source_topic": topic, "consumer_group": unique_name("bench-g"),
                  "session_timeout_ms": 6000, "heartbeat_interval_ms": 500},
        "executor": {"binary_path": BEHAVE, "max_executors": max_executors, "task_timeout_seconds": 30,
                     "drain_timeout_seconds": 2, **executor},
        "sinks": {"filesystem": {"out": {"base_path": str(tmp)}}},
        "dlq": {"path": str(tmp / "dlq.jsonl")},
        "metrics": {"enabled": False},
        "logging": {"level": "ERROR", "format": "console"},
    })


def trickle(bootstrap: str, topic: str, count: int, interval: float) -> None:
    """Produce ``count`` single-task messages to the trickle partition, one every ``interval`` seconds.

    One connected producer, flushed per message: the CreateTime stamped at produce() is then
    within a millisecond or two of the message reaching the broker.
    """
    producer = open_producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
    try:
        producer.list_topics(topic, timeout=10)  # connect before the clock starts
        next_at = time.monotonic()
        for i in range(count):
            producer.produce(topic, value=json.dumps({"i": i}).encode(), partition=TRICKLE)
            producer.flush(10)
            next_at += interval
            time.sleep(max(0.0, next_at - time.monotonic()))  # pacing: this is the arrival rate under test
    finally:
        close_producer(producer)


async def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(0.05)


async def measure(args: argparse.Namespace, bootstrap: str, flooded: bool, tmp: Path,
                  executor: dict | None = None) -> tuple[list[Sample], int]:
    topic = unique_name("bench-fair")
    create_topic(bootstrap, topic, partitions=2)
    fanout = args.flood_tasks if args.flood == "fanout" else 1
    handler = FairnessHandler(flood_fanout=fanout, task_sleep=args.task_sleep)
    worker = Worker(worker_config(bootstrap, topic, args.max_executors, tmp, executor or {}), handler)
    handler.worker = worker
    run = asyncio.create_task(worker.run())
    try:
        await wait_for(lambda: {FLOOD, TRICKLE} <= set(worker.processors) or run.done(), 60, "partition assignment")
        if run.done():
            run.result()
        if flooded:
            records = [{"flood": 0}] if args.flood == "fanout" else [{"flood": i} for i in range(args.flood_tasks)]
            await asyncio.to_thread(produce_json, bootstrap, topic, records, FLOOD)
            await wait_for(lambda: worker.scheduler.waiting_count > 0, 60, "the flood to saturate the pool")
        producer = threading.Thread(target=trickle, args=(bootstrap, topic, args.trickle, args.interval), daemon=True)
        producer.start()
        deadline = args.trickle * args.interval + args.settle_timeout
        try:
            await wait_for(lambda: len(handler.samples) >= args.trickle, deadline, "every trickle task")
        except TimeoutError as exc:
            print(f"  ! {exc}: {len(handler.samples)}/{args.trickle} completed", file=sys.stderr)
        producer.join()
        return handler.samples, handler.flood_done
    finally:
        worker.stop()
        await asyncio.wait_for(run, 120)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def describe(samples: list[Sample], attr: str) -> dict[str, float]:
    values = [getattr(s, attr) for s in samples]
    if not values:
        return {"n": 0, "p50": float("nan"), "p95": float("nan"), "max": float("nan"), "mean": float("nan")}
    return {"n": len(values), "p50": quantile(values, 0.5), "p95": quantile(values, 0.95),
            "max": max(values), "mean": statistics.fmean(values)}


def table(title: str, rows: list[tuple[str, dict[str, float]]]) -> None:
    print(f"\n  {title}")
    print(f"    {'':28}{'n':>5}{'p50 ms':>10}{'p95 ms':>10}{'max ms':>10}{'mean ms':>10}")
    for name, d in rows:
        print(f"    {name:28}{d['n']:>5}{d['p50'] * 1000:>10.1f}{d['p95'] * 1000:>10.1f}"
              f"{d['max'] * 1000:>10.1f}{d['mean'] * 1000:>10.1f}")


def verdicts(args: argparse.Namespace, name: str, base: dict[str, float], loaded: dict[str, float]) -> bool:
    ok = True
    for q in ("p50", "p95"):
        ratio = loaded[q] / base[q] if base[q] else float("inf")
        passed = ratio <= TARGET_RATIO and loaded["n"] == args.trickle
        ok = ok and passed
        print(f"    {name:28}{q} ratio {ratio:7.2f}x (target <= {TARGET_RATIO:g}x)  {verdict(passed)}")
    return ok


def report(args: argparse.Namespace, unloaded: list[Sample], runs: list[tuple[str, list[Sample], int]]) -> bool:
    print(f"\nfairness: flood={args.flood} ({args.flood_tasks} tasks on partition {FLOOD}), "
          f"trickle={args.trickle} single-task messages every {args.interval * 1000:.0f} ms on partition {TRICKLE}, "
          f"task=behave sleep={args.task_sleep}, max_executors={args.max_executors} ({os.cpu_count()} cores)")
    ok = True
    for attr, title in (("end_to_end", "end-to-end latency of trickle tasks (produced -> on_task_complete)"),
                        ("in_engine", "in-engine latency of trickle tasks (arrange -> on_task_complete)")):
        base = describe(unloaded, attr)
        table(title, [("unloaded", base)] + [(name, describe(samples, attr)) for name, samples, _ in runs])
        for name, samples, _ in runs:
            passed = verdicts(args, name, base, describe(samples, attr))
            if attr == "end_to_end" and name == runs[0][0]:
                ok = passed
    print()
    for name, samples, flood_done in runs:
        waiting = [s.flood_waiting for s in samples]
        print(f"  {name}: {flood_done} flood tasks completed; flood tasks waiting for a slot as trickle tasks "
              f"completed: min {min(waiting, default=0)}, max {max(waiting, default=0)}")
        if waiting and min(waiting) == 0:
            print("    ! some trickle tasks ran only after the flood had drained: either the flood was too small "
                  "(raise --flood-tasks) or the trickle could not get in before it drained")
    print(f"\n  verdict ({runs[0][0]}, end-to-end): {verdict(ok)}")
    return ok


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flood", choices=["fanout", "messages"], default="fanout",
                        help="one message fanning out to --flood-tasks tasks, or that many single-task messages")
    parser.add_argument("--flood-tasks", type=int, default=10_000)
    parser.add_argument("--trickle", type=int, default=60, help="trickle messages per run")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between trickle messages")
    parser.add_argument("--task-sleep", type=float, default=0.02, help="seconds each task's subprocess sleeps")
    parser.add_argument("--max-executors", type=int, default=2 * (os.cpu_count() or 1))
    parser.add_argument("--settle-timeout", type=float, default=180,
                        help="extra seconds to wait for the last trickle tasks after the trickle ends")
    parser.add_argument("--skip-unpaused", action="store_true",
                        help="skip the third run (the flood with the backpressure pause out of reach)")
    parser.add_argument("--bootstrap", default="", help="Kafka bootstrap; default: start or reuse the local broker")
    args = parser.parse_args()

    bootstrap = args.bootstrap or ensure_kafka()
    tmp = REPO_ROOT / "out" / "bench-fairness"
    tmp.mkdir(parents=True, exist_ok=True)
    print("measuring the trickle alone ...", file=sys.stderr)
    unloaded, _ = await measure(args, bootstrap, flooded=False, tmp=tmp)
    print("measuring the trickle beside the flood (default config) ...", file=sys.stderr)
    loaded, flood_done = await measure(args, bootstrap, flooded=True, tmp=tmp)
    runs = [("loaded (default config)", loaded, flood_done)]
    if not args.skip_unpaused:
        # The same flood with the backpressure pause out of reach: the slot scheduler alone.
        high = math.ceil(2 * (args.flood_tasks + args.trickle) / args.max_executors) + 1
        print("measuring the trickle beside the flood (no backpressure pause) ...", file=sys.stderr)
        unpaused, unpaused_done = await measure(args, bootstrap, flooded=True, tmp=tmp,
                                                executor={"backpressure_high_multiplier": high})
        runs.append(("loaded (pause out of reach)", unpaused, unpaused_done))
    report(args, unloaded, runs)
    return 0  # a MISS is a finding to read, not a crash


if __name__ == "__main__":
    sys.exit(event_loop.run(main()))  # the loop `knarr run` gives a worker
