"""``knarr demo``: the fan-out search example end to end, on embedded defaults (or on Kafka)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from knarr.config.loading import config_from_dict
from knarr.demo.data import write_corpus, write_requests
from knarr.demo.handler import SearchHandler
from knarr.engine import event_loop
from knarr.engine.worker import Worker


def _grep() -> str:
    path = shutil.which("grep")
    if path is None:
        raise SystemExit("knarr demo needs grep on PATH")
    return path


def run_demo(out: str, kafka: str | None = None) -> int:
    base = Path(out).resolve()
    corpus = write_corpus(base / "corpus")
    requests = base / "requests.jsonl"
    if not requests.exists():
        write_requests(requests, corpus)
    if kafka:
        from knarr.demo.on_kafka import run_on_kafka

        return run_on_kafka(base, requests, kafka, _grep())
    config = config_from_dict({
        "source": {"type": "local", "local": {"path": str(requests), "partitions": 3}},
        "kafka": {"source_topic": "search-requests"},
        "executor": {"binary_path": _grep(), "max_executors": 4, "window_size": 10, "task_timeout_seconds": 30},
        "sinks": {"filesystem": {"results": {"base_path": str(base / "results")}}},
        "dlq": {"path": str(base / "results" / "dlq.jsonl")},
        "metrics": {"enabled": False},
        "logging": {"level": "WARNING", "format": "console"},
    })
    before = _lines(base / "results" / "summaries.jsonl")
    code = event_loop.run(Worker(config, SearchHandler()).run(), config.event_loop, config.gc_threshold)
    summaries = _lines(base / "results" / "summaries.jsonl")
    new = summaries[len(before):]
    print(f"knarr demo: {len(new)} request(s) processed this run, {len(summaries)} summaries in total")
    for row in new[:5]:
        print("  " + json.dumps(row))
    if len(new) > 5:
        print(f"  ... and {len(new) - 5} more")
    if not new:
        print(f"  every request was already committed; remove {requests}.offsets.json to process them again")
    print(f"per-task matches: {base / 'results' / 'matches.jsonl'}")
    print(f"per-request summaries: {base / 'results' / 'summaries.jsonl'}")
    print(f"committed offsets: {requests}.offsets.json")
    return code


def _lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
