"""The flight recorder and its debug API on a worker running against the real broker."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from pathlib import Path

import aiohttp
import pytest

from knarr.config.loading import ConfigError
from knarr.debug.recorder import WIDTH
from knarr.engine.worker import Worker
from tests.programs.recorded import GROUPS_ENV, FanoutHandler
from tests.services.kafka import committed_offsets, end_offsets, produce_json
from tests.worker.harness import kafka_config, running, topics, wait_until

pytestmark = pytest.mark.kafka

TOKEN = "s3cret-debug-token"


def debug_section(tmp_path: Path, **overrides) -> dict:
    return {"enabled": True, "port": 0, "db_dir": str(tmp_path / "recorder"), "flush_interval_seconds": 0.2,
            "output_min_duration_ms": 0, "ws_min_duration_ms": 0, "state_sync_interval_seconds": 0.5, **overrides}


def fanout_worker(bootstrap: str, tmp_path: Path, topic: str, out: str, *, group: str | None = None,
                  debug: dict | None = None) -> Worker:
    config = kafka_config(bootstrap, topic, out_topic=out, debug=debug or debug_section(tmp_path))
    if group is not None:
        config.kafka.consumer_group = group
    return Worker(config, FanoutHandler())


def flatten(nodes: list[dict]) -> list[dict]:
    out = []
    for node in nodes:
        out.append(node)
        out += flatten(node["children"])
    return out


async def get_json(session: aiohttp.ClientSession, worker: Worker, path: str, **params) -> dict:
    url = f"http://127.0.0.1:{worker.debug_server.port}{path}"
    async with session.get(url, params=params) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def recorded_commits(session: aiohttp.ClientSession, worker: Worker, ends: dict[int, int],
                           timeout: float = 30) -> None:
    """Wait until the recorder has the commits the broker has (the worker learns of a commit a poll later)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        events = (await get_json(session, worker, "/api/events", kind="committed"))["events"]
        recorded: dict[int, int] = {}
        for event in events:
            recorded[event["partition"]] = max(recorded.get(event["partition"], 0), event["offset"])
        if recorded == ends:
            return
        assert asyncio.get_running_loop().time() < deadline, f"recorded commits {recorded}, broker {ends}"
        await asyncio.sleep(0.2)
        await worker.recorder.flush()


async def test_a_messages_trace_is_the_group_its_handler_saw(kafka_bootstrap, tmp_path, monkeypatch):
    seen_file = tmp_path / "groups.jsonl"
    monkeypatch.setenv(GROUPS_ENV, str(seen_file))
    topic, out = topics(kafka_bootstrap, partitions=2)
    jobs = [{"job": f"j{i}", "fanout": 3, "fail": [1] if i % 2 else [0, 2], "depth": 1 + i % 3} for i in range(6)]
    produced = produce_json(kafka_bootstrap, topic, jobs, key_fn=lambda j: j["job"])
    keys = {position: job["job"] for position, job in zip(produced, jobs, strict=True)}
    worker = fanout_worker(kafka_bootstrap, tmp_path, topic, out)
    async with running(worker):
        await wait_until(lambda: seen_file.exists() and len(seen_file.read_text().splitlines()) == len(jobs),
                         60, "every group to close")
        ends = end_offsets(kafka_bootstrap, topic)
        await wait_until(lambda: committed_offsets(kafka_bootstrap, worker.config.kafka.consumer_group, topic) == ends,
                         60, "the commits")
        async with aiohttp.ClientSession() as session:
            await recorded_commits(session, worker, ends)
            traces = {(p, o): await get_json(session, worker, f"/api/trace/{p}/{o}") for p, o in produced}

    for line in seen_file.read_text().splitlines():
        seen = json.loads(line)
        trace = traces[(seen["partition"], seen["offset"])]
        assert trace["consumed_at"] is not None
        [consumed] = [e for e in trace["events"] if e["kind"] == "consumed"]  # one per poll, naming each message
        at = consumed["data"]["offsets"].index(seen["offset"])
        assert consumed["data"]["keys"][at] == keys[(seen["partition"], seen["offset"])]
        assert trace["group"]["total"] == seen["total"] and trace["group"]["replaced"] == seen["replaced"]
        assert (trace["group"]["succeeded"], trace["group"]["failed"]) == (seen["succeeded"], seen["failed"])
        nodes = {n["task_id"]: n for n in flatten(trace["tasks"])}
        assert set(nodes) == {t["task_id"] for t in seen["tasks"]}
        for task in seen["tasks"]:
            node = nodes[task["task_id"]]
            assert node["args"] == task["args"] and node["parent_task_id"] == task["parent_task_id"]
            if task["parent_task_id"] is not None:  # the replacement hangs under the task it replaced
                assert task["task_id"] in [c["task_id"] for c in nodes[task["parent_task_id"]]["children"]]
                assert nodes[task["parent_task_id"]]["status"] == "replaced"
        for result in seen["results"]:
            node = nodes[result["task_id"]]
            assert (node["status"], node["exit_code"], node["stdout"]) == ("succeeded", 0, result["stdout"])
            assert node["slot_wait_ms"] is not None and node["duration_ms"] > 0
        replaced = [n for n in nodes.values() if n["status"] == "replaced"]
        assert len(replaced) == seen["replaced"]
        assert all(n["exit_code"] == 3 or n["status"] != "failed" for n in nodes.values())
        assert [d["data"]["stage"] for d in trace["deliveries"]] == ["message"]
        assert trace["committed"] is not None and trace["committed"]["offset"] > seen["offset"]
        assert trace["dead_letters"] == []


