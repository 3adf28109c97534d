"""The DLQ record: bounded, and always writable."""

from __future__ import annotations

import hashlib
import json

from knarr.api.payloads import DeliveryError
from knarr.sinks.dlq import envelope, record_json


class Opaque:
    def __str__(self) -> str:
        return "opaque-object"


def test_a_record_with_metadata_json_cannot_hold_is_still_written():
    error = DeliveryError(sink_name="task", sink_type="executor", error="boom", payloads=[b"{}"],
                          task={"task_id": "t1", "metadata": {"plan": Opaque()}})
    assert json.loads(record_json(envelope(error, 0)))["task"]["metadata"]["plan"] == "opaque-object"


def test_payloads_too_large_keep_their_head_with_size_and_hash_and_the_record_stays_bounded():
    big = "x" * 50_000
    error = DeliveryError(sink_name="out", sink_type="kafka", error="too large", payloads=[big, "small"],
                          offsets=[7, 8], keys=[b"k", b"\xff"])
    record = envelope(error, 3, "src", max_bytes=10_000)
    assert len(record_json(record)) <= 10_000 and record["truncated"] is True
    written = json.dumps(big)  # a payload is kept as its JSON text
    assert record["payload_sizes"] == [len(written), len(json.dumps("small"))]
    assert record["payload_sha256"][0] == hashlib.sha256(written.encode()).hexdigest()
    assert written.startswith(record["original_payloads"][0]) and record["original_payloads"][1] == '"small"'
    assert (record["partition"], record["offsets"], record["keys"]) == (3, [7, 8], ["k", "base64:/w=="])
