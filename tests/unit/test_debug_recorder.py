"""The flight recorder's rules (thresholds, pool slots, the live feed), its queries and links, on an in-memory database."""

from __future__ import annotations

import asyncio
import datetime
import gc
import json
import math
import re
import threading

import pytest
from prometheus_client import REGISTRY

import knarr.observability.metrics  # noqa: F401  (registers the worker's metrics, which the Prometheus graphs query)
from knarr.config.loading import ConfigError, config_from_dict
from knarr.config.models import DebugConfig
from knarr.debug import queries, schema
from knarr.debug.links import links
from knarr.debug.recorder import WIDTH, FlightRecorder

SINKS = {"filesystem": {"out": {"base_path": "/tmp"}}}


def memory_recorder(**settings) -> FlightRecorder:
    return FlightRecorder(DebugConfig(enabled=True, db_dir="", **settings), "w1", consumer_group="g")


async def recorded(recorder: FlightRecorder, **filters) -> list[dict]:
    await recorder.flush()
    return (await recorder.read(queries.events, filters, 1000))["events"]


async def test_a_fast_successful_tasks_output_is_left_out_and_a_failed_tasks_kept():
    recorder = memory_recorder(output_min_duration_ms=500)
    await recorder.start()
    try:
        recorder.record("task_finished", 0, None, "fast", None, 10.0, {"exit_code": 0, "stdout": "x", "stderr": ""})
        recorder.record("task_finished", 0, None, "slow", None, 900.0, {"exit_code": 0, "stdout": "y", "stderr": ""})
        recorder.record("task_failed", 0, None, "bad", None, 1.0, {"exit_code": 3, "stdout": "", "stderr": "boom"})
        by_task = {e["task_id"]: e["data"] for e in await recorded(recorder)}
    finally:
        await recorder.stop()
    assert "stdout" not in by_task["fast"] and by_task["slow"]["stdout"] == "y" and by_task["bad"]["stderr"] == "boom"


async def test_store_output_off_keeps_no_output_at_all():
    recorder = memory_recorder(store_output=False)
    await recorder.start()
    try:
        recorder.record("task_failed", 0, None, "bad", None, 1.0, {"exit_code": 3, "stderr": "boom"})
        assert (await recorded(recorder))[0]["data"] == {"exit_code": 3}
    finally:
        await recorder.stop()


async def test_events_shorter_than_event_min_duration_are_not_stored():
    recorder = memory_recorder(event_min_duration_ms=100)
    await recorder.start()
    try:
        recorder.record("delivered", 0, 1, None, None, 5.0, {"sink": "kafka.out"})
        recorder.record("delivered", 0, 2, None, None, 150.0, {"sink": "kafka.out"})
        recorder.record("consumed", 0, 3)
        assert [e["offset"] for e in await recorded(recorder)] == [3, 2]
    finally:
        await recorder.stop()


async def test_a_busy_worker_writes_as_soon_as_enough_events_wait_not_only_every_flush_interval():
    recorder = memory_recorder(flush_interval_seconds=600, max_buffer=200)  # writes early at 100 waiting
    await recorder.start()
    try:
        for offset in range(150):
            recorder.record("consumed", 0, offset)
        for _ in range(100):
            if recorder.stored:
                break
            await asyncio.sleep(0.05)
        assert recorder.stored >= 100 and recorder.dropped == 0
    finally:
        await recorder.stop()
    assert recorder.stored == 150


async def test_every_field_of_an_event_survives_the_write_and_data_json_cannot_say_is_kept_as_text():
    recorder = memory_recorder()
    await recorder.start()
    try:
        recorder.record("delivered", 2, 7, "t-1", "t-0", 1.25, {"sink": "kafka.out", "payloads": 3, "ratio": 0.5})
        recorder.record("message_complete", 2, 8, None, None, None, {"score": float("nan"), "raw": b"\xffok"})
        recorder.record("consumed", 2, 9)
        events = sorted(await recorded(recorder), key=lambda e: e["id"])
    finally:
        await recorder.stop()
    first = {k: events[0][k] for k in ("worker", "kind", "partition", "offset", "task_id", "parent_task_id", "duration_ms")}
    assert first == {"worker": "w1", "kind": "delivered", "partition": 2, "offset": 7, "task_id": "t-1",
                     "parent_task_id": "t-0", "duration_ms": 1.25}
    assert events[0]["data"] == {"sink": "kafka.out", "payloads": 3, "ratio": 0.5}
    assert math.isnan(events[1]["data"]["score"]) and events[1]["data"]["raw"] == "\ufffdok"
    assert events[2]["data"] == {} and isinstance(events[0]["ts"], float)