async def test_every_api_endpoint_answers_on_a_running_worker(kafka_bootstrap, tmp_path):
    topic, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, topic, [{"job": "a", "fanout": 2, "fail": [0], "sleep": 0.05}], partition=0)
    debug = debug_section(tmp_path, prometheus_url="http://prometheus:9090", prometheus_worker_label="pod",
                          custom_links=[{"title": "Runbook", "url": "https://runbooks.example/knarr"}])
    worker = fanout_worker(kafka_bootstrap, tmp_path, topic, out, debug=debug)
    async with running(worker), aiohttp.ClientSession() as session:
        await wait_until(lambda: committed_offsets(kafka_bootstrap, worker.config.kafka.consumer_group, topic) == {0: 1},
                         60, "the commit")
        await recorded_commits(session, worker, {0: 1})
        overview = await get_json(session, worker, "/api/overview")
        assert overview["worker"] == worker.worker_id and overview["pool"]["max"] == 4
        assert [p["partition"] for p in overview["partitions"]] == [0]
        assert set(overview["throughput"]) == {"messages_per_second", "tasks_per_second"}
        events = await get_json(session, worker, "/api/events", kind="task_failed,task_replaced")
        assert sorted(e["kind"] for e in events["events"]) == ["task_failed", "task_replaced"]
        limited = await get_json(session, worker, "/api/events", limit=2)
        assert len(limited["events"]) == 2 and limited["truncated"] is True
        assert (await get_json(session, worker, "/api/events", partition=0, offset=0))["events"]
        assert (await get_json(session, worker, "/api/tasks/failed"))["tasks"][0]["data"]["exit_code"] == 3
        slow = await get_json(session, worker, "/api/tasks/slow", min_ms=1)
        assert slow["tasks"] and all(t["duration_ms"] >= 1 for t in slow["tasks"])
        assert (await get_json(session, worker, "/api/dlq")) == {"dead_letters": [], "truncated": False}
        assert (await get_json(session, worker, "/api/config"))["debug"]["enabled"] is True
        links = await get_json(session, worker, "/api/links")
        assert links["custom"] == [{"title": "Runbook", "url": "https://runbooks.example/knarr"}]
        assert all(f'pod%3D%22{worker.worker_id}%22' in link["url"] for link in links["prometheus"])
        fleet = await get_json(session, worker, "/api/fleet")
        assert [w["worker"] for w in fleet["workers"]] == [worker.worker_id] and fleet["merged"]["events"] > 0
        assert (await get_json(session, worker, "/api/fleet/events", kind="consumed"))["events"][0]["offset"] == 0
        base = f"http://127.0.0.1:{worker.debug_server.port}"
        async with session.get(f"{base}/api/db") as response:
            assert response.status == 200
            download = tmp_path / "download.db"
            download.write_bytes(await response.read())
        with sqlite3.connect(download) as conn:
            kinds = {k for (k,) in conn.execute("SELECT DISTINCT kind FROM events")}
        assert {"consumed", "window_arranged", "task_queued", "task_started", "task_finished", "task_failed",
                "task_replaced", "message_complete", "window_complete", "delivered", "committed",
                "assigned"} <= kinds
        async with session.get(f"{base}/api/trace/0/x") as response:
            assert response.status == 400 and "offset" in (await response.json())["error"]
        async with session.get(f"{base}/") as response:
            assert response.status == 200 and "knarr" in await response.text()


