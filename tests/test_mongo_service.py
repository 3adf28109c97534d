"""The local MongoDB-wire server (hack/services/mongo.sh, FerretDB) and the tests.services.mongo helpers."""

from __future__ import annotations

import os
import subprocess

from pymongo import MongoClient

from tests.services.mongo import MONGO_SH, PrivateMongo, mongo_sh, ensure_mongo


def test_up_prints_only_the_uri_line_and_a_second_up_reuses_the_running_server(mongo_uri: str) -> None:
    proc = mongo_sh("up")
    assert proc.returncode == 0 and proc.stdout == f"KNARR_TEST_MONGO_URI={mongo_uri}\n"
    assert "reusing running server" in proc.stderr
    assert ensure_mongo() == mongo_uri


def test_pymongo_speaks_to_it_at_wire_version_21(mongo_uri: str) -> None:
    with MongoClient(mongo_uri, serverSelectionTimeoutMS=5000) as client:
        hello = client.admin.command("hello")
    assert hello["maxWireVersion"] == 21


def test_a_restarted_server_keeps_its_port_and_its_data(private_mongo: PrivateMongo) -> None:
    with MongoClient(private_mongo.uri) as client:
        client.svc_restart.kept.insert_one({"_id": "k", "v": 1})
    private_mongo.kill()
    assert private_mongo.start()  # raises if it came back on another port
    with MongoClient(private_mongo.uri) as client:
        assert client.svc_restart.kept.find_one({"_id": "k"}) == {"_id": "k", "v": 1}
        client.drop_database("svc_restart")


def test_status_of_a_stopped_server_fails_and_down_is_idempotent(tmp_path) -> None:
    env = {"KNARR_MONGO_STATE_DIR": str(tmp_path)}
    for command in ("down", "down"):
        assert subprocess.run(["bash", str(MONGO_SH), command], env={**os.environ, **env},
                              capture_output=True, text=True, timeout=60).returncode == 0
    status = subprocess.run(["bash", str(MONGO_SH), "status"], env={**os.environ, **env},
                            capture_output=True, text=True, timeout=60)
    assert (status.returncode, status.stdout, status.stderr) == (1, "", "mongo.sh: not running\n")
