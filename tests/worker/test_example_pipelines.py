"""A Pipeline manifest's handler runs with the manifest's own config: its sinks are the ones it writes to.

The config is the one the operator renders from the manifest; only the source is swapped for
the local source (sample input, no consumer group) and the brokers for the test broker, so
the handler's outputs go to the manifest's real Kafka sinks.
"""

from __future__ import annotations

import asyncio

import pytest

from knarr.config import config_from_dict
from knarr.demo.data import write_corpus, write_requests
from knarr.loader import load_handler_class
from knarr.engine.worker import Worker
from knarr_operator.spec import split_spec
from knarr_operator.worker_config import render_worker_config
from tests.examples import pipeline_manifests
from tests.services.kafka import consume_all, create_topic, unique_name

pytestmark = pytest.mark.kafka


def test_the_example_pipelines_handler_delivers_to_the_sinks_the_manifest_names(kafka_bootstrap, tmp_path):
    manifest = pipeline_manifests()["examples/pipeline.yaml#0"]
    operator_part, worker_part = split_spec(manifest["spec"])
    data = render_worker_config(worker_part).data
    suffix = unique_name("")
    for sink in data["sinks"]["kafka"].values():
        sink["topic"] += suffix  # fresh topics on the shared broker
        create_topic(kafka_bootstrap, sink["topic"])
    requests = tmp_path / "requests.jsonl"
    count = write_requests(requests, write_corpus(tmp_path / "corpus", files=3, lines=50), count=6)
    data["kafka"]["brokers"] = kafka_bootstrap
    data["source"] = {"type": "local", "local": {"path": str(requests), "partitions": 2}}
    data["dlq"] = {"path": str(tmp_path / "dlq.jsonl")}
    data["metrics"] = {"enabled": False}

    worker = Worker(config_from_dict(data), load_handler_class(operator_part.handler)())
    assert asyncio.run(worker.run()) == 0
    assert worker.stats.messages == count and worker.stats.failed == 0

    summaries = consume_all(kafka_bootstrap, data["sinks"]["kafka"]["summaries"]["topic"], expected=count)
    assert len(summaries) == count  # one summary per request, the unparseable line included
    assert consume_all(kafka_bootstrap, data["sinks"]["kafka"]["matches"]["topic"])  # per-task rows