async def test_the_websocket_pushes_events_as_they_happen(kafka_bootstrap, tmp_path):
    topic, out = topics(kafka_bootstrap)
    worker = fanout_worker(kafka_bootstrap, tmp_path, topic, out)
    async with running(worker), aiohttp.ClientSession() as session:
        async with session.ws_connect(f"http://127.0.0.1:{worker.debug_server.port}/api/ws") as ws:
            hello = await ws.receive_json(timeout=10)
            assert hello["type"] == "hello" and hello["worker"] == worker.worker_id
            await asyncio.to_thread(produce_json, kafka_bootstrap, topic, [{"job": "live", "fanout": 1}], partition=0)
            kinds = []
            while "message_complete" not in kinds:
                event = await ws.receive_json(timeout=60)
                kinds.append(event["kind"])
            assert {"consumed", "task_queued", "task_started", "task_finished"} <= set(kinds)


async def test_with_a_token_the_api_answers_only_who_carries_it(kafka_bootstrap, tmp_path):
    topic, out = topics(kafka_bootstrap)
    worker = fanout_worker(kafka_bootstrap, tmp_path, topic, out, debug=debug_section(tmp_path, token=TOKEN))
    async with running(worker), aiohttp.ClientSession() as session:
        base = f"http://127.0.0.1:{worker.debug_server.port}"
        async with session.get(f"{base}/api/overview") as response:
            assert response.status == 401 and "Bearer" in (await response.json())["error"]
        async with session.get(f"{base}/api/overview", headers={"Authorization": "Bearer wrong"}) as response:
            assert response.status == 401
        async with session.get(f"{base}/api/overview", headers={"Authorization": f"Bearer {TOKEN}"}) as response:
            assert response.status == 200
        async with session.get(f"{base}/api/config", params={"token": TOKEN}) as response:
            assert (await response.json())["debug"]["token"] == "***"
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await session.ws_connect(f"{base}/api/ws")
        async with session.ws_connect(f"{base}/api/ws", params={"token": TOKEN}) as ws:
            assert (await ws.receive_json(timeout=10))["type"] == "hello"


def test_a_debug_ui_off_loopback_without_a_token_is_a_config_error(kafka_bootstrap, tmp_path):
    with pytest.raises(ConfigError, match=r"debug\.token"):
        kafka_config(kafka_bootstrap, "t", tmp_path=tmp_path, debug={"enabled": True, "host": "0.0.0.0"})
    config = kafka_config(kafka_bootstrap, "t", tmp_path=tmp_path, debug={"enabled": True, "host": "0.0.0.0",
                                                                           "token": TOKEN})
    assert config.debug.token == TOKEN


