"""Two `knarr run` processes sharing one debug.db_dir, as the pods of a Pipeline with spec.debugVolume do.

Each worker writes only files named after itself, even when one's name starts with the other's
(rotation and retention included), and either one's fleet view lists both.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
import urllib.request
from pathlib import Path

import pytest

from knarr.debug.files import file_prefix
from tests.services.kafka import committed_offsets, create_topic, end_offsets, produce_json, unique_name
from tests.worker.procs import WorkerFleet, WorkerProcess, WorkerSpec, caught_up, free_port, wait_until

pytestmark = pytest.mark.kafka


def recorder_spec(kafka_bootstrap: str, topic: str, out: str, db_dir: Path) -> tuple[WorkerSpec, dict[str, int]]:
    """A worker spec with the recorder on in ``db_dir``, rotating every ~0.3 s and keeping few events;
    each worker's debug port is looked up by its config file's name (ports[name])."""
    spec = WorkerSpec(brokers=kafka_bootstrap, topic=topic, group=unique_name("g"), output_topic=out, log_level="INFO")
    base = spec.config
    ports: dict[str, int] = {}

    def config(port: int) -> dict:
        debug_port = ports.setdefault(str(port), free_port())
        return {**base(port), "debug": {
            "enabled": True, "port": debug_port, "db_dir": str(db_dir), "flush_interval_seconds": 0.2,
            "rotation_interval_minutes": 0.005, "retention_max_events": 400, "state_sync_interval_seconds": 0.5,
            "output_min_duration_ms": 0, "ws_min_duration_ms": 0}}

    spec.config = config  # type: ignore[method-assign]
    return spec, ports


def fleet_view(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/fleet", timeout=10) as response:
        return json.loads(response.read())


def owner(path: Path) -> str | None:
    """The worker named in a recorder file's worker_config row (None if it went meanwhile, or has no row yet)."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            row = conn.execute("SELECT worker FROM worker_config").fetchone()
    except sqlite3.Error:
        return None  # retention deleted it between the listing and the read
    return row[0] if row else None  # a file just rotated in: its tables are made, its row comes next


def files(db_dir: Path) -> list[Path]:
    return [p for p in db_dir.glob("knarr-recorder-*.db") if not p.is_symlink()]


def whose(name: str, workers: list[str]) -> str:
    """The worker a file name belongs to: the longest worker name whose prefix is followed by a timestamp only."""
    matches = [w for w in workers if name.startswith(file_prefix(w)) and name[len(file_prefix(w)):-3].isalnum()]
    assert len(matches) == 1, f"{name} belongs to {matches}"
    return matches[0]


def test_two_worker_processes_in_one_db_dir_each_write_and_retain_only_their_own_files(kafka_bootstrap, tmp_path):
    topic, out = unique_name("rec-in"), unique_name("rec-out")
    create_topic(kafka_bootstrap, topic, 2)
    create_topic(kafka_bootstrap, out, 1)
    db_dir = tmp_path / "shared"
    spec, ports = recorder_spec(kafka_bootstrap, topic, out, db_dir)
    with WorkerFleet(spec, tmp_path, f"rec-{secrets.token_hex(3)}") as fleet:
        # "w" and "w-2": one name starts with the other, as pod names of one Deployment may.
        workers: list[WorkerProcess] = []
        for name in ("w", "w-2"):
            worker = WorkerProcess(name, spec, fleet.workdir, fleet.marker)
            fleet.workers.append(worker.start())
            workers.append(worker)
        names = [w.env["WORKER_ID"] for w in workers]
        debug_ports = [ports[str(w.port)] for w in workers]
        wait_until(lambda: all(w.readiness() == "consuming 1 partition(s)" for w in workers), 90,
                   "one partition each")

        seen: dict[str, str] = {}  # every file seen while the workers rotate and retain: name -> owner
        for batch in range(8):
            produce_json(kafka_bootstrap, topic, [{"request_id": f"b{batch}-{i}", "fanout": 2} for i in range(10)],
                         partition=None, key_fn=lambda r: r["request_id"])
            for path in files(db_dir):
                found = owner(path)
                if found is not None:
                    seen[path.name] = found
            time.sleep(0.4)
        ends = end_offsets(kafka_bootstrap, topic)
        wait_until(lambda: caught_up(committed_offsets(kafka_bootstrap, spec.group, topic), ends), 90,
                   "every message committed")

        fleet_names = wait_until(
            lambda: sorted(w["worker"] for w in fleet_view(debug_ports[0])["workers"]) == sorted(names) and names,
            30, "the fleet view of the first worker to list both")
        assert sorted(w["worker"] for w in fleet_view(debug_ports[1])["workers"]) == sorted(fleet_names)
        live = {name: (db_dir / f"{file_prefix(name)}live.db").resolve() for name in names}
        final = {p.name: owner(p) for p in files(db_dir)}

    assert len(seen) >= 6, f"rotation should have started several files per worker: {sorted(seen)}"
    for name, found in {**seen, **final}.items():
        assert found == whose(name, names), f"{name} was written by {found}"
    for name in names:
        assert live[name].exists() and whose(live[name].name, names) == name
        assert sum(whose(f, names) == name for f in seen) >= 2, f"{name} rotated too"
        # Retention (400 events per worker) kept this worker's newest file whatever the other one deleted.
        assert any(whose(f, names) == name for f in final), f"{name} has no file left"