@pytest.mark.parametrize("data", [
    {"exit_code": 0, "args": ["é", "x"], "pid": 12, "slot": 1},
    {"score": float("inf"), "none": None, "big": 2**70, "nested": {"k": [1, 2.5, "null"]}},
    {"raw": b"\xffok", "tags": {"a"}, 3: "int key", "when": datetime.datetime(2026, 11, 26, 1, 2, 3)},
])
def test_event_data_is_stored_as_the_json_module_would_store_it(data):
    stored, plain = schema.dumps(data), schema._encode(data)
    assert stored == plain or json.loads(stored) == json.loads(plain)


def test_event_data_no_json_can_say_is_kept_as_its_repr_and_the_event_is_recorded():
    recorder = memory_recorder()
    cyclic: list = []
    cyclic.append(cyclic)
    recorder.record("consumed", 0, 1, data={("a", 1): "a tuple key"})
    recorder.record("consumed", 0, 2, data={"loop": cyclic})
    stored = [json.loads(text) for text in list(recorder._buffer)[WIDTH - 1::WIDTH]]
    assert stored == [{"unencodable": "{('a', 1): 'a tuple key'}"}, {"unencodable": "{'loop': [[...]]}"}]


async def test_a_written_batch_is_emptied_on_the_recorders_thread_not_on_the_event_loop():
    recorder = memory_recorder()
    await recorder.start()
    emptied_on: list[int] = []
    write = recorder._write

    def watched(batch) -> None:
        write(batch)
        if not batch:
            emptied_on.append(threading.get_ident())

    recorder._write = watched
    try:
        recorder.record("consumed", 0, 1, data={"keys": ["k"]})
        await recorder.flush()
    finally:
        await recorder.stop()
    assert len(emptied_on) == 1 and emptied_on[0] != threading.get_ident()


def test_a_buffered_event_is_nothing_the_garbage_collector_walks():
    recorder = memory_recorder()
    recorder.record("task_queued", 0, 7, "t-1", None, None, {"offsets": [7], "args": ["a", "b"], "window_id": 1})
    recorder.record("task_started", 0, 7, "t-1", None, None, {"args": ["a", "b"], "attempt": 1})
    recorder.record("task_finished", 0, 7, "t-1", None, 1.5, {"exit_code": 0, "args": ["a", "b"], "stdout": "x"})
    recorder.record("committed", 0, 8)
    values = list(recorder._buffer)
    assert len(values) == 4 * WIDTH
    assert not any(gc.is_tracked(value) for value in values)  # numbers, text and None: no container
    data = [json.loads(text) for text in values[WIDTH - 1::WIDTH]]  # each event's data, already JSON
    assert data == [{"offsets": [7], "args": ["a", "b"], "window_id": 1}, {"attempt": 1, "slot": 0},
                    {"exit_code": 0, "args": ["a", "b"]}, {}]


async def test_the_live_feed_leaves_out_events_shorter_than_ws_min_duration():
    recorder = memory_recorder(ws_min_duration_ms=100)
    queue = recorder.subscribe()
    recorder.record("delivered", 0, 1, None, None, 5.0)
    recorder.record("delivered", 0, 2, None, None, 500.0)
    recorder.record("consumed", 0, 3)
    assert [queue.get_nowait()["offset"] for _ in range(queue.qsize())] == [2, 3]


def test_pool_slots_are_reused_lowest_first():
    recorder = memory_recorder()
    for task in ("a", "b", "c"):
        recorder.record("task_started", 0, None, task, data={"args": [task]})
    recorder.record("task_finished", 0, None, "a", None, 1.0, {"exit_code": 0})
    recorder.record("task_started", 0, None, "d", data={"args": ["d"]})
    assert {t: r["slot"] for t, r in recorder.running.items()} == {"b": 1, "c": 2, "d": 0}