async def test_the_fleet_merges_the_databases_of_two_workers_of_one_group(kafka_bootstrap, tmp_path):
    topic, out = topics(kafka_bootstrap, partitions=2)
    first = fanout_worker(kafka_bootstrap, tmp_path, topic, out)
    group = first.config.kafka.consumer_group
    second = fanout_worker(kafka_bootstrap, tmp_path, topic, out, group=group)
    first.worker_id, second.worker_id = "worker-a", "worker-b"
    async with running(first), running(second):
        await wait_until(lambda: len(first.processors) == 1 and len(second.processors) == 1, 60,
                         "one partition each")
        produced = produce_json(kafka_bootstrap, topic, [{"job": f"m{i}", "fanout": 1} for i in range(2)],
                                partition=None, key_fn=lambda j: None)
        produced += produce_json(kafka_bootstrap, topic, [{"job": "p0"}], partition=0)
        produced += produce_json(kafka_bootstrap, topic, [{"job": "p1"}], partition=1)
        ends = end_offsets(kafka_bootstrap, topic)
        await wait_until(lambda: committed_offsets(kafka_bootstrap, group, topic) == ends, 60, "the commits")
        await asyncio.gather(first.recorder.flush(), second.recorder.flush())
        async with aiohttp.ClientSession() as session:
            fleet = await get_json(session, first, "/api/fleet")
            merged = await get_json(session, first, "/api/fleet/events", kind="message_complete")
    assert sorted(w["worker"] for w in fleet["workers"]) == ["worker-a", "worker-b"]
    assert all(w["debug_url"].startswith("http://127.0.0.1:") for w in fleet["workers"])
    peer = next(w for w in fleet["workers"] if w["worker"] == "worker-b")  # its state: a worker_state snapshot
    assert peer["state"]["worker"] == "worker-b" and [p["partition"] for p in peer["state"]["partitions"]] in ([0], [1])
    by_worker = {(e["partition"], e["offset"]): e["worker"] for e in merged["events"]}
    assert set(by_worker) == set(produced)
    assert set(by_worker.values()) == {"worker-a", "worker-b"}


async def test_a_full_buffer_drops_its_oldest_events_and_counts_them_not_the_work(kafka_bootstrap, tmp_path):
    from knarr.observability import metrics

    topic, out = topics(kafka_bootstrap)
    debug = debug_section(tmp_path, max_buffer=100)
    worker = fanout_worker(kafka_bootstrap, tmp_path, topic, out, debug=debug)
    dropped_before = metrics.recorder_dropped._value.get()
    disk_answers = threading.Event()
    async with running(worker):
        await wait_until(lambda: worker.recorder is not None and worker.recorder._conn is not None, 30,
                         "the recorder to open its database")
        recorder = worker.recorder
        recorder._thread.submit(disk_answers.wait)  # the disk stops answering: no write can finish
        produced = produce_json(kafka_bootstrap, topic, [{"job": f"b{i}", "fanout": 1} for i in range(40)], partition=0)
        await wait_until(lambda: committed_offsets(kafka_bootstrap, worker.config.kafka.consumer_group, topic)
                         == {0: len(produced)}, 60, "every message to be processed and committed")
        buffered = list(recorder._buffer)[::WIDTH]  # the ids (each event's first value)
        assert 0 < len(buffered) <= 100 and recorder.dropped > 0
        assert len(recorder._buffer) == len(buffered) * WIDTH  # whole events only
        assert metrics.recorder_dropped._value.get() - dropped_before == recorder.dropped
        assert buffered == list(range(recorder._next_id - len(buffered), recorder._next_id))  # the newest
        disk_answers.set()
    assert recorder.stored + recorder.dropped == recorder._next_id - 1  # every event either written or counted


async def test_rotation_starts_new_files_and_retention_keeps_the_newest_events(kafka_bootstrap, tmp_path):
    topic, out = topics(kafka_bootstrap)
    debug = debug_section(tmp_path, rotation_interval_minutes=0.005, retention_max_events=60)  # a file per 0.3 s
    worker = fanout_worker(kafka_bootstrap, tmp_path, topic, out, debug=debug)
    db_dir = Path(debug["db_dir"])
    seen_files: set[str] = set()
    async with running(worker):
        for batch in range(6):
            await asyncio.to_thread(produce_json, kafka_bootstrap, topic,
                                    [{"job": f"r{batch}-{i}", "fanout": 2} for i in range(5)], partition=0)
            seen_files |= {p.name for p in db_dir.glob("knarr-recorder-*.db") if not p.is_symlink()}
            await asyncio.sleep(0.4)
        await wait_until(lambda: committed_offsets(kafka_bootstrap, worker.config.kafka.consumer_group, topic)
                         == {0: 30}, 60, "every message to be committed")
        last_id = worker.recorder._next_id - 1
    files = [p for p in db_dir.glob("knarr-recorder-*.db")]
    assert len(seen_files) >= 3, "rotation should have started several files"
    assert not any(p.is_symlink() for p in files), "the live link goes with the worker"
    ids = []
    for path in files:
        with sqlite3.connect(path) as conn:
            ids += [i for (i,) in conn.execute("SELECT id FROM events")]
            assert conn.execute("SELECT worker FROM worker_config").fetchone()[0] == worker.worker_id
    assert len(ids) <= 60 and max(ids) == last_id
    assert sorted(ids) == list(range(last_id - len(ids) + 1, last_id + 1))  # the newest, none missing


async def test_retention_by_age_deletes_old_files(kafka_bootstrap, tmp_path):
    topic, out = topics(kafka_bootstrap)
    debug = debug_section(tmp_path, rotation_interval_minutes=0.005, retention_hours=0.0003)  # ~1 s
    worker = fanout_worker(kafka_bootstrap, tmp_path, topic, out, debug=debug)
    db_dir = Path(debug["db_dir"])
    async with running(worker):
        first = await wait_until(lambda: [p for p in db_dir.glob("knarr-recorder-*.db") if not p.is_symlink()],
                                 10, "the first file")
        await wait_until(lambda: not first[0].exists(), 30, "the first file to age out")
        assert Path(worker.recorder.db_path).exists()


async def test_without_a_db_dir_events_live_in_memory_and_still_download(kafka_bootstrap, tmp_path):
    topic, out = topics(kafka_bootstrap)
    produce_json(kafka_bootstrap, topic, [{"job": "mem", "fanout": 2}], partition=0)
    worker = fanout_worker(kafka_bootstrap, tmp_path, topic, out, debug=debug_section(tmp_path, db_dir=""))
    async with running(worker), aiohttp.ClientSession() as session:
        await wait_until(lambda: committed_offsets(kafka_bootstrap, worker.config.kafka.consumer_group, topic) == {0: 1},
                         60, "the commit")
        trace = await get_json(session, worker, "/api/trace/0/0")
        assert trace["group"]["total"] == 2 and len(trace["tasks"]) == 2
        fleet = await get_json(session, worker, "/api/fleet")
        assert [w["worker"] for w in fleet["workers"]] == [worker.worker_id]
        async with session.get(f"http://127.0.0.1:{worker.debug_server.port}/api/db") as response:
            download = tmp_path / "memory.db"
            download.write_bytes(await response.read())
    assert not (tmp_path / "recorder").exists()
    with sqlite3.connect(download) as conn:
        assert conn.execute("SELECT count(*) FROM events WHERE kind = 'task_finished'").fetchone()[0] == 2


async def test_the_probe_endpoint_runs_the_probe_or_names_the_missing_module(kafka_bootstrap, tmp_path):
    import importlib.util

    topic, out = topics(kafka_bootstrap)
    worker = fanout_worker(kafka_bootstrap, tmp_path, topic, out)
    async with running(worker), aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{worker.debug_server.port}/api/probe"
        async with session.post(url, data="not json") as response:
            assert response.status == 400 and "JSON" in (await response.json())["error"]
        message = {"key": "k", "value": json.dumps({"job": "probe", "fanout": 2})}
        async with session.post(url, json={"message": message}) as response:
            body = await response.json()
            if importlib.util.find_spec("knarr.debug.probe") is None:
                assert response.status == 501 and "knarr.debug.probe" in body["error"]
            else:
                assert response.status == 200 and body["group"]["total"] == 2


async def test_an_unwritable_db_dir_stops_startup_naming_the_key(kafka_bootstrap, tmp_path):
    from knarr.errors import UnavailableError

    topic, out = topics(kafka_bootstrap)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    worker = fanout_worker(kafka_bootstrap, tmp_path, topic, out, debug=debug_section(tmp_path, db_dir=str(blocker)))
    with pytest.raises(UnavailableError, match=r"debug\.db_dir .*a-file"):
        await asyncio.wait_for(worker.run(), 60)