async def test_a_trace_nests_each_replacement_under_the_task_it_replaced():
    recorder = memory_recorder()
    await recorder.start()
    try:
        recorder.record("consumed", 0, 7)
        recorder.record("task_queued", 0, 7, "t1", None, data={"offsets": [7], "args": ["a"]})
        recorder.record("task_failed", 0, None, "t1", None, 2.0, {"exit_code": 3, "attempt": 1})
        recorder.record("task_replaced", 0, None, "t1", None, data={"replacements": ["t2"]})
        recorder.record("task_queued", 0, 7, "t2", "t1", data={"offsets": [7], "args": ["b"]})
        recorder.record("task_started", 0, None, "t2", "t1", data={"slot_wait_ms": 4.0})
        recorder.record("task_finished", 0, None, "t2", "t1", 3.0, {"exit_code": 0, "attempt": 1})
        recorder.record("message_complete", 0, 7, data={"total": 2, "succeeded": 1, "failed": 0, "replaced": 1})
        recorder.record("committed", 0, 8)
        await recorder.flush()
        trace = await recorder.read(queries.trace, 0, 7, 100)
    finally:
        await recorder.stop()
    [root] = trace["tasks"]
    assert (root["task_id"], root["status"]) == ("t1", "replaced")
    [child] = root["children"]
    assert (child["task_id"], child["status"], child["slot_wait_ms"], child["args"]) == ("t2", "succeeded", 4.0, ["b"])
    assert trace["group"]["replaced"] == 1 and trace["committed"]["offset"] == 8


async def test_a_task_for_several_messages_shows_in_the_trace_of_each_though_its_events_are_filed_under_the_first():
    recorder = memory_recorder()
    await recorder.start()
    try:
        recorder.record("task_queued", 0, 5, "fan-in", None, data={"offsets": [5, 7], "args": ["a"]})
        recorder.record("task_queued", 0, 6, "other", None, data={"offsets": [6], "args": ["b"]})
        for task, offset in (("fan-in", 5), ("other", 6)):
            recorder.record("task_started", 0, offset, task, None, data={"slot_wait_ms": 1.0})
            recorder.record("task_finished", 0, offset, task, None, 2.0, {"exit_code": 0, "attempt": 1})
        await recorder.flush()
        traces = [await recorder.read(queries.trace, 0, offset, 100) for offset in (5, 7)]
    finally:
        await recorder.stop()
    for trace in traces:
        [task] = trace["tasks"]
        assert (task["task_id"], task["status"], task["offsets"], task["slot_wait_ms"]) == ("fan-in", "succeeded", [5, 7], 1.0)


async def test_queries_say_when_they_were_cut_at_the_row_limit():
    recorder = memory_recorder()
    await recorder.start()
    try:
        for offset in range(5):
            recorder.record("consumed", 0, offset)
        await recorder.flush()
        page = await recorder.read(queries.events, {}, 3)
    finally:
        await recorder.stop()
    assert [e["offset"] for e in page["events"]] == [4, 3, 2] and page["truncated"] is True


def test_prometheus_links_select_the_worker_and_cluster_by_their_labels():
    config = DebugConfig(prometheus_url="http://prom:9090/", prometheus_worker_label="pod",
                         prometheus_cluster_label="cluster", prometheus_rate_interval="1m",
                         custom_links=[{"title": "Logs", "url": "https://logs.example"}])
    out = links(config, "worker-1", "eu")
    assert out["custom"] == [{"title": "Logs", "url": "https://logs.example"}]
    first = out["prometheus"][0]
    assert first["query"] == 'sum(rate(knarr_messages_consumed_total{pod="worker-1",cluster="eu"}[1m]))'
    assert first["url"].startswith("http://prom:9090/graph?g0.expr=sum%28rate")


def test_every_prometheus_graph_queries_metrics_the_worker_exports():
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
    exported = {family.name + suffix for family in REGISTRY.collect() for suffix in suffixes.get(family.type, ("",))}
    config = DebugConfig(prometheus_url="http://prom:9090")
    for graph in links(config, "worker-1", "")["prometheus"]:
        names = set(re.findall(r"\bknarr_[a-z_]+", graph["query"]))
        assert names and names <= exported, (graph["title"], names - exported)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.5"])
def test_a_loopback_debug_ui_needs_no_token(host):
    assert config_from_dict({"sinks": SINKS, "debug": {"enabled": True, "host": host}}).debug.host == host


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "worker.example"])
def test_a_debug_ui_reachable_from_elsewhere_needs_a_token(host):
    with pytest.raises(ConfigError, match="debug.token"):
        config_from_dict({"sinks": SINKS, "debug": {"enabled": True, "host": host}})
    assert config_from_dict({"sinks": SINKS, "debug": {"enabled": True, "host": host, "token": "t"}}).debug.token == "t"


def test_the_debug_ui_is_off_by_default():
    assert config_from_dict({"sinks": SINKS}).debug.enabled is False
